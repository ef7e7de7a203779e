"""The facts a node reports and the findings we draw from them.

Also the plain data the rooms share around those: a host as the inventory gives it
and the transports reach it (:class:`HostSpec`), and a drift result's checks and
state (:class:`DriftCheck`, :func:`drift_state`), which the renderers read.

Plain frozen dataclasses, JSON in and out, standard library only: this module is
shipped to GPU hosts with the node agent and must run on Python 3.9.

Facts are what was measured. A value that could not be measured is an
:class:`Unavailable` carrying the reason, never ``None`` and never a guess.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import typing
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, Generic, Optional, Tuple, TypeVar, Union

from validator import fields
from validator.text import one_line

# Bump on any change that a reader of an older JSON document would misread.
SCHEMA_VERSION = 1

T = TypeVar("T")


class Reason(str, enum.Enum):
    """Why a fact has no value."""

    NOT_SUPPORTED = "not_supported"  # the device or driver does not offer it
    NOT_MEASURED = "not_measured"  # nobody asked: file missing from a capture, source lacks it
    NO_PERMISSION = "no_permission"
    GPU_LOST = "gpu_lost"  # the GPU stopped answering (fallen off the bus)
    ERROR = "error"  # asking failed; the detail says how


@dataclass(frozen=True)
class Unavailable:
    """A fact that has no value, and why."""

    reason: Reason
    detail: str = ""

    def __str__(self) -> str:
        text = self.reason.value.replace("_", " ")
        return f"{text} ({self.detail})" if self.detail else text


NOT_MEASURED = Unavailable(Reason.NOT_MEASURED)
# How every implausible reading's detail begins (``Reason.ERROR``): a value no GPU or
# host can have, so it was not measured, and the judge knows it from a mere error.
IMPLAUSIBLE = "implausible value"


def implausible_reading(value: object) -> bool:
    """True for the fact the plausibility pass put where a reading could not be."""
    return (
        isinstance(value, Unavailable)
        and value.reason is Reason.ERROR
        and value.detail.startswith(IMPLAUSIBLE)
    )


NOT_SUPPORTED = Unavailable(Reason.NOT_SUPPORTED)

# ``Measured[int]`` is an int or the reason it is missing. Written with
# ``Union`` (not ``|``) because the JSON decoder evaluates these hints at run
# time on Python 3.9.
Measured = Union[T, Unavailable]


def known(value: Measured[T]) -> bool:
    """True when ``value`` was measured."""
    return not isinstance(value, Unavailable)


class NvmlStatus(str, enum.Enum):
    """How far we got talking to the driver through NVML (or its captured stand-in)."""

    OK = "ok"
    LIBRARY_NOT_FOUND = "library_not_found"  # libnvidia-ml.so.1 absent: no user-space driver
    DRIVER_NOT_LOADED = "driver_not_loaded"  # library present, kernel module not loaded
    DRIVER_MISMATCH = "driver_mismatch"  # "Driver/library version mismatch"
    NO_PERMISSION = "no_permission"
    NO_DEVICES = "no_devices"  # driver answered, no GPU found
    ERROR = "error"
    NOT_MEASURED = "not_measured"  # e.g. a capture without nvidia-smi output


class GpuStatus(str, enum.Enum):
    """Whether a GPU answered when asked."""

    OK = "ok"
    LOST = "lost"  # NVML_ERROR_GPU_IS_LOST / "fallen off the bus"
    ERROR = "error"  # present but its handle could not be read


# The kinds a host holds by the hundred or thousand (a default burn: 2,400 samples) keep
# slots, not a dict each: the controller holds every host's until its report. Python 3.9
# (which the agent still runs on) has no dataclass slots; there they keep the dict.
_MANY_PER_HOST: dict[str, bool] = {"slots": True} if sys.version_info >= (3, 10) else {}


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


@dataclass(frozen=True)
class XidEvent:
    """One Xid (or NVSwitch SXid) line from the kernel log."""

    xid: int
    pci_bus_id: str  # as the line gives it, e.g. 0000:9b:00 (no function number)
    message: str
    timestamp: Optional[str] = None  # ISO 8601 where the log gave a wall-clock time
    uptime_s: Optional[float] = None  # where the log gave seconds since boot
    pid: Optional[str] = None
    process: Optional[str] = None
    nvswitch: bool = False  # SXid from nvidia-nvswitchN


# How far back the kernel log is read for Xids, unless the policy says otherwise.
DEFAULT_XID_WINDOW_HOURS = 24.0


# Kernel-log faults other than Xid lines, by kind (KernelFault.kind).
KERNEL_FAULT_KINDS: Tuple[str, ...] = (
    "rm_init_adapter_failed",  # NVRM: RmInitAdapter failed: the GPU did not initialise
    "fallen_off_bus",  # NVRM: GPU ... has fallen off the bus (with or without an Xid 79)
    "gsp_timeout",  # GSP firmware did not answer an RPC in time
    "gsp_error",  # GSP firmware failed to boot or reported an error
    "ecc",  # NVRM: ... ECC error lines outside an Xid
)


@dataclass(frozen=True)
class KernelFault:
    """One kernel-log line that shows a GPU fault without being an Xid line."""

    kind: str  # one of KERNEL_FAULT_KINDS
    pci_bus_id: str  # as the line gives it ("0000:9b:00"); "" when the line names none
    message: str
    timestamp: Optional[str] = None  # ISO 8601 where the log gave a wall-clock time
    uptime_s: Optional[float] = None  # where the log gave seconds since boot


@dataclass(frozen=True)
class KernelLogFacts:
    """Xid (and SXid) events and other GPU faults in the kernel log within a time window."""

    source: str  # "dmesg", "journalctl", a capture file name, or "scenario"
    window_hours: Optional[float]  # None: the whole log given
    events: Measured[Tuple[XidEvent, ...]] = NOT_MEASURED
    faults: Measured[Tuple[KernelFault, ...]] = NOT_MEASURED


@dataclass(frozen=True)
class ToolFacts:
    """The user-space pieces an operator pins: nvidia-smi, nvcc, cuDNN."""

    nvidia_smi_driver_version: Measured[str] = NOT_MEASURED
    nvidia_smi_cuda_version: Measured[str] = NOT_MEASURED
    nvidia_smi_error: Optional[str] = None  # what nvidia-smi printed instead of a table
    nvcc_version: Measured[str] = NOT_MEASURED  # release.patch, e.g. 12.4.131
    nvcc_path: Optional[str] = None
    cudnn_version: Measured[str] = NOT_MEASURED  # 9.6.0
    cudnn_source: Optional[str] = None  # header path, library path or package
    cudnn_cuda_major: Measured[int] = NOT_MEASURED  # CUDA major cuDNN was built for


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


@dataclass(frozen=True)
class SourceConflict:
    """Two of a node's sources disagree about one thing, or one source is cut short.

    A captured bundle holds several views of the same GPUs (``nvidia-smi -q``,
    ``-q -x``, the banner, ``lspci``); facts read from views that contradict each
    other are not facts. The judge makes each conflict a required finding.
    """

    what: str  # driver_version | gpu_count | gpu_name | pci_bus_id | truncated | ...
    detail: str  # one sentence: which files say what
    sources: Tuple[str, ...] = ()  # the files (or sources) involved
    proves_fault: bool = False  # the files prove a fault (FAIL), not just disagree (UNKNOWN)


class DcgmOutcome(str, enum.Enum):
    """How one DCGM diagnostic test came out for one GPU (or for the node)."""

    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"  # DCGM skipped it: never a pass
    NOT_RUN = "not_run"  # listed, but DCGM did not run it (an earlier failure, a timeout)


@dataclass(frozen=True)
class DcgmTestResult:
    """One test's result, for one GPU or (``gpu_index`` None) for the whole node."""

    test: str  # lower snake case, as DCGM 4 names plugins: memory, pcie, sm_stress, ...
    outcome: DcgmOutcome
    category: str = ""  # deployment | integration | hardware | stress (as DCGM groups them)
    gpu_index: Optional[int] = None
    message: str = ""  # DCGM's own words (warning, error or info), one line
    error_id: Optional[int] = None  # DCGM_FR_* number, where the output gives it


