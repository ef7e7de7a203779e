"""Error checks: ECC counters, row remap, retired pages, Xids."""

from __future__ import annotations

import dataclasses

import pytest

from tests.test_judge_healthy import NOT_SUPPORTED, healthy_node, judge, not_passed, only, with_gpu
from validator.judge import Policy, Thresholds
from validator.judge.checks.errors import bus_key, xid_meaning
from validator.model import NOT_MEASURED, KernelLogFacts, NodeFacts, Severity, Verdict, XidEvent

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


def with_events(*events: XidEvent, facts: NodeFacts | None = None) -> NodeFacts:
    base = facts if facts is not None else healthy_node()
    return dataclasses.replace(
        base, kernel_log=KernelLogFacts(source="dmesg", window_hours=24.0, events=events)
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
        "NVSwitch SXid",
        with_events(xid(20034, bus="0000:05:00", nvswitch=True)),
        Policy(),
        {("errors.xid", WARN, None)},
    ),
    (
        "kernel log not read",
        dataclasses.replace(
            healthy_node(), kernel_log=KernelLogFacts(source="none", window_hours=None)
        ),
        Policy(),
        {("errors.xid", UNKNOWN, None)},
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
    assert result.summary.endswith("1 required check could not be judged: errors.xid")


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
