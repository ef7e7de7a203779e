"""The fleet view: burn-in speed against each SKU's fleet median."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from validator.judge.catalog import load_catalog
from validator.judge.checks.interconnect_actions import (
    BASEBOARD_SOURCE,
    FABRIC_SOURCE,
    HBM_SOURCE,
    PCIE_SOURCE,
    PeerCopies,
    all_reduce_action,
    fabric_unfinished,
    peer_copies,
)
from validator.judge.checks.nvlink import link_repair
from validator.judge.fleet import CHECK, INTERCONNECT_CHECK, judge_fleet
from validator.judge.policy import Policy, Thresholds
from validator.model import (
    Action,
    AllReduce,
    AllReducePoint,
    Bandwidth,
    BurnResult,
    BurnStatus,
    Finding,
    GpuBurn,
    GpuCopyBandwidth,
    GpuFacts,
    Interconnect,
    NodeFacts,
    NodeResult,
    NvmlStatus,
    PeerBandwidth,
    Reason,
    Severity,
    SkuFleetStats,
    Unavailable,
    Verdict,
)

H100 = "h100-sxm"  # label "H100 SXM5 80GB" in the catalog
A100 = "a100-sxm4-80gb"
HEALTHY = (712.0, 715.0, 709.0, 711.0, 714.0, 710.0, 713.0, 712.0)


def node(
    hostname: str,
    tflops: tuple[float | None, ...] | None,
    *,
    sku: str | None = H100,
    dtype: str = "bf16",
    verdict: Verdict = Verdict.CERTIFIED,
    statuses: dict[int, BurnStatus] | None = None,
) -> NodeResult:
    """A node judged on its own: one passing finding, a burn with these figures."""
    gpus = tuple(GpuFacts(index=i, name="NVIDIA H100 80GB HBM3") for i in range(len(tflops or ())))
    burn = None
    if tflops is not None:
        burn = BurnResult(
            backend="cublas",
            dtype=dtype,
            matrix_size=8192,
            duration_s=60.0,
            elapsed_s=60.0,
            memory_fraction=0.9,
            started_at="2025-03-04T10:12:00Z",
            sampler="nvml",
            gpus=tuple(
                GpuBurn(
                    index=i,
                    status=(statuses or {}).get(i, BurnStatus.COMPLETED),
                    uuid=f"GPU-{hostname}-{i}",
                    tflops=Unavailable(Reason.NOT_MEASURED) if value is None else value,
                )
                for i, value in enumerate(tflops)
            ),
        )
    facts = NodeFacts(
        hostname=hostname,
        source="simulate",
        nvml_status=NvmlStatus.OK,
        pci_gpu_count=len(gpus),
        gpus=gpus,
        burn=burn,
    )
    findings = (Finding("burn.throughput", Severity.PASS, "fast enough"),)
    return NodeResult(
        hostname=hostname,
        verdict=verdict,
        facts=facts,
        findings=findings,
        sku=sku,
        summary="all 1 check passed",
    )


def fleet_findings(result: NodeResult) -> list[Finding]:
    return [f for f in result.findings if f.check == CHECK]


def test_one_slow_gpu_fails_its_node() -> None:
    slow = list(HEALTHY)
    slow[3] = 612.0
    results, summary = judge_fleet(
        [node("gpu01", HEALTHY), node("gpu07", tuple(slow)), node("gpu02", HEALTHY)], Policy()
    )
    assert [r.hostname for r in results] == ["gpu01", "gpu07", "gpu02"]  # order kept
    gpu07 = results[1]
    assert gpu07.verdict is Verdict.NOT_CERTIFIED
    assert gpu07.summary == "8x H100 SXM5 80GB: 1 check failed: fleet.speed (GPU 3)"
    failed = [f for f in gpu07.findings if f.severity is Severity.FAIL]
    assert len(failed) == 1
    assert failed[0].gpu_index == 3
    assert failed[0].gpu_uuid == "GPU-gpu07-3"
    assert failed[0].message == (
        "GPU 3 of gpu07 ran 612 TFLOPS, 86% of the fleet median 712 for H100 SXM5 80GB (MAD 2.0)"
    )
    assert failed[0].expected == ">= 662 TFLOPS (93% of the fleet median)"
    assert gpu07.findings[0] == failed[0]  # FAIL sorted first
    # One finding per GPU; the others pass and their nodes stay certified.
    assert len(fleet_findings(gpu07)) == 8
    for other in (results[0], results[2]):
        assert other.verdict is Verdict.CERTIFIED
        assert [f.severity for f in fleet_findings(other)] == [Severity.PASS] * 8
    assert summary.hosts == 3
    assert (summary.certified, summary.not_certified, summary.unknown) == (2, 1, 0)
    assert summary.interrupted is False
    (stats,) = summary.skus
    assert stats == SkuFleetStats(
        sku=H100, gpus=24, median_tflops=712.0, mad_tflops=2.0, threshold_tflops=712.0 * 0.93
    )


def test_fast_outlier_does_not_drag_the_median() -> None:
    # A mean would move up 30 TFLOPS and flag healthy GPUs; the median barely moves.
    fast = (1500.0, *HEALTHY[1:])
    results, summary = judge_fleet(
        [node("a", HEALTHY), node("b", fast), node("c", HEALTHY)], Policy()
    )
    assert all(r.verdict is Verdict.CERTIFIED for r in results)
    assert summary.skus[0].median_tflops == 712.0
    assert summary.skus[0].mad_tflops == 2.0


def test_slow_half_node_is_still_judged_against_the_fleet() -> None:
    # A node whose GPUs are all slow passes its own relative check; the fleet catches it.
    slow = tuple(value * 0.85 for value in HEALTHY)
    results, _ = judge_fleet(
        [node("a", HEALTHY), node("b", slow), node("c", HEALTHY), node("d", HEALTHY)], Policy()
    )
    assert [r.verdict for r in results] == [
        Verdict.CERTIFIED,
        Verdict.NOT_CERTIFIED,
        Verdict.CERTIFIED,
        Verdict.CERTIFIED,
    ]
    assert sum(f.severity is Severity.FAIL for f in fleet_findings(results[1])) == 8


def test_two_skus_are_judged_separately() -> None:
    a100 = (290.0, 292.0, 288.0, 291.0)
    results, summary = judge_fleet(
        [
            node("h1", HEALTHY),
            node("h2", HEALTHY),
            node("h3", HEALTHY),
            node("a1", a100, sku=A100),
            node("a2", a100, sku=A100),
            node("a3", a100, sku=A100),
        ],
        Policy(),
    )
    # Pooled, the A100s would be 40% of the median and fail; per SKU all pass.
    assert all(r.verdict is Verdict.CERTIFIED for r in results)
    assert [(s.sku, s.gpus, s.median_tflops) for s in summary.skus] == [
        (A100, 12, 290.5),
        (H100, 24, 712.0),
    ]
    assert "for A100 SXM4 80GB" in fleet_findings(results[3])[0].message


def test_fewer_than_three_gpus_get_no_fleet_finding() -> None:
    results, summary = judge_fleet(
        [node("h1", (712.0, 400.0)), node("a1", (290.0,), sku=A100)], Policy()
    )
    assert all(fleet_findings(r) == [] for r in results)
    assert [r.verdict for r in results] == [Verdict.CERTIFIED, Verdict.CERTIFIED]
    assert summary.skus == ()  # skipped, not judged on a fleet of two
    assert (summary.hosts, summary.certified) == (2, 2)


def test_exactly_three_nodes_are_a_fleet() -> None:
    results, summary = judge_fleet(
        [node("h1", (712.0,)), node("h2", (710.0,)), node("h3", (500.0,))], Policy()
    )
    assert [r.verdict for r in results] == [
        Verdict.CERTIFIED,
        Verdict.CERTIFIED,
        Verdict.NOT_CERTIFIED,
    ]
    assert summary.skus[0].gpus == 3


def test_two_nodes_are_no_fleet_however_many_gpus() -> None:
    slow = tuple(value * 0.8 for value in HEALTHY)
    results, summary = judge_fleet([node("a", HEALTHY), node("b", slow)], Policy())
    assert all(fleet_findings(r) == [] for r in results)
    assert summary.skus == ()


def test_missing_burn_gets_no_fleet_finding() -> None:
    results, summary = judge_fleet(
        [node("a", HEALTHY), node("b", HEALTHY), node("c", HEALTHY), node("noburn", None)],
        Policy(),
    )
    assert fleet_findings(results[3]) == []
    assert results[3] == node("noburn", None)  # untouched
    assert summary.skus[0].gpus == 24


def test_unmeasured_and_failed_gpus_are_left_out() -> None:
    partial = (712.0, None, 100.0, *HEALTHY[3:])
    results, summary = judge_fleet(
        [
            node("a", HEALTHY),
            node("b", partial, statuses={2: BurnStatus.TIMEOUT}),
            node("c", HEALTHY),
        ],
        Policy(),
    )
    judged = {f.gpu_index for f in fleet_findings(results[1])}
    assert judged == {0, 3, 4, 5, 6, 7}  # GPU 1 has no figure, GPU 2 did not complete
    assert summary.skus[0].gpus == 22
    assert results[1].verdict is Verdict.CERTIFIED


def test_unknown_nodes_and_nodes_without_sku_are_left_out() -> None:
    slow = tuple(value * 0.5 for value in HEALTHY)
    results, summary = judge_fleet(
        [
            node("a", HEALTHY),
            node("b", HEALTHY),
            node("c", HEALTHY),
            node("u", slow, verdict=Verdict.UNKNOWN),
            node("n", slow, sku=None),
        ],
        Policy(),
    )
    assert fleet_findings(results[3]) == fleet_findings(results[4]) == []
    assert results[3].verdict is Verdict.UNKNOWN
    assert summary.skus[0].gpus == 24
    assert (summary.certified, summary.unknown) == (4, 1)


def test_threshold_from_the_policy() -> None:
    slow = (660.0, *HEALTHY[1:])  # 92.7% of 712
    nodes = [node("a", HEALTHY), node("b", slow), node("c", HEALTHY)]
    strict, _ = judge_fleet(nodes, Policy())
    assert strict[1].verdict is Verdict.NOT_CERTIFIED
    lenient_policy = Policy(thresholds=Thresholds(fleet_speed_min=0.9))
    lenient, summary = judge_fleet(nodes, lenient_policy)
    assert lenient[1].verdict is Verdict.CERTIFIED
    assert summary.skus[0].threshold_tflops == pytest.approx(712.0 * 0.9)


def test_threshold_per_host() -> None:
    slow = (660.0, *HEALTHY[1:])
    policies = {"b": Policy(thresholds=Thresholds(fleet_speed_min=0.9))}
    results, summary = judge_fleet(
        [node("a", slow), node("b", slow), node("c", HEALTHY)],
        lambda host: policies.get(host, Policy()),
    )
    assert [r.verdict for r in results] == [
        Verdict.NOT_CERTIFIED,
        Verdict.CERTIFIED,
        Verdict.CERTIFIED,
    ]
    # The stats row shows the threshold most hosts use; the median is of the nodes'.
    assert summary.skus[0].median_tflops == 711.5
    assert summary.skus[0].threshold_tflops == pytest.approx(711.5 * 0.93)


def test_data_types_are_not_mixed() -> None:
    fp8 = tuple(value * 2 for value in HEALTHY)
    nodes = [node(f"a{n}", HEALTHY) for n in range(3)]
    nodes += [node(f"b{n}", fp8, dtype="fp8") for n in range(3)]
    results, summary = judge_fleet(nodes, Policy())
    assert all(r.verdict is Verdict.CERTIFIED for r in results)
    assert [s.sku for s in summary.skus] == [f"{H100} bf16", f"{H100} fp8"]


def test_judging_twice_gives_the_same_result() -> None:
    slow = (600.0, *HEALTHY[1:])
    once, first = judge_fleet([node("a", HEALTHY), node("b", slow), node("c", HEALTHY)], Policy())
    twice, second = judge_fleet(once, Policy())
    assert twice == once
    assert second == first
    assert len(fleet_findings(twice[1])) == 8


def test_stale_fleet_findings_are_dropped_when_no_longer_judged() -> None:
    stale = Finding(CHECK, Severity.FAIL, "old", gpu_index=0)
    lonely = node("a", (712.0,))
    lonely = dataclasses.replace(
        lonely, findings=(stale, *lonely.findings), verdict=Verdict.NOT_CERTIFIED
    )
    results, _ = judge_fleet([lonely], Policy())
    assert fleet_findings(results[0]) == []
    assert results[0].verdict is Verdict.CERTIFIED


def test_interrupted_and_empty_fleet() -> None:
    results, summary = judge_fleet([], Policy(), interrupted=True)
    assert results == ()
    assert (summary.hosts, summary.skus, summary.interrupted) == (0, (), True)


# ------------------------------------------------------------------ fleet.interconnect
#
# Figures shaped on the healthy 8x H100 SXM scenario (itself shaped on the recorded 8x
# H200 nccl-tests run and nvbandwidth's README): H2D/D2H ~55 GB/s, HBM copy ~2880 GB/s,
# P2P ~394 GB/s, all-reduce busbw 475 GB/s at 4 GiB.

GIB = 1 << 30


def interconnect(
    *,
    h2d: dict[int, float | None] | None = None,
    hbm: dict[int, float] | None = None,
    p2p: dict[tuple[int, int], float] | None = None,
    busbw: float | None = 474.89,
    size: int = 4 * GIB,
    busy: tuple[int, ...] = (),
    gpus: int = 8,
) -> Interconnect:
    """A node's interconnect: healthy figures, with ``h2d``/``hbm``/``p2p`` overrides."""
    copies = tuple(
        GpuCopyBandwidth(
            index=i,
            uuid=f"GPU-ic-{i}",
            h2d=Bandwidth(
                Unavailable(Reason.ERROR, "cudaMemcpyAsync failed")
                if (value := (h2d or {}).get(i, 55.2 + i / 10)) is None
                else value
            ),
            d2h=Bandwidth(55.1),
            hbm=Bandwidth((hbm or {}).get(i, 2877.7 + i)),
        )
        for i in range(gpus)
    )
    peers = tuple(
        PeerBandwidth(
            src,
            dst,
            access=True,
            unidirectional=Bandwidth((p2p or {}).get((src, dst), 394.2 + (src + dst) / 10)),
        )
        for src in range(gpus)
        for dst in range(gpus)
        if src != dst
    )
    points: Unavailable | tuple[AllReducePoint, ...] = (
        Unavailable(Reason.ERROR, "ncclCommInitAll failed")
        if busbw is None
        else (
            AllReducePoint(GIB, 2290.0, 468.9, 820.6),
            AllReducePoint(size, 9030.0, busbw / 1.75, busbw),
        )
    )
    return Interconnect(
        source="simulate",
        simulated=True,
        busy_gpus=busy,
        gpus=copies,
        peers=peers,
        all_reduce=AllReduce(ranks=gpus, source="simulate", points=points),
    )


