"""Every statement the history store runs is served by an index; what a node costs per run.

The statements are not copied here: the store's own connection is traced while
it does everything it does (record, replace, batch, read, import, mark, prune),
and each statement it ran is handed back to SQLite's ``EXPLAIN QUERY PLAN``.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import gzip
import json
import lzma
import sqlite3
from pathlib import Path

import pytest

from tests.store.test_never_lost import write_locked
from validator.certificate import issue_certificate
from validator.model import NodeResult, Severity, from_dict, to_dict
from validator.store import Store, history_store

FIXTURES = Path(__file__).parent.parent / "fixtures" / "store"
BUDGET_PER_NODE_RUN = 20 * 1024

# Tables that grow with every host of every run. `runs` grows once per run.
BIG_TABLES = ("results", "findings", "certificates")
# The only statements that may walk a table: each follows its key, in order, and
# stops after LIMIT (or OFFSET) rows; no filter is applied to the rows it walks.
BOUNDED_WALKS = {
    # history of all hosts: runs newest first, LIMIT rows
    "FROM runs u LEFT JOIN results r ON r.run_id = u.id": "SCAN u",
    # prune --keep-runs N: the N-th newest run
    "SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET": "SCAN runs",
}
SKIPPED = ("PRAGMA", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


RECORDED = {
    "burn5s": "healthy-8x-h100-sxm-burn5s.json.gz",
    "burn300s": "healthy-8x-h100-sxm-burn300s.json.xz",
}


@functools.cache
def _recorded(name: str) -> NodeResult:
    path = FIXTURES / RECORDED[name]
    opener = gzip.open if path.suffix == ".gz" else lzma.open
    with opener(path, "rt", encoding="utf-8") as handle:
        return from_dict(NodeResult, json.load(handle))


def realistic(hostname: str = "gpu-node-01", name: str = "burn5s") -> NodeResult:
    """The healthy 8x H100 scenario judged after a simulated burn and interconnect (SOURCES.md)."""
    return dataclasses.replace(_recorded(name), hostname=hostname)


def failing(hostname: str) -> NodeResult:
    """A realistic result with two findings failed and one unknown."""
    result = realistic(hostname)
    findings = list(result.findings)
    findings[0] = dataclasses.replace(findings[0], severity=Severity.FAIL)
    findings[1] = dataclasses.replace(findings[1], severity=Severity.FAIL)
    findings[2] = dataclasses.replace(findings[2], severity=Severity.UNKNOWN)
    return dataclasses.replace(result, findings=tuple(findings))


def normalized(sql: str) -> str:
    return " ".join(sql.split())


def traced_statements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Everything the store does, on a store with some history; the statements it ran."""
    db = tmp_path / "h.db"
    clock = ["2025-01-01T00:00:00+00:00"]
    monkeypatch.setattr(history_store, "_now", lambda: clock[0])
    seen: list[str] = []
    with Store.open(db) as store:
        assert store._db is not None
        store._db.set_trace_callback(seen.append)
        for month in range(3):
            clock[0] = f"2025-{month + 1:02d}-01T00:00:00+00:00"
            run = store.start_run("certify", 3, "p")
            hosts = [realistic(f"gpu-{i}") for i in range(2)] + [failing("gpu-2")]
            for host in hosts:
                store.record_result(run, host)  # as each host arrives
            store.record_results(run, [(h, issue_certificate(h)) for h in hosts[:2]])
            store.finish_run(run, interrupted=month == 1)
        drift = store.start_run("drift", 1, "p")
        store.record_result(drift, failing("gpu-0"))
        store.history("gpu-0", limit=10)
        store.history(limit=10)
        store.latest_certificate("gpu-1")
        store.latest_attempt("GPU-2")  # drift's revocation check, the name in any case
        store.result(drift, "gpu-0")
        store.run_info(drift)  # history show
        store.stored_certificate("gpu-1")  # history certificate
        store.stored_certificate("gpu-1", run_id=1)  # history certificate --run
        store.mark_dead_runs()
        store.prune(keep_runs=2, dry_run=True)
        store.prune(keep_days=30, now=datetime.datetime(2025, 3, 15, tzinfo=datetime.timezone.utc))
        store.prune(keep_runs=1, keep_days=1)
        # a run spooled while another process holds the lock, then imported
        with write_locked(db), Store.open(db, retry_s=0.1) as blocked:
            spooled = blocked.start_run("certify", 1, "p")
            blocked.record_results(spooled, [(realistic("gpu-9"), None)])
            blocked.finish_run(spooled)
        assert store.import_pending()
    return [s for s in seen if not normalized(s).upper().startswith(SKIPPED)]