@dataclass(frozen=True)
class DcgmDiag:
    """A DCGM diagnostic run (``dcgmi diag -r LEVEL -j``), or why there is none."""

    level: Optional[int]  # as run; None: a recorded output that does not say
    source: str  # the command line, a capture file name, or "scenario"
    version: Measured[str] = NOT_MEASURED  # DCGM's version, where the output says
    results: Measured[Tuple[DcgmTestResult, ...]] = NOT_MEASURED  # why not, when not run
    elapsed_s: Optional[float] = None  # how long dcgmi ran, where it ran here


# ---------------------------------------------------------------- interconnect
#
# Bandwidths are GB/s of 10^9 bytes, as nvbandwidth and nccl-tests print them.


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


@dataclass(frozen=True)
class NodeFacts:
    """Everything measured about one node, from one source."""

    hostname: str
    source: str  # live | capture | simulate
    source_detail: str = ""  # capture directory or scenario name
    collected_at: str = ""  # ISO 8601 UTC
    schema_version: int = SCHEMA_VERSION
    os_name: Measured[str] = NOT_MEASURED
    kernel: Measured[str] = NOT_MEASURED
    nvml_status: NvmlStatus = NvmlStatus.NOT_MEASURED
    nvml_detail: str = ""
    driver_version: Measured[str] = NOT_MEASURED  # user-space driver (NVML / nvidia-smi)
    cuda_driver_version: Measured[str] = NOT_MEASURED  # CUDA version the driver supports, "12.4"
    kernel_module_version: Measured[str] = NOT_MEASURED  # /proc/driver/nvidia/version
    pci_gpu_count: Measured[int] = NOT_MEASURED  # NVIDIA display/3D controllers on the PCI bus
    pci_nvswitch_count: Measured[int] = NOT_MEASURED
    gpus: Tuple[GpuFacts, ...] = ()
    tools: ToolFacts = field(default_factory=ToolFacts)
    kernel_log: KernelLogFacts = field(
        default_factory=lambda: KernelLogFacts(source="none", window_hours=None)
    )
    burn: Optional[BurnResult] = None  # None: no burn-in was asked for
    dcgm: Optional[DcgmDiag] = None  # None: no DCGM diagnostic asked for or recorded
    interconnect: Optional[Interconnect] = None  # None: not asked for and not recorded
    # Where the node's sources contradict each other (a captured bundle's files).
    source_conflicts: Tuple[SourceConflict, ...] = ()


