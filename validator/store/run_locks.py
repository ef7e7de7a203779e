"""Run ownership: the lock file a run's process holds, so a reader tells live from dead.

A run is created ``running`` and only :meth:`Store.finish_run
<validator.store.history_store.Store.finish_run>` closes it. Its process holds an OS
lock (``flock``) on ``<db>.run-<id>.lock`` for the run's life, so a reader tells a live
run (``incomplete``) from one whose process died (killed, power lost): that one reads
``interrupted``, and is marked so by the next writer.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
from pathlib import Path

from validator.error_tree import UnsafePathError
from validator.files import Folder, process_alive, remove_file


def run_lock_path(db_path: Path, run_id: int) -> Path:
    """The file whose lock the process of run ``run_id`` holds: ``<db>.run-<id>.lock``."""
    return db_path.with_name(f"{db_path.name}.run-{run_id:d}.lock")


# The locks this process holds, by lock file: held until the run is finished or
# the process ends (a closed Store does not end a run its process may still finish).
_HELD: dict[str, int] = {}
_HELD_GUARD = threading.Lock()


def _hold_lock(path: Path, owner: dict[str, object]) -> bool:
    """Create ``path`` and hold an exclusive flock on it; False when that cannot be done.

    The run id is predictable, so whoever can write to the database's folder may have
    put something there first: never through a link, and a file we did not make is
    locked as it is, never truncated or written.

    Raises:
        UnsafePathError: a link, FIFO or folder is at ``path``.
    """
    try:
        # The database's folder is the operator's (it may link to shared storage); the
        # lock file in it is ours, never reached through a link.
        with Folder.given(path.parent) as folder:
            fd, made = folder.hold(path.name)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    if made:  # for people reading the folder; the lock is the fact
        with contextlib.suppress(OSError):
            os.write(fd, (json.dumps(owner, sort_keys=True) + "\n").encode())
    with _HELD_GUARD:
        _HELD[str(path)] = fd
    return True


def _release_lock(path: Path) -> None:
    with _HELD_GUARD:
        fd = _HELD.pop(str(path), None)
    if fd is None:
        return
    # Removed before it is let go: a reader never finds it unheld while the run is ours.
    with contextlib.suppress(OSError, UnsafePathError):
        remove_file(path)
    os.close(fd)


def _lock_held(path: Path) -> bool | None:
    """Whether some live process holds ``path``'s lock; None when there is no such file."""
    try:
        # Never through a link, and never waiting on a planted FIFO.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:
        return True  # cannot tell: never call a run dead on a guess
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _process_alive(pid: int | None, hostname: str | None = None) -> bool:
    """Whether process ``pid`` (of ``hostname``, when known) may still run."""
    if pid is None or (hostname is not None and hostname != socket.gethostname()):
        return True  # cannot tell from here
    return process_alive(pid)
