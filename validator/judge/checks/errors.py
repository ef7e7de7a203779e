"""Errors: ECC counters, row remapping / page retirement, and the kernel log's faults.

Ampere and newer HBM GPUs repair memory by remapping rows and report page retirement as
not supported; Volta and Turing retire pages and report row remapping as not supported.
Each mechanism is judged where the GPU reports it.

The kernel log gives three checks: ``errors.xid`` (GPU Xid lines, each non-PASS finding
with the resolution of NVIDIA's Xid catalog), ``errors.sxid`` (NVSwitch SXid lines, with
the severity and recovery of NVIDIA's Fabric Manager guide) and ``errors.kernel_faults``
(GPU faults that are not Xid lines: RmInitAdapter failures, a GPU fallen off the bus,
GSP firmware timeouts and errors, ECC lines). A fault the driver also reported as an Xid
(a GPU off the bus with its Xid 79) keeps both findings; the fault's says "(also Xid 79)"
so the two are read as one event.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    gpu_finding,
    node_finding,
    readable_gpus,
    unknown_gpu,
    why_not,
    with_action,
)
from validator.judge.policy import Policy
from validator.judge.sxid_catalog import GUIDE, sxid_info
from validator.judge.xid_catalog import hardware_xid_action, xid_action, xid_meaning
from validator.model import (
    ACTION_WORDS,
    Action,
    Finding,
    GpuFacts,
    KernelFault,
    Measured,
    NodeFacts,
    Reason,
    Severity,
    Unavailable,
    XidEvent,
)
from validator.safe_text import bus_key


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge memory error counters, memory repair state, recent Xids, SXids and faults."""
    findings: list[Finding] = []
    for gpu in readable_gpus(facts):
        findings += _ecc_counters(gpu, policy)
        findings += _memory_repair(gpu, policy)
    findings += _xids(facts, policy)
    findings += _sxids(facts, policy)
    findings += _kernel_faults(facts, policy)
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


