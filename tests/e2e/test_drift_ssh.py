"""Certify test hosts over SSH, change one host, and drift finds exactly that host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hosts.testhosts import TestHostPool
from validator.cli.main import main
from validator.error_tree import ExitCode

pytestmark = pytest.mark.hosts


def test_drift_finds_exactly_the_changed_host(
    test_hosts: TestHostPool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = test_hosts.start(["healthy-8x-h100-sxm"] * 3)
    inventory = test_hosts.write_inventory(tmp_path / "inventory.ini")
    known_hosts = test_hosts.known_hosts(tmp_path / "known_hosts")
    db = tmp_path / "history.db"
    common = ["-i", str(inventory), "--known-hosts", str(known_hosts), "--db", str(db), "--json"]

    code = main(["certify", *common, "--burn", "1s"])
    certified = json.loads(capsys.readouterr().out)
    assert code == ExitCode.OK, [n["summary"] for n in certified["nodes"]]

    code = main(["drift", *common])
    unchanged = json.loads(capsys.readouterr().out)
    assert code == ExitCode.OK
    assert {n["verdict"] for n in unchanged["nodes"]} == {"CERTIFIED"}

    changed = hosts[1]
    changed.set_scenario("one-gpu-power-capped")  # someone ran nvidia-smi -pl 500 on GPU 3
    code = main(["drift", *common])
    drifted = json.loads(capsys.readouterr().out)
    assert code == ExitCode.NOT_CERTIFIED
    verdicts = {n["hostname"]: n["verdict"] for n in drifted["nodes"]}
    assert verdicts == {
        hosts[0].name: "CERTIFIED",
        changed.name: "NOT_CERTIFIED",
        hosts[2].name: "CERTIFIED",
    }
    (node,) = [n for n in drifted["nodes"] if n["hostname"] == changed.name]
    failed = {(f["check"], f["gpu_index"]) for f in node["findings"] if f["severity"] == "FAIL"}
    assert failed == {("drift.power_limit", 3)}

    code = main(["history", changed.name, "--db", str(db), "--json"])
    kinds = [row["kind"] for row in json.loads(capsys.readouterr().out)]
    assert kinds == ["drift", "drift", "certify"]
