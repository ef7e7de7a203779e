"""``gpuready certify -i hosts.ini --cross-node rdma``: simulated local hosts, the stand-ins.

Every host is local (``gpuready_transport=local``), so the stage runs each step on this
machine (validator.remote.cross_node_local), told which host it stands for; the stand-ins
(tests/fixtures/standins) on PATH print real ib_write_bw / ib_write_lat recordings chosen
by a map of healthy and slow hosts. The per-node stage, the planner, the bisection, the
judge, the report and the certificates are the real ones.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import click
import pytest

from tests.standins import put_standins_on_path
from validator.cli.main import main
from validator.judge.fabric_catalog import load_fabric_catalog

HOSTS = ("n1", "n2", "n3", "n4")


@pytest.fixture(autouse=True)
def standins_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    put_standins_on_path(monkeypatch)


def _fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow: dict[str, str]) -> Path:
    table = tmp_path / "fabric.json"
    table.write_text(json.dumps({"default": "healthy", "pairs": {}, "hosts": slow}))
    monkeypatch.setenv("GPUREADY_STANDIN_MAP", str(table))
    inventory = tmp_path / "hosts.ini"
    lines = [
        f"{name} gpuready_transport=local gpuready_simulate=healthy-8x-h100-sxm" for name in HOSTS
    ]
    inventory.write_text("[gpu]\n" + "\n".join(lines) + "\n")
    return inventory


def _certify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], inventory: Path, *extra: str
) -> tuple[int, dict[str, Any], Path]:
    reports = tmp_path / "reports"
    argv = ["certify", "-i", str(inventory), "--burn", "1s", "--db", str(tmp_path / "h.db")]
    kinds = "rdma"
    if extra and extra[0].startswith("--cross-node="):
        kinds, extra = extra[0].split("=", 1)[1], extra[1:]
    code = main([*argv, "--report-dir", str(reports), "--cross-node", kinds, *extra])
    capsys.readouterr()
    document = json.loads((reports / "report.json").read_text())
    return code, document, reports


def _certificate(reports: Path, host: str) -> dict[str, Any]:
    found = sorted((reports / "certificates").glob(f"{host}*.json"))
    assert found, f"no certificate for {host}"
    certificate: dict[str, Any] = json.loads(found[0].read_text())
    return certificate


def test_healthy_fleet_certified_in_the_fabric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = _fleet(tmp_path, monkeypatch, {})
    code, document, reports = _certify(tmp_path, capsys, inventory, "--cross-node=rdma,nccl")
    verdicts = {node["hostname"]: node["verdict"] for node in document["nodes"]}
    assert verdicts == dict.fromkeys(HOSTS, "CERTIFIED")
    assert code == 0
    stage = document["cross_node"]
    assert isinstance(stage, dict)
    assert stage["fabric"] == "ndr-400-ib"  # from the H100 SXM row's NDR network
    assert stage["nodes"] == list(HOSTS)
    rdma, nccl = stage["outcomes"]
    assert (rdma["kind"], nccl["kind"]) == ("rdma", "nccl")
    for outcome in (rdma, nccl):
        assert sorted(outcome["good"]) == list(HOSTS)
        assert outcome["rounds"] >= 1
        assert not outcome["skipped"]
    assert all(test["passed"] for test in stage["tests"])
    figures: dict[str, set[float]] = {test["kind"]: set() for test in stage["tests"]}
    for test in stage["tests"]:
        figures[test["kind"]].add(test["figure"])
    assert figures["rdma"] == {392.34}  # the healthy recording, the pair's slowest HCA
    # all_reduce_perf's busbw 469.21 GB/s (16 GiB, 2 x 8 H100) over 8 HCAs
    assert [round(figure, 3) for figure in figures["nccl"]] == [round(469.21 / 8, 3)]
    fabric = _certificate(reports, "n1").get("fabric")
    assert isinstance(fabric, dict)
    assert fabric["status"] == "certified"
    assert fabric["fabric"] == "ndr-400-ib"


def test_slow_node_named_by_bisection_not_certified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = _fleet(tmp_path, monkeypatch, {"n3": "slow-link"})
    code, document, reports = _certify(tmp_path, capsys, inventory)
    nodes = {node["hostname"]: node for node in document["nodes"]}
    assert nodes["n3"]["verdict"] == "NOT_CERTIFIED"
    assert [h for h, n in nodes.items() if n["verdict"] == "CERTIFIED"] == ["n1", "n2", "n4"]
    assert code != 0
    failed = [f for f in nodes["n3"]["findings"] if f["severity"] == "FAIL"]
    assert [f["check"] for f in failed] == ["fabric.rdma_bandwidth"]
    assert failed[0]["action"]
    (rdma,) = document["cross_node"]["outcomes"]
    assert [named["hosts"] for named in rdma["slow_nodes"]] == [["n3"]]
    assert "140.4" in rdma["slow_nodes"][0]["why"]
    assert not list((reports / "certificates").glob("n3*"))  # not certified: none issued
    fabric = _certificate(reports, "n1").get("fabric")
    assert isinstance(fabric, dict)
    assert fabric["status"] == "certified"


def test_one_node_with_cross_node_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["certify", "--simulate", "healthy-8x-h100-sxm", "--cross-node", "rdma"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--cross-node needs a fleet: -i or --slurm" in err
    assert "Traceback" not in err


def test_unknown_kind_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        "[gpu]\nn1 gpuready_transport=local gpuready_simulate=healthy-8x-h100-sxm\n"
    )
    code = main(["certify", "-i", str(inventory), "--cross-node", "rdma,ping"])
    assert code == 2
    assert "rdma and/or nccl" in capsys.readouterr().err


def test_fabric_choices_are_the_catalogs() -> None:
    from validator.cli.certify import certify

    (option,) = [p for p in certify.params if p.name == "fabric"]
    assert isinstance(option.type, click.Choice)
    assert sorted(option.type.choices) == sorted(row.id for row in load_fabric_catalog().fabrics)


def test_slow_node_drained_with_its_fabric_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A stand-in scontrol: every node idle, no reason; each call recorded.
    calls = tmp_path / "scontrol.log"
    shim = tmp_path / "bin" / "scontrol"
    shim.parent.mkdir()
    shim.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> "{calls}"\n'
        'if [ "$1" = show ]; then echo "NodeName=$3 State=IDLE"; fi\n'
    )
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    inventory = _fleet(tmp_path, monkeypatch, {"n3": "slow-link"})
    code, _, _ = _certify(tmp_path, capsys, inventory, "--slurm-drain")
    assert code != 0
    drains = [line for line in calls.read_text().splitlines() if "State=DRAIN" in line]
    assert drains == [
        "update NodeName=n3 State=DRAIN Reason=gpuready: not certified: fabric.rdma_bandwidth"
    ]


def test_terminal_summary_names_the_slow_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = _fleet(tmp_path, monkeypatch, {"n3": "slow-link"})
    argv = ["certify", "-i", str(inventory), "--burn", "1s", "--db", str(tmp_path / "h.db")]
    main([*argv, "--cross-node", "rdma", "--no-color"])
    out = capsys.readouterr().out
    (stage,) = [line for line in out.splitlines() if line.startswith("across nodes")]
    assert stage.startswith("across nodes (ndr-400-ib): 3 of 4 nodes good, ")
    assert "nodes out of service at once" in stage
    (slow,) = [line for line in out.splitlines() if "slow node" in line]
    assert slow.strip().startswith("slow node n3: below the floor with ")
    assert "140.4 Gb/s" in slow


@pytest.mark.browser
def test_pair_matrix_in_the_browser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.report.test_html_browser import _run

    inventory = _fleet(tmp_path, monkeypatch, {"n3": "slow-link"})
    _, document, reports = _certify(tmp_path, capsys, inventory)
    result = _run(tmp_path, "--dump-dom", (reports / "report.html").as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    assert 'id="cross-node"' in dom
    assert "across nodes (ndr-400-ib): 3 of 4 nodes good" in dom
    maps = re.findall(r'<svg class="chart chart-heat".*?</svg>', dom, flags=re.DOTALL)
    assert len(maps) == 1  # rdma alone was asked
    assert maps[0].count('<rect class="cell') == len(HOSTS) * len(HOSTS)
    # Every test the JSON holds is a cell whose tooltip carries its figure.
    for test in document["cross_node"]["tests"]:
        a, b = test["hosts"]
        words = f"{a} with {b}: {test['figure']:.1f} Gb/s, round {test['round']}"
        assert words in maps[0]
    slow = [t for t in document["cross_node"]["tests"] if "n3" in t["hosts"]]
    assert slow
    assert all(not t["passed"] for t in slow)
    assert "slow node n3: below the floor with" in dom


def test_a_fleet_without_a_runner_is_refused_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        "[gpu]\nn1 gpuready_transport=local gpuready_simulate=healthy-8x-h100-sxm\n"
        "n2 gpuready_transport=ansible gpuready_simulate=healthy-8x-h100-sxm\n"
    )
    db = tmp_path / "h.db"
    code = main(["certify", "-i", str(inventory), "--cross-node", "rdma", "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert "--cross-node reaches the hosts over SSH or through Slurm" in line
    assert not db.exists()  # refused before a run began
