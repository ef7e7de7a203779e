"""The burn-in: each GPU's speed, correctness and telemetry, and its error counters."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Optional, Tuple

from validator.model.gpu_facts import GpuFacts, NvLinkErrorCounts
from validator.model.kernel_log_facts import XidEvent
from validator.model.measured import _MANY_PER_HOST, NOT_MEASURED, Measured, Unavailable


@dataclass(frozen=True, **_MANY_PER_HOST)
class TelemetrySample:
    """One sampler tick for one GPU during the burn-in."""

    t_s: float  # seconds since the burn started
    power_w: Measured[float] = NOT_MEASURED
    temperature_gpu_c: Measured[float] = NOT_MEASURED
    temperature_memory_c: Measured[float] = NOT_MEASURED
    sm_clock_mhz: Measured[int] = NOT_MEASURED
    mem_clock_mhz: Measured[int] = NOT_MEASURED
    utilization_pct: Measured[int] = NOT_MEASURED
    clock_event_reasons: Measured[Tuple[str, ...]] = NOT_MEASURED


@dataclass(frozen=True)
class ErrorCounters:
    """A GPU's error counters at one moment, to compare before and after the burn."""

    ecc_volatile_corrected: Measured[int] = NOT_MEASURED
    ecc_volatile_uncorrected: Measured[int] = NOT_MEASURED
    remapped_rows_correctable: Measured[int] = NOT_MEASURED
    remapped_rows_uncorrectable: Measured[int] = NOT_MEASURED
    remap_pending: Measured[bool] = NOT_MEASURED
    retired_pages_pending: Measured[bool] = NOT_MEASURED
    pcie_replay_count: Measured[int] = NOT_MEASURED
    nvlink_errors: Measured[Tuple[NvLinkErrorCounts, ...]] = NOT_MEASURED


def counters_unavailable(why: Unavailable) -> ErrorCounters:
    """Error counters none of which could be read, each for the same reason."""
    return ErrorCounters(**{f.name: why for f in dataclasses.fields(ErrorCounters)})


def counters_of(gpu: GpuFacts) -> ErrorCounters:
    """The error counters a GPU's facts hold, to compare before and after a burn-in."""
    return ErrorCounters(
        ecc_volatile_corrected=gpu.ecc_volatile_corrected,
        ecc_volatile_uncorrected=gpu.ecc_volatile_uncorrected,
        remapped_rows_correctable=gpu.remapped_rows_correctable,
        remapped_rows_uncorrectable=gpu.remapped_rows_uncorrectable,
        remap_pending=gpu.remap_pending,
        retired_pages_pending=gpu.retired_pages_pending,
        pcie_replay_count=gpu.pcie_replay_count,
        nvlink_errors=gpu.nvlink_errors,
    )


class BurnStatus(str, enum.Enum):
    """How one GPU's burn worker ended."""

    COMPLETED = "completed"
    ERROR = "error"  # the backend failed on this GPU; detail says how
    TIMEOUT = "timeout"  # the worker stopped answering (wedged GPU or backend)
    NOT_RUN = "not_run"  # the GPU could not be given a worker
    UNSEEN = "unseen"  # NVML lists the GPU, the burn backend (CUDA) cannot see it
    INTERRUPTED = "stopped"  # Ctrl-C came before the worker finished its batch


@dataclass(frozen=True)
class GpuBurn:
    """One GPU's burn-in: speed, correctness, telemetry."""

    index: int
    status: BurnStatus
    detail: str = ""
    uuid: Measured[str] = NOT_MEASURED
    iterations: int = 0  # matrix products computed
    tflops: Measured[float] = NOT_MEASURED  # median over windows after warm-up
    tflops_windows: Tuple[float, ...] = ()
    mismatched_elements: int = 0  # elements differing from the first result, all iterations
    mismatched_iterations: int = 0
    nonfinite_elements: int = 0  # NaN or Inf in any result
    reference_max_error: Measured[float] = NOT_MEASURED  # small tile against fp64 on the CPU
    reference_ok: Measured[bool] = NOT_MEASURED
    digest: Measured[str] = NOT_MEASURED  # of the first result, to compare across GPUs
    samples: Tuple[TelemetrySample, ...] = ()
    counters_before: ErrorCounters = field(default_factory=ErrorCounters)
    counters_after: ErrorCounters = field(default_factory=ErrorCounters)
    pci_bus_id: Measured[str] = NOT_MEASURED  # the board, as NVML names it
    cuda_device: Measured[int] = NOT_MEASURED  # the backend's device number for that board
    # The load window on the trace's clock (see validator.trace): from the first batch
    # after warm-up to the end of the last batch.
    load_start_s: Measured[float] = NOT_MEASURED
    load_end_s: Measured[float] = NOT_MEASURED
    duty: Measured[float] = NOT_MEASURED  # share of the load window the device spent on products


@dataclass(frozen=True)
class BurnResult:
    """The node's burn-in: every GPU loaded at once for a duration."""

    backend: str  # cublas | torch | numpy
    dtype: str  # bf16 | fp16 | tf32 | fp32 | fp8
    matrix_size: int
    duration_s: float  # asked for
    elapsed_s: float  # as run
    memory_fraction: float  # share of free memory the buffers were asked to fill
    started_at: str  # ISO 8601 UTC
    sampler: str  # nvml | simulated | none
    simulated: bool = False  # figures come from a scenario, not from a GPU
    deterministic: bool = True  # results compared bitwise; else within tolerance
    tolerance: float = 0.0  # relative, when not deterministic
    gpus: Tuple[GpuBurn, ...] = ()
    xid_events_during: Measured[Tuple[XidEvent, ...]] = NOT_MEASURED
    error: Optional[str] = None  # the burn could not start at all
    interrupted: bool = False  # stopped early by the operator (Ctrl-C)
    cuda_visible_devices: Optional[str] = None  # as the environment set it; None: unset
    cuda_device_order: Optional[str] = None  # as the environment had it before PCI_BUS_ID was set
    # How backend devices were matched to NVML GPUs: pci_bus_id | pci_order | stand_in.
    device_mapping: str = ""
