"""History: runs, per-node results, findings and certificates in SQLite.

One database file (``--db``, default under the user's state directory) in WAL
mode, so readers never block the writer and several gpuready processes may
write at once: each write is one short ``BEGIN IMMEDIATE`` transaction and a
busy timeout makes the others wait their turn instead of failing.

Each host's result is committed on its own as it arrives. A run is created
``running`` and only :meth:`Store.finish_run` closes it, so a run whose process
died (killed, power lost) stays in the database with the results it committed
and shows as ``incomplete``.

The schema is versioned with ``PRAGMA user_version`` and upgraded by ordered
migrations; ``PRAGMA application_id`` marks the file as ours. A file that is not
SQLite, is corrupt, belongs to another program, or was written by a newer
gpuready gives a one-line :class:`StoreError` and is left exactly as it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from validator import __version__
from validator.certificate import Certificate, certificate_from_json, certificate_to_json
from validator.errors import BadInputError
from validator.model import NodeResult, Severity, to_dict
from validator.text import one_line

# "gpur" in ASCII: PRAGMA application_id, so a file is known as ours before any table is read.
APPLICATION_ID = 0x67707572

# How long a writer waits for another process's transaction before giving up.
BUSY_TIMEOUT_S = 60.0

_SQLITE_MAGIC = b"SQLite format 3\x00"

class RunKind(str, enum.Enum):
    """What a run in the history was."""

    CERTIFY = "certify"
    DRIFT = "drift"

    def __str__(self) -> str:
        return self.value


RUN_KINDS = tuple(kind.value for kind in RunKind)


class StoreError(BadInputError):
    """The history database cannot be used; one line naming the file and what to do."""


class NoHistoryError(StoreError):
    """There is no history database yet at the path asked to be read."""


# ---------------------------------------------------------------- schema

# Migration N (1-based) takes the schema from version N-1 to N. Append only:
# a database records the version it reached in PRAGMA user_version, and every
# migration after it runs, in order, in the same transaction.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            status TEXT NOT NULL DEFAULT 'running'
                CHECK (status IN ('running', 'complete', 'interrupted')),
            hosts INTEGER NOT NULL,
            policy_digest TEXT NOT NULL,
            argv TEXT NOT NULL,
            tool_version TEXT NOT NULL,
            pid INTEGER
        )
        """,
        """
        CREATE TABLE results (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id),
            hostname TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            verdict TEXT NOT NULL,
            sku TEXT,
            summary TEXT NOT NULL,
            result_json TEXT NOT NULL
        )
        """,
        "CREATE INDEX results_by_run ON results(run_id, id)",
        "CREATE INDEX results_by_host ON results(hostname, id)",
        """
        CREATE TABLE findings (
            id INTEGER PRIMARY KEY,
            result_id INTEGER NOT NULL REFERENCES results(id),
            "check" TEXT NOT NULL,
            severity TEXT NOT NULL,
            gpu_index INTEGER,
            message TEXT NOT NULL
        )
        """,
        "CREATE INDEX findings_by_result ON findings(result_id)",
        """
        CREATE TABLE certificates (
            id INTEGER PRIMARY KEY,
            result_id INTEGER REFERENCES results(id),
            hostname TEXT NOT NULL,
            issued_at TEXT NOT NULL,
            digest TEXT NOT NULL,
            json TEXT NOT NULL
        )
        """,
        "CREATE INDEX certificates_by_host ON certificates(hostname, issued_at, id)",
    ),
)


def schema_version() -> int:
    """The schema version this gpuready writes: the number of migrations."""
    return len(MIGRATIONS)


