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
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from validator import __version__
from validator import fields as doc
from validator.error_tree import BadInputError, UnsafePathError
from validator.files import Folder, remove_file, write_atomic
from validator.model import NodeResult, SchemaError, Verdict, from_dict
from validator.safe_text import one_line
from validator.store.defaults import HOUSEKEEPING_WAIT_S, default_db_path, retry_budget
from validator.store.opening import (
    _check_folder,
    _check_header,
    _connect_to_read,
    _has_database,
    _open_writable,
    _store_bytes,
    unwritable_reason,
)
from validator.store.queries import (
    _MAX_SQL_INT,
    _PRUNE_BATCH,
    CERTIFICATE_OF_RESULT,
    FAILED_CHECKS,
    HISTORY_OF_ALL,
    HISTORY_OF_HOST,
    LATEST_ATTEMPT,
    NEXT_ATTEMPT,
    PRUNE_HOLDS_LATEST,
    PRUNE_NTH_NEWEST_RUN,
    RESULT_OF_HOST_IN_RUN,
    RUN_KINDS,
    CertifyAttempt,
    HistoryRow,
    PruneOutcome,
    RunKind,
    _argv,
    _delete_runs,
    _RolledBack,
    _shown_status,
)
from validator.store.result_rows import _encode, _Encoded, _insert_result, _Recorded
from validator.store.run_locks import _hold_lock, _lock_held, _release_lock, run_lock_path
from validator.store.schema import _check_identity, _stored_text, schema_version
from validator.store.spool import (
    _import_run,
    _PendingError,
    _Spool,
    _writer_gone,
    pending_dir,
    read_pending,
)
from validator.store.store_errors import (
    NoHistoryError,
    NotStoredError,
    StoreError,
    _errors,
    _Unwritable,
)

