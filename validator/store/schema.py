"""The schema: its tables, the ordered migrations that build and upgrade it, and its stamp.

What is kept, and why (schema 2). A judged 8-GPU result is 90-650 KB of JSON
(the burn's telemetry samples are most of it; 300 s of burn is 650 KB) with ~270
findings, nearly all PASS; its certificate ~50 KB. Schema 1 stored both as text
and every finding as a row: 115 KB per node per run without a burn, 1.15 GB at
10,000 runs. Schema 2 keeps, per result:

- the full result JSON, compressed (see :func:`~validator.codec.pack`), its facts apart
  (``facts_packed``, encoded once for a host's arrival and final judgement) from
  the rest (``result_packed``): every measurement stays, readable with
  :meth:`Store.result <validator.store.history_reads.HistoryReads.result>`. Compressed
  rather than kept only for failed runs, because a healthy run is the evidence drift and
  RMA look back to, and telemetry compresses 20-60x;
- verdict, summary, and the FAIL and UNKNOWN counts as columns: the history query
  reads one row per result and counts nothing;
- a finding row only for what did not pass (what people query by check); the
  PASS findings as counts per check (``passed``, a small JSON object);
- the certificate's exact JSON text, compressed (``json_packed``): unpacked it is
  byte for byte the text its digest and signature were made over.

Schema 4 keeps, per certify run that ran the stage across nodes, that stage whole (every
pair and group test with its figures and records, each kind's outcome naming the slow
nodes and links and why), packed, in ``runs.cross_node_packed``: a few KB per run.

That is 5-15 KB per node per run (tests/store/test_store_plans.py holds it under 20 KB;
bench/store.py measures it). Every query the store runs is served by an index
(the same test reads each one's ``EXPLAIN QUERY PLAN``), so a run's writes and a
host's history cost the same on a store of 10 runs or 10,000.

The schema is versioned with ``PRAGMA user_version`` and upgraded by ordered
migrations (:data:`MIGRATIONS`, applied by :func:`_prepare`); ``PRAGMA application_id``
marks the file as ours. A file that is not SQLite, is corrupt, belongs to another
program, or was written by a newer gpuready gives a one-line :class:`StoreError` and
is left exactly as it was (the header is read before SQLite is asked:
:mod:`validator.store.opening`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Union

from validator.codec import pack, unpack
from validator.error_tree import BadInputError
from validator.model import PROVENANCES, UNKNOWN_PROVENANCE, Severity
from validator.store.store_errors import StoreError, _errors

# "gpur" in ASCII: PRAGMA application_id, so a file is known as ours before any table is read.
APPLICATION_ID = 0x67707572


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
    (
        # The stage across nodes of a certify run that asked for it (certify --cross-node):
        # the whole CrossNodeStage as JSON, packed; NULL for every other run, so the runs
        # of an older schema read as runs without the stage.
        "ALTER TABLE runs ADD COLUMN cross_node_packed BLOB",
    ),
)
# Run ownership (the lock files) and pending runs live beside the database, not
# in it: no schema change, so an older gpuready still reads a newer one's history.


def schema_version() -> int:
    """The schema version this gpuready writes: the number of migrations."""
    return len(MIGRATIONS)


def _stored_text(value: object) -> str:
    """A stored JSON text: packed bytes (schema 2), or text as it was written."""
    if isinstance(value, bytes):
        try:
            return unpack(value)
        except ValueError as exc:
            raise BadInputError(f"stored text cannot be unpacked ({exc})") from None
    return str(value)


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


def _prepare(db: sqlite3.Connection, path: Path, journal: str = "WAL") -> None:
    """The journal mode (WAL; DELETE on a network filesystem), foreign keys, the schema.

    Raises:
        StoreError: a WAL database that could not be taken out of WAL for a network
            filesystem (another process holds it open): never left in WAL there.
    """
    with _errors(path):
        # Persistent in the file; a no-op once set (and then it takes no lock).
        try:
            mode = db.execute(f"PRAGMA journal_mode={journal}").fetchone()
        except sqlite3.OperationalError:
            if journal == "WAL":
                raise
            mode = ("wal",)  # locked: another connection keeps it in WAL
        if journal != "WAL" and (mode is None or str(mode[0]).upper() == "WAL"):
            raise StoreError(
                f"history database {path} is in WAL mode on a network filesystem, and "
                "another process holds it open, so it cannot be switched to a rollback "
                "journal: stop the gpuready processes using it (on every host) and run again"
            )
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
