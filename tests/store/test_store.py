"""The SQLite history: schema, runs and results, certificates, bad files, concurrent writers."""

from __future__ import annotations

import dataclasses
import datetime
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.judge.test_judge_healthy import healthy_node, judge, with_gpu
from validator import packed as packed_module
from validator import store as store_module
from validator.certificate import issue_certificate, sign
from validator.error_tree import BadInputError
from validator.model import NodeResult, Severity, Verdict, from_dict, to_dict
from validator.report.partial import write_host_result
from validator.store import (
    APPLICATION_ID,
    HistoryRow,
    NoHistoryError,
    Store,
    StoreError,
    default_db_path,
    schema_version,
)
from validator.store import opening as store_opening
from validator.store import schema as store_schema

TABLES = {"runs", "results", "findings", "certificates"}
# SQLite's own, for the runs table's AUTOINCREMENT: the highest id ever handed out.
SQLITE_TABLES = {"sqlite_sequence"}


def certified(hostname: str = "gpu-node-01") -> NodeResult:
    result = dataclasses.replace(judge(healthy_node()), hostname=hostname)
    assert result.verdict is Verdict.CERTIFIED
    return result


def power_capped(hostname: str = "gpu-node-02") -> NodeResult:
    facts = with_gpu(healthy_node(), 5, power_limit_enforced_w=500.0)
    facts = with_gpu(facts, 2, power_limit_enforced_w=500.0)
    result = dataclasses.replace(judge(facts), hostname=hostname)
    assert result.verdict is Verdict.NOT_CERTIFIED
    return result


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


# ---------------------------------------------------------------- schema


