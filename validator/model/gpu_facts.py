"""What is measured about one GPU: its facts, its NVLinks, its clock-event reasons."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Tuple

from validator.model.measured import _MANY_PER_HOST, NOT_MEASURED, Measured, Unavailable


class GpuStatus(str, enum.Enum):
    """Whether a GPU answered when asked."""

    OK = "ok"
    LOST = "lost"  # NVML_ERROR_GPU_IS_LOST / "fallen off the bus"
    ERROR = "error"  # present but its handle could not be read


@dataclass(frozen=True, **_MANY_PER_HOST)
class NvLinkState:
    """One NVLink of one GPU: up or not, and its speed where the source gives it."""

    link: int
    active: bool
    speed_gb_s: Measured[float] = NOT_MEASURED  # per direction, as nvidia-smi nvlink -s


@dataclass(frozen=True, **_MANY_PER_HOST)
class NvLinkErrorCounts:
    """One NVLink's error counters (NVML nvmlDeviceGetNvLinkErrorCounter; ``nvlink -e``).

    Counted since the driver loaded (or the counters were reset): compare two readings,
    never judge one total on its own.
    """

    link: int
    crc_flit: Measured[int] = NOT_MEASURED  # NVML_NVLINK_ERROR_DL_CRC_FLIT
    crc_data: Measured[int] = NOT_MEASURED  # NVML_NVLINK_ERROR_DL_CRC_DATA
    replay: Measured[int] = NOT_MEASURED  # NVML_NVLINK_ERROR_DL_REPLAY
    recovery: Measured[int] = NOT_MEASURED  # NVML_NVLINK_ERROR_DL_RECOVERY


# The GPU recovery actions NVML reports (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, R575+)
# and ``<gpu_recovery_action>`` in ``nvidia-smi -q -x``, by our names, in NVML's order
# (nvmlDeviceGpuRecoveryAction_t 0-7).
RECOVERY_ACTIONS: Tuple[str, ...] = (
    "none",
    "gpu_reset",
    "node_reboot",
    "drain_p2p",
    "drain_and_reset",
    "recover_imex_domain",
    "bus_reset",
    "system_reboot",
)


@dataclass(frozen=True, **_MANY_PER_HOST)
class GpuProcess:
    """One compute process on a GPU (nvmlDeviceGetComputeRunningProcesses): work not ours.

    Its name is the host's word for it (``/proc/PID/comm``), untrusted text: escape it
    before it reaches a terminal, a log or a report.
    """

    pid: int
    name: Measured[str] = NOT_MEASURED
    used_memory_mib: Measured[int] = NOT_MEASURED


@dataclass(frozen=True)
class GpuFacts:
    """Everything measured about one GPU. Units are in the field names."""

    index: int
    status: GpuStatus = GpuStatus.OK
    status_detail: str = ""
    uuid: Measured[str] = NOT_MEASURED
    serial: Measured[str] = NOT_MEASURED
    name: Measured[str] = NOT_MEASURED
    pci_bus_id: Measured[str] = NOT_MEASURED  # 00000000:18:00.0, upper case hex
    vbios_version: Measured[str] = NOT_MEASURED
    # Memory, MiB as NVML and nvidia-smi report it.
    memory_total_mib: Measured[int] = NOT_MEASURED
    memory_used_mib: Measured[int] = NOT_MEASURED
    # ECC.
    ecc_mode_current: Measured[bool] = NOT_MEASURED
    ecc_mode_pending: Measured[bool] = NOT_MEASURED
    ecc_volatile_corrected: Measured[int] = NOT_MEASURED
    ecc_volatile_uncorrected: Measured[int] = NOT_MEASURED
    ecc_aggregate_corrected: Measured[int] = NOT_MEASURED
    ecc_aggregate_uncorrected: Measured[int] = NOT_MEASURED
    retired_pages_sbe: Measured[int] = NOT_MEASURED
    retired_pages_dbe: Measured[int] = NOT_MEASURED
    retired_pages_pending: Measured[bool] = NOT_MEASURED
    remapped_rows_correctable: Measured[int] = NOT_MEASURED
    remapped_rows_uncorrectable: Measured[int] = NOT_MEASURED
    remap_pending: Measured[bool] = NOT_MEASURED
    remap_failure: Measured[bool] = NOT_MEASURED
    # Temperatures, degrees C. Absolute thresholds where the GPU reports them;
    # Hopper and newer report thresholds as offsets to T.Limit instead
    # (tlimit_*: the margin at which the event happens; tlimit_margin_c: now).
    temperature_gpu_c: Measured[float] = NOT_MEASURED
    temperature_memory_c: Measured[float] = NOT_MEASURED
    temp_shutdown_c: Measured[float] = NOT_MEASURED
    temp_slowdown_c: Measured[float] = NOT_MEASURED
    temp_max_operating_c: Measured[float] = NOT_MEASURED
    temp_memory_max_c: Measured[float] = NOT_MEASURED
    tlimit_margin_c: Measured[float] = NOT_MEASURED
    tlimit_shutdown_c: Measured[float] = NOT_MEASURED
    tlimit_slowdown_c: Measured[float] = NOT_MEASURED
    tlimit_max_operating_c: Measured[float] = NOT_MEASURED
    # Power, watts.
    power_draw_w: Measured[float] = NOT_MEASURED
    power_limit_enforced_w: Measured[float] = NOT_MEASURED
    power_limit_default_w: Measured[float] = NOT_MEASURED
    power_limit_min_w: Measured[float] = NOT_MEASURED
    power_limit_max_w: Measured[float] = NOT_MEASURED
    # Clocks, MHz.
    sm_clock_mhz: Measured[int] = NOT_MEASURED
    mem_clock_mhz: Measured[int] = NOT_MEASURED
    sm_clock_max_mhz: Measured[int] = NOT_MEASURED
    mem_clock_max_mhz: Measured[int] = NOT_MEASURED
    sm_clock_app_mhz: Measured[int] = NOT_MEASURED
    mem_clock_app_mhz: Measured[int] = NOT_MEASURED
    # Active clock-event (throttle) reasons, by name (see CLOCK_EVENT_REASONS).
    clock_event_reasons: Measured[Tuple[str, ...]] = NOT_MEASURED
    # PCIe: gen_max is the most the device and host allow; gen_current drops at idle.
    pcie_gen_current: Measured[int] = NOT_MEASURED
    pcie_gen_max: Measured[int] = NOT_MEASURED
    pcie_width_current: Measured[int] = NOT_MEASURED
    pcie_width_max: Measured[int] = NOT_MEASURED
    # State.
    persistence_mode: Measured[bool] = NOT_MEASURED
    compute_mode: Measured[str] = NOT_MEASURED  # default | exclusive_process | prohibited
    mig_mode_current: Measured[bool] = NOT_MEASURED
    mig_mode_pending: Measured[bool] = NOT_MEASURED
    nvlinks: Measured[Tuple[NvLinkState, ...]] = NOT_MEASURED
    nvlink_errors: Measured[Tuple[NvLinkErrorCounts, ...]] = NOT_MEASURED
    pcie_replay_count: Measured[int] = NOT_MEASURED  # nvmlDeviceGetPcieReplayCounter
    # What the driver says the GPU needs before it can be trusted again (RECOVERY_ACTIONS).
    recovery_action: Measured[str] = NOT_MEASURED
    # Fabric manager registration (NVSwitch systems): not_started | in_progress | completed.
    fabric_state: Measured[str] = NOT_MEASURED
    fabric_status: Measured[str] = NOT_MEASURED  # "success" or the error the driver gave
    # Compute processes on the GPU when its facts were read: a busy GPU is not burned.
    compute_processes: Measured[Tuple[GpuProcess, ...]] = NOT_MEASURED


_GPU_IDENTITY_FIELDS = ("index", "status", "status_detail")


def unreadable_gpu(index: int, status: GpuStatus, why: Unavailable) -> GpuFacts:
    """A GPU none of whose facts could be read: every fact carries the reason."""
    facts = {
        f.name: why for f in dataclasses.fields(GpuFacts) if f.name not in _GPU_IDENTITY_FIELDS
    }
    return GpuFacts(index=index, status=status, status_detail=why.detail, **facts)


# Clock-event reason names, in NVML bit order (nvmlClocksEventReason*).
CLOCK_EVENT_REASONS: Tuple[Tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def decode_clock_event_reasons(mask: int) -> Tuple[str, ...]:
    """Names of the reasons set in an NVML clock-event bit mask, unknown bits as hex."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    known_bits = 0
    for bit, _ in CLOCK_EVENT_REASONS:
        known_bits |= bit
    rest = mask & ~known_bits
    if rest:
        names.append(f"unknown_0x{rest:x}")
    return tuple(names)
