"""Writing a file so that it is either whole or absent: nothing measured is half-written.

A file is written to a temporary name beside it (``.<name>.<host>-<pid>-<random>.tmp``),
fsynced and renamed into place. A failed write removes its temporary file. A
process killed in the middle (SIGKILL, power loss) cannot clean up, so the
temporary name says which process on which host wrote it, and
:func:`remove_stale_temporaries` (run by the next writer of that directory)
removes those whose writer is gone.

Standard library only, Python 3.9: the node agent ships with this module.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import socket
import time
from pathlib import Path

TEMPORARY_SUFFIX = ".tmp"
BACKUP_SUFFIX = ".bak"

# A temporary file of a writer on another host (or named before writers named
# themselves) is taken for stale only when it is this old: no write takes an hour.
STALE_AFTER_S = 3600.0

_OURS = re.compile(r"^\..+\.(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)-[0-9a-f]{8}\.(?:tmp|bak)$")
# Ours, or what tempfile named before writers named themselves (".<target>.<8 chars>.tmp"):
# never any hidden .tmp or .bak of the user's in a directory we were pointed at.
_ANY_TEMPORARY = re.compile(
    r"^\..+\.(?:[0-9a-f]{8}-[0-9]+-[0-9a-f]{8}\.(?:tmp|bak)|[a-z0-9_]{8}\.tmp)$"
)


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make renames in ``directory`` durable (some filesystems cannot open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def host_tag() -> str:
    """Eight hex digits naming this host in temporary file names."""
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


def temporary_path(target: str | os.PathLike[str], suffix: str = TEMPORARY_SUFFIX) -> Path:
    """A fresh hidden name beside ``target`` that says which host and process made it."""
    path = Path(target)
    stamp = f"{host_tag()}-{os.getpid()}-{secrets.token_hex(4)}"
    return path.with_name(f".{path.name}.{stamp}{suffix}")


def create_temporary(target: str | os.PathLike[str], mode: int = 0o600) -> tuple[int, Path]:
    """Create (exclusively) and open a temporary file beside ``target``.

    Returns:
        The open descriptor and the file's path.

    Raises:
        OSError: the directory cannot be written.
    """
    for _ in range(8):
        temporary = temporary_path(target)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            return os.open(temporary, flags, mode), temporary
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(target))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # pragma: no cover - a regular file never writes nothing
            raise OSError(errno.EIO, "the write made no progress")
        view = view[written:]


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        # A directory gone read-only keeps it; the next writer's clean-up tries again.
        pass


def write_temporary(target: str | os.PathLike[str], data: bytes, mode: int) -> Path:
    """Write ``data`` whole into a new temporary file beside ``target``, fsynced, with ``mode``.

    Returns:
        The temporary file's path (the caller renames it into place).

    Raises:
        OSError: the data could not be written; no temporary file is left.
    """
    fd, temporary = create_temporary(target)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            # close() reports some filesystems' (NFS) delayed write errors.
            os.close(fd)
        os.chmod(temporary, mode)
    except BaseException:
        _remove(temporary)
        raise
    return temporary


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename.

    A reader sees the old file or the new one, never a part; a failed write
    removes its temporary file and raises.

    Args:
        path: the file to (re)place.
        data: text (written as UTF-8) or bytes.
        mode: the file's permissions (a temporary file starts as 0600).

    Returns:
        The path written.

    Raises:
        OSError: the directory cannot be written (read-only, full, missing).
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    temporary = write_temporary(target, payload, mode)
    try:
        os.replace(temporary, target)
    except BaseException:
        _remove(temporary)
        raise
    fsync_directory(target.parent)
    return target


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host may still run (anyone's: EPERM is alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, someone else's
        return True
    return True


def is_stale_temporary(path: Path, now: float | None = None) -> bool:
    """Whether ``path`` is a temporary file left by a writer that is gone.

    This host's writers name themselves, so their files are stale as soon as the
    process is gone; any other temporary file only once it is :data:`STALE_AFTER_S` old.
    """
    if not _ANY_TEMPORARY.match(path.name):
        return False
    ours = _OURS.match(path.name)
    if ours is not None and ours.group("host") == host_tag():
        return not process_alive(int(ours.group("pid")))
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except OSError:
        return False
    return age > STALE_AFTER_S


def remove_stale_temporaries(directory: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files of dead writers from ``directory`` (best effort).

    Returns:
        The files removed.
    """
    removed: list[Path] = []
    try:
        entries = list(Path(directory).iterdir())
    except OSError:
        return removed
    for entry in entries:
        if entry.is_file() and is_stale_temporary(entry):
            try:
                entry.unlink()
            except OSError:
                continue
            removed.append(entry)
    return removed


__all__ = [
    "BACKUP_SUFFIX",
    "TEMPORARY_SUFFIX",
    "create_temporary",
    "fsync_directory",
    "host_tag",
    "is_stale_temporary",
    "process_alive",
    "remove_stale_temporaries",
    "temporary_path",
    "write_atomic",
    "write_temporary",
]
