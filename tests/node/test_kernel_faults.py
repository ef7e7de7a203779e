"""The kernel log beyond Xid lines: reading RmInitAdapter, fallen-off-bus, GSP and ECC
faults from real lines, collecting them with the Xids, judging them with an action, and
the two scenarios (a fatal SXid, a GPU that did not initialise)."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.collecting import collect_simulated
from tests.judge.test_judge_healthy import healthy_node
from validator.judge import xid_catalog
from validator.judge.checks.errors import check as errors_check
from validator.judge.policy import Policy
from validator.judge.verdict import judge_node
from validator.model import (
    NOT_MEASURED,
    Action,
    Finding,
    KernelFault,
    KernelLogFacts,
    NodeFacts,
    Reason,
    Severity,
    Unavailable,
    Verdict,
    XidEvent,
)
from validator.node.parsers.kernel_log import (
    normalise_bus,
    parse_kernel_faults,
    read_xid_log,
)
from validator.node.sim.scenario import ScenarioSystem
from validator.node.system_facts import kernel_log_facts

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kernel-log"
UTC = datetime.timezone.utc
FAIL, PASS, UNKNOWN, WARN = Severity.FAIL, Severity.PASS, Severity.UNKNOWN, Severity.WARN
NO_BURN = Policy(require_burn=False)


def kinds(faults: tuple[KernelFault, ...]) -> list[tuple[str, str]]:
    return [(fault.kind, fault.pci_bus_id) for fault in faults]


# ---------------------------------------------------------------- the real Xid captures

# Every kernel log in captures/xid: the Xids it gave before faults were read, and the
# faults it gives now (the Xid 119 capture's RPC history dump gives none).
XID_CAPTURES: dict[str, tuple[int, list[int], list[tuple[str, str]]]] = {
    "gpud-dmesg-iso-xid13-sm-exceptions.log": (16, [13], []),
    "gpud-dmesg-xid-119-h100-xe9680.log": (5, [119], []),
    "gpud-xid79-sxid20034-nvswitch.log": (9, [79, 20034], [("fallen_off_bus", "0000:91:00")]),
    "repo-mlengineering-xid63-row-remapper.log": (1, [63], []),
}


def test_every_real_xid_capture_is_covered(captures_dir: Path) -> None:
    assert {p.name for p in (captures_dir / "xid").glob("*.log")} == set(XID_CAPTURES)


@pytest.mark.parametrize("name", sorted(XID_CAPTURES))
def test_every_real_xid_capture_reads_the_same_xids_and_its_own_faults(
    captures_dir: Path, name: str
) -> None:
    count, codes, faults = XID_CAPTURES[name]
    log = read_xid_log((captures_dir / "xid" / name).read_text())
    assert len(log.events) == count
    assert sorted({event.xid for event in log.events}) == codes
    assert kinds(log.faults) == faults


def test_the_xid_79_capture_gives_its_sxids_with_switch_and_link(captures_dir: Path) -> None:
    log = read_xid_log((captures_dir / "xid/gpud-xid79-sxid20034-nvswitch.log").read_text())
    sxids = [event for event in log.events if event.nvswitch]
    assert {event.xid for event in sxids} == {20034}
    first = sxids[0]
    assert (first.pci_bus_id, first.message) == ("0000:06:00.0", "Fatal, Link 48 LTSSM Fault Up")
    assert first.uptime_s == 6781753.400584
    assert sorted({event.pci_bus_id for event in sxids}) == [
        "0000:05:00.0",
        "0000:06:00.0",
        "0000:07:00.0",
    ]
    (fallen,) = log.faults
    assert fallen.message == "GPU 0000:91:00.0: GPU has fallen off the bus."
    assert fallen.uptime_s == 6781741.548783


def test_an_xid_119_dump_is_no_second_fault(captures_dir: Path) -> None:
    # GSP RPC history, buffer and rate-limit lines belong to the Xid 119s they follow.
    text = (captures_dir / "xid/gpud-dmesg-xid-119-h100-xe9680.log").read_text()
    assert "GSP RPC buffer contains" in text
    assert "Rate limiting GSP RPC error prints" in text
    assert read_xid_log(text).faults == ()


# ---------------------------------------------------------------- real fault lines


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


FIXTURE_FAULTS: dict[str, list[tuple[str, str]]] = {
    "nvsentinel155-fallen-off-bus-multiline.log": [("fallen_off_bus", "0000:b3:00")],
    "gpu-operator1146-rminitadapter-journal.log": [("rm_init_adapter_failed", "0000:0a:00")] * 6,
    "ogkm789-rminitadapter-gsp-firmware.log": [
        ("rm_init_adapter_failed", "0000:98:00"),
        ("gsp_error", ""),
    ],
    "ogkm1230-gsp-heartbeat-and-wpr2.log": [
        ("gsp_timeout", ""),
        ("gsp_timeout", ""),
        ("rm_init_adapter_failed", "0000:a1:00"),
        ("rm_init_adapter_failed", "0000:a1:00"),
    ],
    "cmpunlocker4-rminitadapter-cannot-attach.log": [("rm_init_adapter_failed", "0000:01:00")] * 2,
    "nvidia-docker849-xid48-dbe-ctime.log": [],
}


def test_every_fixture_is_listed_with_its_source() -> None:
    names = {p.name for p in FIXTURES.glob("*.log")}
    assert names == set(FIXTURE_FAULTS)
    sources = (FIXTURES / "SOURCES.md").read_text()
    assert all(f"`{name}`" in sources for name in names)


@pytest.mark.parametrize("name", sorted(FIXTURE_FAULTS))
def test_real_fault_lines_give_their_faults(name: str) -> None:
    assert kinds(parse_kernel_faults(fixture(name))) == FIXTURE_FAULTS[name]


def test_the_three_line_fallen_off_bus_is_one_fault_at_its_first_line() -> None:
    (fault,) = parse_kernel_faults(fixture("nvsentinel155-fallen-off-bus-multiline.log"))
    assert fault.message == (
        "The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen "
        "off the bus and is not responding to commands."
    )
    assert (fault.uptime_s, fault.timestamp) == (1843.308145, None)


def test_rm_init_adapter_takes_the_journal_time_and_skips_its_minor_number_line() -> None:
    text = fixture("gpu-operator1146-rminitadapter-journal.log")
    faults = parse_kernel_faults(text, now=datetime.datetime(2025, 12, 3))
    assert faults[0].message == "GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)"
    assert faults[0].timestamp == "2025-12-02T11:49:53"
    assert not any("minor number" in fault.message for fault in faults)


def test_the_reasons_printed_before_an_rm_init_failure_join_it() -> None:
    first, _ = parse_kernel_faults(fixture("ogkm789-rminitadapter-gsp-firmware.log"))
    assert first.message == (
        "GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792) "
        "(after: RmInitAdapter: Cannot initialize GSP firmware RM)"
    )
    *_, last = parse_kernel_faults(fixture("ogkm1230-gsp-heartbeat-and-wpr2.log"))
    assert last.message.startswith(
        "GPU 0000:a1:00.0: RmInitAdapter failed! (0x62:0x40:2168) (after: GPU6 _kgspBootGspRm: "
        "unexpected WPR2 already up, cannot proceed with booting GSP; "
    )
    assert last.message.endswith("; GPU6 RmInitAdapter: Cannot initialize GSP firmware RM)")


def test_a_gsp_line_printed_twice_is_one_fault() -> None:
    heartbeat, banner, *_ = parse_kernel_faults(fixture("ogkm1230-gsp-heartbeat-and-wpr2.log"))
    assert heartbeat.message.startswith("GPU6 _kgspIsHeartbeatTimedOut: Heartbeat timed out")
    assert "(after:" not in heartbeat.message
    assert banner.message.startswith("GPU6 _kgspLogRpcTimeout: ****")


def test_an_xid_48_line_about_ecc_is_an_xid_not_an_ecc_fault() -> None:
    log = read_xid_log(fixture("nvidia-docker849-xid48-dbe-ctime.log"))
    assert [event.xid for event in log.events] == [48, 63]
    assert log.faults == ()


@pytest.mark.parametrize(
    ("text", "bus"),
    [
        ("0000:0a:00.0", "0000:0a:00"),
        ("18:00.0", "0000:18:00"),
        ("00000000:DB:00.0", "0000:db:00"),
        ("0019:01:00", "0019:01:00"),
    ],
)
def test_fault_buses_are_named_the_xid_way(text: str, bus: str) -> None:
    assert normalise_bus(text) == bus


# ---------------------------------------------------------------- windows, as for Xids


def test_faults_are_windowed_on_journal_wall_clock_stamps() -> None:
    text = fixture("gpu-operator1146-rminitadapter-journal.log")
    now = datetime.datetime(2025, 12, 2, 11, 56, 0)  # local, as journald's stamps are
    assert len(parse_kernel_faults(text, now=now, window_hours=0.05)) == 3  # since 11:53
    assert parse_kernel_faults(text, now=now + datetime.timedelta(days=2), window_hours=1) == ()


def test_faults_are_windowed_on_raw_stamps_by_the_uptime() -> None:
    text = fixture("nvsentinel155-fallen-off-bus-multiline.log")
    now = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    assert len(parse_kernel_faults(text, now=now, window_hours=1, uptime_s=1900.0)) == 1
    assert parse_kernel_faults(text, now=now, window_hours=1, uptime_s=1900.0 + 7200) == ()
    # Without an uptime (or with one that cannot be right) the fault is kept: fail closed.
    assert len(parse_kernel_faults(text, now=now, window_hours=1)) == 1
    log = read_xid_log(text, now=now, window_hours=1, uptime_s=float("nan"))
    assert len(log.faults) == 1
    assert log.uptime_doubt is not None


# ---------------------------------------------------------------- collected with the Xids

NOW = "2026-01-01T12:00:00+00:00"


def system(commands: dict[str, Any], uptime_s: float = 86400.0) -> ScenarioSystem:
    return ScenarioSystem({"now": NOW, "host": {"uptime_s": uptime_s}, "commands": commands})


def test_dmesg_gives_faults_and_xids_from_one_read(captures_dir: Path) -> None:
    text = (captures_dir / "xid/gpud-xid79-sxid20034-nvswitch.log").read_text()
    facts = kernel_log_facts(system({"dmesg": {"rc": 0, "stdout": text}}, 6781751.0), 24.0)
    assert facts.source == "dmesg"
    assert isinstance(facts.events, tuple)
    assert len(facts.events) == 9
    assert isinstance(facts.faults, tuple)
    assert kinds(facts.faults) == [("fallen_off_bus", "0000:91:00")]


def test_faults_age_out_of_the_window_with_their_xid(captures_dir: Path) -> None:
    text = (captures_dir / "xid/gpud-xid79-sxid20034-nvswitch.log").read_text()
    later = 6781741.0 + 2 * 86400
    facts = kernel_log_facts(system({"dmesg": {"rc": 0, "stdout": text}}, later), 24.0)
    assert (facts.events, facts.faults) == ((), ())


def test_the_journal_stands_in_for_dmesg_for_faults_too() -> None:
    text = fixture("gpu-operator1146-rminitadapter-journal.log")
    commands = {
        "dmesg": {"rc": 1, "stderr": "dmesg: read kernel buffer failed: Operation not permitted\n"},
        "journalctl -k -b --no-pager -o short-iso": {"rc": 0, "stdout": text},
    }
    facts = kernel_log_facts(system(commands), None)
    assert facts.source == "journalctl"
    assert isinstance(facts.faults, tuple)
    assert len(facts.faults) == 6


def test_an_empty_log_measures_neither_xids_nor_faults() -> None:
    commands = {
        "dmesg": {"rc": 0, "stdout": ""},
        "journalctl -k -b --no-pager -o short-iso": {"rc": 0, "stdout": "-- No entries --\n"},
    }
    facts = kernel_log_facts(system(commands), 24.0)
    assert isinstance(facts.faults, Unavailable)
    assert facts.faults == facts.events
    assert "proves nothing about Xids or other GPU faults" in facts.faults.detail


# ---------------------------------------------------------------- judged, with an action


def with_faults(
    *faults: KernelFault, events: tuple[XidEvent, ...] = (), facts: NodeFacts | None = None
) -> NodeFacts:
    base = facts if facts is not None else healthy_node()
    return dataclasses.replace(
        base,
        kernel_log=KernelLogFacts(source="dmesg", window_hours=24.0, events=events, faults=faults),
    )


def fault(kind: str, bus: str = "0000:ba:00", message: str = "", **kw: Any) -> KernelFault:
    return KernelFault(kind=kind, pci_bus_id=bus, message=message or f"{kind} line", **kw)


def kernel_findings(facts: NodeFacts) -> list[Finding]:
    return [f for f in errors_check(facts, Policy(), None) if f.check == "errors.kernel_faults"]


KIND_ACTIONS = [
    (
        "rm_init_adapter_failed",
        Action.RESET_GPU,
        "NVIDIA Xid catalog: RESET_GPU (Xid 143, GPU initialization failure)",
        "GPU 6 (0000:ba:00) failed to initialise, once",
    ),
    (
        "fallen_off_bus",
        Action.REBOOT,
        "NVIDIA Xid catalog: RESTART_BM (Xid 79, GPU has fallen off the bus)",
        "GPU 6 (0000:ba:00) has fallen off the bus, once",
    ),
    (
        "gsp_timeout",
        Action.RESET_GPU,
        "NVIDIA Xid catalog: RESET_GPU (Xid 119, GSP RPC timeout, the GPU likely needs a reset)",
        "GPU 6 (0000:ba:00) GSP firmware timed out, once",
    ),
    (
        "gsp_error",
        Action.RESET_GPU,
        "NVIDIA Xid catalog: RESET_GPU (Xid 120, GSP error)",
        "GPU 6 (0000:ba:00) GSP firmware failed, once",
    ),
]


@pytest.mark.parametrize(
    ("kind", "action", "source", "start"), KIND_ACTIONS, ids=[k[0] for k in KIND_ACTIONS]
)
def test_each_fault_fails_its_gpu_by_bus_with_an_action(
    kind: str, action: Action, source: str, start: str
) -> None:
    (finding,) = kernel_findings(with_faults(fault(kind)))
    assert (finding.severity, finding.gpu_index) == (FAIL, 6)
    assert finding.gpu_uuid == "GPU-00000006-aaaa-bbbb-cccc-000000000000"
    assert (finding.action, finding.action_source) == (action, source)
    assert finding.message.startswith(start)
    assert finding.observed == f"{kind} x1"


def test_a_faults_action_is_its_xids_row_of_the_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    # Not a copy of the catalog's buckets: change the row and the fault follows it.
    rows = dict(xid_catalog.XID_RESOLUTIONS)
    rows[120] = xid_catalog.XidResolution("GSP_ERROR", "RESTART_BM", "INVESTIGATE_SW")
    monkeypatch.setattr(xid_catalog, "XID_RESOLUTIONS", rows)
    (finding,) = kernel_findings(with_faults(fault("gsp_error")))
    assert (finding.action, finding.action_source) == (
        Action.REBOOT,
        "NVIDIA Xid catalog: RESTART_BM (Xid 120, GSP error)",
    )
    assert finding.message.endswith("; reboot the node")


def test_a_gpu_nvml_does_not_list_is_named_by_bus_and_rebooted() -> None:
    (finding,) = kernel_findings(with_faults(fault("rm_init_adapter_failed", "0000:ee:00")))
    assert (finding.severity, finding.gpu_index, finding.action) == (FAIL, None, Action.REBOOT)
    assert finding.message.startswith("The GPU at 0000:ee:00 (NVML reports no GPU there)")
    assert finding.action_source.endswith("; NVML does not list the GPU, so: reboot")


def test_a_bus_less_gsp_line_names_the_drivers_gpu_number() -> None:
    line = "GPU6 _kgspIsHeartbeatTimedOut: Heartbeat timed out"
    (finding,) = kernel_findings(with_faults(fault("gsp_timeout", "", line)))
    assert finding.message.startswith("A GPU the driver calls GPU6 GSP firmware timed out")
    assert finding.gpu_index is None


def test_fallen_off_bus_with_its_xid_79_is_said_to_be_one_event() -> None:
    xid79 = XidEvent(xid=79, pci_bus_id="0000:ba:00", message="GPU has fallen off the bus.")
    facts = with_faults(fault("fallen_off_bus"), events=(xid79,))
    findings = [f for f in errors_check(facts, Policy(), None) if f.severity is FAIL]
    assert {f.check for f in findings} == {"errors.xid", "errors.kernel_faults"}
    (kernel,) = [f for f in findings if f.check == "errors.kernel_faults"]
    assert "has fallen off the bus (also Xid 79), once" in kernel.message
    assert {f.action for f in findings} == {Action.REBOOT}
    # Without the Xid, no such note.
    (alone,) = kernel_findings(with_faults(fault("fallen_off_bus")))
    assert "also Xid" not in alone.message


def test_an_ecc_line_fails_as_the_memory_checks_do() -> None:
    base = healthy_node()
    gpus = list(base.gpus)
    gpus[6] = dataclasses.replace(gpus[6], ecc_volatile_uncorrected=2)
    failing = dataclasses.replace(base, gpus=tuple(gpus))
    (finding,) = kernel_findings(with_faults(fault("ecc"), facts=failing))
    assert (finding.severity, finding.action) == (FAIL, Action.RESET_GPU)
    (warned,) = kernel_findings(with_faults(fault("ecc")))
    assert (warned.severity, warned.action) == (WARN, Action.RERUN)


def test_old_faults_age_out_of_the_policy_window() -> None:
    old = fault("gsp_error", timestamp="2025-02-27T11:00:00+00:00")  # healthy: 2025-03-01
    (finding,) = kernel_findings(with_faults(old))
    assert (finding.severity, finding.action) == (PASS, Action.NONE)
    assert finding.message.startswith("No GPU faults beyond Xid lines")


def test_faults_are_grouped_by_kind_and_gpu() -> None:
    facts = with_faults(*(fault("rm_init_adapter_failed") for _ in range(3)), fault("gsp_error"))
    findings = kernel_findings(facts)
    assert sorted(f.observed for f in findings) == ["gsp_error x1", "rm_init_adapter_failed x3"]


@pytest.mark.parametrize(
    ("kernel_log", "required"),
    [
        # the log could not be read at all: blocking, as for Xids
        (
            KernelLogFacts(
                "dmesg",
                24.0,
                Unavailable(Reason.ERROR, "empty"),
                Unavailable(Reason.ERROR, "empty"),
            ),
            True,
        ),
        # Xids read, faults not: a document from before faults were read
        (KernelLogFacts("dmesg", 24.0, events=(), faults=NOT_MEASURED), False),
    ],
    ids=["log unread", "facts without faults"],
)
def test_faults_not_read_are_unknown(kernel_log: KernelLogFacts, required: bool) -> None:
    facts = dataclasses.replace(healthy_node(), kernel_log=kernel_log)
    (finding,) = kernel_findings(facts)
    assert (finding.severity, finding.required) == (UNKNOWN, required)
    assert finding.message.startswith(
        "The kernel log could not be read for GPU faults beyond Xid lines: "
    )


# ---------------------------------------------------------------- the scenarios


def failing(result: Any) -> set[tuple[str, int | None, Action]]:
    return {(f.check, f.gpu_index, f.action) for f in result.findings if f.severity is FAIL}


def test_the_fatal_sxid_scenario_fails_for_its_sxid_with_a_gpu_and_switch_reset() -> None:
    facts = collect_simulated("nvswitch-sxid-fatal")
    result = judge_node(facts, NO_BURN)
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert failing(result) == {("errors.sxid", None, Action.RESET_GPU)}
    (sxid,) = [f for f in result.findings if f.check == "errors.sxid"]
    assert "NVSwitch 0000:06:00.0, link 48, 3 times" in sxid.message
    assert sxid.action_source == "NVIDIA Fabric Manager User Guide, SXid errors: fatal"


def test_the_rm_init_scenario_shows_the_gpu_on_the_bus_but_not_in_nvml() -> None:
    facts = collect_simulated("rm-init-adapter-failed")
    assert (facts.pci_gpu_count, len(facts.gpus)) == (8, 7)
    nvml_buses = {normalise_bus(str(gpu.pci_bus_id)) for gpu in facts.gpus}
    assert isinstance(facts.kernel_log.faults, tuple)
    (bus,) = {f.pci_bus_id for f in facts.kernel_log.faults}
    assert bus == "0000:db:00"
    assert bus not in nvml_buses
    result = judge_node(facts, NO_BURN)
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert ("errors.kernel_faults", None, Action.REBOOT) in failing(result)
    assert ("inventory.gpu_count", None) in {(c, i) for c, i, _ in failing(result)}
    (kernel,) = [f for f in result.findings if f.check == "errors.kernel_faults"]
    assert kernel.message.startswith(
        "The GPU at 0000:db:00 (NVML reports no GPU there) failed to initialise, 2 times"
    )
