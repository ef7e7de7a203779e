"""The stage's steps on this machine: a loopback run, and the tests' stand-in fleets.

Every "host" is this machine: a pair's server and client are two local processes (an
HCA looped back to another, or a switch's loopback cable), and a group is one process
over this machine's GPUs. ``env_for`` adds environment per host (or per group, given
its hosts): the tests name each stand-in's host and group with it.

Each step runs in its own session; killing it kills that whole process group, and its
output is read as it comes, each stream held to :data:`validator.limits.TOOL_OUTPUT_BYTES`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from validator.limits import TOOL_OUTPUT_BYTES
from validator.remote.cross_node_runner import HostPlan, LaunchError, StepRunner
from validator.safe_text import one_line

EnvFor = Callable[[Sequence[str]], Mapping[str, str]]
KILL_GRACE_S = 1.0


def _drain(stream: IO[bytes], into: bytearray) -> None:
    """Read a stream to its end, keeping its first TOOL_OUTPUT_BYTES (the rest is read, dropped)."""
    while True:
        chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
        if not chunk:
            return
        room = TOOL_OUTPUT_BYTES - len(into)
        if room > 0:
            into += chunk[:room]


class LocalStep:
    """One program started on this machine in its own session."""

    def __init__(
        self, argv: Sequence[str], env: Mapping[str, str], base: Mapping[str, str] | None = None
    ) -> None:
        """Start ``argv`` with ``env`` over ``base`` (this process's environment by default)."""
        try:
            self._process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**(os.environ if base is None else base), **env},
                start_new_session=True,
            )
        except OSError as exc:
            raise LaunchError(f"cannot start {one_line(argv[0])}: {exc.strerror or exc}") from None
        self._out = bytearray()
        self._err = bytearray()
        assert self._process.stdout is not None  # noqa: S101 - asked for above
        assert self._process.stderr is not None  # noqa: S101
        self._readers = [
            threading.Thread(target=_drain, args=(self._process.stdout, self._out), daemon=True),
            threading.Thread(target=_drain, args=(self._process.stderr, self._err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @property
    def pid(self) -> int:
        """The step's process id (its process group's too)."""
        return self._process.pid

    def wait(self, timeout_s: float) -> int | None:
        """Its exit status once it ended and its output is read; None while it runs."""
        try:
            status = self._process.wait(timeout=max(timeout_s, 0.0))
        except subprocess.TimeoutExpired:
            return None
        for reader in self._readers:
            reader.join(5.0)
        return status

    def output(self) -> tuple[str, str]:
        """Its stdout and stderr so far (bounded), decoded."""
        return self._out.decode("utf-8", "replace"), self._err.decode("utf-8", "replace")

    def kill(self) -> None:
        """SIGTERM to its process group, SIGKILL after a grace; then reaped."""
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)  # what it left in its group
        for reader in self._readers:
            reader.join(5.0)


class LocalLauncher:
    """Starts every step on this machine (see the module docstring)."""

    def __init__(self, env_for: EnvFor | None = None) -> None:
        self.env_for = env_for
        self.started: list[LocalStep] = []  # every step, for the caller's checks
        self._lock = threading.Lock()

    def _env(self, hosts: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
        extra = dict(self.env_for(hosts)) if self.env_for is not None else {}
        return {**extra, **env}

    def _started(self, step: LocalStep) -> LocalStep:
        with self._lock:
            self.started.append(step)
        return step

    def start(self, host: HostPlan, argv: Sequence[str], env: Mapping[str, str]) -> LocalStep:
        """Start ``argv`` here as ``host``."""
        return self._started(LocalStep(argv, self._env((host.name,), env)))

    def start_group(
        self, hosts: Sequence[HostPlan], argv: Sequence[str], env: Mapping[str, str], ranks: int
    ) -> LocalStep:
        """One process over this machine's GPUs stands for the group."""
        del ranks
        return self._started(LocalStep(argv, self._env([host.name for host in hosts], env)))

    def group_unavailable(self) -> str | None:
        """Groups always run here (as one process)."""
        return None

    def listening(self, host: HostPlan, port: int) -> bool | None:
        """Whether ``ss`` shows a listener on ``port`` here; None without ``ss``."""
        del host
        ss = shutil.which("ss")
        if ss is None:
            return None
        try:
            done = subprocess.run(
                [ss, "-Hltn", f"sport = :{port}"], capture_output=True, timeout=5, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return bool(done.stdout.strip()) if done.returncode == 0 else None


def local_runner(env_for: EnvFor | None = None) -> StepRunner:
    """A runner whose every host is this machine."""
    return StepRunner(LocalLauncher(env_for))


__all__ = ["LocalLauncher", "LocalStep", "local_runner"]
