"""The report as one self-contained HTML page: what operators read and sign off.

Everything is inline (style, a small sorting script); the page loads nothing
from anywhere and reads completely without JavaScript. Its Content Security
Policy allows only the one script whose hash it carries, so even a hostname that
slipped past escaping could not run code. The burn-in charts, the peer-bandwidth
heat maps and the all-reduce sweep are inline SVG drawn here on the server
(:mod:`validator.report.svg`), so they need no script; each has its figures in a
table beside it for readers who cannot see it.

A fleet report stays usable at thousands of nodes: the nodes table carries each
node's SKU and failing checks, and the page's one script adds search and filters
over it (verdict, SKU, failing check) to the sorting. Only nodes that are not
CERTIFIED get their full section; a certified node gets a compact, collapsed one
(a few kilobytes: its versions, GPU count, burn-in and interconnect in one line
each, any warnings) that links to its full result file when one was written. The
page is rendered in chunks (:func:`html_chunks`), one node's view at a time.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Optional, Union

from markupsafe import Markup

from validator.model import (
    AllReduce,
    AllReducePoint,
    BurnResult,
    Finding,
    FleetSummary,
    GpuBurn,
    GpuCopyBandwidth,
    GpuFacts,
    GpuStatus,
    Interconnect,
    Measured,
    NodeResult,
    PeerBandwidth,
    Report,
    Severity,
    Unavailable,
    Verdict,
    XidEvent,
    known,
    measured_gb_s,
    provenance_of,
)
from validator.packed import with_samples
from validator.report import shared, svg
from validator.report.environment import render_template, render_template_chunks
from validator.report.fabric_html import fabric_view
from validator.safe_text import size_words

TEMPLATE = "report.html.j2"
SCRIPT_TEMPLATE = "report_sort.js.j2"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One value as shown: its text, whether it is missing, and a secondary line."""

    text: str
    missing: bool = False
    note: str = ""


def _cell(value: object, unit: str = "") -> Cell:
    return Cell(shared.show(value, unit), missing=isinstance(value, Unavailable))


def _pcie(gen: Measured[int], width: Measured[int]) -> Cell:
    """``Gen5 x16``, or the reason when neither part is known."""
    if isinstance(gen, Unavailable) and isinstance(width, Unavailable):
        return Cell(shared.show_pair(gen, width), missing=True)
    gen_text = f"Gen{gen}" if known(gen) else f"Gen {shared.show(gen)}"
    width_text = f"x{width}" if known(width) else f"width {shared.show(width)}"
    return Cell(f"{gen_text} {width_text}")


@dataclasses.dataclass(frozen=True)
class GpuRow:
    """One row of the GPU table."""

    index: int
    name: Cell
    uuid: Cell
    serial: Cell
    bus_id: Cell
    memory: Cell
    power: Cell
    temperature: Cell
    pcie: Cell
    vbios: Cell
    status: str
    status_detail: str
    identity: str  # for a GPU that did not answer: whatever still names it


def _identity(gpu: GpuFacts) -> str:
    """What still identifies a GPU, for a row that cannot show its facts."""
    parts = [
        f"{label} {shared.show(value)}"
        for label, value in (
            ("UUID", gpu.uuid),
            ("serial", gpu.serial),
            ("bus", gpu.pci_bus_id),
        )
        if known(value)
    ]
    if parts:
        return ", ".join(parts)
    return f"UUID {shared.show(gpu.uuid)}"


def _gpu_row(gpu: GpuFacts) -> GpuRow:
    power = _cell(gpu.power_limit_enforced_w, "W")
    if not isinstance(gpu.power_limit_default_w, Unavailable) or not power.missing:
        power = dataclasses.replace(
            power, note=f"default {shared.show(gpu.power_limit_default_w, 'W')}"
        )
    temperature = _cell(gpu.temperature_gpu_c, "°C")
    if known(gpu.temperature_memory_c):
        temperature = dataclasses.replace(
            temperature, note=f"memory {shared.show(gpu.temperature_memory_c, '°C')}"
        )
    pcie = _pcie(gpu.pcie_gen_current, gpu.pcie_width_current)
    pcie_max = _pcie(gpu.pcie_gen_max, gpu.pcie_width_max)
    if not pcie_max.missing:
        pcie = dataclasses.replace(pcie, note=f"max {pcie_max.text}")
    return GpuRow(
        index=gpu.index,
        name=_cell(gpu.name),
        uuid=_cell(gpu.uuid),
        serial=_cell(gpu.serial),
        bus_id=_cell(gpu.pci_bus_id),
        memory=_cell(gpu.memory_total_mib, "MiB"),
        power=power,
        temperature=temperature,
        pcie=pcie,
        vbios=_cell(gpu.vbios_version),
        status=gpu.status.value,
        status_detail=shared.one_line(gpu.status_detail).rstrip("."),
        identity=_identity(gpu),
    )


# ------------------------------------------------------------------ burn-in

# The node's best GPU less this share is the line the TFLOPS bars are read against.
SLOW_SHARE = 0.10
DIGEST_CHARS = 12