def wired(hostname: str, measured: Interconnect | None = None, **kwargs: Any) -> NodeResult:
    """A node judged on its own, with no burn and this interconnect measured."""
    result = node(hostname, HEALTHY, **kwargs)
    facts = dataclasses.replace(result.facts, burn=None, interconnect=measured or interconnect())
    return dataclasses.replace(result, facts=facts)


def ic_findings(result: NodeResult, observed: str = "") -> list[Finding]:
    return [
        f
        for f in result.findings
        if f.check == INTERCONNECT_CHECK and f.observed.startswith(observed)
    ]


def test_one_nodes_all_reduce_20_percent_below_nine_others_fails() -> None:
    nodes = [wired(f"gpu{n:02}") for n in range(9)]
    nodes.insert(4, wired("gpu-slow", interconnect(busbw=474.89 * 0.8)))
    results, _ = judge_fleet(nodes, Policy())
    slow = results[4]
    assert slow.verdict is Verdict.NOT_CERTIFIED
    assert slow.summary == "8x H100 SXM5 80GB: 1 check failed: fleet.interconnect"
    (failed,) = [f for f in slow.findings if f.severity is Severity.FAIL]
    assert failed.message == (
        "all-reduce at 4 GiB over 8 GPUs of gpu-slow: all-reduce busbw 380 GB/s, 80% of the "
        "fleet median 475 GB/s for H100 SXM5 80GB (8 GPUs at 4 GiB)"
    )
    assert (failed.observed, failed.expected) == (
        "all-reduce busbw 380 GB/s",
        ">= 427 GB/s (90% of the fleet median)",
    )
    assert failed.gpu_index is None
    # An NVSwitch baseboard with every pair at speed: the fabric, as interconnect.all_reduce.
    assert failed.action is Action.DRAIN_RMA
    assert "NVSwitch fabric on the baseboard" in failed.action_source
    others = [r for r in results if r.hostname != "gpu-slow"]
    assert all(r.verdict is Verdict.CERTIFIED for r in others)
    # Every node's figures judged: 8 GPUs x 3 copies, its slowest pair, its all-reduce.
    assert {len(ic_findings(r)) for r in results} == {26}


