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

Windowing fails closed: an event whose time cannot be placed is kept. Raw
``[seconds]`` stamps are placed by the host's uptime; an uptime that cannot be
(NaN, negative, more than about twenty years: see
:mod:`validator.node.plausibility`) or that a log line is stamped well after is
not used: every raw-stamped event is then kept, as in a log without an uptime,
and :attr:`XidLog.uptime_doubt` says why.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from dataclasses import dataclass

from validator.model import Unavailable, XidEvent
from validator.node.plausibility import plausible_uptime

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
    """The Xid events of a kernel log, and why the uptime given was not used, if it was not."""

    events: tuple[XidEvent, ...]
    # None: the uptime placed the raw stamps (or none was given, or no window asked).
    uptime_doubt: str | None = None


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


def read_xid_log(
    text: str,
    *,
    now: datetime.datetime | None = None,
    window_hours: float | None = None,
    uptime_s: float | None = None,
) -> XidLog:
    """The events :func:`parse_xid_events` keeps, and why the uptime was not used if not.

    The uptime is not used (every raw-stamped event is kept, fail closed) when it is
    physically implausible, or when a log line is stamped more than
    :data:`UPTIME_SLACK_S` after it: that log was not written by a host up that long.
    """
    reference = now if now is not None else datetime.datetime.now(datetime.timezone.utc)
    events, latest_raw = _events(text, reference)
    if window_hours is None:
        return XidLog(tuple(events))
    doubt = _uptime_doubt(uptime_s, latest_raw) if uptime_s is not None else None
    trusted = uptime_s if doubt is None else None
    kept = []
    for event in events:
        stamp = _Stamp(
            wall=datetime.datetime.fromisoformat(event.timestamp) if event.timestamp else None,
            uptime=event.uptime_s,
        )
        if _within(stamp, reference, window_hours, trusted):
            kept.append(event)
    return XidLog(tuple(kept), doubt)


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


def _events(text: str, reference: datetime.datetime) -> tuple[list[XidEvent], float | None]:
    """Every Xid event in log order, and the latest raw ``[seconds]`` stamp of any line."""
    events: list[XidEvent] = []
    latest_raw: float | None = None
    last: tuple[XidEvent, _Stamp] | None = None
    for raw_line in text.splitlines():
        stamp, body = _stamp(raw_line.rstrip(), reference)
        if stamp.uptime is not None:
            latest_raw = stamp.uptime if latest_raw is None else max(latest_raw, stamp.uptime)
        match = _XID.search(body)
        if match:
            last = (_event(match, stamp), stamp)
            events.append(last[0])
            continue
        continuation = _CONTINUATION.search(body)
        if last is not None and continuation and events and events[-1] is last[0]:
            joined = f"{last[0].message} {continuation.group(1).strip()}".strip()
            updated = dataclasses.replace(last[0], message=joined)
            events[-1] = updated
            last = (updated, last[1])
            continue
        last = None
    return events, latest_raw