@dataclasses.dataclass(frozen=True)
class BurnRow:
    """One row of the burn-in table."""

    index: int
    status: str
    detail: str
    failed: bool  # did not complete, or computed a wrong result
    tflops: Cell
    iterations: int
    mismatches: Cell
    mismatched: bool
    nonfinite: Cell
    reference: Cell
    digest: Cell
    digest_full: str
    sampled: bool  # False: no telemetry at all, the four telemetry cells become one
    peak_power: Cell
    peak_temperature: Cell
    min_sm_clock: Cell
    clock_events: Cell


@dataclasses.dataclass(frozen=True)
class Chart:
    """One burn-in chart: the SVG, or why there is none."""

    title: str
    svg: Markup | None
    empty: str = ""


@dataclasses.dataclass(frozen=True)
class BurnView:
    """A node's burn-in, ready for the template."""

    simulated: bool
    error: str
    facts: list[tuple[str, Cell]]
    rows: list[BurnRow]
    charts: list[Chart]


def _brief(value: object, unit: str = "") -> Cell:
    """A value for the dense burn-in table: a missing one reads ``n/a``, its reason below."""
    if isinstance(value, Unavailable):
        reason = value.reason.value.replace("_", " ")
        note = f"{reason}: {shared.one_line(value.detail)}" if value.detail else reason
        return Cell("n/a", missing=True, note=note)
    return Cell(shared.show(value, unit))


def _count_cell(count: int, what: str) -> Cell:
    # A non-zero error count is the news; the "missing" styling does not apply.
    return Cell(str(count), note=what if count else "")


def _burn_row(gpu: GpuBurn, stats: shared.BurnStats) -> BurnRow:
    reference = _brief(gpu.reference_ok)
    if isinstance(gpu.reference_ok, bool):
        reference = Cell("ok" if gpu.reference_ok else "FAILED")
    if known(gpu.reference_max_error):
        error = gpu.reference_max_error
        text = f"{error:.2e}" if isinstance(error, float) else shared.show(error)
        reference = dataclasses.replace(reference, note=f"max error {text}")
    digest = _brief(gpu.digest)
    digest_full = shared.show(gpu.digest)
    if not digest.missing and len(digest.text) > DIGEST_CHARS:
        digest = Cell(digest.text[:DIGEST_CHARS] + "\u2026")
    power = _brief(stats.peak_power_w, "W")
    if not power.missing:
        if isinstance(stats.peak_power_pct, Unavailable):
            note = f"limit {shared.show(stats.power_limit_w)}"
        else:
            note = f"{stats.peak_power_pct:.0f}% of {shared.show(stats.power_limit_w, 'W')}"
        power = dataclasses.replace(power, note=note)
    tflops = _brief(gpu.tflops)
    if isinstance(gpu.tflops, float):
        tflops = Cell(shared.tflops_text(gpu.tflops))
    return BurnRow(
        index=gpu.index,
        status=gpu.status.value,
        detail=shared.one_line(gpu.detail),
        failed=shared.burn_failed(gpu),
        tflops=tflops,
        iterations=gpu.iterations,
        mismatches=Cell(f"{gpu.mismatched_elements} / {gpu.mismatched_iterations}"),
        mismatched=gpu.mismatched_elements > 0,
        nonfinite=_count_cell(gpu.nonfinite_elements, "NaN or Inf"),
        reference=reference,
        digest=digest,
        digest_full=digest_full,
        sampled=bool(gpu.samples),
        peak_power=power,
        peak_temperature=_brief(stats.peak_temperature_c, "°C"),
        min_sm_clock=_brief(stats.min_sm_clock_mhz, "MHz"),
        clock_events=_brief(stats.clock_events),
    )


def _burn_facts(burn: BurnResult) -> list[tuple[str, Cell]]:
    compare = "bitwise" if burn.deterministic else f"within {shared.show(burn.tolerance)} relative"
    if isinstance(burn.xid_events_during, Unavailable):
        xid = _cell(burn.xid_events_during)
    else:
        xid = Cell(shared.plural(len(burn.xid_events_during), "Xid event"))
    return [
        ("Backend", Cell(shared.one_line(burn.backend))),
        ("Data type", Cell(shared.one_line(burn.dtype))),
        ("Matrix size", Cell(f"{burn.matrix_size} \u00d7 {burn.matrix_size}")),
        ("Duration", Cell(f"{shared.show(burn.duration_s, 's')} asked")),
        ("Elapsed", Cell(shared.show(round(burn.elapsed_s, 1), "s"))),
        ("Memory", Cell(f"{burn.memory_fraction * 100:.0f}% of free memory")),
        ("Sampler", Cell(shared.one_line(burn.sampler))),
        ("Results compared", Cell(compare)),
        ("Started at", _cell(burn.started_at)),
        ("During the burn", xid),
    ]