def test_a_five_percent_dip_passes() -> None:
    nodes = [wired(f"gpu{n:02}") for n in range(9)]
    nodes.append(wired("gpu-dip", interconnect(busbw=474.89 * 0.95, h2d={3: 55.2 * 0.95})))
    results, _ = judge_fleet(nodes, Policy())
    assert all(r.verdict is Verdict.CERTIFIED for r in results)
    (busbw,) = ic_findings(results[-1], "all-reduce")
    assert busbw.severity is Severity.PASS
    assert "95% of the fleet median" in busbw.message


def test_too_few_nodes_give_no_all_reduce_or_pair_finding() -> None:
    slow = interconnect(busbw=200.0, p2p={(2, 5): 150.0})
    results, _ = judge_fleet([wired("a"), wired("b", slow)], Policy())
    assert ic_findings(results[1], "all-reduce") == []
    assert ic_findings(results[1], "P2P") == []
    # Nor sixteen GPUs' copies on two nodes: two cannot say which of them is off.
    assert ic_findings(results[1], "H2D") == []


def test_one_node_is_no_fleet_for_its_own_gpus() -> None:
    # Its siblings are judged by interconnect_sibling_min already.
    results, _ = judge_fleet([wired("a", interconnect(h2d={1: 27.6}))], Policy())
    assert ic_findings(results[0]) == []
    assert results[0].verdict is Verdict.CERTIFIED


