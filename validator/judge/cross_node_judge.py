"""The stage across nodes judged: floors per fabric, the fleet's median, a finding per node.

Pure: the stage as it ran (:class:`validator.model.CrossNodeStage`) and the fabric
(:mod:`validator.judge.fabric_catalog`) in, findings per node out.

Floors (:func:`stage_floor`): the catalog's for the fabric (ib_write_bw with GPUDirect,
Gb/s; NCCL all-reduce busbw per HCA, GB/s, the row for the group's size: the nearest
``min_nodes`` not above it) and, once the first round has given figures
from :data:`validator.judge.fleet.MIN_FLEET_NODES` tests or more, ``ratio`` (0.90, as
``fleet.interconnect``) of their median: the higher of the two holds, so a pair far below
its fleet is flagged even where the catalog states no floor (400G RoCE) or a low one. The
MAD is shown beside the median. NCCL is not judged at all (:func:`nccl_floor_problem`:
UNKNOWN, never PASS) where the catalog has no row for a group size the search uses, or
the row does not hold for the largest message the groups run.

What each node gets, per kind (checks ``fabric.*``), as an operator would act:

- good: ``fabric.rdma_bandwidth`` / ``fabric.nccl_bandwidth`` PASS, its figure shown;
- slow node (slow with two known-good peers): FAIL. RDMA slow on some of its HCAs only:
  those ports' cables or transceivers (RESEAT_CABLE_RISER). On every HCA: the node
  (PCIe, the HCA, GPUDirect), DRAIN_RMA. NCCL slow where RDMA met the floor: NCCL's
  own path (its network plugin, GPUDirect settings), FIX_SOFTWARE; else the cable;
- slow link (slow only together, each good elsewhere): ``fabric.link`` FAIL on both
  ends, RESEAT_CABLE_RISER: a test below the floor is never a pass, and the path
  between them is what a job across both would use;
- unreachable (no result with two known-good peers): ``fabric.reachable`` FAIL,
  RESEAT_CABLE_RISER (a port down or a cable out, the tool's words kept);
- undecided, interrupted, or the kind could not run (NCCL over SSH without mpirun):
  UNKNOWN (required: never certified on it), RERUN where running again decides it,
  MEASURE where something is missing (a known-good peer, a launcher);
- ``fabric.rdma_latency``: each node's best pair (its slowest HCA's typical 2-byte
  latency) against the catalog's ceiling: over it FAIL, or WARN where no source
  confirms the ceiling.

A node that fails any of these is NOT_CERTIFIED, one left undecided UNKNOWN
(:func:`rejudged`, through the verdict's own :func:`validator.judge.verdict.decide`,
whose "required check could not be judged" is UNKNOWN here where nothing failed: the
node entered certified alone, so only the fabric is undecided).
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
from collections.abc import Iterable, Mapping, Sequence

from validator.judge.actions import assign_actions
from validator.judge.fabric_catalog import Fabric, Figure, NcclFloor
from validator.judge.fleet import MIN_FLEET_NODES, median_of_nodes
from validator.judge.verdict import decide, sort_findings
from validator.model import (
    Action,
    CheckFamily,
    CrossNodeStage,
    CrossNodeTest,
    Finding,
    KindOutcome,
    NcclGroupResult,
    NodeResult,
    RdmaPairResult,
    Severity,
    Verdict,
)
from validator.safe_text import one_line

RDMA_BANDWIDTH = "fabric.rdma_bandwidth"
RDMA_LATENCY = "fabric.rdma_latency"
NCCL_BANDWIDTH = "fabric.nccl_bandwidth"
REACHABLE = "fabric.reachable"
LINK = "fabric.link"
FABRIC_CHECKS = frozenset({RDMA_BANDWIDTH, RDMA_LATENCY, NCCL_BANDWIDTH, REACHABLE, LINK})
DEFAULT_FLEET_RATIO = 0.90
_SOURCE = "gpuready: the stage across nodes"
# An undecided node that running again decides (else something is missing: MEASURE).
_RERUN_WORDS = ("interrupted", "rounds ran out", "deadline")
_NO_FIGURE = Figure(None, unconfirmed="the catalog has no row for the group's size")
_BANDWIDTH_CHECK = {"rdma": RDMA_BANDWIDTH, "nccl": NCCL_BANDWIDTH}
_WORDS = {"rdma": "RDMA write (slowest HCA)", "nccl": "NCCL all-reduce busbw per HCA"}


# ------------------------------------------------------------------ figures


def rdma_figure(records: Iterable[RdmaPairResult]) -> float | None:
    """A pair's figure: its slowest HCA's ib_write_bw average (Gb/s); None if any gave none."""
    figures = []
    for record in records:
        if record.test != "write_bw":
            continue
        value = record.bw_average_gbit_s
        if not record.completed or not isinstance(value, (int, float)):
            return None
        figures.append(float(value))
    return min(figures) if figures else None


def nccl_figure(records: Iterable[NcclGroupResult], hcas: int) -> float | None:
    """A group's figure: the default all-reduce's busbw at the largest size, per HCA.

    ``hcas``: the HCAs of the group's node with fewest, as the floor is stated per HCA for
    a run across nodes where every NIC carries its share. The IB-only variant (no NVLink,
    no shared memory) sends the node's own traffic through the NICs too, so its busbw is
    about one NIC's and is not divided against that floor; it, and every other collective
    run, must complete with no data wrong. Any run that failed, or counted a wrong or out
    of bounds value, leaves the group no result (never a figure, however fast).
    """
    runs = list(records)
    if not runs or hcas <= 0:
        return None
    for record in runs:
        if not record.completed or _data_wrong(record):
            return None
    chosen = [r for r in runs if r.collective == "all_reduce" and r.variant == "default"]
    values = [r.largest_busbw_gb_s for r in chosen]
    if not values or not all(isinstance(value, (int, float)) for value in values):
        return None
    return min(float(value) for value in values if isinstance(value, (int, float))) / hcas


def _data_wrong(record: NcclGroupResult) -> bool:
    """nccl-tests counted values wrong (#wrong) or out of bounds (its footer)."""
    return any(
        isinstance(count, int) and count > 0 for count in (record.wrong, record.out_of_bounds)
    )


def fleet_stats(figures: Sequence[float]) -> tuple[float, float] | None:
    """The median and MAD of the figures (each test counted once); None below the fleet size."""
    median = median_of_nodes(list(enumerate(figures)))
    if median is None:
        return None
    return median, statistics.median(abs(value - median) for value in figures)


def _stated(fabric: Fabric, kind: str, nodes: int) -> Figure:
    if kind == "rdma":
        return fabric.ib_write_bw_gdr_min_gbit_s
    row = fabric.nccl_floor(nodes)
    return row.figure if row is not None else _NO_FIGURE


def _gib(size: float) -> str:
    return f"{size:g}"


def _size_words(size: int) -> str:
    gib = size / (1 << 30)
    return f"{gib:g}G" if gib >= 1 else f"{size / (1 << 20):g}M"


def nccl_floor_problem(
    fabric: Fabric, group_sizes: Iterable[int], largest_sizes: Iterable[int]
) -> str | None:
    """Why NCCL cannot be judged on ``fabric``; None when every floor row needed holds.

    A group size with no floor row, or a largest message (bytes) outside its row's range.

    ``group_sizes``: every group size the search may run (its groups and their halves);
    ``largest_sizes``: every largest message a group may run (-e, by its smallest GPU).
    """
    sizes = sorted(set(largest_sizes))
    for nodes in sorted(set(group_sizes)):
        row: NcclFloor | None = fabric.nccl_floor(nodes)
        if row is None:
            return (
                f"the fabric catalog states no NCCL all-reduce floor for groups of {nodes} "
                f"nodes on {fabric.label} ({fabric.id}): add a row with min_nodes <= {nodes}"
            )
        outside = [size for size in sizes if not row.holds_for(size)]
        if outside:
            return (
                f"the largest NCCL message {_size_words(outside[0])} (a quarter of the "
                f"smallest GPU's memory) is outside the "
                f"{_gib(row.largest_min_gib)}-{_gib(row.largest_max_gib)} GiB the "
                f"{fabric.id} floor for groups of {row.min_nodes}+ nodes holds for"
            )
    return None


def stage_floor(
    fabric: Fabric,
    kind: str,
    first_round: Sequence[float],
    ratio: float = DEFAULT_FLEET_RATIO,
    nodes: int = 2,
) -> tuple[float, str, float | None, float | None]:
    """The floor a test of ``kind`` must meet, where it comes from, the fleet's statistics.

    NCCL's is the catalog's row for a group of ``nodes`` nodes.

    Returns:
        (floor, its source in words, fleet median or None, MAD or None); a floor of 0 when
        neither the catalog nor a large enough first round states one (then only a test
        with no result fails, and the bandwidth findings say no floor was known).
    """
    stated = _stated(fabric, kind, nodes)
    stats = fleet_stats(first_round)
    unit = "Gb/s" if kind == "rdma" else "GB/s per HCA"
    floor, words = 0.0, "no floor: none stated for the fabric and too few tests for a fleet"
    if stated.value is not None:
        where = stated.source or f"unconfirmed: {stated.unconfirmed}"
        floor, words = stated.value, f"{fabric.label} floor {stated.value:g} {unit} ({where})"
    if stats is not None and ratio * stats[0] > floor:
        floor = ratio * stats[0]
        words = (
            f"{ratio:.0%} of the fleet median {stats[0]:.1f} {unit} (MAD {stats[1]:.1f}), "
            f"above {'the catalog floor' if stated.value is not None else 'no catalog floor'}"
        )
    return floor, words, *(stats if stats is not None else (None, None))


# ------------------------------------------------------------------ findings


def _finding(check: str, severity: Severity, message: str, **extra: object) -> Finding:
    action = extra.pop("action", Action.NONE)
    return Finding(
        check=check,
        severity=severity,
        message=one_line(message),
        action=action,  # type: ignore[arg-type]
        action_source=_SOURCE if action is not Action.NONE else "",
        **extra,  # type: ignore[arg-type]
    )


def _tests_of(stage: CrossNodeStage, kind: str, node: str) -> list[CrossNodeTest]:
    return [test for test in stage.tests if test.kind == kind and node in test.hosts]


def _figure_text(value: float | None, kind: str) -> str:
    return "no result" if value is None else f"{value:.1f} {'Gb/s' if kind == 'rdma' else 'GB/s'}"


def _good(stage: CrossNodeStage, outcome: KindOutcome, node: str) -> Finding:
    kind = outcome.kind
    passed = [t for t in _tests_of(stage, kind, node) if t.passed and t.figure is not None]
    latest = passed[-1] if passed else None
    figure = latest.figure if latest is not None else None
    with_whom = ", ".join(h for h in latest.hosts if h != node) if latest else ""
    median = "" if outcome.fleet_median is None else f"; fleet median {outcome.fleet_median:.1f}"
    if outcome.floor <= 0:
        return _finding(
            _BANDWIDTH_CHECK[kind],
            Severity.UNKNOWN,
            f"{node}: {_WORDS[kind]} {_figure_text(figure, kind)} with {with_whom}: "
            f"{outcome.floor_source}, so it cannot be judged",
            observed=_figure_text(figure, kind),
            expected="a floor: state one in the fabric catalog, or test 3 or more pairs",
            action=Action.MEASURE,
        )
    return _finding(
        _BANDWIDTH_CHECK[kind],
        Severity.PASS,
        f"{node}: {_WORDS[kind]} {_figure_text(figure, kind)} with {with_whom}{median}",
        observed=_figure_text(figure, kind),
        expected=f">= {outcome.floor:.1f} ({outcome.floor_source})",
    )


def _slow_hcas(stage: CrossNodeStage, node: str, floor: float) -> tuple[list[str], int]:
    """The node's HCAs below the floor in its failed pairs, and how many HCAs it has."""
    slow: dict[str, None] = {}
    seen: dict[str, None] = {}
    for test in _tests_of(stage, "rdma", node):
        for record in test.rdma:
            end = record.server if record.server.host == node else record.client
            if record.test != "write_bw" or end.host != node:
                continue
            seen[end.hca] = None
            value = record.bw_average_gbit_s
            if not test.passed and isinstance(value, (int, float)) and value < floor:
                slow[end.hca] = None
    return list(slow), len(seen)


def _slow(stage: CrossNodeStage, outcome: KindOutcome, named_why: str, node: str) -> Finding:
    kind = outcome.kind
    action, where = Action.RESEAT_CABLE_RISER, ""
    if kind == "rdma":
        hcas, total = _slow_hcas(stage, node, outcome.floor)
        if hcas and len(hcas) < total:
            where = f"; slow on {', '.join(hcas)} only: reseat or replace those ports' cables"
        else:
            action, where = Action.DRAIN_RMA, "; slow on every HCA: the node (PCIe, HCA, GPUDirect)"
    else:
        rdma = stage.outcome("rdma")
        if rdma is not None and node in rdma.good:
            action, where = Action.FIX_SOFTWARE, "; its RDMA met the floor: NCCL's path or settings"
    return _finding(
        _BANDWIDTH_CHECK[kind],
        Severity.FAIL,
        f"{node}: {_WORDS[kind]} below the floor with two known-good peers: {named_why}{where}",
        observed=named_why,
        expected=f">= {outcome.floor:.1f} ({outcome.floor_source})",
        action=action,
    )


def _kind_findings(stage: CrossNodeStage, outcome: KindOutcome) -> dict[str, list[Finding]]:
    found: dict[str, list[Finding]] = collections.defaultdict(list)
    kind, check = outcome.kind, _BANDWIDTH_CHECK[outcome.kind]
    for node in outcome.good:
        found[node].append(_good(stage, outcome, node))
    for named in outcome.slow_nodes:
        for node in named.hosts:
            found[node].append(_slow(stage, outcome, named.why, node))
    for named in outcome.slow_links:
        for node in named.hosts:
            other = ", ".join(h for h in named.hosts if h != node)
            found[node].append(
                _finding(
                    LINK,
                    Severity.FAIL,
                    f"{node}: the {kind} path to {other} is slow while each met the floor "
                    f"with others: {named.why}",
                    observed=named.why,
                    expected=f">= {outcome.floor:.1f} ({outcome.floor_source})",
                    action=Action.RESEAT_CABLE_RISER,
                )
            )
    for named in outcome.unreachable:
        for node in named.hosts:
            found[node].append(
                _finding(
                    REACHABLE,
                    Severity.FAIL,
                    f"{node}: no {kind} result with two known-good peers: {named.why}",
                    observed=named.why,
                    expected="a result with every peer",
                    action=Action.RESEAT_CABLE_RISER,
                )
            )
    for named in outcome.unresolved:
        rerun = any(word in named.why for word in _RERUN_WORDS)
        for node in named.hosts:
            found[node].append(
                _finding(
                    check,
                    Severity.UNKNOWN,
                    f"{node}: {kind} across nodes not decided: {named.why}",
                    observed=named.why,
                    expected="a test with a known-good peer",
                    action=Action.RERUN if rerun else Action.MEASURE,
                )
            )
    return found


def _latency(stage: CrossNodeStage, fabric: Fabric) -> dict[str, list[Finding]]:
    """Each node's best pair latency (its slowest HCA's typical) against the ceiling."""
    ceiling = fabric.ib_write_lat_max_us
    best: dict[str, float] = {}
    for test in stage.tests:
        lats = [r.lat_typical_us for r in test.rdma if r.test == "write_lat" and r.completed]
        values = [float(v) for v in lats if isinstance(v, (int, float))]
        if test.kind != "rdma" or not values:
            continue
        for node in test.hosts:
            best[node] = min(best.get(node, max(values)), max(values))
    found: dict[str, list[Finding]] = {}
    if ceiling.value is None:
        return found
    over = Severity.FAIL if ceiling.confirmed else Severity.WARN
    for node, value in best.items():
        high = value > ceiling.value
        note = "" if ceiling.confirmed else f" (ceiling unconfirmed: {ceiling.unconfirmed})"
        found[node] = [
            _finding(
                RDMA_LATENCY,
                over if high else Severity.PASS,
                f"{node}: ib_write_lat typical {value:.2f} us in its best pair{note}",
                observed=f"{value:.2f} us",
                expected=f"<= {ceiling.value:g} us",
                action=Action.RESEAT_CABLE_RISER if high else Action.NONE,
            )
        ]
    return found


def _skipped(stage: CrossNodeStage, outcome: KindOutcome) -> dict[str, list[Finding]]:
    return {
        node: [
            _finding(
                _BANDWIDTH_CHECK[outcome.kind],
                Severity.UNKNOWN,
                f"{node}: {outcome.kind} across nodes not run: {outcome.skipped}",
                observed="not run",
                expected="a test with known-good peers",
                action=Action.MEASURE,
            )
        ]
        for node in stage.nodes
    }


def judge_stage(stage: CrossNodeStage, fabric: Fabric) -> dict[str, tuple[Finding, ...]]:
    """Every entered node's ``fabric.*`` findings (see the module docstring)."""
    found: dict[str, list[Finding]] = {node: [] for node in stage.nodes}
    parts = [_latency(stage, fabric)] if stage.outcome("rdma") is not None else []
    for outcome in stage.outcomes:
        parts.append(
            _skipped(stage, outcome) if outcome.skipped else _kind_findings(stage, outcome)
        )
    for part in parts:
        for node, findings in part.items():
            found.setdefault(node, []).extend(findings)
    return {node: tuple(findings) for node, findings in found.items()}


def rejudged(
    results: Sequence[NodeResult],
    fabric_findings: Mapping[str, Sequence[Finding]],
    labels: Mapping[str, str] | None = None,
) -> tuple[NodeResult, ...]:
    """The results with their fabric findings in place of any earlier ones, verdicts decided.

    Args:
        results: the nodes as the stage alone (and the fleet) judged them.
        fabric_findings: per hostname, its ``fabric.*`` findings; a node absent keeps its own.
        labels: SKU id -> label, to word the summary as :func:`judge_node` does.
    """
    out = []
    for node in results:
        if node.hostname not in fabric_findings:
            out.append(node)
            continue
        kept = [f for f in node.findings if CheckFamily.of(f.check) is not CheckFamily.FABRIC]
        ordered = sort_findings(list(assign_actions([*kept, *fabric_findings[node.hostname]])))
        verdict, summary = decide(node.facts, ordered)
        if verdict is Verdict.NOT_CERTIFIED and not any(
            f.severity is Severity.FAIL for f in ordered
        ):
            # Only undecided across the fabric (a node enters certified alone): not judged,
            # as a run cut at its deadline is (validator.remote.deadline), never failed.
            verdict = Verdict.UNKNOWN
        label = (labels or {}).get(node.sku or "")
        if label and verdict is not Verdict.UNKNOWN:
            summary = f"{len(node.facts.gpus)}x {label}: {summary}"
        out.append(dataclasses.replace(node, findings=ordered, verdict=verdict, summary=summary))
    return tuple(out)


__all__ = [
    "DEFAULT_FLEET_RATIO",
    "FABRIC_CHECKS",
    "LINK",
    "MIN_FLEET_NODES",
    "NCCL_BANDWIDTH",
    "RDMA_BANDWIDTH",
    "RDMA_LATENCY",
    "REACHABLE",
    "fleet_stats",
    "judge_stage",
    "nccl_figure",
    "nccl_floor_problem",
    "rdma_figure",
    "rejudged",
    "stage_floor",
]
