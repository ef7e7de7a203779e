"""Drift right after a certification that failed names that run, not "never certified".

Run as the user types it: ``certify`` of a simulated node that fails, into a temporary
history, then ``drift`` of the same node against that history.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from validator.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_drift_after_a_failed_certify_names_the_run_and_its_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "history.db")
    code, _, _ = run(capsys, "certify", "--simulate", "one-gpu-power-capped", "--db", db)
    assert code == 1
    code, out, err = run(capsys, "drift", "--simulate", "one-gpu-power-capped", "--db", db)
    assert "never certified: run gpuready certify first" not in out
    match = re.search(
        r"not certified: run 1 \(\d{4}-\d\d-\d\d \d\d:\d\d\) failed: 3 checks "
        r"\(burn\.speed \(GPU 3\), burn\.speed_relative \(GPU 3\), power\.limit \(GPU 3\)\); "
        r"fix and certify again",
        out,
    )
    assert match is not None, out
    assert code == 3, (out, err)  # no certificate: nothing to compare with
    # The state column says what it is: tried and failed, not never tried.
    assert re.search(r"^\S+  NOT CERTIFIED  not certified: run 1 ", out, re.M), out
    assert "NEVER CERTIFIED" not in out


def test_the_nhc_line_names_it_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "history.db")
    run(capsys, "certify", "--simulate", "one-gpu-power-capped", "--db", db, "--burn", "0")
    code, out, _ = run(capsys, "drift", "--simulate", "one-gpu-power-capped", "--db", db, "--nhc")
    assert re.fullmatch(
        r"gpuready: not certified: run 1 \(.{16}\) failed: 1 check \(power\.limit \(GPU 3\)\); "
        r"fix and certify again\n",
        out,
    ), out
    assert code == 1  # NHC: a node that is not certified does not pass


def test_a_node_never_tried_still_reads_never_certified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "history.db")
    code, out, _ = run(capsys, "drift", "--simulate", "healthy-8x-h100-sxm", "--db", db)
    assert "never certified: run gpuready certify first" in out
    assert re.search(r"^\S+  NEVER CERTIFIED  ", out, re.M), out
    assert code == 3


def test_a_fleets_count_line_tells_the_two_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from validator.model import DriftState, drift_state
    from validator.report.drift_text import render_drift_text

    db = str(tmp_path / "history.db")
    run(capsys, "certify", "--simulate", "one-gpu-power-capped", "--db", db, "--burn", "0")
    code, out, _ = run(
        capsys, "drift", "--simulate", "one-gpu-power-capped", "--db", db, "--json"
    )
    assert code == 3, out
    from validator.report.json_report import load_report_json

    failed = load_report_json(out).nodes[0]
    assert drift_state(failed) is DriftState.NOT_CERTIFIED
    text = render_drift_text([failed, failed])
    assert text.splitlines()[-1].endswith("0 never certified, 2 not certified"), text
