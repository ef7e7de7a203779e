"""History: runs, per-node results, findings and certificates in SQLite.

One database file (``--db``, default under the user's state directory) in WAL
mode, so readers never block the writer and several gpuready processes may
write at once: each write is one short ``BEGIN IMMEDIATE`` transaction and
SQLite's busy handler makes the others wait their turn, retrying with backoff
for a bounded time (:data:`DEFAULT_RETRY_S`, ``$GPUREADY_DB_RETRY_S``).

Nothing measured is lost to the database. A run whose writes still fail (the
database stays locked by another program, or is full or damaged) is spooled:
the run and every result it records are written, atomically, to a pending
file beside the database (``<db>.pending/<time>-<pid>-<n>.json``), and the
next process that opens the database for writing imports it (the file is
deleted only once its import has committed; importing twice changes nothing).

Each host's result is committed on its own as it arrives; a fleet's final
judgements go in one transaction (:meth:`Store.record_results`). A run is created
``running`` and only :meth:`Store.finish_run` closes it. Its process holds an
OS lock (``flock``) on ``<db>.run-<id>.lock`` for the run's life, so a reader
tells a live run (``incomplete``) from one whose process died (killed, power
lost): that one reads ``interrupted``, and is marked so by the next writer.

What is kept, and why (schema 2). A judged 8-GPU result is 90-650 KB of JSON
(the burn's telemetry samples are most of it; 300 s of burn is 650 KB) with ~270
findings, nearly all PASS; its certificate ~50 KB. Schema 1 stored both as text
and every finding as a row: 115 KB per node per run without a burn, 1.15 GB at
10,000 runs. Schema 2 keeps, per result:

- the full result JSON, compressed (see :func:`pack`), its facts apart
  (``facts_packed``, encoded once for a host's arrival and final judgement) from
  the rest (``result_packed``): every measurement stays, readable with
  :meth:`Store.result`. Compressed rather than
  kept only for failed runs, because a healthy run is the evidence drift and
  RMA look back to, and telemetry compresses 20-60x;
- verdict, summary, and the FAIL and UNKNOWN counts as columns: the history query
  reads one row per result and counts nothing;
- a finding row only for what did not pass (what people query by check); the
  PASS findings as counts per check (``passed``, a small JSON object);
- the certificate's exact JSON text, compressed (``json_packed``): unpacked it is
  byte for byte the text its digest and signature were made over.

That is 5-15 KB per node per run (tests/test_store_plans.py holds it under 20 KB;
bench/store.py measures it). Every query the store runs is served by an index
(the same test reads each one's ``EXPLAIN QUERY PLAN``), so a run's writes and a
host's history cost the same on a store of 10 runs or 10,000.

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
import fcntl
import json
import math
import os
import re
import secrets
import socket
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Union

from validator import __version__
from validator import fields as doc
from validator.certificate import (
    Certificate,
    certificate_from_json,
    certificate_text,
    packed_certificate,
)
from validator.codec import pack, unpack
from validator.errors import BadInputError, CouldNotRunError, UnsafePathError
from validator.files import (
    STALE_AFTER_S,
    Folder,
    process_alive,
    refusal,
    remove_file,
    write_atomic,
)
from validator.model import (
    PROVENANCES,
    UNKNOWN_PROVENANCE,
    NodeResult,
    SchemaError,
    Severity,
    Verdict,
    from_dict,
    provenance_of,
    to_dict,
)
from validator.packed import packed_facts, packed_result, with_samples
from validator.text import one_line

# "gpur" in ASCII: PRAGMA application_id, so a file is known as ours before any table is read.
APPLICATION_ID = 0x67707572

# How long a write waits for another process's transaction before the run is
# spooled to a pending file; $GPUREADY_DB_RETRY_S overrides it (tests use a short one).
DEFAULT_RETRY_S = 30.0
RETRY_ENV = "GPUREADY_DB_RETRY_S"
MAX_RETRY_S = 3600.0
# Importing pending runs and marking dead ones is housekeeping: never worth a long wait.
HOUSEKEEPING_WAIT_S = 1.0

_SQLITE_MAGIC = b"SQLite format 3\x00"
_MAX_SQL_INT = 2**63 - 1


class RunKind(str, enum.Enum):
    """What a run in the history was."""

    CERTIFY = "certify"
    DRIFT = "drift"

    def __str__(self) -> str:
        return self.value


RUN_KINDS = tuple(kind.value for kind in RunKind)
RUN_STATUSES = ("running", "complete", "interrupted")


class StoreError(BadInputError):
    """The history database cannot be used; one line naming the file and what to do."""


class NoHistoryError(StoreError):
    """There is no history database yet at the path asked to be read."""


class NotStoredError(CouldNotRunError):
    """A run was measured but could be stored neither in the database nor in a pending file."""


# ---------------------------------------------------------------- schema

# A migration step is an SQL statement, or a function given the connection for
# what SQL alone cannot do (packing stored text); both run in the one transaction.
MigrationStep = Union[str, Callable[[sqlite3.Connection], None]]


def _passed_counts(checks: Sequence[str]) -> str:
    """PASS findings summarised: ``{"check": count}``, compact, keys sorted."""
    counts: dict[str, int] = {}
    for check in checks:
        counts[check] = counts.get(check, 0) + 1
    return json.dumps(dict(sorted(counts.items())), separators=(",", ":"))


def _split_result(text: str) -> tuple[str, str]:
    """A result's JSON text as (the result without its facts, its facts), each keys sorted.

    Text that is not JSON (a damaged row) is kept as it was, with no facts: the
    upgrade goes on, and :meth:`Store.result` reports that one result unreadable.
    """
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return text, "null"
    facts = data.pop("facts", None) if isinstance(data, dict) else None
    return json.dumps(data, sort_keys=True), json.dumps(facts, sort_keys=True)


_MIGRATION_BATCH = 500


def _batches(db: sqlite3.Connection, select: str) -> Iterator[list[Any]]:
    """The rows of ``select`` a batch at a time: an upgrade never holds a whole table.

    ``select`` names the id first and ends ``WHERE id > ? ORDER BY id LIMIT ?``.
    """
    last = 0
    while True:
        rows = db.execute(select, (last, _MIGRATION_BATCH)).fetchall()
        if not rows:
            return
        last = rows[-1][0]
        yield rows


def _v2_copy_packed(db: sqlite3.Connection) -> None:
    """Schema 1 to 2: each result and certificate copied, its JSON text packed as it was.

    Counts and PASS summaries come from schema 1's findings rows (which held every
    finding); the texts are kept byte for byte, so a certificate still verifies.
    """
    for rows in _batches(
        db,
        "SELECT id, run_id, hostname, recorded_at, verdict, sku, summary, result_json"
        " FROM results WHERE id > ? ORDER BY id LIMIT ?",
    ):
        copied = []
        for row in rows:
            severities: dict[str, int] = {}
            passed: list[str] = []
            for check, severity in db.execute(
                'SELECT "check", severity FROM findings WHERE result_id = ?', (row[0],)
            ):
                severities[severity] = severities.get(severity, 0) + 1
                if severity == Severity.PASS.value:
                    passed.append(check)
            rest, facts = _split_result(row[7])
            copied.append(
                (
                    *row[:7],
                    severities.get(Severity.FAIL.value, 0),
                    severities.get(Severity.UNKNOWN.value, 0),
                    _passed_counts(passed),
                    pack(rest),
                    pack(facts),
                )
            )
        db.executemany(
            "INSERT INTO results_v2 (id, run_id, hostname, recorded_at, verdict, sku, summary,"
            " failed, unknown, passed, result_packed, facts_packed)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            copied,
        )
    for rows in _batches(
        db,
        "SELECT id, result_id, hostname, issued_at, digest, json FROM certificates"
        " WHERE id > ? ORDER BY id LIMIT ?",
    ):
        db.executemany(
            "INSERT INTO certificates_v2 (id, result_id, hostname, issued_at, digest, json_packed)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [(*row[:5], pack(row[5])) for row in rows],
        )


def _stored_provenance(facts_packed: object) -> str | None:
    """The provenance a stored result's facts name; None when they cannot be read."""
    try:
        data = json.loads(_stored_text(facts_packed))
    except (BadInputError, ValueError, RecursionError):
        return None
    source = data.get("source") if isinstance(data, dict) else None
    return source if source in PROVENANCES else UNKNOWN_PROVENANCE


