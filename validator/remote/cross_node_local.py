"""The stage's steps on this machine: a loopback run, and the tests' stand-in fleets.

Every "host" is this machine: a pair's server and client are two local processes (an
HCA looped back to another, or a switch's loopback cable), and a group is one process
over this machine's GPUs. ``env_for`` adds environment per host (or per group, given
its hosts): the tests name each stand-in's host and group with it.

Each step runs in its own session; killing it kills that whole process group, and its
output is read as it comes, each stream held to :data:`validator.limits.TOOL_OUTPUT_BYTES`.
The group is signalled only while its leader runs or is an unreaped zombie (its id still
held, so no other process can have it), and what the leader left in its group is killed
before the leader is reaped, when it ended by itself too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
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
        self._reaped = False  # the leader's id may be reused: never signal its group again
        self._unreaped = False  # the leader ended and is a zombie: its id is still held
        self._reap_lock = threading.RLock()
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

    def _ended(self, timeout_s: float | None) -> bool:
        """Whether the leader has ended, waiting up to ``timeout_s`` (None: until it has).

        It is left unreaped (``WNOWAIT``): a zombie keeps its id, so its group's id cannot
        be given to another process while the group is signalled.
        """
        if self._reaped or self._unreaped:
            return True
        end = None if timeout_s is None else time.monotonic() + max(timeout_s, 0.0)
        pause = 0.002
        while True:
            try:
                flags = os.WEXITED | os.WNOWAIT | (0 if end is None else os.WNOHANG)
                found = os.waitid(os.P_PID, self._process.pid, flags)
            except ChildProcessError:  # reaped by someone else: its group is not ours now
                self._reaped = True
                return True
            except InterruptedError:
                continue
            if found is not None:
                self._unreaped = True
                return True
            left = 0.0 if end is None else end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)

    def _signal(self, sig: int) -> None:
        """Signal the step's group, only while its leader's id is still held."""
        with self._reap_lock:  # not between another thread's check and its reap
            if not self._reaped:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self._process.pid, sig)

    def _reap(self) -> int:
        """End what the leader left in its group, then reap the leader and read the rest."""
        with self._reap_lock:
            if not self._reaped:
                self._signal(signal.SIGKILL)  # children that outlived the leader
                self._reaped = True
                self._process.wait()
        for reader in self._readers:
            reader.join(5.0)
        return self._process.returncode if self._process.returncode is not None else -1

    def wait(self, timeout_s: float) -> int | None:
        """Its exit status once it ended and its output is read; None while it runs.

        What it left running in its group is ended with it.
        """
        if not self._ended(timeout_s):
            return None
        return self._reap()

    def output(self) -> tuple[str, str]:
        """Its stdout and stderr so far (bounded), decoded."""
        return self._out.decode("utf-8", "replace"), self._err.decode("utf-8", "replace")

    def kill(self) -> None:
        """SIGTERM to its process group, SIGKILL after a grace; then reaped."""
        if not self._ended(0):
            self._signal(signal.SIGTERM)
            if not self._ended(KILL_GRACE_S):
                self._signal(signal.SIGKILL)
                self._ended(None)
        self._reap()


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
