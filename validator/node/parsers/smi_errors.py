"""Recognise the messages nvidia-smi prints instead of its output.

When the driver is missing, mismatched or a GPU is lost, nvidia-smi prints one
of a handful of sentences and exits. These are facts about the node (the driver
state), not malformed input, so they map to an :class:`NvmlStatus` rather than
an exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from validator.model import NOT_MEASURED, Measured, NvmlStatus
from validator.node.parsers.base import ParseError

# Most specific first: "Failed to initialize NVML: <why>" covers several statuses.
_PATTERNS: tuple[tuple[re.Pattern[str], NvmlStatus], ...] = (
    (re.compile(r"driver/library version mismatch", re.I), NvmlStatus.DRIVER_MISMATCH),
    (
        re.compile(r"couldn't communicate with the NVIDIA driver", re.I),
        NvmlStatus.DRIVER_NOT_LOADED,
    ),
    (re.compile(r"No devices were found", re.I), NvmlStatus.NO_DEVICES),
    (re.compile(r"Insufficient Permissions", re.I), NvmlStatus.NO_PERMISSION),
    (re.compile(r"NVML library not found", re.I), NvmlStatus.LIBRARY_NOT_FOUND),
    (re.compile(r"couldn't find libnvidia-ml\.so", re.I), NvmlStatus.LIBRARY_NOT_FOUND),
    (re.compile(r"libnvidia-ml\.so\S*: cannot open", re.I), NvmlStatus.LIBRARY_NOT_FOUND),
    (re.compile(r"nvidia-smi\S*: (command )?not found", re.I), NvmlStatus.LIBRARY_NOT_FOUND),
    (re.compile(r"Unable to determine the device handle", re.I), NvmlStatus.ERROR),
    (re.compile(r"GPU is lost", re.I), NvmlStatus.ERROR),
    (re.compile(r"fallen off the bus", re.I), NvmlStatus.ERROR),
    (re.compile(r"Failed to initialize NVML", re.I), NvmlStatus.ERROR),
)

# After a mismatch nvidia-smi names the user-space side: "NVML library version: 550.54".
_LIBRARY_VERSION = re.compile(r"NVML library version:\s*(\d+(?:\.\d+)+)", re.I)

# "for GPU 0000:91:00.0", "for GPU0000:91:00.0" (no space, as in the gpud README),
# "for gpu 00000000:3B:00.0"; also "GPU 0000:91:00.0: GPU has fallen off the bus".
_BUS_ID = r"(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?"
_LOST_LINE = re.compile(
    rf"(?:device handle for GPU\s*|GPU\s*|PCI:)({_BUS_ID})\b.*?"
    r"(?:Unknown Error|GPU is lost|fallen off the bus)",
    re.I,
)


def classify_smi_error(text: str) -> tuple[NvmlStatus, str] | None:
    """Recognise a message nvidia-smi printed instead of its normal output.

    Args:
        text: everything nvidia-smi printed (stdout and stderr).

    Returns:
        The driver state and the meaningful line, or None when no known
        error message is present.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for pattern, status in _PATTERNS:
        for line in lines:
            if pattern.search(line):
                return status, line
    return None


@dataclass(frozen=True)
class SmiError:
    """A message nvidia-smi printed instead of its output, read as facts."""

    status: NvmlStatus
    detail: str  # the meaningful line
    library_version: Measured[str]  # the user-space NVML version, where the text names it


def library_version(text: str) -> Measured[str]:
    """The user-space NVML version an nvidia-smi error names ("NVML library version: 550.54").

    Args:
        text: everything nvidia-smi printed.

    Returns:
        The version as printed, or NOT_MEASURED when the text names none.
    """
    match = _LIBRARY_VERSION.search(text)
    return match.group(1) if match else NOT_MEASURED


def smi_error(text: str, what: str, missing: str = "") -> SmiError:
    """The known error nvidia-smi printed where ``what`` was expected.

    Args:
        text: everything nvidia-smi printed.
        what: the output expected, for the message ("nvidia-smi -q output").
        missing: what marks that output and was not found, for the message.

    Returns:
        The driver state, the line saying it and the user-space version it names.

    Raises:
        ParseError: the text is empty, or neither ``what`` nor a known error message.
    """
    error = classify_smi_error(text)
    if error is not None:
        return SmiError(error[0], error[1], library_version(text))
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not first:
        raise ParseError(f"{what} is empty")
    note = f" ({missing})" if missing else ""
    raise ParseError(f"not {what}{note}: {first[:80]!r}")


def lost_gpu_bus_ids(text: str) -> tuple[str, ...]:
    """Bus ids named in lines saying a GPU's handle failed, it is lost or fell off the bus.

    Args:
        text: nvidia-smi output or kernel log text.

    Returns:
        The bus ids as printed, upper-cased, in order of first mention, without repeats.
    """
    found = []
    for line in text.splitlines():
        match = _LOST_LINE.search(line)
        if match:
            bus_id = match.group(1).upper()
            if bus_id not in found:
                found.append(bus_id)
    return tuple(found)
