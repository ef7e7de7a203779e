"""Error checks: ECC counters, row remap, retired pages, Xids, SXids and kernel faults."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.judge.test_judge_healthy import NOT_SUPPORTED, judge, not_passed, only, with_gpu
from tests.judge.test_judge_healthy import healthy_node as shared_healthy_node
from validator.judge import Policy, Thresholds
from validator.judge.checks import errors
from validator.judge.checks.errors import xid_meaning
from validator.judge.xid_catalog import XID_MEANINGS, XID_RESOLUTIONS
from validator.model import (
    ACTION_WORDS,
    NOT_MEASURED,
    Action,
    KernelFault,
    KernelLogFacts,
    NodeFacts,
    Severity,
    Verdict,
    XidEvent,
)
from validator.node.parsers.kernel_log import parse_xid_events
from validator.report import rma, shared
from validator.safe_text import bus_key

FAIL, UNKNOWN, WARN = Severity.FAIL, Severity.UNKNOWN, Severity.WARN

V100_STYLE = {
    "remap_pending": NOT_SUPPORTED,
    "remap_failure": NOT_SUPPORTED,
    "remapped_rows_uncorrectable": NOT_SUPPORTED,
    "remapped_rows_correctable": NOT_SUPPORTED,
    "retired_pages_sbe": 0,
    "retired_pages_dbe": 0,
    "retired_pages_pending": False,
}


def healthy_node() -> NodeFacts:
    """The shared healthy node, its kernel log read for faults as well as Xids (none)."""
    return with_events()


def with_events(
    *events: XidEvent, facts: NodeFacts | None = None, faults: tuple[KernelFault, ...] = ()
) -> NodeFacts:
    base = facts if facts is not None else shared_healthy_node()
    return dataclasses.replace(
        base,
        kernel_log=KernelLogFacts(source="dmesg", window_hours=24.0, events=events, faults=faults),
    )


def xid(
    number: int,
    bus: str = "0000:ba:00",
    when: str | None = "2025-03-01T11:00:00+00:00",
    **kw: object,
) -> XidEvent:
    return XidEvent(xid=number, pci_bus_id=bus, message=f"Xid {number} text", timestamp=when, **kw)  # type: ignore[arg-type]


CASES = [
    (
        "uncorrected volatile",
        with_gpu(healthy_node(), 1, ecc_volatile_uncorrected=2),
        Policy(),
        {("errors.ecc_uncorrected_volatile", FAIL, 1)},
    ),
    (
        "uncorrected aggregate",
        with_gpu(healthy_node(), 1, ecc_aggregate_uncorrected=3),
        Policy(),
        {("errors.ecc_uncorrected_aggregate", WARN, 1)},
    ),
    (
        "corrected at threshold",
        with_gpu(healthy_node(), 1, ecc_volatile_corrected=10000),
        Policy(),
        {("errors.ecc_corrected_volatile", WARN, 1)},
    ),
    (
        "corrected below threshold",
        with_gpu(healthy_node(), 1, ecc_volatile_corrected=9999),
        Policy(),
        set(),
    ),
    (
        "corrected vs policy threshold",
        with_gpu(healthy_node(), 1, ecc_volatile_corrected=50),
        Policy(thresholds=Thresholds(ecc_corrected_volatile_warn=50)),
        {("errors.ecc_corrected_volatile", WARN, 1)},
    ),
    (
        "counters unreadable",
        with_gpu(healthy_node(), 1, ecc_volatile_uncorrected=NOT_MEASURED),
        Policy(),
        {("errors.ecc_uncorrected_volatile", UNKNOWN, 1)},
    ),
    (
        "remap pending",
        with_gpu(healthy_node(), 2, remap_pending=True),
        Policy(),
        {("errors.row_remap", FAIL, 2)},
    ),
    (
        "remap failure",
        with_gpu(healthy_node(), 2, remap_failure=True),
        Policy(),
        {("errors.row_remap", FAIL, 2)},
    ),
    (
        "513 uncorrectable rows",
        with_gpu(healthy_node(), 2, remapped_rows_uncorrectable=513),
        Policy(),
        {("errors.row_remap", FAIL, 2)},
    ),
    (
        "512 uncorrectable rows",
        with_gpu(healthy_node(), 2, remapped_rows_uncorrectable=512),
        Policy(),
        set(),
    ),
    (
        "remap state unreadable",
        with_gpu(healthy_node(), 2, remap_pending=NOT_MEASURED),
        Policy(),
        {("errors.row_remap", UNKNOWN, 2)},
    ),
    ("page retirement clean", with_gpu(healthy_node(), 3, **V100_STYLE), Policy(), set()),
    (
        "page retirement pending",
        with_gpu(healthy_node(), 3, **{**V100_STYLE, "retired_pages_pending": True}),
        Policy(),
        {("errors.retired_pages", FAIL, 3)},
    ),
    (
        "11 retired pages",
        with_gpu(
            healthy_node(), 3, **{**V100_STYLE, "retired_pages_sbe": 6, "retired_pages_dbe": 5}
        ),
        Policy(),
        {("errors.retired_pages", FAIL, 3)},
    ),
    (
        "no repair mechanism reported",
        with_gpu(
            healthy_node(),
            3,
            **{
                **V100_STYLE,
                "retired_pages_sbe": NOT_SUPPORTED,
                "retired_pages_dbe": NOT_SUPPORTED,
                "retired_pages_pending": NOT_SUPPORTED,
            },
        ),
        Policy(),
        {("errors.memory_repair", UNKNOWN, 3)},
    ),
    ("Xid 79 on GPU 6", with_events(xid(79)), Policy(), {("errors.xid", FAIL, 6)}),
    ("Xid 13 warns", with_events(xid(13)), Policy(), {("errors.xid", WARN, 6)}),
    ("Xid 13 outside warn list", with_events(xid(13)), Policy(warn_xids=(31,)), set()),
    (
        "Xid 48 two days old",
        with_events(xid(48, when="2025-02-27T11:00:00+00:00")),
        Policy(),
        set(),
    ),
    (
        "Xid 48 inside a 72 h window",
        with_events(xid(48, when="2025-02-27T11:00:00+00:00")),
        Policy(xid_window_hours=72),
        {("errors.xid", FAIL, 6)},
    ),
    (
        "Xid without wall-clock time",
        with_events(xid(119, bus="0000:18:00", when=None, uptime_s=6781741.5)),
        Policy(),
        {("errors.xid", FAIL, 0)},
    ),
    (
        "Xid on an unknown device",
        with_events(xid(79, bus="0000:44:00")),
        Policy(),
        {("errors.xid", FAIL, None)},
    ),
    (
        "NVSwitch SXid the guide calls fatal",
        with_events(xid(20034, bus="0000:05:00", nvswitch=True)),
        Policy(),
        {("errors.sxid", FAIL, None)},
    ),
    (
        "NVSwitch SXid the guide calls non-fatal",
        with_events(xid(11012, bus="0000:05:00", nvswitch=True)),
        Policy(),
        {("errors.sxid", WARN, None)},
    ),
    (
        "kernel log not read",
        dataclasses.replace(
            healthy_node(), kernel_log=KernelLogFacts(source="none", window_hours=None)
        ),
        Policy(),
        {
            ("errors.xid", UNKNOWN, None),
            ("errors.sxid", UNKNOWN, None),
            ("errors.kernel_faults", UNKNOWN, None),
        },
    ),
]


@pytest.mark.parametrize(
    ("facts", "policy", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_errors_table(
    facts: NodeFacts, policy: Policy, expected: set[tuple[str, Severity, int | None]]
) -> None:
    assert not_passed(judge(facts, policy), "errors.") == expected


def test_xid_message_names_xid_meaning_and_gpu() -> None:
    (finding,) = only(judge(with_events(xid(79), xid(79))), "errors.xid")
    assert finding.message.startswith(
        "Xid 79 (GPU has fallen off the bus) on GPU 6 (0000:ba:00), 2 times in the last 24 h"
    )
    assert finding.gpu_uuid == "GPU-00000006-aaaa-bbbb-cccc-000000000000"


def test_remap_pending_message_says_reset() -> None:
    (finding,) = [
        f
        for f in only(judge(with_gpu(healthy_node(), 2, remap_pending=True)), "errors.row_remap")
        if f.gpu_index == 2
    ]
    assert "reset the GPU to apply it" in finding.message


def test_ignored_xids_are_noted_in_the_pass() -> None:
    (finding,) = only(judge(with_events(xid(13)), Policy(warn_xids=(31,))), "errors.xid")
    assert finding.severity is Severity.PASS
    assert "Xids 13 seen, ignored by policy" in finding.message


def test_unread_kernel_log_blocks_certification() -> None:
    result = judge(
        dataclasses.replace(
            healthy_node(), kernel_log=KernelLogFacts(source="none", window_hours=None)
        )
    )
    assert result.verdict is Verdict.NOT_CERTIFIED
    blocking = {
        f.check
        for f in result.findings
        if f.severity is UNKNOWN and f.required and f.check.startswith("errors.")
    }
    assert blocking == {"errors.xid", "errors.sxid", "errors.kernel_faults"}


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("0000:c1:00", (0, 0xC1, 0)),
        ("00000000:C1:00.0", (0, 0xC1, 0)),
        ("0019:01:00", (0x19, 1, 0)),
        ("c1:00", None),
        ("zz:yy:00", None),
    ],
)
def test_bus_key(text: str, key: tuple[int, int, int] | None) -> None:
    assert bus_key(text) == key


def test_xid_meaning_falls_back_to_catalog() -> None:
    assert xid_meaning(48) == "double-bit ECC error"
    assert xid_meaning(999) == "see NVIDIA's Xid catalog"


def test_one_bus_id_parser_serves_the_judge_and_the_rma_pack() -> None:
    # The modules' own names, not a public API: read from their namespaces.
    assert vars(errors)["bus_key"] is bus_key
    assert vars(rma)["bus_key"] is bus_key


def test_one_table_of_xid_meanings_covers_every_catalogued_xid() -> None:
    # The meanings the findings print are the catalog's, one for each of its rows.
    assert set(XID_MEANINGS) == set(XID_RESOLUTIONS)
    assert all(xid_meaning(xid) == XID_MEANINGS[xid] for xid in XID_MEANINGS)


def test_one_mapping_of_action_words_for_findings_and_reports() -> None:
    assert vars(errors)["ACTION_WORDS"] is ACTION_WORDS
    assert shared.ACTION_WORDS is ACTION_WORDS
    assert set(ACTION_WORDS) == set(Action)


# ---------------------------------------------------------------- what to do about each Xid

XID_ACTIONS = [
    (79, Policy(), FAIL, Action.REBOOT, "NVIDIA Xid catalog: RESTART_BM", "reboot the node"),
    (119, Policy(), FAIL, Action.RESET_GPU, "NVIDIA Xid catalog: RESET_GPU", "reset the GPU"),
    (13, Policy(), WARN, Action.RERUN, "NVIDIA Xid catalog: RESTART_APP", "run it again"),
    (
        48,
        Policy(),
        FAIL,
        Action.RESET_GPU,
        "NVIDIA Xid catalog: WORKFLOW_XID_48, first step: reset_gpu",
        "reset the GPU",
    ),
    (
        74,
        Policy(),
        FAIL,
        Action.RESET_GPU,
        "NVIDIA Xid catalog: WORKFLOW_NVLINK_ERR, first step: reset_gpu",
        "reset the GPU",
    ),
    (
        63,
        Policy(),
        FAIL,
        Action.RESET_GPU,
        "NVIDIA Xid catalog: IGNORE; the remap is applied at the next GPU reset",
        "reset the GPU",
    ),
    (56, Policy(), FAIL, Action.DRAIN_RMA, "NVIDIA Xid catalog: CONTACT_SUPPORT", "drain and RMA"),
    (
        999,
        Policy(fail_xids=(999,)),
        FAIL,
        Action.DRAIN_RMA,
        "policy fail_xids (not in NVIDIA's Xid catalog as carried here)",
        "drain and RMA",
    ),
    (998, Policy(), WARN, Action.RERUN, "not in NVIDIA's Xid catalog as carried here", "again"),
]


@pytest.mark.parametrize(
    ("number", "policy", "severity", "action", "source", "words"),
    XID_ACTIONS,
    ids=[str(case[0]) for case in XID_ACTIONS],
)
def test_every_non_pass_xid_finding_says_what_to_do_from_nvidias_catalog(
    number: int, policy: Policy, severity: Severity, action: Action, source: str, words: str
) -> None:
    (finding,) = only(judge(with_events(xid(number)), policy), "errors.xid")
    assert (finding.severity, finding.action, finding.action_source) == (severity, action, source)
    assert words in finding.message
    assert finding.message.endswith(f"({source})")


HARDWARE = "failed by the policy as hardware"
# Xids the default policy fails whose catalog step is RESTART_APP or IGNORE (the
# application's fault): as hardware faults they take the investigatory step instead.
RESET_BECAUSE = f"{HARDWARE}: reset the GPU (investigatory:"
HARDWARE_XID_ACTIONS = [
    (68, Action.DRAIN_RMA, f"RESTART_APP, {HARDWARE}: the investigatory CONTACT_SUPPORT"),
    (69, Action.RESET_GPU, f"RESTART_APP, {RESET_BECAUSE} CHECK_APP/CUDA)"),
    (80, Action.RESET_GPU, f"RESTART_APP, {RESET_BECAUSE} CHECK_APP/CUDA)"),
    (92, Action.DRAIN_RMA, f"IGNORE, {HARDWARE}: the investigatory CONTACT_SUPPORT"),
    (94, Action.RESET_GPU, f"RESTART_APP, {RESET_BECAUSE} IGNORE (sympathetic))"),
]


@pytest.mark.parametrize(
    ("number", "action", "source"),
    HARDWARE_XID_ACTIONS,
    ids=[str(c[0]) for c in HARDWARE_XID_ACTIONS],
)
def test_a_hardware_xid_is_never_told_to_run_again(
    number: int, action: Action, source: str
) -> None:
    (finding,) = only(judge(with_events(xid(number))), "errors.xid")
    assert finding.severity is FAIL
    assert (finding.action, finding.action_source) == (action, f"NVIDIA Xid catalog: {source}")
    assert "a hardware fault; " + ACTION_WORDS[action] in finding.message
    assert ACTION_WORDS[Action.RERUN] not in finding.message


def test_an_application_xid_on_the_warn_list_still_runs_again() -> None:
    # Xid 13 is not a fail_xid: the catalog's RESTART_APP stands.
    (finding,) = only(judge(with_events(xid(13))), "errors.xid")
    assert (finding.severity, finding.action) == (WARN, Action.RERUN)
    # The same Xid failed by a policy is hardware: reset, the source says why.
    (failed,) = only(judge(with_events(xid(13)), Policy(fail_xids=(13,))), "errors.xid")
    assert failed.action is Action.RESET_GPU
    assert HARDWARE in failed.action_source


def test_a_clean_kernel_log_passes_with_no_action() -> None:
    log_checks = {"errors.xid", "errors.sxid", "errors.kernel_faults"}
    kernel = {f.check: f for f in judge(healthy_node()).findings if f.check in log_checks}
    assert set(kernel) == log_checks
    assert {(f.severity, f.action) for f in kernel.values()} == {(Severity.PASS, Action.NONE)}


# ---------------------------------------------------------------- SXids


def test_sxids_of_the_real_nvswitch_capture_fail_per_switch_naming_links(
    captures_dir: Path,
) -> None:
    text = (captures_dir / "xid/gpud-xid79-sxid20034-nvswitch.log").read_text()
    events = parse_xid_events(text)
    findings = only(judge(with_events(*events)), "errors.sxid")
    by_switch = {f.observed: f for f in findings}
    assert sorted(f.message.split(" on ")[1].split(",")[0] for f in findings) == [
        "NVSwitch 0000:05:00.0",
        "NVSwitch 0000:06:00.0",
        "NVSwitch 0000:07:00.0",
    ]
    assert {f.severity for f in findings} == {FAIL}
    assert {(f.action, f.action_source) for f in findings} == {
        (Action.RESET_GPU, "NVIDIA Fabric Manager User Guide, SXid errors: fatal")
    }
    switch0 = next(f for f in findings if "0000:05:00.0" in f.message)
    assert switch0.message.startswith(
        "SXid 20034 (LTSSM Fault Up, fatal per NVIDIA's Fabric Manager guide) on NVSwitch "
        "0000:05:00.0, links 62, 63, 4 times in the last 24 h: Fatal, Link 63 LTSSM Fault Up; "
        "drain the node and reset its GPUs and NVSwitches together (stop nvidia-fabricmanager, "
        "nvidia-smi -r, start it again), or reboot the node: the link went down from active; "
        "if it persists, report the GPU"
    )
    assert "SXid 20034 x4" in by_switch
    # The Xid 79 of the same capture stays an Xid finding, on its own device.
    (xid79,) = only(judge(with_events(*events)), "errors.xid")
    assert xid79.observed == "Xid 79 x1"


def test_an_always_fatal_sxid_asks_for_a_reboot() -> None:
    (finding,) = only(
        judge(with_events(xid(22003, bus="0000:07:00.0", nvswitch=True))), "errors.sxid"
    )
    assert (finding.severity, finding.action) == (FAIL, Action.REBOOT)
    assert finding.action_source == "NVIDIA Fabric Manager User Guide, SXid errors: always fatal"


def test_an_sxid_not_in_the_guide_warns_pointing_to_it() -> None:
    (finding,) = only(
        judge(with_events(xid(29999, bus="0000:07:00.0", nvswitch=True))), "errors.sxid"
    )
    assert (finding.severity, finding.action) == (WARN, Action.RERUN)
    assert "see NVIDIA's Fabric Manager guide" in finding.message


def test_an_unlisted_sxid_its_line_calls_fatal_fails() -> None:
    event = XidEvent(
        xid=29999, pci_bus_id="0000:07:00.0", message="Fatal, Link 3 something", nvswitch=True
    )
    (finding,) = only(judge(with_events(event)), "errors.sxid")
    assert (finding.severity, finding.action) == (FAIL, Action.RESET_GPU)
    assert "which the line calls fatal" in finding.message
    assert ", link 3," in finding.message


# ---------------------------------------------------------------- what to do about memory


@pytest.mark.parametrize(
    ("changes", "action"),
    [
        ({"remap_pending": True}, "reset_gpu"),  # applied by the next reset
        ({"remap_pending": True, "remap_failure": True}, "drain_and_rma"),  # out of spare rows
        ({"remapped_rows_uncorrectable": 600}, "drain_and_rma"),  # above the 512 allowed
    ],
)
def test_a_row_remap_fault_says_reset_or_rma_by_what_it_is(
    changes: dict[str, object], action: str
) -> None:
    result = judge(with_gpu(shared_healthy_node(), 2, **changes))
    (finding,) = [f for f in only(result, "errors.row_remap") if f.gpu_index == 2]
    assert (finding.severity.value, finding.action.value) == ("FAIL", action)


@pytest.mark.parametrize(
    ("changes", "action"),
    [
        ({"retired_pages_pending": True, "retired_pages_sbe": 0, "retired_pages_dbe": 0},
         "reset_gpu"),
        ({"retired_pages_pending": False, "retired_pages_sbe": 6, "retired_pages_dbe": 6},
         "drain_and_rma"),
    ],
)  # fmt: skip
def test_retired_pages_say_reset_or_rma_by_what_they_are(
    changes: dict[str, object], action: str
) -> None:
    result = judge(with_gpu(shared_healthy_node(), 1, **changes))
    (finding,) = [f for f in only(result, "errors.retired_pages") if f.gpu_index == 1]
    assert (finding.severity.value, finding.action.value) == ("FAIL", action)
