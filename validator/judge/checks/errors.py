"""Errors: ECC counters, row remapping / page retirement, and Xids in the kernel log.

Ampere and newer HBM GPUs repair memory by remapping rows and report page retirement as
not supported; Volta and Turing retire pages and report row remapping as not supported.
Each mechanism is judged where the GPU reports it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from validator.judge.catalog import Sku
from validator.judge.checks.common import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    gpu_finding,
    node_finding,
    readable_gpus,
    unknown_gpu,
    why_not,
)
from validator.judge.policy import Policy
from validator.model import (
    Finding,
    GpuFacts,
    Measured,
    NodeFacts,
    Reason,
    Severity,
    Unavailable,
    XidEvent,
)

# Mnemonics and descriptions from NVIDIA's Xid catalog, without parentheses: findings
# print them inside a pair already
# (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, via captures/xid/XID_MEANINGS.md).
XID_MEANINGS: dict[int, str] = {
    13: "graphics engine exception, usually an application fault",
    31: "GPU memory page fault, usually an application fault",
    43: "GPU stopped processing after an application fault",
    45: "preemptive cleanup due to previous errors",
    48: "double-bit ECC error",
    56: "display engine error",
    57: "error programming video memory interface",
    58: "unstable video memory interface detected",
    62: "internal micro-controller halt",
    63: "GPU memory remapping or page retirement event, applied at the next reset",
    64: "GPU memory remapping or page retirement failure",
    65: "video processor exception",
    68: "NVDEC video decoder exception",
    69: "graphics engine class error",
    73: "NVENC video encoder error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    80: "corrupted data sent to the GPU",
    81: "VGA subsystem error",
    92: "high single-bit ECC error rate",
    94: "contained memory error: uncorrectable, contained to the application",
    95: "uncontained memory error",
    109: "context switch timeout",
    119: "GSP RPC timeout, the GPU likely needs a reset",
    120: "GSP error",
    144: "NVLink5 error NVLINK_SAW_ERROR",
    145: "NVLink5 error NVLINK_RLW_ERROR",
    149: "NVLink5 error NVLINK_NETIR_ERROR",
    150: "NVLink5 error NVLINK_MSE_ERROR",
    154: "recovery action for another Xid changed, informational",
}


def xid_meaning(xid: int) -> str:
    """A short description of an Xid, or a pointer to NVIDIA's catalog."""
    return XID_MEANINGS.get(xid, "see NVIDIA's Xid catalog")


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge memory error counters, memory repair state and recent Xids."""
    findings: list[Finding] = []
    for gpu in readable_gpus(facts):
        findings += _ecc_counters(gpu, policy)
        findings += _memory_repair(gpu, policy)
    findings += _xids(facts, policy)
    return findings


def _ecc_counters(gpu: GpuFacts, policy: Policy) -> list[Finding]:
    findings: list[Finding] = []
    threshold = policy.thresholds.ecc_corrected_volatile_warn
    volatile = gpu.ecc_volatile_uncorrected
    if isinstance(volatile, Unavailable):
        findings.append(
            unknown_gpu(
                "errors.ecc_uncorrected_volatile",
                gpu,
                "uncorrected ECC error count",
                volatile,
                required=policy.require_ecc,
            )
        )
    elif volatile > 0:
        findings.append(
            gpu_finding(
                "errors.ecc_uncorrected_volatile",
                FAIL,
                gpu,
                f"GPU {gpu.index} has had {volatile} uncorrected ECC errors since the driver "
                "loaded; its memory is failing: drain the node and run dcgmi diag -r 3",
                observed=volatile,
                expected=0,
            )
        )
    else:
        findings.append(
            gpu_finding(
                "errors.ecc_uncorrected_volatile",
                PASS,
                gpu,
                f"GPU {gpu.index} has no uncorrected ECC errors since the driver loaded",
                observed=0,
                expected=0,
            )
        )
    aggregate = gpu.ecc_aggregate_uncorrected
    if isinstance(aggregate, Unavailable):
        findings.append(
            unknown_gpu(
                "errors.ecc_uncorrected_aggregate",
                gpu,
                "lifetime uncorrected ECC count",
                aggregate,
                required=False,
            )
        )
    else:
        findings.append(
            gpu_finding(
                "errors.ecc_uncorrected_aggregate",
                WARN if aggregate > 0 else PASS,
                gpu,
                f"GPU {gpu.index} has had {aggregate} uncorrected ECC errors over its lifetime"
                + ("; watch it for new ones" if aggregate > 0 else ""),
                observed=aggregate,
                expected=0,
                required=False,
            )
        )
    corrected = gpu.ecc_volatile_corrected
    if isinstance(corrected, Unavailable):
        findings.append(
            unknown_gpu(
                "errors.ecc_corrected_volatile",
                gpu,
                "corrected ECC error count",
                corrected,
                required=False,
            )
        )
    else:
        high = corrected >= threshold
        findings.append(
            gpu_finding(
                "errors.ecc_corrected_volatile",
                WARN if high else PASS,
                gpu,
                f"GPU {gpu.index} has corrected {corrected} ECC errors since the driver loaded"
                + (f", at or above the {threshold} warning level" if high else ""),
                observed=corrected,
                expected=f"< {threshold}",
                required=False,
            )
        )
    return findings


def _unsupported(*values: Measured[object]) -> bool:
    return all(isinstance(v, Unavailable) and v.reason is Reason.NOT_SUPPORTED for v in values)


def _first_gap(*values: Measured[object]) -> Unavailable | None:
    for value in values:
        if isinstance(value, Unavailable):
            return value
    return None


def _memory_repair(gpu: GpuFacts, policy: Policy) -> list[Finding]:
    remap = (
        gpu.remap_pending,
        gpu.remap_failure,
        gpu.remapped_rows_uncorrectable,
        gpu.remapped_rows_correctable,
    )
    retire = (gpu.retired_pages_pending, gpu.retired_pages_sbe, gpu.retired_pages_dbe)
    remap_off, retire_off = _unsupported(*remap), _unsupported(*retire)
    if remap_off and retire_off:
        return [
            gpu_finding(
                "errors.memory_repair",
                UNKNOWN,
                gpu,
                f"GPU {gpu.index} reports neither row remapping nor page retirement, so "
                "memory repairs cannot be judged",
                required=False,
            )
        ]
    findings: list[Finding] = []
    if not remap_off:
        findings.append(_row_remap(gpu, policy))
    if not retire_off:
        findings.append(_retired_pages(gpu, policy))
    return findings


def _row_remap(gpu: GpuFacts, policy: Policy) -> Finding:
    check_id = "errors.row_remap"
    pending, failure = gpu.remap_pending, gpu.remap_failure
    uncorrectable = gpu.remapped_rows_uncorrectable
    limit = policy.thresholds.remapped_rows_uncorrectable_max
    problems: list[str] = []
    if pending is True:
        problems.append("a row remap is pending: reset the GPU to apply it")
    if failure is True:
        problems.append("a row remap has failed: the GPU has run out of spare rows")
    if isinstance(uncorrectable, int) and uncorrectable > limit:
        problems.append(f"{uncorrectable} rows remapped for uncorrectable errors (max {limit})")
    observed = f"pending={pending}, failure={failure}, uncorrectable rows={uncorrectable}"
    if problems:
        return gpu_finding(
            check_id,
            FAIL,
            gpu,
            f"GPU {gpu.index}: " + "; ".join(problems),
            observed=observed,
            expected=f"no pending or failed remap, <= {limit} uncorrectable rows",
        )
    gap = _first_gap(pending, failure, uncorrectable)
    if gap is not None:
        return unknown_gpu(check_id, gpu, "row remapping state", gap)
    return gpu_finding(
        check_id,
        PASS,
        gpu,
        f"GPU {gpu.index} has no pending or failed row remap ({uncorrectable} rows remapped "
        "for uncorrectable errors)",
        observed=observed,
        expected=f"no pending or failed remap, <= {limit} uncorrectable rows",
    )


def _retired_pages(gpu: GpuFacts, policy: Policy) -> Finding:
    check_id = "errors.retired_pages"
    pending = gpu.retired_pages_pending
    sbe, dbe = gpu.retired_pages_sbe, gpu.retired_pages_dbe
    limit = policy.thresholds.retired_pages_max
    problems: list[str] = []
    if pending is True:
        problems.append("a page retirement is pending: reset the GPU to apply it")
    total = sbe + dbe if isinstance(sbe, int) and isinstance(dbe, int) else None
    if total is not None and total > limit:
        problems.append(f"{total} pages retired (max {limit})")
    observed = f"pending={pending}, retired={total if total is not None else 'unknown'}"
    expected = f"none pending, <= {limit} retired"
    if problems:
        return gpu_finding(
            check_id, FAIL, gpu, f"GPU {gpu.index}: " + "; ".join(problems),
            observed=observed, expected=expected,
        )  # fmt: skip
    gap = _first_gap(pending, sbe, dbe)
    if gap is not None:
        return unknown_gpu(check_id, gpu, "page retirement state", gap)
    return gpu_finding(
        check_id,
        PASS,
        gpu,
        f"GPU {gpu.index} has {total} retired pages and none pending",
        observed=observed,
        expected=expected,
    )


# --------------------------------------------------------------------------- Xids


def bus_key(bus_id: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) from "0000:c1:00" or "00000000:C1:00.0"; None if unparsable."""
    parts = bus_id.strip().split(":")
    if len(parts) != 3:  # domain:bus:device
        return None
    domain, bus, device = parts
    device = device.split(".")[0]
    try:
        return int(domain, 16), int(bus, 16), int(device, 16)
    except ValueError:
        return None


