"""The history store: :class:`Store`, the one object that opens, writes and reads the database.

One database file (``--db``, default under the user's state directory) in WAL
mode, so readers never block the writer and several gpuready processes may
write at once: each write is one short ``BEGIN IMMEDIATE`` transaction and
SQLite's busy handler makes the others wait their turn, retrying with backoff
for a bounded time (:data:`~validator.store.defaults.DEFAULT_RETRY_S`,
``$GPUREADY_DB_RETRY_S``). A run whose writes still fail goes to a pending file
(:mod:`validator.store.spool`).

Each host's result is committed on its own as it arrives; a fleet's final
judgements go in one transaction (:meth:`Store.record_results`). A run is created
``running`` and only :meth:`Store.finish_run` closes it; its process holds the run's
lock meanwhile (:mod:`validator.store.run_locks`).

Its opening and its writes are here; its reads (:mod:`.history_reads`), its
housekeeping (:mod:`.housekeeping`) and its pending runs (:mod:`.pending_runs`) are
mixins it inherits, and :mod:`.store_base` declares what they use of it.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from validator import __version__
from validator.model import CrossNodeStage, NodeResult, to_dict
from validator.safe_text import one_line
from validator.store.defaults import default_db_path, retry_budget
from validator.store.history_reads import HistoryReads
from validator.store.housekeeping import Housekeeping
from validator.store.opening import (
    _check_folder,
    _check_header,
    _connect_to_read,
    _has_database,
    _open_writable,
    unwritable_reason,
)
from validator.store.pending_runs import PendingRuns
from validator.store.queries import RUN_KINDS, RunKind
from validator.store.result_rows import (
    _encode,
    _Encoded,
    _insert_result,
    _Recorded,
    _stage_packed,
    _store_stage,
)
from validator.store.run_locks import _hold_lock, _release_lock, run_lock_path
from validator.store.schema import _check_identity, schema_version
from validator.store.spool import _Spool
from validator.store.store_errors import NoHistoryError, StoreError, _Unwritable

if TYPE_CHECKING:  # certificates are read only where one is asked for
    from validator.certificate import Certificate


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class Store(HistoryReads, Housekeeping, PendingRuns):
    """The history database. Open with :meth:`Store.open`; use as a context manager.

    ``notices`` collects what the caller should tell the user (a run spooled to a
    pending file, pending runs imported); :meth:`take_notices` hands them over.
    """

    def __init__(
        self,
        connection: sqlite3.Connection | None,
        path: Path,
        *,
        readonly: bool,
        retry_s: float | None = None,
        notices: Sequence[str] = (),
    ) -> None:
        self._db = connection
        self.path = path
        self.readonly = readonly
        self.retry_s = retry_budget(retry_s)
        self.notices: list[str] = list(notices)  # said once, on stderr, by the command
        # One connection may be shared by the threads of one process.
        self._lock = threading.RLock()
        self._started: dict[int, dict[str, Any]] = {}  # the runs this store began
        self._spools: dict[int, _Spool] = {}
        self._provisional = 0
        # Why nothing can be written here (a read-only file system, a full disk): every
        # run goes to a pending file, or, where that fails too, is not recorded.
        self.cannot_write: str | None = None
        # Why the history read here may lack the newest runs (a database of an older
        # schema that cannot be upgraded here, one read as it stands on a read-only mount
        # beside a WAL file); None when it is read whole. Drift says so: a failed
        # certification it cannot see cannot revoke a certificate.
        self.history_unseen: str | None = None

    # ------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        path: str | Path | None = None,
        *,
        readonly: bool = False,
        retry_s: float | None = None,
        defer_create: bool = False,
    ) -> Store:
        """Open (creating and upgrading where needed) the history database.

        Opened for writing, it first imports the runs that wait in pending files
        and marks the runs whose process died as interrupted (each only when the
        database can be written at once; otherwise a later run does it).

        Args:
            path: the database file; None for :func:`default_db_path`.
            readonly: only read: nothing is created, migrated or written.
            retry_s: how long a write waits for another process's transaction
                before the run is spooled; None for :func:`retry_budget`'s default.
            defer_create: a database that does not exist yet is created by the
                first write, not now (its folder is checked now): a command that
                stops on bad input before recording anything leaves no file behind.

        Raises:
            NoHistoryError: ``readonly`` and no database exists at the path.
            StoreError: not SQLite, corrupt, not gpuready's, or written by a newer gpuready;
                the file is left untouched.
        """
        where = Path(path).expanduser() if path is not None else default_db_path()
        budget = retry_budget(retry_s)
        if where.is_dir():
            raise StoreError(f"history database {where} is a directory: give a file with --db")
        exists = where.exists() and where.stat().st_size > 0
        if readonly and not exists:
            raise NoHistoryError(f"no history yet at {where}")
        if exists:
            _check_header(where)
            # Look before touching: a read-only connection cannot change a foreign file.
            probe, unseen = _connect_to_read(where)
            try:
                version = _check_identity(probe, where, allow_empty=not readonly)
            except BaseException:
                probe.close()
                raise
            if readonly:
                if version < schema_version():
                    probe.close()
                    raise StoreError(
                        f"history database {where} has schema {version}, older than this "
                        f"gpuready's {schema_version()}: any certify or drift run upgrades it"
                    )
                store = cls(probe, where, readonly=True, retry_s=budget)
                store.history_unseen = unseen
                return store
            probe.close()
        elif defer_create:
            _check_folder(where)
            return cls(None, where, readonly=False, retry_s=budget)
        try:
            connection, told = _open_writable(where, budget)
        except StoreError as exc:
            reason = unwritable_reason(where, exc)
            if reason is None:
                raise
            # Never a reason to stop the run: its verdict still counts (validator.service).
            # A file of an older schema is read only once upgraded: no history to read here.
            current = exists and version >= schema_version()
            reader, unseen = _connect_to_read(where) if current else (None, None)
            store = cls(reader, where, readonly=False, retry_s=budget)
            store.cannot_write = reason
            store.history_unseen = unseen
            if exists and not current:
                store.history_unseen = (
                    f"history database {where} has schema {version}, older than this "
                    f"gpuready's {schema_version()}, and cannot be upgraded here ({reason})"
                )
            return store
        store = cls(connection, where, readonly=False, retry_s=budget, notices=told)
        try:
            store.import_pending()
            store.mark_dead_runs()
        except BaseException:
            store.close()
            raise
        return store

    def _connection(self, *, create: bool) -> sqlite3.Connection | None:
        """The open database; a deferred one is opened (``create``: created) now.

        Raises:
            StoreError: it cannot be created, or what is there now is not ours.
        """
        with self._lock:
            if self._db is None and self.cannot_write is None and (
                create or _has_database(self.path)
            ):
                self._db, told = _open_writable(self.path, self.retry_s)
                self.notices.extend(told)
                self.import_pending()
                self.mark_dead_runs()
            return self._db

    def has_database(self) -> bool:
        """Whether the database exists: one opened with ``defer_create`` may not have one yet."""
        with self._lock:
            return self._db is not None or _has_database(self.path)

    def close(self) -> None:
        """Close the database; committed results stay (and a spooled run's pending file)."""
        with self._lock:
            if self._db is not None:
                self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def take_notices(self) -> list[str]:
        """The notices collected so far (each one line), cleared."""
        with self._lock:
            taken, self.notices = self.notices, []
        return taken

    # ------------------------------------------------------------ writing

    @contextlib.contextmanager
    def _write(self, wait_s: float | None = None) -> Iterator[sqlite3.Connection]:
        """One write transaction.

        Raises:
            StoreError: the store was opened read-only (or the body raised it).
            _Unwritable: SQLite refused (still locked after the wait, full, damaged).
        """
        self._refuse_readonly()
        if self.cannot_write is not None:
            raise _Unwritable(self.cannot_write)
        with self._lock:
            try:
                db = self._connection(create=True)
            except StoreError as exc:  # a deferred database that cannot be made now
                raise _Unwritable(unwritable_reason(self.path, exc) or str(exc)) from None
            assert db is not None  # noqa: S101 - create=True opens or raises
            try:
                with self._busy_wait(db, wait_s):
                    # IMMEDIATE takes the write lock up front, so two writers queue on
                    # the busy handler instead of deadlocking on a lock upgrade.
                    db.execute("BEGIN IMMEDIATE")
                    try:
                        yield db
                    except BaseException:
                        db.rollback()
                        raise
                    db.commit()
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    if db.in_transaction:
                        db.rollback()
                raise _Unwritable(self._reason(exc, wait_s)) from None

    def _reason(self, exc: sqlite3.Error, wait_s: float | None) -> str:
        text = one_line(exc)
        if "locked" in text or "busy" in text:
            waited = self.retry_s if wait_s is None else wait_s
            return f"{text}, still after {waited:g} s"
        return unwritable_reason(self.path, exc) or text  # a full disk, named by its mount

    @contextlib.contextmanager
    def _busy_wait(self, db: sqlite3.Connection, seconds: float | None) -> Iterator[None]:
        if seconds is None:
            yield
            return
        db.execute(f"PRAGMA busy_timeout = {int(seconds * 1000):d}")
        try:
            yield
        finally:
            with contextlib.suppress(sqlite3.Error):
                db.execute(f"PRAGMA busy_timeout = {int(self.retry_s * 1000):d}")

    def _refuse_readonly(self) -> None:
        if self.readonly:
            raise StoreError(f"history database {self.path} was opened read-only")

    def _lock_path(self, run_id: int) -> Path:
        return run_lock_path(self.path, run_id)

    def start_run(
        self, kind: RunKind | str, hosts: int, policy_digest: str, argv: Sequence[str] = ()
    ) -> int:
        """Record the start of a run and return its id; the run is incomplete until finished.

        When the database cannot be written (still locked after the retry budget,
        full, damaged), the run is spooled to a pending file instead and gets a
        provisional id below 0 (its real one comes with the import).

        Raises:
            ValueError: ``kind`` is neither certify nor drift.
            StoreError: the store was opened read-only.
        """
        if kind not in RUN_KINDS:
            raise ValueError(f"run kind {kind!r} is not one of {', '.join(RUN_KINDS)}")
        self._refuse_readonly()
        row: dict[str, Any] = {
            "kind": str(kind),
            "started_at": _now(),
            "hosts": hosts,
            "policy_digest": policy_digest,
            "argv": list(argv),
            "tool_version": __version__,
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
        }
        try:
            run_id = self._insert_run(row)
        except _Unwritable as exc:
            with self._lock:
                self._provisional -= 1
                run_id = self._provisional
                spool = self._spool(run_id, {**row, "db_run_id": None}, exc.reason)
                self._save(spool)
            return run_id
        self._started[run_id] = row
        return run_id

    def _insert_run(self, row: dict[str, Any]) -> int:
        held: Path | None = None
        try:
            with self._write() as db:
                cursor = db.execute(
                    "INSERT INTO runs"
                    " (kind, started_at, hosts, policy_digest, argv, tool_version, pid)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        row["kind"],
                        row["started_at"],
                        row["hosts"],
                        row["policy_digest"],
                        json.dumps(row["argv"]),
                        row["tool_version"],
                        row["pid"],
                    ),
                )
                run_id = cursor.lastrowid
                if run_id is None:  # pragma: no cover - an INSERT into a rowid table sets it
                    raise StoreError(f"history database {self.path} did not number the new run")
                # Held before the row is committed: no reader ever sees the run unowned.
                lock = self._lock_path(run_id)
                if _hold_lock(lock, {"pid": row["pid"], "hostname": row["hostname"]}):
                    held = lock
        except BaseException:
            if held is not None:
                _release_lock(held)
            raise
        return run_id

    def record_result(
        self, run_id: int, result: NodeResult, certificate: Certificate | None = None
    ) -> None:
        """Commit one host's result, its findings and its certificate in one transaction.

        Recording a host again in the same run replaces its earlier result: a
        fleet run commits each host as it arrives, then its final judgement
        (after the fleet comparison) with the certificate, if it earned one.
        A run whose write fails from then on goes to its pending file.

        Raises:
            ValueError: the certificate is for another host, or a number in the result
                is not finite (from_dict refuses those in every result read, so only a
                bug in this process can make one).
            StoreError: no run has that id, or the store was opened read-only.
        """
        self.record_results(run_id, [(result, certificate)])

    def record_results(
        self,
        run_id: int,
        entries: Sequence[tuple[NodeResult, Certificate | None]],
        *,
        cross_node: CrossNodeStage | None = None,
    ) -> None:
        """Commit several hosts' results (each with its certificate or None) in one transaction.

        Each entry is recorded as :meth:`record_result` records one: a host
        recorded again replaces its earlier result. Everything is encoded before
        the write lock is taken, so other writers wait only for the rows.
        ``cross_node``, the run's stage across nodes, is kept with the run in the
        same transaction (None keeps none: a run without the stage has none).

        Raises:
            ValueError: a certificate is for another host than its result, or a number
                in a result is not finite (as :meth:`record_result`).
            StoreError: no run has that id, or the store was opened read-only.
        """
        for result, certificate in entries:
            if certificate is not None and certificate.hostname != result.hostname:
                raise ValueError(
                    f"certificate of {certificate.hostname} cannot be recorded "
                    f"with the result of {result.hostname}"
                )
        self._refuse_readonly()
        now = _now()
        recorded = [_Recorded(result, certificate, now) for result, certificate in entries]
        if not recorded and cross_node is None:
            return
        with self._lock:
            spool = self._spools.get(run_id)
        if spool is None:
            encoded = [_encode(item) for item in recorded]
            stage = _stage_packed(cross_node)
            with self._lock:
                spool = self._spools.get(run_id)  # spooled meanwhile by another thread
                if spool is None:
                    try:
                        self._record_in_db(run_id, encoded, stage)
                    except _Unwritable as exc:
                        spool = self._spool_existing(run_id, exc.reason)
                    else:
                        return
        with self._lock:
            for item in recorded:
                # the latest judgement, in arrival order
                spool.results.pop(item.result.hostname, None)
                spool.results[item.result.hostname] = item
            if cross_node is not None:
                spool.run["cross_node"] = to_dict(cross_node)
            self._save(spool)

    def _record_in_db(
        self, run_id: int, encoded: Sequence[_Encoded], stage: bytes | None = None
    ) -> None:
        with self._write() as db:
            if db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise StoreError(f"history database {self.path} has no run {run_id}")
            for item in encoded:
                _insert_result(db, run_id, item)
            _store_stage(db, run_id, stage)

    def finish_run(self, run_id: int, interrupted: bool = False) -> None:
        """Close a run as complete, or as interrupted when it was stopped before every host.

        Raises:
            StoreError: no run has that id, or the store was opened read-only.
            NotStoredError: the run was spooled, and its pending file cannot be written either.
        """
        status = "interrupted" if interrupted else "complete"
        finished = _now()
        with self._lock:
            spool = self._spools.get(run_id)
            if spool is None:
                try:
                    with self._write() as db:
                        cursor = db.execute(
                            "UPDATE runs SET finished_at = ?, status = ? WHERE id = ?",
                            (finished, status, run_id),
                        )
                        if cursor.rowcount == 0:
                            raise StoreError(f"history database {self.path} has no run {run_id}")
                except _Unwritable as exc:
                    spool = self._spool_existing(run_id, exc.reason)
            if spool is not None:
                spool.run.update(status=status, finished_at=finished)
                self._save(spool, final=True)
        if run_id > 0:
            _release_lock(self._lock_path(run_id))
