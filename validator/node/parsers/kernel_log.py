"""Find Xid (GPU) and SXid (NVSwitch) events in kernel log text.

Handled line forms (all seen in captures/xid/):

* raw dmesg ``[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', ...``
  (``pid='<unknown>', name=<unknown>`` become None)
* ``dmesg -T`` ``[Sun Feb 23 16:24:18 2025] NVRM: Xid (...): 119, pid=2024380, name=smi, ...``
* ``dmesg --time-format iso`` ``kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid ...``
* journald ``Jul 01 22:55:07 host kernel: NVRM: Xid ...`` (no year: the year of ``now``,
  or the one before when that would put the line in the future)
* no pid/name at all: ``NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus``
* NVSwitch ``nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, ...``
* an Xid message wrapped onto continuation lines ``NVRM:`` + deeper indentation,
  which are appended to the message.

Kernel faults that are not Xid lines (:class:`~validator.model.KernelFault`, shapes
from the real lines in tests/fixtures/kernel-log/SOURCES.md):

* ``rm_init_adapter_failed``: ``NVRM: GPU 0000:0a:00.0: RmInitAdapter failed!
  (0x24:0x72:1568)`` (its companion ``rm_init_adapter failed, device minor number 5``
  is the same event and is skipped). The driver's reasons printed just before it
  without a bus id (``NVRM: GPU6 RmInitAdapter: Cannot initialize GSP firmware RM``,
  ``_kgspBootGspRm: ...``) are folded into its message: one event, one fault.
* ``fallen_off_bus``: ``NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.`` and the
  three-line ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``(PCI ID: ...) installed in this
  system has`` / ``fallen off the bus and is not responding to commands.`` Kept even
  next to an Xid 79 for the same GPU: the judge says they are one event.
* ``gsp_timeout`` / ``gsp_error``: the GSP firmware's own lines
  (``_kgspIsHeartbeatTimedOut``, ``_kgspLogRpcTimeout``, ``_kgspRpcRecvPoll``,
  ``GPU4 GSP RPC buffer contains ...`` printed on an RPC timeout,
  ``Cannot initialize GSP firmware RM``, ``_kgspBootGspRm``, ``kgspBootstrap ...
  failed``, ``kgspWaitForGfwBootOk...: failed``).
* ``ecc``: an ``NVRM:`` line about an ECC error that is not an Xid line.

A GSP or ECC line inside an Xid's own dump (the ``NVRM:`` lines logged with it, within
a second, before any other line) is that Xid's detail, not a second fault: an Xid 119
is followed by its RPC history. ``Rate limiting GSP RPC error prints`` only says the
driver will print fewer Xid 119 lines and is no fault. Consecutive lines of one fault
on one device within a second (a dump printed line by line) are one fault.

Windowing fails closed: an event whose time cannot be placed is kept. Raw
``[seconds]`` stamps are placed by the host's uptime; an uptime that cannot be
(NaN, negative, more than about twenty years: see
:mod:`validator.node.physical_ranges`) or that a log line is stamped well after is
not used: every raw-stamped event is then kept, as in a log without an uptime,
and :attr:`XidLog.uptime_doubt` says why.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from dataclasses import dataclass

from validator.limits import KERNEL_LOG_EVENTS
from validator.model import KernelFault, Unavailable, XidEvent
from validator.node.physical_ranges import plausible_uptime
from validator.node.sparing_gc import sparing_collector

_XID = re.compile(
    r"(?:(nvidia-nvswitch\d*):\s*)?(S?Xid)\s*\(PCI:([0-9A-Fa-f:.]+)\):\s*(\d+)\s*,?\s*(.*)$"
)
_PID = re.compile(r"^pid=(?:'([^']*)'|([^,\s]+)),\s*")
_NAME = re.compile(r"^name=([^,]*?),\s*")
_RAW = re.compile(r"^\[\s*(\d+\.\d+)\]\s*")
_CTIME = re.compile(r"^\[(\w{3} \w{3}\s+\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]\s*")
_ISO = re.compile(
    r"^(?:\w+\s*:\s*\w+\s*:\s*)?(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[,.](\d+))?"
    r"([+-]\d{2}:?\d{2}|Z)?\s+"
)
_JOURNAL = re.compile(r"^(\w{3}\s+\d{1,2} \d{2}:\d{2}:\d{2})\s+\S+\s+kernel:\s*")
_CONTINUATION = re.compile(r"NVRM:\s{2,}(\S.*)$")

# A bus id as kernel-fault lines print it: 0000:0a:00.0, 18:00.0 (no domain), 00000000:...
_BUS = r"((?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
_RM_INIT = re.compile(r"NVRM:\s+(?:GPU " + _BUS + r":\s+)?RmInitAdapter failed!")
_RM_INIT_MINOR = re.compile(r"NVRM:.*rm_init_adapter failed, device minor number")
_RM_INIT_REASON = re.compile(r"NVRM:\s+(?:GPU\d+\s+)?(?:RmInitAdapter:|osInitNvMapping:)")
_FALLEN_LINE = re.compile(r"NVRM:\s+GPU " + _BUS + r":\s+GPU has fallen off the bus")
_FALLEN_START = re.compile(r"NVRM:\s+The NVIDIA GPU " + _BUS + r"\s*$")
_FALLEN_END = re.compile(r"fallen off the bus")
_FALLEN_LOOKAHEAD = 3  # lines of the three-line form after its first
_GSP_TIMEOUT = re.compile(
    r"NVRM:.*(?:_kgspIsHeartbeatTimedOut|_kgspLogRpcTimeout|_kgspRpcRecvPoll|GSP RPC timeout"
    r"|GPU\d+ GSP RPC buffer contains"
    r"|Timeout (?:after \d+s )?(?:of )?waiting for RPC (?:response )?from (?:GPU\d+ )?GSP)",
    re.IGNORECASE,
)
_GSP_ERROR = re.compile(
    r"NVRM:.*(?:Cannot initialize GSP firmware RM|_kgspBootGspRm:|kgspBootstrap\w*.*fail"
    r"|kgspWaitForGfwBootOk\w*: failed|kgspWaitForRmInitDone\w*.*fail)"
)
_GSP_PRINT_NOTE = re.compile(r"Rate limiting GSP RPC error prints")
_ECC = re.compile(r"NVRM:.*\bECC\b.*(?:error|uncorrect)", re.IGNORECASE)
_ANY_BUS = re.compile(r"(?:PCI:|GPU )" + _BUS)
_DRIVER_GPU = re.compile(r"NVRM:\s+(GPU\d+)\s")
# Lines of one dump (an Xid's, or a fault printed over several lines) are logged
# within this many seconds of its first.
DUMP_SECONDS = 1.0

# How far a raw stamp may run ahead of the uptime read after it before the uptime is
# doubted: the printk clock and /proc/uptime's start a moment apart at boot.
UPTIME_SLACK_S = 60.0


# What journalctl prints around (or instead of) log lines: "-- No entries --",
# "-- Logs begin at ... --", "-- Boot 3f2a... --", "Hint: You are currently not seeing ...".
_JOURNAL_NOTE = re.compile(r"^(?:--.*--|Hint:.*|No journal files were found\.?)$")


def log_is_empty(text: str) -> bool:
    """True when ``text`` holds no log line at all, journalctl's own notes aside.

    A running system's kernel log is never empty: an empty one was cleared, or is hidden
    from this user (``kernel.dmesg_restrict``, a user outside the ``adm`` group), and
    either way it says nothing about Xids.

    Args:
        text: dmesg or journalctl -k output.

    Returns:
        Whether no line is a log line.
    """
    in_hint = False
    for line in text.splitlines():
        if not line.strip():
            continue
        # journalctl indents a hint's further lines ("      Users in groups 'adm', ...").
        if in_hint and line[:1].isspace():
            continue
        in_hint = line.startswith("Hint:")
        if not _JOURNAL_NOTE.match(line.strip()):
            return False
    return True


class _Stamp:
    """When a line was logged: wall clock (aware or local naive), uptime, or unknown."""

    def __init__(self, wall: datetime.datetime | None = None, uptime: float | None = None) -> None:
        self.wall = wall
        self.uptime = uptime


def _journal_time(text: str, now: datetime.datetime) -> datetime.datetime | None:
    local_now = _as_local_naive(now)
    try:
        stamp = datetime.datetime.strptime(f"{local_now.year} {text}", "%Y %b %d %H:%M:%S")
    except ValueError:
        return None
    if stamp > local_now + datetime.timedelta(days=1):
        stamp = stamp.replace(year=stamp.year - 1)
    return stamp


def _iso_time(match: re.Match[str]) -> datetime.datetime | None:
    base, fraction, zone = match.groups()
    text = base + (f".{fraction[:6].ljust(6, '0')}" if fraction else "")
    if zone:
        text += "+00:00" if zone == "Z" else (zone if ":" in zone else f"{zone[:3]}:{zone[3:]}")
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError:
        return None


def _stamp(line: str, now: datetime.datetime) -> tuple[_Stamp, str]:
    """The line's time and the rest of the line."""
    raw = _RAW.match(line)
    if raw:
        return _Stamp(uptime=float(raw.group(1))), line[raw.end() :]
    ctime = _CTIME.match(line)
    if ctime:
        try:
            wall = datetime.datetime.strptime(ctime.group(1), "%a %b %d %H:%M:%S %Y")
        except ValueError:
            return _Stamp(), line[ctime.end() :]
        return _Stamp(wall=wall), line[ctime.end() :]
    iso = _ISO.match(line)
    if iso:
        return _Stamp(wall=_iso_time(iso)), line[iso.end() :]
    journal = _JOURNAL.match(line)
    if journal:
        return _Stamp(wall=_journal_time(journal.group(1), now)), line[journal.end() :]
    return _Stamp(), line


