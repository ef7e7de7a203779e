"""Retention (``Store.prune``) and batched writes (``Store.record_results``)."""

from __future__ import annotations

import datetime
import sqlite3
from pathlib import Path

import pytest

from tests.store.test_never_lost import write_locked
from tests.store.test_store import certified, power_capped
from validator.certificate import issue_certificate
from validator.store import Store, StoreError, history_store

UTC = datetime.timezone.utc
NOW = datetime.datetime(2025, 6, 1, tzinfo=UTC)


def day(n: int) -> datetime.datetime:
    """``n`` days before NOW."""
    return NOW - datetime.timedelta(days=n)


@pytest.fixture
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, int]]:
    """Runs of 100, 90, 80 and 5 days ago, and one of 120 days ago still running."""
    path = tmp_path / "h.db"
    clock = [day(0).isoformat(timespec="seconds")]
    monkeypatch.setattr(history_store, "_now", lambda: clock[0])
    runs: dict[str, int] = {}
    with Store.open(path) as store:

        def at(days: int) -> None:
            clock[0] = day(days).isoformat(timespec="seconds")

        at(120)
        runs["running"] = store.start_run("certify", 1, "p")  # this process lives on: running
        store.record_result(runs["running"], certified("gpu-r"))
        at(100)
        runs["old_cert"] = store.start_run("certify", 2, "p")
        a, b = certified("gpu-a"), certified("gpu-b")
        store.record_results(
            runs["old_cert"],
            [(a, issue_certificate(a, now=day(100))), (b, issue_certificate(b, now=day(100)))],
        )
        store.finish_run(runs["old_cert"])
        at(90)
        runs["latest_a"] = store.start_run("certify", 1, "p")  # gpu-a's latest certificate
        store.record_results(runs["latest_a"], [(a, issue_certificate(a, now=day(90)))])
        store.finish_run(runs["latest_a"])
        at(80)
        runs["drift"] = store.start_run("drift", 1, "p")
        store.record_result(runs["drift"], power_capped("gpu-a"))
        store.finish_run(runs["drift"])
        at(5)
        runs["recent"] = store.start_run("certify", 1, "p")
        store.record_results(runs["recent"], [(b, issue_certificate(b, now=day(5)))])
        store.finish_run(runs["recent"])
    return path, runs


def counts(path: Path) -> dict[str, int]:
    db = sqlite3.connect(path)
    try:
        return {
            table: db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]  # noqa: S608
            for table in ("runs", "results", "findings", "certificates")
        }
    finally:
        db.close()


def test_keep_days_removes_old_runs_but_never_a_latest_certificate_or_a_running_run(
    history: tuple[Path, dict[str, int]],
) -> None:
    path, runs = history
    with Store.open(path) as store:
        before_a = store.latest_certificate("gpu-a")
        outcome = store.prune(keep_days=30, now=NOW)
        assert outcome.runs == (runs["old_cert"], runs["drift"])
        assert outcome.kept == (runs["latest_a"],)
        assert (outcome.results, outcome.certificates, outcome.dry_run) == (3, 2, False)
        assert store.latest_certificate("gpu-a") == before_a
        assert store.latest_certificate("gpu-b") is not None
        left = {row.run_id for row in store.history(limit=100)}
    assert left == {runs["running"], runs["latest_a"], runs["recent"]}
    after = counts(path)
    assert (after["runs"], after["results"], after["certificates"]) == (3, 3, 2)
    db = sqlite3.connect(path)
    orphans = db.execute(
        "SELECT COUNT(*) FROM findings WHERE result_id NOT IN (SELECT id FROM results)"
    ).fetchone()
    assert orphans == (0,)
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []


def test_keep_runs_keeps_the_newest_and_either_rule_keeps_a_run(
    history: tuple[Path, dict[str, int]],
) -> None:
    path, runs = history
    with Store.open(path) as store:
        # the 2 newest are drift and recent; latest_a holds a certificate
        assert store.prune(keep_runs=2, dry_run=True).runs == (runs["old_cert"],)
        # both rules: a run goes only when both let it go (85 days keeps drift, one run would not)
        outcome = store.prune(keep_runs=1, keep_days=85, now=NOW)
        assert outcome.runs == (runs["old_cert"],)
        assert outcome.kept == (runs["latest_a"],)
        assert {row.run_id for row in store.history(limit=100)} == {
            runs["running"],
            runs["latest_a"],
            runs["drift"],
            runs["recent"],
        }
        assert store.prune(keep_runs=10).runs == ()  # fewer runs than kept