def _tflops_chart(burn: BurnResult) -> Chart:
    title = "Matrix-multiply throughput per GPU"
    if not burn.gpus:
        return Chart(title, None, "no GPU was burned")
    bars = [
        svg.Bar(
            label=f"GPU {gpu.index}",
            value=gpu.tflops if isinstance(gpu.tflops, float) else None,
            tooltip=f"GPU {gpu.index}: {shared.show(gpu.tflops, 'TFLOPS')} ({gpu.status.value})",
        )
        for gpu in burn.gpus
    ]
    measured = [bar.value for bar in bars if bar.value is not None]
    reference = None
    if measured:
        line = max(measured) * (1 - SLOW_SHARE)
        reference = svg.Reference(line, f"best \u2212 {SLOW_SHARE:.0%}: {shared.tflops_text(line)}")
    chart = svg.bar_chart(
        bars,
        title=f"{title} ({burn.dtype})",
        y_label="TFLOPS",
        reference=reference,
        value_format=shared.tflops_text,
    )
    return Chart(title, chart)


# (field, chart title, axis label) for the telemetry line charts.
_TELEMETRY_CHARTS: tuple[tuple[str, str, str], ...] = (
    ("power_w", "Power draw", "Power (W)"),
    ("temperature_gpu_c", "GPU temperature", "Temperature (\u00b0C)"),
    ("sm_clock_mhz", "SM clock", "SM clock (MHz)"),
)


def _telemetry_chart(
    burn: BurnResult, stats: list[shared.BurnStats], name: str, title: str, y_label: str
) -> Chart:
    series = [
        svg.Series(
            label=f"GPU {gpu.index}",
            points=tuple(shared.telemetry(gpu.samples, name)),
            color=svg.color(position),
        )
        for position, gpu in enumerate(burn.gpus)
    ]
    if not any(item.points for item in series):
        if not any(gpu.samples for gpu in burn.gpus):
            return Chart(title, None, f"no telemetry sampled (sampler: {burn.sampler})")
        return Chart(title, None, "no GPU reported this figure during the burn")
    references = []
    if name == "power_w":
        limits = sorted({s.power_limit_w for s in stats if isinstance(s.power_limit_w, float)})
        references = [
            svg.Reference(limit, f"enforced limit {shared.show(limit, 'W')}") for limit in limits
        ]
    chart = svg.line_chart(
        series,
        title=title,
        x_label="Time since burn start (s)",
        y_label=y_label,
        references=references,
        x_range=(0.0, burn.elapsed_s),
    )
    return Chart(title, chart)


def burn_view(node: NodeResult) -> BurnView | None:
    """A node's burn-in as the template shows it: facts, a row per GPU, four charts.

    Args:
        node: one judged node.

    Returns:
        The view, or ``None`` when no burn-in was asked for.
    """
    burn = node.facts.burn
    if burn is None:
        return None
    stats = [shared.burn_stats(gpu, node.facts) for gpu in burn.gpus]
    charts = [_tflops_chart(burn)]
    charts.extend(
        _telemetry_chart(burn, stats, name, title, label)
        for name, title, label in _TELEMETRY_CHARTS
    )
    if burn.error is not None and not burn.gpus:
        # The burn never started: there is nothing to chart, the error says why.
        charts = []
    return BurnView(
        simulated=burn.simulated,
        error=shared.one_line(burn.error or ""),
        facts=_burn_facts(burn),
        rows=[_burn_row(gpu, s) for gpu, s in zip(burn.gpus, stats)],
        charts=charts,
    )


# ------------------------------------------------------------------ interconnect


@dataclasses.dataclass(frozen=True)
class Flagged:
    """A table cell and the worst non-PASS severity of its check on its GPU ("" if none)."""

    cell: Cell
    severity: str


@dataclasses.dataclass(frozen=True)
class CopyRow:
    """One GPU's copies: H2D, D2H and HBM medians, the NUMA node of its host buffer."""

    index: int
    flagged: str  # the worst non-PASS interconnect severity on this GPU, "" if none
    figures: list[Flagged]
    numa: Cell


@dataclasses.dataclass(frozen=True)
class MatrixRow:
    """One source GPU of the peer matrix as a table: its figure to each destination."""

    label: str
    cells: list[tuple[str, str, str]]  # (text, tooltip, class) per destination


@dataclasses.dataclass(frozen=True)
class SweepRow:
    """One all-reduce message size, as nccl-tests prints its row."""

    size: str
    time_us: str
    algbw: str
    busbw: str
    busbw_in_place: str
    wrong: str


@dataclasses.dataclass(frozen=True)
class InterconnectView:
    """A node's interconnect, ready for the template: facts, tables, charts."""

    simulated: bool
    error: str
    summary: str
    facts: list[tuple[str, Cell]]
    copy_note: str  # why there is no per-GPU table, when there is none
    copies: list[CopyRow]
    columns: list[str]  # the matrix table's destination labels
    matrix: list[MatrixRow]
    sweep: list[SweepRow]
    charts: list[Chart]


_PEER_TITLE = "Peer bandwidth"
_BIDI_TITLE = "Peer bandwidth, both directions at once"
_SWEEP_TITLE = "All-reduce bus bandwidth"
_WORST_FIRST = sorted(Severity, key=lambda severity: shared.SEVERITY_ORDER[severity])


