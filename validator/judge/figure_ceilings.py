"""What the hardware can do: every measured figure held to its physical ceiling.

The node's plausibility pass (:mod:`validator.node.physical_ranges`) rejects readings no GPU
can give, whatever its model; it cannot know the model's ceilings, and a forged agent or
Slurm spool result never went through it. Here, on the controller, each figure is held to
what its SKU (from the catalog) physically allows:

* burn TFLOPS: the SKU's dense vendor peak for the burn's dtype x :data:`TFLOPS_MARGIN`
  (1.05: boost clocks above the datasheet's); with no SKU, or no peak for that dtype on
  it, the fastest catalog SKU's. A figure that is not finite and above zero is no speed.
* host copies (H2D, D2H): the PCIe link the SKU trains to (signalling rate x lanes x line
  code, one direction), or NVLink-C2C on superchips. No margin: the ceiling already
  ignores packet overhead, which keeps real copies ~15% below it (Gen5 x16: 63 GB/s,
  ~55 measured).
* HBM copy: the datasheet memory bandwidth x :data:`HBM_MARGIN` (datasheet figures are
  rounded).
* peer copies: the GPU's NVLinks (count x per-link signalling rate, one direction) where
  the board fixes them; else the GPU's own reported NVLinks, or its host link.
* all-reduce busbw: twice one GPU's peer ceiling. NVLink SHARP reduces in the switch, so
  busbw (which counts 2(n-1)/n of the data) exceeds one direction's links: 486 GB/s on
  8x H200 against 450 one way (captures/nccl-tests).
* power: the board's maximum (the larger of the SKU's TDP and any default limit it ships
  with) x :data:`POWER_MARGIN`, for sensor overshoot. One-second averages stay within 5%
  of the limit in the recorded traces (702.81 W of 700 on an H800 SXM, 367.71 of 350 on an
  H100 PCIe), but instantaneous readings, which the XML and CSV readers fall back to,
  reach 793.82 W and 455.86 W there: 1.30x. 1.5x keeps those and still refuses a draw in
  the wrong unit or twice the board.

:func:`screen` replaces each figure above its ceiling with "not measured: implausible
value ..." (the node pass's words, so every check sees "not measured") and lists what it
replaced, so the judge can name each one in a required finding. A figure is never
clipped to its ceiling: it is not a measurement at all.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass

from validator.judge.catalog import PRECISIONS, Catalog, Sku
from validator.model import (
    IMPLAUSIBLE,
    AllReduce,
    Bandwidth,
    BurnResult,
    GpuBurn,
    GpuCopyBandwidth,
    GpuFacts,
    Interconnect,
    NodeFacts,
    PeerBandwidth,
    Reason,
    TelemetrySample,
    Unavailable,
)

TFLOPS_MARGIN = 1.05
HBM_MARGIN = 1.05
POWER_MARGIN = 1.5
# PCIe per lane: GT/s and line code, by generation (PCI-SIG base specifications). Gen6's
# FLIT mode is counted as no overhead, so its ceiling stays a ceiling.
_PCIE_LANE = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130),
              5: (32.0, 128 / 130), 6: (64.0, 1.0), 7: (128.0, 1.0)}  # fmt: skip
# NVLink-C2C between Grace and the GPU: 900 GB/s both ways, 450 one way (NVIDIA Grace
# Hopper and GB200 datasheets).
C2C_GB_S = 450.0


@dataclass(frozen=True)
class Ceiling:
    """The most one figure can be, and where that comes from."""

    value: float
    unit: str
    why: str

    def __str__(self) -> str:
        return f"{_num(self.value)} {self.unit} ({self.why})"


@dataclass(frozen=True)
class Ceilings:
    """Every ceiling of one node's figures."""

    tflops: Ceiling | None  # None: no SKU knows the burn's dtype
    power: Ceiling
    host_copy: Ceiling
    hbm: Ceiling
    peer: dict[int, Ceiling]  # by GPU index; missing: :attr:`peer_default`
    peer_default: Ceiling

    def peer_of(self, index: int) -> Ceiling:
        """The peer-copy ceiling of GPU ``index``."""
        return self.peer.get(index, self.peer_default)

    def busbw(self) -> Ceiling:
        """The all-reduce busbw ceiling: twice the fastest GPU's peer ceiling (NVLink SHARP)."""
        top = max((*self.peer.values(), self.peer_default), key=lambda c: c.value)
        return Ceiling(2 * top.value, "GB/s", f"twice {_num(top.value)} GB/s, {top.why}")