def _as_local_naive(moment: datetime.datetime) -> datetime.datetime:
    if moment.tzinfo is None:
        return moment
    return moment.astimezone().replace(tzinfo=None)


def _within(
    stamp: _Stamp, now: datetime.datetime, window_hours: float, uptime_s: float | None
) -> bool:
    if stamp.wall is not None:
        wall = stamp.wall
        if wall.tzinfo is None:
            reference = _as_local_naive(now)
        else:
            reference = now if now.tzinfo is not None else now.astimezone()
        return wall >= reference - datetime.timedelta(hours=window_hours)
    if stamp.uptime is not None and uptime_s is not None:
        return stamp.uptime >= uptime_s - window_hours * 3600
    return True  # cannot be dated: keep it (fail closed)


def _event(match: re.Match[str], stamp: _Stamp) -> XidEvent:
    switch, kind, bus, code, rest = match.groups()
    pid = name = None
    pid_match = _PID.match(rest)
    if pid_match:
        pid = pid_match.group(1) if pid_match.group(1) is not None else pid_match.group(2)
        rest = rest[pid_match.end() :]
        name_match = _NAME.match(rest)
        if name_match:
            name = name_match.group(1)
            rest = rest[name_match.end() :]
    return XidEvent(
        xid=int(code),
        pci_bus_id=bus,
        message=rest.strip(),
        timestamp=stamp.wall.isoformat() if stamp.wall is not None else None,
        uptime_s=stamp.uptime,
        pid=None if pid == "<unknown>" else pid,
        process=None if name == "<unknown>" else name,
        nvswitch=kind == "SXid" or bool(switch),
    )