# Where a memory-repair finding's action comes from (its check chose it, by the fault).
PENDING_SOURCE = "gpuready: a pending repair is applied by the next GPU reset"
WORN_SOURCE = "gpuready: memory out of spare rows or past the policy's limit"


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
        # Out of spare rows, or too many remapped, is a worn HBM stack; a pending remap
        # alone is applied by the next reset.
        worn = failure is True or len(problems) > (1 if pending is True else 0)
        return replace(
            gpu_finding(
                check_id,
                FAIL,
                gpu,
                f"GPU {gpu.index}: " + "; ".join(problems),
                observed=observed,
                expected=f"no pending or failed remap, <= {limit} uncorrectable rows",
            ),
            action=Action.DRAIN_RMA if worn else Action.RESET_GPU,
            action_source=WORN_SOURCE if worn else PENDING_SOURCE,
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
        # Too many retired pages is worn memory; a pending retirement alone is a reset.
        worn = total is not None and total > limit
        return replace(
            gpu_finding(
                check_id, FAIL, gpu, f"GPU {gpu.index}: " + "; ".join(problems),
                observed=observed, expected=expected,
            ),
            action=Action.DRAIN_RMA if worn else Action.RESET_GPU,
            action_source=WORN_SOURCE if worn else PENDING_SOURCE,
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


def parse_time(text: str) -> datetime | None:
    """An ISO 8601 time from a kernel log or a record ("Z" and "," allowed); naive is UTC."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace(",", "."))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _in_window(timestamp: str | None, now: datetime | None, window: timedelta) -> bool:
    # Xids and faults without a wall-clock time are kept: the collector bounded the log.
    if now is None or timestamp is None:
        return True
    moment = parse_time(timestamp)
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


def _by_bus(gpus: Iterable[GpuFacts]) -> dict[tuple[int, int, int], GpuFacts]:
    """The GPUs by their bus, as bus_key has it, to find the GPU a kernel log line names."""
    return {
        key: gpu
        for gpu in gpus
        if isinstance(gpu.pci_bus_id, str) and (key := bus_key(gpu.pci_bus_id)) is not None
    }


def group_xids(events: Iterable[XidEvent], gpus: Iterable[GpuFacts]) -> list[XidGroup]:
    """The events by Xid, switch and device, in that order; each on its GPU found by bus."""
    gpus_by_bus = _by_bus(gpus)
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
    return gpu_finding(
        check, severity, group.gpu, message, observed=group.observed, expected=expected
    )


def _recent_events(facts: NodeFacts, policy: Policy) -> list[XidEvent] | Unavailable:
    """The kernel log's Xid and SXid events inside the policy's window."""
    events = facts.kernel_log.events
    if isinstance(events, Unavailable):
        return events
    now = parse_time(facts.collected_at) if facts.collected_at else None
    window = timedelta(hours=policy.xid_window_hours)
    return [e for e in events if _in_window(e.timestamp, now, window)]


def _xid_action(xid: int, severity: Severity) -> tuple[Action, str]:
    """NVIDIA's catalog resolution for an Xid; for one it lacks, by the policy's verdict.

    An Xid the policy fails is a hardware fault: never "run it again", even where the
    catalog's immediate step assumes the application's fault (see hardware_xid_action).
    """
    catalogued = hardware_xid_action(xid) if severity is FAIL else xid_action(xid)
    if catalogued is not None:
        return catalogued
    if severity is FAIL:
        return Action.DRAIN_RMA, "policy fail_xids (not in NVIDIA's Xid catalog as carried here)"
    return Action.RERUN, "not in NVIDIA's Xid catalog as carried here"


def _xids(facts: NodeFacts, policy: Policy) -> list[Finding]:
    check_id = "errors.xid"
    hours = f"{policy.xid_window_hours:g} h"
    expected = f"no hardware Xid in the last {hours}"
    recent = _recent_events(facts, policy)
    if isinstance(recent, Unavailable):
        return [_log_unread(check_id, "Xid errors", why_not(recent), expected)]
    findings: list[Finding] = []
    ignored: list[int] = []
    for group in group_xids((e for e in recent if not e.nvswitch), facts.gpus):
        xid, where, times = group.xid, group.where, group.times
        if xid in policy.fail_xids:
            severity = FAIL
        elif policy.warn_xids is None or xid in policy.warn_xids:
            severity = WARN
        else:
            ignored.append(xid)
            continue
        action, source = _xid_action(xid, severity)
        text = f"Xid {xid} ({xid_meaning(xid)}) on {where}, {times} in the last {hours}"
        if severity is FAIL:
            text += "; a hardware fault"
        text += f"; {ACTION_WORDS[action]} ({source})"
        findings.append(with_action(xid_finding(check_id, severity, group, text), action, source))
    if not findings:
        note = (
            f" (Xids {', '.join(str(x) for x in sorted(set(ignored)))} seen, ignored by policy)"
            if ignored
            else ""
        )
        findings.append(
            _log_clean(check_id, f"Xid errors in the last {hours}", facts, expected, note)
        )
    return findings


def _log_unread(
    check: str, what: str, why: str, expected: str, *, required: bool = True
) -> Finding:
    """UNKNOWN: the kernel log could not be read for ``what`` ("Xid errors")."""
    text = f"The kernel log could not be read for {what}: {why}"
    return node_finding(check, UNKNOWN, text, expected=expected, required=required)


def _log_clean(check: str, what: str, facts: NodeFacts, expected: str, note: str = "") -> Finding:
    """PASS: the kernel log holds no ``what`` ("Xid errors in the last 24 h")."""
    text = f"No {what} of the kernel log ({facts.kernel_log.source}){note}"
    return node_finding(check, PASS, text, observed="none", expected=expected)


# --------------------------------------------------------------------------- SXids

_LINK = re.compile(r"\bLink (\d+)\b")
# A fatal SXid's reset is the fabric's, not one GPU's (the guide's "GPU reset" section:
# with Fabric Manager stopped, nvidia-smi -r resets the GPUs and NVSwitches together).
SXID_RESET_WORDS = (
    "drain the node and reset its GPUs and NVSwitches together (stop nvidia-fabricmanager, "
    "nvidia-smi -r, start it again), or reboot the node"
)
_LINE_FATAL = re.compile(r"^Fatal\b")


def _sxids(facts: NodeFacts, policy: Policy) -> list[Finding]:
    check_id = "errors.sxid"
    hours = f"{policy.xid_window_hours:g} h"
    expected = f"no fatal SXid in the last {hours}"
    recent = _recent_events(facts, policy)
    if isinstance(recent, Unavailable):
        return [_log_unread(check_id, "NVSwitch SXid errors", why_not(recent), expected)]
    findings = [
        _sxid_finding(group, hours, expected)
        for group in group_xids((e for e in recent if e.nvswitch), ())
    ]
    return findings or [
        _log_clean(check_id, f"NVSwitch SXid errors in the last {hours}", facts, expected)
    ]


def _sxid_finding(group: XidGroup, hours: str, expected: str) -> Finding:
    """One SXid on one NVSwitch: its meaning, how fatal, which links, what to do."""
    info = sxid_info(group.xid)
    said_fatal = any(_LINE_FATAL.match(event.message) for event in group.events)
    links = sorted({int(n) for event in group.events for n in _LINK.findall(event.message)})
    on_links = (
        f", link{'s' if len(links) > 1 else ''} {', '.join(map(str, links))}" if links else ""
    )
    head = f"SXid {group.xid}"
    if info is not None:
        fatal = info.fatal or said_fatal
        head += f" ({info.name}, {info.severity} per NVIDIA's Fabric Manager guide)"
        action = info.action if info.fatal or not said_fatal else Action.RESET_GPU
        source = f"{GUIDE}: {info.severity}" + (
            "" if info.fatal or not said_fatal else "; the line itself says Fatal"
        )
        recovery = f": {info.recovery}" if info.recovery else ""
    else:
        fatal = said_fatal
        head += " (not in the SXid tables carried here: see NVIDIA's Fabric Manager guide"
        head += ", which the line calls fatal)" if said_fatal else ")"
        action = Action.RESET_GPU if said_fatal else Action.RERUN
        source = f"{GUIDE}: not listed" + ("; the line says Fatal" if said_fatal else "")
        recovery = ""
    words = SXID_RESET_WORDS if action is Action.RESET_GPU else ACTION_WORDS[action]
    text = (
        f"{head} on {group.where}{on_links}, {group.times} in the last {hours}: "
        f"{group.events[0].message}; {words}{recovery}"
    )
    finding = xid_finding("errors.sxid", FAIL if fatal else WARN, group, text, expected=expected)
    return with_action(finding, action, source)


# --------------------------------------------------------------------------- kernel faults

# Per fault kind: the Xid the driver reports the same condition as, and what the fault
# is; what to do is that Xid's row of NVIDIA's catalog (xid_action).
_FAULT_RULES: dict[str, tuple[int, str]] = {
    "rm_init_adapter_failed": (143, "failed to initialise"),
    "fallen_off_bus": (79, "has fallen off the bus"),
    "gsp_timeout": (119, "GSP firmware timed out"),
    "gsp_error": (120, "GSP firmware failed"),
    "ecc": (140, "logged an ECC error"),
}


def _fault_action(kind: str) -> tuple[int, str, Action, str]:
    """The fault's Xid, what it is, and the catalog's action with its source."""
    xid, what = _FAULT_RULES[kind]
    catalogued = xid_action(xid)
    if catalogued is None:  # every Xid above is catalogued (tests hold this)
        return xid, what, Action.RESET_GPU, f"Xid {xid} not in NVIDIA's Xid catalog as carried here"
    action, source = catalogued
    return xid, what, action, f"{source} (Xid {xid}, {xid_meaning(xid)})"


@dataclass(frozen=True)
class FaultGroup:
    """Every fault of one kind on one device, and the node's GPU it is, if any."""

    kind: str
    bus: str  # as the log names it; "" when the line names none
    gpu: GpuFacts | None
    faults: tuple[KernelFault, ...]

    @property
    def where(self) -> str:
        """GPU 1 (0000:3b:00) / the GPU at 0000:0a:00 / a GPU the log names GPU6."""
        if self.gpu is not None:
            return f"GPU {self.gpu.index} ({self.bus})"
        if self.bus:
            return f"the GPU at {self.bus} (NVML reports no GPU there)"
        driver = _DRIVER_GPU.match(self.faults[0].message)
        return f"a GPU the driver calls {driver.group(1)}" if driver else "an unnamed GPU"


_DRIVER_GPU = re.compile(r"(GPU\d+)\s")


def group_faults(faults: Iterable[KernelFault], gpus: Iterable[GpuFacts]) -> list[FaultGroup]:
    """The faults by kind and device, each on its GPU found by bus; bus-less ones by kind."""
    gpus_by_bus = _by_bus(gpus)
    groups: dict[tuple[str, str], list[KernelFault]] = defaultdict(list)
    for fault in faults:
        groups[(fault.kind, fault.pci_bus_id.lower())].append(fault)
    found = []
    for (kind, bus), group in sorted(groups.items()):
        key = bus_key(bus) if bus else None
        gpu = gpus_by_bus.get(key) if key is not None else None
        found.append(FaultGroup(kind, bus, gpu, tuple(group)))
    return found


def _kernel_faults(facts: NodeFacts, policy: Policy) -> list[Finding]:
    check_id = "errors.kernel_faults"
    hours = f"{policy.xid_window_hours:g} h"
    expected = f"no GPU fault in the kernel log in the last {hours}"
    faults = facts.kernel_log.faults
    if isinstance(faults, Unavailable):
        return [_faults_unknown(facts, faults, expected)]
    now = parse_time(facts.collected_at) if facts.collected_at else None
    window = timedelta(hours=policy.xid_window_hours)
    recent = [f for f in faults if _in_window(f.timestamp, now, window)]
    xids = _recent_events(facts, policy)
    also = _xid_buses(xids if not isinstance(xids, Unavailable) else [])
    findings = [
        _fault_finding(group, hours, expected, also) for group in group_faults(recent, facts.gpus)
    ]
    what = "GPU faults beyond Xid lines (RmInitAdapter, fallen off the bus, GSP, ECC)"
    return findings or [_log_clean(check_id, f"{what} in the last {hours}", facts, expected)]


def _faults_unknown(facts: NodeFacts, faults: Unavailable, expected: str) -> Finding:
    """UNKNOWN for faults not read: blocking when the log was not read at all.

    Facts whose events were read but which carry no fault reading (a document written
    before faults were read) are judged on their Xids; the gap is said, not blocking.
    """
    older = faults.reason is Reason.NOT_MEASURED and not isinstance(
        facts.kernel_log.events, Unavailable
    )
    why = (
        "these facts carry no reading of them (recorded before faults were read)"
        if older
        else why_not(faults)
    )
    what = "GPU faults beyond Xid lines"
    return _log_unread("errors.kernel_faults", what, why, expected, required=not older)


def _xid_buses(events: Iterable[XidEvent]) -> set[tuple[int, tuple[int, int, int]]]:
    """(Xid, device) of each GPU Xid, to tie a kernel fault to the Xid of the same event."""
    return {
        (event.xid, key)
        for event in events
        if not event.nvswitch and (key := bus_key(event.pci_bus_id)) is not None
    }


def _fault_finding(
    group: FaultGroup, hours: str, expected: str, xids: set[tuple[int, tuple[int, int, int]]]
) -> Finding:
    """One kind of fault on one GPU: what it is, how often, the same event's Xid, what to do."""
    xid, what, action, source = _fault_action(group.kind)
    severity = FAIL
    if group.kind == "rm_init_adapter_failed" and group.gpu is None:
        # NVML cannot reach a GPU that did not initialise, so nvidia-smi -r cannot reset
        # it: a reboot runs its initialisation again.
        action, source = Action.REBOOT, f"{source}; NVML does not list the GPU, so: reboot"
    if group.kind == "ecc":
        severity, action, source = _ecc_verdict(group.gpu, source)
    key = bus_key(group.bus) if group.bus else None
    same_event = f" (also Xid {xid})" if key is not None and (xid, key) in xids else ""
    times = f"{len(group.faults)} times" if len(group.faults) > 1 else "once"
    where = group.where
    text = (
        f"{where[:1].upper()}{where[1:]} {what}{same_event}, {times} in the last {hours}: "
        f"{group.faults[-1].message.rstrip('.')}; {ACTION_WORDS[action]}"
    )
    observed = f"{group.kind} x{len(group.faults)}"
    finding = gpu_finding(
        "errors.kernel_faults", severity, group.gpu, text, observed=observed, expected=expected
    )
    return with_action(finding, action, source)


def _ecc_verdict(gpu: GpuFacts | None, source: str) -> tuple[Severity, Action, str]:
    """An ECC line fails the GPU as its uncorrected count does (errors.ecc_*); else warns."""
    count = gpu.ecc_volatile_uncorrected if gpu is not None else None
    if isinstance(count, int) and count > 0:
        return FAIL, Action.RESET_GPU, source
    return (
        WARN,
        Action.RERUN,
        "NVML shows no uncorrected ECC error on this GPU, or none could be read",
    )


# xid_meaning lives in the Xid catalog; burn and drift read it from here too.
__all__ = [
    "SXID_RESET_WORDS",
    "FaultGroup",
    "XidGroup",
    "check",
    "group_faults",
    "group_xids",
    "parse_time",
    "xid_finding",
    "xid_meaning",
]
