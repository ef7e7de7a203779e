"""The figures operators graph, per GPU and per node, as labelled samples in base units.

What :mod:`validator.report.prometheus_certify` writes: a GPU's burn-in speed, power,
temperature and clock under load (the samples :func:`validator.trace.under_load` picks,
as the judge reads them, and no figure from fewer than it judges), its power limit,
copy bandwidths, and error counters; the node's all-reduce bandwidth. A figure that was
not measured yields nothing: no sample, never a 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from validator.model import (
    Bandwidth,
    BurnResult,
    GpuBurn,
    GpuFacts,
    GpuStatus,
    Interconnect,
    KernelLogFacts,
    NodeResult,
    NvLinkErrorCounts,
    measured_gb_s,
)
from validator.packed import with_samples
from validator.report.prometheus import label_text
from validator.safe_text import bus_key
from validator.trace import MIN_LOAD_SAMPLES, numbers, percentile, under_load

# A GPU's own labels, after host: its NVML index, UUID and board serial.
GPU_LABELS: tuple[str, ...] = ("gpu", "uuid", "serial")
GIGA = 1e9  # GB/s of 10^9 bytes (nvbandwidth, nccl-tests) to bytes per second
MEGA = 1e6  # MHz to hertz
TERA = 1e12  # TFLOPS to operations per second


@dataclass(frozen=True)
class Sample:
    """One sample: its series' name, its label values after host, its value."""

    name: str
    labels: tuple[str, ...]
    value: float


def number(value: object, scale: float = 1.0) -> float | None:
    """A measured, finite number (scaled); None for a missing reading, a flag or NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    scaled = float(value) * scale
    return scaled if math.isfinite(scaled) else None


def _flag(value: object) -> float | None:
    """1 or 0 for a measured flag; None when it was not measured."""
    return float(value) if isinstance(value, bool) else None


def _text(value: object) -> str:
    return label_text(value) if isinstance(value, str) else ""


class _Gpu:
    """One GPU's labels, and the samples made with them."""

    def __init__(self, labels: tuple[str, ...]) -> None:
        self.labels = labels
        self.samples: list[Sample] = []

    def add(self, name: str, value: float | None, *extra: str) -> None:
        """A sample of ``name``, unless ``value`` is None (not measured)."""
        if value is not None:
            self.samples.append(Sample(name, (*self.labels, *extra), value))


def node_samples(node: NodeResult) -> Iterator[Sample]:
    """The node's own figures: the all-reduce bus bandwidth at the largest size."""
    interconnect = node.facts.interconnect
    result = interconnect.all_reduce if interconnect is not None else None
    points = getattr(result, "points", None)
    if isinstance(points, tuple) and points:
        largest = max(points, key=lambda point: point.size_bytes)
        busbw = number(largest.busbw_gb_s, GIGA)
        if busbw is not None and busbw > 0:
            yield Sample("gpuready_node_all_reduce_bus_bandwidth_bytes_per_second", (), busbw)


def gpu_samples(node: NodeResult) -> list[Sample]:
    """Every GPU's figures; a fleet's certified node gets its burn samples back first."""
    facts = with_samples(node).facts
    gpus = {gpu.index: _Gpu(_labels(gpu.index, gpu.uuid, gpu.serial)) for gpu in facts.gpus}
    burns = {gpu.index: gpu for gpu in facts.burn.gpus} if facts.burn is not None else {}
    for gpu in facts.gpus:
        _inventory(gpus[gpu.index], gpu, burns.get(gpu.index), facts.kernel_log)
    if facts.burn is not None:
        for burn in facts.burn.gpus:
            if burn.index not in gpus:  # the burn saw a GPU the inventory did not list
                gpus[burn.index] = _Gpu(_labels(burn.index, burn.uuid, None))
            _burn(gpus[burn.index], burn, facts.burn)
    if facts.interconnect is not None:
        _copies(gpus, facts.interconnect)
    return [sample for index in sorted(gpus) for sample in gpus[index].samples]


def _labels(index: int, uuid: object, serial: object) -> tuple[str, ...]:
    return (str(index), _text(uuid), _text(serial))


def _latest(after: object, before: object) -> object:
    """The reading after the burn where it was taken, else the inventory's."""
    return after if number(after) is not None or _flag(after) is not None else before