@dataclass(frozen=True)
class XidLog:
    """A kernel log's Xid events and other GPU faults, and why the uptime given was not used."""

    events: tuple[XidEvent, ...]
    # None: the uptime placed the raw stamps (or none was given, or no window asked).
    uptime_doubt: str | None = None
    faults: tuple[KernelFault, ...] = ()
    # Xid and fault lines older than the latest limits.KERNEL_LOG_EVENTS of each: not kept.
    dropped: int = 0


def parse_xid_events(
    text: str,
    *,
    now: datetime.datetime | None = None,
    window_hours: float | None = None,
    uptime_s: float | None = None,
) -> tuple[XidEvent, ...]:
    """The Xid and SXid events in a kernel log, optionally only the recent ones.

    Args:
        text: dmesg (raw, -T or iso) or journalctl -k output.
        now: the reference time for the window; defaults to the current time.
            Naive values and log stamps without a zone are local time.
        window_hours: keep events no older than this; None keeps all.
        uptime_s: seconds since boot, to place raw ``[seconds]`` stamps in the
            window; without it (or with one that cannot be right) such events are kept.

    Returns:
        The events in log order. Events whose time cannot be placed are kept.
    """
    return read_xid_log(text, now=now, window_hours=window_hours, uptime_s=uptime_s).events


