"""Opening the database: its files checked before and after SQLite opens them.

SQLite follows links and creates a WAL database's ``-wal`` and ``-shm`` files even to
read, so a file is refused by its header before SQLite is asked (a file that is not
SQLite, is corrupt, belongs to another program, or was written by a newer gpuready is
left exactly as it was), never reached through a link, and checked again once open.
A disk that is read-only or full is named by its mount point.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import stat
from pathlib import Path

from validator.error_tree import UnsafePathError
from validator.files import refusal
from validator.safe_text import one_line
from validator.store.defaults import DEFAULT_RETRY_S
from validator.store.schema import APPLICATION_ID, _prepare, schema_version
from validator.store.store_errors import StoreError, _errors

_SQLITE_MAGIC = b"SQLite format 3\x00"


def _has_database(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def _check_folder(path: Path) -> None:
    """Refuse a database path whose folder could never be made, or where no journal is safe.

    A file in the way of its folder; a network filesystem whose locks stay on each host
    (:func:`_journal_mode`).
    """
    for folder in path.parents:
        if folder.exists():
            if not folder.is_dir():
                raise StoreError(
                    f"cannot create the folder of history database {path}: {folder} is not "
                    "a directory; give another --db"
                )
            break
    _journal_mode(path, 0.0)


def _journal_mode(where: Path, budget: float) -> tuple[str, str | None]:
    """``WAL`` on a local disk; ``DELETE`` (a rollback journal) on a network filesystem.

    Returns:
        The journal mode, and the notice that says why when it is not WAL.

    Raises:
        StoreError: a network filesystem whose locks stay on each host: no journal is safe.
    """
    from validator.store.network_fs import mount_of

    mount = mount_of(where.parent)
    if mount is None or not mount.network:
        return "WAL", None
    kind, point = one_line(mount.fstype, 40), one_line(str(mount.point), 200)
    if mount.local_locks:
        raise StoreError(
            f"history database {where} is on {kind} (mounted at {point}) with locks kept on "
            "each host (nolock, local_lock or nobrl): SQLite cannot keep two hosts' writers "
            "apart there; give a --db on a local disk (the default is node-local), or "
            "remount with locking"
        )
    notice = (
        f"note: history database {where} is on {kind} (mounted at {point}): using a "
        f"rollback journal (journal_mode=DELETE) with a {budget:g} s busy timeout, not WAL, "
        "whose shared memory cannot be shared between hosts"
    )
    return "DELETE", notice


_TOLD: set[str] = set()  # the notices said in this process: each once


def _open_writable(where: Path, budget: float) -> tuple[sqlite3.Connection, list[str]]:
    """A read-write connection, the database created or upgraded as needed; notices.

    On a network filesystem the journal is a rollback journal, never WAL, and the
    notices say so (once a process).

    Raises:
        StoreError: its folder cannot be made, the file is not usable, or it lies on a
            network filesystem where no journal mode is safe.
    """
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create the folder of history database {where}: {exc.strerror}"
        ) from None
    journal, notice = _journal_mode(where, budget)
    connection = _connect(where, "rwc")
    try:
        # Creating or upgrading waits for the write lock as long as any write does.
        with _errors(where):
            connection.execute(f"PRAGMA busy_timeout = {int(budget * 1000):d}")
        _prepare(connection, where, journal)
    except BaseException:
        connection.close()
        raise
    if notice is None or notice in _TOLD:
        return connection, []
    _TOLD.add(notice)
    return connection, [notice]


# What SQLite and the OS say when a file cannot be written, whatever else is wrong.
_UNWRITABLE_SIGNS = (
    "readonly",
    "read-only",
    "unable to open database file",
    "permission denied",
    "operation not permitted",
    "disk is full",
    "no space left",
)


def _mount_of(folder: Path) -> Path:
    """The mount point holding ``folder``: the longest in /proc/self/mounts above it.

    A bind mount (how a shared folder is often made read-only) is on the same device
    as its parent, so os.path.ismount cannot see it.
    """
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as table:
            points = [line.split()[1] for line in table if len(line.split()) > 1]
    except OSError:
        points = []
    # the table writes a space, a tab, a newline and a backslash as octal escapes
    decoded = [
        Path(re.sub(r"\\([0-7]{3})", lambda octal: chr(int(octal[1], 8)), point))
        for point in points
    ]
    holding = [point for point in decoded if point == folder or point in folder.parents]
    return max(holding, key=lambda point: len(point.parts), default=Path(folder.anchor))


def disk_problem(path: Path) -> str | None:
    """``path``'s file system when it is read-only or full, named by its mount; else None."""
    folder = path.parent.resolve()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        disk = os.statvfs(folder)
    except OSError:
        return None
    if disk.f_flag & os.ST_RDONLY:
        return f"read-only file system (mounted at {_mount_of(folder)})"
    # root may use the blocks kept back for it, so only none at all is full for root
    free = disk.f_bfree if os.geteuid() == 0 else disk.f_bavail
    if free == 0:
        return f"the disk is full (the file system mounted at {_mount_of(folder)})"
    return None