def test_a_dry_run_removes_nothing_and_says_the_same(history: tuple[Path, dict[str, int]]) -> None:
    path, _ = history
    before = counts(path)
    with Store.open(path) as store:
        dry = store.prune(keep_days=30, now=NOW, dry_run=True)
        assert counts(path) == before
        real = store.prune(keep_days=30, now=NOW)
    assert (dry.runs, dry.results, dry.certificates, dry.kept) == (
        real.runs,
        real.results,
        real.certificates,
        real.kept,
    )
    assert dry.dry_run
    assert not real.dry_run


def test_prune_refuses_no_rule_bad_rules_and_a_read_only_store(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    Store.open(path).close()
    with Store.open(path) as store:
        with pytest.raises(ValueError, match="needs keep_days, keep_runs"):
            store.prune()
        with pytest.raises(ValueError, match="at least 1"):
            store.prune(keep_runs=0)
        with pytest.raises(ValueError, match="at least 1"):
            store.prune(keep_days=float("nan"))
    with Store.open(path, readonly=True) as store, pytest.raises(StoreError, match="read-only"):
        store.prune(keep_runs=1)


def test_a_batch_is_one_transaction_and_replaces_each_hosts_earlier_result(
    tmp_path: Path,
) -> None:
    path = tmp_path / "h.db"
    with Store.open(path) as store:
        run = store.start_run("certify", 3, "p")
        for host in ("gpu-a", "gpu-b", "gpu-c"):
            store.record_result(run, power_capped(host))
        assert store._db is not None
        seen: list[str] = []
        store._db.set_trace_callback(seen.append)
        finals = [certified(host) for host in ("gpu-a", "gpu-b", "gpu-c")]
        store.record_results(
            run, [(r, issue_certificate(r)) for r in finals[:2]] + [(finals[2], None)]
        )
        store._db.set_trace_callback(None)
        assert [s for s in seen if s.startswith("BEGIN")] == ["BEGIN IMMEDIATE"]
        assert [(r.hostname, r.verdict) for r in store.history()] == [
            ("gpu-a", "CERTIFIED"),
            ("gpu-b", "CERTIFIED"),
            ("gpu-c", "CERTIFIED"),
        ]
        assert store.latest_certificate("gpu-b") is not None
        assert store.latest_certificate("gpu-c") is None
        store.record_results(run, [])  # nothing to do, no transaction
        with pytest.raises(ValueError, match="certificate of gpu-a cannot be recorded"):
            store.record_results(run, [(finals[1], issue_certificate(finals[0]))])
        with pytest.raises(StoreError, match="has no run 99"):
            store.record_results(99, [(finals[0], None)])
    assert counts(path)["results"] == 3


def test_a_batch_that_cannot_be_written_is_spooled_whole_then_imported(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with Store.open(path, retry_s=0.2) as store:
        run = store.start_run("certify", 2, "p")
        store.record_result(run, power_capped("gpu-a"))
        with write_locked(path):
            finals = [certified("gpu-a"), certified("gpu-b")]
            store.record_results(
                run, [(finals[0], issue_certificate(finals[0])), (finals[1], None)]
            )
            store.finish_run(run)
        notices = store.take_notices()
        assert len(notices) == 1
        assert "the run is saved in" in notices[0]
    with Store.open(path) as store:
        assert [(r.run_id, r.hostname, r.verdict, r.status) for r in store.history()] == [
            (run, "gpu-a", "CERTIFIED", "complete"),
            (run, "gpu-b", "CERTIFIED", "complete"),
        ]
        assert store.latest_certificate("gpu-a") is not None
        assert store.pending_files() == []


def test_pruning_the_newest_runs_never_lets_their_ids_come_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pending file names its run by id: an id handed out again would merge it into another run.
    path = tmp_path / "h.db"
    monkeypatch.setattr(history_store, "_now", lambda: day(100).isoformat(timespec="seconds"))
    with Store.open(path) as store:
        ids = []
        for _ in range(3):
            run = store.start_run("drift", 1, "p")
            store.finish_run(run)
            ids.append(run)
        assert store.prune(keep_days=30, now=NOW).runs == tuple(ids)
        assert store.start_run("drift", 1, "p") > max(ids)
    with Store.open(path) as store:  # and after the database is opened again
        assert store.start_run("drift", 1, "p") > max(ids) + 1