def test_a_slow_host_copy_names_its_gpu_and_the_riser() -> None:
    results, _ = judge_fleet(
        [wired("a"), wired("b", interconnect(h2d={1: 27.6})), wired("c")], Policy()
    )
    (failed,) = [f for f in results[1].findings if f.severity is Severity.FAIL]
    assert (failed.gpu_index, failed.gpu_uuid) == (1, "GPU-ic-1")
    assert failed.message == (
        "GPU 1 of b: H2D 27.6 GB/s, 50% of the fleet median 55.5 GB/s for H100 SXM5 80GB"
    )
    assert failed.action is Action.RESEAT_CABLE_RISER
    assert results[1].summary == "8x H100 SXM5 80GB: 1 check failed: fleet.interconnect (GPU 1)"


def test_slow_hbm_is_the_chip() -> None:
    results, _ = judge_fleet(
        [wired("a"), wired("b", interconnect(hbm={3: 1730.0})), wired("c")], Policy()
    )
    (failed,) = [f for f in results[1].findings if f.severity is Severity.FAIL]
    assert (failed.gpu_index, failed.action) == (3, Action.DRAIN_RMA)


def test_each_nodes_slowest_pair_against_the_fleets() -> None:
    slow = interconnect(p2p={(2, 5): 300.0, (5, 2): 320.0})
    results, _ = judge_fleet([wired("a"), wired("b", slow), wired("c"), wired("d")], Policy())
    (failed,) = [f for f in results[1].findings if f.severity is Severity.FAIL]
    assert failed.message == (
        "slowest pair GPU 2 -> GPU 5 of b: P2P 300 GB/s, 76% of the fleet median 394 GB/s "
        "for H100 SXM5 80GB (8 GPUs)"
    )
    assert failed.action is Action.DRAIN_RMA  # NVLink on an SXM baseboard (link_repair)
    # One pair figure per node, whatever the number of pairs.
    assert [len(ic_findings(r, "P2P")) for r in results] == [1, 1, 1, 1]