def _gbs_cell(bandwidth: Measured[float]) -> Cell:
    if isinstance(bandwidth, (int, float)) and not isinstance(bandwidth, bool):
        return Cell(shared.gbs_text(float(bandwidth)))
    return _brief(bandwidth)


def _copy_row(gpu: GpuCopyBandwidth, flags: dict[tuple[str, int], Severity]) -> CopyRow:
    figures = []
    for name, check, _ in shared.COPY_FIGURES:
        bandwidth = getattr(gpu, name)
        severity = flags.get((check, gpu.index))
        cell = _gbs_cell(bandwidth.gb_s)
        if severity is not None:
            # Colour alone is no mark for everyone: the severity is written too.
            note = f"{severity.value} {check}"
            cell = dataclasses.replace(cell, note=f"{cell.note}; {note}" if cell.note else note)
        figures.append(Flagged(cell, "" if severity is None else severity.value))
    on_gpu = {flags[key] for key in flags if key[1] == gpu.index}
    worst = next((severity.value for severity in _WORST_FIRST if severity in on_gpu), "")
    return CopyRow(index=gpu.index, flagged=worst, figures=figures, numa=_brief(gpu.numa_node))


def _gpu_order(interconnect: Interconnect) -> list[int]:
    """The NVML indices the matrix spans: every GPU copied to and every pair's ends."""
    indices: set[int] = set()
    if not isinstance(interconnect.gpus, Unavailable):
        indices.update(gpu.index for gpu in interconnect.gpus)
    if not isinstance(interconnect.peers, Unavailable):
        for pair in interconnect.peers:
            indices.update((pair.src, pair.dst))
    return sorted(indices)


def _heat_cells(
    peers: tuple[PeerBandwidth, ...], order: list[int], *, bidirectional: bool
) -> dict[tuple[int, int], svg.HeatCell]:
    position = {index: at for at, index in enumerate(order)}
    cells = {}
    for pair in peers:
        figure = measured_gb_s(pair.bidirectional if bidirectional else pair.unidirectional)
        tooltip = shared.peer_tooltip(pair, bidirectional=bidirectional)
        cells[(position[pair.src], position[pair.dst])] = svg.HeatCell(figure, tooltip)
    for src in order:
        for dst in order:
            key = (position[src], position[dst])
            if src != dst and key not in cells:
                cells[key] = svg.HeatCell(None, f"{shared.pair_words(src, dst)}: not measured")
    return cells


def _peer_charts(interconnect: Interconnect, order: list[int]) -> list[Chart]:
    peers = interconnect.peers
    if isinstance(peers, Unavailable):
        return [Chart(_PEER_TITLE, None, shared.unavailable_text(peers))]
    if not peers:
        return [Chart(_PEER_TITLE, None, "a single GPU has no peers")]
    labels = [f"GPU {index}" for index in order]
    charts = []
    for bidirectional, title in ((False, _PEER_TITLE), (True, _BIDI_TITLE)):
        cells = _heat_cells(peers, order, bidirectional=bidirectional)
        if bidirectional and all(cell.value is None for cell in cells.values()):
            continue  # no bidirectional figure at all: one map says everything
        chart = svg.heat_map(
            labels,
            cells,
            title=f"{title} (GB/s){_simulated_words(interconnect)}",
            row_label="from GPU (source)",
            column_label="to GPU (destination)",
            unit="GB/s",
            value_format=shared.gbs_text,
        )
        charts.append(Chart(title, chart))
    return charts


def _simulated_words(interconnect: Interconnect) -> str:
    return ", SIMULATED" if interconnect.simulated else ""


def _matrix(interconnect: Interconnect, order: list[int]) -> list[MatrixRow]:
    """The peer matrix in words: the heat map's text alternative."""
    peers = interconnect.peers
    if isinstance(peers, Unavailable) or not peers:
        return []
    by_pair = {(pair.src, pair.dst): pair for pair in peers}
    rows = []
    for src in order:
        cells = []
        for dst in order:
            pair = by_pair.get((src, dst))
            if src == dst:
                cells.append(("\u2014", "the same GPU", "na"))
            elif pair is None:
                cells.append(("n/a", f"{shared.pair_words(src, dst)}: not measured", "na"))
            else:
                figure = measured_gb_s(pair.unidirectional)
                text = "n/a" if figure is None else shared.gbs_text(figure)
                cells.append((text, shared.peer_tooltip(pair), "" if figure is not None else "na"))
        rows.append(MatrixRow(f"GPU {src}", cells))
    return rows


def _optional(value: float | int | None, text: str = "{:.2f}") -> str:
    return "-" if value is None else text.format(value)


def _sweep_row(point: AllReducePoint) -> SweepRow:
    return SweepRow(
        size=size_words(point.size_bytes),
        time_us=f"{point.time_us:.1f}",
        algbw=f"{point.algbw_gb_s:.2f}",
        busbw=f"{point.busbw_gb_s:.2f}",
        busbw_in_place=_optional(point.busbw_in_place_gb_s),
        wrong=_optional(point.wrong, "{}"),
    )


