"""``certify --simulate ib-port-down`` as typed: the finding and its action, terminal and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from validator.cli.main import main
from validator.error_tree import ExitCode

SCHEMA = (
    Path(__file__).resolve().parent.parent.parent / "validator" / "report" / "report.schema.json"
)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, _err = capsys.readouterr()
    return code, out


def test_port_down_in_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "certify", "--simulate", "ib-port-down", "--burn", "1s")
    assert code == ExitCode.NOT_CERTIFIED
    lines = [line.split() for line in out.splitlines()]
    assert lines[0][:2] == ["h100-node-01", "NOT_CERTIFIED"]
    state = next(line for line in out.splitlines() if "network.port_state" in line)
    assert state.split()[:3] == ["FAIL", "network.port_state", "node"]
    assert "mlx5_3 port 1 is down (physical state Disabled)" in state
    assert state.endswith("-> reseat or replace the cable or riser")
    ports = next(line for line in out.splitlines() if "network.ports" in line)
    assert "7 of 8 fabric port(s) Active at rate" in ports


def test_port_down_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "certify", "--simulate", "ib-port-down", "--burn", "1s", "--json")
    assert code == ExitCode.NOT_CERTIFIED
    document = json.loads(out)
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(document)
    (node,) = document["nodes"]
    by_check = {f["check"]: f for f in node["findings"] if f["check"].startswith("network.")}
    state = by_check["network.port_state"]
    assert (state["severity"], state["observed"], state["expected"], state["action"]) == (
        "FAIL",
        "DOWN/Disabled",
        "ACTIVE/LinkUp",
        "reseat_or_replace_cable_or_riser",
    )
    assert by_check["network.ports"]["observed"] == "7 up"
    hcas = node["facts"]["network"]["hcas"]
    assert [h["device"] for h in hcas] == [f"mlx5_{i}" for i in range(8)]
    down = hcas[3]["ports"][0]
    assert (down["state"], down["phys_state"]) == ("DOWN", "Disabled")


def test_healthy_node_certifies_with_its_hcas(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(
        capsys, "certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "1s", "--json"
    )
    assert code == ExitCode.OK
    (node,) = json.loads(out)["nodes"]
    passed = {f["check"] for f in node["findings"] if f["severity"] == "PASS"}
    assert {"network.ports", "network.port_state", "network.rate", "network.firmware"} <= passed
    (ports,) = [f for f in node["findings"] if f["check"] == "network.ports"]
    assert "no counter grew during the burn-in" in ports["message"]


def test_a_polling_port_gets_its_hca_an_rma_evidence_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    code, _ = _run(
        capsys, "certify", "--simulate", "ib-cable-polling", "--burn", "1s",
        "--report-dir", str(reports),
    )  # fmt: skip
    assert code == ExitCode.NOT_CERTIFIED
    (evidence,) = sorted((reports / "rma").glob("*-hca-*.txt"))
    assert evidence.name.startswith("h100-node-01-hca-mlx5")
    text = evidence.read_text(encoding="utf-8")
    assert "HCA mlx5_6 of h100-node-01" in text
    assert "PSID (board_id): MT_0000000838" in text
    assert "mlx5_6 port 1: DOWN / Polling" in text
    assert "-> reseat or replace the cable or riser" in text
    # The healthy node's run leaves no HCA evidence.
    healthy = tmp_path / "healthy"
    _run(capsys, "certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "1s",
         "--report-dir", str(healthy))  # fmt: skip
    assert list(healthy.glob("rma/*-hca-*.txt")) == []