def parse_kernel_faults(
    text: str,
    *,
    now: datetime.datetime | None = None,
    window_hours: float | None = None,
    uptime_s: float | None = None,
) -> tuple[KernelFault, ...]:
    """The GPU faults in a kernel log that are not Xid lines, windowed as Xids are.

    Args and windowing as :func:`parse_xid_events`.

    Returns:
        The faults in log order. Faults whose time cannot be placed are kept.
    """
    return read_xid_log(text, now=now, window_hours=window_hours, uptime_s=uptime_s).faults


def read_xid_log(
    text: str,
    *,
    now: datetime.datetime | None = None,
    window_hours: float | None = None,
    uptime_s: float | None = None,
) -> XidLog:
    """The events and faults kept within the window, and why the uptime was not used if not.

    The uptime is not used (every raw-stamped event and fault is kept, fail closed) when
    it is physically implausible, or when a log line is stamped more than
    :data:`UPTIME_SLACK_S` after it: that log was not written by a host up that long.
    """
    reference = now if now is not None else datetime.datetime.now(datetime.timezone.utc)
    # A log at its bound is some 800,000 lines in one list: with CPython's default the
    # scan of a 64 MiB Xid flood took 5.0 s of CPU, with the collector spared 2.3 s.
    with sparing_collector():
        scan = _scan(text, reference)
    if window_hours is None:
        return XidLog(tuple(scan.events), faults=tuple(scan.faults), dropped=scan.dropped)
    doubt = _uptime_doubt(uptime_s, scan.latest_raw) if uptime_s is not None else None
    trusted = uptime_s if doubt is None else None

    def recent(timestamp: str | None, uptime: float | None) -> bool:
        wall = datetime.datetime.fromisoformat(timestamp) if timestamp else None
        return _within(_Stamp(wall=wall, uptime=uptime), reference, window_hours, trusted)

    events = tuple(e for e in scan.events if recent(e.timestamp, e.uptime_s))
    faults = tuple(f for f in scan.faults if recent(f.timestamp, f.uptime_s))
    return XidLog(events, doubt, faults, scan.dropped)


def _uptime_doubt(uptime_s: float, latest_raw: float | None) -> str | None:
    """Why ``uptime_s`` cannot place this log's raw stamps; None when it can."""
    checked = plausible_uptime(uptime_s)
    if isinstance(checked, Unavailable):
        return checked.detail
    if latest_raw is not None and latest_raw > uptime_s + UPTIME_SLACK_S:
        return (
            f"uptime {uptime_s:.0f} s is earlier than a log line stamped {latest_raw:.0f} s "
            "after boot"
        )
    return None


def normalise_bus(text: str) -> str:
    """``0000:0a:00`` from ``0000:0a:00.0``, ``18:00.0`` or ``00000000:0A:00.0``.

    Kernel-fault lines print the function and sometimes omit the domain; Xid lines
    print neither the function nor upper case: faults are named the Xid way.
    """
    parts = text.strip().lower().split(".")[0].split(":")
    if len(parts) == 2:
        parts.insert(0, "0000")
    domain, bus, device = parts[-3:]
    return f"{domain[-4:].rjust(4, '0')}:{bus}:{device}"


def _close(first: _Stamp, second: _Stamp) -> bool:
    """Whether two lines were logged within :data:`DUMP_SECONDS` (an unstamped line is)."""
    if first.uptime is not None and second.uptime is not None:
        return abs(first.uptime - second.uptime) <= DUMP_SECONDS
    if first.wall is not None and second.wall is not None:
        try:
            return abs((first.wall - second.wall).total_seconds()) <= DUMP_SECONDS
        except TypeError:  # one aware, one naive: cannot be compared, so not one dump
            return False
    return _undated(first) or _undated(second)


