"""What the ``nvidia-smi -q`` text and XML parsers share: the result type and value readers.

nvidia-smi prints every value as text with a unit ("81559 MiB", "700.00 W",
"16x") or a placeholder ("N/A", "[Not Supported]", "Unknown Error"). The
readers here turn one such text into a value or the reason it has none; they
never raise, because one unreadable cell must not hide the other facts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from validator.limits import GPUS_PER_NODE
from validator.model import (
    CLOCK_EVENT_REASONS,
    NOT_MEASURED,
    NOT_SUPPORTED,
    GpuFacts,
    Measured,
    NvmlStatus,
    Reason,
    Unavailable,
)
from validator.node.parsers.base import ParseError
from validator.node.parsers.smi_errors import SmiError

T = TypeVar("T")


@dataclass(frozen=True)
class SmiQuery:
    """What ``nvidia-smi -q`` (text or XML) says about the node and each GPU.

    ``cut`` says where the output ends in the middle of a GPU ("" when every GPU
    section it holds is whole); a shortfall against ``attached_gpus`` is the
    consumer's to see.
    """

    status: NvmlStatus
    detail: str
    driver_version: Measured[str]
    cuda_version: Measured[str]
    attached_gpus: Measured[int]
    gpus: tuple[GpuFacts, ...]
    cut: str = ""

    @classmethod
    def from_error(cls, error: SmiError) -> SmiQuery:
        """What a query says when nvidia-smi printed an error instead: no GPU, no CUDA."""
        return cls(
            error.status, error.detail, error.library_version, NOT_MEASURED, NOT_MEASURED, ()
        )


# Placeholders meaning "this GPU or driver does not offer the value".
_NOT_SUPPORTED_TEXTS = frozenset(
    {
        "n/a",
        "not supported",
        "not available",
        "not found",
        "function not found",
        "requested functionality has been deprecated",
        "none",
    }
)

# Placeholders meaning "asking failed", most specific first.
_ERROR_TEXTS = (
    ("insufficient permissions", Reason.NO_PERMISSION),
    ("no permission", Reason.NO_PERMISSION),
    ("gpu is lost", Reason.GPU_LOST),
    ("unknown error", Reason.ERROR),
)

# nvidia-smi appends notes such as "[Deprecated; will be removed ...]" (R610).
_BRACKET_NOTE = re.compile(r"\s*\[[^\]]*\]\s*$")


def unavailable_for(raw: str | None) -> Unavailable | None:
    """The reason a printed value has no value, or None when it looks like a value.

    Args:
        raw: the text nvidia-smi printed, or None when the key was absent.

    Returns:
        NOT_MEASURED for an absent key, NOT_SUPPORTED for N/A-like placeholders,
        ERROR / NO_PERMISSION / GPU_LOST for the error placeholders, else None.
    """
    if raw is None:
        return NOT_MEASURED
    text = raw.strip()
    low = text.strip("[]").strip().lower()
    if low in _NOT_SUPPORTED_TEXTS:
        return NOT_SUPPORTED
    for needle, reason in _ERROR_TEXTS:
        if needle in low:
            return Unavailable(reason, text.strip("[]"))
    if low.startswith("error") or not low:
        return Unavailable(Reason.ERROR, text.strip("[]") or "empty value")
    return None


def _numeric(raw: str | None, units: tuple[str, ...], pattern: str) -> Measured[str]:
    missing = unavailable_for(raw)
    if missing is not None:
        return missing
    assert raw is not None  # noqa: S101 -- unavailable_for returned None, so raw is text
    text = raw.strip()
    for unit in units:
        if unit and text.lower().endswith(unit.lower()):
            text = text[: -len(unit)].strip()
            break
    if re.fullmatch(pattern, text):
        return text
    return Unavailable(Reason.ERROR, f"cannot read {raw.strip()!r} as a number")


def read_int(raw: str | None, *units: str) -> Measured[int]:
    """Read "81559 MiB", "16x", "5" as an int; placeholders as Unavailable.

    Args:
        raw: the printed value, None when absent.
        *units: unit suffixes to accept, e.g. "MiB", "x", "MHz".

    Returns:
        The integer, or why there is none.
    """
    text = _numeric(raw, units, r"[-+]?\d+")
    return text if isinstance(text, Unavailable) else int(text)


def read_float(raw: str | None, *units: str) -> Measured[float]:
    """Read "700.00 W", "-8 C", "30 C" as a float; placeholders as Unavailable.

    Args:
        raw: the printed value, None when absent.
        *units: unit suffixes to accept, e.g. "W", "C".

    Returns:
        The number, or why there is none.
    """
    text = _numeric(raw, units, r"[-+]?\d+(?:\.\d+)?")
    return text if isinstance(text, Unavailable) else float(text)


def use_module_power(
    fields: dict[str, Any],
    module_value: Callable[[str], str | None],
    keys_by_field: Mapping[str, tuple[str, ...]],
) -> None:
    """On a GH200, fill the GPU power fields left unknown from the module power readings.

    The Grace Hopper GPU power readings can be N/A; the module's are then the only power
    figures printed.

    Args:
        fields: one GPU's facts by field name, updated in place.
        module_value: the printed value of one module power key (None when absent).
        keys_by_field: for each power field, the module keys to try in order.
    """
    name = fields.get("name")
    if not isinstance(name, str) or "GH200" not in name.upper():
        return
    for field, keys in keys_by_field.items():
        if isinstance(fields[field], Unavailable):
            module = first_known(read_measure(module_value(key)) for key in keys)
            if not isinstance(module, Unavailable):
                fields[field] = module


def read_count(raw: str | None) -> Measured[int]:
    """An integer in any unit nvidia-smi -q prints one in: MiB, MHz, link width "16x"."""
    return read_int(raw, "MiB", "MHz", "x")


def read_measure(raw: str | None) -> Measured[float]:
    """A number in any unit nvidia-smi -q prints one in: watts, degrees C."""
    return read_float(raw, "W", "C")


_TRUE = frozenset({"enabled", "yes", "on", "active", "true"})
_FALSE = frozenset({"disabled", "no", "off", "not active", "false"})


def read_bool(raw: str | None) -> Measured[bool]:
    """Read Enabled/Disabled, Yes/No, On/Off, Active/Not Active.

    Args:
        raw: the printed value, None when absent.

    Returns:
        The flag, or why there is none.
    """
    missing = unavailable_for(raw)
    if missing is not None:
        return missing
    assert raw is not None  # noqa: S101 -- see unavailable_for
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return Unavailable(Reason.ERROR, f"cannot read {raw.strip()!r} as on/off")


def read_text(raw: str | None) -> Measured[str]:
    """A free-text value (name, UUID, serial), stripped of R610's bracketed notes.

    Args:
        raw: the printed value, None when absent.

    Returns:
        The text, or why there is none.
    """
    missing = unavailable_for(raw)
    if missing is not None:
        return missing
    assert raw is not None  # noqa: S101 -- see unavailable_for
    return _BRACKET_NOTE.sub("", raw.strip()).strip()


_BUS_ID = re.compile(
    r"^(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})\.([0-9A-Fa-f])$"
)


def normalize_bus_id(raw: str) -> str | None:
    """Write a PCI bus id the way NVML does: 8-digit domain, upper-case hex.

    Args:
        raw: e.g. "00000000:18:00.0", "0000:18:00.0" or "18:00.0".

    Returns:
        "00000000:18:00.0", or None when ``raw`` is not a bus id.
    """
    match = _BUS_ID.match(raw.strip())
    if not match:
        return None
    domain, bus, device, function = match.groups()
    head = f"{int(domain or '0', 16):08X}:{int(bus, 16):02X}"
    return f"{head}:{int(device, 16):02X}.{function.upper()}"


def read_bus_id(raw: str | None) -> Measured[str]:
    """A bus id value, normalised with :func:`normalize_bus_id`.

    Args:
        raw: the printed value, None when absent.

    Returns:
        The normalised bus id, or why there is none.
    """
    text = read_text(raw)
    if isinstance(text, Unavailable):
        return text
    normal = normalize_bus_id(text)
    if normal is None:
        return Unavailable(Reason.ERROR, f"cannot read {text!r} as a PCI bus id")
    return normal


_COMPUTE_MODES = {
    "default": "default",
    "exclusive_process": "exclusive_process",
    "exclusive process": "exclusive_process",
    "e. process": "exclusive_process",
    "prohibited": "prohibited",
    # Removed from NVML long ago, still printed by very old drivers.
    "exclusive_thread": "exclusive_thread",
    "e. thread": "exclusive_thread",
}


def read_compute_mode(raw: str | None) -> Measured[str]:
    """Compute mode as default | exclusive_process | prohibited.

    Args:
        raw: the printed value, None when absent.

    Returns:
        The normalised mode, or why there is none.
    """
    text = read_text(raw)
    if isinstance(text, Unavailable):
        return text
    mode = _COMPUTE_MODES.get(text.lower())
    if mode is None:
        return Unavailable(Reason.ERROR, f"unknown compute mode {text!r}")
    return mode


# ``GPU Recovery Action`` as nvidia-smi -q / -q -x print it (R565 and newer), by the
# model's RECOVERY_ACTIONS names: NVIDIA's "Error Recovery and Response Flags" page names
# None, Reset, Reboot, Drain P2P and Drain and Reset; Xid 154 lines spell the first two
# actions "GPU Reset Required" and "Node Reboot Required".
_RECOVERY_ACTION_WORDS = {
    "none": "none",
    "reset": "gpu_reset",
    "gpu reset": "gpu_reset",
    "gpu reset required": "gpu_reset",
    "reboot": "node_reboot",
    "node reboot": "node_reboot",
    "node reboot required": "node_reboot",
    "drain p2p": "drain_p2p",
    "drain and reset": "drain_and_reset",
}


def read_recovery_action(raw: str | None) -> Measured[str]:
    """The GPU recovery action, as one of the model's RECOVERY_ACTIONS.

    "None" is the action "none" here, not a placeholder; "N/A" (a GPU or driver without
    it) is not supported, and a word we do not know is an error, never taken for "none".

    Args:
        raw: the printed value, None when absent (drivers before R565).

    Returns:
        The action, or why there is none.
    """
    if raw is not None:
        action = _RECOVERY_ACTION_WORDS.get(" ".join(raw.split()).lower())
        if action is not None:
            return action
    text = read_text(raw)
    if isinstance(text, Unavailable):
        return text
    return Unavailable(Reason.ERROR, f"unknown GPU recovery action {text!r}")


def read_state_word(raw: str | None) -> Measured[str]:
    """A state word in lower snake case: "In Progress" -> "in_progress".

    Args:
        raw: the printed value, None when absent.

    Returns:
        The word, or why there is none.
    """
    text = read_text(raw)
    if isinstance(text, Unavailable):
        return text
    return re.sub(r"[\s-]+", "_", text.strip().lower())


def sum_counts(parts: Iterable[Measured[int]]) -> Measured[int]:
    """Add error counters printed separately (DRAM + SRAM ...).

    A missing part (NOT_SUPPORTED / NOT_MEASURED) adds nothing when another part
    has a value; any other reason (an error reading a counter) wins, so a sum
    is never reported from a counter that failed.

    Args:
        parts: the counters.

    Returns:
        The total, or why there is none.
    """
    total = 0
    seen = False
    first_missing: Unavailable | None = None
    for part in parts:
        if isinstance(part, Unavailable):
            if part.reason not in (Reason.NOT_SUPPORTED, Reason.NOT_MEASURED):
                return part
            if first_missing is None or first_missing.reason == Reason.NOT_MEASURED:
                first_missing = part
            continue
        total += part
        seen = True
    if seen:
        return total
    return first_missing if first_missing is not None else NOT_MEASURED


def first_known(values: Iterable[Measured[T]]) -> Measured[T]:
    """The first value that was measured, else the most telling reason.

    Args:
        values: candidates in order of preference (renamed keys across drivers).

    Returns:
        The first known value; otherwise the first reason that is not
        NOT_MEASURED (the key was printed), else NOT_MEASURED.
    """
    best: Unavailable = NOT_MEASURED
    for value in values:
        if not isinstance(value, Unavailable):
            return value
        if best.reason == Reason.NOT_MEASURED:
            best = value
    return best


_REASON_NAMES = {name for _, name in CLOCK_EVENT_REASONS}
# -q text labels; the XML tag suffixes are the model names themselves except one.
CLOCK_EVENT_LABELS: dict[str, str] = {
    "idle": "gpu_idle",
    "gpu idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clock_setting",
    "display clocks setting": "display_clock_setting",
}


def clock_event_name(label: str) -> str:
    """The model's name for a clock-event label or XML tag suffix.

    535.183.01 prints "Invalid HW Slowdown" etc. for the HW reasons (a label bug;
    the values are valid), so an "Invalid " prefix is dropped.

    Args:
        label: "HW Slowdown", "Invalid HW Slowdown", "hw_slowdown", "display_clocks_setting".

    Returns:
        A name from model.CLOCK_EVENT_REASONS, or the label in snake case when unknown.
    """
    text = label.strip().lower()
    if text.startswith("invalid "):
        text = text[len("invalid ") :]
    text = text.replace("_", " ")
    name = CLOCK_EVENT_LABELS.get(text)
    if name is not None:
        return name
    snake = re.sub(r"\W+", "_", text).strip("_")
    return snake if snake in _REASON_NAMES else f"unknown_{snake}"


def active_reasons(
    section_value: str | None, entries: Iterable[tuple[str, str | None]], present: bool
) -> Measured[tuple[str, ...]]:
    """The active clock-event reasons of one GPU.

    Args:
        section_value: text printed on the section line itself ("N/A" on old GPUs).
        entries: (label, printed value) for every reason listed.
        present: whether the section was printed at all.

    Returns:
        The names of the Active reasons in model order, or why they are unknown.
    """
    if not present:
        return NOT_MEASURED
    items = list(entries)
    if not items:
        missing = unavailable_for(section_value)
        return missing if missing is not None else NOT_SUPPORTED
    active = []
    readable = False
    for label, raw in items:
        flag = read_bool(raw)
        if isinstance(flag, Unavailable):
            continue
        readable = True
        if flag:
            active.append(clock_event_name(label))
    if not readable:
        reason = first_known([read_bool(raw) for _, raw in items])
        return reason if isinstance(reason, Unavailable) else NOT_SUPPORTED
    order = {name: i for i, (_, name) in enumerate(CLOCK_EVENT_REASONS)}
    unique = sorted(set(active), key=lambda name: (order.get(name, len(order)), name))
    return tuple(unique)


def check_gpu_count(count: int, what: str) -> None:
    """Refuse an output with more GPU sections than a node can hold, before they are read.

    Raises:
        ParseError: more than :data:`validator.limits.GPUS_PER_NODE` sections.
    """
    if count > GPUS_PER_NODE:
        raise ParseError(
            f"{what} holds {count} GPU sections; a node has at most {GPUS_PER_NODE}, so this "
            "is not one node's output"
        )