# Where a node's facts came from: its own GPUs (live), a recorded bundle (capture) or a
# scenario (simulate). Certificates, history rows and reports carry it, so a simulated
# node's verdict is never taken for a real host's.
PROVENANCES: Tuple[str, ...] = ("live", "capture", "simulate")
# A source outside PROVENANCES (a forged or damaged agent's): never read as one of them.
UNKNOWN_PROVENANCE = "unknown"


def provenance_of(facts: NodeFacts) -> str:
    """``live``, ``capture`` or ``simulate``; ``unknown`` for any other source a node reported."""
    return facts.source if facts.source in PROVENANCES else UNKNOWN_PROVENANCE


class Severity(str, enum.Enum):
    """How a check came out."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"  # could not be measured or judged: never a pass


class Verdict(str, enum.Enum):
    """The node's outcome."""

    CERTIFIED = "CERTIFIED"
    NOT_CERTIFIED = "NOT_CERTIFIED"
    UNKNOWN = "UNKNOWN"  # nothing could be judged (no driver, no GPU, unreachable)


def overall_verdict(verdicts: typing.Iterable[Verdict]) -> Verdict:
    """The verdict of a whole run from its nodes' verdicts, the one rule for every command.

    CERTIFIED only when every node is; UNKNOWN when no node could be judged (or
    there is none); anything else, a mix of CERTIFIED and UNKNOWN included,
    NOT_CERTIFIED: one node that could not be judged keeps a fleet from being
    certified without hiding the nodes that were.
    """
    seen = set(verdicts)
    if not seen or seen == {Verdict.UNKNOWN}:
        return Verdict.UNKNOWN
    if seen == {Verdict.CERTIFIED}:
        return Verdict.CERTIFIED
    return Verdict.NOT_CERTIFIED


class CheckFamily(str, enum.Enum):
    """The family a check belongs to: the part of its id before the dot (``memory.capacity``)."""

    INVENTORY = "inventory"
    VERSIONS = "versions"
    STATE = "state"
    MEMORY = "memory"
    POWER = "power"
    THERMAL = "thermal"
    PCIE = "pcie"
    NVLINK = "nvlink"
    ERRORS = "errors"
    BURN = "burn"
    DCGM = "dcgm"
    INTERCONNECT = "interconnect"
    FLEET = "fleet"
    DRIFT = "drift"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, check: str) -> CheckFamily | None:
        """The family of a check id; None for an id outside every family."""
        family, _, _ = check.partition(".")
        try:
            return cls(family)
        except ValueError:
            return None


class Action(str, enum.Enum):
    """What the operator should do about a finding, from the least disruptive to the most.

    Each non-PASS finding carries one (``validator.judge.actions`` fills it in where a
    check does not choose); PASS findings carry NONE.
    """

    NONE = "none"
    RERUN = "rerun"  # the check could not tell: run it again (after fixing what blocked it)
    FIX_SOFTWARE = "fix_software_stack"  # driver, CUDA, cuDNN, DCGM, settings: reprovision
    REBOOT = "reboot"
    RESET_GPU = "reset_gpu"  # nvidia-smi -r (or the node's reboot) with the GPU drained
    CHECK_COOLING_POWER = "check_cooling_or_power"
    RESEAT_CABLE_RISER = "reseat_or_replace_cable_or_riser"
    DRAIN_RMA = "drain_and_rma"

    def __str__(self) -> str:
        return self.value


