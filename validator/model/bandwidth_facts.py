"""What joins a node's GPUs: copy, peer and all-reduce bandwidths (the interconnect).

Bandwidths are GB/s of 10^9 bytes, as nvbandwidth and nccl-tests print them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

from validator.model.measured import _MANY_PER_HOST, NOT_MEASURED, Measured, Unavailable


@dataclass(frozen=True, **_MANY_PER_HOST)
class Bandwidth:
    """One copy measured several times: the median of the repeats, and each repeat.

    Each repeat is timed on the device (CUDA events around the copies) or read from a
    recorded output; ``gb_s`` is why not when the copy failed or was not measured.
    """

    gb_s: Measured[float] = NOT_MEASURED  # the median of the repeats
    repeats_gb_s: Tuple[float, ...] = ()
    size_bytes: Optional[int] = None  # bytes moved per copy, where known


def measured_gb_s(bandwidth: Bandwidth) -> Optional[float]:
    """A copy's median where it was measured (finite, above zero); None otherwise."""
    value = bandwidth.gb_s
    if isinstance(value, (Unavailable, bool)):
        return None
    if not (value > 0 and value != float("inf")):  # NaN fails the first test too
        return None
    return float(value)


@dataclass(frozen=True)
class GpuCopyBandwidth:
    """One GPU's copies: to and from pinned host memory over PCIe, and within its own HBM."""

    index: int  # the NVML index, as GpuFacts.index
    uuid: Measured[str] = NOT_MEASURED
    pci_bus_id: Measured[str] = NOT_MEASURED
    numa_node: Measured[int] = NOT_MEASURED  # where the pinned host buffer was placed
    h2d: Bandwidth = field(default_factory=Bandwidth)  # host to device, copy engine
    d2h: Bandwidth = field(default_factory=Bandwidth)  # device to host, copy engine
    # Device to device within the GPU: bytes read plus bytes written per second (as CUDA's
    # bandwidthTest counts them), so it compares with the datasheet's HBM bandwidth.
    hbm: Bandwidth = field(default_factory=Bandwidth)


@dataclass(frozen=True, **_MANY_PER_HOST)
class PeerBandwidth:
    """One ordered pair of GPUs: can ``src`` reach ``dst`` directly, and how fast.

    ``bidirectional`` is the src->dst copy's own bandwidth while dst->src copies at the
    same time (as nvbandwidth's bidirectional tests report it), not the sum of both.
    """

    src: int  # NVML index
    dst: int
    access: Measured[bool] = NOT_MEASURED  # cudaDeviceCanAccessPeer(src, dst)
    unidirectional: Bandwidth = field(default_factory=Bandwidth)
    bidirectional: Bandwidth = field(default_factory=Bandwidth)


@dataclass(frozen=True)
class AllReducePoint:
    """One message size of an all-reduce sweep, as nccl-tests reports a row.

    busbw is algbw x 2(n-1)/n for n ranks (nccl-tests' definition), so it compares with
    the hardware's link bandwidth whatever the GPU count.
    """

    size_bytes: int
    time_us: float  # per all-reduce, out of place
    algbw_gb_s: float
    busbw_gb_s: float  # out of place
    busbw_in_place_gb_s: Optional[float] = None  # where measured
    wrong: Optional[int] = None  # elements wrong when checked (nccl-tests #wrong); None: not


@dataclass(frozen=True)
class AllReduce:
    """NCCL all-reduce across a node's GPUs, in one process (one communicator per GPU)."""

    ranks: int  # GPUs in the communicator
    source: str  # nccl | torch | simulate | a capture file name
    nccl_version: Measured[str] = NOT_MEASURED  # 2.21.5
    dtype: str = "float"
    points: Measured[Tuple[AllReducePoint, ...]] = NOT_MEASURED  # why not, when not run
    gpu_indices: Tuple[int, ...] = ()  # NVML indices of the ranks, where known
    # Wrong elements over the whole run where the output counts them only in total (old
    # nccl-tests' "Out of bounds values : N FAILED"); None: not counted that way.
    wrong: Optional[int] = None


@dataclass(frozen=True)
class Interconnect:
    """What joins a node's GPUs, measured after the burn-in (or read from a bundle).

    Each part is why not when it could not be measured; a GPU or pair that failed has
    its own reason in its :class:`Bandwidth`, and the others still have figures.
    """

    source: str  # cuda | torch | simulate | nvbandwidth.txt | nvbandwidth.json | ...
    simulated: bool = False  # figures come from a scenario, not from a GPU
    started_at: str = ""  # ISO 8601 UTC
    elapsed_s: Optional[float] = None
    # The idle gate: how long it waited for the GPUs' copy and memory use to go quiet,
    # and the GPUs still busy when it gave up (their figures may be low for that reason).
    idle_wait_s: Optional[float] = None
    busy_gpus: Tuple[int, ...] = ()
    gpus: Measured[Tuple[GpuCopyBandwidth, ...]] = NOT_MEASURED
    peers: Measured[Tuple[PeerBandwidth, ...]] = NOT_MEASURED
    all_reduce: Measured[AllReduce] = NOT_MEASURED
    error: Optional[str] = None  # nothing could be measured at all; the reason
