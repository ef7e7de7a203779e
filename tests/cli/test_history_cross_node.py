"""``gpuready history show RUN`` of a run that ran the stage across nodes, as typed.

A report with the stage recorded the way certify records it (``record_report``) into a
real SQLite history, read back through the CLI and compared with the stage itself (a whole
``certify --cross-node`` run is tests/cli/test_certify_cross_node.py's, too slow to repeat
here); and a stored stage with a hostile node name, to show every text from a node escaped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.report.cross_node_samples import HOSTILE, sample_stage
from tests.store.test_store import certified
from validator.cli.main import main
from validator.model import Report, to_dict
from validator.service.certify_service import record_report
from validator.store import Store


def _show(capsys: pytest.CaptureFixture[str], db: Path, *extra: str) -> str:
    code = main(["history", "show", "1", "--db", str(db), *extra])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    return out


def test_a_certify_run_across_nodes_is_shown_from_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What certify records (its record_report) is what history show reads back."""
    db = tmp_path / "h.db"
    stage = sample_stage()
    nodes = tuple(certified(host) for host in ("n1", "n2", "n3", "n4"))
    report = Report("2026-12-07T00:00:00+00:00", "test", nodes, cross_node=stage)
    with Store.open(db) as store:
        run = store.start_run("certify", len(nodes), "p")
        assert record_report(store, run, report, {})
    shown = json.loads(_show(capsys, db, "--json"))
    kept = shown["cross_node"]
    written = to_dict(stage)  # as the run's report.json holds it
    assert [t["hosts"] for t in kept["tests"]] == [t["hosts"] for t in written["tests"]]
    assert [t["figure"] for t in kept["tests"]] == [t["figure"] for t in written["tests"]]
    assert kept["outcomes"] == written["outcomes"]
    (slow,) = kept["outcomes"][0]["slow_nodes"]
    assert slow["hosts"] == ["n4"]
    text = _show(capsys, db)
    assert "across nodes (ndr-400-ib): 3 of 4 nodes good" in text
    assert f"slow node n4: {slow['why']}" in text
    assert "    round 1  rdma  n3-n4  140.4 Gb/s  floor 380.0  FAIL  (first)" in text.splitlines()


def test_a_stored_stage_shows_every_test_escaped_and_unmeasured_never_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.db"
    stage = sample_stage(hostile=True)
    with Store.open(db) as store:
        run = store.start_run("certify", 2, "p")
        store.record_results(run, [(certified("n1"), None)], cross_node=stage)
        store.finish_run(run)
    text = _show(capsys, db)
    assert "\x1b" not in text
    assert "FAKE" not in text.split("\n", 1)[0]
    lines = text.splitlines()
    assert not any(line.startswith("FAKE") for line in lines)  # the name broke no line
    unmeasured = [line for line in lines if "n2-n3  no result" in line]
    assert len(unmeasured) == 1
    assert "UNKNOWN" in unmeasured[0]
    assert "Couldn't connect to n3:18515" in unmeasured[0]
    assert any("n3-n4  140.4 Gb/s  floor 380.0  FAIL" in line for line in lines)
    data = json.loads(_show(capsys, db, "--json"))
    verdicts = [t["verdict"] for t in data["cross_node"]["tests"]]
    assert verdicts == [
        "PASS" if t.passed else ("UNKNOWN" if t.figure is None else "FAIL") for t in stage.tests
    ]
    assert verdicts.count("UNKNOWN") == 1
    everything = json.dumps(data["cross_node"], ensure_ascii=False)
    assert "\x1b" not in everything
    assert "\\n" not in everything  # no newline escaped in any text: none was kept
    assert HOSTILE not in data["cross_node"]["nodes"]


def test_a_run_without_the_stage_shows_nothing_of_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.db"
    with Store.open(db) as store:
        run = store.start_run("certify", 1, "p")
        store.record_results(run, [(certified("n1"), None)])
        store.finish_run(run)
    assert "across nodes" not in _show(capsys, db)
    assert "cross_node" not in json.loads(_show(capsys, db, "--json"))
