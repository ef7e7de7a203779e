"""Xid / SXid parsing from kernel logs, and the Xid and SXid catalogs."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from validator.judge.sxid_catalog import (
    ALWAYS_FATAL,
    FATAL,
    NON_FATAL,
    SXID_CATALOG,
    sxid_info,
)
from validator.judge.xid_catalog import (
    RESOLUTION_ACTIONS,
    XID_MEANINGS,
    XID_RESOLUTIONS,
    hardware_xid_action,
    xid_action,
    xid_meaning,
)
from validator.model import Action, to_dict
from validator.node.parsers.kernel_log import (
    UPTIME_SLACK_S,
    XidLog,
    log_is_empty,
    parse_xid_events,
    read_xid_log,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "parsers"
UTC = datetime.timezone.utc


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("xid-*.json")), ids=lambda p: p.stem)
def test_xid_fixture(fixture: Path, captures_dir: Path) -> None:
    case = json.loads(fixture.read_text())
    expected = case["expected"]
    events = parse_xid_events((captures_dir / case["capture"]).read_text())
    assert len(events) == expected["count"]
    assert sorted({event.xid for event in events}) == expected["codes"]
    if "nvswitch_count" in expected:
        assert sum(event.nvswitch for event in events) == expected["nvswitch_count"]
    for key, event in (("first", events[0]), ("last", events[-1])):
        actual = to_dict(event)
        for name, value in expected.get(key, {}).items():
            assert actual[name] == value, f"{key} {name}"


# Line forms documented in captures/xid/XID_MEANINGS.md that no stored file carries.
JOURNAL = (
    "Jul 01 22:55:07 gpu-node-7 kernel: NVRM: Xid (PCI:0000:44:00): 79, "
    "GPU has fallen off the bus.\n"
)
WRAPPED = (
    "[  812.100001] NVRM: Xid (PCI:0019:01:00): 149, pid='<unknown>', name=<unknown>, "
    "NETIR Link Interrupt\n"
    "[  812.100002] NVRM:     Link 3 fatal error\n"
    "[  812.100003] NVRM: GPU at PCI:0019:01:00: GPU-aaaa\n"
    "[  812.100004] NVRM:     not a continuation of the Xid\n"
)


def test_journald_line_without_pid() -> None:
    now = datetime.datetime(2025, 7, 2, 0, 0, 0)
    (event,) = parse_xid_events(JOURNAL, now=now)
    assert event.xid == 79
    assert event.pci_bus_id == "0000:44:00"
    assert event.pid is None
    assert event.process is None
    assert event.message == "GPU has fallen off the bus."
    assert event.timestamp == "2025-07-01T22:55:07"


def test_journald_year_rolls_back_at_new_year() -> None:
    now = datetime.datetime(2026, 1, 1, 0, 5, 0)
    (event,) = parse_xid_events(JOURNAL, now=now)
    assert event.timestamp == "2025-07-01T22:55:07"


def test_continuation_lines_join_the_message() -> None:
    events = parse_xid_events(WRAPPED)
    assert len(events) == 1
    assert events[0].xid == 149
    assert events[0].pci_bus_id == "0019:01:00"
    assert events[0].message == "NETIR Link Interrupt Link 3 fatal error"


def test_window_on_wall_clock_stamps(captures_dir: Path) -> None:
    text = (captures_dir / "xid/gpud-dmesg-iso-xid13-sm-exceptions.log").read_text()
    inside = datetime.datetime(2025, 1, 21, 6, 0, tzinfo=UTC)
    outside = datetime.datetime(2025, 1, 22, 6, 0, tzinfo=UTC)
    assert len(parse_xid_events(text, now=inside, window_hours=2)) == 16
    assert parse_xid_events(text, now=outside, window_hours=2) == ()
    assert len(parse_xid_events(text, now=outside, window_hours=None)) == 16


def test_window_on_local_ctime_stamps(captures_dir: Path) -> None:
    text = (captures_dir / "xid/gpud-dmesg-xid-119-h100-xe9680.log").read_text()
    # dmesg -T stamps are local time; a naive `now` is local time too.
    now = datetime.datetime(2025, 2, 23, 16, 35, 0)
    recent = parse_xid_events(text, now=now, window_hours=0.1)  # since 16:29
    assert [event.timestamp for event in recent] == ["2025-02-23T16:30:13"]
    assert len(parse_xid_events(text, now=now, window_hours=1)) == 5


def test_window_on_uptime_stamps(captures_dir: Path) -> None:
    text = (captures_dir / "xid/gpud-xid79-sxid20034-nvswitch.log").read_text()
    now = datetime.datetime(2025, 1, 1, tzinfo=UTC)
    # Booted 6781741 s ago: the Xid 79 is 10 s old, all within one hour.
    assert len(parse_xid_events(text, now=now, window_hours=1, uptime_s=6781751.0)) == 9
    # Ten hours later, none of them are within one hour.
    later = 6781751.0 + 36000
    assert parse_xid_events(text, now=now, window_hours=1, uptime_s=later) == ()
    # Without uptime the raw stamps cannot be placed: kept (fail closed).
    assert len(parse_xid_events(text, now=now, window_hours=1)) == 9


def test_undated_events_are_kept(captures_dir: Path) -> None:
    text = (captures_dir / "xid/repo-mlengineering-xid63-row-remapper.log").read_text()
    now = datetime.datetime(2030, 1, 1, tzinfo=UTC)
    events = parse_xid_events(text, now=now, window_hours=1, uptime_s=10.0)
    assert [event.xid for event in events] == [63]


def test_no_xid_in_text() -> None:
    assert parse_xid_events("") == ()
    assert parse_xid_events("[    0.000000] Linux version 6.8.0\nrandom text\n") == ()


def test_catalog() -> None:
    for xid in (13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 73, 74, 79, 92, 94, 95, 109, 119):
        assert XID_MEANINGS[xid]
    for xid in (120, 121, 140, 143, 144, 145, 146, 147, 148, 149, 150, 154):
        assert XID_MEANINGS[xid]
    assert xid_meaning(79) == "GPU has fallen off the bus"
    # Findings print a meaning inside parentheses of their own.
    assert not any("(" in meaning or ")" in meaning for meaning in XID_MEANINGS.values())


@pytest.mark.parametrize(
    ("text", "empty"),
    [
        ("", True),
        ("\n   \n", True),
        ("-- No entries --\n", True),
        (
            "Hint: You are currently not seeing messages from other users and the system.\n"
            "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
            "      Pass -q to turn off this notice.\n"
            "-- No entries --\n",
            True,
        ),
        ("   indented, but no hint before it\n", False),
        (
            "-- Logs begin at Mon 2026-01-01 00:00:00 UTC, end at Mon 2026-01-01 12:00 UTC. --\n",
            True,
        ),
        ("No journal files were found.\n", True),
        ("[    0.000000] Linux version 6.8.0\n", False),
        ("-- Boot 3f2a --\n" + JOURNAL, False),
    ],
)
def test_log_is_empty(text: str, empty: bool) -> None:
    assert log_is_empty(text) is empty


# ---------------------------------------------------------------- an uptime that cannot be right

XID79_LOG = "xid/gpud-xid79-sxid20034-nvswitch.log"  # raw stamps, the Xid 79 at 6781741 s
TWO_DAYS_LATER = 6781741.0 + 2 * 86400  # a right uptime that puts every event out of a day


@pytest.mark.parametrize(
    "uptime",
    [float("nan"), float("inf"), -1.0, 1e12, 21 * 365.25 * 86400],
    ids=["nan", "inf", "negative", "1e12", "21 years"],
)
def test_implausible_uptime_windows_nothing_out(captures_dir: Path, uptime: float) -> None:
    text = (captures_dir / XID79_LOG).read_text()
    now = datetime.datetime(2025, 1, 1, tzinfo=UTC)
    assert parse_xid_events(text, now=now, window_hours=24, uptime_s=TWO_DAYS_LATER) == ()
    # Fail closed: as without an uptime, every raw-stamped event counts.
    kept = parse_xid_events(text, now=now, window_hours=24, uptime_s=uptime)
    assert kept == parse_xid_events(text)
    assert 79 in {event.xid for event in kept}
    log = read_xid_log(text, now=now, window_hours=24, uptime_s=uptime)
    assert log.events == kept
    assert log.uptime_doubt is not None
    assert log.uptime_doubt.startswith(f"implausible value {uptime!r} for uptime_s")


def test_a_line_stamped_after_the_uptime_discredits_it(captures_dir: Path) -> None:
    # A later line proves the uptime is not this log's: its old Xid counts after all.
    text = (captures_dir / XID79_LOG).read_text() + "[9000000.000000] eth0: link up\n"
    now = datetime.datetime(2025, 1, 1, tzinfo=UTC)
    log = read_xid_log(text, now=now, window_hours=24, uptime_s=TWO_DAYS_LATER)
    assert 79 in {event.xid for event in log.events}
    assert log.uptime_doubt == (
        "uptime 6954541 s is earlier than a log line stamped 9000000 s after boot"
    )


def test_a_line_just_after_the_uptime_is_clock_skew_not_doubt(captures_dir: Path) -> None:
    # The printk clock may run a moment ahead of /proc/uptime: within the slack, trusted.
    later = TWO_DAYS_LATER + UPTIME_SLACK_S / 2
    text = (captures_dir / XID79_LOG).read_text() + f"[{later:.6f}] eth0: link up\n"
    now = datetime.datetime(2025, 1, 1, tzinfo=UTC)
    log = read_xid_log(text, now=now, window_hours=24, uptime_s=TWO_DAYS_LATER)
    assert log == XidLog(events=(), uptime_doubt=None)


def test_no_window_asks_nothing_of_the_uptime(captures_dir: Path) -> None:
    text = (captures_dir / XID79_LOG).read_text()
    log = read_xid_log(text, window_hours=None, uptime_s=float("nan"))
    assert log.uptime_doubt is None
    assert log.events == parse_xid_events(text)


# ---------------------------------------------------------------- what NVIDIA says to do


def test_every_described_xid_has_its_catalog_resolution_and_an_action() -> None:
    assert set(XID_RESOLUTIONS) == set(XID_MEANINGS)
    for xid, row in XID_RESOLUTIONS.items():
        assert row.immediate in RESOLUTION_ACTIONS, xid
        found = xid_action(xid)
        assert found is not None, xid
        assert found[1].startswith(f"NVIDIA Xid catalog: {row.immediate}")


@pytest.mark.parametrize(
    ("xid", "mnemonic", "action", "source"),
    [
        (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", Action.REBOOT, "RESTART_BM"),
        (119, "GSP_RPC_TIMEOUT", Action.RESET_GPU, "RESET_GPU"),
        (
            13,
            "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY",
            Action.RERUN,
            "RESTART_APP",
        ),
        (56, "DISPLAY_CHANNEL_EXCEPTION", Action.DRAIN_RMA, "CONTACT_SUPPORT"),
        (
            149,
            "NVLINK_NETIR_ERROR",
            Action.RESET_GPU,
            "WORKFLOW_NVLINK5_ERR, first step: reset_gpu",
        ),
        (
            63,
            "INFOROM_DRAM_RETIREMENT_EVENT",
            Action.RESET_GPU,
            "IGNORE; the remap is applied at the next GPU reset",
        ),
    ],
)
def test_xid_resolutions_follow_nvidias_catalog(
    xid: int, mnemonic: str, action: Action, source: str
) -> None:
    assert XID_RESOLUTIONS[xid].mnemonic == mnemonic
    assert xid_action(xid) == (action, f"NVIDIA Xid catalog: {source}")


def test_an_xid_the_catalog_lacks_has_no_resolution() -> None:
    assert xid_action(999) is None
    assert hardware_xid_action(999) is None


@pytest.mark.parametrize(
    ("xid", "action"),
    [
        (43, Action.DRAIN_RMA),  # IGNORE, then CONTACT_SUPPORT
        (121, Action.DRAIN_RMA),  # IGNORE, then CONTACT_SUPPORT
        (31, Action.RESET_GPU),  # RESTART_APP, then WORKFLOW_XID_31
        (63, Action.RESET_GPU),  # our override stands: the remap is applied by a reset
        (79, Action.REBOOT),  # a hardware step already: as the catalog says
        (45, Action.RERUN),  # the cleanup after another Xid, which carries the action
    ],
)
def test_a_hardware_xid_takes_the_investigatory_step_over_restart_app_or_ignore(
    xid: int, action: Action
) -> None:
    found = hardware_xid_action(xid)
    assert found is not None
    assert found[0] is action
    if XID_RESOLUTIONS[xid].immediate in ("RESTART_APP", "IGNORE") and xid != 63:
        assert "failed by the policy as hardware" in found[1]
    else:
        assert found == xid_action(xid)


@pytest.mark.parametrize(
    ("sxid", "name", "severity", "action"),
    [
        (20034, "LTSSM Fault Up", FATAL, Action.RESET_GPU),
        (22003, "Minion Halt", ALWAYS_FATAL, Action.REBOOT),
        (11012, "Single bit ECC errors", NON_FATAL, Action.RERUN),
        (20012, "Broken/inconsistent connection", NON_FATAL, Action.RESEAT_CABLE_RISER),
        (10004, "Host_thermal_event_start", NON_FATAL, Action.CHECK_COOLING_POWER),
        (10003, "Host_unhandled_interrupt", FATAL, Action.RESET_GPU),
    ],
)
def test_sxid_catalog_follows_the_fabric_manager_guide(
    sxid: int, name: str, severity: str, action: Action
) -> None:
    info = sxid_info(sxid)
    assert info is not None
    assert (info.name, info.severity, info.action) == (name, severity, action)
    assert info.fatal is (severity != NON_FATAL)


def test_sxid_catalog_sections() -> None:
    by_severity = {
        severity: {s for s, info in SXID_CATALOG.items() if info.severity == severity}
        for severity in (NON_FATAL, FATAL, ALWAYS_FATAL)
    }
    # D.6 of the guide: 12020, 22003, 22011 and the 23001-23017 block, all always fatal.
    assert by_severity[ALWAYS_FATAL] == {12020, 22003, 22011, *range(23001, 23018)}
    assert {11001, 12022, 19047, 20034, 22012, 24007} <= by_severity[FATAL]
    assert sxid_info(29999) is None