@dataclass(frozen=True)
class Implausible:
    """One figure above its ceiling (or no number at all where one must be)."""

    gpu_index: int | None  # None: a node-wide figure (the all-reduce)
    figure: str  # as a person names it: "burn bf16 TFLOPS", "H2D copy"
    value: float
    ceiling: Ceiling | None  # None: not finite or not above zero
    count: int = 1  # samples with such a figure (power)

    def why(self) -> str:
        """Why the figure cannot be: above what ceiling, from where."""
        if self.ceiling is None:
            return "not a finite figure above zero"
        return f"above {self.ceiling}"

    def __str__(self) -> str:
        what = f"{self.figure} {_num(self.value)}"
        if self.count > 1:
            what += f" (highest of {self.count} samples)"
        return f"{what}, {self.why()}"


def _num(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.4g}"


def _marker(item: Implausible) -> Unavailable:
    # The node pass's words, so implausible_reading() and the reports know it.
    detail = f"{IMPLAUSIBLE} {item.value!r} for {item.figure}, {item.why()}"
    return Unavailable(Reason.ERROR, detail)


# ------------------------------------------------------------------ ceilings


def tflops_ceiling(sku: Sku | None, dtype: str, catalog: Catalog) -> Ceiling | None:
    """The fastest a GPU of ``sku`` can burn ``dtype``; None where no SKU knows the dtype.

    A ``dtype`` that is none of the catalog's precisions (a forged result's) has a ceiling
    of zero: no speed of it is plausible, so it can neither pass nor enter a median.
    """
    if dtype not in PRECISIONS:
        return Ceiling(0.0, "TFLOPS", f"no GPU burns {dtype!r}: not one of {', '.join(PRECISIONS)}")
    own = sku.peak_tflops.of(dtype) if sku is not None else None
    if sku is not None and own is not None:
        why = f"the {sku.label}'s {own:g} dense {dtype} peak x {TFLOPS_MARGIN:g}"
        return Ceiling(own * TFLOPS_MARGIN, "TFLOPS", why)
    known = [
        (peak, row) for row in catalog.all() if (peak := row.peak_tflops.of(dtype))
    ]
    if not known:
        return None
    peak, row = max(known, key=lambda item: item[0])
    why = f"no {dtype} peak for this model: the fastest in the catalog, the {row.label}'s {peak:g}"
    return Ceiling(peak * TFLOPS_MARGIN, "TFLOPS", f"{why} x {TFLOPS_MARGIN:g}")


def _board_power(sku: Sku) -> float:
    return max(sku.tdp_w, *sku.power_limits_w)


def _power(sku: Sku | None, catalog: Catalog) -> Ceiling:
    if sku is not None:
        board = _board_power(sku)
        why = f"the {sku.label}'s {board:g} W board maximum x {POWER_MARGIN:g}"
        return Ceiling(board * POWER_MARGIN, "W", why)
    row = max(catalog.all(), key=_board_power)
    board = _board_power(row)
    why = f"unknown model: the largest board in the catalog, the {row.label}'s {board:g} W"
    return Ceiling(board * POWER_MARGIN, "W", f"{why} x {POWER_MARGIN:g}")


def pcie_gb_s(gen: int, width: int) -> float:
    """One direction of a PCIe link, GB/s of 10^9 bytes: GT/s x lanes x line code / 8."""
    rate, code = _PCIE_LANE[gen]
    return rate * width * code / 8


