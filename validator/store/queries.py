"""What the store reads: the kinds of run, the SQL of its queries, and the rows they give.

Every query here is served by an index (tests/store/test_store_plans.py reads each one's
``EXPLAIN QUERY PLAN``), so a host's history costs the same on a store of 10 runs or
10,000. What pruning reads and deletes is here too.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from validator.model import Verdict

_MAX_SQL_INT = 2**63 - 1


class RunKind(str, enum.Enum):
    """What a run in the history was."""

    CERTIFY = "certify"
    DRIFT = "drift"

    def __str__(self) -> str:
        return self.value


RUN_KINDS = tuple(kind.value for kind in RunKind)
RUN_STATUSES = ("running", "complete", "interrupted")


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
    failed: int  # checks that failed (validator.model.check_counts; findings before issue 33)
    unknown: int  # checks that could not be judged, counted alike
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


@dataclass(frozen=True)
class RunInfo:
    """One run as ``history show`` heads it: what, when, how it ended, and its hosts."""

    run_id: int
    kind: str
    started_at: str
    finished_at: str | None
    status: str  # complete | incomplete | interrupted, as the history listing shows it
    hostnames: tuple[str, ...]  # in recording order


@dataclass(frozen=True)
class StoredCertificate:
    """A certificate's text exactly as it was sealed and stored, and where it came from."""

    hostname: str
    run_id: int | None  # None: a certificate of schema 1 kept without its result
    issued_at: str
    text: str


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
    "SELECT \"check\", gpu_index FROM findings WHERE result_id = ? AND severity = 'FAIL'"
)
CERTIFICATE_OF_RESULT = "SELECT id FROM certificates WHERE result_id = ? LIMIT 1"

# One run by its key, and its hosts in recording order (results_by_run).
RUN_BY_ID = "SELECT id, kind, started_at, finished_at, status, pid FROM runs WHERE id = ?"
HOSTS_OF_RUN = "SELECT hostname FROM results WHERE run_id = ? ORDER BY run_id, id"
# A certify run's stage across nodes (schema 4); NULL for a run without one.
CROSS_NODE_OF_RUN = "SELECT cross_node_packed FROM runs WHERE id = ?"
# A host's stored certificate text, newest first (certificates_by_host); in one run, by
# the host's result there (results_by_host, then certificates_by_result).
STORED_CERTIFICATE = (
    "SELECT c.json_packed, r.run_id, c.issued_at FROM certificates c"
    " LEFT JOIN results r ON r.id = c.result_id WHERE c.hostname = ?"
    " ORDER BY c.issued_at DESC, c.id DESC LIMIT 1"
)
STORED_CERTIFICATE_OF_RUN = (
    "SELECT c.json_packed, r.run_id, c.issued_at FROM results r"
    " JOIN certificates c ON c.result_id = r.id WHERE r.hostname = ? AND r.run_id = ?"
    " LIMIT 1"
)

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


def history_row_to_dict(row: HistoryRow) -> dict[str, object]:
    """A history row as JSON-ready data."""
    return dataclasses.asdict(row)
