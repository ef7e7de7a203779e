"""The terminal view."""

from __future__ import annotations

import re

from tests.test_report_samples import failing_node, healthy_node, sample_report
from validator.model import Report
from validator.report.text import render_text

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_healthy_node_is_three_lines() -> None:
    text = render_text(sample_report(healthy_node()))
    assert text == (
        "gpu-node-01  CERTIFIED  h100-sxm5-80gb  2 GPUs\n"
        "  4 passed, 0 warnings, 0 failed, 0 unknown\n"
        "  All 4 checks passed.\n"
    )


def test_failing_node_lists_non_pass_findings_worst_first() -> None:
    lines = render_text(sample_report(failing_node())).splitlines()
    assert lines[0] == "gpu-node-02  NOT_CERTIFIED  h100-sxm5-80gb  3 GPUs"
    assert lines[1:5] == [
        "  FAIL     memory.remap  gpu1  Row remap pending: reset the GPU before use.",
        "  FAIL     gpu.present   gpu2  GPU 2 has fallen off the bus (Xid 79).",
        "  UNKNOWN  power.limit   gpu1  Power limit not supported by this GPU.",
        "  WARN     thermal.idle  gpu0  GPU 0 idles at 88 C, 20 C above the fleet.",
    ]
    assert lines[5] == "  2 passed, 1 warning, 2 failed, 1 unknown"
    assert lines[6] == "  2 checks failed: memory.remap, gpu.present."
    assert len(lines) == 7
    assert "No rows remapped." not in "\n".join(lines)  # PASS findings are not listed


def test_several_nodes_end_with_the_overall_verdict() -> None:
    text = render_text(sample_report())
    blocks = text.split("\n\n")
    assert len(blocks) == 3
    assert blocks[0].startswith("gpu-node-01  CERTIFIED")
    assert blocks[1].startswith("gpu-node-02  NOT_CERTIFIED")
    assert blocks[2] == (
        "Overall: NOT_CERTIFIED  1 of 2 nodes certified; not certified: gpu-node-02.\n"
    )


def test_color_adds_ansi_only_when_asked() -> None:
    plain = render_text(sample_report())
    colored = render_text(sample_report(), color=True)
    assert "\x1b[" not in plain
    assert "\x1b[1;31mNOT_CERTIFIED\x1b[0m" in colored
    assert "\x1b[31mFAIL   \x1b[0m" in colored
    assert "\x1b[1;32mCERTIFIED\x1b[0m" in colored
    assert ANSI.sub("", colored) == plain


def test_lines_fit_100_columns() -> None:
    for line in render_text(sample_report()).splitlines():
        assert len(line) <= 100, line


def test_control_characters_from_devices_are_neutralised() -> None:
    node = failing_node("host\x1b]0;owned\x07", message_extra="\x1b[2J\nnext")
    text = render_text(sample_report(node))
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "host\\x1b]0;owned\\x07  NOT_CERTIFIED" in text
    assert "reset the GPU before use.\\x1b[2J next" in text


def test_empty_report_says_so() -> None:
    assert render_text(Report("t", "v", ())) == "Overall: UNKNOWN  No nodes were judged.\n"
