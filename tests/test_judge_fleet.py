"""The fleet view: burn-in speed against each SKU's fleet median."""

from __future__ import annotations

import dataclasses

import pytest

from validator.judge.fleet import CHECK, judge_fleet
from validator.judge.policy import Policy, Thresholds
from validator.model import (
    BurnResult,
    BurnStatus,
    Finding,
    GpuBurn,
    GpuFacts,
    NodeFacts,
    NodeResult,
    NvmlStatus,
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
            node("a1", a100, sku=A100),
            node("a2", a100, sku=A100),
        ],
        Policy(),
    )
    # Pooled, the A100s would be 40% of the median and fail; per SKU all pass.
    assert all(r.verdict is Verdict.CERTIFIED for r in results)
    assert [(s.sku, s.gpus, s.median_tflops) for s in summary.skus] == [
        (A100, 8, 290.5),
        (H100, 16, 712.0),
    ]
    assert "for A100 SXM4 80GB" in fleet_findings(results[2])[0].message


def test_fewer_than_three_gpus_get_no_fleet_finding() -> None:
    results, summary = judge_fleet(
        [node("h1", (712.0, 400.0)), node("a1", (290.0,), sku=A100)], Policy()
    )
    assert all(fleet_findings(r) == [] for r in results)
    assert [r.verdict for r in results] == [Verdict.CERTIFIED, Verdict.CERTIFIED]
    assert summary.skus == ()  # skipped, not judged on a fleet of two
    assert (summary.hosts, summary.certified) == (2, 2)


def test_exactly_three_gpus_are_a_fleet() -> None:
    results, summary = judge_fleet([node("h1", (712.0, 710.0, 500.0))], Policy())
    assert results[0].verdict is Verdict.NOT_CERTIFIED
    assert summary.skus[0].gpus == 3


def test_missing_burn_gets_no_fleet_finding() -> None:
    results, summary = judge_fleet(
        [node("a", HEALTHY), node("b", HEALTHY), node("noburn", None)], Policy()
    )
    assert fleet_findings(results[2]) == []
    assert results[2] == node("noburn", None)  # untouched
    assert summary.skus[0].gpus == 16


def test_unmeasured_and_failed_gpus_are_left_out() -> None:
    partial = (712.0, None, 100.0, *HEALTHY[3:])
    results, summary = judge_fleet(
        [
            node("a", HEALTHY),
            node("b", partial, statuses={2: BurnStatus.TIMEOUT}),
        ],
        Policy(),
    )
    judged = {f.gpu_index for f in fleet_findings(results[1])}
    assert judged == {0, 3, 4, 5, 6, 7}  # GPU 1 has no figure, GPU 2 did not complete
    assert summary.skus[0].gpus == 14
    assert results[1].verdict is Verdict.CERTIFIED


def test_unknown_nodes_and_nodes_without_sku_are_left_out() -> None:
    slow = tuple(value * 0.5 for value in HEALTHY)
    results, summary = judge_fleet(
        [
            node("a", HEALTHY),
            node("b", HEALTHY),
            node("u", slow, verdict=Verdict.UNKNOWN),
            node("n", slow, sku=None),
        ],
        Policy(),
    )
    assert fleet_findings(results[2]) == fleet_findings(results[3]) == []
    assert results[2].verdict is Verdict.UNKNOWN
    assert summary.skus[0].gpus == 16
    assert (summary.certified, summary.unknown) == (3, 1)


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
    # The stats row shows the threshold most hosts use.
    assert summary.skus[0].threshold_tflops == pytest.approx(712.0 * 0.93)


def test_data_types_are_not_mixed() -> None:
    fp8 = tuple(value * 2 for value in HEALTHY)
    results, summary = judge_fleet([node("a", HEALTHY), node("b", fp8, dtype="fp8")], Policy())
    assert all(r.verdict is Verdict.CERTIFIED for r in results)
    assert [s.sku for s in summary.skus] == [f"{H100} bf16", f"{H100} fp8"]


def test_judging_twice_gives_the_same_result() -> None:
    slow = (600.0, *HEALTHY[1:])
    once, first = judge_fleet([node("a", HEALTHY), node("b", slow)], Policy())
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