def parse_time(text: str) -> datetime | None:
    """An ISO 8601 time from a kernel log or a record ("Z" and "," allowed); naive is UTC."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace(",", "."))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _in_window(event: XidEvent, now: datetime | None, window: timedelta) -> bool:
    # Events without a wall-clock time are kept: the collector already bounded the log.
    if now is None or event.timestamp is None:
        return True
    moment = parse_time(event.timestamp)
    return moment is None or moment >= now - window


@dataclass(frozen=True)
class XidGroup:
    """Every event of one Xid on one device, and the node's GPU that device is, if any."""

    xid: int
    nvswitch: bool  # an SXid, from an NVSwitch
    bus: str  # the device as the kernel log names it, lower case
    gpu: GpuFacts | None  # None: a switch, or a bus none of the node's GPUs is on
    events: tuple[XidEvent, ...]

    @property
    def where(self) -> str:
        """GPU 1 (0000:3b:00) / NVSwitch 0000:07:00 / PCI device 0000:ee:00."""
        if self.gpu is not None:
            return f"GPU {self.gpu.index} ({self.bus})"
        return f"NVSwitch {self.bus}" if self.nvswitch else f"PCI device {self.bus}"

    @property
    def times(self) -> str:
        """once / 3 times."""
        return f"{len(self.events)} times" if len(self.events) > 1 else "once"

    @property
    def observed(self) -> str:
        """Xid 79 x2 / SXid 20034 x1."""
        return f"{'SXid' if self.nvswitch else 'Xid'} {self.xid} x{len(self.events)}"