def _host_link(sku: Sku) -> Ceiling:
    if sku.pcie_gen is not None and sku.pcie_width is not None and sku.pcie_gen in _PCIE_LANE:
        value = pcie_gb_s(sku.pcie_gen, sku.pcie_width)
        why = f"the {sku.label}'s PCIe Gen{sku.pcie_gen} x{sku.pcie_width}, one direction"
        return Ceiling(value, "GB/s", why)
    return Ceiling(C2C_GB_S, "GB/s", f"the {sku.label}'s NVLink-C2C, one direction")


def _host_copy(sku: Sku | None, catalog: Catalog) -> Ceiling:
    if sku is not None:
        return _host_link(sku)
    top = max((_host_link(row) for row in catalog.all()), key=lambda c: c.value)
    return Ceiling(top.value, top.unit, f"unknown model: the fastest host link, {top.why}")


def _hbm(sku: Sku | None, catalog: Catalog) -> Ceiling:
    row = sku if sku is not None else max(catalog.all(), key=lambda r: r.memory_bandwidth_gbs)
    prefix = "" if sku is not None else "unknown model: the fastest memory in the catalog, "
    why = f"{prefix}the {row.label}'s {row.memory_bandwidth_gbs:g} GB/s x {HBM_MARGIN:g}"
    return Ceiling(row.memory_bandwidth_gbs * HBM_MARGIN, "GB/s", why)


def _fixed_links(sku: Sku) -> Ceiling | None:
    if sku.nvlinks is None or sku.nvlink_speed_gbs is None:
        return None
    value = sku.nvlinks * sku.nvlink_speed_gbs
    why = f"the {sku.label}'s {sku.nvlinks} NVLinks x {sku.nvlink_speed_gbs:g} GB/s, one direction"
    return Ceiling(value, "GB/s", why)


def _reported_links(gpu: GpuFacts) -> float:
    if isinstance(gpu.nvlinks, Unavailable):
        return 0.0
    return sum(
        link.speed_gb_s
        for link in gpu.nvlinks
        if link.active and isinstance(link.speed_gb_s, float) and math.isfinite(link.speed_gb_s)
    )


def _peers(
    facts: NodeFacts, sku: Sku | None, catalog: Catalog
) -> tuple[dict[int, Ceiling], Ceiling]:
    fixed = _fixed_links(sku) if sku is not None else None
    if fixed is not None:
        return {}, fixed
    # No count the board fixes (bridged cards, superchips, an unknown model): the GPU's own
    # links where it reports them, never less than the host link a peer copy can take.
    if sku is not None:
        floor = _host_link(sku)
    else:
        floor = max(
            (c for row in catalog.all() if (c := _fixed_links(row)) is not None),
            key=lambda c: c.value,
            default=_host_copy(None, catalog),
        )
        floor = Ceiling(
            floor.value, floor.unit, f"unknown model: the fastest in the catalog, {floor.why}"
        )
    own: dict[int, Ceiling] = {}
    for gpu in facts.gpus:
        links = _reported_links(gpu)
        if links > floor.value:
            own[gpu.index] = Ceiling(
                links, "GB/s", f"GPU {gpu.index}'s active NVLinks, one direction"
            )
    return own, floor


def ceilings(facts: NodeFacts, sku: Sku | None, catalog: Catalog) -> Ceilings:
    """Every ceiling of one node's figures, from its SKU (or the catalog's largest)."""
    dtype = facts.burn.dtype if facts.burn is not None else "bf16"
    peer, peer_default = _peers(facts, sku, catalog)
    return Ceilings(
        tflops=tflops_ceiling(sku, dtype, catalog),
        power=_power(sku, catalog),
        host_copy=_host_copy(sku, catalog),
        hbm=_hbm(sku, catalog),
        peer=peer,
        peer_default=peer_default,
    )