# The actions that send a technician to the hardware (or its vendor): a GPU failing
# with one of these gets an RMA evidence file (validator.report.rma).
HARDWARE_ACTIONS: Tuple[Action, ...] = (
    Action.RESET_GPU,
    Action.CHECK_COOLING_POWER,
    Action.RESEAT_CABLE_RISER,
    Action.DRAIN_RMA,
)

# What each action asks of the operator, in the words every report and finding uses
# (one mapping, so the terminal, HTML, JUnit, RMA files and messages never differ).
ACTION_WORDS: Dict[Action, str] = {
    Action.NONE: "nothing to do",
    Action.RERUN: "run it again",
    Action.FIX_SOFTWARE: "fix the software stack",
    Action.REBOOT: "reboot the node",
    Action.RESET_GPU: "reset the GPU",
    Action.CHECK_COOLING_POWER: "check cooling and power",
    Action.RESEAT_CABLE_RISER: "reseat or replace the cable or riser",
    Action.DRAIN_RMA: "drain and RMA",
}


@dataclass(frozen=True, **_MANY_PER_HOST)
class Finding:
    """What one check concluded, for the node or for one GPU."""

    check: str  # family.name, e.g. "memory.capacity"
    severity: Severity
    message: str  # one readable sentence
    observed: str = ""
    expected: str = ""
    gpu_index: Optional[int] = None
    gpu_uuid: Optional[str] = None
    required: bool = True  # an UNKNOWN on a required check blocks certification
    action: Action = Action.NONE  # what to do about it (NONE on a PASS)
    action_source: str = ""  # where the action comes from, e.g. NVIDIA's Xid catalog


@dataclass(frozen=True)
class NodeResult:
    """One node judged: its facts, the findings, the verdict."""

    hostname: str
    verdict: Verdict
    facts: NodeFacts
    findings: Tuple[Finding, ...]
    sku: Optional[str] = None  # catalog id the node was judged against
    policy_digest: str = ""
    summary: str = ""  # one line: why this verdict
    transport: str = "local"  # local | ssh | ansible
    agent_stderr: str = ""  # what the agent printed on stderr, kept for the operator
    elapsed_s: float = 0.0  # from connect to facts back


@dataclass(frozen=True)
class SkuFleetStats:
    """Burn-in speed across the fleet for one GPU model."""

    sku: str
    gpus: int  # GPUs with a measured burn-in figure
    median_tflops: float
    mad_tflops: float  # median absolute deviation
    threshold_tflops: float  # below this a GPU is flagged (policy share of the median)


@dataclass(frozen=True)
class FleetSummary:
    """The fleet as a whole: counts by verdict and each model's speed statistics."""

    hosts: int
    certified: int
    not_certified: int
    unknown: int
    skus: Tuple[SkuFleetStats, ...] = ()
    interrupted: bool = False  # the run was stopped (Ctrl-C) before every host finished


@dataclass(frozen=True)
class Report:
    """The acceptance report: one or many nodes."""

    generated_at: str
    tool_version: str
    nodes: Tuple[NodeResult, ...]
    schema_version: int = SCHEMA_VERSION
    fleet: Optional[FleetSummary] = None  # set when more than one host was certified


# ---------------------------------------------------------------- drift


class DriftCheck(str, enum.Enum):
    """One drift check (a finding's ``check``), in report order."""

    BASELINE = "drift.baseline"  # no certificate: never certified (UNKNOWN, not drift)
    CERTIFICATE = "drift.certificate"  # a certificate that failed its check: not trusted (FAIL)
    DRIVER = "drift.driver"
    CUDA = "drift.cuda"
    KERNEL_MODULE = "drift.kernel_module"
    NVCC = "drift.nvcc"
    CUDNN = "drift.cudnn"
    GPU_ADDED = "drift.gpu_added"
    GPU_REMOVED = "drift.gpu_removed"
    GPU_SWAPPED = "drift.gpu_swapped"
    VBIOS = "drift.vbios"
    POWER_LIMIT = "drift.power_limit"
    PCIE_GEN = "drift.pcie_gen"
    PCIE_WIDTH = "drift.pcie_width"
    ECC = "drift.ecc"
    ROW_REMAP = "drift.row_remap"
    RETIRED_PAGES = "drift.retired_pages"
    PERSISTENCE = "drift.persistence"
    XID = "drift.xid"
    NVLINK = "drift.nvlink"  # a link down or slower than certified
    NVLINK_ERRORS = "drift.nvlink_errors"  # link error counters grew since certification
    PCIE_REPLAY = "drift.pcie_replay"  # PCIe replays grew since certification
    RECOVERY_ACTION = "drift.recovery_action"  # the driver now asks for a reset or reboot
    DCGM = "drift.dcgm"  # a DCGM test that passed at certification no longer does
    INTERCONNECT = "drift.interconnect"  # a copy, peer or all-reduce bandwidth fell
    BURN = "drift.burn"

    def __str__(self) -> str:
        return self.value


