"""``run_drift``, the drift command's service function: history, outputs, Slurm, fleets."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli_drift import certify_into, write_inventory
from tests.drift.test_drift import ISSUED, POLICY, baseline, certified_facts
from tests.drift.test_drift_outputs import FakeScontrol
from validator.certificate import issue_certificate
from validator.drift import slurm_reason
from validator.error_tree import ExitCode, ReportError
from validator.judge import judge_node
from validator.model import HostSpec, NodeResult, Verdict
from validator.service.collect_and_judge import FleetRequest, Reach
from validator.service.drift_service import DriftRequest, run_drift
from validator.slurm import Action
from validator.slurm.judged_nodes import SlurmStep, tell_slurm
from validator.store import Store

HOST = "h100-node-01"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "history.db") as opened:
        yield opened


def test_this_machine_against_the_store(store: Store, tmp_path: Path) -> None:
    certify_into(store.path, HOST)
    request = DriftRequest(simulate="one-gpu-power-capped", argv=("gpuready", "drift"))
    outcome = run_drift(request, store)
    (result,) = outcome.results
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert outcome.exit_code is ExitCode.NOT_CERTIFIED
    assert (outcome.interrupted, outcome.prom_file, outcome.slurm) == (False, None, ())
    assert outcome.report.nodes == outcome.results
    (row, _) = store.history(HOST)
    assert (row.run_id, row.kind, row.status, row.verdict) == (
        outcome.run_id,
        "drift",
        "complete",
        "NOT_CERTIFIED",
    )


def test_a_given_certificate_instead_of_the_store(store: Store) -> None:
    cert = issue_certificate(judge_node(certified_facts(), POLICY), now=ISSUED)
    outcome = run_drift(DriftRequest(simulate="healthy-8x-h100-sxm", certificate=cert), store)
    assert outcome.exit_code is ExitCode.OK
    never = run_drift(DriftRequest(simulate="healthy-8x-h100-sxm"), store)
    assert never.exit_code is ExitCode.COULD_NOT_RUN


def test_the_prometheus_file_is_written_and_the_run_closed(store: Store, tmp_path: Path) -> None:
    prom = tmp_path / "gpuready.prom"
    outcome = run_drift(DriftRequest(simulate="healthy-8x-h100-sxm", prom_file=str(prom)), store)
    assert outcome.prom_file == prom
    assert 'gpuready_drift_status{host="h100-node-01",status="never_certified"} 1.0' in (
        prom.read_text()
    )


def test_history_is_kept_when_the_prometheus_file_cannot_be_written(
    store: Store, tmp_path: Path
) -> None:
    request = DriftRequest(
        simulate="healthy-8x-h100-sxm", prom_file=str(tmp_path / "absent" / "x.prom")
    )
    with pytest.raises(ReportError):
        run_drift(request, store)
    (row,) = store.history(HOST)
    assert (row.kind, row.status, row.verdict) == ("drift", "complete", "UNKNOWN")


def test_slurm_is_told_about_judged_nodes_only() -> None:
    clean = dataclasses.replace(_result(Verdict.CERTIFIED), hostname="gpu01")
    drifted = dataclasses.replace(_result(Verdict.NOT_CERTIFIED), hostname="gpu02")
    unknown = dataclasses.replace(_result(Verdict.UNKNOWN), hostname="gpu03")
    bad_name = dataclasses.replace(_result(Verdict.NOT_CERTIFIED), hostname="gpu[01-02]")
    fake = FakeScontrol("IDLE+DRAIN", "gpuready: drift: driver")
    steps = tell_slurm([clean, drifted, unknown, bad_name], slurm_reason, fake)
    assert [(s.hostname, s.action) for s in steps] == [
        ("gpu01", Action.RESUMED),
        ("gpu02", Action.UPDATED),
        ("gpu[01-02]", None),
    ]
    assert "is not a Slurm node name" in steps[-1].error
    assert all(call[2] != "gpu03" for call in fake.calls)


def test_slurm_drain_in_the_outcome(store: Store) -> None:
    certify_into(store.path, HOST)
    fake = FakeScontrol()
    request = DriftRequest(simulate="one-gpu-power-capped", slurm_drain=True)
    outcome = run_drift(request, store, slurm_runner=fake)
    assert outcome.slurm == (SlurmStep(HOST, Action.DRAINED),)
    assert fake.updates()[0][-1].endswith("power_limit (GPU 3)")


class Display:
    """Records what a fleet run tells its display."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self.results: list[str] = []

    def set_hosts(self, hosts: list[HostSpec]) -> None:
        self.hosts = [host.name for host in hosts]

    def phase(self, host: str, phase: str) -> None:
        del host, phase

    def result(self, result: NodeResult) -> None:
        self.results.append(result.hostname)


def test_a_fleet_over_the_local_transport(store: Store, tmp_path: Path) -> None:
    certify_into(store.path, "gpu01", "gpu02")
    inventory = write_inventory(
        tmp_path,
        {"gpu01": "healthy-8x-h100-sxm", "gpu02": "one-gpu-power-capped", "gpu03": "cudnn-missing"},
    )
    display = Display()
    request = DriftRequest(reach=Reach(inventories=(str(inventory),), transport="local"))
    outcome = run_drift(request, store, fleet_display=display)
    assert [(r.hostname, r.verdict) for r in outcome.results] == [
        ("gpu01", Verdict.CERTIFIED),
        ("gpu02", Verdict.NOT_CERTIFIED),
        ("gpu03", Verdict.UNKNOWN),
    ]
    assert display.hosts == ["gpu01", "gpu02", "gpu03"]
    assert sorted(display.results) == ["gpu01", "gpu02", "gpu03"]
    assert outcome.exit_code is ExitCode.NOT_CERTIFIED
    rows = [r for r in store.history() if r.kind == "drift"]
    assert {(r.hostname, r.status) for r in rows} == {
        ("gpu01", "complete"),
        ("gpu02", "complete"),
        ("gpu03", "complete"),
    }


def test_the_request_makes_certifys_fan_out_and_refuses_what_is_for_one_machine() -> None:
    request = DriftRequest(
        reach=Reach(inventories=("a.ini",), limit="gpu0*", transport="ansible", parallel=3),
        deadline_s=9.0,
    )
    assert request.fleet() == FleetRequest(
        Reach(inventories=("a.ini",), limit="gpu0*", transport="ansible", parallel=3),
        deadline_s=9.0,
    )
    with pytest.raises(ValueError, match="for this machine"):
        DriftRequest(reach=Reach(inventories=("a.ini",)), simulate="healthy-8x-h100-sxm")
    with pytest.raises(ValueError, match="for this machine"):
        DriftRequest(reach=Reach(inventories=("a.ini",)), certificate=baseline())


def _result(verdict: Verdict) -> NodeResult:
    result = judge_node(certified_facts(), POLICY)
    return dataclasses.replace(result, verdict=verdict, summary=f"drift: {verdict.value}")
