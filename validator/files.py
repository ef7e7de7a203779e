"""Writing a file so that it is either whole or absent: nothing measured is half-written.

A file is written to a temporary name beside it (``.<name>.<host>-<pid>-<random>.tmp``),
fsynced and renamed into place. A failed write removes its temporary file. A
process killed in the middle (SIGKILL, power loss) cannot clean up, so the
temporary name says which process on which host wrote it, and
:func:`remove_stale_temporaries` (run by the next writer of that directory)
removes those whose writer is gone.

Every path a run creates, truncates, renames or removes goes through this module,
and it never follows a link it did not create. The path the operator names is
taken as given up to its last component (its folders are the operator's own); that
last component and everything below it is opened by descriptor, one component at a
time with ``O_NOFOLLOW``, and every file in it is made, renamed and removed relative
to that descriptor (``dir_fd=``), after an ``lstat``. A link, FIFO or folder found
where a file or folder of ours belongs raises :class:`~validator.error_tree.UnsafePathError`
naming it (exit 2); nothing is written through it and nothing outside is removed.

Standard library only, Python 3.9: the node agent ships with this module.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import socket
import stat
import time
from pathlib import Path
from types import TracebackType

from validator.error_tree import UnsafePathError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# Opening a FIFO to read blocks until a writer comes: never wait on a planted one.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_FOLDER_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC | _NONBLOCK

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
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
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


def write_atomic(
    path: str | os.PathLike[str],
    data: str | bytes,
    *,
    mode: int = 0o644,
    start: str | os.PathLike[str] | None = None,
) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename.

    A reader sees the old file or the new one, never a part; a failed write
    removes its temporary file and raises. ``path`` itself is never followed: a
    link, FIFO or folder in its place is refused.

    Args:
        path: the file to (re)place.
        data: text (written as UTF-8) or bytes.
        mode: the file's permissions (a temporary file starts as 0600).
        start: the folder the operator named, when ``path`` lies below it: the
            folders from there down are ours, created when missing and never
            followed. Without it, ``path``'s folder must exist and is taken as given
            (a link to it is followed, as the operator named it).

    Returns:
        The path written.

    Raises:
        OSError: the directory cannot be written (read-only, full, missing).
        UnsafePathError: a link or the wrong kind of file is in the way.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if start is None:
        with Folder.given(target.parent) as folder:
            folder.write(target.name, payload, mode)
    else:
        with Folder.open(target.parent, start=start) as folder:
            folder.write(target.name, payload, mode)
    return target


# ---------------------------------------------------------------- never through a link


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a regular file"


def refusal(
    path: str | os.PathLike[str], mode: int, wanted: str, link: str = ""
) -> UnsafePathError:
    """The one-line refusal of ``path``, which is not the ``wanted`` kind of file."""
    what = _kind(mode)
    if link:
        what = f"{what} (to {link})"
    return UnsafePathError(
        f"{path} is {what}, not {wanted}: gpuready (run as root) never writes through or "
        "removes what it did not make there; remove it, or give another path, and run again"
    )


def _lstat_at(name: str, dir_fd: int | None) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _readlink_at(name: str, dir_fd: int | None) -> str:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return ""


def check_path(path: str | os.PathLike[str], wanted: str = "a regular file") -> bool:
    """Refuse ``path`` when it is a link or not a regular file; False when it is absent.

    ``wanted`` is ``"a regular file"`` or ``"a folder"``.

    Raises:
        UnsafePathError: a link, or another kind of file, is at ``path``.
    """
    found = _lstat_at(os.fspath(path), None)
    if found is None:
        return False
    good = stat.S_ISDIR(found.st_mode) if wanted == "a folder" else stat.S_ISREG(found.st_mode)
    if not good:
        raise refusal(path, found.st_mode, wanted, _readlink_at(os.fspath(path), None))
    return True


class Folder:
    """A folder held open by descriptor; every operation in it is relative, never through a link.

    Made by :meth:`Folder.open`; close it (or use ``with``).
    """

    def __init__(self, fd: int, path: Path) -> None:
        """Hold ``fd``, the folder at ``path`` (named in messages)."""
        self.fd = fd
        self.path = path

    @classmethod
    def given(cls, path: str | os.PathLike[str]) -> Folder:
        """Open the existing folder ``path`` as the operator named it (links on the way followed).

        For the folder of a file the operator named (``--db``, ``--prom-file``): a
        ``/var/lib/gpuready`` that links to shared storage is theirs to make. What is
        made inside it is still never reached through a link.

        Raises:
            OSError: it is missing or no folder.
        """
        target = Path(path)
        return cls(os.open(str(target) or ".", os.O_RDONLY | _DIRECTORY | _CLOEXEC), target)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        start: str | os.PathLike[str] | None = None,
        mode: int = 0o755,
    ) -> Folder:
        """Open the folder ``path``, never following a link from ``start`` down.

        Args:
            path: the folder.
            create: make the missing folders (``start``'s own folders as given).
            start: the folder the operator named (``path`` or one above it); its
                parent is taken as given, ``start`` and every folder below it must be
                a real folder. Default: ``path`` itself.
            mode: the permissions of the folders made.

        Raises:
            OSError: a folder is missing (``create`` false) or cannot be made.
            UnsafePathError: a link or another kind of file is where a folder should be.
            ValueError: ``path`` is not ``start`` or below it.
        """
        target = Path(path)
        top = target if start is None else Path(start)
        parts = target.relative_to(top).parts
        parent = top.parent
        if create and str(parent) not in ("", "."):
            os.makedirs(parent, exist_ok=True)
        fd = os.open(str(parent) or ".", os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        where = parent
        for name in (top.name, *parts) if top.name else parts:
            where = where / name
            fd = _step(fd, name, where, create, mode)  # the one it was given is closed
        return cls(fd, target)

    def close(self) -> None:
        """Let the descriptor go (once)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        """The folder itself."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        """Close the folder."""
        self.close()

    def child(self, name: str, *, create: bool = True, mode: int = 0o755) -> Folder:
        """The sub-folder ``name``, made when missing (``create``), never through a link.

        Raises:
            OSError: it is missing and not to be made, or cannot be made.
            UnsafePathError: a link or another kind of file is in its place.
        """
        fd = os.dup(self.fd)
        return Folder(_step(fd, name, self.path / name, create, mode), self.path / name)

    def lstat(self, name: str) -> os.stat_result | None:
        """``name``'s own status (a link's, not its target's); None when absent."""
        return _lstat_at(name, self.fd)

    def check_file(self, name: str) -> bool:
        """Refuse ``name`` unless it is a regular file or absent; whether it exists.

        Raises:
            UnsafePathError: a link, FIFO, folder or device is there.
        """
        found = self.lstat(name)
        if found is None:
            return False
        if not stat.S_ISREG(found.st_mode):
            raise refusal(
                self.path / name, found.st_mode, "a regular file", _readlink_at(name, self.fd)
            )
        return True

    def names(self) -> list[str]:
        """The folder's entries, sorted."""
        return sorted(os.listdir(self.fd))

    def files(self) -> list[str]:
        """The names of the regular files in the folder (links and the rest left out), sorted."""
        found: list[str] = []
        for name in self.names():
            entry = self.lstat(name)
            if entry is not None and stat.S_ISREG(entry.st_mode):
                found.append(name)
        return found

    def create_temporary(self, target: str, mode: int = 0o600) -> tuple[int, str]:
        """Create (exclusively, never through a link) a temporary file beside ``target``.

        Returns:
            The open descriptor and the temporary file's name in this folder.

        Raises:
            OSError: the folder cannot be written.
        """
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
        for _ in range(8):
            name = temporary_path(target).name
            try:
                return os.open(name, flags, mode, dir_fd=self.fd), name
            except FileExistsError:
                continue  # a name someone else holds (or planted): another one
        raise FileExistsError(errno.EEXIST, "no free temporary name", str(self.path / target))

    def remove_quietly(self, name: str) -> None:
        """Remove ``name`` (ours: a temporary file) if it is there; errors ignored."""
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=self.fd)

    def replace(self, source: str, target: str) -> None:
        """Rename ``source`` onto ``target``, both in this folder; ``target`` is checked first.

        Raises:
            OSError: the rename failed.
            UnsafePathError: ``target`` is a link or not a regular file.
        """
        self.check_file(target)
        # rename() replaces a link put there since the check; it never writes through it.
        os.replace(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def write(self, name: str, data: bytes, mode: int = 0o644) -> Path:
        """Write ``data`` whole as ``name`` (temporary file, fsync, rename), with ``mode``.

        Raises:
            OSError: the data could not be written; no temporary file is left.
            UnsafePathError: ``name`` is a link or not a regular file.
        """
        self.check_file(name)
        fd, temporary = self.create_temporary(name)
        try:
            try:
                _write_all(fd, data)
                os.fchmod(fd, mode)
                os.fsync(fd)
            finally:
                # close() reports some filesystems' (NFS) delayed write errors.
                os.close(fd)
            self.replace(temporary, name)
        except BaseException:
            self.remove_quietly(temporary)
            raise
        self.sync()
        return self.path / name

    def remove(self, name: str) -> bool:
        """Remove the regular file ``name``; False when it is absent.

        Raises:
            OSError: it could not be removed.
            UnsafePathError: a link or another kind of file is there (left in place).
        """
        if not self.check_file(name):
            return False
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    def hold(self, name: str, mode: int = 0o644) -> tuple[int, bool]:
        """Open ``name`` to read and write, made when missing, never through a link.

        A file that was already there is opened as it is and must be a regular
        file; it is not truncated (the caller writes only into a file it made).

        Returns:
            The descriptor and whether this call made the file.

        Raises:
            OSError: it cannot be made or opened.
            UnsafePathError: a link, FIFO or folder is there.
        """
        made = os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
        try:
            return os.open(name, made, mode, dir_fd=self.fd), True
        except FileExistsError:
            pass
        try:
            fd = os.open(name, os.O_RDWR | _NOFOLLOW | _CLOEXEC | _NONBLOCK, dir_fd=self.fd)
        except OSError as exc:
            found = self.lstat(name)
            if found is not None and not stat.S_ISREG(found.st_mode):
                raise refusal(
                    self.path / name, found.st_mode, "a regular file", _readlink_at(name, self.fd)
                ) from None
            raise exc from None
        found_mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(found_mode):
            os.close(fd)
            raise refusal(self.path / name, found_mode, "a regular file")
        return fd, False

    def open_read(self, name: str) -> int:
        """Open the regular file ``name`` to read, never through a link.

        Raises:
            FileNotFoundError: it is absent.
            UnsafePathError: a link, FIFO or folder is there.
        """
        try:
            fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK, dir_fd=self.fd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            self.check_file(name)
            raise exc from None
        found_mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(found_mode):
            os.close(fd)
            raise refusal(self.path / name, found_mode, "a regular file")
        return fd

    def sync(self) -> None:
        """Make renames in the folder durable (some filesystems cannot)."""
        with contextlib.suppress(OSError):
            os.fsync(self.fd)


def _step(fd: int, name: str, where: Path, create: bool, mode: int) -> int:
    """Open folder ``name`` relative to ``fd`` (which is closed) without following a link."""
    try:
        try:
            child = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            # One made since is opened (and checked) below all the same.
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, mode, dir_fd=fd)
            child = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise
            found = _lstat_at(name, fd)
            if found is None or stat.S_ISDIR(found.st_mode):
                raise
            raise refusal(where, found.st_mode, "a folder", _readlink_at(name, fd)) from None
    finally:
        os.close(fd)
    return child