def test_unmeasured_figures_are_left_out_not_counted_as_zero() -> None:
    unmeasured = interconnect(busbw=None, h2d={2: None})
    results, _ = judge_fleet([wired("a"), wired("b"), wired("c", unmeasured)], Policy())
    assert ic_findings(results[2], "all-reduce") == []
    assert {f.gpu_index for f in ic_findings(results[2], "H2D")} == {0, 1, 3, 4, 5, 6, 7}
    # Two all-reduce figures are too few for a median: none judged on any node.
    assert all(ic_findings(r, "all-reduce") == [] for r in results)
    assert all(f.severity is Severity.PASS for r in results for f in ic_findings(r))


def test_busy_gpus_and_unknown_or_unmatched_nodes_are_left_out() -> None:
    busy = interconnect(h2d={4: 20.0}, busy=(4,))
    results, _ = judge_fleet(
        [
            wired("a"),
            wired("b"),
            wired("c", busy),
            wired("u", interconnect(busbw=100.0), verdict=Verdict.UNKNOWN),
            wired("n", interconnect(busbw=100.0), sku=None),
            wired("e", dataclasses.replace(interconnect(busbw=100.0), error="no libcudart")),
        ],
        Policy(),
    )
    assert 4 not in {f.gpu_index for f in ic_findings(results[2])}
    assert results[2].verdict is Verdict.CERTIFIED
    assert [ic_findings(r) for r in results[3:]] == [[], [], []]
    (busbw,) = ic_findings(results[0], "all-reduce")
    assert "fleet median 475 GB/s" in busbw.message  # the three left out moved nothing