if TYPE_CHECKING:  # certificates are read only where one is asked for
    from validator.certificate import Certificate


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class Store:
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
    ) -> None:
        self._db = connection
        self.path = path
        self.readonly = readonly
        self.retry_s = retry_budget(retry_s)
        self.notices: list[str] = []
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
            connection = _open_writable(where, budget)
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
        store = cls(connection, where, readonly=False, retry_s=budget)
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
                self._db = _open_writable(self.path, self.retry_s)
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
        self, run_id: int, entries: Sequence[tuple[NodeResult, Certificate | None]]
    ) -> None:
        """Commit several hosts' results (each with its certificate or None) in one transaction.

        Each entry is recorded as :meth:`record_result` records one: a host
        recorded again replaces its earlier result. Everything is encoded before
        the write lock is taken, so other writers wait only for the rows.

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
        if not recorded:
            return
        with self._lock:
            spool = self._spools.get(run_id)
        if spool is None:
            encoded = [_encode(item) for item in recorded]
            with self._lock:
                spool = self._spools.get(run_id)  # spooled meanwhile by another thread
                if spool is None:
                    try:
                        self._record_in_db(run_id, encoded)
                    except _Unwritable as exc:
                        spool = self._spool_existing(run_id, exc.reason)
                    else:
                        return
        with self._lock:
            for item in recorded:
                # the latest judgement, in arrival order
                spool.results.pop(item.result.hostname, None)
                spool.results[item.result.hostname] = item
            self._save(spool)

    def _record_in_db(self, run_id: int, encoded: Sequence[_Encoded]) -> None:
        with self._write() as db:
            if db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise StoreError(f"history database {self.path} has no run {run_id}")
            for item in encoded:
                _insert_result(db, run_id, item)

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

    # ------------------------------------------------------------ spooling

    def _spool(self, key: int, run: dict[str, Any], reason: str) -> _Spool:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        # A random part too: two stores of one process may spool in the same second.
        name = f"{stamp}-{os.getpid()}-{len(self._spools) + 1}-{secrets.token_hex(4)}.json"
        spool = _Spool(
            path=pending_dir(self.path) / name,
            run={**run, "status": "running", "finished_at": None},
            reason=reason,
        )
        self._spools[key] = spool
        return spool

    def _spool_existing(self, run_id: int, reason: str) -> _Spool:
        """Spool a run that is in the database (its row committed, results perhaps too)."""
        row = self._started.get(run_id) or self._read_run(run_id)
        return self._spool(run_id, {**row, "db_run_id": run_id}, reason)

    def _read_run(self, run_id: int) -> dict[str, Any]:
        """A run's row as a pending file records it (a locked database still reads)."""
        try:
            with self._lock:
                db = self._connection(create=False)
                found = None
                if db is not None:
                    found = db.execute(
                        "SELECT kind, started_at, hosts, policy_digest, argv, tool_version, pid"
                        " FROM runs WHERE id = ?",
                        (run_id,),
                    ).fetchone()
        except (sqlite3.Error, StoreError):
            found = None
        if found is None:
            raise StoreError(f"history database {self.path} has no run {run_id}")
        kind, started_at, hosts, digest, argv, version, pid = found
        return {
            "kind": kind if kind in RUN_KINDS else RunKind.CERTIFY.value,
            "started_at": started_at,
            "hosts": hosts,
            "policy_digest": digest,
            "argv": _argv(argv),
            "tool_version": version,
            "pid": pid,
            "hostname": socket.gethostname(),
        }

    def _save(self, spool: _Spool, *, final: bool = False) -> None:
        """Write the spooled run's pending file; a final save that fails raises."""
        text = json.dumps(spool.document(self.path), indent=1, sort_keys=True) + "\n"
        try:
            # <db>.pending/ is ours: made when missing, refused when it is a link.
            write_atomic(spool.path, text, mode=0o600, start=spool.path.parent)
        except OSError as exc:
            spool.error = f"{spool.path}: {exc.strerror or one_line(exc)}"
            if final:
                raise NotStoredError(
                    f"the run was not stored: history database {self.path} could not be "
                    f"written ({spool.reason}) and neither could {spool.error}; free space or "
                    "fix the database, then run again"
                ) from None
            return
        spool.error = None
        if not spool.announced:
            spool.announced = True
            self.notices.append(
                f"warning: history database {self.path} could not be written ({spool.reason}): "
                f"the run is saved in {spool.path}; the next certify or drift run imports it"
            )

    # ------------------------------------------------------------ housekeeping

    def pending_files(self) -> list[Path]:
        """The pending files waiting to be imported, oldest first."""
        directory = pending_dir(self.path)
        try:
            # A link (to the folder or in it) is never read: only regular files are listed.
            with Folder.open(directory, create=False) as folder:
                return [directory / name for name in folder.files() if name.endswith(".json")]
        except OSError:
            return []

    def import_pending(self) -> list[Path]:
        """Import every pending run whose process is done; each file goes once committed.

        A file still being written by a live process waits; a file that is not a
        pending run is left in place with a notice; a database still locked leaves
        the rest for the next run.

        Returns:
            The files imported (and removed).
        """
        imported: list[Path] = []
        for path in self.pending_files():
            if any(spool.path == path for spool in self._spools.values()):
                continue  # our own, still being written
            try:
                run, results = read_pending(path)
            except _PendingError as exc:
                self.notices.append(f"warning: cannot import {exc}; fix or remove the file")
                continue
            if run["status"] == "running" and not _writer_gone(path, run):
                continue
            try:
                with self._write(HOUSEKEEPING_WAIT_S) as db:
                    _import_run(db, run, results)
            except _Unwritable:
                break
            with contextlib.suppress(OSError, UnsafePathError):
                remove_file(path)
            imported.append(path)
        if imported:
            with contextlib.suppress(OSError):
                pending_dir(self.path).rmdir()  # only when empty
            runs = "run" if len(imported) == 1 else "runs"
            self.notices.append(
                f"imported {len(imported)} pending {runs} into history database {self.path} "
                f"from {pending_dir(self.path)}"
            )
        return imported

    def mark_dead_runs(self) -> list[int]:
        """Mark ``interrupted`` the running runs whose process is gone.

        Returns:
            The runs marked (none when the database cannot be written at once).
        """
        try:
            with self._lock:  # a read first: most opens need no write lock at all
                db = self._db
                if db is None or not self._dead_runs(db):
                    return []
        except sqlite3.Error:
            return []
        try:
            with self._write(HOUSEKEEPING_WAIT_S) as db:
                dead = self._dead_runs(db)  # again, under the lock
                db.executemany(
                    "UPDATE runs SET status = 'interrupted' WHERE id = ?", [(i,) for i in dead]
                )
        except _Unwritable:
            return []
        for run_id in dead:
            with contextlib.suppress(OSError):
                self._lock_path(run_id).unlink()
        return dead

    def _dead_runs(self, db: sqlite3.Connection) -> list[int]:
        running = db.execute("SELECT id, pid FROM runs WHERE status = 'running'").fetchall()
        return [run_id for run_id, pid in running if not self._owner_alive(run_id, pid)]

    def _owner_alive(self, run_id: int, pid: int | None) -> bool:
        held = _lock_held(self._lock_path(run_id))
        if held is None:
            # No lock file: a run of an older gpuready, or its lock failed. A pid alone
            # says nothing of a run on another host sharing this database: never call a
            # run dead on a guess.
            return True
        return held

    # ------------------------------------------------------------ reading

    def latest_certificate(self, hostname: str) -> Certificate | None:
        """The most recently issued certificate of a host, or None when it was never certified.

        Raises:
            StoreError: the stored certificate cannot be read back.
        """
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            row = None
            if db is not None:
                row = db.execute(
                    "SELECT json_packed FROM certificates WHERE hostname = ?"
                    " ORDER BY issued_at DESC, id DESC LIMIT 1",
                    (hostname,),
                ).fetchone()
        if row is None:
            return None
        from validator.certificate import certificate_from_json

        try:
            return certificate_from_json(_stored_text(row[0]))
        except BadInputError as exc:
            raise StoreError(
                f"history database {self.path} holds an unreadable certificate of {hostname}: {exc}"
            ) from None

    def history(self, hostname: str | None = None, limit: int = 50) -> list[HistoryRow]:
        """Past results, newest run first; runs with no result yet are listed when no host is asked.

        A run still ``running`` in the database reads ``incomplete`` while its
        process lives and ``interrupted`` once it is gone.

        Args:
            hostname: only this host's results.
            limit: at most this many rows.
        """
        params: list[object] = []
        if hostname is not None:
            query = HISTORY_OF_HOST
            params.append(hostname)
        else:
            query = HISTORY_OF_ALL
        params.append(min(max(0, limit), _MAX_SQL_INT))
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            rows = db.execute(query, params).fetchall() if db is not None else []
            certificates = self._certificate_states(db, rows) if db is not None else {}
        alive: dict[int, bool] = {}
        for row in rows:
            if row[4] == "running" and row[0] not in alive:
                alive[row[0]] = self._owner_alive(row[0], row[11])
        return [
            HistoryRow(
                run_id=row[0],
                kind=row[1],
                started_at=row[2],
                finished_at=row[3],
                status=_shown_status(row[4], alive.get(row[0], True)),
                hostname=row[5],
                verdict=row[6],
                summary=row[7] or "",
                recorded_at=row[8],
                failed=row[9],
                unknown=row[10],
                provenance=row[13],
                **certificates.get(row[12], {}),
            )
            for row in rows
        ]

    def _certificate_states(
        self, db: sqlite3.Connection, rows: Sequence[Sequence[Any]]
    ) -> dict[int, dict[str, Any]]:
        """What became of the certificate each certify result was issued, by result id."""
        states: dict[int, dict[str, Any]] = {}
        for row in rows:
            result_id, hostname, recorded_at = row[12], row[5], row[8]
            if row[1] != RunKind.CERTIFY.value or result_id is None:
                continue
            if db.execute(CERTIFICATE_OF_RESULT, (result_id,)).fetchone() is None:
                continue
            later = db.execute(
                NEXT_ATTEMPT, (hostname, result_id, recorded_at, row[0])
            ).fetchone()
            if later is None:
                states[result_id] = {"certificate": "current"}
                continue
            if later[2] != Verdict.CERTIFIED.value:
                state = "revoked"
            elif db.execute(CERTIFICATE_OF_RESULT, (later[5],)).fetchone() is not None:
                state = "replaced"
            else:  # certified, but its certificate was not stored: this one still holds
                states[result_id] = {"certificate": "current"}
                continue
            states[result_id] = {
                "certificate": state,
                "certificate_run": later[0],
                "certificate_changed_at": later[3],
            }
        return states

    def latest_attempt(self, hostname: str) -> CertifyAttempt | None:
        """The host's latest certification attempt (its name in any case); None if never tried.

        Drift weighs the latest certificate against it: one that did not certify the
        node revokes every certificate issued before it.

        Raises:
            StoreError: the database failed.
        """
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            if db is None:
                return None
            row = db.execute(LATEST_ATTEMPT, (hostname,)).fetchone()
            if row is None:
                return None
            failed = tuple((str(f[0]), f[1]) for f in db.execute(FAILED_CHECKS, (row[5],)))
        return CertifyAttempt(
            run_id=row[0],
            hostname=row[1],
            verdict=row[2],
            recorded_at=row[3],
            summary=row[4] or "",
            failed=failed,
        )

    def result(self, run_id: int, hostname: str) -> NodeResult | None:
        """A host's full result in a run, as it was recorded; None when there is none.

        Raises:
            StoreError: the stored result cannot be read back.
        """
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            row = None
            if db is not None:
                row = db.execute(RESULT_OF_HOST_IN_RUN, (hostname, run_id)).fetchone()
        if row is None:
            return None
        try:
            data = doc.load_json(_stored_text(row[0]))
            if isinstance(data, dict):
                data["facts"] = doc.load_json(_stored_text(row[1]))
            return from_dict(NodeResult, data)
        except (BadInputError, SchemaError, doc.LoadError) as exc:
            raise StoreError(
                f"history database {self.path} holds an unreadable result of {hostname} "
                f"in run {run_id}: {one_line(exc)}"
            ) from None

    def prune(
        self,
        *,
        keep_days: float | None = None,
        keep_runs: int | None = None,
        dry_run: bool = False,
        now: datetime.datetime | None = None,
    ) -> PruneOutcome:
        """Remove the runs the retention policy does not keep, with their results.

        A run is kept when it is younger than ``keep_days`` or among the
        ``keep_runs`` newest (either rule given keeps it); a run still running is
        always kept, and so is a run holding the latest certificate of some host
        (drift's baseline). Removal goes a batch of runs per transaction, so other
        writers wait little; a dry run makes the same deletions and rolls them back.

        Raises:
            ValueError: neither rule given, or a rule below 1.
            StoreError: the store was opened read-only, or the database refused.
        """
        if keep_days is None and keep_runs is None:
            raise ValueError("prune needs keep_days, keep_runs or both")
        if (keep_days is not None and not keep_days >= 1) or (
            keep_runs is not None and keep_runs < 1
        ):
            raise ValueError("keep_days and keep_runs are at least 1")
        self._refuse_readonly()
        clauses: list[str] = ["status != 'running'"]
        params: list[object] = []
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            if db is None:
                return PruneOutcome((), 0, 0, (), dry_run)
            if keep_runs is not None:
                found = db.execute(PRUNE_NTH_NEWEST_RUN, (keep_runs - 1,)).fetchone()
                if found is None:  # no more runs than are kept
                    return PruneOutcome((), 0, 0, (), dry_run)
                clauses.append("id < ?")
                params.append(found[0])
            if keep_days is not None:
                moment = now or datetime.datetime.now(datetime.timezone.utc)
                cutoff = moment - datetime.timedelta(days=keep_days)
                clauses.append("started_at < ?")
                params.append(cutoff.isoformat(timespec="seconds"))
            # Sorted here, not by SQL: an ORDER BY id would walk every run by its key
            # instead of the start index (runs_by_start) that finds just the old ones.
            query = f"SELECT id FROM runs WHERE {' AND '.join(clauses)}"  # noqa: S608 - fixed fragments; values bound
            candidates = sorted(row[0] for row in db.execute(query, params))
            kept = tuple(i for i in candidates if db.execute(PRUNE_HOLDS_LATEST, (i,)).fetchone())
        keep = set(kept)
        doomed = [i for i in candidates if i not in keep]
        removed: list[int] = []
        results = certificates = 0
        for start in range(0, len(doomed), _PRUNE_BATCH):
            batch = doomed[start : start + _PRUNE_BATCH]
            try:
                with self._write() as db:
                    done = _delete_runs(db, batch)
                    if dry_run:
                        raise _RolledBack(done)
            except _RolledBack as rolled:
                done = rolled.counts
            except _Unwritable as exc:
                raise StoreError(
                    f"history database {self.path} could not be pruned ({exc.reason}); "
                    f"{len(removed)} runs were removed before: run it again later"
                ) from None
            removed.extend(batch)
            results += done[0]
            certificates += done[1]
        return PruneOutcome(tuple(removed), results, certificates, kept, dry_run)

    def vacuum(self) -> tuple[int, int]:
        """Give the pages freed by :meth:`prune` back to the filesystem: (bytes before, after).

        SQLite rewrites the whole file (VACUUM), then empties its write-ahead log. It
        holds the write lock while it does (seconds for a large store; other writers
        wait out their busy timeout, then spool) and needs up to the file's size again
        on disk while it runs.

        Raises:
            StoreError: the store was opened read-only, or SQLite refused (locked
                after the wait, no space): nothing is lost, the file stays as it was.
        """
        self._refuse_readonly()
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            if db is None:
                return 0, 0
            before = _store_bytes(self.path)
            try:
                with self._busy_wait(db, None):
                    db.execute("VACUUM")
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:
                raise StoreError(
                    f"history database {self.path} could not be compacted "
                    f"({self._reason(exc, None)}); the runs were removed, and the next "
                    "prune --vacuum tries again"
                ) from None
            return before, _store_bytes(self.path)

    def integrity_check(self) -> str:
        """SQLite's own integrity check: ``ok`` or the first problem it found."""
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            row = db.execute("PRAGMA integrity_check").fetchone() if db is not None else ("ok",)
        return str(row[0])