def tflops_plausible(value: object, ceiling: Ceiling | None) -> bool:
    """True for a burn speed that can be: a finite float above zero, at most the ceiling."""
    if not isinstance(value, float) or not (math.isfinite(value) and value > 0):
        return False
    return ceiling is None or value <= ceiling.value


# ------------------------------------------------------------------ screening


def _above(value: object, ceiling: Ceiling) -> bool:
    # NaN and bools are the node checks' business (not measured / not a number).
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > ceiling.value


def _bandwidth(
    bandwidth: Bandwidth, ceiling: Ceiling, figure: str, index: int | None, found: list[Implausible]
) -> Bandwidth:
    if not _above(bandwidth.gb_s, ceiling):
        return bandwidth
    item = Implausible(index, figure, float(bandwidth.gb_s), ceiling)  # type: ignore[arg-type]
    found.append(item)
    return dataclasses.replace(bandwidth, gb_s=_marker(item))


def _samples(
    samples: tuple[TelemetrySample, ...], ceiling: Ceiling, index: int, found: list[Implausible]
) -> tuple[TelemetrySample, ...]:
    high = [s.power_w for s in samples if _above(s.power_w, ceiling)]
    if not high:
        return samples
    top = max(float(value) for value in high)  # type: ignore[arg-type]
    item = Implausible(index, "burn power draw W", top, ceiling, count=len(high))
    found.append(item)
    marker = _marker(item)
    return tuple(
        dataclasses.replace(s, power_w=marker) if _above(s.power_w, ceiling) else s for s in samples
    )


def _burn_gpu(gpu: GpuBurn, dtype: str, limits: Ceilings, found: list[Implausible]) -> GpuBurn:
    changes: dict[str, object] = {}
    value = gpu.tflops
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and not tflops_plausible(float(value), limits.tflops):  # type: ignore[arg-type]
        fine = math.isfinite(value) and value > 0  # type: ignore[arg-type,operator]
        ceiling = limits.tflops if fine else None
        item = Implausible(gpu.index, f"burn {dtype} TFLOPS", float(value), ceiling)  # type: ignore[arg-type]
        found.append(item)
        changes["tflops"] = _marker(item)
    samples = _samples(gpu.samples, limits.power, gpu.index, found)
    if samples is not gpu.samples:
        changes["samples"] = samples
    return dataclasses.replace(gpu, **changes) if changes else gpu  # type: ignore[arg-type]


def _burn(burn: BurnResult, limits: Ceilings, found: list[Implausible]) -> BurnResult:
    gpus = tuple(_burn_gpu(gpu, burn.dtype, limits, found) for gpu in burn.gpus)
    if all(a is b for a, b in zip(gpus, burn.gpus)):
        return burn
    return dataclasses.replace(burn, gpus=gpus)


def _copy(copy: GpuCopyBandwidth, limits: Ceilings, found: list[Implausible]) -> GpuCopyBandwidth:
    i = copy.index
    h2d = _bandwidth(copy.h2d, limits.host_copy, "H2D copy GB/s", i, found)
    d2h = _bandwidth(copy.d2h, limits.host_copy, "D2H copy GB/s", i, found)
    hbm = _bandwidth(copy.hbm, limits.hbm, "HBM copy GB/s", i, found)
    if h2d is copy.h2d and d2h is copy.d2h and hbm is copy.hbm:
        return copy
    return dataclasses.replace(copy, h2d=h2d, d2h=d2h, hbm=hbm)


def _peer(peer: PeerBandwidth, limits: Ceilings, found: list[Implausible]) -> PeerBandwidth:
    ceiling = limits.peer_of(peer.src)
    where = f"GPU {peer.src} -> GPU {peer.dst}"
    uni = _bandwidth(peer.unidirectional, ceiling, f"P2P {where} GB/s", peer.src, found)
    bi = _bandwidth(peer.bidirectional, ceiling, f"bidirectional P2P {where} GB/s", peer.src, found)
    if uni is peer.unidirectional and bi is peer.bidirectional:
        return peer
    return dataclasses.replace(peer, unidirectional=uni, bidirectional=bi)


