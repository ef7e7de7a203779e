"""A stand-in for ``pynvml`` driven by a scenario's ``nvml`` section.

:class:`FakeNvml` has the shape of the real module as far as
:mod:`validator.node.nvml` uses it: the same function names and argument
order, the same constants (same values), ``NVMLError`` with ``.value``, and
return values of the same kinds (ints in NVML's own units, lists and tuples
where pynvml returns them, simple objects with the ctypes structs' attribute
names). It is not a set of per-function mocks: every answer is derived from
the scenario data, in human units there (MiB, W, degrees C, MHz), converted
back to NVML's units (bytes, mW) here so that the adapter's conversions are
exercised.

The ``nvml`` section (see :mod:`validator.node.sim.scenario` for the whole file)::

    {
      "init_error": null | "library_not_found" | "driver_not_loaded" |
                    "driver_mismatch" | "no_permission" | "unknown" | ...,
      "driver_version": "550.90.07",
      "cuda_driver_version": 12040,
      "gpu_count": 8,
      "pci_bus_ids": ["00000000:19:00.0", ...],   # by index; derived when absent
      "gpu": { <per-GPU defaults> },
      "gpu_overrides": { "3": { <fields for GPU 3> } }
    }

Per-GPU keys are the :class:`~validator.model.GpuFacts` field names (minus ``index``,
``status``, ``status_detail``; ``compute_processes``: validator.node.sim.fake_processes),
plus ``lost`` (NVML_ERROR_GPU_IS_LOST) and ``pci_device_id``. ``nvlinks`` is a count
of active links, a list of booleans (one per link), or an object ``{"links": <count or
list>, "speed_gb_s": <GB/s for every active link, or a list with one per link>,
"speed_source": "per_link" | "common"}`` (speeds as
``nvidia-smi nvlink -s`` prints them, per direction; ``common``: the device answers only
NVML's older common-speed field, as drivers before NVLINK_GET_SPEED did);
``nvlink_errors`` is either one object of counters for every link
(``{"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}``; a counter left out
is not supported) or a list of the links that have errors
(``[{"link": 5, "crc_flit": 4200}]``; links and counters left out count 0);
``pcie_replay_count`` is the PCIe replay counter; ``recovery_action`` one of
:data:`validator.model.RECOVERY_ACTIONS` (NVML's recovery-action field);
``clock_event_reasons`` is a list of names from :data:`validator.model.CLOCK_EVENT_REASONS`;
``fabric_state`` is not_supported / not_started / in_progress / completed and ``fabric_status`` is
"success" or an NVML error name. Any value may instead be the string
``"not_supported"`` or an object ``{"nvml_error": "<name>"}`` (names as in
:data:`ERROR_CODES`): the NVML call behind that field then fails with that
error. A field that is absent is not supported by the simulated device.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from validator.model import CLOCK_EVENT_REASONS, RECOVERY_ACTIONS, GpuFacts
from validator.node.sim.fake_processes import FakeProcesses

MIB = 1048576

# The NvLinkErrorCounts counters a scenario names, with their nvmlNvLinkErrorCounter_t.
NVLINK_ERROR_COUNTERS: dict[str, int] = {"crc_flit": 2, "crc_data": 3, "replay": 0, "recovery": 1}
NVLINK_SPEED_SOURCES = ("per_link", "common")

NOT_SUPPORTED_MARKER = "not_supported"

# NVML return codes (nvmlReturn_t), the same numbers as pynvml.
ERROR_CODES: dict[str, int] = {
    "uninitialized": 1,
    "invalid_argument": 2,
    "not_supported": 3,
    "no_permission": 4,
    "already_initialized": 5,
    "not_found": 6,
    "insufficient_size": 7,
    "insufficient_power": 8,
    "driver_not_loaded": 9,
    "timeout": 10,
    "irq_issue": 11,
    "library_not_found": 12,
    "function_not_found": 13,
    "corrupted_inforom": 14,
    "gpu_is_lost": 15,
    "gpu_lost": 15,
    "reset_required": 16,
    "operating_system": 17,
    "lib_rm_version_mismatch": 18,
    "driver_mismatch": 18,
    "in_use": 19,
    "memory": 20,
    "no_data": 21,
    "unknown": 999,
}

# The strings pynvml's NVMLError prints for these codes.
_ERROR_STRINGS: dict[int, str] = {
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    5: "Already Initialized",
    6: "Not Found",
    7: "Insufficient Size",
    8: "Insufficient External Power",
    9: "Driver Not Loaded",
    10: "Timeout",
    11: "Interrupt Request Issue",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    14: "Corrupted infoROM",
    15: "GPU is lost",
    16: "GPU requires restart",
    17: "The operating system has blocked the request.",
    18: "RM has detected an NVML/RM version mismatch.",
    20: "Insufficient Memory",
    999: "Unknown Error",
}

FABRIC_STATES: dict[str, int] = {
    "not_supported": 0,
    "not_started": 1,
    "in_progress": 2,
    "completed": 3,
}

COMPUTE_MODES: dict[str, int] = {
    "default": 0,
    "exclusive_thread": 1,
    "prohibited": 2,
    "exclusive_process": 3,
}

# GpuFacts fields a scenario cannot set: the adapter decides a GPU's status, and NVML
# gives only the current T.Limit margin (nvidia-smi -q prints the T.Limit thresholds).
NOT_SIMULATED: frozenset[str] = frozenset(
    {
        "index",
        "status",
        "status_detail",
        "tlimit_shutdown_c",
        "tlimit_slowdown_c",
        "tlimit_max_operating_c",
    }
)
# Keys a scenario may give that are no GpuFacts field.
SCENARIO_ONLY_KEYS: frozenset[str] = frozenset({"lost", "pci_device_id"})

# Every per-GPU key a scenario may give: the GpuFacts fields NVML answers, and the above.
GPU_KEYS: frozenset[str] = (
    frozenset(f.name for f in dataclasses.fields(GpuFacts)) - NOT_SIMULATED
) | SCENARIO_ONLY_KEYS

NVML_KEYS: frozenset[str] = frozenset(
    {
        "init_error",
        "driver_version",
        "cuda_driver_version",
        "gpu_count",
        "pci_bus_ids",
        "gpu",
        "gpu_overrides",
    }
)


class NVMLError(Exception):
    """An NVML failure, like ``pynvml.NVMLError``: ``.value`` is the return code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")


