"""The stage across nodes run for real: the stand-ins as local programs, one map per fabric.

Each "host" is this machine (validator.remote.cross_node_local); the stand-ins
(tests/fixtures/standins) print real recordings chosen by a JSON map of healthy,
slow-link, dead-node and hang pairs and hosts. The planner, the runner, the parsers,
the judge and the verdicts are the real ones.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.interrupting import ctrl_c_after
from tests.standins import put_standins_on_path
from validator.judge.cross_node_judge import LINK, NCCL_BANDWIDTH, RDMA_BANDWIDTH, REACHABLE
from validator.model import (
    Action,
    CrossNodeStage,
    Finding,
    GpuFacts,
    NodeFacts,
    NodeResult,
    NvmlStatus,
    Severity,
    Verdict,
    from_dict,
    to_dict,
)
from validator.remote.cross_node_local import LocalLauncher
from validator.remote.cross_node_runner import (
    CrossNodePlan,
    StepRunner,
    plan_from_mapping,
)
from validator.service.cross_node_service import StageOptions, run_cross_node_stage


@pytest.fixture(autouse=True)
def standins_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    put_standins_on_path(monkeypatch)


def fabric_map(
    tmp_path: Path, pairs: Mapping[str, str] = {}, hosts: Mapping[str, str] = {}
) -> Path:
    path = tmp_path / "fabric.json"
    path.write_text(json.dumps({"default": "healthy", "pairs": pairs, "hosts": hosts}))
    return path


def launcher(table: Path) -> LocalLauncher:
    def env_for(hosts: Sequence[str]) -> dict[str, str]:
        return {
            "GPUREADY_STEP_HOST": hosts[0],
            "GPUREADY_STEP_GROUP": ",".join(hosts),
            "GPUREADY_STANDIN_MAP": str(table),
        }

    return LocalLauncher(env_for)


def plan(names: Sequence[str], hcas: int = 1, **options: object) -> CrossNodePlan:
    options = {"duration_s": 1, "listen_wait_s": 2.0, "step_margin_s": 2.0, **options}
    table = {name: {"hcas": [f"mlx5_{i}" for i in range(hcas)]} for name in names}
    return plan_from_mapping(table, **options)


def node(name: str, verdict: Verdict = Verdict.CERTIFIED) -> NodeResult:
    gpus = tuple(GpuFacts(index=i, name="NVIDIA H100 80GB HBM3") for i in range(8))
    facts = NodeFacts(
        name, source="simulate", nvml_status=NvmlStatus.OK, pci_gpu_count=8, gpus=gpus
    )
    finding = Finding(
        "burn.throughput", Severity.PASS if verdict is Verdict.CERTIFIED else Severity.FAIL, "x"
    )
    return NodeResult(name, verdict, facts, (finding,), sku="h100-sxm", summary="alone")


def names(count: int) -> list[str]:
    return [f"gpu{i:02d}" for i in range(1, count + 1)]


def run(
    hosts: Sequence[str],
    table: Path,
    kinds: Sequence[str] = ("rdma",),
    *,
    results: Sequence[NodeResult] | None = None,
    runner: StepRunner | None = None,
    **extra: object,
) -> tuple[dict[str, NodeResult], CrossNodeStage, LocalLauncher]:
    local = launcher(table)
    judged, stage = run_cross_node_stage(
        results if results is not None else [node(name) for name in hosts],
        runner or StepRunner(local),
        kinds,
        "ndr-400-ib",
        extra.pop("the_plan", None) or plan(hosts),  # type: ignore[arg-type]
        deadline=time.monotonic() + 120,
        **extra,  # type: ignore[arg-type]
    )
    return {result.hostname: result for result in judged}, stage, local


def fabric(result: NodeResult, check: str) -> list[Finding]:
    return [f for f in result.findings if f.check == check]


def nothing_left(local: LocalLauncher) -> None:
    assert local.started
    for step in local.started:
        assert step.wait(0) is not None, f"step {step.pid} still runs"
        with pytest.raises(ProcessLookupError):
            os.killpg(step.pid, 0)


def test_a_healthy_fabric_certifies_every_node_in_one_round(tmp_path: Path) -> None:
    hosts = names(6)
    judged, stage, local = run(hosts, fabric_map(tmp_path), ("rdma", "nccl"))
    assert {r.verdict for r in judged.values()} == {Verdict.CERTIFIED}
    rdma, nccl = stage.outcome("rdma"), stage.outcome("nccl")
    assert rdma is not None
    assert nccl is not None
    assert rdma.good == nccl.good == tuple(hosts)
    assert rdma.rounds == 1
    assert {t.figure for t in stage.tests if t.kind == "rdma"} == {392.34}
    assert rdma.floor == 380.0
    assert rdma.fleet_median == 392.34
    for result in judged.values():
        assert fabric(result, RDMA_BANDWIDTH)[0].severity is Severity.PASS
        assert fabric(result, NCCL_BANDWIDTH)[0].severity is Severity.PASS
    nothing_left(local)
    assert from_dict(CrossNodeStage, to_dict(stage)) == stage


def test_a_slow_link_and_a_dead_node_are_named(tmp_path: Path) -> None:
    hosts = names(8)
    table = fabric_map(tmp_path, {"gpu03,gpu04": "slow-link"}, {"gpu06": "dead-node"})
    judged, stage, local = run(hosts, table)
    rdma = stage.outcome("rdma")
    assert rdma is not None
    assert [named.hosts for named in rdma.slow_links] == [("gpu03", "gpu04")]
    assert [named.hosts for named in rdma.unreachable] == [("gpu06",)]
    assert not rdma.slow_nodes
    for end in ("gpu03", "gpu04"):
        assert judged[end].verdict is Verdict.NOT_CERTIFIED
        (link,) = fabric(judged[end], LINK)
        assert link.action is Action.RESEAT_CABLE_RISER
        assert "140.4 Gb/s" in link.message
    (gone,) = fabric(judged["gpu06"], REACHABLE)
    assert judged["gpu06"].verdict is Verdict.NOT_CERTIFIED
    assert "exited with status 1" in gone.message or "Couldn't connect" in gone.message
    for other in ("gpu01", "gpu02", "gpu05", "gpu07", "gpu08"):
        assert judged[other].verdict is Verdict.CERTIFIED
    assert stage.max_out_of_service == 8
    nothing_left(local)


def test_a_slow_node_is_named_with_its_two_known_good_peers(tmp_path: Path) -> None:
    hosts = names(6)
    judged, stage, _ = run(hosts, fabric_map(tmp_path, hosts={"gpu02": "slow-link"}))
    rdma = stage.outcome("rdma")
    assert rdma is not None
    assert [named.hosts for named in rdma.slow_nodes] == [("gpu02",)]
    (slow,) = fabric(judged["gpu02"], RDMA_BANDWIDTH)
    assert slow.severity is Severity.FAIL
    assert slow.action is Action.DRAIN_RMA  # slow on its every HCA
    assert judged["gpu02"].verdict is Verdict.NOT_CERTIFIED
    assert sum(r.verdict is Verdict.CERTIFIED for r in judged.values()) == 5


def test_only_nodes_certified_alone_enter(tmp_path: Path) -> None:
    hosts = names(4)
    results = [node(name) for name in hosts] + [node("gpu05", Verdict.NOT_CERTIFIED)]
    judged, stage, local = run(hosts, fabric_map(tmp_path), results=results)
    assert stage.nodes == tuple(hosts)
    assert judged["gpu05"] is results[-1]
    assert all("gpu05" not in " ".join(step_hosts) for step_hosts in [t.hosts for t in stage.tests])
    # two pairs; bandwidth both ways and latency one way; a server and a client each
    assert len(local.started) == 2 * 3 * 2


def test_a_hanging_tool_is_killed_at_its_timeout_and_nothing_is_left(tmp_path: Path) -> None:
    hosts = names(4)
    started = time.monotonic()
    judged, stage, local = run(hosts, fabric_map(tmp_path, hosts={"gpu02": "hang"}))
    assert time.monotonic() - started < 60
    rdma = stage.outcome("rdma")
    assert rdma is not None
    assert "gpu02" not in rdma.good
    assert judged["gpu02"].verdict is not Verdict.CERTIFIED
    details = " ".join(t.detail for t in stage.tests if "gpu02" in t.hosts)
    assert "time limit" in details or "did not listen" in details
    nothing_left(local)


def test_a_stop_ends_the_stage_after_the_running_round(tmp_path: Path) -> None:
    hosts = names(6)
    table = fabric_map(tmp_path, {"gpu01,gpu02": "slow-link"})
    rounds: list[int] = []

    def stop() -> bool:
        rounds.append(1)
        return len(rounds) > 1  # asked before each round: round 1 runs, round 2 does not

    judged, stage, local = run(hosts, table, ("rdma", "nccl"), stop=stop)
    assert stage.interrupted
    rdma = stage.outcome("rdma")
    assert rdma is not None
    assert rdma.rounds == 1
    assert set(rdma.good) == {"gpu03", "gpu04", "gpu05", "gpu06"}  # what round 1 proved
    for name in ("gpu01", "gpu02"):
        (undecided,) = fabric(judged[name], RDMA_BANDWIDTH)
        assert undecided.severity is Severity.UNKNOWN
        assert undecided.action is Action.RERUN
        assert judged[name].verdict is Verdict.UNKNOWN
    nccl = stage.outcome("nccl")
    assert nccl is not None
    assert "interrupted" in nccl.skipped
    nothing_left(local)


def test_ctrl_c_during_a_round_kills_its_steps_and_keeps_the_rounds_before(tmp_path: Path) -> None:
    hosts = names(4)
    table = fabric_map(tmp_path, {"gpu01,gpu02": "hang", "gpu03,gpu04": "hang"})
    started = time.monotonic()
    with ctrl_c_after(1.5):
        judged, stage, local = run(
            hosts, table, the_plan=plan(hosts, listen_wait_s=30, step_margin_s=60)
        )
    assert time.monotonic() - started < 20  # not the 30 s the servers were given
    assert stage.interrupted
    assert not stage.tests  # the cut round is not kept
    assert {r.verdict for r in judged.values()} == {Verdict.UNKNOWN}
    nothing_left(local)


class _NoGroups(StepRunner):
    def nccl_unavailable(self) -> str | None:
        return "NCCL across nodes needs Slurm or mpirun: give mpirun, or certify through Slurm"


def test_nccl_without_a_launcher_is_unknown_never_a_pass(tmp_path: Path) -> None:
    hosts = names(4)
    local = launcher(fabric_map(tmp_path))
    judged, stage, _ = run(hosts, fabric_map(tmp_path), ("rdma", "nccl"), runner=_NoGroups(local))
    for result in judged.values():
        (finding,) = fabric(result, NCCL_BANDWIDTH)
        assert finding.severity is Severity.UNKNOWN
        assert "needs Slurm or mpirun" in finding.message
        assert result.verdict is Verdict.UNKNOWN
    assert not [t for t in stage.tests if t.kind == "nccl"]


def test_a_slow_nccl_group_is_bisected_to_its_node(tmp_path: Path) -> None:
    hosts = names(8)
    options = StageOptions(nccl_group=8)
    judged, stage, _ = run(
        hosts, fabric_map(tmp_path, hosts={"gpu05": "slow-link"}), ("nccl",), options=options
    )
    nccl = stage.outcome("nccl")
    assert nccl is not None
    assert [named.hosts for named in nccl.slow_nodes] == [("gpu05",)]
    assert stage.tests[0].hosts == tuple(hosts)  # one group of eight first
    assert judged["gpu05"].verdict is Verdict.NOT_CERTIFIED
    assert sum(r.verdict is Verdict.CERTIFIED for r in judged.values()) == 7


def test_a_round_cut_by_the_deadline_is_not_taken_for_missing_results(tmp_path: Path) -> None:
    hosts = names(6)
    # Round 1: gpu01-gpu02 slow, the rest good. Round 2: each suspect meets a good peer,
    # and those pairs hang until the deadline cuts them.
    table = fabric_map(
        tmp_path, {"gpu01,gpu02": "slow-link", "gpu01,gpu03": "hang", "gpu02,gpu04": "hang"}
    )
    local = launcher(table)
    judged, stage = run_cross_node_stage(
        [node(name) for name in hosts],
        StepRunner(local),
        ("rdma",),
        "ndr-400-ib",
        plan(hosts, listen_wait_s=60.0),
        deadline=time.monotonic() + 4.0,
    )
    rdma = stage.outcome("rdma")
    assert rdma is not None
    assert rdma.rounds == 1  # the cut round is not kept
    # Its peers' missing results were the deadline's: they stay known-good.
    assert set(rdma.good) == {"gpu03", "gpu04", "gpu05", "gpu06"}
    assert not rdma.unreachable
    assert not stage.interrupted
    by_name = {result.hostname: result for result in judged}
    for name in ("gpu01", "gpu02"):
        (undecided,) = fabric(by_name[name], RDMA_BANDWIDTH)
        assert "deadline passed" in undecided.message
        assert undecided.action is Action.RERUN
    nothing_left(local)


def test_fabric_findings_render_in_the_json_report(tmp_path: Path) -> None:
    from jsonschema import Draft202012Validator

    from validator.model import Report
    from validator.report.json_report import load_report_json, load_schema, render_json

    hosts = names(4)
    judged, _, _ = run(hosts, fabric_map(tmp_path, {"gpu01,gpu02": "slow-link"}))
    report = Report("2026-12-06T21:00:00Z", "test", tuple(judged.values()))
    text = render_json(report)
    Draft202012Validator(load_schema()).validate(json.loads(text))
    back = load_report_json(text)
    checks = {f.check for node in back.nodes for f in node.findings}
    assert {RDMA_BANDWIDTH, "fabric.rdma_latency"} <= checks
    assert back.nodes == report.nodes


def test_each_hca_pair_is_measured_both_ways(tmp_path: Path) -> None:
    """A NIC slow to send (or to read its own GPU's memory) shows only as the client:
    each node of a pair is the client once, so a one-way fault is never missed."""
    pair_plan = plan(["gpu01", "gpu02"], hcas=2, latency=False)
    records = StepRunner(launcher(fabric_map(tmp_path))).rdma_round(
        [("gpu01", "gpu02")], pair_plan, time.monotonic() + 60
    )[("gpu01", "gpu02")]
    ways = sorted((r.server.host, r.client.host, r.server.hca) for r in records)
    assert ways == [
        ("gpu01", "gpu02", "mlx5_0"),
        ("gpu01", "gpu02", "mlx5_1"),
        ("gpu02", "gpu01", "mlx5_0"),
        ("gpu02", "gpu01", "mlx5_1"),
    ]
    assert all(r.completed for r in records)


def test_a_group_that_failed_before_nccl_printed_names_its_status_and_last_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # srun's own refusal, as Slurm 22.05 printed it on the test cluster: no nccl-tests
    # output at all, so the parser's "not nccl-tests output" alone hid the cause.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("all_reduce_perf", "alltoall_perf"):
        fake = bin_dir / program
        fake.write_text(
            "#!/bin/sh\necho 'srun: error: Unable to create step for job 12: "
            "More processors requested than permitted' >&2\nexit 1\n"
        )
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    hosts = names(2)

    _, stage, _ = run(hosts, fabric_map(tmp_path), ("nccl",), options=StageOptions(nccl_group=2))

    (first, *_) = [t for t in stage.tests if t.kind == "nccl"]
    assert first.figure is None
    assert "exited with status 1" in first.detail
    assert "More processors requested than permitted" in first.detail