def unwritable_reason(path: Path, exc: BaseException) -> str | None:
    """Why the database at ``path`` cannot be written, when ``exc`` says it cannot; else None.

    A read-only or full disk is named with its mount point; a file that is damaged,
    foreign or newer (None here) stays an error of its own.
    """
    text = one_line(exc)
    problem = disk_problem(path)
    if problem is not None:
        return f"{text}: {problem}"
    return text if any(sign in text.lower() for sign in _UNWRITABLE_SIGNS) else None


def _connect_to_read(path: Path) -> tuple[sqlite3.Connection, str | None]:
    """A read-only connection; on a read-only or full disk, to the file as it stands.

    A reader of a WAL database needs its -shm index, which SQLite cannot make on a
    read-only mount (a compute node's view of the shared folder): there the file is
    read as immutable, without the writers' lock, which is all a reader can have.

    Returns:
        The connection, and why what it reads may lack the newest runs (runs still in
        a ``-wal`` file that an immutable read does not see); None when it reads all.
    """
    connection = _connect(path, "ro")
    try:
        connection.execute("SELECT 1 FROM sqlite_master LIMIT 1")  # SQLite opens lazily
    except sqlite3.Error:
        connection.close()
        if disk_problem(path) is None:
            return _connect(path, "ro"), None  # to fail where it would have, with its own words
        unseen = None
        wal = path.with_name(f"{path.name}-wal")
        with contextlib.suppress(OSError):
            if wal.stat().st_size > 0:
                unseen = (
                    f"{path} is read as it stands on a read-only mount: the runs still in "
                    f"{wal.name} are not seen"
                )
        return _connect(path, "ro&immutable=1"), unseen
    return connection, None


def _refuse_links(path: Path) -> None:
    """Refuse a database, or a journal of it, that is a link (or a FIFO, socket, device).

    SQLite follows links; a link planted as the database or its ``-wal`` file would aim
    root's writes at any file. A folder in the database's place is left to SQLite's own
    message.

    Raises:
        UnsafePathError: naming the first such file.
    """
    for name in (path.name, *(f"{path.name}{tail}" for tail in ("-wal", "-shm", "-journal"))):
        where = path.with_name(name)
        try:
            found = os.lstat(where)
        except OSError:
            continue
        if stat.S_ISREG(found.st_mode) or (name == path.name and stat.S_ISDIR(found.st_mode)):
            continue
        target = os.readlink(where) if stat.S_ISLNK(found.st_mode) else ""
        raise refusal(where, found.st_mode, "a regular file", target)


def _connect(path: Path, mode: str) -> sqlite3.Connection:
    _refuse_links(path)
    uri = f"{path.resolve().as_uri()}?mode={mode}"
    with _errors(path):
        connection = sqlite3.connect(
            uri,
            uri=True,
            # SQLite's busy handler retries a locked write with growing pauses, this
            # long; a writable Store sets its own budget (Store.retry_s).
            timeout=DEFAULT_RETRY_S,
            # Transactions are begun explicitly (BEGIN IMMEDIATE).
            isolation_level=None,
            check_same_thread=False,
        )
    try:
        _opened_in_place(path)
    except UnsafePathError:
        connection.close()
        raise
    return connection