def default_db_path() -> Path:
    """``$XDG_STATE_HOME/gpuready/history.db``, else ``~/.local/state/gpuready/history.db``."""
    state = os.environ.get("XDG_STATE_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    base = Path(state) if state and Path(state).is_absolute() else Path.home() / ".local" / "state"
    return base / "gpuready" / "history.db"


# ---------------------------------------------------------------- rows


@dataclass(frozen=True)
class HistoryRow:
    """One host's result in one run; a run with no result yet has one row without a host."""

    run_id: int
    kind: str  # certify | drift
    started_at: str
    finished_at: str | None
    status: str  # complete | incomplete | interrupted
    hostname: str | None
    verdict: str | None  # CERTIFIED | NOT_CERTIFIED | UNKNOWN
    summary: str
    failed: int  # FAIL findings
    unknown: int  # UNKNOWN findings
    recorded_at: str | None


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------- the store


class Store:
    """The history database. Open with :meth:`Store.open`; use as a context manager."""

    def __init__(self, connection: sqlite3.Connection, path: Path, *, readonly: bool) -> None:
        self._db = connection
        self.path = path
        self.readonly = readonly
        # One connection may be shared by the threads of one process.
        self._lock = threading.Lock()

    # ------------------------------------------------------------ opening

    @classmethod
    def open(cls, path: str | Path | None = None, *, readonly: bool = False) -> Store:
        """Open (creating and upgrading where needed) the history database.

        Args:
            path: the database file; None for :func:`default_db_path`.
            readonly: only read: nothing is created, migrated or written.

        Raises:
            NoHistoryError: ``readonly`` and no database exists at the path.
            StoreError: not SQLite, corrupt, not gpuready's, or written by a newer gpuready;
                the file is left untouched.
        """
        where = Path(path).expanduser() if path is not None else default_db_path()
        if where.is_dir():
            raise StoreError(f"history database {where} is a directory: give a file with --db")
        exists = where.exists() and where.stat().st_size > 0
        if readonly and not exists:
            raise NoHistoryError(f"no history yet at {where}")
        if exists:
            _check_header(where)
            # Look before touching: a read-only connection cannot change a foreign file.
            probe = _connect(where, "ro")
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
                return cls(probe, where, readonly=True)
            probe.close()
        try:
            where.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the folder of history database {where}: {exc.strerror}"
            ) from None
        connection = _connect(where, "rwc")
        try:
            _prepare(connection, where)
        except BaseException:
            connection.close()
            raise
        return cls(connection, where, readonly=False)

    def close(self) -> None:
        """Close the database; committed results stay."""
        with self._lock:
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

    # ------------------------------------------------------------ writing

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.readonly:
            raise StoreError(f"history database {self.path} was opened read-only")
        with self._lock, _errors(self.path):
            # IMMEDIATE takes the write lock up front, so two writers queue on
            # the busy timeout instead of deadlocking on a lock upgrade.
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.rollback()
                raise
            self._db.commit()

    def start_run(
        self, kind: RunKind | str, hosts: int, policy_digest: str, argv: Sequence[str] = ()
    ) -> int:
        """Record the start of a run and return its id; the run is incomplete until finished.

        Raises:
            ValueError: ``kind`` is neither certify nor drift.
        """
        if kind not in RUN_KINDS:
            raise ValueError(f"run kind {kind!r} is not one of {', '.join(RUN_KINDS)}")
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO runs (kind, started_at, hosts, policy_digest, argv, tool_version, pid)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    kind,
                    _now(),
                    hosts,
                    policy_digest,
                    json.dumps(list(argv)),
                    __version__,
                    os.getpid(),
                ),
            )
            run_id = cursor.lastrowid
        if run_id is None:  # pragma: no cover - an INSERT into a rowid table always sets it
            raise StoreError(f"history database {self.path} did not number the new run")
        return run_id

    def record_result(
        self, run_id: int, result: NodeResult, certificate: Certificate | None = None
    ) -> None:
        """Commit one host's result, its findings and its certificate in one transaction.

        Recording a host again in the same run replaces its earlier result: a
        fleet run commits each host as it arrives, then its final judgement
        (after the fleet comparison) with the certificate, if it earned one.

        Raises:
            ValueError: the certificate is for another host.
            StoreError: no run has that id, or the database failed.
        """
        if certificate is not None and certificate.hostname != result.hostname:
            raise ValueError(
                f"certificate of {certificate.hostname} cannot be recorded "
                f"with the result of {result.hostname}"
            )
        with self._write() as db:
            if db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise StoreError(f"history database {self.path} has no run {run_id}")
            earlier = [
                row[0]
                for row in db.execute(
                    "SELECT id FROM results WHERE run_id = ? AND hostname = ?",
                    (run_id, result.hostname),
                )
            ]
            for table in ("certificates", "findings"):
                db.executemany(f"DELETE FROM {table} WHERE result_id = ?", [(i,) for i in earlier])  # noqa: S608 - table names are constants
            db.executemany("DELETE FROM results WHERE id = ?", [(i,) for i in earlier])
            now = _now()
            cursor = db.execute(
                "INSERT INTO results"
                " (run_id, hostname, recorded_at, verdict, sku, summary, result_json)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    result.hostname,
                    now,
                    result.verdict.value,
                    result.sku,
                    result.summary,
                    json.dumps(to_dict(result), sort_keys=True),
                ),
            )
            result_id = cursor.lastrowid
            db.executemany(
                'INSERT INTO findings (result_id, "check", severity, gpu_index, message)'
                " VALUES (?, ?, ?, ?, ?)",
                [
                    (result_id, f.check, f.severity.value, f.gpu_index, f.message)
                    for f in result.findings
                ],
            )
            if certificate is not None:
                db.execute(
                    "INSERT INTO certificates (result_id, hostname, issued_at, digest, json)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (
                        result_id,
                        certificate.hostname,
                        certificate.issued_at,
                        certificate.digest,
                        certificate_to_json(certificate),
                    ),
                )

    def finish_run(self, run_id: int, interrupted: bool = False) -> None:
        """Close a run as complete, or as interrupted when it was stopped before every host.

        Raises:
            StoreError: no run has that id.
        """
        with self._write() as db:
            cursor = db.execute(
                "UPDATE runs SET finished_at = ?, status = ? WHERE id = ?",
                (_now(), "interrupted" if interrupted else "complete", run_id),
            )
            if cursor.rowcount == 0:
                raise StoreError(f"history database {self.path} has no run {run_id}")

    # ------------------------------------------------------------ reading

    def latest_certificate(self, hostname: str) -> Certificate | None:
        """The most recently issued certificate of a host, or None when it was never certified.

        Raises:
            StoreError: the stored certificate cannot be read back.
        """
        with self._lock, _errors(self.path):
            row = self._db.execute(
                "SELECT json FROM certificates WHERE hostname = ?"
                " ORDER BY issued_at DESC, id DESC LIMIT 1",
                (hostname,),
            ).fetchone()
        if row is None:
            return None
        try:
            return certificate_from_json(row[0])
        except BadInputError as exc:
            raise StoreError(
                f"history database {self.path} holds an unreadable certificate of {hostname}: {exc}"
            ) from None

    def history(self, hostname: str | None = None, limit: int = 50) -> list[HistoryRow]:
        """Past results, newest run first; runs with no result yet are listed when no host is asked.

        Args:
            hostname: only this host's results.
            limit: at most this many rows.
        """
        where = "WHERE r.hostname = ?" if hostname is not None else ""
        join = "JOIN" if hostname is not None else "LEFT JOIN"
        query = f"""
            SELECT u.id, u.kind, u.started_at, u.finished_at, u.status,
                   r.hostname, r.verdict, r.summary, r.recorded_at,
                   (SELECT COUNT(*) FROM findings f
                     WHERE f.result_id = r.id AND f.severity = ?),
                   (SELECT COUNT(*) FROM findings f
                     WHERE f.result_id = r.id AND f.severity = ?)
            FROM runs u {join} results r ON r.run_id = u.id
            {where}
            ORDER BY u.id DESC, r.id ASC
            LIMIT ?
        """  # noqa: S608 - only fixed fragments are pasted; values are bound
        params: list[object] = [Severity.FAIL.value, Severity.UNKNOWN.value]
        if hostname is not None:
            params.append(hostname)
        params.append(max(0, limit))
        with self._lock, _errors(self.path):
            rows = self._db.execute(query, params).fetchall()
        return [
            HistoryRow(
                run_id=row[0],
                kind=row[1],
                started_at=row[2],
                finished_at=row[3],
                status="incomplete" if row[4] == "running" else row[4],
                hostname=row[5],
                verdict=row[6],
                summary=row[7] or "",
                recorded_at=row[8],
                failed=row[9],
                unknown=row[10],
            )
            for row in rows
        ]

    def integrity_check(self) -> str:
        """SQLite's own integrity check: ``ok`` or the first problem it found."""
        with self._lock, _errors(self.path):
            row = self._db.execute("PRAGMA integrity_check").fetchone()
        return str(row[0])


