"""The single NVML adapter: the only module that imports ``pynvml``.

Every NVML call goes through :func:`query`, which turns NVML's errors into
:class:`~validator.model.Unavailable` values, so that a device that does not
offer a reading, a GPU that fell off the bus or a missing permission becomes a
fact rather than a crash. :func:`read_nvml` reads the driver and every GPU into
an :class:`DriverReading`; it takes the library as an argument so that the same
code runs on ``pynvml`` and on :class:`validator.node.sim.fake_nvml.FakeNvml`.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Callable, SupportsInt, TypeVar, cast

from validator.model import (
    RECOVERY_ACTIONS,
    ErrorCounters,
    GpuFacts,
    GpuProcess,
    GpuStatus,
    Measured,
    NvLinkErrorCounts,
    NvLinkState,
    NvmlStatus,
    Reason,
    TelemetrySample,
    Unavailable,
    counters_of,
    decode_clock_event_reasons,
    unreadable_gpu,
)
from validator.node.parsers.smi_common import normalize_bus_id

T = TypeVar("T")

MIB = 1048576

LIBRARY_NOT_FOUND_DETAIL = (
    "libnvidia-ml.so.1 not found: no NVIDIA user-space driver on this machine"
)
PYNVML_MISSING_DETAIL = "nvidia-ml-py (pynvml) is not installed"

_COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
# NVML field ids (nvml.h), with the numbers as defaults for a pynvml that predates them:
# the ids are NVML's ABI, so an old binding on a new driver still reads them.
_FIELD_MEMORY_TEMP = ("NVML_FI_DEV_MEMORY_TEMP", 82)
_FIELD_NVLINK_SPEED_MBPS_COMMON = ("NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON", 90)
_FIELD_NVLINK_GET_SPEED = ("NVML_FI_DEV_NVLINK_GET_SPEED", 164)  # MBps, scoped by link
_FIELD_GPU_RECOVERY_ACTION = ("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", 230)
# nvmlGpuRecoveryAction_t by our names (RECOVERY_ACTIONS, in NVML's order 0..7).
_RECOVERY_ACTION_CONSTANTS = (
    ("NVML_GPU_RECOVERY_ACTION_NONE", 0),
    ("NVML_GPU_RECOVERY_ACTION_GPU_RESET", 1),
    ("NVML_GPU_RECOVERY_ACTION_NODE_REBOOT", 2),
    ("NVML_GPU_RECOVERY_ACTION_DRAIN_P2P", 3),
    ("NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET", 4),
    ("NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN", 5),
    ("NVML_GPU_RECOVERY_ACTION_BUS_RESET", 6),
    ("NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT", 7),
)
# nvmlNvLinkErrorCounter_t: the NvLinkErrorCounts field each counter fills.
_NVLINK_ERROR_COUNTERS = (
    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT", 2),
    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA", 3),
    ("replay", "NVML_NVLINK_ERROR_DL_REPLAY", 0),
    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY", 1),
)
_FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}


class GpuFabricInfo(ctypes.Structure):
    """nvmlGpuFabricInfo_t as nvml.h lays it out, filled by nvmlDeviceGetGpuFabricInfo.

    Its state is one byte (nvmlGpuFabricState_t is an unsigned char). pynvml's
    c_nvmlGpuFabricInfo_t reads four, the three bytes of padding after it included, which
    NVML need not clear: a registered GPU could read as state 0x??????03.
    """

    _c_name_ = "nvmlGpuFabricInfo_t"
    _fields_ = (
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),  # nvmlReturn_t
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint8),  # nvmlGpuFabricState_t
    )


@dataclass(frozen=True)
class DriverReading:
    """What NVML (or an nvidia-smi query captured in its place) told us of the driver and GPUs."""

    status: NvmlStatus
    detail: str
    driver_version: Measured[str]
    cuda_driver_version: Measured[str]  # "12.4" from nvmlSystemGetCudaDriverVersion 12040
    gpus: tuple[GpuFacts, ...]


def _const(lib: object, name: str, default: int) -> int:
    return int(getattr(lib, name, default))


def _error_type(lib: object) -> type[BaseException]:
    error = getattr(lib, "NVMLError", None)
    if isinstance(error, type) and issubclass(error, BaseException):
        return error
    # A library without NVMLError cannot signal NVML errors; catch nothing extra.
    return _NeverRaised


class _NeverRaised(Exception):
    """Stand-in exception type for a library that has no NVMLError."""


def unavailable_for_code(lib: object, code: int, what: str, text: str = "") -> Unavailable:
    """The :class:`Unavailable` an NVML return code stands for.

    Args:
        lib: pynvml or a look-alike (for the code constants).
        code: the NVML return code.
        what: the NVML call, named in the detail.
        text: NVML's own words for the error, if known.
    """
    if code in (
        _const(lib, "NVML_ERROR_NOT_SUPPORTED", 3),
        _const(lib, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
    ):
        return Unavailable(Reason.NOT_SUPPORTED, what)
    if code == _const(lib, "NVML_ERROR_GPU_IS_LOST", 15):
        return Unavailable(Reason.GPU_LOST, f"{what}: GPU is lost")
    if code == _const(lib, "NVML_ERROR_NO_PERMISSION", 4):
        return Unavailable(Reason.NO_PERMISSION, f"{what}: insufficient permissions")
    return Unavailable(Reason.ERROR, f"{what}: {text or f'NVML error {code}'}")


def _function(lib: object, name: str) -> Callable[..., object]:
    """A library function by name (a look-alike lacking it fails like a missing symbol)."""
    func = getattr(lib, name, None)
    if not callable(func):
        raise AttributeError(f"{lib!r} has no NVML function {name}")
    return cast(Callable[..., object], func)


def _int(value: object) -> int:
    """An integer NVML returned (c_uint and friends arrive as int)."""
    return int(cast(SupportsInt, value))


def _decode(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    return value


def query(lib: object, func_name: str, *args: object) -> object:
    """Call one NVML function; its NVML error comes back as an :class:`Unavailable`.

    NOT_SUPPORTED and FUNCTION_NOT_FOUND (and a pynvml too old to have the
    function) become NOT_SUPPORTED, GPU_IS_LOST becomes GPU_LOST,
    NO_PERMISSION stays NO_PERMISSION, anything else is ERROR with NVML's
    message. Bytes are decoded to str.

    Args:
        lib: pynvml or a look-alike.
        func_name: the pynvml function, e.g. "nvmlDeviceGetName".
        *args: its arguments, in pynvml's order.

    Returns:
        The function's result, or the reason it has none.
    """
    return _call(lib, func_name, *args)[0]


def _call(lib: object, func_name: str, *args: object) -> tuple[object, int | None]:
    """Like :func:`query`, also giving the NVML return code of a failure."""
    func = getattr(lib, func_name, None)
    if not callable(func):
        return Unavailable(Reason.NOT_SUPPORTED, f"{func_name}: not in this pynvml"), None
    try:
        result = func(*args)
    except _error_type(lib) as err:
        code = getattr(err, "value", None)
        if not isinstance(code, int):
            return Unavailable(Reason.ERROR, f"{func_name}: {err}"), None
        return unavailable_for_code(lib, code, func_name, str(err)), code
    return _decode(result), None


def cuda_version_text(version: int) -> str:
    """NVML's CUDA version number as text: 12040 -> "12.4"."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def normalise_bus_id(bus_id: str) -> str:
    """A PCI bus id as NVML prints it (00000000:18:00.0), as the parsers write it too."""
    return normalize_bus_id(bus_id) or bus_id.strip().upper()


