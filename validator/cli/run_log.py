"""``--log-file`` and ``--verbose``: timestamped lines of what a run did.

Each line is ``2026-12-06T17:43:38.123Z gpuready[PID] LEVEL message``, in UTC. Every
message is escaped to one line (validator.safe_text.one_line) whatever it quotes, so a
host's name cannot forge a line or drive a terminal. The file is appended to, made
0600 when new, and never opened through a link (``O_NOFOLLOW``) or when it is not a
regular file: as root, a link planted at the name would otherwise be written through.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import time
from typing import IO

from validator.error_tree import BadInputError
from validator.safe_text import one_line

LOGGER = "gpuready"
log = logging.getLogger(LOGGER)
# Between runs (tests run many in one process) no line may reach logging's last-resort
# handler, which would print an error a second time on stderr.
log.addHandler(logging.NullHandler())
_ACTIVE: list[logging.Handler] = []  # what start added, for stop_all at the run's end
# A record's attribute: its line is already printed on stderr (an error), so -v's
# stderr handler does not print it a second time; the file still gets it.
SAID = "gpuready_said"


def _not_said(record: logging.LogRecord) -> bool:
    return not getattr(record, SAID, False)


class OneLineFormatter(logging.Formatter):
    """ISO-8601 UTC time, the process, the level, and the message escaped to one line."""

    def format(self, record: logging.LogRecord) -> str:
        """One line for ``record``."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        millis = int(record.msecs)
        message = one_line(record.getMessage())
        return f"{stamp}.{millis:03d}Z gpuready[{record.process}] {record.levelname} {message}"


def open_log(path: str) -> IO[str]:
    """``path`` opened for appending: created 0600, never through a link, regular files only.

    Raises:
        BadInputError: it cannot be opened, is a link, or is no regular file (one line, the fix).
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_NONBLOCK  # a FIFO at the name must not hang the run waiting for a reader
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        link = " (it is a symbolic link, which is never followed)" if os.path.islink(path) else ""
        raise BadInputError(
            f"--log-file {one_line(path)} cannot be opened{link}: {exc.strerror or exc}; "
            "give a regular file you can write"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInputError(
            f"--log-file {one_line(path)} is not a regular file: give a file's path"
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace", buffering=1)


def start(log_file: str | None, verbose: bool) -> list[logging.Handler]:
    """Send gpuready's log lines to ``log_file`` and, with ``verbose``, to stderr.

    Returns the handlers added, for :func:`stop`; none when neither is asked for.

    Raises:
        BadInputError: the log file cannot be opened safely.
    """
    handlers: list[logging.Handler] = []
    level = logging.DEBUG if verbose else logging.INFO
    if log_file is not None:
        handlers.append(logging.StreamHandler(open_log(log_file)))
    if verbose:
        to_stderr = logging.StreamHandler(sys.stderr)
        to_stderr.addFilter(_not_said)
        handlers.append(to_stderr)
    for handler in handlers:
        handler.setFormatter(OneLineFormatter())
        handler.setLevel(level)
        log.addHandler(handler)
    if handlers:
        log.setLevel(level)
        log.propagate = False
    _ACTIVE.extend(handlers)
    return handlers


def stop_all() -> None:
    """Every handler :func:`start` added, taken off and closed (the run is over)."""
    stop(list(_ACTIVE))
    _ACTIVE.clear()


def stop(handlers: list[logging.Handler]) -> None:
    """Take ``handlers`` off again and close the log file they wrote."""
    for handler in handlers:
        log.removeHandler(handler)
        stream = getattr(handler, "stream", None)
        if stream is not None and stream is not sys.stderr:
            stream.close()
        handler.close()