def history_row_to_dict(row: HistoryRow) -> dict[str, object]:
    """A history row as JSON-ready data."""
    return dataclasses.asdict(row)


# ---------------------------------------------------------------- helpers


@contextlib.contextmanager
def _errors(path: Path) -> Iterator[None]:
    """Turn SQLite's exceptions into one-line StoreErrors naming the file."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        raise StoreError(f"history database {path}: {one_line(exc)}") from None
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"history database {path} is damaged ({one_line(exc)}): "
            "move it away and start a new one with --db"
        ) from None


def _connect(path: Path, mode: str) -> sqlite3.Connection:
    uri = f"{path.resolve().as_uri()}?mode={mode}"
    with _errors(path):
        connection = sqlite3.connect(
            uri,
            uri=True,
            timeout=BUSY_TIMEOUT_S,
            # Transactions are begun explicitly (BEGIN IMMEDIATE).
            isolation_level=None,
            check_same_thread=False,
        )
    return connection


def _check_header(path: Path) -> None:
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise StoreError(f"cannot read history database {path}: {exc.strerror}") from None
    if head != _SQLITE_MAGIC:
        raise StoreError(
            f"{path} is not a gpuready history database (not SQLite): "
            "give another file with --db, or move it away"
        )


def _check_identity(db: sqlite3.Connection, path: Path, *, allow_empty: bool) -> int:
    """The schema version of a database that is ours; empty is allowed when we may create.

    Raises:
        StoreError: another program's database, a newer schema, or a damaged file.
    """
    with _errors(path):
        # One statement is one read snapshot: read one by one, another process's
        # creation could commit between them (stamp 0 seen, then its tables).
        app_id, version, tables = db.execute(
            "SELECT (SELECT application_id FROM pragma_application_id),"
            " (SELECT user_version FROM pragma_user_version),"
            " (SELECT COUNT(*) FROM sqlite_master)"
        ).fetchone()
    if app_id != APPLICATION_ID:
        if allow_empty and app_id == 0 and version == 0 and tables == 0:
            return 0
        raise StoreError(
            f"{path} is an SQLite database of another program, not gpuready history: "
            "give another file with --db"
        )
    if version > schema_version():
        raise StoreError(
            f"history database {path} was written by a newer gpuready (schema {version}, "
            f"this one knows up to {schema_version()}): upgrade gpuready"
        )
    return int(version)


def _prepare(db: sqlite3.Connection, path: Path) -> None:
    """WAL mode, foreign keys, and the schema brought up to date."""
    with _errors(path):
        # Persistent in the file; a no-op once set.
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        # Checked again under the write lock: another process may have created
        # or upgraded the database since this one looked.
        db.execute("BEGIN IMMEDIATE")
        try:
            version = _check_identity(db, path, allow_empty=True)
            for number in range(version + 1, schema_version() + 1):
                for statement in MIGRATIONS[number - 1]:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number:d}")
            if version == 0:
                db.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")
        except BaseException:
            db.rollback()
            raise
        db.commit()
