"""What every report format shares: ordering, counting and showing values.

Every format counts checks, each once at its worst finding's severity, through the one
function (validator.model.check_counts.count_checks), re-exported here for the renderers.

The renderers differ only in markup; the decisions about which finding comes
first, what the fleet's verdict is and how a missing value reads live here, once.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

from validator.model import ACTION_WORDS as MODEL_ACTION_WORDS
from validator.model import (
    HARDWARE_ACTIONS,
    Action,
    AllReduce,
    AllReducePoint,
    BurnStatus,
    CheckFamily,
    Finding,
    FleetSummary,
    GpuBurn,
    GpuCopyBandwidth,
    Interconnect,
    KeptPerObject,
    Measured,
    NodeFacts,
    NodeResult,
    NvLinkState,
    NvmlStatus,
    PeerBandwidth,
    Reason,
    Report,
    Severity,
    SkuFleetStats,
    TelemetrySample,
    Unavailable,
    Verdict,
    known,
    measured_gb_s,
)
from validator.model import overall_verdict as verdict_of_nodes
from validator.model.check_counts import CheckCounts as CheckCounts  # noqa: PLC0414 - one count
from validator.model.check_counts import checks_at
from validator.model.check_counts import count_checks as count_checks  # noqa: PLC0414 - all use
from validator.packed import without_samples
from validator.safe_text import one_line as one_line  # noqa: PLC0414 - renderers call common.one_line
from validator.safe_text import size_words, visible
from validator.trace import LOW_PERCENTILE, percentile, under_load

# The order operators read in: what blocks certification first.
SEVERITY_ORDER: dict[Severity, int] = {
    Severity.FAIL: 0,
    Severity.UNKNOWN: 1,
    Severity.WARN: 2,
    Severity.PASS: 3,
}

# Nodes in the order a fleet is read in: what is not certified first, then what could
# not be judged, then the certified ones.
VERDICT_ORDER: dict[Verdict, int] = {
    Verdict.NOT_CERTIFIED: 0,
    Verdict.UNKNOWN: 1,
    Verdict.CERTIFIED: 2,
}


def count_nodes(nodes: Iterable[NodeResult]) -> CheckCounts:
    """The checks of several nodes, each node's counted on its own, added up."""
    return sum((count_checks(node.findings) for node in nodes), CheckCounts())