# Every drift check, in report order; the Prometheus file lists each (0 when clean).
DRIFT_CHECKS: Tuple[str, ...] = tuple(check.value for check in DriftCheck)


class DriftState(str, enum.Enum):
    """A node's drift state, as the Prometheus file and the terminal name it."""

    OK = "ok"  # as certified
    DRIFT = "drift"  # something moved, or the certificate is not trusted (drift.certificate)
    UNKNOWN = "unknown"  # could not be shown unchanged
    NEVER_CERTIFIED = "never_certified"  # no certificate to compare with


def drift_findings(findings: typing.Iterable[Finding]) -> list[Finding]:
    """The findings that are drift (FAIL)."""
    return [finding for finding in findings if finding.severity is Severity.FAIL]


def never_certified(result: NodeResult) -> bool:
    """True for a drift result of a node without a certificate (its baseline finding)."""
    return any(f.check == DriftCheck.BASELINE for f in result.findings)


def drift_state(result: NodeResult) -> DriftState:
    """The node's drift state, from its drift result."""
    if result.verdict is Verdict.CERTIFIED:
        return DriftState.OK
    if result.verdict is Verdict.NOT_CERTIFIED:
        return DriftState.DRIFT
    return DriftState.NEVER_CERTIFIED if never_certified(result) else DriftState.UNKNOWN


# ---------------------------------------------------------------- reaching a host


class TransportName(str, enum.Enum):
    """The ways of reaching a host."""

    LOCAL = "local"
    SSH = "ssh"
    ANSIBLE = "ansible"

    def __str__(self) -> str:
        return self.value


# Every transport's name: what gpuready_transport and --transport accept.
TRANSPORTS: Tuple[str, ...] = tuple(name.value for name in TransportName)


@dataclass(frozen=True)
class HostSpec:
    """One inventory host, as the transports need it. No secret is ever held here."""

    name: str  # the inventory name; reports use it
    address: str  # ansible_host, else the name
    port: Optional[int] = None  # ansible_port; None: ssh config / 22
    user: Optional[str] = None  # ansible_user; None: ssh config / current user
    key_file: Optional[str] = None  # ansible_ssh_private_key_file
    python: str = "python3"  # ansible_python_interpreter
    simulate: Optional[str] = None  # gpuready_simulate: scenario name or a path on the host
    vars: typing.Mapping[str, object] = field(default_factory=dict)  # every gpuready_* var


# ---------------------------------------------------------------- JSON codec


def to_dict(obj: Any) -> Any:  # noqa: PLR0911
    """Turn a model object into plain JSON-ready data."""
    kind = type(obj)
    if kind in _PLAIN:
        return obj
    names = _FIELD_NAMES.get(kind)
    if names is not None:
        # Plain values are tested here rather than in a call each: they are most of a
        # result's hundreds of thousands of values, and a call costs more than the test.
        out: Dict[str, Any] = {}
        for name in names:
            value = getattr(obj, name)
            out[name] = value if type(value) in _PLAIN else to_dict(value)
        return out
    if kind in _ENUM_TYPES:
        return obj.value
    if isinstance(obj, Unavailable):
        unavailable: Dict[str, Any] = {"unavailable": obj.reason.value}
        if obj.detail:
            unavailable["detail"] = obj.detail
        return unavailable
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Field names once per class: a fleet's results hold hundreds of thousands of objects.
        _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(obj))
        return to_dict(obj)
    if isinstance(obj, enum.Enum):
        _ENUM_TYPES.add(kind)  # a result holds hundreds of severities and actions
        return obj.value
    if isinstance(obj, (list, tuple)):
        return [item if type(item) in _PLAIN else to_dict(item) for item in obj]
    if isinstance(obj, dict):
        return {str(key): to_dict(value) for key, value in obj.items()}
    return obj


Held = TypeVar("Held")
Kept = TypeVar("Kept")


