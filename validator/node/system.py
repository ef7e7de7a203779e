"""The host the agent runs on, behind one small interface.

Everything the collector learns outside NVML (files, commands, the clock) comes
through a :class:`System`, so the same collector runs on a live host, on a
simulated scenario, on a captured support bundle and in tests.

A recorded System (a bundle: :class:`validator.node.capture.capture_replay.CaptureSystem`) may
hold no record of what it is asked; it then raises :class:`NotRecordedError`,
which the collector turns into a "not measured" fact. A live or simulated host
never raises it: there a missing file is None and a missing command exits 127.
"""

from __future__ import annotations

import datetime
import glob as _glob
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Protocol

from validator.limits import KERNEL_LOG_TAIL_BYTES, size_text
from validator.node import stop_request

# What a live command's output may hold: as much as a kernel log is read of, the most
# any command's output is parsed for (validator.limits), its newest bytes kept.
LIVE_OUTPUT_BYTES = KERNEL_LOG_TAIL_BYTES
LIVE_STDERR_BYTES = 64 * 1024  # its last lines are all a message shows
_DRAIN_AFTER_EXIT_S = 2.0
# A command allowed longer than this is stopped by a stop request, checked this often.
STOPPABLE_AFTER_S = 60.0
STOP_POLL_S = 0.25
# What a command the System could not find says (rc 127), and nothing that ran says.
NOT_FOUND_SUFFIX = ": command not found"


class NotRecordedError(Exception):
    """A recorded System holds no record of this file, command or search.

    The message says which record is missing ("dmesg.txt not in the capture"):
    the fact is "not measured", never "not there".
    """


@dataclass(frozen=True)
class CommandResult:
    """What a command did. ``rc`` 127: not found; 124: timed out.

    ``recorded_in`` names the bundle file the output was read from (messages
    about the output name it); empty when the command ran. ``partial`` says why
    only part of the output is here ("only its last 64 MiB were read: ..."), empty
    when it is whole.
    """

    rc: int
    stdout: str
    stderr: str = ""
    recorded_in: str = ""
    partial: str = ""

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.rc == 0


class System(Protocol):
    """Read-only view of a host."""

    def hostname(self) -> str:
        """The host's name."""
        ...

    def read_text(self, path: str) -> str | None:
        """A file's text, or None when it does not exist.

        Raises:
            PermissionError: when it exists but cannot be read.
            NotRecordedError: (a recorded System) the record lacks this file.
        """
        ...

    def glob(self, pattern: str) -> list[str]:
        """Paths matching a shell pattern, sorted.

        Raises:
            NotRecordedError: (a recorded System) the record lacks this place.
        """
        ...

    def which(self, name: str) -> str | None:
        """The full path of a command on PATH, or None.

        Raises:
            NotRecordedError: (a recorded System) the record lacks this command.
        """
        ...

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        """Run a command (argument list, no shell) and capture its output.

        Raises:
            NotRecordedError: (a recorded System) the record lacks this command's output.
        """
        ...

    def now(self) -> datetime.datetime:
        """The current time, timezone-aware UTC."""
        ...


class LiveSystem:
    """The machine this process runs on."""

    def hostname(self) -> str:
        """The host's name."""
        return socket.gethostname()

    def read_text(self, path: str) -> str | None:
        """A file's text, or None when it does not exist."""
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except IsADirectoryError:
            return None

    def glob(self, pattern: str) -> list[str]:
        """Paths matching a shell pattern, sorted."""
        return sorted(_glob.glob(pattern))

    def which(self, name: str) -> str | None:
        """The full path of a command on PATH, or None."""
        return shutil.which(name)

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        """Run a command (argument list, no shell) and capture its output, bounded.

        Only the last :data:`LIVE_OUTPUT_BYTES` of its stdout (the newest lines of a log)
        and :data:`LIVE_STDERR_BYTES` of its stderr are ever held, however much it
        prints; ``partial`` then says how much it printed.
        """
        env = dict(os.environ, LC_ALL="C")
        try:
            child = subprocess.Popen(
                list(argv),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except FileNotFoundError:
            return CommandResult(127, "", f"{argv[0]}{NOT_FOUND_SUFFIX}")
        except PermissionError as exc:
            return CommandResult(126, "", str(exc))
        out = _TailKept(child.stdout, LIVE_OUTPUT_BYTES)
        err = _TailKept(child.stderr, LIVE_STDERR_BYTES)
        try:
            stopped = _wait(child, timeout_s)
        except BaseException:
            # Ctrl-C or a stop signal on the controller's own thread: the command (dcgmi
            # holding the GPUs) must not run on, orphaned.
            child.kill()
            child.wait()
            raise
        if stopped is not None:
            child.kill()
            child.wait()
            _drained(out, err)
            return CommandResult(124, "", f"{argv[0]}: {stopped}")
        _drained(out, err)
        partial = ""
        if out.seen > LIVE_OUTPUT_BYTES:
            partial = (
                f"only its last {size_text(LIVE_OUTPUT_BYTES)} were read: it printed "
                f"{size_text(out.seen)}"
            )
        return CommandResult(child.returncode, out.text(), err.text(), partial=partial)

    def now(self) -> datetime.datetime:
        """The current time, timezone-aware UTC."""
        return datetime.datetime.now(datetime.timezone.utc)


def _wait(child: subprocess.Popen[bytes], timeout_s: float) -> str | None:
    """Wait for ``child``; why it must be stopped (its timeout, a stop request), else None.

    A command allowed longer than :data:`STOPPABLE_AFTER_S` (DCGM's diagnostic) is
    stopped by a stop request too (validator.node.stop_request: the agent's SIGTERM);
    a short one (nvidia-smi) finishes, so that the facts printed are whole.
    """
    until = time.monotonic() + timeout_s
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return f"timed out after {timeout_s:g} s"
        if timeout_s > STOPPABLE_AFTER_S and stop_request.requested():
            return f"stopped: {stop_request.reason().removeprefix('not started: ')}"
        try:
            child.wait(timeout=min(left, STOP_POLL_S))
        except subprocess.TimeoutExpired:
            continue
        return None


def _drained(*pipes: _TailKept) -> None:
    """Wait for the pipes' ends, a couple of seconds at most once the command has exited.

    A child the command left running may hold them open for good.
    """
    until = time.monotonic() + _DRAIN_AFTER_EXIT_S
    for pipe in pipes:
        pipe.join(until)


class _TailKept:
    """A pipe drained on its own thread, only its last ``keep`` bytes held."""

    def __init__(self, pipe: IO[bytes] | None, keep: int) -> None:
        self._keep = keep
        self._held = bytearray()
        self.seen = 0
        self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self._thread.start()

    def _drain(self, pipe: IO[bytes] | None) -> None:
        if pipe is None:
            return
        with pipe:
            while True:
                chunk = os.read(pipe.fileno(), 1 << 16)
                if not chunk:
                    return
                self.seen += len(chunk)
                self._held += chunk
                if len(self._held) > 2 * self._keep:
                    del self._held[: -self._keep]

    def join(self, until: float) -> None:
        """Wait for the pipe's end until ``until`` (``time.monotonic()``) at most."""
        self._thread.join(timeout=max(0.0, until - time.monotonic()))

    def text(self) -> str:
        """The kept bytes as text, from the first whole line when older ones were dropped."""
        held = bytes(self._held[-self._keep :])
        if self.seen > self._keep:
            cut = held.find(b"\n")
            held = held[cut + 1 :] if cut >= 0 else b""
        # As text mode reads it: \r\n and a lone \r are line ends.
        return held.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
