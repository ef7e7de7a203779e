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
* A figure above what the SKU can do (:mod:`validator.judge.figure_ceilings`), or one that is
  not finite and above zero, is no measurement and is left out: the node's own
  judgement names it.
* The fleet median is a median of nodes: each node's median GPU first, then the median
  of those. A node holding half the GPUs counts once, so it can neither set the median
  (a forged 990 TFLOPS node) nor hide behind it (a slow 8-GPU node among 2-GPU ones).
  Each GPU is still held to that median on its own.
* Fewer than :data:`MIN_FLEET_NODES` measured nodes: there is no fleet to compare with
  (two nodes cannot say which of them is off); those GPUs get no fleet finding and the
  SKU has no stats row. The MAD shown beside the median is the GPUs' spread about it.
* The threshold is each host's own policy's (per-host overrides apply to that
  host's GPUs); the stats row shows the one most of that SKU's hosts use.
* Judging twice replaces the earlier fleet findings rather than adding to them.

``fleet.interconnect`` does the same for the measured bandwidths, each figure against
the fleet median of the same figure on the same SKU: each GPU's H2D, D2H and HBM copy
(per SKU), each node's slowest peer pair (per SKU and GPU count: one slow tray or
NVSwitch lowers every pair of a node alike, which its siblings cannot show) and each
node's all-reduce busbw at its largest size (per SKU, rank count and that size: busbw
grows with the message). Below ``thresholds.fleet_interconnect_min`` (default 0.90) of
the median fails, with the action that fixes that figure
(:func:`validator.judge.checks.interconnect_actions.figure_action`, the node checks' and
drift's answer too): a slow all-reduce is the links where the node's pairs failed
(``interconnect.p2p`` or ``interconnect.peer_access``, or its slowest pair below the
fleet's), the NVSwitch baseboard only where they copy at speed.

* A figure counts when it was measured (a finite median above zero; a pair with peer
  access) on a node with a SKU, a verdict other than UNKNOWN and an interconnect
  measurement that ran; a figure not measured is left out, never counted as zero.
  A GPU the idle gate found busy is left out (its figures may be low for that), and so
  is an all-reduce over one; a wrong sum is the node check's business, its busbw is
  still a measurement.
* A group needs figures from :data:`MIN_FLEET_NODES` nodes (fleet.speed's rule), and
  its median is a median of each node's median figure: a "fleet" of one node is its own
  siblings, which ``interconnect_sibling_min`` judges already, and one node of many
  GPUs counts once.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence

from validator.error_tree import PolicyError
from validator.judge.actions import assign_actions
from validator.judge.catalog import Catalog, Sku, load_catalog
from validator.judge.checks.finding_helpers import with_action
from validator.judge.checks.interconnect import P2P, PEER_ACCESS
from validator.judge.checks.interconnect_actions import PeerCopies, figure_action, peer_copies
from validator.judge.checks.interconnect_figures import gbs
from validator.judge.figure_ceilings import tflops_ceiling, tflops_plausible
from validator.judge.policy import Policy
from validator.judge.verdict import decide, sort_findings
from validator.model import (
    AllReduce,
    BurnStatus,
    Finding,
    FleetSummary,
    GpuBurn,
    Interconnect,
    NodeResult,
    Severity,
    SkuFleetStats,
    Unavailable,
    Verdict,
    measured_gb_s,
)
from validator.safe_text import size_words

CHECK = "fleet.speed"
INTERCONNECT_CHECK = "fleet.interconnect"
FLEET_CHECKS = frozenset({CHECK, INTERCONNECT_CHECK})
MIN_FLEET_NODES = 3


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
    results: Sequence[NodeResult], lookup: Callable[[str], Policy], catalog: Catalog
) -> dict[tuple[str, str], list[_Sample]]:
    groups: dict[tuple[str, str], list[_Sample]] = collections.defaultdict(list)
    for position, node in enumerate(results):
        burn = node.facts.burn
        if node.sku is None or burn is None or node.verdict is Verdict.UNKNOWN:
            continue
        ratio = lookup(node.hostname).thresholds.fleet_speed_min
        # judge_node made implausible figures "not measured" already; held again here for
        # results judged elsewhere (a stored run, another catalog).
        ceiling = tflops_ceiling(_sku(catalog, node.sku), burn.dtype, catalog)
        for gpu in burn.gpus:
            if gpu.status is BurnStatus.COMPLETED and tflops_plausible(gpu.tflops, ceiling):
                value = float(gpu.tflops)  # type: ignore[arg-type]
                groups[(node.sku, burn.dtype)].append(_Sample(position, gpu, value, ratio))
    return groups


def median_of_nodes(values: Sequence[tuple[int, float]]) -> float | None:
    """The median over nodes of each node's median figure; None below MIN_FLEET_NODES nodes.

    Args:
        values: (node position, figure) pairs, any number per node.
    """
    per_node: dict[int, list[float]] = collections.defaultdict(list)
    for node, value in values:
        per_node[node].append(value)
    if len(per_node) < MIN_FLEET_NODES:
        return None
    return statistics.median(statistics.median(figures) for figures in per_node.values())


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
    kept = [f for f in node.findings if f.check not in FLEET_CHECKS]
    findings = list(assign_actions(kept + fleet))
    ordered = sort_findings(findings)
    if ordered == node.findings:
        return node
    verdict, summary = decide(node.facts, ordered)
    if label is not None and verdict is not Verdict.UNKNOWN:
        summary = f"{len(node.facts.gpus)}x {label}: {summary}"  # as judge_node words it
    return dataclasses.replace(node, findings=ordered, verdict=verdict, summary=summary)


# ------------------------------------------------------------------ interconnect

# The figures compared, as messages name them.
FIGURES = {"h2d": "H2D", "d2h": "D2H", "hbm": "HBM", "p2p": "P2P", "all_reduce": "all-reduce busbw"}


@dataclasses.dataclass(frozen=True)
class _Figure:
    """One measured bandwidth of one node, to be held against its group's median."""

    node: int  # position in the results
    figure: str  # a FIGURES key
    scope: str  # what must match besides the SKU: "" per GPU, "8 GPUs", "8 GPUs at 4 GiB"
    value: float
    ratio: float  # the host's fleet_interconnect_min
    where: str  # "GPU 3", "slowest pair GPU 2 -> GPU 5", "all-reduce at 4 GiB over 8 GPUs"
    gpu_index: int | None = None
    gpu_uuid: str | None = None


def _copies(position: int, interconnect: Interconnect, ratio: float) -> list[_Figure]:
    if isinstance(interconnect.gpus, Unavailable):
        return []
    busy = set(interconnect.busy_gpus)
    found = []
    for copy in interconnect.gpus:
        if copy.index in busy:
            continue
        uuid = copy.uuid if isinstance(copy.uuid, str) else None
        for figure in ("h2d", "d2h", "hbm"):
            value = measured_gb_s(getattr(copy, figure))
            if value is not None:
                where = f"GPU {copy.index}"
                found.append(_Figure(position, figure, "", value, ratio, where, copy.index, uuid))
    return found


def _slowest_pair(
    position: int, interconnect: Interconnect, gpus: int, ratio: float
) -> list[_Figure]:
    if isinstance(interconnect.peers, Unavailable):
        return []
    busy = set(interconnect.busy_gpus)
    pairs = [
        (value, peer.src, peer.dst)
        for peer in interconnect.peers
        if peer.access is True
        and not {peer.src, peer.dst} & busy
        and (value := measured_gb_s(peer.unidirectional)) is not None
    ]
    if not pairs:
        return []
    value, src, dst = min(pairs)
    where = f"slowest pair GPU {src} -> GPU {dst}"
    return [_Figure(position, "p2p", f"{gpus} GPUs", value, ratio, where)]


def _largest_all_reduce(position: int, interconnect: Interconnect, ratio: float) -> list[_Figure]:
    run = interconnect.all_reduce
    if not isinstance(run, AllReduce) or isinstance(run.points, Unavailable):
        return []
    if set(run.gpu_indices) & set(interconnect.busy_gpus):
        return []
    points = [p for p in run.points if math.isfinite(p.busbw_gb_s) and p.busbw_gb_s > 0]
    if not points:
        return []
    largest = max(points, key=lambda point: point.size_bytes)
    size = size_words(largest.size_bytes)
    scope = f"{run.ranks} GPUs at {size}"
    where = f"all-reduce at {size} over {run.ranks} GPUs"
    return [_Figure(position, "all_reduce", scope, largest.busbw_gb_s, ratio, where)]


def _interconnect_groups(
    results: Sequence[NodeResult], lookup: Callable[[str], Policy]
) -> dict[tuple[str, str, str], list[_Figure]]:
    groups: dict[tuple[str, str, str], list[_Figure]] = collections.defaultdict(list)
    for position, node in enumerate(results):
        interconnect = node.facts.interconnect
        if (
            node.sku is None
            or interconnect is None
            or interconnect.error is not None
            or node.verdict is Verdict.UNKNOWN
        ):
            continue
        ratio = lookup(node.hostname).thresholds.fleet_interconnect_min
        figures = _copies(position, interconnect, ratio)
        figures += _slowest_pair(position, interconnect, len(node.facts.gpus), ratio)
        figures += _largest_all_reduce(position, interconnect, ratio)
        for figure in figures:
            groups[(node.sku, figure.figure, figure.scope)].append(figure)
    return groups


@dataclasses.dataclass(frozen=True)
class _Judged:
    """A figure with its group's median: what its finding says."""

    sample: _Figure
    median: float
    label: str
    sku: Sku | None

    @property
    def threshold(self) -> float:
        return self.sample.ratio * self.median

    @property
    def slow(self) -> bool:
        return self.sample.value < self.threshold


def _interconnect_finding(judged: _Judged, node: NodeResult, peers: PeerCopies) -> Finding:
    sample, median = judged.sample, judged.median
    share = sample.value / median
    name = FIGURES[sample.figure]
    of = judged.label if not sample.scope else f"{judged.label} ({sample.scope})"
    finding = Finding(
        check=INTERCONNECT_CHECK,
        severity=Severity.FAIL if judged.slow else Severity.PASS,
        message=(
            f"{sample.where} of {node.hostname}: {name} {gbs(sample.value)}, {share:.0%} of "
            f"the fleet median {gbs(median)} for {of}"
        ),
        observed=f"{name} {gbs(sample.value)}",
        expected=f">= {gbs(judged.threshold)} ({sample.ratio:.0%} of the fleet median)",
        gpu_index=sample.gpu_index,
        gpu_uuid=sample.gpu_uuid,
    )
    if not judged.slow:
        return finding
    return with_action(finding, *figure_action(sample.figure, judged.sku, node.facts.gpus, peers))


def _sku(catalog: Catalog, sku: str) -> Sku | None:
    try:
        return catalog.get(sku)
    except PolicyError:
        return None


def _node_peers(node: NodeResult, fleet_pair: _Judged | None) -> PeerCopies:
    """What a node's pairs say of its slow all-reduce: its own checks, then the fleet's pair.

    As interconnect.all_reduce decides from interconnect.p2p and interconnect.peer_access;
    the node's slowest pair held against the fleet counts too: below the fleet, the pairs
    explain the all-reduce; at the fleet's speed, they copy at speed.
    """
    said = peer_copies(node.findings, P2P, PEER_ACCESS)
    if fleet_pair is None or said is PeerCopies.FAILED:
        return said
    return PeerCopies.FAILED if fleet_pair.slow else PeerCopies.AT_SPEED


def _judged_figures(
    results: Sequence[NodeResult], lookup: Callable[[str], Policy], catalog: Catalog
) -> list[_Judged]:
    """Every figure in a group large enough for a fleet, with its group's median."""
    judged: list[_Judged] = []
    for (sku, _, _), samples in _interconnect_groups(results, lookup).items():
        median = median_of_nodes([(sample.node, sample.value) for sample in samples])
        if median is None:
            continue
        label, row = _label(catalog, sku), _sku(catalog, sku)
        judged += [_Judged(sample, median, label, row) for sample in samples]
    return judged


def _interconnect_findings(
    results: Sequence[NodeResult], lookup: Callable[[str], Policy], catalog: Catalog
) -> dict[int, list[Finding]]:
    """The fleet.interconnect findings of every node with a figure in a large enough group."""
    judged = _judged_figures(results, lookup, catalog)
    pairs = {item.sample.node: item for item in judged if item.sample.figure == "p2p"}
    added: dict[int, list[Finding]] = collections.defaultdict(list)
    for item in judged:
        node = results[item.sample.node]
        peers = _node_peers(node, pairs.get(item.sample.node))
        added[item.sample.node].append(_interconnect_finding(item, node, peers))
    return added


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
    """Judge each GPU's burn-in speed and each bandwidth figure against its SKU's fleet median.

    Args:
        results: every node judged on its own (judge_node), in any order.
        policy_for_host: the policy for a hostname (per-host overrides), or one policy
            for all; only ``thresholds.fleet_speed_min`` and
            ``thresholds.fleet_interconnect_min`` are read.
        interrupted: the run was stopped before every host finished; recorded in the
            summary.
        catalog: for the SKU labels in messages; the packaged one when omitted.

    Returns:
        The results in the same order, with a ``fleet.speed`` finding per measured GPU
        of every SKU that has enough GPUs and a ``fleet.interconnect`` finding per
        measured figure of every group that has enough (verdict and summary recomputed
        where the findings changed), and the fleet summary: counts by verdict (after
        this judgement) and each SKU's speed statistics.
    """
    catalog = catalog if catalog is not None else load_catalog()
    lookup = _policy_lookup(policy_for_host)
    groups = _groups(results, lookup, catalog)
    dtypes: dict[str, set[str]] = collections.defaultdict(set)
    for sku, dtype in groups:
        dtypes[sku].add(dtype)
    added: dict[int, list[Finding]] = collections.defaultdict(list)
    stats: list[SkuFleetStats] = []
    for (sku, dtype), samples in groups.items():
        figures = [sample.tflops for sample in samples]
        median = median_of_nodes([(sample.node, sample.tflops) for sample in samples])
        if median is None:
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
    for position, found in _interconnect_findings(results, lookup, catalog).items():
        added[position] += found
    judged = tuple(
        _rejudged(node, added[position], _label(catalog, node.sku) if node.sku else None)
        if position in added or any(f.check in FLEET_CHECKS for f in node.findings)
        else node
        for position, node in enumerate(results)
    )
    return judged, _summary(judged, stats, interrupted)