def test_all_reduce_of_other_sizes_and_gpu_counts_are_not_mixed() -> None:
    short = interconnect(busbw=468.9, size=GIB)
    four = interconnect(busbw=300.0, gpus=4)
    results, _ = judge_fleet(
        [wired("a"), wired("b"), wired("c"), wired("s", short), wired("f", four)], Policy()
    )
    assert ic_findings(results[3], "all-reduce") == []
    assert ic_findings(results[4], "all-reduce") == []
    assert all(r.verdict is Verdict.CERTIFIED for r in results)


def test_interconnect_threshold_from_each_hosts_policy() -> None:
    dip = interconnect(busbw=474.89 * 0.88)
    nodes = [wired("a"), wired("b"), wired("c", dip)]
    strict, _ = judge_fleet(nodes, Policy())
    assert strict[2].verdict is Verdict.NOT_CERTIFIED
    lenient = {"c": Policy(thresholds=Thresholds(fleet_interconnect_min=0.85))}
    judged, _ = judge_fleet(nodes, lambda host: lenient.get(host, Policy()))
    assert judged[2].verdict is Verdict.CERTIFIED


def test_speed_and_interconnect_judged_together_and_twice_the_same() -> None:
    slow_burn = (600.0, *HEALTHY[1:])
    both = node("b", slow_burn)
    both = dataclasses.replace(
        both, facts=dataclasses.replace(both.facts, interconnect=interconnect(h2d={1: 27.6}))
    )
    with_burn = [
        dataclasses.replace(n, facts=dataclasses.replace(n.facts, interconnect=interconnect()))
        for n in (node("a", HEALTHY), node("c", HEALTHY))
    ]
    once, first = judge_fleet([with_burn[0], both, with_burn[1]], Policy())
    assert once[1].summary == (
        "8x H100 SXM5 80GB: 2 checks failed: fleet.interconnect (GPU 1), fleet.speed (GPU 0)"
    )
    twice, second = judge_fleet(once, Policy())
    assert (twice, second) == (once, first)
    # A stale fleet.interconnect finding is dropped when no longer judged.
    alone, _ = judge_fleet([once[1]], Policy())
    assert ic_findings(alone[0]) == []


