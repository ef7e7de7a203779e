"""The fleet view: each GPU's burn-in speed against its model's fleet median.

A node judged alone can only compare a GPU with its datasheet and its neighbours in
the same chassis; a GPU that is 10% slow on a node whose GPUs are all 10% slow (a
cooling or power fault of the chassis) passes both. Across the fleet, GPUs of one
model run within a few percent of each other, so a GPU below
``policy.thresholds.fleet_speed_min`` (default 0.93) of its model's fleet median is
flagged: 7% is about twice the spread healthy H100 SXM nodes show in large GEMMs,
and the median with the MAD (median absolute deviation) beside it is robust: one
very slow or very fast GPU moves neither.

Decisions, in one place:

* A GPU counts when its burn completed with a measured TFLOPS figure, on a node
  that has a SKU and whose verdict is not UNKNOWN (a node that could not be judged
  says nothing reliable about speed). Its other failures (a wrong result) are the
  node checks' business; the speed is still a measurement.
* GPUs are compared within one SKU and one burn data type: bf16 and fp8 TFLOPS are
  not comparable. When one SKU ran in several data types, each gets its own stats
  row, named ``<sku> <dtype>``.
* Fewer than :data:`MIN_FLEET_GPUS` measured GPUs: there is no fleet to compare
  with; those GPUs get no fleet finding and the SKU has no stats row.
* The threshold is each host's own policy's (per-host overrides apply to that
  host's GPUs); the stats row shows the one most of that SKU's hosts use.
* Judging twice replaces the earlier fleet findings rather than adding to them.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
from collections.abc import Callable, Sequence

from validator.errors import PolicyError
from validator.judge.actions import assign_actions
from validator.judge.catalog import Catalog, load_catalog
from validator.judge.policy import Policy
from validator.judge.verdict import decide, sort_findings
from validator.model import (
    BurnStatus,
    Finding,
    FleetSummary,
    GpuBurn,
    NodeResult,
    Severity,
    SkuFleetStats,
    Verdict,
)

CHECK = "fleet.speed"
MIN_FLEET_GPUS = 3


@dataclasses.dataclass(frozen=True)
class _Sample:
    node: int  # position in the results
    gpu: GpuBurn
    tflops: float
    ratio: float  # the host's fleet_speed_min


def _tflops(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _label(catalog: Catalog, sku: str) -> str:
    try:
        return catalog.get(sku).label
    except PolicyError:
        return sku  # a report from another catalog: the id still names the model


def _policy_lookup(policy_for_host: Callable[[str], Policy] | Policy) -> Callable[[str], Policy]:
    if isinstance(policy_for_host, Policy):
        policy = policy_for_host
        return lambda _host: policy
    return policy_for_host


def _groups(
    results: Sequence[NodeResult], lookup: Callable[[str], Policy]
) -> dict[tuple[str, str], list[_Sample]]:
    groups: dict[tuple[str, str], list[_Sample]] = collections.defaultdict(list)
    for position, node in enumerate(results):
        burn = node.facts.burn
        if node.sku is None or burn is None or node.verdict is Verdict.UNKNOWN:
            continue
        ratio = lookup(node.hostname).thresholds.fleet_speed_min
        for gpu in burn.gpus:
            if gpu.status is BurnStatus.COMPLETED and isinstance(gpu.tflops, float):
                groups[(node.sku, burn.dtype)].append(_Sample(position, gpu, gpu.tflops, ratio))
    return groups


def _finding(sample: _Sample, hostname: str, label: str, median: float, mad: float) -> Finding:
    threshold = sample.ratio * median
    slow = sample.tflops < threshold
    share = sample.tflops / median
    return Finding(
        check=CHECK,
        severity=Severity.FAIL if slow else Severity.PASS,
        message=(
            f"GPU {sample.gpu.index} of {hostname} ran {_tflops(sample.tflops)} TFLOPS, "
            f"{share:.0%} of the fleet median {_tflops(median)} for {label} (MAD {mad:.1f})"
        ),
        observed=f"{_tflops(sample.tflops)} TFLOPS",
        expected=f">= {_tflops(threshold)} TFLOPS ({sample.ratio:.0%} of the fleet median)",
        gpu_index=sample.gpu.index,
        gpu_uuid=sample.gpu.uuid if isinstance(sample.gpu.uuid, str) else None,
    )


def _rejudged(node: NodeResult, fleet: list[Finding], label: str | None) -> NodeResult:
    # Actions with the node's own findings in sight: a slow GPU's cause may be among them.
    findings = list(assign_actions([f for f in node.findings if f.check != CHECK] + fleet))
    ordered = sort_findings(findings)
    if ordered == node.findings:
        return node
    verdict, summary = decide(node.facts, ordered)
    if label is not None and verdict is not Verdict.UNKNOWN:
        summary = f"{len(node.facts.gpus)}x {label}: {summary}"  # as judge_node words it
    return dataclasses.replace(node, findings=ordered, verdict=verdict, summary=summary)


def _summary(
    results: Sequence[NodeResult], stats: list[SkuFleetStats], interrupted: bool
) -> FleetSummary:
    verdicts = collections.Counter(node.verdict for node in results)
    return FleetSummary(
        hosts=len(results),
        certified=verdicts[Verdict.CERTIFIED],
        not_certified=verdicts[Verdict.NOT_CERTIFIED],
        unknown=verdicts[Verdict.UNKNOWN],
        skus=tuple(sorted(stats, key=lambda row: row.sku)),
        interrupted=interrupted,
    )


def judge_fleet(
    results: Sequence[NodeResult],
    policy_for_host: Callable[[str], Policy] | Policy,
    *,
    interrupted: bool = False,
    catalog: Catalog | None = None,
) -> tuple[tuple[NodeResult, ...], FleetSummary]:
    """Judge each GPU's burn-in speed against its SKU's fleet median.

    Args:
        results: every node judged on its own (judge_node), in any order.
        policy_for_host: the policy for a hostname (per-host overrides), or one policy
            for all; only ``thresholds.fleet_speed_min`` is read.
        interrupted: the run was stopped before every host finished; recorded in the
            summary.
        catalog: for the SKU labels in messages; the packaged one when omitted.

    Returns:
        The results in the same order, with a ``fleet.speed`` finding per measured GPU
        of every SKU that has enough GPUs (verdict and summary recomputed where the
        findings changed), and the fleet summary: counts by verdict (after this
        judgement) and each SKU's speed statistics.
    """
    catalog = catalog if catalog is not None else load_catalog()
    lookup = _policy_lookup(policy_for_host)
    groups = _groups(results, lookup)
    dtypes: dict[str, set[str]] = collections.defaultdict(set)
    for sku, dtype in groups:
        dtypes[sku].add(dtype)
    added: dict[int, list[Finding]] = collections.defaultdict(list)
    stats: list[SkuFleetStats] = []
    for (sku, dtype), samples in groups.items():
        figures = [sample.tflops for sample in samples]
        median = statistics.median(figures)
        if len(samples) < MIN_FLEET_GPUS or median <= 0:
            continue
        mad = statistics.median(abs(value - median) for value in figures)
        label = _label(catalog, sku)
        for sample in samples:
            hostname = results[sample.node].hostname
            added[sample.node].append(_finding(sample, hostname, label, median, mad))
        ratio = collections.Counter(sample.ratio for sample in samples).most_common(1)[0][0]
        stats.append(
            SkuFleetStats(
                sku=sku if len(dtypes[sku]) == 1 else f"{sku} {dtype}",
                gpus=len(samples),
                median_tflops=median,
                mad_tflops=mad,
                threshold_tflops=ratio * median,
            )
        )
    judged = tuple(
        _rejudged(node, added[position], _label(catalog, node.sku) if node.sku else None)
        if position in added or any(f.check == CHECK for f in node.findings)
        else node
        for position, node in enumerate(results)
    )
    return judged, _summary(judged, stats, interrupted)