def test_new_database_is_wal_versioned_and_ours(tmp_path: Path) -> None:
    path = tmp_path / "state" / "deep" / "history.db"
    Store.open(path).close()
    db = raw(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == schema_version() == 4
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == TABLES | SQLITE_TABLES
    findings = [row[1] for row in db.execute("PRAGMA table_info(findings)")]
    assert findings == ["id", "result_id", "check", "severity", "gpu_index", "message"]
    results = [row[1] for row in db.execute("PRAGMA table_info(results)")]
    assert {"run_id", "hostname", "verdict", "summary", "failed", "unknown", "passed"} <= set(
        results
    )
    assert "result_packed" in results
    assert "result_json" not in results
    certificates = [row[1] for row in db.execute("PRAGMA table_info(certificates)")]
    assert {"hostname", "issued_at", "digest", "json_packed"} <= set(certificates)
    db.close()


def test_reopening_keeps_data_and_runs_no_migration_twice(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with Store.open(path) as store:
        run = store.start_run("certify", 1, "p" * 64)
    with Store.open(path) as store:
        assert [row.run_id for row in store.history()] == [run]
    assert raw(path).execute("PRAGMA user_version").fetchone()[0] == 4


def test_later_migrations_run_in_order_on_an_older_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "h.db"
    with Store.open(path) as store:
        run = store.start_run("certify", 1, "p")
        store.record_result(run, certified())
    extra = (
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, run_id INTEGER, text TEXT)",
        "INSERT INTO notes (run_id, text) SELECT id, 'migrated' FROM runs",
    )
    monkeypatch.setattr(store_schema, "MIGRATIONS", (*store_schema.MIGRATIONS, extra))
    assert schema_version() == 5
    # reading an older schema does not upgrade it behind the operator's back
    with pytest.raises(StoreError, match="has schema 4, older than this gpuready's 5"):
        Store.open(path, readonly=True)
    assert raw(path).execute("PRAGMA user_version").fetchone()[0] == 4
    with Store.open(path) as store:
        assert len(store.history()) == 1
    db = raw(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 5
    assert db.execute("SELECT run_id, text FROM notes").fetchall() == [(run, "migrated")]


def test_a_failing_migration_leaves_the_database_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "h.db"
    Store.open(path).close()
    broken = ("CREATE TABLE half (id INTEGER)", "THIS IS NOT SQL")
    monkeypatch.setattr(store_schema, "MIGRATIONS", (*store_schema.MIGRATIONS, broken))
    with pytest.raises(StoreError, match="syntax error"):
        Store.open(path)
    db = raw(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 4
    assert db.execute("SELECT name FROM sqlite_master WHERE name = 'half'").fetchone() is None


def test_default_path_follows_xdg_state_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "gpuready" / "history.db"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # invalid per the spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_db_path() == tmp_path / "home" / ".local" / "state" / "gpuready" / "history.db"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_db_path() == tmp_path / "home" / ".local" / "state" / "gpuready" / "history.db"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    Store.open(None).close()
    assert (tmp_path / "xdg" / "gpuready" / "history.db").is_file()


# ---------------------------------------------------------------- runs and results


def test_run_results_findings_and_history(tmp_path: Path) -> None:
    good, bad = certified("gpu-a"), power_capped("gpu-b")
    with Store.open(tmp_path / "h.db") as store:
        run = store.start_run("certify", 2, good.policy_digest, ["gpuready", "certify", "-i", "x"])
        store.record_result(run, good)
        store.record_result(run, bad)
        store.finish_run(run)
        rows = store.history()
        assert store.integrity_check() == "ok"
    assert [(r.run_id, r.hostname, r.verdict, r.status, r.kind) for r in rows] == [
        (run, "gpu-a", "CERTIFIED", "complete", "certify"),
        (run, "gpu-b", "NOT_CERTIFIED", "complete", "certify"),
    ]
    assert rows[0].failed == 0
    assert rows[1].failed == 1  # one check, power.limit, failed on GPUs 2 and 5
    assert rows[1].summary == bad.summary
    assert rows[0].finished_at is not None
    assert rows[0].recorded_at is not None
    started = datetime.datetime.fromisoformat(rows[0].started_at)
    assert abs((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()) < 60

    db = raw(tmp_path / "h.db")
    argv, digest, hosts = db.execute("SELECT argv, policy_digest, hosts FROM runs").fetchone()
    assert json.loads(argv) == ["gpuready", "certify", "-i", "x"]
    assert (digest, hosts) == (good.policy_digest, 2)
    stored = db.execute(
        'SELECT f."check", f.severity, f.gpu_index FROM findings f JOIN results r'
        " ON f.result_id = r.id WHERE r.hostname = 'gpu-b' AND f.severity != 'PASS'"
        " ORDER BY f.gpu_index"
    ).fetchall()
    assert stored == [("power.limit", "FAIL", 2), ("power.limit", "FAIL", 5)]
    # a row for each finding that did not pass; the PASS ones counted per check
    counts = dict(
        db.execute(
            "SELECT r.hostname, COUNT(*) FROM findings f JOIN results r ON f.result_id = r.id"
            " GROUP BY r.hostname"
        ).fetchall()
    )
    not_passed = sum(1 for f in bad.findings if f.severity is not Severity.PASS)
    assert counts == {"gpu-b": not_passed}
    assert not_passed < len(bad.findings) / 10
    for hostname, node in (("gpu-a", good), ("gpu-b", bad)):
        (passed,) = db.execute(
            "SELECT passed FROM results WHERE hostname = ?", (hostname,)
        ).fetchone()
        summary = json.loads(passed)
        assert sum(summary.values()) == sum(1 for f in node.findings if f.severity is Severity.PASS)
        assert summary["power.limit"] == (6 if node is bad else 8)
    rest, facts = db.execute(
        "SELECT result_packed, facts_packed FROM results WHERE hostname = 'gpu-b'"
    ).fetchone()
    data = json.loads(store_module.unpack(rest))
    assert "facts" not in data
    data["facts"] = json.loads(store_module.unpack(facts))
    assert from_dict(NodeResult, data) == bad
    assert facts.startswith(b"\xfd7zXZ")  # xz for the facts
    assert rest[:1] == b"\x78"  # zlib for the rest (quicker, nearly as small)
    with Store.open(tmp_path / "h.db", readonly=True) as store:
        assert store.result(run, "gpu-b") == bad
        assert store.result(run, "gpu-a") == good
        assert store.result(run, "gpu-c") is None
        assert store.result(run + 1, "gpu-a") is None


def test_history_filters_orders_and_limits(tmp_path: Path) -> None:
    with Store.open(tmp_path / "h.db") as store:
        first = store.start_run("certify", 2, "p")
        store.record_result(first, certified("gpu-a"))
        store.record_result(first, certified("gpu-b"))
        store.finish_run(first)
        second = store.start_run("drift", 2, "p")
        store.record_result(second, power_capped("gpu-a"))
        store.finish_run(second, interrupted=True)
        empty = store.start_run("drift", 5, "p")

        everything = store.history()
        assert [(r.run_id, r.hostname) for r in everything] == [
            (empty, None),
            (second, "gpu-a"),
            (first, "gpu-a"),
            (first, "gpu-b"),
        ]
        assert [r.status for r in everything] == [
            "incomplete",
            "interrupted",
            "complete",
            "complete",
        ]
        assert everything[0] == HistoryRow(
            run_id=empty,
            kind="drift",
            started_at=everything[0].started_at,
            finished_at=None,
            status="incomplete",
            hostname=None,
            verdict=None,
            summary="",
            failed=0,
            unknown=0,
            recorded_at=None,
        )
        gpu_a = store.history("gpu-a")
        assert [(r.run_id, r.kind, r.verdict) for r in gpu_a] == [
            (second, "drift", "NOT_CERTIFIED"),
            (first, "certify", "CERTIFIED"),
        ]
        assert [r.run_id for r in store.history(limit=2)] == [empty, second]
        assert [r.run_id for r in store.history("gpu-a", limit=1)] == [second]
        assert store.history("nobody") == []


def test_run_kind_and_ids_are_checked(tmp_path: Path) -> None:
    with Store.open(tmp_path / "h.db") as store:
        with pytest.raises(ValueError, match="run kind 'provision' is not one of certify, drift"):
            store.start_run("provision", 1, "p")
        with pytest.raises(StoreError, match="has no run 41"):
            store.record_result(41, certified())
        with pytest.raises(StoreError, match="has no run 41"):
            store.finish_run(41)
        assert store.history() == []
        run = store.start_run("certify", 1, "p")
        cert = issue_certificate(certified("gpu-a"))
        with pytest.raises(ValueError, match="certificate of gpu-a cannot be recorded"):
            store.record_result(run, certified("gpu-b"), cert)
        assert [r.hostname for r in store.history()] == [None]


def test_latest_certificate(tmp_path: Path) -> None:
    march = datetime.datetime(2025, 3, 1, tzinfo=datetime.timezone.utc)
    april = datetime.datetime(2025, 4, 1, tzinfo=datetime.timezone.utc)
    old = issue_certificate(certified("gpu-a"), now=april)
    new = sign(issue_certificate(certified("gpu-a"), now=march), b"key")
    other = issue_certificate(certified("gpu-b"), now=march)
    with Store.open(tmp_path / "h.db") as store:
        assert store.latest_certificate("gpu-a") is None
        run = store.start_run("certify", 2, "p")
        store.record_result(run, certified("gpu-a"), new)
        store.record_result(run, certified("gpu-b"), other)
        # issued later wins, whatever order it was recorded in
        store.record_result(store.start_run("certify", 1, "p"), certified("gpu-a"), old)
        assert store.latest_certificate("gpu-a") == old
        assert store.latest_certificate("gpu-b") == other
        assert store.latest_certificate("gpu-c") is None
        # a drift run records results without certificates: the baseline stays
        drift = store.start_run("drift", 1, "p")
        store.record_result(drift, power_capped("gpu-b"))
        assert store.latest_certificate("gpu-b") == other
    db = raw(tmp_path / "h.db")
    rows = db.execute("SELECT hostname, issued_at, digest FROM certificates ORDER BY id").fetchall()
    assert rows == [
        ("gpu-a", new.issued_at, new.digest),
        ("gpu-b", other.issued_at, other.digest),
        ("gpu-a", old.issued_at, old.digest),
    ]


def test_unreadable_stored_certificate_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with Store.open(path) as store:
        run = store.start_run("certify", 1, "p")
        store.record_result(run, certified(), issue_certificate(certified()))
    db = raw(path)
    db.execute("UPDATE certificates SET json_packed = ?", (store_module.pack('{"hostname": 3}'),))
    db.commit()
    db.close()
    with Store.open(path) as store, pytest.raises(StoreError) as caught:
        store.latest_certificate("gpu-node-01")
    assert "unreadable certificate of gpu-node-01" in str(caught.value)
    assert "\n" not in str(caught.value)


# ---------------------------------------------------------------- reading only


def test_readonly_open_of_missing_database_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "none" / "history.db"
    with pytest.raises(NoHistoryError, match=f"no history yet at {path}$"):
        Store.open(path, readonly=True)
    assert not (tmp_path / "none").exists()


def test_readonly_store_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    Store.open(path).close()
    before = path.read_bytes()
    with Store.open(path, readonly=True) as store:
        assert store.history() == []
        with pytest.raises(StoreError, match="opened read-only"):
            store.start_run("certify", 1, "p")
    assert path.read_bytes() == before


# ---------------------------------------------------------------- bad files


def open_and_read(path: Path, readonly: bool) -> list[HistoryRow]:
    # Some damage only shows when the tables are read.
    with Store.open(path, readonly=readonly) as store:
        return store.history()


def _foreign_sqlite(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    db.execute("INSERT INTO photos (name) VALUES ('cat.jpg')")
    db.commit()
    db.close()


def _newer_gpuready(path: Path) -> None:
    Store.open(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {schema_version() + 1}")
    db.commit()
    db.close()


def _corrupt_sqlite(path: Path) -> None:
    with Store.open(path) as store:
        run = store.start_run("certify", 1, "p")
        for i in range(20):
            store.record_result(run, certified(f"gpu-{i}"))
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    db.close()
    data = bytearray(path.read_bytes())
    # Every page after the schema's, up to the runs table's root: any read of the history hits one.
    data[size : size * root] = b"\xff" * (size * (root - 1))
    path.write_bytes(bytes(data))


def _header_then_garbage(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 1000)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_text("hosts:\n  gpu07: {}\n"), "is not a gpuready history database"),
        (lambda p: p.write_bytes(bytes(range(256)) * 32), "is not a gpuready history database"),
        (_foreign_sqlite, "SQLite database of another program"),
        (_newer_gpuready, "was written by a newer gpuready"),
        (_header_then_garbage, "is damaged"),
        (_corrupt_sqlite, "is damaged"),
    ],
)
@pytest.mark.parametrize("readonly", [False, True])
def test_bad_file_is_one_line_and_left_untouched(
    tmp_path: Path, make: Callable[[Path], object], message: str, readonly: bool
) -> None:
    path = tmp_path / "history.db"
    make(path)
    before = snapshot(tmp_path)
    with pytest.raises(StoreError, match=message) as caught:
        open_and_read(path, readonly)
    text = str(caught.value)
    assert "\n" not in text
    assert str(path) in text
    assert isinstance(caught.value, BadInputError)
    assert path.read_bytes() == before["history.db"]
    assert snapshot(tmp_path)["history.db"] == before["history.db"]


def test_empty_file_becomes_a_new_database(tmp_path: Path) -> None:
    # an empty file holds nothing to lose (e.g. made by touch)
    path = tmp_path / "h.db"
    path.touch()
    with Store.open(path) as store:
        assert store.start_run("certify", 1, "p") == 1
    assert raw(path).execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        Store.open(tmp_path)


# ---------------------------------------------------------------- several processes


def _writer(path: str, worker: int, hosts: int, result: NodeResult, start: object) -> None:
    start.wait(30)  # type: ignore[attr-defined]
    with Store.open(path) as store:
        run = store.start_run("certify", hosts, result.policy_digest, [f"worker-{worker}"])
        for host in range(hosts):
            named = dataclasses.replace(result, hostname=f"w{worker}-h{host:02d}")
            cert = issue_certificate(named) if host % 3 == 0 else None
            store.record_result(run, named, cert)
        store.finish_run(run)


class _CreatedBetweenReads:
    """A read-only probe connection during whose first read another writer creates the database."""

    def __init__(self, inner: sqlite3.Connection, create: Callable[[], None]) -> None:
        self._inner = inner
        self._create: Callable[[], None] | None = create

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = self._inner.execute(sql, *args)
        if self._create is not None:
            create, self._create = self._create, None
            create()
        return cursor

    def close(self) -> None:
        self._inner.close()


def test_a_creation_committed_while_opening_is_not_taken_for_another_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The moment CI hit: another writer has switched the new file to WAL (so it
    # is no longer empty) and commits its schema while this one reads the stamp.
    path = tmp_path / "racing.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.close()
    original = store_opening._connect

    def create_elsewhere() -> None:
        with monkeypatch.context() as inner:
            inner.setattr(store_opening, "_connect", original)
            Store.open(path).close()

    def connect(where: Path, mode: str) -> object:
        connection = original(where, mode)
        if mode == "ro":
            return _CreatedBetweenReads(connection, create_elsewhere)
        return connection

    monkeypatch.setattr(store_opening, "_connect", connect)
    with Store.open(path) as store:
        assert store.start_run("certify", 1, "p") == 1
    assert raw(path).execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def test_concurrent_writer_processes_all_land(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"  # not created yet: the writers race to create it too
    workers, hosts = 5, 12
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    result = certified()
    processes = [
        context.Process(target=_writer, args=(str(path), w, hosts, result, start))
        for w in range(workers)
    ]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(120)
    assert [p.exitcode for p in processes] == [0] * workers

    with Store.open(path, readonly=True) as store:
        assert store.integrity_check() == "ok"
        rows = store.history(limit=10_000)
        assert len(rows) == workers * hosts
        assert {row.status for row in rows} == {"complete"}
        assert len({row.run_id for row in rows}) == workers
        assert {row.hostname for row in rows} == {
            f"w{w}-h{h:02d}" for w in range(workers) for h in range(hosts)
        }
        assert store.latest_certificate("w4-h09") is not None
        assert store.latest_certificate("w4-h10") is None
    db = raw(path)
    assert db.execute("SELECT COUNT(*) FROM findings").fetchone()[0] == (
        workers * hosts * sum(1 for f in result.findings if f.severity is not Severity.PASS)
    )
    assert db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == workers * hosts
    assert db.execute("SELECT COUNT(*) FROM certificates").fetchone()[0] == workers * 4
    # every worker's results sit under its own run
    per_run = db.execute(
        "SELECT runs.argv, COUNT(*), MIN(results.hostname) FROM results JOIN runs"
        " ON results.run_id = runs.id GROUP BY runs.id ORDER BY runs.argv"
    ).fetchall()
    assert per_run == [(json.dumps([f"worker-{w}"]), hosts, f"w{w}-h00") for w in range(workers)]


def _doomed_writer(path: str, result: NodeResult, ready: object) -> None:
    with Store.open(path) as store:
        run = store.start_run("certify", 8, result.policy_digest)
        for host in range(3):
            store.record_result(run, dataclasses.replace(result, hostname=f"kept-{host}"))
    # Killed halfway through the fourth host's transaction.
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    db.execute(
        "INSERT INTO results (run_id, hostname, recorded_at, verdict, summary, failed, unknown,"
        " passed, result_packed, facts_packed)"
        " VALUES (?, 'lost-3', 'now', 'CERTIFIED', '', 0, 0, '{}', x'', x'')",
        (run,),
    )
    ready.set()  # type: ignore[attr-defined]
    time.sleep(120)


def test_writer_killed_mid_run_leaves_a_consistent_database(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with Store.open(path) as store:
        earlier = store.start_run("certify", 1, "p")
        store.record_result(earlier, certified("before"))
        store.finish_run(earlier)
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    child = context.Process(target=_doomed_writer, args=(str(path), certified(), ready))
    child.start()
    try:
        assert ready.wait(60), "the writer never reached its last transaction"
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    finally:
        if child.is_alive():
            child.kill()
    assert child.exitcode == -signal.SIGKILL

    with Store.open(path) as store:
        assert store.integrity_check() == "ok"
        rows = store.history()
        killed = [row for row in rows if row.run_id != earlier]
        assert [(row.hostname, row.status, row.finished_at) for row in killed] == [
            ("kept-0", "interrupted", None),
            ("kept-1", "interrupted", None),
            ("kept-2", "interrupted", None),
        ]
        assert [(row.hostname, row.status) for row in rows if row.run_id == earlier] == [
            ("before", "complete")
        ]
        # the dead writer's lock is gone: the next run writes at once
        began = time.monotonic()
        run = store.start_run("drift", 1, "p")
        store.record_result(run, certified("after"))
        store.finish_run(run)
        assert time.monotonic() - began < 5
        assert store.history("after")[0].status == "complete"
    assert raw(path).execute(
        "SELECT COUNT(*) FROM results WHERE hostname = 'lost-3'"
    ).fetchone() == (0,)


def test_findings_severities_are_counted(tmp_path: Path) -> None:
    result = power_capped()
    # Checks, each once at its worst: power.limit failed on GPUs 2 and 5 is one check.
    failed = {f.check for f in result.findings if f.severity is Severity.FAIL}
    unknown = {f.check for f in result.findings if f.severity is Severity.UNKNOWN} - failed
    assert failed == {"power.limit"}
    with Store.open(tmp_path / "h.db") as store:
        run = store.start_run("certify", 1, "p")
        store.record_result(run, result)
        (row,) = store.history()
    assert (row.failed, row.unknown) == (1, len(unknown))


def test_recording_a_host_again_in_a_run_replaces_its_result(tmp_path: Path) -> None:
    # A fleet run commits each host as it arrives, then its final judgement.
    with Store.open(tmp_path / "h.db") as store:
        run = store.start_run("certify", 1, "p")
        store.record_result(run, power_capped("gpu-a"))
        final = certified("gpu-a")
        store.record_result(run, final, issue_certificate(final))
        rows = store.history("gpu-a")
        assert [(row.run_id, row.verdict) for row in rows] == [(run, "CERTIFIED")]
        assert store.latest_certificate("gpu-a") is not None
    db = raw(tmp_path / "h.db")
    assert db.execute("SELECT count(*) FROM results").fetchone() == (1,)
    orphans = db.execute(
        "SELECT count(*) FROM findings WHERE result_id NOT IN (SELECT id FROM results)"
    ).fetchone()
    assert orphans == (0,)


def test_packed_text_comes_back_as_it_was_and_damage_is_one_line(tmp_path: Path) -> None:
    text = json.dumps({"é": [1.5, 2] * 100}, sort_keys=True)
    assert store_module.unpack(store_module.pack(text)) == text
    assert store_module.unpack(zlib.compress(text.encode())) == text  # zlib too
    quick = store_module.pack(text, quick=True)
    assert quick[:1] == b"\x78"  # zlib's
    assert store_module.unpack(quick) == text
    for damaged in (b"", b"\xfd7zXZ\x00broken", b"not packed"):
        with pytest.raises(ValueError, match=r"^[^\n]+$"):
            store_module.unpack(damaged)
    path = tmp_path / "h.db"
    with Store.open(path) as store:
        run = store.start_run("certify", 1, "p")
        store.record_result(run, certified())
    db = raw(path)
    db.execute("UPDATE results SET result_packed = x'fd377a585a0000ff'")
    db.commit()
    db.close()
    with Store.open(path) as store, pytest.raises(StoreError) as caught:
        store.result(run, "gpu-node-01")
    assert "unreadable result of gpu-node-01 in run 1" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_hosts_facts_are_encoded_once_for_its_arrival_and_final_judgement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed: list[int] = []
    original = packed_module.pack

    def counting(text: str, *, quick: bool = False) -> bytes:
        packed.append(len(text))
        return original(text, quick=quick)

    monkeypatch.setattr(packed_module, "pack", counting)
    arrived = power_capped("gpu-a")
    final = dataclasses.replace(arrived, verdict=Verdict.CERTIFIED)  # same facts object
    with Store.open(tmp_path / "h.db") as store:
        run = store.start_run("certify", 1, "p")
        store.record_result(run, arrived)
        first = len(packed)
        store.record_results(run, [(final, None)])
        assert len(packed) == first + 1  # the result without its facts only
        assert store.result(run, "gpu-a") == final
        # other facts, equal but not the same object, are encoded anew
        store.record_result(run, from_dict(NodeResult, to_dict(final)))
        assert len(packed) == first + 3
    # The host file is written from the same packed texts: nothing encoded again,
    # and it reads back as the whole result.
    written = write_host_result(final, tmp_path / "report")
    assert len(packed) == first + 3
    facts_text = packed_module.unpack(packed_module.packed_facts(final.facts))
    rest_text = packed_module.unpack(packed_module.packed_result(final))
    assert written.read_text() == '{"facts":' + facts_text + "," + rest_text[1:] + "\n"
    assert from_dict(NodeResult, json.loads(written.read_text())) == final
    # The facts take xz's smaller form; the rest (findings) zlib's quicker one.
    assert packed_module.packed_facts(final.facts).startswith(b"\xfd7zXZ\x00")
    assert packed_module.packed_result(final)[:1] == b"\x78"


# A collection at the weak reference's allocation finds an earlier facts object
# dead, in the thread that is storing a new one: its callback must not wait on
# a lock that thread holds. In a child process, so a hang fails instead of hanging.
_COLLECT_WHILE_CACHING = """
import dataclasses, gc, types, weakref
import validator.model.kept_per_object as kept_per_object
import validator.packed as packed

@dataclasses.dataclass(frozen=True)
class Facts:
    x: int

def ref_collecting_first(obj, callback=None):
    gc.collect()  # an automatic collection, triggered by this allocation
    return weakref.ref(obj, callback)

kept_per_object.weakref = types.SimpleNamespace(ref=ref_collecting_first)  # KeptPerObject's
cache = packed.PackedPerObject(repr)
first = Facts(1)
object.__setattr__(first, "cycle", [first])  # only the collector frees it
cache.get(first)
gc.disable()
del first
again = Facts(2)
packed = cache.get(again)
assert cache.get(again) is packed
print("cached", len(cache._kept._entries))
"""


def test_a_collection_while_caching_facts_does_not_deadlock() -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", _COLLECT_WHILE_CACHING],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=Path(__file__).resolve().parents[2],
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("KeptPerObject deadlocked: a weakref callback waited on the cache's own lock")
    assert (done.returncode, done.stdout, done.stderr) == (0, "cached 1\n", "")