def failing_checks(node: NodeResult) -> list[tuple[str, tuple[int, ...]]]:
    """The checks the node failed (or, where none failed, could not judge), with their GPUs.

    The ones :func:`count_checks` counts as failed (unknown): its FAIL count is the
    length of this list, so a line naming them never disagrees with a count beside it.
    """
    failed = checks_at(node.findings, Severity.FAIL)
    return failed or checks_at(node.findings, Severity.UNKNOWN)


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Findings with FAIL first, then UNKNOWN, WARN and PASS.

    The sort is stable, so within one severity the judge's order is kept.

    Args:
        findings: the findings of one node.

    Returns:
        A new list in reading order.
    """
    return sorted(findings, key=lambda finding: SEVERITY_ORDER[finding.severity])


def overall_verdict(report: Report) -> Verdict:
    """The verdict for the whole report, by the one rule (validator.model.overall_verdict).

    Args:
        report: the acceptance report.

    Returns:
        The fleet verdict.
    """
    return verdict_of_nodes(node.verdict for node in report.nodes)


def overall_summary(report: Report) -> str:
    """One line saying how the nodes came out.

    Args:
        report: the acceptance report.

    Returns:
        For one node its own summary (or its verdict); for several, the tally
        and the hosts that are not certified.
    """
    nodes = report.nodes
    if not nodes:
        return "No nodes were judged."
    if len(nodes) == 1:
        node = nodes[0]
        return one_line(node.summary or f"{node.hostname}: {verdict_words(node.verdict)}.")
    # A host names itself: one line, controls escaped, whichever format shows it.
    certified = [one_line(n.hostname) for n in nodes if n.verdict is Verdict.CERTIFIED]
    failed = [one_line(n.hostname) for n in nodes if n.verdict is Verdict.NOT_CERTIFIED]
    unknown = [one_line(n.hostname) for n in nodes if n.verdict is Verdict.UNKNOWN]
    parts = [f"{len(certified)} of {len(nodes)} nodes certified"]
    if failed:
        parts.append(f"not certified: {', '.join(failed)}")
    if unknown:
        parts.append(f"could not be judged: {', '.join(unknown)}")
    return "; ".join(parts) + "."


# What to do, in the words every format shows: the model's one mapping, under the
# name the formats read here.
ACTION_WORDS: dict[Action, str] = MODEL_ACTION_WORDS

# The most serious first: the hardware, a fault cleared on site, the setup, others' work
# to wait out, a measure, a rerun.
ACTION_ORDER: tuple[Action, ...] = (
    Action.DRAIN_RMA,
    Action.REPLACE_TRANSCEIVER,
    Action.RESEAT_CABLE_RISER,
    Action.CHECK_COOLING_POWER,
    Action.RESET_GPU,
    Action.REBOOT,
    Action.FIX_BIOS,
    Action.FIX_SOFTWARE,
    Action.WAIT_IDLE,
    Action.MEASURE,
    Action.RERUN,
)
_ACTION_RANK = {action: rank for rank, action in enumerate(ACTION_ORDER)}


def action_words(action: Action) -> str:
    """``drain and RMA`` for :attr:`Action.DRAIN_RMA`: how every report says an action."""
    return ACTION_WORDS[action]


def is_hardware(action: Action) -> bool:
    """True for an action that sends a technician to the hardware (HARDWARE_ACTIONS)."""
    return action in HARDWARE_ACTIONS


def blocking(finding: Finding) -> bool:
    """True for a finding that keeps its node from certification: a FAIL or a required UNKNOWN."""
    return finding.severity is Severity.FAIL or (
        finding.severity is Severity.UNKNOWN and finding.required
    )


@dataclasses.dataclass(frozen=True)
class ActionTarget:
    """One GPU (or the node itself) under one action, with the checks that call for it."""

    gpu_index: int | None  # None: a node-wide finding
    label: str  # "GPU 3 (serial 1652..., bus 00000000:1B:00.0)" / "the node"
    checks: tuple[str, ...]  # in the findings' order, each once


@dataclasses.dataclass(frozen=True)
class ActionGroup:
    """Everything one action is needed for on one node."""

    action: Action
    words: str
    hardware: bool
    targets: tuple[ActionTarget, ...]


def _gpu_target_label(facts: NodeFacts, index: int) -> str:
    gpu = next((g for g in facts.gpus if g.index == index), None)
    if gpu is None:
        return f"GPU {index}"
    parts = [
        f"{label} {show(value)}"
        for label, value in (("serial", gpu.serial), ("bus", gpu.pci_bus_id))
        if known(value)
    ]
    return f"GPU {index} ({', '.join(parts)})" if parts else f"GPU {index}"


def what_to_do(node: NodeResult) -> list[ActionGroup]:
    """The node's blocking findings grouped by action, the most serious first.

    Within an action, GPUs come by index and the node-wide findings last; each target
    names its checks once, in the judge's order. A GPU with faults of several kinds is
    under each of their actions. Findings without an action (a report from before
    actions were given) are left out: the findings table still shows them.

    Args:
        node: one node's result.

    Returns:
        One group per action needed; empty when nothing blocks the node.
    """
    checks: dict[Action, dict[int | None, list[str]]] = {}
    for finding in node.findings:
        if not blocking(finding) or finding.action is Action.NONE:
            continue
        named = checks.setdefault(finding.action, {}).setdefault(finding.gpu_index, [])
        if finding.check not in named:
            named.append(finding.check)
    groups = []
    for action in sorted(checks, key=lambda a: _ACTION_RANK.get(a, len(_ACTION_RANK))):
        by_target = checks[action]
        order = sorted(by_target, key=lambda i: (i is None, -1 if i is None else i))
        targets = tuple(
            ActionTarget(
                gpu_index=index,
                label="the node" if index is None else _gpu_target_label(node.facts, index),
                checks=tuple(one_line(check) for check in by_target[index]),
            )
            for index in order
        )
        groups.append(ActionGroup(action, action_words(action), is_hardware(action), targets))
    return groups


def what_to_do_lines(node: NodeResult) -> list[str]:
    """``GPU 3 (serial ..., bus ...): drain and RMA — errors.xid, burn.correctness``, in order."""
    return [
        f"{target.label}: {group.words} \u2014 {', '.join(target.checks)}"
        for group in what_to_do(node)
        for target in group.targets
    ]


def verdict_words(verdict: Verdict) -> str:
    """The verdict as words for prose: ``not certified`` rather than ``NOT_CERTIFIED``."""
    return verdict.value.replace("_", " ").lower()


def check_family(check: str) -> str:
    """The family part of a check name: ``memory`` for ``memory.capacity``."""
    family = CheckFamily.of(check)
    if family is not None:
        return family.value
    head, _, _ = check.partition(".")
    return head or check


def gpu_label(finding: Finding) -> str:
    """``gpu3`` for a finding about GPU 3, empty for a node-wide finding."""
    return "" if finding.gpu_index is None else f"gpu{finding.gpu_index}"


def unavailable_text(value: Unavailable) -> str:
    """How a missing fact reads: ``n/a (not supported)``, with the detail when there is one."""
    reason = value.reason.value.replace("_", " ")
    return f"n/a ({reason}: {value.detail})" if value.detail else f"n/a ({reason})"


def _number(value: float) -> str:
    if value.is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


def show(value: object, unit: str = "") -> str:
    """Render one fact for people.

    Args:
        value: a measured value, an :class:`~validator.model.Unavailable`, a tuple
            of values, or ``None`` (a field that does not apply).
        unit: appended after a number, e.g. ``"W"`` or ``"MiB"``.

    Returns:
        The text: ``n/a (...)`` for a missing fact, ``yes``/``no`` for booleans,
        numbers without trailing zeros, tuples joined by commas, ``-`` for nothing.
    """
    if isinstance(value, Unavailable):
        return unavailable_text(value)
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, NvLinkState):
        return f"{value.link}:{'up' if value.active else 'down'}"
    if isinstance(value, (tuple, list)):
        return ", ".join(show(item) for item in value) if value else "none"
    if isinstance(value, float):
        text = _number(value)
    elif isinstance(value, int):
        text = str(value)
    else:
        text = clean(str(value))
    return f"{text} {unit}" if unit else text


def show_pair(first: object, second: object, unit: str = "", sep: str = " / ") -> str:
    """Two related facts in one cell, e.g. enforced and default power limit.

    When both are missing for the same reason, the reason is said once.
    """
    if isinstance(first, Unavailable) and first == second:
        return unavailable_text(first)
    return f"{show(first, unit)}{sep}{show(second, unit)}"


def clean(text: str) -> str:
    """A block of lines shown safely: :func:`validator.safe_text.visible`, newlines kept.

    XML 1.0 cannot carry control characters at all, and a terminal would obey them;
    one-line text (a cell, a message) is :func:`one_line`, validator.safe_text's.
    """
    return visible(text, lines=True)


def plural(count: int, word: str) -> str:
    """``1 GPU`` / ``2 GPUs``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def shorten(text: str, width: int) -> str:
    """``one_line`` text cut to ``width`` characters, ending in an ellipsis when cut."""
    text = one_line(text)
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)].rstrip() + "\u2026"