def _undated(stamp: _Stamp) -> bool:
    return stamp.wall is None and stamp.uptime is None


@dataclass
class _Found:
    """A fault while scanning: the fault so far, when, and whether it is a reason only."""

    kind: str
    bus: str
    parts: list[str]
    stamp: _Stamp
    reason: bool = False  # a bus-less line printed before an RmInitAdapter failure

    @property
    def driver_gpu(self) -> str:
        match = _DRIVER_GPU.match("NVRM: " + self.parts[0] + " ")
        return match.group(1) if match else ""

    def fault(self) -> KernelFault:
        wall = self.stamp.wall
        return KernelFault(
            kind=self.kind,
            pci_bus_id=self.bus,
            message=self.parts[0]
            + (f" (after: {'; '.join(self.parts[1:])})" if len(self.parts) > 1 else ""),
            timestamp=wall.isoformat() if wall is not None else None,
            uptime_s=self.stamp.uptime,
        )


@dataclass
class _Scan:
    """What one pass over a log found."""

    events: list[XidEvent]
    faults: list[KernelFault]
    latest_raw: float | None
    dropped: int = 0  # the older Xid and fault lines not kept (limits.KERNEL_LOG_EVENTS)


def _nvrm_text(body: str) -> str:
    """The line from its ``NVRM:`` on, without that prefix."""
    at = body.find("NVRM:")
    return body[at + len("NVRM:") :].strip() if at >= 0 else body.strip()


def _bus_in(body: str) -> str:
    match = _ANY_BUS.search(body)
    return normalise_bus(match.group(1)) if match else ""


# (pattern, kind, a reason only, also inside an Xid's dump), first match wins.
_FAULT_LINES: tuple[tuple[re.Pattern[str], str, bool, bool], ...] = (
    (_FALLEN_LINE, "fallen_off_bus", False, True),
    (_RM_INIT, "rm_init_adapter_failed", False, True),
    (_RM_INIT_REASON, "rm_init_adapter_failed", True, True),
    (_GSP_TIMEOUT, "gsp_timeout", False, False),
    (_GSP_ERROR, "gsp_error", False, False),
    (_ECC, "ecc", False, False),
)


def _fault_kind(body: str, in_xid_dump: bool) -> tuple[str, bool] | None:
    """The kind of fault a (non-Xid) line shows and whether it is a reason only; or None.

    GSP and ECC lines logged with an Xid are that Xid's detail; a GPU that failed to
    initialise or fell off the bus is named even there (the judge ties it to the Xid).
    """
    if _RM_INIT_MINOR.search(body) or _GSP_PRINT_NOTE.search(body):
        return None  # the same event as the line before it / a note on Xid prints
    for pattern, kind, reason, in_dump_too in _FAULT_LINES:
        if pattern.search(body) and (in_dump_too or not in_xid_dump):
            return ("gsp_error" if reason and "GSP" in body else kind), reason
    return None


def _scan(text: str, reference: datetime.datetime) -> _Scan:
    """Every Xid event and kernel fault in log order, and the latest raw stamp of any line."""
    # Each Xid line as matched, with its continuation lines; made an XidEvent only if
    # kept (a flood of Xids costs a match a line, not an event).
    events: list[tuple[re.Match[str], _Stamp, list[str]]] = []
    found: list[_Found] = []
    latest_raw: float | None = None
    last: tuple[re.Match[str], _Stamp, list[str]] | None = None
    dump: _Stamp | None = None  # the stamp of the Xid whose dump the lines may be
    fallen: tuple[_Found, int] | None = None  # a three-line fallen-off-bus, lines left
    dropped = 0
    for raw_line in text.splitlines():
        # A log flooded with Xids keeps its latest ones (trimmed in batches: cheap).
        if len(events) > 2 * KERNEL_LOG_EVENTS:
            dropped += len(events) - KERNEL_LOG_EVENTS
            del events[:-KERNEL_LOG_EVENTS]
        if len(found) > 2 * KERNEL_LOG_EVENTS:
            dropped += len(found) - KERNEL_LOG_EVENTS
            del found[:-KERNEL_LOG_EVENTS]
        stamp, body = _stamp(raw_line.rstrip(), reference)
        if stamp.uptime is not None:
            latest_raw = stamp.uptime if latest_raw is None else max(latest_raw, stamp.uptime)
        match = _XID.search(body)
        if match:
            last = (match, stamp, [])
            events.append(last)
            dump, fallen = stamp, None
            continue
        continuation = _CONTINUATION.search(body)
        if last is not None and continuation and events and events[-1] is last:
            last[2].append(continuation.group(1).strip())
            continue
        last = None
        if dump is not None and not ("NVRM:" in body and _close(stamp, dump)):
            dump = None
        fallen = _fallen_off_bus(body, stamp, fallen, found)
        if fallen is not None or _FALLEN_START.search(body):
            continue
        kind = _fault_kind(body, dump is not None)
        if kind is not None:
            found.append(_Found(kind[0], _bus_in(body), [_nvrm_text(body)], stamp, kind[1]))
    for kept in (events, found):
        dropped += max(0, len(kept) - KERNEL_LOG_EVENTS)
        del kept[:-KERNEL_LOG_EVENTS]
    faults = [f.fault() for f in _fold_reasons(_merge_runs(found))]
    return _Scan([_continued(*seen) for seen in events], faults, latest_raw, dropped)