_OPEN_FILES = Path("/proc/self/fd")


def _opened_in_place(path: Path) -> None:
    """Refuse a database swapped for a link between :func:`_refuse_links` and SQLite's open.

    SQLite cannot be told not to follow links. So, once it has opened the database, the
    file at ``path`` must still be a regular file, and one this process holds open: a
    link planted in between and taken away again leaves SQLite holding another file.

    Raises:
        UnsafePathError: ``path`` is now no regular file, or not the file SQLite opened.
    """
    if not _OPEN_FILES.is_dir():
        return  # no /proc: the check before the open is all there is
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return  # opened read-only and not there: SQLite's own error follows
    if not stat.S_ISREG(found.st_mode):
        target = os.readlink(path) if stat.S_ISLNK(found.st_mode) else ""
        raise refusal(path, found.st_mode, "a regular file", target)
    for name in os.listdir(_OPEN_FILES):
        try:
            held = os.stat(_OPEN_FILES / name)
        except OSError:
            continue
        if (held.st_dev, held.st_ino) == (found.st_dev, found.st_ino):
            return
    raise UnsafePathError(
        f"{path} changed while SQLite opened it (a link was put in its place and taken "
        "away): gpuready (run as root) writes only the database it was given; check who "
        "can write to its folder, and run again"
    )


def _check_header(path: Path) -> None:
    """Refuse a file that is not SQLite, or (by its header) foreign, newer or cut short.

    SQLite is not asked until then: opening a WAL database creates its ``-wal`` and
    ``-shm`` files, even to read, and a file we refuse is left exactly as it was.
    The header is the whole truth only while no ``-wal`` file holds newer pages;
    otherwise (and for an empty stamp) SQLite's own reading decides.
    """
    _refuse_links(path)  # read through no link, and wait on no FIFO
    try:
        with path.open("rb") as handle:
            head = handle.read(_HEADER_SIZE)
        size = path.stat().st_size
    except OSError as exc:
        raise StoreError(f"cannot read history database {path}: {exc.strerror}") from None
    if head[: len(_SQLITE_MAGIC)] != _SQLITE_MAGIC:
        raise StoreError(
            f"{path} is not a gpuready history database (not SQLite): "
            "give another file with --db, or move it away"
        )
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return
    problem = _header_damage(head, size)
    if problem is not None:
        raise StoreError(
            f"history database {path} is damaged ({problem}): "
            "move it away and start a new one with --db"
        )
    app_id, version = (int.from_bytes(head[at : at + 4], "big") for at in (68, 60))
    if app_id not in (0, APPLICATION_ID):
        raise StoreError(
            f"{path} is an SQLite database of another program, not gpuready history: "
            "give another file with --db"
        )
    if app_id == APPLICATION_ID and version > schema_version():
        raise StoreError(
            f"history database {path} was written by a newer gpuready (schema {version}, "
            f"this one knows up to {schema_version()}): upgrade gpuready"
        )


# The database header: https://www.sqlite.org/fileformat.html#the_database_header
_HEADER_SIZE = 100


def _header_damage(head: bytes, size: int) -> str | None:
    """What the header says is wrong with the file, or None."""
    if len(head) < _HEADER_SIZE:
        return f"{size} bytes, shorter than its header"
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        return f"page size {page_size} in its header"
    pages = int.from_bytes(head[28:32], "big")
    # The page count is valid only when stamped by the last writer (offset 92 == 24).
    if pages and head[92:96] == head[24:28] and size < pages * page_size:
        return f"{size} bytes where its header counts {pages * page_size}"
    return None


def _store_bytes(path: Path) -> int:
    """The database file and its write-ahead log, in bytes."""
    total = 0
    for part in (path, path.with_name(path.name + "-wal")):
        with contextlib.suppress(OSError):
            total += part.stat().st_size
    return total
