"""The host the agent runs on, behind one small interface.

Everything the collector learns outside NVML (files, commands, the clock) comes
through a :class:`System`, so the same collector runs on a live host, on a
simulated scenario, on a captured support bundle and in tests.

A recorded System (a bundle: :class:`validator.node.capture.CaptureSystem`) may
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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


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
        """Run a command (argument list, no shell) and capture its output."""
        env = dict(os.environ, LC_ALL="C")
        try:
            done = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout_s,
                check=False,
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            return CommandResult(127, "", f"{argv[0]}: command not found")
        except PermissionError as exc:
            return CommandResult(126, "", str(exc))
        except subprocess.TimeoutExpired:
            return CommandResult(124, "", f"{argv[0]}: timed out after {timeout_s:g} s")
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def now(self) -> datetime.datetime:
        """The current time, timezone-aware UTC."""
        return datetime.datetime.now(datetime.timezone.utc)
