"""The stage across nodes in history: kept with its run, read back whole, spooled, migrated.

Real SQLite files throughout; an old database is one made by this gpuready's own first
three migrations (schema 3, the last before the stage was kept), as a user has it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.report.cross_node_samples import sample_stage
from tests.store.test_never_lost import write_locked
from tests.store.test_store import certified
from validator.store import Store
from validator.store import schema as store_schema


def test_a_run_with_the_stage_keeps_it_whole_and_one_without_keeps_none(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    stage = sample_stage(hostile=True)
    with Store.open(path) as store:
        with_stage = store.start_run("certify", 2, "p")
        store.record_results(with_stage, [(certified("n1"), None)], cross_node=stage)
        store.finish_run(with_stage)
        alone = store.start_run("certify", 1, "p")
        store.record_results(alone, [(certified("n1"), None)])
        store.finish_run(alone)
    with Store.open(path, readonly=True) as store:
        assert store.cross_node(with_stage) == stage
        assert store.cross_node(alone) is None
        assert store.cross_node(999) is None


def test_an_unreadable_stored_stage_is_one_line_naming_the_run(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with Store.open(path) as store:
        run = store.start_run("certify", 1, "p")
        store.record_results(run, [(certified("n1"), None)], cross_node=sample_stage())
    db = sqlite3.connect(path)
    db.execute("UPDATE runs SET cross_node_packed = ? WHERE id = ?", (b"not packed", run))
    db.commit()
    db.close()
    from validator.store import StoreError

    with Store.open(path, readonly=True) as store, pytest.raises(StoreError) as caught:
        store.cross_node(run)
    assert f"run {run}" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_schema_3_database_upgrades_and_its_runs_have_no_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "h.db"
    with monkeypatch.context() as patch:
        patch.setattr(store_schema, "MIGRATIONS", store_schema.MIGRATIONS[:3])
        with Store.open(path) as store:
            old = store.start_run("certify", 1, "p")
            store.record_result(old, certified("n1"))
            store.finish_run(old)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (3,)
    db.close()
    assert store_schema.schema_version() == 4
    with Store.open(path) as store:
        assert store.cross_node(old) is None
        assert store.result(old, "n1") is not None
        new = store.start_run("certify", 2, "p")
        store.record_results(new, [(certified("n2"), None)], cross_node=sample_stage())
        assert store.cross_node(new) == sample_stage()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (4,)
    db.close()


def test_a_failed_upgrade_leaves_the_schema_3_database_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "h.db"
    with monkeypatch.context() as patch:
        patch.setattr(store_schema, "MIGRATIONS", store_schema.MIGRATIONS[:3])
        with Store.open(path) as store:
            store.finish_run(store.start_run("certify", 1, "p"))
    before = path.read_bytes()
    broken = (*store_schema.MIGRATIONS[3], "THIS IS NOT SQL")
    monkeypatch.setattr(store_schema, "MIGRATIONS", (*store_schema.MIGRATIONS[:3], broken))
    from validator.store import StoreError

    with pytest.raises(StoreError, match="syntax error"):
        Store.open(path)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (3,)
    columns = [row[1] for row in db.execute("PRAGMA table_info(runs)")]
    assert "cross_node_packed" not in columns
    db.close()
    assert len(path.read_bytes()) == len(before)


def test_a_spooled_run_keeps_its_stage_through_the_import(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    stage = sample_stage()
    with write_locked(path):
        store = Store.open(path, retry_s=0.2)
        run = store.start_run("certify", 2, "p")
        assert run < 0  # spooled: the database is held by another process
        store.record_results(run, [(certified("n1"), None)], cross_node=stage)
        store.finish_run(run)
        store.close()
    with Store.open(path) as store:
        rows = store.history()
        assert len(rows) == 1
        assert store.cross_node(rows[0].run_id) == stage