def _continued(match: re.Match[str], stamp: _Stamp, continuations: list[str]) -> XidEvent:
    """The event of an Xid line, its message continued by the lines that followed it."""
    event = _event(match, stamp)
    if not continuations:
        return event
    message = event.message
    for part in continuations:
        message = f"{message} {part}".strip()
    return dataclasses.replace(event, message=message)


def _fallen_off_bus(
    body: str, stamp: _Stamp, pending: tuple[_Found, int] | None, found: list[_Found]
) -> tuple[_Found, int] | None:
    """Follow the three-line ``The NVIDIA GPU ... fallen off the bus`` form.

    Returns:
        The form still being read (and how many lines it may still take), or None.
    """
    start = _FALLEN_START.search(body)
    if start:
        first = _Found("fallen_off_bus", normalise_bus(start.group(1)), [_nvrm_text(body)], stamp)
        return first, _FALLEN_LOOKAHEAD
    if pending is None:
        return None
    fault, left = pending
    fault.parts[0] = f"{fault.parts[0]} {_nvrm_text(body)}".strip()
    if _FALLEN_END.search(body):
        found.append(fault)
        return None
    return (fault, left - 1) if left > 1 else None


def _same_run(before: _Found, after: _Found) -> bool:
    return (
        before.kind == after.kind
        and before.bus == after.bus
        and before.driver_gpu == after.driver_gpu
        and before.reason == after.reason
        and _close(before.stamp, after.stamp)
    )


def _merge_runs(found: list[_Found]) -> list[_Found]:
    """One fault for consecutive lines of one kind on one device within a second."""
    merged: list[_Found] = []
    for fault in found:
        if merged and fault.kind != "rm_init_adapter_failed" and _same_run(merged[-1], fault):
            previous = merged[-1]
            text = fault.parts[0]
            if text not in previous.parts and len(previous.parts) < 3:
                previous.parts.append(text)
            continue
        merged.append(fault)
    return merged


def _reason_for(before: _Found, failure: _Found) -> bool:
    """Whether a bus-less line printed just before an RmInitAdapter failure is its reason."""
    firmware = before.kind in ("gsp_error", "gsp_timeout")
    return not before.bus and (before.reason or firmware) and _close(before.stamp, failure.stamp)


def _fold_reasons(found: list[_Found]) -> list[_Found]:
    """Bus-less reasons printed just before an RmInitAdapter failure join that failure.

    The GSP firmware's boot failure and the driver's reason lines name the GPU by the
    driver's own number (GPU6), the failure by its bus: one event, named by its bus.
    """
    out: list[_Found] = []
    for fault in found:
        if fault.kind == "rm_init_adapter_failed" and not fault.reason:
            reasons: list[_Found] = []
            while out and _reason_for(out[-1], fault):
                reasons.insert(0, out.pop())
            for reason in reasons:
                fault.parts.extend(part for part in reason.parts if len(fault.parts) < 4)
        out.append(fault)
    for fault in out:
        fault.reason = False
    return out