def _v3_provenance(db: sqlite3.Connection) -> None:
    """Schema 2 to 3: each result's provenance (live, capture, simulate), read from its facts."""
    for rows in _batches(
        db, "SELECT id, facts_packed FROM results WHERE id > ? ORDER BY id LIMIT ?"
    ):
        db.executemany(
            "UPDATE results SET provenance = ? WHERE id = ?",
            [(_stored_provenance(row[1]), row[0]) for row in rows],
        )


# Migration N (1-based) takes the schema from version N-1 to N. Append only:
# a database records the version it reached in PRAGMA user_version, and every
# migration after it runs, in order, in the same transaction (with foreign keys
# checked once at its end, so a table can be rebuilt: SQLite cannot drop a column
# everywhere we run; DROP COLUMN came with 3.35).
MIGRATIONS: tuple[tuple[MigrationStep, ...], ...] = (
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
    (
        # The new tables, filled from the old ones, then put in their place.
        # AUTOINCREMENT: an id is never handed out again once pruning deleted its run
        # (plain INTEGER PRIMARY KEY reuses the highest freed one), so a pending
        # file's db_run_id can never name a newer, unrelated run.
        """
        CREATE TABLE runs_v2 (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
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
        # Inserting the ids sets the sequence past the highest one.
        "INSERT INTO runs_v2 (id, kind, started_at, finished_at, status, hosts, policy_digest,"
        " argv, tool_version, pid) SELECT id, kind, started_at, finished_at, status, hosts,"
        " policy_digest, argv, tool_version, pid FROM runs ORDER BY id",
        """
        CREATE TABLE results_v2 (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id),
            hostname TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            verdict TEXT NOT NULL,
            sku TEXT,
            summary TEXT NOT NULL,
            failed INTEGER NOT NULL,
            unknown INTEGER NOT NULL,
            passed TEXT NOT NULL,
            result_packed BLOB NOT NULL,
            facts_packed BLOB NOT NULL
        )
        """,
        """
        CREATE TABLE certificates_v2 (
            id INTEGER PRIMARY KEY,
            result_id INTEGER REFERENCES results(id),
            hostname TEXT NOT NULL,
            issued_at TEXT NOT NULL,
            digest TEXT NOT NULL,
            json_packed BLOB NOT NULL
        )
        """,
        _v2_copy_packed,
        "DELETE FROM findings WHERE severity = 'PASS'",
        "DROP TABLE certificates",
        "DROP TABLE results",
        "DROP TABLE runs",
        "ALTER TABLE runs_v2 RENAME TO runs",
        "ALTER TABLE results_v2 RENAME TO results",
        "ALTER TABLE certificates_v2 RENAME TO certificates",
        # history of all hosts (newest run first, its hosts in order) and a run's deletes
        "CREATE INDEX results_by_run ON results(run_id, id)",
        # history of one host (newest first), and a host's earlier result in a run
        "CREATE INDEX results_by_host ON results(hostname, run_id)",
        "CREATE INDEX certificates_by_host ON certificates(hostname, issued_at, id)",
        "CREATE INDEX certificates_by_result ON certificates(result_id)",
        # the few running runs, found without reading the others
        "CREATE INDEX runs_running ON runs(status) WHERE status = 'running'",
        # a pending run found again by its start; pruning by age
        "CREATE INDEX runs_by_start ON runs(started_at)",
    ),
    (
        # Where each result's facts came from; NULL only where its facts cannot be read.
        "ALTER TABLE results ADD COLUMN provenance TEXT",
        _v3_provenance,
        # A host's certification attempts in time order, its name in any case (host
        # names are case-insensitive): what revokes a certificate (Store.latest_attempt).
        "CREATE INDEX results_by_host_nocase"
        " ON results(hostname COLLATE NOCASE, recorded_at, run_id)",
    ),
)
# Run ownership (the lock files) and pending runs live beside the database, not
# in it: no schema change, so an older gpuready still reads a newer one's history.


def schema_version() -> int:
    """The schema version this gpuready writes: the number of migrations."""
    return len(MIGRATIONS)


def default_db_path() -> Path:
    """``$XDG_STATE_HOME/gpuready/history.db``, else ``~/.local/state/gpuready/history.db``."""
    state = os.environ.get("XDG_STATE_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    base = Path(state) if state and Path(state).is_absolute() else Path.home() / ".local" / "state"
    return base / "gpuready" / "history.db"


def pending_dir(db_path: Path) -> Path:
    """Where runs that could not be written to ``db_path`` wait: ``<db>.pending/``."""
    return db_path.with_name(db_path.name + ".pending")


def run_lock_path(db_path: Path, run_id: int) -> Path:
    """The file whose lock the process of run ``run_id`` holds: ``<db>.run-<id>.lock``."""
    return db_path.with_name(f"{db_path.name}.run-{run_id:d}.lock")


def retry_budget(seconds: float | None = None) -> float:
    """How long a write waits for the database: ``seconds``, else ``$GPUREADY_DB_RETRY_S``.

    Raises:
        StoreError: the variable is not a number of seconds from 0 to an hour.
    """
    if seconds is not None:
        return min(max(0.0, float(seconds)), MAX_RETRY_S)
    text = os.environ.get(RETRY_ENV, "").strip()
    if not text:
        return DEFAULT_RETRY_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= MAX_RETRY_S:  # NaN fails too
        raise StoreError(
            f"{RETRY_ENV}={doc.excerpt(text)} is not a number of seconds from 0 to "
            f"{MAX_RETRY_S:g}; set it to e.g. 30, or unset it"
        )
    return value


# ---------------------------------------------------------------- rows


@dataclass(frozen=True)
class HistoryRow:
    """One host's result in one run; a run with no result yet has one row without a host."""

    run_id: int
    kind: str  # certify | drift
    started_at: str
    finished_at: str | None
    status: str  # complete | incomplete (its process still runs) | interrupted
    hostname: str | None
    verdict: str | None  # CERTIFIED | NOT_CERTIFIED | UNKNOWN
    summary: str
    failed: int  # FAIL findings
    unknown: int  # UNKNOWN findings
    recorded_at: str | None
    provenance: str | None = None  # live | capture | simulate | unknown; None: no host
    # What became of the certificate this result was issued: "current", "replaced" (by
    # a later one) or "revoked" (by a later certification that did not certify the
    # node), by run certificate_run at certificate_changed_at; None: no certificate.
    certificate: str | None = None
    certificate_run: int | None = None
    certificate_changed_at: str | None = None


@dataclass(frozen=True)
class CertifyAttempt:
    """A host's latest certification attempt, as drift weighs its certificate against it."""

    run_id: int
    hostname: str  # as that run named it (perhaps in another case)
    verdict: str  # CERTIFIED | NOT_CERTIFIED | UNKNOWN
    recorded_at: str
    summary: str
    failed: tuple[tuple[str, int | None], ...]  # the checks that failed, each with its GPU

    @property
    def certified(self) -> bool:
        """Whether the attempt certified the node."""
        return self.verdict == Verdict.CERTIFIED.value


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------- run ownership

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


# ---------------------------------------------------------------- pending runs

PENDING_FORMAT = "gpuready-pending-run"
PENDING_VERSION = 1

_PENDING_RUN = doc.Document(
    (
        doc.Field("db_run_id", int, minimum=1, nullable=True, required=True),
        doc.Field("kind", str, choices=RUN_KINDS, required=True),
        doc.Field("started_at", str, non_empty=True, required=True),
        doc.Field("finished_at", str, nullable=True),
        doc.Field("status", str, choices=RUN_STATUSES, required=True),
        doc.Field("hosts", int, minimum=0, required=True),
        doc.Field("policy_digest", str, required=True),
        doc.Field("argv", list, item=doc.Field("arg", str), required=True),
        doc.Field("tool_version", str, required=True),
        doc.Field("pid", int, minimum=0, nullable=True),
        doc.Field("hostname", str, nullable=True),
    ),
    noun="field",
    wanted="a JSON object",
)
_PENDING_RESULT = doc.Document(
    (
        doc.Field("result", dict, required=True),
        doc.Field("certificate", str, nullable=True, required=True),
        doc.Field("recorded_at", str, non_empty=True, required=True),
    ),
    noun="field",
    wanted="a JSON object",
)
PENDING_FIELDS = doc.Document(
    (
        doc.Field("format", str, choices=(PENDING_FORMAT,), required=True),
        doc.Field("version", int, minimum=1, maximum=PENDING_VERSION, required=True),
        doc.Field("database", str),
        doc.Field("reason", str),
        doc.Field("run", dict, document=_PENDING_RUN, required=True),
        doc.Field(
            "results",
            list,
            required=True,
            item=doc.Field("result", dict, document=_PENDING_RESULT),
        ),
    ),
    noun="field",
    wanted="a JSON object",
)


class _PendingError(ValueError):
    """A pending file that cannot be imported; the message is one line."""


@dataclass(frozen=True)
class _Recorded:
    """One host's result as a run records it."""

    result: NodeResult
    certificate: Certificate | None
    recorded_at: str

    def to_json(self) -> dict[str, object]:
        return {
            "result": to_dict(with_samples(self.result)),  # a held result's samples too
            "certificate": certificate_text(self.certificate) if self.certificate else None,
            "recorded_at": self.recorded_at,
        }


@dataclass
class _Spool:
    """A run whose writes go to a pending file, kept whole in memory and on disk."""

    path: Path
    run: dict[str, Any]
    reason: str
    results: dict[str, _Recorded] = field(default_factory=dict)
    announced: bool = False
    error: str | None = None  # why the file could not be written, the last time it was tried

    def document(self, database: Path) -> dict[str, object]:
        return {
            "format": PENDING_FORMAT,
            "version": PENDING_VERSION,
            "database": str(database),
            "reason": self.reason,
            "run": self.run,
            "results": [recorded.to_json() for recorded in self.results.values()],
        }


def read_pending(path: Path) -> tuple[dict[str, Any], list[_Recorded]]:
    """A pending file's run and results, every field checked.

    Raises:
        _PendingError: not readable, not JSON, or not a pending run.
    """
    source = doc.Source(str(path), error=_PendingError)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _PendingError(f"{path}: cannot be read ({one_line(exc)})") from None
    try:
        data = doc.load_json(text)
    except doc.LoadError as exc:
        if exc.syntax:
            raise _PendingError(f"{path}: not JSON ({exc.problem})") from None
        raise source.loaded(exc) from None
    checked = PENDING_FIELDS.check(data, source)
    recorded = []
    for index, entry in enumerate(checked["results"]):
        try:
            result = from_dict(NodeResult, entry["result"])
            text = entry["certificate"]
            certificate = certificate_from_json(text) if text is not None else None
        except (SchemaError, BadInputError) as exc:
            raise _PendingError(f"{path}: results[{index}]: {one_line(exc)}") from None
        recorded.append(_Recorded(result, certificate, entry["recorded_at"]))
    return dict(checked["run"]), recorded


class _Unwritable(Exception):
    """The database refused a write (locked, full, damaged): the run goes to a pending file."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------- the queries

_HISTORY_COLUMNS = """
    SELECT u.id, u.kind, u.started_at, u.finished_at, u.status,
           r.hostname, r.verdict, r.summary, r.recorded_at,
           COALESCE(r.failed, 0), COALESCE(r.unknown, 0), u.pid, r.id, r.provenance
"""
# Walks results_by_host backwards from the host's newest run: LIMIT rows read, no sort.
# (A host has one result per run: recording it again replaces the earlier one.)
HISTORY_OF_HOST = (
    _HISTORY_COLUMNS
    + """
    FROM results r JOIN runs u ON u.id = r.run_id
    WHERE r.hostname = ?
    ORDER BY r.run_id DESC, r.id DESC
    LIMIT ?
"""
)
# Runs newest first by their key, each run's hosts in recording order by results_by_run.
HISTORY_OF_ALL = (
    _HISTORY_COLUMNS
    + """
    FROM runs u LEFT JOIN results r ON r.run_id = u.id
    ORDER BY u.id DESC, r.id ASC
    LIMIT ?
"""
)


# A host's certification attempts, its name in any case, newest first, by
# results_by_host_nocase. An UNKNOWN in a run cut short (Ctrl-C) is no attempt: it
# judged nothing, and counting it would revoke a whole fleet's certificates at once.
_ATTEMPTS = """
    SELECT r.run_id, r.hostname, r.verdict, r.recorded_at, r.summary, r.id
    FROM results r JOIN runs u ON u.id = r.run_id
    WHERE r.hostname = ? COLLATE NOCASE AND u.kind = 'certify'
      AND NOT (r.verdict = 'UNKNOWN' AND u.status = 'interrupted')
"""
LATEST_ATTEMPT = _ATTEMPTS + " ORDER BY r.recorded_at DESC, r.run_id DESC LIMIT 1"
# The first attempt after a certificate's own: what replaced or revoked it.
NEXT_ATTEMPT = (
    _ATTEMPTS
    + " AND r.id != ? AND (r.recorded_at, r.run_id) > (?, ?)"
    + " ORDER BY r.recorded_at ASC, r.run_id ASC LIMIT 1"
)
FAILED_CHECKS = (
    'SELECT "check", gpu_index FROM findings WHERE result_id = ? AND severity = \'FAIL\''
)
CERTIFICATE_OF_RESULT = "SELECT id FROM certificates WHERE result_id = ? LIMIT 1"

RESULT_OF_HOST_IN_RUN = (
    "SELECT result_packed, facts_packed FROM results WHERE hostname = ? AND run_id = ?"
    " ORDER BY id DESC LIMIT 1"
)
# The keep_runs-th newest run: reads that many keys of runs, newest first, and stops.
PRUNE_NTH_NEWEST_RUN = "SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?"
# Whether a run holds a certificate no later one of its host replaced.
PRUNE_HOLDS_LATEST = """
    SELECT 1 FROM results r JOIN certificates c ON c.result_id = r.id
    WHERE r.run_id = ? AND NOT EXISTS (
        SELECT 1 FROM certificates n
        WHERE n.hostname = c.hostname AND (n.issued_at, n.id) > (c.issued_at, c.id)
    )
    LIMIT 1
"""
_PRUNE_BATCH = 100


@dataclass(frozen=True)
class PruneOutcome:
    """What :meth:`Store.prune` removed (or, in a dry run, would remove)."""

    runs: tuple[int, ...]  # the runs removed, oldest first
    results: int  # their results (each with its findings)
    certificates: int
    kept: tuple[int, ...]  # runs the policy would remove, kept for a host's latest certificate
    dry_run: bool


class _RolledBack(Exception):
    """A dry run's deletions, undone; carries what they counted."""

    def __init__(self, counts: tuple[int, int]) -> None:
        super().__init__("dry run")
        self.counts = counts


def _delete_runs(db: sqlite3.Connection, run_ids: Sequence[int]) -> tuple[int, int]:
    """Delete runs with their results, findings and certificates: (results, certificates)."""
    results = certificates = 0
    for run_id in run_ids:
        ids = [(row[0],) for row in db.execute(RESULTS_OF_RUN, (run_id,))]
        if ids:
            certificates += db.executemany(
                "DELETE FROM certificates WHERE result_id = ?", ids
            ).rowcount
            db.executemany("DELETE FROM findings WHERE result_id = ?", ids)
            results += db.executemany("DELETE FROM results WHERE id = ?", ids).rowcount
        db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
    return results, certificates


RESULTS_OF_RUN = "SELECT id FROM results WHERE run_id = ?"


def _stored_text(value: object) -> str:
    """A stored JSON text: packed bytes (schema 2), or text as it was written."""
    if isinstance(value, bytes):
        try:
            return unpack(value)
        except ValueError as exc:
            raise BadInputError(f"stored text cannot be unpacked ({exc})") from None
    return str(value)


# ---------------------------------------------------------------- the store


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
            # Never a reason to stop the run: its verdict still counts (validator.operations).
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


def _store_bytes(path: Path) -> int:
    """The database file and its write-ahead log, in bytes."""
    total = 0
    for part in (path, path.with_name(path.name + "-wal")):
        with contextlib.suppress(OSError):
            total += part.stat().st_size
    return total


def _writer_gone(path: Path, run: dict[str, Any]) -> bool:
    """Whether the process spooling a running run to ``path`` is gone.

    Its process is asked where it can be (this host); a file of another host,
    or of a process id now reused, counts as abandoned once untouched for an
    hour. Importing one too early is harmless: a writer that lives on rewrites
    the file, and the import of the newer file updates the same run.
    """
    if not _process_alive(run.get("pid"), run.get("hostname")):
        return True
    try:
        return time.time() - path.stat().st_mtime > STALE_AFTER_S
    except OSError:
        return False


def _shown_status(stored: str, owner_alive: bool) -> str:
    if stored != "running":
        return stored
    return "incomplete" if owner_alive else "interrupted"


def _argv(text: object) -> list[str]:
    try:
        value = json.loads(str(text))
    except ValueError:
        return []
    return [str(arg) for arg in value] if isinstance(value, list) else []


@dataclass(frozen=True)
class _Encoded:
    """A recorded result as its rows will hold it: encoded before the write lock is taken."""

    recorded: _Recorded
    result_packed: bytes  # the result without its facts
    facts_packed: bytes
    failed: int
    unknown: int
    passed: str
    findings: tuple[tuple[str, str, int | None, str], ...]  # check, severity, GPU, message
    certificate_packed: bytes | None


def _encode(recorded: _Recorded) -> _Encoded:
    result, certificate = recorded.result, recorded.certificate
    kept = tuple(
        (f.check, f.severity.value, f.gpu_index, f.message)
        for f in result.findings
        if f.severity is not Severity.PASS
    )
    return _Encoded(
        recorded=recorded,
        result_packed=packed_result(result),
        facts_packed=packed_facts(result.facts),
        failed=sum(1 for f in result.findings if f.severity is Severity.FAIL),
        unknown=sum(1 for f in result.findings if f.severity is Severity.UNKNOWN),
        passed=_passed_counts([f.check for f in result.findings if f.severity is Severity.PASS]),
        findings=kept,
        certificate_packed=packed_certificate(certificate) if certificate else None,
    )


def _insert_result(db: sqlite3.Connection, run_id: int, encoded: _Encoded) -> None:
    """Replace a host's result in a run with ``encoded``, its findings and certificate."""
    recorded = encoded.recorded
    result, certificate = recorded.result, recorded.certificate
    earlier = [
        (row[0],)
        for row in db.execute(
            "SELECT id FROM results WHERE hostname = ? AND run_id = ?", (result.hostname, run_id)
        )
    ]
    if earlier:
        db.executemany("DELETE FROM certificates WHERE result_id = ?", earlier)
        db.executemany("DELETE FROM findings WHERE result_id = ?", earlier)
        db.executemany("DELETE FROM results WHERE id = ?", earlier)
    cursor = db.execute(
        "INSERT INTO results (run_id, hostname, recorded_at, verdict, sku, summary,"
        " failed, unknown, passed, result_packed, facts_packed, provenance)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            result.hostname,
            recorded.recorded_at,
            result.verdict.value,
            result.sku,
            result.summary,
            encoded.failed,
            encoded.unknown,
            encoded.passed,
            encoded.result_packed,
            encoded.facts_packed,
            provenance_of(result.facts),
        ),
    )
    result_id = cursor.lastrowid
    if encoded.findings:
        db.executemany(
            'INSERT INTO findings (result_id, "check", severity, gpu_index, message)'
            " VALUES (?, ?, ?, ?, ?)",
            [(result_id, *finding) for finding in encoded.findings],
        )
    if certificate is not None:
        db.execute(
            "INSERT INTO certificates (result_id, hostname, issued_at, digest, json_packed)"
            " VALUES (?, ?, ?, ?, ?)",
            (
                result_id,
                certificate.hostname,
                certificate.issued_at,
                certificate.digest,
                encoded.certificate_packed,
            ),
        )


