"""The stage across nodes judged, on modelled stages whose figures are the real recordings'.

Figures (tests/fixtures/perftest, tests/fixtures/nccl-tests-multinode): a healthy NDR CX-7
ib_write_bw at 392.34 Gb/s, a slow 400G RoCE GPUDirect run at 140.40 Gb/s, ib_write_lat
typical 1.47 us; a healthy 2-node 16x H100 all-reduce at 469.21 GB/s busbw (58.65 per HCA
over 8 HCAs), a slow 8-node V100 one at 4.32 GB/s.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from validator.judge.cross_node_judge import (
    LINK,
    NCCL_BANDWIDTH,
    RDMA_BANDWIDTH,
    RDMA_LATENCY,
    REACHABLE,
    fleet_stats,
    judge_stage,
    nccl_figure,
    rdma_figure,
    rejudged,
    stage_floor,
)
from validator.judge.fabric_catalog import load_fabric_catalog
from validator.model import (
    Action,
    CrossNodeStage,
    CrossNodeTest,
    Finding,
    GpuFacts,
    KindOutcome,
    Named,
    NcclGroupResult,
    NodeFacts,
    NodeResult,
    NvmlStatus,
    RdmaEnd,
    RdmaPairResult,
    Reason,
    Severity,
    Unavailable,
    Verdict,
    from_dict,
    to_dict,
)

HEALTHY_GBIT = 392.34
SLOW_GBIT = 140.40
LATENCY_US = 1.47
NDR = load_fabric_catalog().fabric("ndr-400-ib")
ROCE = load_fabric_catalog().fabric("roce-400")


def pair_records(
    server: str, client: str, figures: tuple[float | None, ...], latency: float = LATENCY_US
) -> tuple[RdmaPairResult, ...]:
    records = []
    for index, figure in enumerate(figures):
        ends = RdmaEnd(server, f"mlx5_{index}", index), RdmaEnd(client, f"mlx5_{index}", index)
        if figure is None:
            gone = Unavailable(Reason.ERROR, "Couldn't connect to 10.0.0.7:18515")
            records.append(
                RdmaPairResult(*ends, "write_bw", bw_average_gbit_s=gone, detail=gone.detail)
            )
        else:
            records.append(
                RdmaPairResult(*ends, "write_bw", bw_average_gbit_s=figure, completed=True)
            )
    records.append(
        RdmaPairResult(
            RdmaEnd(server, "mlx5_0"), RdmaEnd(client, "mlx5_0"), "write_lat",
            lat_typical_us=latency, completed=True,
        )
    )  # fmt: skip
    return tuple(records)


def rdma_test(
    number: int, server: str, client: str, figures: tuple[float | None, ...], **extra: object
) -> CrossNodeTest:
    records = pair_records(server, client, figures, **extra)  # type: ignore[arg-type]
    figure = rdma_figure(records)
    return CrossNodeTest(
        number, "rdma", (server, client), figure, 380.0,
        figure is not None and figure >= 380.0, "first", rdma=records,
    )  # fmt: skip


def outcome(**fields: object) -> KindOutcome:
    values: dict[str, object] = {"kind": "rdma", "floor": 380.0, "floor_source": "NDR floor 380"}
    values.update(fields)
    return KindOutcome(**values)  # type: ignore[arg-type]


def stage(tests: tuple[CrossNodeTest, ...], *outcomes: KindOutcome) -> CrossNodeStage:
    nodes = sorted({host for test in tests for host in test.hosts})
    return CrossNodeStage(("rdma",), "ndr-400-ib", tuple(nodes), tests, outcomes)


def only(findings: tuple[Finding, ...], check: str) -> Finding:
    found = [f for f in findings if f.check == check]
    assert len(found) == 1, findings
    return found[0]


def all_reduce(variant: str, busbw: float) -> NcclGroupResult:
    return NcclGroupResult(
        ("a", "b"), 16, "all_reduce", variant, largest_busbw_gb_s=busbw, completed=True
    )


def test_figures_are_the_slowest_hca_and_busbw_per_hca() -> None:
    assert rdma_figure(pair_records("a", "b", (HEALTHY_GBIT, SLOW_GBIT))) == SLOW_GBIT
    assert rdma_figure(pair_records("a", "b", (HEALTHY_GBIT, None))) is None
    # The per-HCA floor is stated for the default run across nodes (every NIC carries its
    # share); the IB-only run (no NVLink, no shared memory) sends even the node's own
    # traffic through the NICs, so its busbw is about one NIC's: it must complete clean,
    # but it is not divided per HCA against that floor.
    runs = (
        all_reduce("default", 469.21),
        all_reduce("ib_only", 40.0),
    )
    assert nccl_figure(runs, 8) == pytest.approx(469.21 / 8)
    assert nccl_figure(runs[:1], 8) == pytest.approx(469.21 / 8)
    failed = replace(runs[1], completed=False, largest_busbw_gb_s=Unavailable(Reason.ERROR, "x"))
    assert nccl_figure((runs[0], failed), 8) is None  # any run that failed: no result
    alltoall = replace(runs[0], collective="alltoall", completed=False)
    assert nccl_figure((*runs, alltoall), 8) is None
    # Data wrong across nodes is never a figure, however fast.
    corrupt = replace(runs[0], out_of_bounds=12)
    assert nccl_figure((corrupt, runs[1]), 8) is None
    assert nccl_figure((replace(runs[0], wrong=3), runs[1]), 8) is None


def test_floor_is_the_catalogs_raised_to_the_fleet_median() -> None:
    floor, words, median, mad = stage_floor(NDR, "rdma", [HEALTHY_GBIT] * 4)
    assert floor == 380.0
    assert "check_ib_bw_gdr 380" in words
    assert median == HEALTHY_GBIT
    assert mad == 0.0
    floor, words, *_ = stage_floor(NDR, "rdma", [500.0, 500.0, 498.0])
    assert floor == pytest.approx(450.0)
    assert "fleet median" in words
    # No catalog floor for 400G RoCE GPUDirect: the fleet's own median sets it.
    floor, words, median, _ = stage_floor(ROCE, "rdma", [140.4, 139.9, 141.0, 60.0])
    assert median == pytest.approx(140.15)
    assert floor == pytest.approx(0.9 * 140.15)
    assert stage_floor(ROCE, "rdma", [140.4, 139.9])[0] == 0.0  # two tests are no fleet
    assert fleet_stats([1.0, 2.0]) is None


def test_healthy_pairs_pass_every_node() -> None:
    tests = (
        rdma_test(1, "a", "b", (HEALTHY_GBIT, HEALTHY_GBIT)),
        rdma_test(1, "c", "d", (HEALTHY_GBIT, HEALTHY_GBIT)),
    )
    found = judge_stage(stage(tests, outcome(good=("a", "b", "c", "d"), rounds=1)), NDR)
    for node in "abcd":
        bandwidth = only(found[node], RDMA_BANDWIDTH)
        assert bandwidth.severity is Severity.PASS
        assert "392.3 Gb/s" in bandwidth.message
        assert only(found[node], RDMA_LATENCY).severity is Severity.PASS


def test_a_node_slow_on_one_hca_is_its_cable_on_every_hca_the_node() -> None:
    tests = (
        rdma_test(1, "a", "b", (HEALTHY_GBIT, SLOW_GBIT)),
        rdma_test(2, "b", "c", (HEALTHY_GBIT, SLOW_GBIT)),
        rdma_test(2, "d", "e", (SLOW_GBIT, SLOW_GBIT)),
    )
    named = (Named(("b",), "below the floor with a 140.4 Gb/s; c 140.4 Gb/s"), Named(("e",), "x"))
    found = judge_stage(stage(tests, outcome(good=("a", "c", "d"), slow_nodes=named)), NDR)
    slow = only(found["b"], RDMA_BANDWIDTH)
    assert slow.severity is Severity.FAIL
    assert slow.action is Action.RESEAT_CABLE_RISER
    assert "mlx5_1 only" in slow.message
    whole = only(found["e"], RDMA_BANDWIDTH)
    assert whole.severity is Severity.FAIL
    assert whole.action is Action.DRAIN_RMA


def test_a_slow_link_fails_both_ends_while_each_node_passes() -> None:
    tests = (
        rdma_test(1, "a", "b", (SLOW_GBIT,)),
        rdma_test(2, "a", "c", (HEALTHY_GBIT,)),
        rdma_test(2, "b", "d", (HEALTHY_GBIT,)),
    )
    link = Named(("a", "b"), "a with b: 140.4 Gb/s")
    found = judge_stage(stage(tests, outcome(good=("a", "b", "c", "d"), slow_links=(link,))), NDR)
    for end, other in (("a", "b"), ("b", "a")):
        assert only(found[end], RDMA_BANDWIDTH).severity is Severity.PASS
        failed = only(found[end], LINK)
        assert failed.severity is Severity.FAIL
        assert failed.action is Action.RESEAT_CABLE_RISER
        assert f"path to {other}" in failed.message
    assert not [f for f in found["c"] if f.check == LINK]


def test_a_dead_node_is_named_unreachable_with_the_tools_words() -> None:
    tests = (rdma_test(1, "a", "b", (None,)), rdma_test(2, "b", "c", (None,)))
    gone = Named(("b",), "Couldn't connect to 10.0.0.7:18515")
    found = judge_stage(stage(tests, outcome(good=("a", "c"), unreachable=(gone,))), NDR)
    failed = only(found["b"], REACHABLE)
    assert failed.severity is Severity.FAIL
    assert "Couldn't connect" in failed.message


def test_unresolved_is_unknown_and_rerun_or_measure() -> None:
    tests = (rdma_test(1, "a", "b", (SLOW_GBIT,)),)
    unresolved = (
        Named(("a",), "the stage was interrupted before it was decided"),
        Named(("b",), "failed beside fewer than two known-good peers, and no other was free"),
    )
    found = judge_stage(stage(tests, outcome(unresolved=unresolved)), NDR)
    first, second = only(found["a"], RDMA_BANDWIDTH), only(found["b"], RDMA_BANDWIDTH)
    assert first.severity is second.severity is Severity.UNKNOWN
    assert first.action is Action.RERUN
    assert second.action is Action.MEASURE


def test_nccl_that_could_not_run_is_unknown_never_a_pass() -> None:
    skipped = KindOutcome("nccl", 0.0, "", skipped="NCCL across nodes needs Slurm or mpirun")
    run = CrossNodeStage(("nccl",), "ndr-400-ib", ("a", "b"), (), (skipped,))
    for node in "ab":
        finding = only(judge_stage(run, NDR)[node], NCCL_BANDWIDTH)
        assert finding.severity is Severity.UNKNOWN
        assert "needs Slurm or mpirun" in finding.message


def test_latency_over_an_unconfirmed_ceiling_warns() -> None:
    tests = (rdma_test(1, "a", "b", (HEALTHY_GBIT,), latency=9.5),)
    found = judge_stage(stage(tests, outcome(good=("a", "b"))), NDR)
    warned = only(found["a"], RDMA_LATENCY)
    assert warned.severity is Severity.WARN  # the 5 us ceiling has no source
    assert "9.50 us" in warned.observed


def node_result(name: str) -> NodeResult:
    gpus = tuple(GpuFacts(index=i, name="NVIDIA H100 80GB HBM3") for i in range(8))
    facts = NodeFacts(
        name, source="simulate", nvml_status=NvmlStatus.OK, pci_gpu_count=8, gpus=gpus
    )
    passed = (Finding("burn.throughput", Severity.PASS, "fast enough"),)
    return NodeResult(name, Verdict.CERTIFIED, facts, passed, sku="h100-sxm", summary="ok")


def test_verdicts_follow_the_fabric_findings_and_a_second_judgement_replaces_the_first() -> None:
    tests = (rdma_test(1, "a", "b", (HEALTHY_GBIT,)), rdma_test(1, "c", "d", (None,)))
    run = stage(
        tests,
        outcome(good=("a", "b"), unreachable=(Named(("c",), "gone"),),
                unresolved=(Named(("d",), "the rounds ran out before it was decided"),)),
    )  # fmt: skip
    results = [node_result(name) for name in "abcde"]
    judged = rejudged(results, judge_stage(run, NDR), {"h100-sxm": "H100 SXM5 80GB"})
    verdicts = {r.hostname: r.verdict for r in judged}
    assert verdicts == {
        "a": Verdict.CERTIFIED, "b": Verdict.CERTIFIED, "c": Verdict.NOT_CERTIFIED,
        "d": Verdict.UNKNOWN, "e": Verdict.CERTIFIED,
    }  # fmt: skip
    assert judged[2].summary.startswith("8x H100 SXM5 80GB: 1 check failed: fabric.reachable")
    assert judged[4] is results[4]  # not entered: untouched
    again = rejudged(judged, judge_stage(run, NDR))
    assert [len(r.findings) for r in again] == [len(r.findings) for r in judged]


def test_the_stage_goes_through_json_and_back() -> None:
    tests = (rdma_test(1, "a", "b", (HEALTHY_GBIT, SLOW_GBIT)),)
    nccl = NcclGroupResult(
        ("a", "b"), 16, "all_reduce", "ib_only", largest_busbw_gb_s=469.21, completed=True
    )
    group = CrossNodeTest(2, "nccl", ("a", "b"), 58.65, 46.0, True, "first", nccl=(nccl,))
    run = replace(
        stage((*tests, group), outcome(good=("a",), slow_links=(Named(("a", "b"), "w"),))),
        interrupted=True,
    )
    back = from_dict(CrossNodeStage, to_dict(run))
    assert back == run
    assert back.rounds == 0
    assert back.good == ("a",)