def group_xids(events: Iterable[XidEvent], gpus: Iterable[GpuFacts]) -> list[XidGroup]:
    """The events by Xid, switch and device, in that order; each on its GPU found by bus."""
    gpus_by_bus = {
        key: gpu
        for gpu in gpus
        if isinstance(gpu.pci_bus_id, str) and (key := bus_key(gpu.pci_bus_id)) is not None
    }
    groups: dict[tuple[int, bool, str], list[XidEvent]] = defaultdict(list)
    for event in events:
        groups[(event.xid, event.nvswitch, event.pci_bus_id.lower())].append(event)
    found = []
    for (xid, nvswitch, bus), group in sorted(groups.items()):
        key = bus_key(bus) if not nvswitch else None
        gpu = gpus_by_bus.get(key) if key is not None else None
        found.append(XidGroup(xid, nvswitch, bus, gpu, tuple(group)))
    return found


def xid_finding(
    check: str, severity: Severity, group: XidGroup, message: str, *, expected: object = ""
) -> Finding:
    """A finding about one Xid group: on its GPU when it has one, else on the node."""
    if group.gpu is not None:
        return gpu_finding(
            check, severity, group.gpu, message, observed=group.observed, expected=expected
        )
    return node_finding(check, severity, message, observed=group.observed, expected=expected)


def _xids(facts: NodeFacts, policy: Policy) -> list[Finding]:
    check_id = "errors.xid"
    log = facts.kernel_log
    events = log.events
    hours = f"{policy.xid_window_hours:g} h"
    if isinstance(events, Unavailable):
        return [
            node_finding(
                check_id,
                UNKNOWN,
                f"The kernel log could not be read for Xid errors: {why_not(events)}",
                expected=f"no hardware Xid in the last {hours}",
            )
        ]
    now = parse_time(facts.collected_at) if facts.collected_at else None
    window = timedelta(hours=policy.xid_window_hours)
    recent = [e for e in events if _in_window(e, now, window)]
    findings: list[Finding] = []
    ignored: list[int] = []
    for group in group_xids(recent, facts.gpus):
        xid, where, times = group.xid, group.where, group.times
        if group.nvswitch:
            severity = WARN
            text = f"SXid {xid} on {where} ({times} in the last {hours}): {group.events[0].message}"
        elif xid in policy.fail_xids:
            severity = FAIL
            text = (
                f"Xid {xid} ({xid_meaning(xid)}) on {where}, {times} in the last {hours}; "
                "a hardware fault: drain the node and investigate"
            )
        elif policy.warn_xids is None or xid in policy.warn_xids:
            severity = WARN
            text = f"Xid {xid} ({xid_meaning(xid)}) on {where}, {times} in the last {hours}"
        else:
            ignored.append(xid)
            continue
        findings.append(xid_finding(check_id, severity, group, text))
    if not findings:
        note = (
            f" (Xids {', '.join(str(x) for x in sorted(set(ignored)))} seen, ignored by policy)"
            if ignored
            else ""
        )
        findings.append(
            node_finding(
                check_id,
                PASS,
                f"No Xid errors in the last {hours} of the kernel log ({log.source}){note}",
                observed="none",
                expected=f"no hardware Xid in the last {hours}",
            )
        )
    return findings