def _init_failure(lib: object, err: BaseException) -> tuple[NvmlStatus, str]:
    code = getattr(err, "value", None)
    text = str(err)
    if code == _const(lib, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
        return NvmlStatus.LIBRARY_NOT_FOUND, LIBRARY_NOT_FOUND_DETAIL
    if code == _const(lib, "NVML_ERROR_DRIVER_NOT_LOADED", 9):
        return (
            NvmlStatus.DRIVER_NOT_LOADED,
            "NVIDIA driver not loaded: libnvidia-ml is present but the kernel module is not",
        )
    if code == _const(lib, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18):
        return (
            NvmlStatus.DRIVER_MISMATCH,
            "driver/library version mismatch: the loaded kernel module and user-space NVML "
            "differ (reboot or reload the nvidia module)",
        )
    if code == _const(lib, "NVML_ERROR_NO_PERMISSION", 4):
        return NvmlStatus.NO_PERMISSION, f"nvmlInit: insufficient permissions ({text})"
    return NvmlStatus.ERROR, f"nvmlInit failed: {text}"


def _failed(status: NvmlStatus, detail: str) -> DriverReading:
    missing = Unavailable(Reason.NOT_MEASURED, detail)
    return DriverReading(status, detail, missing, missing, ())


def _import_pynvml() -> object | None:
    try:
        import pynvml
    except ImportError:
        return None
    return cast(object, pynvml)


@contextlib.contextmanager
def nvml_session(lib: object | None = None) -> Iterator[object]:
    """NVML initialised for the length of a ``with`` block (the burn-in's sampler).

    Raises:
        RuntimeError: NVML cannot be initialised; the message says why.
    """
    if lib is None:
        lib = _import_pynvml()
        if lib is None:
            raise RuntimeError(PYNVML_MISSING_DETAIL)
    error = _error_type(lib)
    try:
        _function(lib, "nvmlInit")()
    except error as err:
        raise RuntimeError(_init_failure(lib, err)[1]) from None
    try:
        yield lib
    finally:
        with contextlib.suppress(error):
            _function(lib, "nvmlShutdown")()


def sample_gpu(lib: object, index: int, t_s: float) -> TelemetrySample:
    """One telemetry tick of one GPU: power, temperatures, clocks, utilisation, reasons.

    Args:
        lib: pynvml or a look-alike, already initialised.
        index: the NVML device index.
        t_s: seconds since the burn started, stamped on the sample.
    """
    handle = query(lib, "nvmlDeviceGetHandleByIndex", index)
    if isinstance(handle, Unavailable):
        return TelemetrySample(
            t_s=t_s,
            power_w=handle,
            temperature_gpu_c=handle,
            temperature_memory_c=handle,
            sm_clock_mhz=handle,
            mem_clock_mhz=handle,
            utilization_pct=handle,
            clock_event_reasons=handle,
        )
    r = _GpuReader(lib, handle)
    c = r.const
    return TelemetrySample(
        t_s=t_s,
        power_w=_as(_watts, r.q("nvmlDeviceGetPowerUsage")),
        temperature_gpu_c=_as(float, r.q("nvmlDeviceGetTemperature", c("NVML_TEMPERATURE_GPU", 0))),
        temperature_memory_c=_memory_temperature(r),
        sm_clock_mhz=_as(int, r.q("nvmlDeviceGetClockInfo", c("NVML_CLOCK_SM", 1))),
        mem_clock_mhz=_as(int, r.q("nvmlDeviceGetClockInfo", c("NVML_CLOCK_MEM", 2))),
        utilization_pct=_as(lambda u: int(u.gpu), r.q("nvmlDeviceGetUtilizationRates")),
        clock_event_reasons=_clock_event_reasons(r),
    )


def utilisation(lib: object, index: int) -> tuple[Measured[int], Measured[int]]:
    """One GPU's utilisation now: (compute %, memory-controller %).

    nvmlDeviceGetUtilizationRates's ``gpu`` and ``memory`` (nvidia-smi's utilization.gpu
    and utilization.memory), for the interconnect's idle gate: DCGM's nvbandwidth plugin
    refuses to measure a GPU whose memory controller is busy.

    Args:
        lib: pynvml or a look-alike, already initialised.
        index: the NVML device index.
    """
    handle = query(lib, "nvmlDeviceGetHandleByIndex", index)
    if isinstance(handle, Unavailable):
        return handle, handle
    rates = query(lib, "nvmlDeviceGetUtilizationRates", handle)
    if isinstance(rates, Unavailable):
        return rates, rates
    return _as(lambda u: int(u.gpu), rates), _as(lambda u: int(u.memory), rates)


def read_counters(lib: object, index: int) -> ErrorCounters:
    """The error counters of one GPU now, to compare before and after the burn-in."""
    return counters_of(read_gpu(lib, index))


def read_nvml(lib: object | None = None) -> DriverReading:
    """Read the driver and every GPU through NVML.

    Never raises for anything NVML reports: a missing library, a driver not
    loaded or mismatched, and a lost GPU all come back as statuses.

    Args:
        lib: pynvml or a look-alike; None imports pynvml.

    Returns:
        The reading, with one :class:`GpuFacts` per GPU NVML counts.
    """
    if lib is None:
        lib = _import_pynvml()
        if lib is None:
            return _failed(NvmlStatus.LIBRARY_NOT_FOUND, PYNVML_MISSING_DETAIL)
    error = _error_type(lib)
    try:
        _function(lib, "nvmlInit")()
    except error as err:
        return _failed(*_init_failure(lib, err))
    try:
        return _read_initialised(lib)
    finally:
        # Shutting down is best effort; the reading is already made.
        with contextlib.suppress(error):
            _function(lib, "nvmlShutdown")()


def _read_initialised(lib: object) -> DriverReading:
    driver = query(lib, "nvmlSystemGetDriverVersion")
    driver_version: Measured[str] = driver if isinstance(driver, Unavailable) else str(driver)
    cuda = query(lib, "nvmlSystemGetCudaDriverVersion")
    cuda_version: Measured[str] = (
        cuda if isinstance(cuda, Unavailable) else cuda_version_text(_int(cuda))
    )
    count = query(lib, "nvmlDeviceGetCount")
    if isinstance(count, Unavailable):
        return DriverReading(NvmlStatus.ERROR, str(count), driver_version, cuda_version, ())
    gpu_count = _int(count)
    if gpu_count == 0:
        return DriverReading(
            NvmlStatus.NO_DEVICES,
            "NVML is up but counts no GPU",
            driver_version,
            cuda_version,
            (),
        )
    gpus = tuple(read_gpu(lib, index) for index in range(gpu_count))
    return DriverReading(
        NvmlStatus.OK, f"NVML counts {gpu_count} GPU(s)", driver_version, cuda_version, gpus
    )


class _GpuReader:
    """Queries one GPU; once it answers GPU_IS_LOST, stops asking."""

    def __init__(self, lib: object, handle: object) -> None:
        self.lib = lib
        self.handle = handle
        self.lost: Unavailable | None = None

    def q(self, func_name: str, *args: object) -> object:
        return self.q_code(func_name, *args)[0]

    def q_code(self, func_name: str, *args: object) -> tuple[object, int | None]:
        if self.lost is not None:
            return Unavailable(Reason.GPU_LOST, "GPU stopped answering earlier in this read"), None
        result, code = _call(self.lib, func_name, self.handle, *args)
        if isinstance(result, Unavailable) and result.reason is Reason.GPU_LOST:
            self.lost = result
        return result, code

    def const(self, name: str, default: int) -> int:
        return _const(self.lib, name, default)


def _as(convert: Callable[[Any], T], value: object) -> Measured[T]:
    """``convert(value)``, or the value itself when it is an :class:`Unavailable`."""
    return value if isinstance(value, Unavailable) else convert(value)


def _pick(value: object, position: int, convert: Callable[[Any], T]) -> Measured[T]:
    """``convert(value[position])`` for a tuple-returning call, or why not."""
    if isinstance(value, Unavailable):
        return value
    return convert(cast(Sequence[Any], value)[position])


def _watts(milliwatts: int) -> float:
    return int(milliwatts) / 1000.0


PROCESSES_KEPT = 64  # a GPU shared by more is busy all the same


def _processes(r: _GpuReader) -> Measured[tuple[GpuProcess, ...]]:
    """The GPU's compute processes: pid and memory (a name is the host's: /proc/PID/comm)."""
    for suffix in ("_v3", "_v2", ""):  # newest first; FUNCTION_NOT_FOUND is "not supported"
        running = r.q(f"nvmlDeviceGetComputeRunningProcesses{suffix}")
        if not (isinstance(running, Unavailable) and running.reason is Reason.NOT_SUPPORTED):
            break
    return _as(lambda found: tuple(_process(p) for p in list(found)[:PROCESSES_KEPT]), running)


def _process(p: Any) -> GpuProcess:  # noqa: ANN401 - a c_nvmlProcessInfo_t or a look-alike
    memory = p.usedGpuMemory  # None where the driver cannot say (NVML_VALUE_NOT_AVAILABLE)
    used = Unavailable(Reason.NOT_SUPPORTED, "used GPU memory") if memory is None else memory
    return GpuProcess(pid=_int(p.pid), used_memory_mib=_as(lambda b: _int(b) // MIB, used))


def read_gpu(lib: object, index: int) -> GpuFacts:
    """Read every fact of one GPU; a failure here never affects other GPUs.

    Args:
        lib: pynvml or a look-alike, already initialised.
        index: the NVML device index.
    """
    handle = query(lib, "nvmlDeviceGetHandleByIndex", index)
    if isinstance(handle, Unavailable):
        status = GpuStatus.LOST if handle.reason is Reason.GPU_LOST else GpuStatus.ERROR
        return unreadable_gpu(index, status, handle)
    reader = _GpuReader(lib, handle)
    try:
        facts = replace(_read_fields(reader, index), compute_processes=_processes(reader))
    except (ArithmeticError, AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        # A reading of a shape we did not expect: this GPU is an error, the rest go on.
        why = Unavailable(Reason.ERROR, f"unexpected NVML answer: {exc}")
        return unreadable_gpu(index, GpuStatus.ERROR, why)
    if reader.lost is not None:
        return replace(facts, status=GpuStatus.LOST, status_detail=reader.lost.detail)
    return facts


def _read_fields(r: _GpuReader, index: int) -> GpuFacts:
    c = r.const
    pci = r.q("nvmlDeviceGetPciInfo")
    memory = r.q("nvmlDeviceGetMemoryInfo")
    ecc_mode = r.q("nvmlDeviceGetEccMode")
    enabled = c("NVML_FEATURE_ENABLED", 1)
    corrected = c("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    uncorrected = c("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    volatile = c("NVML_VOLATILE_ECC", 0)
    aggregate = c("NVML_AGGREGATE_ECC", 1)
    remap = r.q("nvmlDeviceGetRemappedRows")
    constraints = r.q("nvmlDeviceGetPowerManagementLimitConstraints")
    mig = r.q("nvmlDeviceGetMigMode")
    mig_on = c("NVML_DEVICE_MIG_ENABLE", 1)
    fabric_state, fabric_status = _fabric(r)
    links = _nvlink_states(r)
    sm = c("NVML_CLOCK_SM", 1)
    mem = c("NVML_CLOCK_MEM", 2)

    def threshold(name: str, default: int) -> Measured[float]:
        return _as(float, r.q("nvmlDeviceGetTemperatureThreshold", c(name, default)))

    def retired(cause: str, default: int) -> Measured[int]:
        return _as(len, r.q("nvmlDeviceGetRetiredPages", c(cause, default)))

    def ecc(kind: int, counter: int) -> Measured[int]:
        return _as(int, r.q("nvmlDeviceGetTotalEccErrors", kind, counter))

    return GpuFacts(
        index=index,
        uuid=_as(str, r.q("nvmlDeviceGetUUID")),
        serial=_as(str, r.q("nvmlDeviceGetSerial")),
        name=_as(str, r.q("nvmlDeviceGetName")),
        pci_bus_id=_as(lambda info: normalise_bus_id(str(_decode(info.busId))), pci),
        vbios_version=_as(str, r.q("nvmlDeviceGetVbiosVersion")),
        memory_total_mib=_as(lambda m: int(m.total) // MIB, memory),
        memory_used_mib=_as(lambda m: int(m.used) // MIB, memory),
        ecc_mode_current=_pick(ecc_mode, 0, lambda v: int(v) == enabled),
        ecc_mode_pending=_pick(ecc_mode, 1, lambda v: int(v) == enabled),
        ecc_volatile_corrected=ecc(corrected, volatile),
        ecc_volatile_uncorrected=ecc(uncorrected, volatile),
        ecc_aggregate_corrected=ecc(corrected, aggregate),
        ecc_aggregate_uncorrected=ecc(uncorrected, aggregate),
        retired_pages_sbe=retired("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
        retired_pages_dbe=retired("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1),
        retired_pages_pending=_as(
            lambda v: int(v) == enabled, r.q("nvmlDeviceGetRetiredPagesPendingStatus")
        ),
        remapped_rows_correctable=_pick(remap, 0, int),
        remapped_rows_uncorrectable=_pick(remap, 1, int),
        remap_pending=_pick(remap, 2, bool),
        remap_failure=_pick(remap, 3, bool),
        temperature_gpu_c=_as(float, r.q("nvmlDeviceGetTemperature", c("NVML_TEMPERATURE_GPU", 0))),
        temperature_memory_c=_memory_temperature(r),
        temp_shutdown_c=threshold("NVML_TEMPERATURE_THRESHOLD_SHUTDOWN", 0),
        temp_slowdown_c=threshold("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1),
        temp_max_operating_c=threshold("NVML_TEMPERATURE_THRESHOLD_GPU_MAX", 3),
        temp_memory_max_c=threshold("NVML_TEMPERATURE_THRESHOLD_MEM_MAX", 2),
        tlimit_margin_c=_margin(r),
        power_draw_w=_as(_watts, r.q("nvmlDeviceGetPowerUsage")),
        power_limit_enforced_w=_as(_watts, r.q("nvmlDeviceGetEnforcedPowerLimit")),
        power_limit_default_w=_as(_watts, r.q("nvmlDeviceGetPowerManagementDefaultLimit")),
        power_limit_min_w=_pick(constraints, 0, _watts),
        power_limit_max_w=_pick(constraints, 1, _watts),
        sm_clock_mhz=_as(int, r.q("nvmlDeviceGetClockInfo", sm)),
        mem_clock_mhz=_as(int, r.q("nvmlDeviceGetClockInfo", mem)),
        sm_clock_max_mhz=_as(int, r.q("nvmlDeviceGetMaxClockInfo", sm)),
        mem_clock_max_mhz=_as(int, r.q("nvmlDeviceGetMaxClockInfo", mem)),
        sm_clock_app_mhz=_as(int, r.q("nvmlDeviceGetApplicationsClock", sm)),
        mem_clock_app_mhz=_as(int, r.q("nvmlDeviceGetApplicationsClock", mem)),
        clock_event_reasons=_clock_event_reasons(r),
        pcie_gen_current=_as(int, r.q("nvmlDeviceGetCurrPcieLinkGeneration")),
        pcie_gen_max=_as(int, r.q("nvmlDeviceGetMaxPcieLinkGeneration")),
        pcie_width_current=_as(int, r.q("nvmlDeviceGetCurrPcieLinkWidth")),
        pcie_width_max=_as(int, r.q("nvmlDeviceGetMaxPcieLinkWidth")),
        persistence_mode=_as(lambda v: int(v) == enabled, r.q("nvmlDeviceGetPersistenceMode")),
        compute_mode=_as(
            lambda v: _COMPUTE_MODES.get(int(v), f"unknown_{int(v)}"),
            r.q("nvmlDeviceGetComputeMode"),
        ),
        mig_mode_current=_pick(mig, 0, lambda v: int(v) == mig_on),
        mig_mode_pending=_pick(mig, 1, lambda v: int(v) == mig_on),
        nvlinks=_nvlinks(r, links),
        nvlink_errors=_nvlink_errors(r, links),
        pcie_replay_count=_as(int, r.q("nvmlDeviceGetPcieReplayCounter")),
        recovery_action=_recovery_action(r),
        fabric_state=fabric_state,
        fabric_status=fabric_status,
    )


def _field_number(
    r: _GpuReader,
    value: Any,  # noqa: ANN401 - a c_nvmlFieldValue_t or a look-alike
    what: str,
    *,
    new_field: bool = False,
) -> object:
    """One field value's number (int or float as NVML typed it), or why it has none.

    Args:
        r: the GPU's reader (a lost GPU stops it).
        value: one entry of nvmlDeviceGetFieldValues' answer.
        what: the field, named in the detail.
        new_field: a driver older than the field answers INVALID_ARGUMENT for an id it
            does not know; that is "not supported" too, not an error.
    """
    ret = int(value.nvmlReturn)
    if ret != r.const("NVML_SUCCESS", 0):
        if new_field and ret == r.const("NVML_ERROR_INVALID_ARGUMENT", 2):
            return Unavailable(Reason.NOT_SUPPORTED, f"{what}: this driver does not know it")
        missing = unavailable_for_code(r.lib, ret, what)
        if missing.reason is Reason.GPU_LOST:
            r.lost = missing
        return missing
    value_type = int(value.valueType)
    member = {
        r.const("NVML_VALUE_TYPE_DOUBLE", 0): "dVal",
        r.const("NVML_VALUE_TYPE_UNSIGNED_INT", 1): "uiVal",
        r.const("NVML_VALUE_TYPE_UNSIGNED_LONG", 2): "ulVal",
        r.const("NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", 3): "ullVal",
        r.const("NVML_VALUE_TYPE_SIGNED_LONG_LONG", 4): "sllVal",
        r.const("NVML_VALUE_TYPE_SIGNED_INT", 5): "siVal",
        r.const("NVML_VALUE_TYPE_UNSIGNED_SHORT", 6): "usVal",
    }.get(value_type)
    if member is None:
        return Unavailable(Reason.ERROR, f"{what} of unknown value type {value_type}")
    return getattr(value.value, member)


def _field_values(
    r: _GpuReader, field: tuple[str, int], what: str, scopes: Sequence[int] = ()
) -> list[object] | Unavailable:
    """One field's value per scope (a link), or once unscoped; each a number or why not."""
    field_id = r.const(*field)
    ids: list[object] = [(field_id, scope) for scope in scopes] if scopes else [field_id]
    try:
        values = r.q("nvmlDeviceGetFieldValues", ids)
    except TypeError:
        # A pynvml before scoped field ids (a tuple per id) cannot ask per link.
        return Unavailable(Reason.NOT_SUPPORTED, f"{what}: this pynvml cannot scope field ids")
    if isinstance(values, Unavailable):
        return values
    answers = list(cast(Sequence[Any], values))
    return [_field_number(r, value, what, new_field=True) for value in answers[: len(ids)]]


def _memory_temperature(r: _GpuReader) -> Measured[float]:
    if getattr(r.lib, _FIELD_MEMORY_TEMP[0], None) is None:
        return Unavailable(Reason.NOT_SUPPORTED, "pynvml has no NVML_FI_DEV_MEMORY_TEMP")
    values = r.q("nvmlDeviceGetFieldValues", [r.const(*_FIELD_MEMORY_TEMP)])
    if isinstance(values, Unavailable):
        return values
    number = _field_number(
        r, cast(Sequence[Any], values)[0], "nvmlDeviceGetFieldValues(MEMORY_TEMP)"
    )
    return _as(float, number)


def _recovery_action(r: _GpuReader) -> Measured[str]:
    """What the driver says the GPU needs (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), by our name.

    Drivers before the field answer "not supported"; a code NVML added after the eight
    we know is no action we can name, so it is an error (never taken for "none").
    """
    what = "nvmlDeviceGetFieldValues(GET_GPU_RECOVERY_ACTION)"
    values = _field_values(r, _FIELD_GPU_RECOVERY_ACTION, what)
    if isinstance(values, Unavailable):
        return values
    code = values[0]
    if isinstance(code, Unavailable):
        return code
    names = {
        r.const(name, default): action
        for (name, default), action in zip(_RECOVERY_ACTION_CONSTANTS, RECOVERY_ACTIONS)
    }
    action = names.get(_int(code))
    if action is None:
        return Unavailable(
            Reason.ERROR,
            f"{what}: recovery action code {_int(code)} is none of {', '.join(RECOVERY_ACTIONS)}",
        )
    return action


def _margin(r: _GpuReader) -> Measured[float]:
    if not callable(getattr(r.lib, "nvmlDeviceGetMarginTemperature", None)):
        return Unavailable(Reason.NOT_MEASURED, "pynvml has no nvmlDeviceGetMarginTemperature")
    return _as(float, r.q("nvmlDeviceGetMarginTemperature"))


def _clock_event_reasons(r: _GpuReader) -> Measured[tuple[str, ...]]:
    mask = r.q("nvmlDeviceGetCurrentClocksEventReasons")
    if isinstance(mask, Unavailable) and mask.reason is Reason.NOT_SUPPORTED:
        # Drivers and pynvml before R535 know only the older "throttle" name.
        older = r.q("nvmlDeviceGetCurrentClocksThrottleReasons")
        if not isinstance(older, Unavailable):
            mask = older
    return _as(lambda m: decode_clock_event_reasons(int(m)), mask)


def _nvlink_states(r: _GpuReader) -> Measured[list[tuple[int, bool]]]:
    """(link, active) for every link the GPU has, or why the list cannot be had."""
    links: list[tuple[int, bool]] = []
    absent = (
        r.const("NVML_ERROR_NOT_SUPPORTED", 3),
        r.const("NVML_ERROR_INVALID_ARGUMENT", 2),
        r.const("NVML_ERROR_FUNCTION_NOT_FOUND", 13),
    )
    for link in range(r.const("NVML_NVLINK_MAX_LINKS", 36)):
        state, code = r.q_code("nvmlDeviceGetNvLinkState", link)
        if isinstance(state, Unavailable):
            if code in absent:
                # Past the device's last link, or a link it does not have: skip it.
                continue
            # Lost, no permission or a real error: the link list cannot be trusted.
            return state
        links.append((link, bool(_int(state))))
    if not links:
        return Unavailable(Reason.NOT_SUPPORTED, "no NVLink on this GPU")
    return links


def _gb_per_s(mbps: object) -> Measured[float]:
    """NVML's link speed in MBps as nvidia-smi nvlink -s prints it, GB/s (26562 -> 26.562)."""
    return _as(lambda number: float(number) / 1000.0, mbps)


def _nvlink_speeds(r: _GpuReader, active: Sequence[int]) -> dict[int, Measured[float]]:
    """Each active link's speed: per link (NVLINK_GET_SPEED), else the common speed.

    Older drivers know only NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON, one figure for all
    active links; that is used only when the per-link field is not supported.
    """
    if not active:
        return {}
    per_link = _field_values(r, _FIELD_NVLINK_GET_SPEED, "NVLINK_GET_SPEED", active)
    speeds: dict[int, object] = (
        dict.fromkeys(active, per_link)
        if isinstance(per_link, Unavailable)
        else dict(zip(active, per_link))
    )
    unsupported = all(
        isinstance(s, Unavailable) and s.reason is Reason.NOT_SUPPORTED for s in speeds.values()
    )
    if unsupported and r.lost is None:
        common = _field_values(r, _FIELD_NVLINK_SPEED_MBPS_COMMON, "NVLINK_SPEED_MBPS_COMMON")
        figure = common if isinstance(common, Unavailable) else common[0]
        speeds = dict.fromkeys(active, figure)
    return {link: _gb_per_s(speed) for link, speed in speeds.items()}


_INACTIVE_SPEED = Unavailable(Reason.NOT_MEASURED, "the link is not active: it has no speed")


def _nvlinks(
    r: _GpuReader, states: Measured[list[tuple[int, bool]]]
) -> Measured[tuple[NvLinkState, ...]]:
    if isinstance(states, Unavailable):
        return states
    speeds = _nvlink_speeds(r, [link for link, up in states if up])
    return tuple(
        NvLinkState(link=link, active=up, speed_gb_s=speeds.get(link, _INACTIVE_SPEED))
        for link, up in states
    )


def _nvlink_errors(
    r: _GpuReader, states: Measured[list[tuple[int, bool]]]
) -> Measured[tuple[NvLinkErrorCounts, ...]]:
    """CRC (flit, data), replay and recovery counters of every link the GPU has.

    A counter the driver does not offer stays "not supported" on its own; when none
    is offered on any link, the whole fact is "not supported", never zeros.
    """
    if isinstance(states, Unavailable):
        return states
    counts: list[NvLinkErrorCounts] = []
    for link, _ in states:
        values: dict[str, Measured[int]] = {}
        for name, constant, default in _NVLINK_ERROR_COUNTERS:
            reading = r.q("nvmlDeviceGetNvLinkErrorCounter", link, r.const(constant, default))
            values[name] = _as(int, reading)
        if r.lost is not None:
            return r.lost
        counts.append(NvLinkErrorCounts(link=link, **values))
    offered = [
        value
        for entry in counts
        for value in (entry.crc_flit, entry.crc_data, entry.replay, entry.recovery)
        if not (isinstance(value, Unavailable) and value.reason is Reason.NOT_SUPPORTED)
    ]
    if not offered:
        return Unavailable(Reason.NOT_SUPPORTED, "nvmlDeviceGetNvLinkErrorCounter")
    return tuple(counts)


def _fabric(r: _GpuReader) -> tuple[Measured[str], Measured[str]]:
    if not callable(getattr(r.lib, "nvmlDeviceGetGpuFabricInfo", None)):
        missing = Unavailable(Reason.NOT_SUPPORTED, "pynvml has no nvmlDeviceGetGpuFabricInfo")
        return missing, missing
    info = GpuFabricInfo()
    # NVML fills the struct through the pointer; pynvml passes it on untouched.
    done = r.q("nvmlDeviceGetGpuFabricInfo", ctypes.pointer(info))
    if isinstance(done, Unavailable):
        return done, done
    state = int(info.state)
    status_code = int(info.status)
    if status_code == r.const("NVML_SUCCESS", 0):
        status = "success"
    else:
        status = str(unavailable_for_code(r.lib, status_code, "fabric").detail)
        error = _error_type(r.lib)
        if error is not _NeverRaised:
            with contextlib.suppress(TypeError, ValueError):
                status = str(error(status_code))
    return _FABRIC_STATES.get(state, f"unknown_{state}"), status