def _sweep_points(all_reduce: Measured[AllReduce]) -> Measured[tuple[AllReducePoint, ...]]:
    if isinstance(all_reduce, Unavailable):
        return all_reduce
    return all_reduce.points


def _sweep_chart(interconnect: Interconnect, findings: tuple[Finding, ...]) -> Chart:
    """busbw against message size, sizes on a log2 axis, the judge's floor dashed."""
    points = _sweep_points(interconnect.all_reduce)
    if isinstance(points, Unavailable):
        return Chart(_SWEEP_TITLE, None, shared.unavailable_text(points))
    # A zero-byte row (nccl-tests prints them) has no place on a log axis.
    sized = sorted((p for p in points if p.size_bytes > 0), key=lambda p: p.size_bytes)
    if not sized:
        return Chart(_SWEEP_TITLE, None, "no message size above 0 bytes was measured")
    words = [f"{size_words(p.size_bytes)}: {p.busbw_gb_s:.1f} GB/s busbw" for p in sized]
    in_place = [p for p in sized if p.busbw_in_place_gb_s is not None]
    in_place_words = [
        f"{size_words(p.size_bytes)}: {p.busbw_in_place_gb_s or 0.0:.1f} GB/s busbw in place"
        for p in in_place
    ]
    series = [
        svg.Series(
            "busbw, out of place",
            tuple((math.log2(p.size_bytes), p.busbw_gb_s) for p in sized),
            svg.color(0),
            point_labels=tuple(words),
        )
    ]
    if in_place:
        series.append(
            svg.Series(
                "busbw, in place",
                tuple((math.log2(p.size_bytes), p.busbw_in_place_gb_s or 0.0) for p in in_place),
                svg.color(1),
                point_labels=tuple(in_place_words),
            )
        )
    floor = shared.all_reduce_floor(findings)
    references = (
        [] if floor is None else [svg.Reference(floor, f"floor {shared.gbs_text(floor)} GB/s")]
    )
    low, high = math.log2(sized[0].size_bytes), math.log2(sized[-1].size_bytes)
    chart = svg.line_chart(
        series,
        title=f"{_SWEEP_TITLE}{_simulated_words(interconnect)}",
        x_label="Message size (log2 scale)",
        y_label="busbw (GB/s)",
        references=references,
        x_ticks=svg.power_of_two_ticks(low, high, lambda e: size_words(2**e)),
    )
    return Chart(_SWEEP_TITLE, chart)


def _idle_text(interconnect: Interconnect) -> Cell:
    if interconnect.idle_wait_s is None:
        return Cell("-", missing=True)
    text = f"waited {interconnect.idle_wait_s:.1f} s"
    if interconnect.busy_gpus:
        busy = ", ".join(f"GPU {index}" for index in interconnect.busy_gpus)
        return Cell(text, note=f"still busy: {busy} (figures may be low)")
    return Cell(text)


def _copy_size(interconnect: Interconnect) -> Cell:
    gpus = interconnect.gpus
    sizes = [] if isinstance(gpus, Unavailable) else [g.h2d.size_bytes for g in gpus]
    known_sizes = sorted({size for size in sizes if size})
    if not known_sizes:
        return Cell("-", missing=True)
    return Cell(", ".join(size_words(size) for size in known_sizes))


def _interconnect_facts(interconnect: Interconnect) -> list[tuple[str, Cell]]:
    elapsed = interconnect.elapsed_s
    facts = [
        ("Source", Cell(shared.one_line(interconnect.source))),
        ("Started at", _cell(interconnect.started_at)),
        ("Elapsed", Cell("-", missing=True) if elapsed is None else Cell(f"{elapsed:.1f} s")),
        ("Idle gate", _idle_text(interconnect)),
        ("Copy size", _copy_size(interconnect)),
    ]
    all_reduce = interconnect.all_reduce
    if isinstance(all_reduce, Unavailable):
        facts.append(("All-reduce", _cell(all_reduce)))
    else:
        how = f"{shared.plural(all_reduce.ranks, 'GPU')}, {shared.one_line(all_reduce.dtype)}"
        facts.append(("All-reduce", Cell(how, note=shared.one_line(all_reduce.source))))
        facts.append(("NCCL", _cell(all_reduce.nccl_version)))
    return facts