def _inventory(out: _Gpu, gpu: GpuFacts, burn: GpuBurn | None, kernel_log: KernelLogFacts) -> None:
    """The GPU's identity, limits and error counters (after the burn where read then)."""
    out.add("gpuready_gpu_info", 1.0, _text(gpu.name), _text(gpu.pci_bus_id),
            _text(gpu.vbios_version))  # fmt: skip
    out.add("gpuready_gpu_responding", 1.0 if gpu.status is GpuStatus.OK else 0.0)
    out.add("gpuready_gpu_power_limit_watts", number(gpu.power_limit_enforced_w))
    out.add("gpuready_gpu_sm_clock_max_hertz", number(gpu.sm_clock_max_mhz, MEGA))
    after = burn.counters_after if burn is not None else None

    def latest(name: str) -> object:
        before = getattr(gpu, name)
        return _latest(getattr(after, name), before) if after is not None else before

    for kind in ("corrected", "uncorrected"):
        out.add("gpuready_gpu_ecc_volatile_errors", number(latest(f"ecc_volatile_{kind}")), kind)
        aggregate = number(getattr(gpu, f"ecc_aggregate_{kind}"))
        out.add("gpuready_gpu_ecc_aggregate_errors", aggregate, kind)
    for kind in ("correctable", "uncorrectable"):
        rows = number(latest(f"remapped_rows_{kind}"))
        out.add("gpuready_gpu_remapped_rows", rows, kind)
    out.add("gpuready_gpu_row_remap_pending", _flag(latest("remap_pending")))
    out.add("gpuready_gpu_row_remap_failure", _flag(gpu.remap_failure))
    out.add("gpuready_gpu_retired_pages", number(gpu.retired_pages_sbe), "sbe")
    out.add("gpuready_gpu_retired_pages", number(gpu.retired_pages_dbe), "dbe")
    out.add("gpuready_gpu_xid_events", _xid_count(gpu, kernel_log))
    out.add("gpuready_gpu_pcie_replays", number(latest("pcie_replay_count")))
    links = latest("nvlink_errors")
    if isinstance(links, tuple):
        for kind, total in _nvlink_totals(links):
            out.add("gpuready_gpu_nvlink_errors", total, kind)


def _xid_count(gpu: GpuFacts, kernel_log: KernelLogFacts) -> float | None:
    """Xid lines naming the GPU's bus; None when the log or the GPU's bus is unknown."""
    events = kernel_log.events
    key = bus_key(gpu.pci_bus_id) if isinstance(gpu.pci_bus_id, str) else None
    if not isinstance(events, tuple) or key is None:
        return None
    return float(
        sum(1 for event in events if not event.nvswitch and bus_key(event.pci_bus_id) == key)
    )


def _nvlink_totals(links: Iterable[NvLinkErrorCounts]) -> Iterator[tuple[str, float]]:
    """Each kind's errors summed over the links that read it; a kind none read is left out."""
    for kind in ("crc_flit", "crc_data", "replay", "recovery"):
        values = [value for link in links if (value := number(getattr(link, kind))) is not None]
        if values:
            yield kind, float(sum(values))


def _burn(out: _Gpu, gpu: GpuBurn, burn: BurnResult) -> None:
    """Speed, and power, temperature and clock under load (from enough load samples)."""
    speed = number(gpu.tflops, TERA)
    out.add("gpuready_gpu_burn_floating_point_operations_per_second", speed, burn.dtype)
    loaded = under_load(gpu)
    if len(loaded) < MIN_LOAD_SAMPLES:  # too few to judge: to graph, too
        return
    power = numbers(loaded, lambda sample: sample.power_w)
    out.add("gpuready_gpu_burn_power_watts", percentile(power, 50.0))
    out.add("gpuready_gpu_burn_peak_power_watts", _peak(power))
    hot = numbers(loaded, lambda sample: sample.temperature_gpu_c)
    out.add("gpuready_gpu_burn_peak_temperature_celsius", _peak(hot))
    memory = numbers(loaded, lambda sample: sample.temperature_memory_c)
    out.add("gpuready_gpu_burn_peak_memory_temperature_celsius", _peak(memory))
    clocks = percentile(numbers(loaded, lambda sample: sample.sm_clock_mhz), 50.0)
    out.add("gpuready_gpu_burn_sm_clock_hertz", None if clocks is None else clocks * MEGA)


def _peak(values: Sequence[float]) -> float | None:
    return max(values) if values else None


def _copies(gpus: dict[int, _Gpu], interconnect: Interconnect) -> None:
    """Each GPU's HBM and host copies, and its copies to each peer (where measured)."""
    if isinstance(interconnect.gpus, tuple):
        for copy in interconnect.gpus:
            out = gpus.setdefault(copy.index, _Gpu(_labels(copy.index, copy.uuid, None)))
            out.add("gpuready_gpu_memory_bandwidth_bytes_per_second", _bytes(copy.hbm))
            name = "gpuready_gpu_host_bandwidth_bytes_per_second"
            out.add(name, _bytes(copy.h2d), "host_to_device")
            out.add(name, _bytes(copy.d2h), "device_to_host")
    if isinstance(interconnect.peers, tuple):
        name = "gpuready_gpu_peer_bandwidth_bytes_per_second"
        for pair in interconnect.peers:
            if pair.src == pair.dst:
                continue
            out = gpus.setdefault(pair.src, _Gpu(_labels(pair.src, None, None)))
            peer = str(pair.dst)
            out.add(name, _bytes(pair.unidirectional), peer, "unidirectional")
            out.add(name, _bytes(pair.bidirectional), peer, "bidirectional")


def _bytes(bandwidth: Bandwidth) -> float | None:
    """Bytes per second of a copy measured (finite, above zero); None otherwise."""
    value = measured_gb_s(bandwidth)
    return None if value is None else value * GIGA


__all__ = ["GPU_LABELS", "Sample", "gpu_samples", "node_samples", "number"]