def test_every_statement_the_store_runs_uses_an_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements = traced_statements(tmp_path, monkeypatch)
    texts = {normalized(s).split(" VALUES ")[0] for s in statements}
    # the paths the issue names are among what was checked
    for wanted in (
        "SELECT id FROM results WHERE hostname =",  # record_result's earlier result
        "DELETE FROM certificates WHERE result_id =",
        "DELETE FROM findings WHERE result_id =",
        "SELECT json_packed FROM certificates WHERE hostname =",  # latest_certificate
        "FROM results r JOIN runs u ON u.id = r.run_id WHERE r.hostname =",  # history of a host
        "FROM runs u LEFT JOIN results r ON r.run_id = u.id",  # history of all
        "SELECT id, pid FROM runs WHERE status = 'running'",  # runs whose process died
        "SELECT id FROM runs WHERE kind =",  # a pending run found again
        "SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET",  # prune --keep-runs
        "SELECT id FROM runs WHERE status != 'running' AND started_at <",  # prune --keep-days
        "SELECT 1 FROM results r JOIN certificates c",  # prune keeps latest certificates
        "ORDER BY r.recorded_at DESC, r.run_id DESC LIMIT 1",  # a host's latest attempt
        "ORDER BY r.recorded_at ASC, r.run_id ASC LIMIT 1",  # what replaced a certificate
        "AND severity = 'FAIL'",  # the checks a revoking attempt failed
        "DELETE FROM runs WHERE id =",
    ):
        assert any(wanted in text for text in texts), wanted
    checker = sqlite3.connect(tmp_path / "h.db")
    problems = []
    for statement in statements:
        plan = [row[3] for row in checker.execute("EXPLAIN QUERY PLAN " + statement)]
        text = normalized(statement)
        allowed = {walk for marker, walk in BOUNDED_WALKS.items() if marker in text}
        for step in plan:
            if "USE TEMP B-TREE" in step:
                problems.append(f"{text[:120]}: {step}")
            if step.startswith("SCAN ") and step not in allowed:
                problems.append(f"{text[:120]}: {step}")
            # the history counts nothing per row: FAIL and UNKNOWN are columns
            if ("JOIN results r" in text or "JOIN runs u" in text) and "SUBQUERY" in step:
                problems.append(f"{text[:120]}: {step}")
    assert problems == [], "\n".join(problems)
    deletes = [s for s in statements if normalized(s).startswith("DELETE FROM certificates")]
    plan = checker.execute("EXPLAIN QUERY PLAN " + deletes[0]).fetchall()
    assert "certificates_by_result" in plan[0][3]


def test_a_scan_would_be_caught(tmp_path: Path) -> None:
    # The check above reads SQLite's words; a query without an index reads like this.
    Store.open(tmp_path / "h.db").close()
    checker = sqlite3.connect(tmp_path / "h.db")
    plan = [
        row[3]
        for row in checker.execute("EXPLAIN QUERY PLAN SELECT * FROM results WHERE summary = 'x'")
    ]
    assert plan == ["SCAN results"]
    plan = [
        row[3]
        for row in checker.execute("EXPLAIN QUERY PLAN SELECT * FROM results ORDER BY recorded_at")
    ]
    assert "USE TEMP B-TREE FOR ORDER BY" in plan


def file_bytes(db: Path) -> int:
    with sqlite3.connect(db) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db.stat().st_size


@pytest.mark.parametrize(("name", "json_bytes"), [("burn5s", 200_000), ("burn300s", 600_000)])
def test_a_node_costs_at_most_20_kb_per_run(tmp_path: Path, name: str, json_bytes: int) -> None:
    db = tmp_path / "h.db"
    runs, hosts = 3, 20
    with Store.open(db) as store:
        empty = file_bytes(db)
        for _ in range(runs):
            run = store.start_run("certify", hosts, "p")
            results = [realistic(f"gpu-{i:03d}", name) for i in range(hosts - 1)]
            results.append(failing("gpu-bad"))
            for result in results:
                store.record_result(run, result)
            # the fleet's final write: every host again, certified ones with a certificate
            store.record_results(
                run,
                [(r, issue_certificate(r) if r.hostname != "gpu-bad" else None) for r in results],
            )
            store.finish_run(run)
    per_node_run = (file_bytes(db) - empty) / (runs * hosts)
    raw_json = len(json.dumps(to_dict(realistic(name=name)), sort_keys=True))
    assert raw_json > json_bytes  # a heavy result: most of it burn telemetry
    assert per_node_run <= BUDGET_PER_NODE_RUN, f"{per_node_run:.0f} bytes per node per run"
    # what the rows hold: not a PASS finding among them
    with sqlite3.connect(db) as connection:
        severities = {row[0] for row in connection.execute("SELECT severity FROM findings")}
        assert severities == {"FAIL", "UNKNOWN"}
        assert connection.execute("SELECT COUNT(*) FROM results").fetchone() == (runs * hosts,)
        assert connection.execute("SELECT COUNT(*) FROM certificates").fetchone() == (
            runs * (hosts - 1),
        )
    with Store.open(db, readonly=True) as store:
        bad = store.history("gpu-bad")
        # Checks, each once at its worst finding (as every report counts them).
        failed = {f.check for f in failing("x").findings if f.severity is Severity.FAIL}
        unknown = {
            f.check for f in failing("x").findings if f.severity is Severity.UNKNOWN
        } - failed
        assert [(row.failed, row.unknown) for row in bad] == [(len(failed), len(unknown))] * runs
        assert store.result(bad[0].run_id, "gpu-bad") == failing("gpu-bad")
        assert store.result(bad[0].run_id, "gpu-001") == realistic("gpu-001", name)