def _import_run(db: sqlite3.Connection, run: dict[str, Any], results: list[_Recorded]) -> int:
    """Write a pending run into the database (inside the caller's transaction).

    Idempotent: the run is found again by its database id, or by what it was
    (kind, start, process, command line), so a file imported twice adds nothing.
    """
    argv = json.dumps(run["argv"])
    target: int | None = None
    if run["db_run_id"] is not None:
        found = db.execute("SELECT id FROM runs WHERE id = ?", (run["db_run_id"],)).fetchone()
        target = found[0] if found else None
    if target is None:
        found = db.execute(
            "SELECT id FROM runs WHERE kind = ? AND started_at = ? AND pid IS ? AND argv = ?"
            " AND tool_version = ? ORDER BY id LIMIT 1",
            (run["kind"], run["started_at"], run.get("pid"), argv, run["tool_version"]),
        ).fetchone()
        target = found[0] if found else None
    if target is None:
        cursor = db.execute(
            "INSERT INTO runs (kind, started_at, hosts, policy_digest, argv, tool_version, pid)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                run["kind"],
                run["started_at"],
                run["hosts"],
                run["policy_digest"],
                argv,
                run["tool_version"],
                run.get("pid"),
            ),
        )
        target = cursor.lastrowid
    assert target is not None  # noqa: S101 - an INSERT into a rowid table sets it
    for recorded in results:
        _insert_result(db, target, _encode(recorded))
    # A run still "running" in its file is one whose process died (live ones wait).
    status = "interrupted" if run["status"] == "running" else run["status"]
    db.execute(
        "UPDATE runs SET status = ?, finished_at = ? WHERE id = ?",
        (status, run.get("finished_at"), target),
    )
    return target


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