class KeptPerObject(Generic[Held, Kept]):
    """A value kept for each model object while the object lives.

    Keyed by the object's identity, not its equality (hashing a frozen dataclass hashes
    every field it holds, a burn's thousands of samples too), with a weak reference so
    an entry goes with its object.

    No lock: each access is one dict operation, atomic in CPython. A lock would
    deadlock, as the weak reference's callback runs wherever a collection happens,
    in the same thread too (an allocation while the lock is held). The callback
    removes only its own entry; in a race it may remove a newer one, which costs
    making the value again, never a wrong value (an entry counts only for the
    object it was kept for).
    """

    def __init__(self) -> None:
        self._entries: Dict[int, Tuple[weakref.ref[Held], Kept]] = {}

    def get(self, item: Held) -> Optional[Kept]:
        """The value kept for ``item``, or None."""
        entry = self._entries.get(id(item))
        if entry is not None and entry[0]() is item:
            return entry[1]
        return None

    def keep(self, item: Held, value: Kept) -> None:
        """Keep ``value`` for ``item`` from now on, while it lives."""
        key = id(item)
        entries = self._entries

        def forget(ref: object, key: int = key) -> None:
            current = entries.get(key)
            if current is not None and current[0] is ref:
                entries.pop(key, None)

        entries[key] = (weakref.ref(item, forget), value)


# Exactly these types (not subclasses: an enum may subclass str) come out as they are.
_PLAIN = frozenset({str, int, float, bool, type(None)})
_FIELD_NAMES: Dict[type, Tuple[str, ...]] = {}
_ENUM_TYPES: typing.Set[type] = set()


class SchemaError(ValueError):
    """JSON that does not fit the model; the one-line message names the path."""


def from_dict(cls: type[T], data: Any) -> T:
    """Build a model object of type ``cls`` from :func:`to_dict` output.

    The dataclasses' type hints are the declaration; every value is checked with the
    words of :mod:`validator.fields`: an unknown field names the closest known one, a
    number must be finite (NaN and infinity are refused), and a bad value is shown only
    as a short excerpt. Parse JSON text with :func:`validator.fields.load_json`, which
    also refuses a key given twice.

    Raises:
        SchemaError: when ``data`` does not fit, naming where.
    """
    return typing.cast(T, _decode(cls, data, cls.__name__))


_HINTS: Dict[type, Dict[str, Any]] = {}
_REQUIRED: Dict[type, Tuple[str, ...]] = {}