def interconnect_view(node: NodeResult) -> InterconnectView | None:
    """A node's interconnect as the template shows it, or ``None`` when none was measured.

    A per-GPU table (H2D, D2H, HBM medians, NUMA node; a cell whose check did not
    pass is marked with its severity), the peer matrix as a heat map (and the
    bidirectional one when measured) with the matrix as a table, and busbw against
    message size. An interconnect that could not run at all shows its error only.

    Args:
        node: one judged node.

    Returns:
        The view, or ``None`` when the facts hold no interconnect.
    """
    interconnect = node.facts.interconnect
    if interconnect is None:
        return None
    facts = _interconnect_facts(interconnect)
    error = shared.one_line(interconnect.error or "")
    if error:
        # Nothing was measured: the error says why, no empty tables or charts around it.
        return InterconnectView(
            simulated=interconnect.simulated,
            error=error,
            summary="",
            facts=facts,
            copy_note="",
            copies=[],
            columns=[],
            matrix=[],
            sweep=[],
            charts=[],
        )
    flags = shared.interconnect_flags(node.findings)
    gpus = interconnect.gpus
    order = _gpu_order(interconnect)
    points = _sweep_points(interconnect.all_reduce)
    return InterconnectView(
        simulated=interconnect.simulated,
        error="",
        summary=", ".join(shared.interconnect_parts(interconnect)),
        facts=facts,
        copy_note=shared.unavailable_text(gpus) if isinstance(gpus, Unavailable) else "",
        copies=[] if isinstance(gpus, Unavailable) else [_copy_row(g, flags) for g in gpus],
        columns=[f"GPU {index}" for index in order],
        matrix=_matrix(interconnect, order),
        sweep=[] if isinstance(points, Unavailable) else [_sweep_row(p) for p in points],
        charts=[*_peer_charts(interconnect, order), _sweep_chart(interconnect, node.findings)],
    )


@dataclasses.dataclass(frozen=True)
class NodeView:
    """One node, ready for the template."""

    anchor: str
    node: NodeResult
    verdict_words: str
    verdict_rank: int  # NOT_CERTIFIED 0, UNKNOWN 1, CERTIFIED 2: what the table sorts on
    findings: list[Finding]
    todo: list[shared.ActionGroup]  # the blocking findings by action, most serious first
    counts: shared.CheckCounts
    reached: bool  # False: no facts at all came back (unreachable host)
    facts: list[tuple[str, Cell]]
    gpus: list[GpuRow]
    lost_gpus: int
    xid_events: list[XidEvent]
    xid_note: str
    burn: BurnView | None
    interconnect: InterconnectView | None
    elapsed: str
    stderr: str  # the agent's stderr, control characters made visible
    stderr_lines: int
    # Its full section's page, relative to this one: this section then holds what did
    # not pass and what to do; the GPU table, the burn-in and the interconnect are there.
    detail_file: str | None = None
    compact: bool = False  # a full section; see CompactView


@dataclasses.dataclass(frozen=True)
class CompactView:
    """A certified node in a fleet report: collapsed, a line per part, its file linked."""

    anchor: str
    node: NodeResult
    counts: shared.CheckCounts
    findings: list[Finding]  # the ones that did not pass (warnings): shown in full
    facts: list[tuple[str, Cell]]
    elapsed: str
    result_file: str | None  # the node's full result, relative to the page
    compact: bool = True


@dataclasses.dataclass(frozen=True)
class RowView:
    """One row of a fleet's nodes table: what the search and filters work on."""

    anchor: str
    node: NodeResult
    verdict_rank: int
    sku: str  # "" when no SKU matched
    gpus: int
    counts: shared.CheckCounts
    checks: list[str]  # the checks that did not pass, each once, in report order
    elapsed: str
    result_file: str | None


@dataclasses.dataclass(frozen=True)
class SkuRow:
    """One row of the fleet speed table."""

    sku: str
    gpus: int
    median: str
    mad: str
    threshold: str
    share: str  # the threshold as a share of the median


@dataclasses.dataclass(frozen=True)
class FleetView:
    """The fleet header: counts by verdict, the interrupted flag, speed per SKU."""

    summary: FleetSummary
    line: str
    skus: list[SkuRow]


def fleet_view(fleet: FleetSummary) -> FleetView:
    """The report's fleet summary as the template shows it."""
    rows = [
        SkuRow(
            sku=shared.one_line(stats.sku),
            gpus=stats.gpus,
            median=shared.tflops_text(stats.median_tflops),
            mad=f"{stats.mad_tflops:.1f}",
            threshold=shared.tflops_text(stats.threshold_tflops),
            share=f"{shared.threshold_share(stats):.0%}",
        )
        for stats in fleet.skus
    ]
    return FleetView(summary=fleet, line=shared.fleet_line(fleet), skus=rows)


def _facts(node: NodeResult) -> list[tuple[str, Cell]]:
    facts = node.facts
    tools = facts.tools
    source = facts.source + (f" ({facts.source_detail})" if facts.source_detail else "")
    nvml = facts.nvml_status.value + (f": {facts.nvml_detail}" if facts.nvml_detail else "")
    return [
        ("SKU", Cell(node.sku or "no SKU matched", missing=node.sku is None)),
        ("Driver", _cell(facts.driver_version)),
        ("CUDA (driver)", _cell(facts.cuda_driver_version)),
        ("nvcc", _cell(tools.nvcc_version)),
        ("cuDNN", _cell(tools.cudnn_version)),
        ("Kernel module", _cell(facts.kernel_module_version)),
        ("Kernel", _cell(facts.kernel)),
        ("OS", _cell(facts.os_name)),
        ("NVML", Cell(shared.one_line(nvml))),
        ("GPUs on PCI bus", _cell(facts.pci_gpu_count)),
        ("Collected at", _cell(facts.collected_at)),
        ("Source", Cell(shared.one_line(source))),
        ("Transport", Cell(shared.one_line(node.transport))),
        ("Elapsed", Cell(shared.elapsed_text(node.elapsed_s), missing=node.elapsed_s <= 0)),
        ("Policy digest", _cell(node.policy_digest)),
    ]


