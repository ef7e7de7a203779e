"""What the kernel log says about the GPUs: Xid (and SXid) events and other faults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from validator.model.measured import NOT_MEASURED, Measured


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