# ------------------------------------------------------------------ the action of a slow all-reduce


def _with_node_findings(result: NodeResult, *findings: Finding) -> NodeResult:
    return dataclasses.replace(result, findings=(*result.findings, *findings))


def _slow_all_reduce(results: tuple[NodeResult, ...], hostname: str) -> Finding:
    (node,) = [r for r in results if r.hostname == hostname]
    (failed,) = [f for f in ic_findings(node, "all-reduce") if f.severity is Severity.FAIL]
    return failed


def test_a_slow_all_reduce_with_the_nodes_pairs_failing_is_the_links_not_the_baseboard() -> None:
    # interconnect.all_reduce says "the failing peer links explain it": the fleet agrees.
    slow = wired("gpu-slow", interconnect(busbw=474.89 * 0.8))
    p2p = Finding("interconnect.p2p", Severity.FAIL, "GPU 6 slow to every peer", gpu_index=6)
    nodes = [wired(f"gpu{n:02}") for n in range(9)] + [_with_node_findings(slow, p2p)]
    results, _ = judge_fleet(nodes, Policy())
    failed = _slow_all_reduce(results, "gpu-slow")
    assert (failed.action, failed.action_source) == link_repair(load_catalog().get(H100))
    assert (
        failed.action_source
        == "gpuready: NVLink on an SXM baseboard has no part to reseat in the field"
    )


def test_a_slow_all_reduce_with_peer_access_denied_is_the_links_too() -> None:
    slow = wired("gpu-slow", interconnect(busbw=474.89 * 0.8))
    denied = Finding("interconnect.peer_access", Severity.FAIL, "GPU 2 -> GPU 5 denied")
    nodes = [wired(f"gpu{n:02}") for n in range(4)] + [_with_node_findings(slow, denied)]
    results, _ = judge_fleet(nodes, Policy())
    assert _slow_all_reduce(results, "gpu-slow").action_source != BASEBOARD_SOURCE


def test_a_slow_all_reduce_with_its_slowest_pair_slow_against_the_fleet_is_the_links() -> None:
    slow = wired("gpu-slow", interconnect(busbw=474.89 * 0.8, p2p={(2, 5): 300.0}))
    results, _ = judge_fleet([wired(f"gpu{n:02}") for n in range(4)] + [slow], Policy())
    failed = _slow_all_reduce(results, "gpu-slow")
    assert (failed.action, failed.action_source) == link_repair(load_catalog().get(H100))


def test_a_slow_all_reduce_with_the_pairs_passing_on_the_node_is_the_baseboard() -> None:
    slow = wired("gpu-slow", interconnect(busbw=474.89 * 0.8))
    p2p = Finding("interconnect.p2p", Severity.PASS, "every pair at speed")
    results, _ = judge_fleet(
        [wired(f"gpu{n:02}") for n in range(4)] + [_with_node_findings(slow, p2p)], Policy()
    )
    failed = _slow_all_reduce(results, "gpu-slow")
    assert (failed.action, failed.action_source) == (Action.DRAIN_RMA, BASEBOARD_SOURCE)