def remove_file(path: str | os.PathLike[str]) -> bool:
    """Remove the regular file ``path`` (its folder taken as given); False when absent.

    Raises:
        OSError: it could not be removed.
        UnsafePathError: a link or another kind of file is there (left in place).
    """
    target = Path(path)
    with Folder.open(target.parent, create=False) as folder:
        return folder.remove(target.name)


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


def remove_stale_temporaries(
    directory: str | os.PathLike[str], start: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Remove the temporary files of dead writers from ``directory`` (best effort).

    Only regular files are removed, relative to the folder's descriptor: a link
    named like a temporary file is left alone, and so is a folder that is a link
    (from ``start`` down, as :meth:`Folder.open` takes it).

    Returns:
        The files removed.
    """
    removed: list[Path] = []
    try:
        folder = Folder.open(directory, create=False, start=start)
    except (OSError, UnsafePathError):
        return removed
    with folder:
        try:
            names = folder.files()
        except OSError:
            return removed
        for name in names:
            entry = folder.path / name
            if not is_stale_temporary(entry):
                continue
            try:
                os.unlink(name, dir_fd=folder.fd)
            except OSError:
                continue
            removed.append(entry)
    return removed


__all__ = [
    "BACKUP_SUFFIX",
    "TEMPORARY_SUFFIX",
    "Folder",
    "check_path",
    "create_temporary",
    "host_tag",
    "is_stale_temporary",
    "process_alive",
    "refusal",
    "remove_file",
    "remove_stale_temporaries",
    "temporary_path",
    "write_atomic",
]