class c_nvmlGpuFabricInfo_t(ctypes.Structure):
    """The fabric-info struct as nvml.h lays it out (its state one byte), filled by pointer."""

    _fields_ = (
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint8),
    )


class _Memory:
    """Like pynvml's c_nvmlMemory_t: bytes."""

    def __init__(self, total: int, used: int) -> None:
        self.total = total
        self.used = used
        self.free = max(total - used, 0)


class _PciInfo:
    """Like pynvml's nvmlPciInfo_t: busId is bytes, as the ctypes char array gives it."""

    def __init__(self, bus_id: str, device_id: int) -> None:
        self.busId = bus_id.encode()
        self.busIdLegacy = bus_id[-12:].encode()
        parts = bus_id.replace(".", ":").split(":")
        self.domain = int(parts[0], 16)
        self.bus = int(parts[1], 16)
        self.device = int(parts[2], 16)
        self.pciDeviceId = device_id
        self.pciSubSystemId = 0


class _Value:
    """Like pynvml's c_nvmlValue_t union."""

    def __init__(self, number: int) -> None:
        self.dVal = float(number)
        self.uiVal = number
        self.ulVal = number
        self.ullVal = number
        self.sllVal = number
        self.siVal = number
        self.usVal = number


class _FieldValue:
    """Like pynvml's c_nvmlFieldValue_t."""

    def __init__(self, field_id: int, ret: int, value_type: int, number: int) -> None:
        self.fieldId = field_id
        self.scopeId = 0
        self.timestamp = 0
        self.latencyUsec = 0
        self.valueType = value_type
        self.nvmlReturn = ret
        self.value = _Value(number)