def _hints(cls: type) -> Dict[str, Any]:
    if cls not in _HINTS:
        module = sys.modules[cls.__module__]
        hints = typing.get_type_hints(cls, vars(module))
        # _REQUIRED first: a thread that sees the hints must find the required names too.
        _REQUIRED[cls] = tuple(
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        _HINTS[cls] = hints
    return _HINTS[cls]


def _decoder_for(tp: Any) -> Decoder:
    """The one decoder of ``tp``, made on first use.

    Made eagerly for a type's parts, so that decoding a value never looks a type
    up (hashing a typing Union for each value cost a third of decoding a host's
    facts). Safe for a dataclass that holds its own type: a dataclass's decoder
    finds its fields' decoders only when it first decodes.
    """
    decoder = _DECODERS.get(tp)
    if decoder is None:
        decoder = _DECODERS[tp] = _make_decoder(tp)
    return decoder


def _wrong(path: str, wanted: str, data: Any) -> SchemaError:
    return SchemaError(fields.must_be(path, wanted, data))


Decoder = typing.Callable[[Any, str], Any]
# One decoder per type, built on first use: the controller decodes every host's facts
# (thousands of values each), and working out a type's shape again for every value
# cost more than checking the values.
_DECODERS: Dict[Any, Decoder] = {}


def _decode(tp: Any, data: Any, path: str) -> Any:
    return _decoder_for(tp)(data, path)


def _make_decoder(tp: Any) -> Decoder:  # noqa: PLR0911
    origin = typing.get_origin(tp)
    if origin is Union:
        return _union_decoder(typing.get_args(tp))
    if origin in (tuple, list):
        args = typing.get_args(tp)
        return _sequence_decoder(args[0] if args else Any, origin is tuple)
    if origin is dict:
        value_decoder = _decoder_for(typing.get_args(tp)[1])

        def decode_dict(data: Any, path: str) -> Any:
            if not isinstance(data, dict):
                raise _wrong(path, "an object", data)
            try:
                return {key: value_decoder(value, path) for key, value in data.items()}
            except SchemaError:  # again, each value at its own path, for the message
                return {
                    key: value_decoder(value, fields.child_path(path, key))
                    for key, value in data.items()
                }

        return decode_dict
    if tp is Unavailable:
        return _unavailable
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_decoder(tp)
    if tp is Any:
        return lambda data, path: data
    if tp in _SCALARS:
        return _SCALARS[tp]

    def cannot(data: Any, path: str) -> Any:
        raise SchemaError(f"{path}: cannot decode type {tp!r}")

    return cannot


def _union_decoder(options: Tuple[Any, ...]) -> Decoder:
    may_be_unavailable = Unavailable in options
    may_be_none = type(None) in options
    others = [
        _decoder_for(option)
        for option in options
        if option is not type(None) and option is not Unavailable
    ]

    def decode_union(data: Any, path: str) -> Any:
        if may_be_unavailable and isinstance(data, dict) and "unavailable" in data:
            return _unavailable(data, path)
        if data is None and may_be_none:
            return None
        errors = []
        for option in others:
            try:
                return option(data, path)
            except SchemaError as exc:
                errors.append(str(exc))
        raise SchemaError(errors[0] if errors else fields.must_be(path, "a value", data))

    return decode_union


def _sequence_decoder(item_type: Any, as_tuple: bool) -> Decoder:
    item_decoder = _decoder_for(item_type)
    wanted = _as_is(item_type)

    def decode_sequence(data: Any, path: str) -> Any:
        if not isinstance(data, list):
            raise _wrong(path, "a list", data)
        try:
            if wanted is float:  # as in decode_dataclass: a finite float is taken as it is
                items = [
                    item if type(item) is float and item - item == 0.0 else item_decoder(item, path)
                    for item in data
                ]
            elif wanted is not None:
                items = [
                    item if type(item) is wanted else item_decoder(item, path) for item in data
                ]
            else:
                items = [item_decoder(item, path) for item in data]
        except SchemaError:  # again, each item at its own path, for the message
            items = [item_decoder(item, f"{path}[{i}]") for i, item in enumerate(data)]
        return tuple(items) if as_tuple else items

    return decode_sequence


def _enum_decoder(tp: Any) -> Decoder:
    def decode_enum(data: Any, path: str) -> Any:
        try:
            return tp(data)
        except (ValueError, TypeError):
            choices = ", ".join(str(member.value) for member in tp)
            raise _wrong(path, f"one of {choices}", data) from None

    return decode_enum


def _decode_float(data: Any, path: str) -> float:
    if not fields.is_number(data):
        raise _wrong(path, "a finite number" if isinstance(data, float) else "a number", data)
    return float(data)


def _decode_int(data: Any, path: str) -> int:
    if not fields.is_int(data):
        raise _wrong(path, "an integer", data)
    return typing.cast(int, data)


def _decode_str(data: Any, path: str) -> str:
    if not isinstance(data, str):
        raise _wrong(path, "a string", data)
    return data


def _decode_bool(data: Any, path: str) -> bool:
    if not isinstance(data, bool):
        raise _wrong(path, "true or false", data)
    return data


_SCALARS: Dict[Any, Decoder] = {
    float: _decode_float,
    int: _decode_int,
    str: _decode_str,
    bool: _decode_bool,
}


def _unavailable(data: Any, path: str) -> Unavailable:
    if not isinstance(data, dict) or "unavailable" not in data:
        raise _wrong(path, "an unavailable marker", data)
    try:
        reason = Reason(data["unavailable"])
    except (ValueError, TypeError):
        choices = ", ".join(member.value for member in Reason)
        raise _wrong(f"{path}.unavailable", f"one of {choices}", data["unavailable"]) from None
    detail = data.get("detail", "")
    if not isinstance(detail, str):
        raise _wrong(f"{path}.detail", "a string", detail)
    return Unavailable(reason, detail)


# Scalars a field's value is taken as it is when its type is exactly this (JSON's own
# types: json.loads makes no subclasses), with no call: most of a host's facts.
_AS_IS = (int, float, str, bool)


def _one_option(hint: Any) -> Any:
    """``hint`` without None and Unavailable when one type is left, else None."""
    if typing.get_origin(hint) is Union:
        options = [a for a in typing.get_args(hint) if a is not type(None) and a is not Unavailable]
        return options[0] if len(options) == 1 else None
    return hint


def _as_is(hint: Any) -> type | None:
    """The exact type a value of ``hint`` is taken as it is (None: always decoded)."""
    hint = _one_option(hint)
    return hint if hint in _AS_IS else None


def _is_str_tuple(hint: Any) -> bool:
    """Whether ``hint`` is a tuple of strings (measured or not): a list of them is taken whole."""
    hint = _one_option(hint)
    return typing.get_origin(hint) is tuple and typing.get_args(hint) == (str, ...)


# Values a host repeats by the thousand are kept once: a default burn's 2,400 samples
# read the same clocks, temperatures and throttle reasons again and again, and each
# decoded copy would be an object of its own (28 bytes an int, 24 a float, ~110 a
# reasons tuple), two fifths of a decoded host. Kept: integers, whole-number floats
# (never 0.0, which -0.0 equals) and tuples of strings, one table each (1 equals 1.0),
# each bounded, so a stream of distinct values cannot grow it without end.
_SHARED_MOST = 4096
_SHARED_INTS: Dict[int, int] = {}
_SHARED_FLOATS: Dict[float, float] = {}
_SHARED_STR_TUPLES: Dict[Tuple[str, ...], Tuple[str, ...]] = {}


def _shared(table: Dict[Any, Any], value: Any) -> Any:
    """The one copy of ``value`` kept in ``table`` (``value`` itself once the table is full)."""
    kept = table.get(value)
    if kept is not None:
        return kept
    if len(table) < _SHARED_MOST:
        table[value] = value
    return value


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How one dataclass is decoded: its fields, the required ones, each field's decoder."""

    known: frozenset[str]
    required: frozenset[str]
    decoders: Dict[str, Decoder]
    as_is: Dict[str, type]
    str_tuples: frozenset[str]  # fields holding a tuple of strings


def _plan_of(tp: type) -> _Plan:
    hints = _hints(tp)
    as_is = {name: wanted for name, hint in hints.items() if (wanted := _as_is(hint)) is not None}
    return _Plan(
        known=frozenset(hints),
        required=frozenset(_REQUIRED[tp]),
        decoders={name: _decoder_for(hint) for name, hint in hints.items()},
        as_is=as_is,
        str_tuples=frozenset(name for name, hint in hints.items() if _is_str_tuple(hint)),
    )


def _refuse_fields(tp: type, plan: _Plan, data: Dict[Any, Any], path: str) -> SchemaError:
    """Why ``data`` has not ``tp``'s fields: the first unknown one, else the first missing."""
    for name in data:
        if name not in plan.known:
            return SchemaError(
                fields.unknown(
                    fields.child_path(path, str(name)), list(_hints(tp)), "field", name=str(name)
                )
            )
    missing = next(name for name in _REQUIRED[tp] if name not in data)
    return SchemaError(fields.lacks(fields.child_path(path, missing), "field"))


def _dataclass_decoder(tp: type) -> Decoder:
    """``tp``'s decoder, writing a value's path out only when something in it is wrong.

    The values are decoded with the object's path, and on a refusal again with their
    own, for the message: a host's facts hold thousands of values, and formatting
    each one's path cost a fifth of decoding them.
    """
    plans: list[_Plan] = []  # made on the first decode: the type may hold itself

    # One function and its branches, no call per value: decoding the facts' thousands of
    # values is most of what the controller spends on a host.
    def decode_dataclass(data: Any, path: str) -> Any:  # noqa: PLR0912
        if not isinstance(data, dict):
            raise _wrong(path, f"an object for {tp.__name__}", data)
        if not plans:
            plans.append(_plan_of(tp))
        plan = plans[0]
        keys = data.keys()
        if not plan.known.issuperset(keys) or not plan.required <= keys:
            raise _refuse_fields(tp, plan, data, path)
        decoders, as_is, str_tuples = plan.decoders, plan.as_is, plan.str_tuples
        kwargs = {}
        try:
            for name, value in data.items():
                kind = type(value)
                if kind is not as_is.get(name):
                    if kind is list and name in str_tuples and all(type(v) is str for v in value):
                        kwargs[name] = _shared(_SHARED_STR_TUPLES, tuple(value))
                    else:
                        kwargs[name] = decoders[name](value, path)
                elif kind is int:  # the table asked first: no call for a value kept
                    kwargs[name] = _SHARED_INTS.get(value) or _shared(_SHARED_INTS, value)
                elif kind is not float:
                    kwargs[name] = value
                elif value - value != 0.0:  # NaN or infinity (a finite float gives 0.0)
                    kwargs[name] = decoders[name](value, path)  # which refuses it
                elif value and value.is_integer():
                    kwargs[name] = _SHARED_FLOATS.get(value) or _shared(_SHARED_FLOATS, value)
                else:
                    kwargs[name] = value
        except SchemaError:  # again, each value at its own path, for the message
            kwargs = {
                name: decoders[name](value, fields.child_path(path, name))
                for name, value in data.items()
            }
        try:
            return tp(**kwargs)
        except TypeError as exc:
            raise SchemaError(f"{path}: {one_line(exc, 200)}") from None

    return decode_dataclass