# ------------------------------------------------------------------ burn-in

NO_TELEMETRY = Unavailable(Reason.NOT_MEASURED, "no telemetry sampled")
_NO_LOAD = Unavailable(Reason.NOT_MEASURED, "no sample was taken under load")


@dataclasses.dataclass(frozen=True)
class BurnStats:
    """What one GPU's burn-in telemetry and counts come to, as every format shows them."""

    peak_power_w: Measured[float]
    power_limit_w: Measured[float]  # enforced limit from the node's facts
    peak_power_pct: Measured[float]  # peak power as a share of the enforced limit
    peak_temperature_c: Measured[float]
    min_sm_clock_mhz: Measured[int]  # the low percentile under load the judge reads
    clock_events: Measured[tuple[str, ...]]  # every reason seen, in order of first sighting
    errors: int  # mismatched plus non-finite elements


def telemetry(samples: Iterable[TelemetrySample], name: str) -> list[tuple[float, float]]:
    """The measured ``(t_s, value)`` points of one telemetry field; missing ones are skipped.

    Args:
        samples: one GPU's samples.
        name: a :class:`~validator.model.TelemetrySample` field, e.g. ``"power_w"``.

    Returns:
        The points in sample order.
    """
    points: list[tuple[float, float]] = []
    for sample in samples:
        value = getattr(sample, name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            points.append((sample.t_s, float(value)))
    return points


def _missing(samples: tuple[TelemetrySample, ...], name: str) -> Unavailable:
    """Why a field has no value: no samples at all, or the reason the samples give."""
    for sample in samples:
        value = getattr(sample, name)
        if isinstance(value, Unavailable):
            return value
    return NO_TELEMETRY


def _peak(samples: tuple[TelemetrySample, ...], name: str) -> Measured[float]:
    values = [value for _, value in telemetry(samples, name)]
    return max(values) if values else _missing(samples, name)


def burn_stats(gpu: GpuBurn, facts: NodeFacts) -> BurnStats:
    """Peak power (and its share of the enforced limit), peak temperature, low SM clock.

    Read from the samples taken under load (validator.trace), as the judge reads
    them: the idle first sample and the idle tail are in the charts, not in these.

    Args:
        gpu: one GPU's burn-in.
        facts: the node's facts, for the GPU's enforced power limit.

    Returns:
        The figures; each is :class:`~validator.model.Unavailable` when no sample
        measured it, with the samples' own reason where they give one.
    """
    kept = _KEPT_STATS.get(gpu)
    if kept is not None:
        return kept
    samples = under_load(gpu)
    absent = _NO_LOAD if gpu.samples else NO_TELEMETRY

    def peak(name: str) -> Measured[float]:
        return _peak(samples, name) if samples else absent

    peak_power = peak("power_w")
    inventory = [g for g in facts.gpus if g.index == gpu.index]
    limit: Measured[float] = (
        inventory[0].power_limit_enforced_w
        if inventory
        else Unavailable(Reason.NOT_MEASURED, f"GPU {gpu.index} not in the inventory")
    )
    pct: Measured[float]
    if isinstance(peak_power, Unavailable):
        pct = peak_power
    elif isinstance(limit, Unavailable):
        pct = limit
    elif limit <= 0:
        pct = Unavailable(Reason.ERROR, f"enforced limit {show(limit, 'W')}")
    else:
        pct = peak_power / limit * 100.0
    clocks = [value for _, value in telemetry(samples, "sm_clock_mhz")]
    low_clock = percentile(clocks, LOW_PERCENTILE)
    reasons: list[str] = []
    measured_reasons = False
    for sample in samples:
        if isinstance(sample.clock_event_reasons, Unavailable):
            continue
        measured_reasons = True
        reasons.extend(r for r in sample.clock_event_reasons if r not in reasons)
    return BurnStats(
        peak_power_w=peak_power,
        power_limit_w=limit,
        peak_power_pct=pct,
        peak_temperature_c=peak("temperature_gpu_c"),
        min_sm_clock_mhz=round(low_clock)
        if low_clock is not None
        else (_missing(samples, "sm_clock_mhz") if samples else absent),
        clock_events=tuple(reasons)
        if measured_reasons
        else (_missing(samples, "clock_event_reasons") if samples else absent),
        errors=gpu.mismatched_elements + gpu.nonfinite_elements,
    )


# The figures of burns a fleet holds without their samples (see hold_without_samples).
_KEPT_STATS: KeptPerObject[GpuBurn, BurnStats] = KeptPerObject()


def hold_without_samples(result: NodeResult) -> NodeResult:
    """A certified ``result`` as a fleet holds it until its reports: without its samples.

    Its GPUs' burn figures (:func:`burn_stats`, which every format shows) are worked out
    first and kept for the held burns; a report that shows the samples themselves
    takes them back (:func:`validator.packed.with_samples`). Any other verdict is kept
    whole: its full section shows them.
    """
    if result.verdict is not Verdict.CERTIFIED or result.facts.burn is None:
        return result
    stats = [burn_stats(gpu, result.facts) for gpu in result.facts.burn.gpus]
    held = without_samples(result)
    if held.facts.burn is not None:
        for gpu, figures in zip(held.facts.burn.gpus, stats):
            _KEPT_STATS.keep(gpu, figures)
    return held


def tflops_text(value: float) -> str:
    """A TFLOPS figure: one decimal for a GPU's hundreds, three significant digits below 10.

    A CPU stand-in (the numpy backend) reaches a few hundredths; ``0.0`` would hide it.
    """
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def burn_failed(gpu: GpuBurn) -> bool:
    """True when a GPU's burn did not complete or produced a wrong result."""
    return (
        gpu.status is not BurnStatus.COMPLETED
        or gpu.mismatched_elements > 0
        or gpu.nonfinite_elements > 0
        or gpu.reference_ok is False
    )


# ------------------------------------------------------------------ fleet


def nodes_failing_first(nodes: Iterable[NodeResult]) -> list[NodeResult]:
    """Nodes NOT_CERTIFIED first, then UNKNOWN, then CERTIFIED; report order within each.

    Args:
        nodes: the report's nodes.

    Returns:
        A new list in reading order.
    """
    return sorted(nodes, key=lambda node: VERDICT_ORDER[node.verdict])


def reading_order(report: Report) -> list[NodeResult]:
    """The nodes as every format shows them: failing first in a fleet report, else as given."""
    if report.fleet is None:
        return list(report.nodes)
    return nodes_failing_first(report.nodes)


def fleet_line(fleet: FleetSummary) -> str:
    """``fleet: 64 hosts, 61 certified, 2 not certified, 1 unknown``, marked when interrupted."""
    line = (
        f"fleet: {plural(fleet.hosts, 'host')}, {fleet.certified} certified, "
        f"{fleet.not_certified} not certified, {fleet.unknown} unknown"
    )
    if fleet.interrupted:
        line += " (interrupted: not every host finished)"
    return line


def threshold_share(stats: SkuFleetStats) -> float:
    """The threshold as a share of the median (the policy's fleet_speed_min)."""
    return stats.threshold_tflops / stats.median_tflops if stats.median_tflops > 0 else 0.0


def sku_fleet_line(stats: SkuFleetStats) -> str:
    """``h100-sxm: median 712.0 TFLOPS over 24 GPUs, MAD 2.0, below 662.2 (93%) fails``."""
    return (
        f"{one_line(stats.sku)}: median {tflops_text(stats.median_tflops)} TFLOPS over "
        f"{plural(stats.gpus, 'GPU')}, MAD {stats.mad_tflops:.1f}, below "
        f"{tflops_text(stats.threshold_tflops)} ({threshold_share(stats):.0%}) fails"
    )


def elapsed_text(seconds: float) -> str:
    """``12.3 s``; ``-`` when not measured (zero: the local single-node path)."""
    if seconds <= 0:
        return "-"
    return f"{seconds:.1f} s" if seconds >= 0.05 else "<0.1 s"


def has_facts(facts: NodeFacts) -> bool:
    """False when nothing at all was collected (an unreachable host): no facts to show."""
    return bool(
        facts.gpus
        or facts.burn is not None
        or facts.nvml_status is not NvmlStatus.NOT_MEASURED
        or facts.collected_at
        or any(
            known(value)
            for value in (
                facts.os_name,
                facts.kernel,
                facts.driver_version,
                facts.kernel_module_version,
                facts.pci_gpu_count,
            )
        )
    )


# ------------------------------------------------------------------ interconnect

INTERCONNECT_PREFIX = f"{CheckFamily.INTERCONNECT.value}."
# The per-GPU copies: (field of GpuCopyBandwidth, its check id, how reports name it).
COPY_FIGURES: tuple[tuple[str, str, str], ...] = (
    ("h2d", "interconnect.h2d", "H2D"),
    ("d2h", "interconnect.d2h", "D2H"),
    ("hbm", "interconnect.hbm", "HBM"),
)
ALL_REDUCE_CHECK = "interconnect.all_reduce"
# A floor the judge wrote as a figure (``>= 431 GB/s busbw (H200 SXM)``: the house
# form of every floor, its origin in parentheses), not in prose: only that is drawn,
# prose is never parsed for a number.
_FLOOR = re.compile(r">=\s*(\d+(?:,\d{3})*(?:\.\d+)?)\s*GB/s(?:\s+busbw)?(?:\s+\([^()]*\))?")


def gbs_text(value: float) -> str:
    """A GB/s figure: ``53.1``, ``2,612`` from a thousand up (HBM), without its unit."""
    # Compared after rounding, so 999.96 reads 1,000 rather than 1000.0.
    return f"{value:,.0f}" if abs(round(value, 1)) >= 1000 else f"{value:.1f}"


def gbs_range(values: Sequence[float]) -> str:
    """``53.1-55.0``: the lowest and highest figure; one figure when they read alike."""
    low, high = gbs_text(min(values)), gbs_text(max(values))
    return low if low == high else f"{low}-{high}"


def largest_point(points: Sequence[AllReducePoint]) -> AllReducePoint | None:
    """The sweep's largest message: where busbw settles and the judge reads the node."""
    return max(points, key=lambda point: point.size_bytes, default=None)


def slowest_pair(peers: Sequence[PeerBandwidth]) -> PeerBandwidth | None:
    """The ordered pair with the lowest measured unidirectional figure (first of equals)."""
    measured = [pair for pair in peers if measured_gb_s(pair.unidirectional) is not None]
    return min(measured, key=lambda pair: measured_gb_s(pair.unidirectional) or 0.0, default=None)


def pair_words(src: int, dst: int) -> str:
    """``GPU 2 -> GPU 5``: how every format names an ordered pair."""
    return f"GPU {src} -> GPU {dst}"


def peer_tooltip(pair: PeerBandwidth, *, bidirectional: bool = False) -> str:
    """``GPU 2 -> GPU 5: 372.1 GB/s (bidirectional 365.0)``, or why there is no figure.

    Args:
        pair: one ordered pair.
        bidirectional: word it for the bidirectional map (its figure first).

    Returns:
        One line; a pair without peer access says so.
    """
    main, other = (pair.bidirectional, pair.unidirectional)
    if not bidirectional:
        main, other = other, main
    figure = measured_gb_s(main)
    head = pair_words(pair.src, pair.dst)
    if figure is None and not isinstance(main.gb_s, Unavailable):
        # A median of 0, below 0 or NaN: recorded, but no measurement (measured_gb_s).
        text = f"{head}: n/a ({main.gb_s} GB/s is no measurement)"
    elif figure is None:
        text = f"{head}: {show(main.gb_s)}"
    else:
        other_figure = measured_gb_s(other)
        kind = " bidirectional" if bidirectional else ""
        other_name = "unidirectional" if bidirectional else "bidirectional"
        text = f"{head}: {gbs_text(figure)} GB/s{kind}"
        if other_figure is not None:
            text += f" ({other_name} {gbs_text(other_figure)})"
    if pair.access is False:
        text += "; no peer access"
    elif isinstance(pair.access, Unavailable):
        text += f"; peer access {show(pair.access)}"
    return one_line(text)


def all_reduce_floor(findings: Iterable[Finding]) -> float | None:
    """The all-reduce floor the judge applied, when its finding states it as a figure.

    Only an ``expected`` of the form ``>= 431 GB/s`` (optionally followed by
    ``busbw`` and the floor's origin in parentheses, as the judge writes it) counts;
    anything else (prose, a share of a median, ``0 wrong``) gives no floor, so no
    line is drawn.

    Args:
        findings: the node's findings.

    Returns:
        The floor in GB/s, or ``None``.
    """
    for finding in findings:
        if finding.check != ALL_REDUCE_CHECK:
            continue
        match = _FLOOR.fullmatch(finding.expected.strip())
        if match:
            return float(match.group(1).replace(",", ""))
    return None


def interconnect_flags(findings: Iterable[Finding]) -> dict[tuple[str, int], Severity]:
    """The worst non-PASS severity of each interconnect check on each GPU.

    Args:
        findings: the node's findings.

    Returns:
        ``{(check, gpu_index): severity}``; node-wide findings are left out.
    """
    flags: dict[tuple[str, int], Severity] = {}
    for finding in findings:
        if (
            finding.severity is Severity.PASS
            or finding.gpu_index is None
            or not finding.check.startswith(INTERCONNECT_PREFIX)
        ):
            continue
        key = (finding.check, finding.gpu_index)
        known_severity = flags.get(key)
        if (
            known_severity is None
            or SEVERITY_ORDER[finding.severity] < SEVERITY_ORDER[known_severity]
        ):
            flags[key] = finding.severity
    return flags


def _copy_part(gpus: Sequence[GpuCopyBandwidth], name: str, words: str, unit: str) -> str:
    figures = [measured_gb_s(getattr(gpu, name)) for gpu in gpus]
    values = [value for value in figures if value is not None]
    if not values:
        return f"{words} n/a"
    missing = len(figures) - len(values)
    text = f"{words} {gbs_range(values)}{unit}"
    return text + (f" ({missing} n/a)" if missing else "")


def _copy_parts(gpus: Measured[tuple[GpuCopyBandwidth, ...]]) -> list[str]:
    if isinstance(gpus, Unavailable):
        return ["copies n/a"]
    parts: list[str] = []
    for name, _, words in COPY_FIGURES:
        # The unit once, after the first figure, as people write a list of them.
        has_unit = any(" GB/s" in part for part in parts)
        parts.append(_copy_part(gpus, name, words, "" if has_unit else " GB/s"))
    return parts


def _peer_part(peers: Measured[tuple[PeerBandwidth, ...]]) -> str | None:
    if isinstance(peers, Unavailable):
        return "P2P n/a"
    if not peers:
        return None  # one GPU: no pairs to speak of
    values = [v for v in (measured_gb_s(p.unidirectional) for p in peers) if v is not None]
    if not values:
        return "P2P n/a"
    notes = []
    slowest = slowest_pair(peers)
    if slowest is not None and len(values) > 1:
        notes.append(f"slowest {pair_words(slowest.src, slowest.dst)}")
    if len(values) < len(peers):
        notes.append(f"{plural(len(peers) - len(values), 'pair')} n/a")
    return f"P2P {gbs_range(values)}" + (f" ({'; '.join(notes)})" if notes else "")


def _all_reduce_part(all_reduce: Measured[AllReduce]) -> str:
    if isinstance(all_reduce, Unavailable) or isinstance(all_reduce.points, Unavailable):
        return "all-reduce n/a"
    point = largest_point(all_reduce.points)
    if point is None:
        return "all-reduce n/a"
    return (
        f"all-reduce {gbs_text(point.busbw_gb_s)} GB/s busbw at {size_words(point.size_bytes)}"
        f" ({plural(all_reduce.ranks, 'GPU')})"
    )


def interconnect_parts(interconnect: Interconnect) -> list[str]:
    """The node's interconnect in a few phrases, the terminal's and the page's summary.

    ``H2D 53.1-55.0 GB/s``, ``D2H 52.8-54.9``, ``HBM 2,612-2,650``,
    ``P2P 370.2-391.0 (slowest GPU 6 -> GPU 2)``,
    ``all-reduce 477.4 GB/s busbw at 4 GiB (8 GPUs)``: each the range over the GPUs
    (or pairs), with how many had no figure; ``n/a`` where none was measured.

    Args:
        interconnect: the node's interconnect facts (without an error).

    Returns:
        The phrases, in that order.
    """
    parts = _copy_parts(interconnect.gpus)
    peer = _peer_part(interconnect.peers)
    if peer is not None:
        parts.append(peer)
    parts.append(_all_reduce_part(interconnect.all_reduce))
    return parts


def is_fleet(report: Report) -> bool:
    """A fleet report that is written compact: a fleet summary and more than one node.

    A single node keeps every detail, even from a one-host inventory; so does a
    report of several nodes without a fleet summary (a test's or a tool's sample).
    """
    return report.fleet is not None and len(report.nodes) > 1