class _Handle:
    """An opaque device handle, as nvmlDeviceGetHandleByIndex returns."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvmlDevice_t {self.index}>"


def error_for(value: object) -> int | None:
    """The NVML error code a scenario value stands for, or None for a real value."""
    if value == NOT_SUPPORTED_MARKER:
        return ERROR_CODES["not_supported"]
    if isinstance(value, Mapping) and "nvml_error" in value:
        name = str(value["nvml_error"]).lower()
        return ERROR_CODES.get(name, ERROR_CODES["unknown"])
    return None


def default_bus_id(index: int) -> str:
    """A plausible bus id for GPU ``index`` when the scenario names none."""
    bus = 0x18 + 0x11 * index  # past bus 0xFF the next PCI domain, as on big hosts
    return f"{bus >> 8:08X}:{bus & 0xFF:02X}:00.0"


def default_serial(index: int) -> str:
    """A 13-digit board serial, distinct per index."""
    return str(1654423001000 + 1013 * index)


def default_uuid(serial: str, name: str) -> str:
    """A stable GPU-xxxxxxxx-... UUID derived from the serial and name."""
    digest = hashlib.sha256(f"{name}/{serial}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def merge_gpu(defaults: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """One GPU's data: defaults, then its override (a null value removes the key)."""
    merged = dict(defaults)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


class NvmlConstants:
    """The pynvml constants the adapter uses, same names and values."""

    NVML_SUCCESS = 0
    NVML_ERROR_UNINITIALIZED = 1
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_ALREADY_INITIALIZED = 5
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_INSUFFICIENT_SIZE = 7
    NVML_ERROR_INSUFFICIENT_POWER = 8
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_IRQ_ISSUE = 11
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_CORRUPTED_INFOROM = 14
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_RESET_REQUIRED = 16
    NVML_ERROR_OPERATING_SYSTEM = 17
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
    NVML_ERROR_IN_USE = 19
    NVML_ERROR_MEMORY = 20
    NVML_ERROR_NO_DATA = 21
    NVML_ERROR_UNKNOWN = 999

    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1

    NVML_TEMPERATURE_GPU = 0
    NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
    NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2
    NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3

    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_CLOCK_VIDEO = 3

    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1

    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1

    NVML_COMPUTEMODE_DEFAULT = 0
    NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1
    NVML_COMPUTEMODE_PROHIBITED = 2
    NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3

    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1

    NVML_NVLINK_MAX_LINKS = 36
    NVML_NVLINK_ERROR_DL_REPLAY = 0
    NVML_NVLINK_ERROR_DL_RECOVERY = 1
    NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
    NVML_NVLINK_ERROR_DL_CRC_DATA = 3

    NVML_GPU_RECOVERY_ACTION_NONE = 0
    NVML_GPU_RECOVERY_ACTION_GPU_RESET = 1
    NVML_GPU_RECOVERY_ACTION_NODE_REBOOT = 2
    NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = 3
    NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4
    NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN = 5
    NVML_GPU_RECOVERY_ACTION_BUS_RESET = 6
    NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT = 7

    NVML_FI_DEV_MEMORY_TEMP = 82
    NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON = 90
    NVML_FI_DEV_NVLINK_GET_SPEED = 164
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
    NVML_VALUE_TYPE_DOUBLE = 0
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
    NVML_VALUE_TYPE_SIGNED_INT = 5
    NVML_VALUE_TYPE_UNSIGNED_SHORT = 6

    NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
    NVML_GPU_FABRIC_STATE_NOT_STARTED = 1
    NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2
    NVML_GPU_FABRIC_STATE_COMPLETED = 3