def _has_database(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def _check_folder(path: Path) -> None:
    """Refuse a database path whose folder could never be made (a file in the way)."""
    for folder in path.parents:
        if folder.exists():
            if not folder.is_dir():
                raise StoreError(
                    f"cannot create the folder of history database {path}: {folder} is not "
                    "a directory; give another --db"
                )
            return


def _open_writable(where: Path, budget: float) -> sqlite3.Connection:
    """A read-write connection, the database created or upgraded as needed.

    Raises:
        StoreError: its folder cannot be made, or the file is not usable.
    """
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create the folder of history database {where}: {exc.strerror}"
        ) from None
    connection = _connect(where, "rwc")
    try:
        # Creating or upgrading waits for the write lock as long as any write does.
        with _errors(where):
            connection.execute(f"PRAGMA busy_timeout = {int(budget * 1000):d}")
        _prepare(connection, where)
    except BaseException:
        connection.close()
        raise
    return connection


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
        # Persistent in the file; a no-op once set (and then it takes no lock).
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        # Up to date already (one statement, one snapshot): no write lock is needed,
        # so a database another process keeps locked still opens, and its runs spool.
        if _check_identity(db, path, allow_empty=True) == schema_version():
            return
        # Checked again under the write lock: another process may have created
        # or upgraded the database since this one looked.
        # SQLite's way to rebuild a table: foreign keys off (only possible outside a
        # transaction), the rebuild, then every reference checked before the commit.
        db.execute("PRAGMA foreign_keys=OFF")
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                version = _check_identity(db, path, allow_empty=True)
                for number in range(version + 1, schema_version() + 1):
                    for step in MIGRATIONS[number - 1]:
                        if isinstance(step, str):
                            db.execute(step)
                        else:
                            step(db)
                    db.execute(f"PRAGMA user_version = {number:d}")
                if version == 0:
                    db.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")
                broken = db.execute("PRAGMA foreign_key_check").fetchone()
                if broken is not None:
                    raise StoreError(
                        f"history database {path} could not be upgraded: table {broken[0]} "
                        f"row {broken[1]} refers to a missing {broken[2]} row; it was left "
                        "as it was: move it away and start a new one with --db"
                    )
            except BaseException:
                db.rollback()
                raise
            db.commit()
        finally:
            db.execute("PRAGMA foreign_keys=ON")