def _xid(node: NodeResult) -> tuple[list[XidEvent], str]:
    log = node.facts.kernel_log
    window = "whole log" if log.window_hours is None else f"last {shared.show(log.window_hours)} h"
    if isinstance(log.events, Unavailable):
        return [], f"Kernel log ({log.source}): {shared.unavailable_text(log.events)}."
    count = shared.plural(len(log.events), "Xid event")
    return list(log.events), f"Kernel log ({log.source}, {window}): {count}."


def _node_view(position: int, node: NodeResult, detail_file: str | None = None) -> NodeView:
    """A node's full section, or with ``detail_file`` its brief one (see NodeView)."""
    brief = detail_file is not None
    if not brief:  # a full section charts the samples: a held node's come back for it
        node = with_samples(node)
    events, note = ([], "") if brief else _xid(node)
    stderr = shared.clean(node.agent_stderr).rstrip()
    findings = shared.sorted_findings(node.findings)
    return NodeView(
        anchor=f"node-{position}",
        node=node,
        verdict_words=shared.verdict_words(node.verdict),
        verdict_rank=shared.VERDICT_ORDER[node.verdict],
        findings=[f for f in findings if f.severity is not Severity.PASS] if brief else findings,
        todo=shared.what_to_do(node),
        counts=shared.count_checks(node.findings),
        reached=shared.has_facts(node.facts),
        facts=_facts(node),
        gpus=[] if brief else [_gpu_row(gpu) for gpu in node.facts.gpus],
        lost_gpus=sum(1 for gpu in node.facts.gpus if gpu.status is not GpuStatus.OK),
        xid_events=events,
        xid_note=note,
        burn=None if brief or node.facts.burn is None else burn_view(node),
        interconnect=None if brief else interconnect_view(node),
        elapsed=shared.elapsed_text(node.elapsed_s),
        stderr=stderr,
        stderr_lines=len(stderr.splitlines()),
        detail_file=detail_file,
    )


def _gpu_words(node: NodeResult) -> Cell:
    gpus = node.facts.gpus
    if not gpus:
        return Cell("none reported", missing=True)
    names = sorted({shared.show(gpu.name) for gpu in gpus})
    lost = sum(1 for gpu in gpus if gpu.status is not GpuStatus.OK)
    note = f"{lost} did not answer" if lost else ""
    return Cell(f"{len(gpus)} \u00d7 {', '.join(names)}", note=note)


def _burn_words(node: NodeResult) -> Cell:
    burn = node.facts.burn
    if burn is None:
        return Cell("not run", missing=True)
    if burn.error is not None and not burn.gpus:
        return Cell(f"could not run: {shared.one_line(burn.error)}", missing=True)
    figures = [gpu.tflops for gpu in burn.gpus if isinstance(gpu.tflops, float)]
    speed = (
        f"{shared.tflops_text(min(figures))}-{shared.tflops_text(max(figures))} TFLOPS"
        if figures
        else "TFLOPS n/a"
    )
    simulated = ", SIMULATED" if burn.simulated else ""
    return Cell(
        f"{speed} {shared.one_line(burn.dtype)}, {shared.plural(len(burn.gpus), 'GPU')}, "
        f"{shared.show(round(burn.elapsed_s, 1), 's')}{simulated}"
    )


def _interconnect_words(node: NodeResult) -> Cell:
    interconnect = node.facts.interconnect
    if interconnect is None:
        return Cell("not measured", missing=True)
    if interconnect.error:
        return Cell(f"could not run: {shared.one_line(interconnect.error)}", missing=True)
    simulated = " (SIMULATED)" if interconnect.simulated else ""
    return Cell(", ".join(shared.interconnect_parts(interconnect)) + simulated)


def _compact_facts(node: NodeResult) -> list[tuple[str, Cell]]:
    facts = node.facts
    return [
        ("SKU", Cell(node.sku or "no SKU matched", missing=node.sku is None)),
        ("GPUs", _gpu_words(node)),
        ("Driver / CUDA", Cell(shared.show_pair(facts.driver_version, facts.cuda_driver_version))),
        (
            "nvcc / cuDNN",
            Cell(shared.show_pair(facts.tools.nvcc_version, facts.tools.cudnn_version)),
        ),
        ("Kernel", _cell(facts.kernel)),
        ("OS", _cell(facts.os_name)),
        ("Burn-in", _burn_words(node)),
        ("Interconnect", _interconnect_words(node)),
        ("Collected at", _cell(facts.collected_at)),
        ("Policy digest", _cell(node.policy_digest)),
    ]


