"""The HCAs in a capture bundle: written by gpuready capture, replayed by certify --capture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.collecting import collect_capture
from validator.error_tree import CaptureError
from validator.judge.policy import Policy
from validator.judge.verdict import judge_node
from validator.model import Reason, Severity, Unavailable
from validator.node.capture.capture_replay import write_capture
from validator.node.parsers.ib_sysfs import parse_tree
from validator.node.sim.scenario import load_scenario

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _bundle(tmp_path: Path, scenario: str) -> Path:
    folder = tmp_path / scenario
    outcome = write_capture(folder, load_scenario(scenario).system())
    for name in ("infiniband-sysfs.txt", "ibstat.txt", "ibv_devinfo.txt"):
        assert outcome[name] == "written", outcome
    return folder


def test_capture_records_the_tree_and_the_tools_and_certify_reads_them(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, "ib-cable-polling")
    tree = parse_tree((folder / "infiniband-sysfs.txt").read_text(encoding="utf-8"))
    assert tree["/sys/class/infiniband/mlx5_6/ports/1/phys_state"] == "2: Polling"
    assert tree["/sys/class/infiniband/mlx5_0/board_id"] == "MT_0000000838"
    facts = collect_capture(folder)
    assert facts.network is not None
    assert facts.network.source == "sysfs"
    assert facts.network.disagreements == ()  # ibstat.txt and ibv_devinfo.txt agree
    result = judge_node(facts, Policy(require_burn=False))
    failed = {f.check for f in result.findings if f.severity is Severity.FAIL}
    assert {"network.port_state", "network.ports"} <= failed


def test_an_empty_tree_is_no_hca_and_a_bundle_without_it_is_not_measured(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, "healthy-8x-h100-sxm")
    (folder / "infiniband-sysfs.txt").write_text("", encoding="utf-8")
    (folder / "ibstat.txt").write_text("", encoding="utf-8")
    (folder / "ibv_devinfo.txt").unlink()
    network = collect_capture(folder).network
    assert network is not None
    assert network.hcas == ()
    for name in ("infiniband-sysfs.txt", "ibstat.txt"):
        (folder / name).unlink()
    network = collect_capture(folder).network
    assert network is not None
    assert isinstance(network.hcas, Unavailable)
    assert network.hcas.reason is Reason.NOT_MEASURED
    assert "infiniband-sysfs.txt not in the capture" in network.hcas.detail


def test_ibstat_stands_in_for_the_tree(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, "healthy-8x-h100-sxm")
    (folder / "infiniband-sysfs.txt").unlink()
    real = (FIXTURES / "ibstat" / "nccl-tests-128-cx6-hdr-ib-one-down.txt").read_text()
    (folder / "ibstat.txt").write_text(real, encoding="utf-8")
    network = collect_capture(folder).network
    assert network is not None
    assert network.source == "ibstat"
    assert not isinstance(network.hcas, Unavailable)
    states = [(p.name, p.state, p.phys_state) for h in network.hcas for p in h.ports]
    assert states == [("mlx5_0 port 1", "ACTIVE", "LinkUp"), ("mlx5_1 port 1", "DOWN", "Disabled")]
    # ibstat prints no PSID, PKey or counters: those are not measured, never clean.
    assert isinstance(network.hcas[0].board_id, Unavailable)
    assert isinstance(network.hcas[0].ports[0].counters, Unavailable)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("infiniband-sysfs.txt", "/etc/shadow\troot\n"),
        ("ibstat.txt", "this is not ibstat\n"),
    ],
)
def test_a_broken_network_file_is_bad_input(tmp_path: Path, name: str, text: str) -> None:
    folder = _bundle(tmp_path, "healthy-8x-h100-sxm")
    (folder / name).write_text(text, encoding="utf-8")
    with pytest.raises(CaptureError, match=name):
        collect_capture(folder)


def test_meta_is_untouched_by_the_new_files(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, "ib-port-200g")
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    assert "infiniband-sysfs.txt" not in meta.get("locations", {})