class FakeNvml(NvmlConstants, FakeProcesses):
    """A pynvml look-alike answering from a scenario's ``nvml`` section.

    Args:
        nvml: the scenario's ``nvml`` section.
        bytes_strings: return strings as bytes, as pynvml releases before
            11.5 did, so that the adapter's decoding is exercised.

    Attributes:
        init_calls: how many times nvmlInit was called.
        shutdown_calls: how many times nvmlShutdown was called.
        calls: every NVML function called, in order.
    """

    NVMLError = NVMLError
    c_nvmlGpuFabricInfo_t = c_nvmlGpuFabricInfo_t

    def __init__(self, nvml: Mapping[str, Any], *, bytes_strings: bool = False) -> None:
        self._data = dict(nvml)
        self._bytes = bytes_strings
        self._initialised = 0
        self.init_calls = 0
        self.shutdown_calls = 0
        self.calls: list[str] = []
        count = self._data.get("gpu_count", 0)
        defaults = self._data.get("gpu") or {}
        overrides = self._data.get("gpu_overrides") or {}
        bus_ids = list(self._data.get("pci_bus_ids") or [])
        self._gpus: list[dict[str, Any]] = []
        for index in range(int(count)):
            gpu = merge_gpu(defaults, overrides.get(str(index)) or {})
            gpu.setdefault("pci_bus_id", bus_ids[index] if index < len(bus_ids) else None)
            if gpu["pci_bus_id"] is None:
                gpu["pci_bus_id"] = default_bus_id(index)
            gpu.setdefault("serial", default_serial(index))
            gpu.setdefault("uuid", default_uuid(str(gpu["serial"]), str(gpu.get("name", ""))))
            self._gpus.append(gpu)

    # ------------------------------------------------------------ plumbing

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        if not self._initialised:
            raise NVMLError(self.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, name: str, handle: object) -> dict[str, Any]:
        self._enter(name)
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self._gpus):
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpus[handle.index]

    @staticmethod
    def _value(gpu: Mapping[str, object], key: str) -> object:
        """A field's value, raising the NVML error the scenario asks for."""
        if key not in gpu:
            raise NVMLError(ERROR_CODES["not_supported"])
        value = gpu[key]
        code = error_for(value)
        if code is not None:
            raise NVMLError(code)
        return value

    @classmethod
    def _num(cls, gpu: Mapping[str, object], key: str) -> float:
        value = cls._value(gpu, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            # A scenario value of the wrong kind: NVML would have said "unknown error".
            raise NVMLError(ERROR_CODES["unknown"])
        return float(value)

    @classmethod
    def _int(cls, gpu: Mapping[str, object], key: str) -> int:
        return round(cls._num(gpu, key))

    @classmethod
    def _flag(cls, gpu: Mapping[str, object], key: str) -> int:
        return int(bool(cls._value(gpu, key)))

    @classmethod
    def _mw(cls, gpu: Mapping[str, object], key: str) -> int:
        return round(cls._num(gpu, key) * 1000)

    def _text(self, gpu: Mapping[str, object], key: str) -> str | bytes:
        text = str(self._value(gpu, key))
        return text.encode() if self._bytes else text

    # ------------------------------------------------------------ system

    def nvmlInit(self) -> None:
        """Initialise, or raise the scenario's init error."""
        self.calls.append("nvmlInit")
        self.init_calls += 1
        error = self._data.get("init_error")
        if error:
            code = error_for({"nvml_error": error})
            raise NVMLError(code if code is not None else ERROR_CODES["unknown"])
        self._initialised += 1

    def nvmlShutdown(self) -> None:
        """Shut down; like NVML, fails when not initialised."""
        self.calls.append("nvmlShutdown")
        self.shutdown_calls += 1
        if not self._initialised:
            raise NVMLError(self.NVML_ERROR_UNINITIALIZED)
        self._initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        """The user-space driver version."""
        self._enter("nvmlSystemGetDriverVersion")
        return self._text(self._data, "driver_version")

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        """The CUDA version the driver supports, as 12040 for 12.4."""
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self._int(self._data, "cuda_driver_version")

    def nvmlDeviceGetCount(self) -> int:
        """How many GPUs NVML sees."""
        self._enter("nvmlDeviceGetCount")
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        """A handle; a lost GPU raises NVML_ERROR_GPU_IS_LOST here."""
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self._gpus):
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self._gpus[index]
        lost = gpu.get("lost", False)
        if lost is True:
            raise NVMLError(self.NVML_ERROR_GPU_IS_LOST)
        code = error_for(lost)
        if code is not None:
            raise NVMLError(code)
        return _Handle(index)

    # ------------------------------------------------------------ identity

    def nvmlDeviceGetUUID(self, handle: object) -> str | bytes:
        """The GPU UUID."""
        return self._text(self._gpu("nvmlDeviceGetUUID", handle), "uuid")

    def nvmlDeviceGetSerial(self, handle: object) -> str | bytes:
        """The board serial."""
        return self._text(self._gpu("nvmlDeviceGetSerial", handle), "serial")

    def nvmlDeviceGetName(self, handle: object) -> str | bytes:
        """The product name."""
        return self._text(self._gpu("nvmlDeviceGetName", handle), "name")

    def nvmlDeviceGetVbiosVersion(self, handle: object) -> str | bytes:
        """The VBIOS version."""
        gpu = self._gpu("nvmlDeviceGetVbiosVersion", handle)
        return self._text(gpu, "vbios_version")

    def nvmlDeviceGetPciInfo(self, handle: object) -> _PciInfo:
        """PCI info; busId as bytes, as in the real struct."""
        gpu = self._gpu("nvmlDeviceGetPciInfo", handle)
        device_id = gpu.get("pci_device_id", 0)
        if isinstance(device_id, str):
            device_id = int(device_id, 16)
        return _PciInfo(str(self._value(gpu, "pci_bus_id")), int(device_id))

    # ------------------------------------------------------------ memory and ECC

    def nvmlDeviceGetMemoryInfo(self, handle: object, version: object = None) -> _Memory:
        """Framebuffer memory in bytes."""
        del version  # v2 adds "reserved"; the adapter does not ask for it
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        total = self._int(gpu, "memory_total_mib") * MIB
        used = self._int(gpu, "memory_used_mib") * MIB
        return _Memory(total, used)

    def nvmlDeviceGetEccMode(self, handle: object) -> list[int]:
        """[current, pending] as NVML_FEATURE_* values."""
        gpu = self._gpu("nvmlDeviceGetEccMode", handle)
        return [
            self._flag(gpu, "ecc_mode_current"),
            self._flag(gpu, "ecc_mode_pending"),
        ]

    def nvmlDeviceGetTotalEccErrors(self, handle: object, errorType: int, counterType: int) -> int:
        """ECC error count for one error type and counter."""
        gpu = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        kind = {0: "corrected", 1: "uncorrected"}.get(errorType)
        counter = {0: "volatile", 1: "aggregate"}.get(counterType)
        if kind is None or counter is None:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return self._int(gpu, f"ecc_{counter}_{kind}")

    def nvmlDeviceGetRetiredPages(self, device: object, sourceFilter: int) -> list[int]:
        """Addresses of pages retired for one cause (made up, one per count)."""
        gpu = self._gpu("nvmlDeviceGetRetiredPages", device)
        key = {0: "retired_pages_sbe", 1: "retired_pages_dbe"}.get(sourceFilter)
        if key is None:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        count = self._int(gpu, key)
        return [0x1_0000_0000 + 0x1000 * (sourceFilter * 1000 + n) for n in range(count)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: object) -> int:
        """1 when retired pages wait for a reset."""
        gpu = self._gpu("nvmlDeviceGetRetiredPagesPendingStatus", device)
        return self._flag(gpu, "retired_pages_pending")

    def nvmlDeviceGetRemappedRows(self, device: object) -> tuple[int, int, int, int]:
        """(correctable, uncorrectable, pending, failure)."""
        gpu = self._gpu("nvmlDeviceGetRemappedRows", device)
        return (
            self._int(gpu, "remapped_rows_correctable"),
            self._int(gpu, "remapped_rows_uncorrectable"),
            self._flag(gpu, "remap_pending"),
            self._flag(gpu, "remap_failure"),
        )

    # ------------------------------------------------------------ temperature

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        """Current GPU temperature, whole degrees C."""
        gpu = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return self._int(gpu, "temperature_gpu_c")

    def nvmlDeviceGetTemperatureThreshold(self, handle: object, threshold: int) -> int:
        """An absolute temperature threshold, degrees C."""
        gpu = self._gpu("nvmlDeviceGetTemperatureThreshold", handle)
        key = {
            self.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "temp_shutdown_c",
            self.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "temp_slowdown_c",
            self.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: "temp_max_operating_c",
            self.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: "temp_memory_max_c",
        }.get(threshold)
        if key is None:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return self._int(gpu, key)

    def nvmlDeviceGetMarginTemperature(self, handle: object) -> int:
        """Degrees C left before T.Limit."""
        gpu = self._gpu("nvmlDeviceGetMarginTemperature", handle)
        return self._int(gpu, "tlimit_margin_c")

    def nvmlDeviceGetFieldValues(
        self, handle: object, fieldIds: Sequence[int | tuple[int, int]]
    ) -> list[_FieldValue]:
        """Field values; like NVML, per-field failures are in each value's nvmlReturn.

        An id may be ``(field id, scope id)``, as pynvml takes it (the link, for the
        NVLink fields).
        """
        gpu = self._gpu("nvmlDeviceGetFieldValues", handle)
        out = []
        for requested in fieldIds:
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            try:
                number = self._field(gpu, field_id, scope)
            except NVMLError as err:
                out.append(_FieldValue(field_id, err.value, 1, 0))
            else:
                uint = self.NVML_VALUE_TYPE_UNSIGNED_INT
                out.append(_FieldValue(field_id, self.NVML_SUCCESS, uint, number))
        return out

    def _field(self, gpu: Mapping[str, object], field_id: int, scope: int) -> int:
        """One field's value, or the NVML error its scenario value stands for."""
        if field_id == self.NVML_FI_DEV_MEMORY_TEMP:
            return self._int(gpu, "temperature_memory_c")
        if field_id == self.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
            action = self._value(gpu, "recovery_action")
            if isinstance(action, int) and not isinstance(action, bool):
                return action  # a raw code, as a newer driver could answer
            if action not in RECOVERY_ACTIONS:
                raise NVMLError(self.NVML_ERROR_UNKNOWN)
            return RECOVERY_ACTIONS.index(str(action))
        if field_id in (
            self.NVML_FI_DEV_NVLINK_GET_SPEED,
            self.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON,
        ):
            return self._link_speed(gpu, field_id, scope)
        raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)

    def _link_speed(self, gpu: Mapping[str, object], field_id: int, link: int) -> int:
        """A link's speed in MBps (NVML's unit) from the scenario's GB/s."""
        links = _links_spec(self._value(gpu, "nvlinks"))
        speeds = links.get("speed_gb_s")
        if speeds is None:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        code = error_for(speeds)
        if code is not None:
            raise NVMLError(code)
        common = field_id == self.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON
        if common != (links.get("speed_source", "per_link") == "common"):
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        states = _link_states(links)
        if isinstance(speeds, list):
            if common:
                figures = {s for s, up in zip(speeds, states) if up}
                if len(figures) != 1:
                    raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
                return round(float(figures.pop()) * 1000)
            if not 0 <= link < len(speeds):
                raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
            return round(float(speeds[link]) * 1000)
        if not common and not 0 <= link < len(states):
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return round(float(str(speeds)) * 1000)

    # ------------------------------------------------------------ power

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        """Power draw, mW."""
        return self._mw(self._gpu("nvmlDeviceGetPowerUsage", handle), "power_draw_w")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object) -> int:
        """The enforced power limit, mW."""
        gpu = self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle)
        return self._mw(gpu, "power_limit_enforced_w")

    def nvmlDeviceGetPowerManagementLimit(self, handle: object) -> int:
        """The configured power limit, mW (the scenario's enforced limit)."""
        gpu = self._gpu("nvmlDeviceGetPowerManagementLimit", handle)
        return self._mw(gpu, "power_limit_enforced_w")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: object) -> int:
        """The default power limit, mW."""
        gpu = self._gpu("nvmlDeviceGetPowerManagementDefaultLimit", handle)
        return self._mw(gpu, "power_limit_default_w")

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: object) -> list[int]:
        """[min, max] settable power limit, mW."""
        gpu = self._gpu("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        return [
            self._mw(gpu, "power_limit_min_w"),
            self._mw(gpu, "power_limit_max_w"),
        ]

    # ------------------------------------------------------------ clocks

    def _clock(self, name: str, handle: object, clock_type: int, what: str) -> int:
        gpu = self._gpu(name, handle)
        domain = {self.NVML_CLOCK_SM: "sm", self.NVML_CLOCK_MEM: "mem"}.get(clock_type)
        if domain is None:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return self._int(gpu, f"{domain}_clock{what}_mhz")

    def nvmlDeviceGetClockInfo(self, handle: object, type: int) -> int:
        """Current clock, MHz."""
        return self._clock("nvmlDeviceGetClockInfo", handle, type, "")

    def nvmlDeviceGetMaxClockInfo(self, handle: object, type: int) -> int:
        """Maximum clock, MHz."""
        return self._clock("nvmlDeviceGetMaxClockInfo", handle, type, "_max")

    def nvmlDeviceGetApplicationsClock(self, handle: object, type: int) -> int:
        """Applications clock, MHz."""
        return self._clock("nvmlDeviceGetApplicationsClock", handle, type, "_app")

    def _reasons(self, name: str, handle: object) -> int:
        gpu = self._gpu(name, handle)
        names = self._value(gpu, "clock_event_reasons")
        if not isinstance(names, (list, tuple)):
            raise NVMLError(self.NVML_ERROR_UNKNOWN)
        bits = {reason: bit for bit, reason in CLOCK_EVENT_REASONS}
        mask = 0
        for reason in names:
            if reason in bits:
                mask |= bits[reason]
            elif str(reason).startswith("unknown_0x"):
                mask |= int(str(reason)[len("unknown_0x") :], 16)
            else:
                raise NVMLError(self.NVML_ERROR_UNKNOWN)
        return mask

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        """Active clock-event reasons as a bit mask."""
        return self._reasons("nvmlDeviceGetCurrentClocksEventReasons", handle)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object) -> int:
        """The older name of the same call."""
        return self._reasons("nvmlDeviceGetCurrentClocksThrottleReasons", handle)

    # ------------------------------------------------------------ PCIe

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: object) -> int:
        """Current PCIe generation."""
        gpu = self._gpu("nvmlDeviceGetCurrPcieLinkGeneration", handle)
        return self._int(gpu, "pcie_gen_current")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: object) -> int:
        """Maximum PCIe generation."""
        gpu = self._gpu("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        return self._int(gpu, "pcie_gen_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: object) -> int:
        """Current PCIe width (lanes)."""
        gpu = self._gpu("nvmlDeviceGetCurrPcieLinkWidth", handle)
        return self._int(gpu, "pcie_width_current")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: object) -> int:
        """Maximum PCIe width (lanes)."""
        gpu = self._gpu("nvmlDeviceGetMaxPcieLinkWidth", handle)
        return self._int(gpu, "pcie_width_max")

    # ------------------------------------------------------------ state

    def nvmlDeviceGetPersistenceMode(self, handle: object) -> int:
        """NVML_FEATURE_ENABLED or _DISABLED."""
        gpu = self._gpu("nvmlDeviceGetPersistenceMode", handle)
        return self._flag(gpu, "persistence_mode")

    def nvmlDeviceGetComputeMode(self, handle: object) -> int:
        """NVML_COMPUTEMODE_*."""
        gpu = self._gpu("nvmlDeviceGetComputeMode", handle)
        mode = self._value(gpu, "compute_mode")
        if not isinstance(mode, str) or mode not in COMPUTE_MODES:
            raise NVMLError(self.NVML_ERROR_UNKNOWN)
        return COMPUTE_MODES[mode]

    def nvmlDeviceGetMigMode(self, device: object) -> list[int]:
        """[current, pending] as NVML_DEVICE_MIG_*."""
        gpu = self._gpu("nvmlDeviceGetMigMode", device)
        return [
            self._flag(gpu, "mig_mode_current"),
            self._flag(gpu, "mig_mode_pending"),
        ]

    def _states(self, name: str, device: object, link: int) -> tuple[dict[str, Any], list[bool]]:
        gpu = self._gpu(name, device)
        links = _links_spec(self._value(gpu, "nvlinks"))
        states = _link_states(links)
        if not states:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(states):
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return gpu, states

    def nvmlDeviceGetNvLinkState(self, device: object, link: int) -> int:
        """1 when the link is active; links past the device's last are invalid."""
        return int(self._states("nvmlDeviceGetNvLinkState", device, link)[1][link])

    def nvmlDeviceGetNvLinkErrorCounter(self, device: object, link: int, counter: int) -> int:
        """One link's error counter (nvmlNvLinkErrorCounter_t), from ``nvlink_errors``."""
        gpu, _ = self._states("nvmlDeviceGetNvLinkErrorCounter", device, link)
        names = {number: name for name, number in NVLINK_ERROR_COUNTERS.items()}
        if counter not in names:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        spec = self._value(gpu, "nvlink_errors")
        if isinstance(spec, Mapping):
            counts: Mapping[str, object] = spec  # every link alike; left out: not supported
        elif isinstance(spec, list):
            listed = [entry for entry in spec if isinstance(entry, Mapping)]
            entry = next((e for e in listed if e.get("link") == link), {})
            counts = {**dict.fromkeys(NVLINK_ERROR_COUNTERS, 0), **entry}
        else:
            raise NVMLError(self.NVML_ERROR_UNKNOWN)
        return self._int(counts, names[counter])

    def nvmlDeviceGetPcieReplayCounter(self, handle: object) -> int:
        """The PCIe replay counter."""
        gpu = self._gpu("nvmlDeviceGetPcieReplayCounter", handle)
        return self._int(gpu, "pcie_replay_count")

    def nvmlDeviceGetGpuFabricInfo(self, device: object, gpuFabricInfo: object) -> int:
        """Fill a c_nvmlGpuFabricInfo_t through the pointer given, like NVML."""
        gpu = self._gpu("nvmlDeviceGetGpuFabricInfo", device)
        if not hasattr(gpuFabricInfo, "contents"):
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        state = self._value(gpu, "fabric_state")
        status = gpu.get("fabric_status", "success")
        info = gpuFabricInfo.contents
        info.state = FABRIC_STATES.get(str(state), 0)
        if status == "success":
            info.status = self.NVML_SUCCESS
        else:
            info.status = ERROR_CODES.get(str(status).lower(), ERROR_CODES["unknown"])
        return self.NVML_SUCCESS


def _links_spec(value: object) -> dict[str, Any]:
    """A scenario's ``nvlinks`` in its object form (a count or a list is ``links`` alone)."""
    if isinstance(value, Mapping):
        return dict(value)
    return {"links": value}


def _link_states(links: Mapping[str, Any]) -> list[bool]:
    """One flag per link: a count is that many active links."""
    value = links.get("links", 0)
    if isinstance(value, bool) or not isinstance(value, (int, list)):
        raise NVMLError(ERROR_CODES["unknown"])
    return [True] * value if isinstance(value, int) else [bool(state) for state in value]