def _compact_view(position: int, node: NodeResult, result_file: str | None) -> CompactView:
    return CompactView(
        anchor=f"node-{position}",
        node=node,
        counts=shared.count_checks(node.findings),
        findings=[
            f for f in shared.sorted_findings(node.findings) if f.severity is not Severity.PASS
        ],
        facts=_compact_facts(node),
        elapsed=shared.elapsed_text(node.elapsed_s),
        result_file=result_file,
    )


def _row_view(position: int, node: NodeResult, result_file: str | None) -> RowView:
    checks = list(dict.fromkeys(f.check for f in node.findings if f.severity is not Severity.PASS))
    return RowView(
        anchor=f"node-{position}",
        node=node,
        verdict_rank=shared.VERDICT_ORDER[node.verdict],
        sku=node.sku or "",
        gpus=len(node.facts.gpus),
        counts=shared.count_checks(node.findings),
        checks=checks,
        elapsed=shared.elapsed_text(node.elapsed_s),
        result_file=result_file,
    )


def _script() -> tuple[Markup, str]:
    """The sorting script and its CSP hash (over the exact text in the page)."""
    text = render_template(SCRIPT_TEMPLATE, {})
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    # Our own static file, rendered without escaping: safe to embed as is.
    return Markup(text), f"'sha256-{digest}'"  # noqa: S704


# Each host's full-result file relative to the page: a mapping or a function of the host.
ResultFiles = Union[Mapping[str, str], Callable[[str], Optional[str]]]


def _lookup(result_files: ResultFiles | None) -> Callable[[str], str | None]:
    if result_files is None:
        return lambda _host: None
    if callable(result_files):
        return result_files
    return result_files.get


def _sections(
    ordered: list[NodeResult],
    compact: bool,
    lookup: Callable[[str], str | None],
    detail: Callable[[str], str | None],
) -> Iterator[NodeView | CompactView]:
    # A generator: one node's view (its charts the bulk of it) exists at a time.
    for position, node in enumerate(ordered, start=1):
        if compact and node.verdict is Verdict.CERTIFIED:
            yield _compact_view(position, node, lookup(node.hostname))
        else:
            yield _node_view(position, node, detail(node.hostname) if compact else None)


def html_chunks(
    report: Report,
    result_files: ResultFiles | None = None,
    detail_files: ResultFiles | None = None,
) -> Iterator[str]:
    """The report's HTML page in pieces, as the template produces them.

    A fleet report (``report.fleet`` set) opens with the fleet's counts, an
    interrupted banner when the run was stopped, the speed statistics per SKU and
    the nodes table (search, filters, sort; several nodes without a fleet get the
    table too); its nodes come failing first, and with more than one node the
    certified ones get a compact section only (``shared.is_fleet``). A single
    node gets its full section whatever its verdict.

    Args:
        report: the acceptance report.
        result_files: each host's full-result file relative to the page, by
            hostname (a mapping or a function); linked from compact sections.
        detail_files: in a fleet report, each failing host's page of its full
            section (as a single-node report shows it), relative to this one; a
            host that has one gets a brief section here instead, linking to it:
            what did not pass and what to do, without the GPU table, the burn-in
            and the interconnect (the bulk of a failing node's section).

    Yields:
        Pieces of the document, in order.

    Raises:
        ReportError: a template is missing or broken.
    """
    overall = shared.overall_verdict(report)
    script, script_hash = _script()
    lookup = _lookup(result_files)
    ordered = shared.reading_order(report)
    table = report.fleet is not None or len(ordered) > 1
    rows = [_row_view(i, node, lookup(node.hostname)) for i, node in enumerate(ordered, start=1)]
    context = {
        "report": report,
        "overall": overall.value,
        "overall_words": shared.verdict_words(overall),
        "summary": shared.overall_summary(report),
        "node_count": len(ordered),
        "rows": rows if table else [],
        "sections": _sections(ordered, shared.is_fleet(report), lookup, _lookup(detail_files)),
        "skus": sorted({row.sku for row in rows if row.sku}),
        "checks": sorted({check for row in rows for check in row.checks}),
        "fleet": None if report.fleet is None else fleet_view(report.fleet),
        "cross_node": fabric_view(report.cross_node),
        "gpu_total": sum(len(node.facts.gpus) for node in report.nodes),
        "totals": shared.count_nodes(report.nodes),
        "certified": sum(1 for node in report.nodes if node.verdict is Verdict.CERTIFIED),
        # A verdict on a scenario is no real host's: said in the banner, before anything else.
        "simulated": sum(1 for node in report.nodes if provenance_of(node.facts) == "simulate"),
        "script": script,
        "script_hash": script_hash,
        "action_words": shared.ACTION_WORDS,
    }
    return render_template_chunks(TEMPLATE, context)


def render_html(
    report: Report,
    result_files: ResultFiles | None = None,
    detail_files: ResultFiles | None = None,
) -> str:
    """Render the report as one HTML page (see :func:`html_chunks`).

    Args:
        report: the acceptance report.
        result_files: each host's full-result file relative to the page, by hostname.
        detail_files: each failing host's page of its full section, by hostname.

    Returns:
        The HTML document.

    Raises:
        ReportError: a template is missing or broken.
    """
    return "".join(html_chunks(report, result_files, detail_files))