def _all_reduce(run: AllReduce, limits: Ceilings, found: list[Implausible]) -> AllReduce:
    if isinstance(run.points, Unavailable):
        return run
    ceiling = limits.busbw()
    figures = [
        (value, point.size_bytes)
        for point in run.points
        for value in (point.busbw_gb_s, point.busbw_in_place_gb_s)
        if value is not None and _above(value, ceiling)
    ]
    if not figures:
        return run
    value, size = max(figures)
    item = Implausible(
        None, f"all-reduce busbw GB/s at {size} bytes", value, ceiling, count=len(figures)
    )
    found.append(item)
    # One point beyond the fabric makes the sweep no measurement: its other rows came
    # from the same run, timed the same way.
    return dataclasses.replace(run, points=_marker(item))


def _interconnect(ic: Interconnect, limits: Ceilings, found: list[Implausible]) -> Interconnect:
    changes: dict[str, object] = {}
    if not isinstance(ic.gpus, Unavailable):
        gpus = tuple(_copy(copy, limits, found) for copy in ic.gpus)
        if any(a is not b for a, b in zip(gpus, ic.gpus)):
            changes["gpus"] = gpus
    if not isinstance(ic.peers, Unavailable):
        peers = tuple(_peer(peer, limits, found) for peer in ic.peers)
        if any(a is not b for a, b in zip(peers, ic.peers)):
            changes["peers"] = peers
    if isinstance(ic.all_reduce, AllReduce):
        run = _all_reduce(ic.all_reduce, limits, found)
        if run is not ic.all_reduce:
            changes["all_reduce"] = run
    return dataclasses.replace(ic, **changes) if changes else ic  # type: ignore[arg-type]


def _gpu(gpu: GpuFacts, limits: Ceilings) -> GpuFacts:
    # A fact of the GPU itself: the marker is inventory.readings_plausible's to report.
    if not _above(gpu.power_draw_w, limits.power):
        return gpu
    value = float(gpu.power_draw_w)  # type: ignore[arg-type]
    why = f"above {limits.power}"
    marker = Unavailable(Reason.ERROR, f"{IMPLAUSIBLE} {value!r} for power_draw_w, {why}")
    return dataclasses.replace(gpu, power_draw_w=marker)


def screen(
    facts: NodeFacts, sku: Sku | None, catalog: Catalog
) -> tuple[NodeFacts, tuple[Implausible, ...]]:
    """The facts with every figure above its ceiling made "not measured", and those figures.

    Args:
        facts: one node's facts as they came (from the agent, a bundle or a scenario).
        sku: the model it is judged against; None: the catalog's largest ceilings.
        catalog: where the ceilings come from.

    Returns:
        The facts to judge (the same object when nothing was replaced), and each burn or
        interconnect figure replaced, in the order found. A GPU's own power reading is
        replaced too but not listed: inventory.readings_plausible reports it with the
        node's other impossible readings.
    """
    limits = ceilings(facts, sku, catalog)
    found: list[Implausible] = []
    gpus = tuple(_gpu(gpu, limits) for gpu in facts.gpus)
    burn = _burn(facts.burn, limits, found) if facts.burn is not None else None
    ic = (
        _interconnect(facts.interconnect, limits, found) if facts.interconnect is not None else None
    )
    if (
        burn is facts.burn
        and ic is facts.interconnect
        and all(a is b for a, b in zip(gpus, facts.gpus))
    ):
        return facts, ()
    return dataclasses.replace(facts, gpus=gpus, burn=burn, interconnect=ic), tuple(found)


def by_gpu(found: Iterable[Implausible]) -> dict[int | None, list[Implausible]]:
    """The figures grouped by GPU index (None: node-wide), GPUs in order, node-wide last."""
    grouped: dict[int | None, list[Implausible]] = {}
    for item in sorted(found, key=lambda i: (i.gpu_index is None, i.gpu_index or 0)):
        grouped.setdefault(item.gpu_index, []).append(item)
    return grouped