def test_a_slow_all_reduce_with_no_pair_judged_anywhere_is_not_blamed_on_the_baseboard() -> None:
    # No node finding on its pairs and no pair figure to compare (peers not measured):
    # the links or the fabric, as interconnect.all_reduce says; the links come first.
    no_peers = Unavailable(Reason.NOT_MEASURED, "peers not asked for")
    slow = wired("gpu-slow", dataclasses.replace(interconnect(busbw=474.89 * 0.8), peers=no_peers))
    results, _ = judge_fleet([wired(f"gpu{n:02}") for n in range(4)] + [slow], Policy())
    failed = _slow_all_reduce(results, "gpu-slow")
    assert (failed.action, failed.action_source) == link_repair(load_catalog().get(H100))


def test_the_fleet_and_the_node_check_share_one_answer_per_peer_state() -> None:
    sku = load_catalog().get(H100)
    assert all_reduce_action(sku, (), PeerCopies.AT_SPEED) == (Action.DRAIN_RMA, BASEBOARD_SOURCE)
    assert all_reduce_action(sku, (), PeerCopies.FAILED) == link_repair(sku)
    assert all_reduce_action(sku, (), PeerCopies.NOT_JUDGED) == link_repair(sku)
    pcie = load_catalog().get("h100-pcie")
    assert all_reduce_action(pcie, (), PeerCopies.AT_SPEED) == link_repair(pcie)
    unregistered = (GpuFacts(index=3, name="NVIDIA H100 80GB HBM3", fabric_state="in progress"),)
    assert all_reduce_action(sku, unregistered, PeerCopies.FAILED)[0] is Action.FIX_SOFTWARE
    assert fabric_unfinished(unregistered) == [(3, "in progress")]
    assert fabric_unfinished(unregistered, {0, 1}) == []


@pytest.mark.parametrize(
    ("severities", "expected"),
    [
        ({"interconnect.p2p": Severity.PASS}, PeerCopies.AT_SPEED),
        (
            {"interconnect.p2p": Severity.PASS, "interconnect.peer_access": Severity.FAIL},
            PeerCopies.FAILED,
        ),
        ({"interconnect.p2p": Severity.UNKNOWN}, PeerCopies.NOT_JUDGED),
        ({"interconnect.peer_access": Severity.PASS}, PeerCopies.NOT_JUDGED),
        ({"fleet.interconnect": Severity.FAIL}, PeerCopies.NOT_JUDGED),
    ],
)
def test_what_the_pairs_said(severities: dict[str, Severity], expected: PeerCopies) -> None:
    findings = [Finding(check, severity, "") for check, severity in severities.items()]
    assert peer_copies(findings, "interconnect.p2p", "interconnect.peer_access") is expected


def test_the_judges_action_sources_are_the_shared_ones() -> None:
    # checks/interconnect.py still defines its own copies: they must read the same.
    from validator.judge.checks import interconnect as node_check

    assert (
        node_check.PCIE_SOURCE,
        node_check.HBM_SOURCE,
        node_check.FABRIC_SOURCE,
        node_check.BASEBOARD_SOURCE,
    ) == (PCIE_SOURCE, HBM_SOURCE, FABRIC_SOURCE, BASEBOARD_SOURCE)


def test_an_all_reduce_size_is_said_in_binary_units() -> None:
    sized = [wired(f"gpu{n:02}", interconnect(size=3 * GIB // 2)) for n in range(3)]
    results, _ = judge_fleet(sized, Policy())
    (busbw,) = ic_findings(results[0], "all-reduce")
    assert busbw.message.startswith("all-reduce at 1.5 GiB over 8 GPUs of gpu00: ")
    assert busbw.message.endswith("for H100 SXM5 80GB (8 GPUs at 1.5 GiB)")


@pytest.mark.parametrize("value", [0.0, -3.0, float("nan"), float("inf")])
def test_an_implausible_copy_figure_is_left_out(value: float) -> None:
    odd = interconnect(h2d={2: value})
    results, _ = judge_fleet([wired("a"), wired("b"), wired("c", odd)], Policy())
    assert 2 not in {f.gpu_index for f in ic_findings(results[2], "H2D")}
