"""The terminal view."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.report.test_report_html import (
    H200_SWEEP,
    IC_GPUS,
    README_MATRIX,
    capture_matrix,
    capture_sweep,
    copy_rows,
    ic_sample,
    interconnect_node,
    peer_pairs,
    uniform_figures,
)
from tests.report.test_report_samples import (
    REACH_MESSAGE,
    SCRIPT_DETAIL,
    TIMEOUT_DETAIL,
    burn_node,
    failing_node,
    fleet_report,
    healthy_node,
    sample_report,
    unreachable_node,
)
from validator.model import Action, Bandwidth, Interconnect, Reason, Report, Unavailable
from validator.report import shared
from validator.report.terminal import render_text
from validator.safe_text import size_words

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_healthy_node_is_three_lines() -> None:
    text = render_text(sample_report(healthy_node()))
    assert text == (
        "gpu-node-01  CERTIFIED  h100-sxm5-80gb  2 GPUs\n"
        "  3 checks: 3 passed, 0 warnings, 0 failed, 0 unknown\n"
        "  All 4 checks passed.\n"
    )


def test_failing_node_lists_non_pass_findings_worst_first() -> None:
    lines = render_text(sample_report(failing_node())).splitlines()
    assert lines[0] == "gpu-node-02  NOT_CERTIFIED  h100-sxm5-80gb  3 GPUs"
    assert lines[1:6] == [
        "  FAIL     memory.remap  gpu1  Row remap pending: reset the GPU before use."
        "  -> reset the GPU",
        "  FAIL     gpu.present   gpu2  GPU 2 has fallen off the bus (Xid 79).  -> reboot the node",
        "  UNKNOWN  power.limit   gpu1  Power limit not supported by this GPU.  -> run it again",
        "  WARN     thermal.idle  gpu0  GPU 0 idles at 88 C, 20 C above the fleet.",
        # Too wide for the line: under the message, still starting with "->".
        "                               -> check cooling and power",
    ]
    # Checks counted, each once at its worst: memory.remap passed on GPU 0 but failed on
    # GPU 1, so it is one failed check, as the summary below it says.
    assert lines[6] == "  5 checks: 1 passed, 1 warning, 2 failed, 1 unknown"
    assert lines[7] == "  2 checks failed: memory.remap, gpu.present."
    assert len(lines) == 8
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


def test_a_finding_without_an_action_shows_none() -> None:
    node = failing_node()
    bare = tuple(dataclasses.replace(f, action=Action.NONE) for f in node.findings)
    text = render_text(sample_report(dataclasses.replace(node, findings=bare)))
    assert "->" not in text


def test_a_hardware_action_is_bold_in_colour() -> None:
    colored = render_text(sample_report(failing_node()), color=True)
    assert "\x1b[1m-> reset the GPU\x1b[0m" in colored  # a hardware action
    assert "  -> reboot the node" in colored  # not one: plain


def test_a_long_message_keeps_its_action_on_the_line() -> None:
    node = failing_node(message_extra=" " + "x" * 90)
    lines = render_text(sample_report(node)).splitlines()
    assert lines[1].endswith("x  -> reset the GPU")


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


def test_burn_lines_follow_the_node_header() -> None:
    lines = render_text(sample_report(burn_node())).splitlines()
    assert lines[:5] == [
        "gpu-node-03  NOT_CERTIFIED  h100-sxm5-80gb  3 GPUs",
        "  burn-in  cublas bf16 n=8192  60 s (ran 61.2 s)  sampler nvml",
        "  burn gpu0  completed  712.4 TFLOPS  it=5120  errors=0  peak 688 W (98%)  82 C"
        "  sm>=1755 MHz",
        "  burn gpu1  completed  598.7 TFLOPS  it=4980  errors=37  power n/a  81 C  sm>=1770 MHz",
        "  burn gpu2  timeout    worker stopped answering after 30 s",
    ]
    assert lines[5].startswith("  FAIL     burn.correctness  gpu1")


def test_burn_lines_fit_100_columns_and_shorten_details() -> None:
    long_detail = "CUDA error: an illegal memory access was encountered " * 4 + SCRIPT_DETAIL
    text = render_text(sample_report(burn_node(timeout_detail=long_detail)))
    burn_lines = [line for line in text.splitlines() if line.startswith("  burn")]
    assert len(burn_lines) == 4
    for line in text.splitlines():
        assert len(line) <= 100, line
    assert burn_lines[3].startswith("  burn gpu2  timeout    CUDA error: an illegal memory access")
    assert burn_lines[3].endswith("\u2026")
    assert len(burn_lines[3]) == 100


def test_simulated_burn_says_so_and_colours_failures() -> None:
    plain = render_text(sample_report(burn_node(simulated=True)))
    assert "  burn-in  cublas bf16 n=8192  60 s (ran 61.2 s)  sampler simulated  SIMULATED" in plain
    assert "SIMULATED" not in render_text(sample_report(burn_node()))
    colored = render_text(sample_report(burn_node()), color=True)
    assert "\x1b[32mcompleted\x1b[0m  712.4" in colored  # healthy
    assert "\x1b[31mcompleted\x1b[0m  598.7" in colored  # mismatches: not healthy
    assert "\x1b[31mtimeout  \x1b[0m" in colored
    assert ANSI.sub("", colored) == render_text(sample_report(burn_node()))


def test_burn_that_could_not_start_gives_its_reason() -> None:
    node = burn_node()
    assert node.facts.burn is not None
    burn = dataclasses.replace(node.facts.burn, gpus=(), error="no backend: \x1b[2Jcublas missing")
    node = dataclasses.replace(node, facts=dataclasses.replace(node.facts, burn=burn))
    lines = render_text(sample_report(node)).splitlines()
    assert lines[2] == "  burn-in could not run: no backend: \\x1b[2Jcublas missing"
    assert not any(line.startswith("  burn gpu") for line in lines)


def test_burn_detail_with_control_characters_is_cleaned() -> None:
    text = render_text(sample_report(burn_node(timeout_detail=TIMEOUT_DETAIL + "\x1b[2J\nend")))
    assert "\x1b" not in text
    assert "  burn gpu2  timeout    worker stopped answering after 30 s\\x1b[2J end" in text


def test_failed_reference_tile_shows_in_the_gpu_line() -> None:
    node = burn_node()
    assert node.facts.burn is not None
    burn = node.facts.burn
    bad = dataclasses.replace(burn.gpus[0], reference_ok=False)
    burn = dataclasses.replace(burn, gpus=(bad, *burn.gpus[1:]))
    node = dataclasses.replace(node, facts=dataclasses.replace(node.facts, burn=burn))
    lines = render_text(sample_report(node)).splitlines()
    assert lines[2].startswith(
        "  burn gpu0  completed  712.4 TFLOPS  it=5120  errors=0 ref=bad  peak"
    )


# ------------------------------------------------------------------ fleet


def test_fleet_is_a_line_per_node_details_for_the_uncertified_and_a_summary() -> None:
    text = render_text(fleet_report(64, failing=(17, 40), unknown=(5,)))
    blocks = text.rstrip("\n").split("\n\n")
    # The node lines, the details of the 3 nodes not certified, the summary.
    assert len(blocks) == 1 + 3 + 1
    node_lines = blocks[0].splitlines()
    assert len(node_lines) == 64
    heads = [line.split()[0] for line in node_lines]
    assert heads[:4] == ["gpu18", "gpu41", "gpu06", "gpu01"]
    assert sorted(heads) == [f"gpu{i:02d}" for i in range(1, 65)]
    assert node_lines[0] == (
        "gpu18  NOT_CERTIFIED  h100-sxm5-80gb  3 GPUs  memory.remap (GPU 1), gpu.present (GPU 2)"
        "  -> reset the GPU (+2 more)"
    )
    assert node_lines[2] == (
        "gpu06  UNKNOWN        no SKU matched  0 GPUs  transport.reach  -> run it again"
    )
    assert node_lines[3] == "gpu01  CERTIFIED      h100-sxm5-80gb  2 GPUs"
    # Details only for the nodes not certified, in the same order.
    assert [block.split("  ")[0] for block in blocks[1:4]] == ["gpu18", "gpu41", "gpu06"]
    assert all("  via ssh " in block.splitlines()[0] for block in blocks[1:4])
    assert blocks[4].splitlines() == [
        "fleet: 64 hosts, 61 certified, 2 not certified, 1 unknown",
        "  h100-sxm5-80gb: median 712.4 TFLOPS over 126 GPUs, MAD 6.1, below 662.5 (93%) fails",
        "act on 3 nodes:",
        "  gpu18  reset the GPU: GPU 1; reboot the node: GPU 2; run it again: GPU 1",
        "  gpu41  reset the GPU: GPU 1; reboot the node: GPU 2; run it again: GPU 1",
        "  gpu06  run it again: the node",
        "Overall: NOT_CERTIFIED  61 of 64 nodes certified; 3 to act on (above)",
    ]


def test_quiet_fleet_is_the_summary_alone() -> None:
    report = fleet_report(64, failing=(17, 40), unknown=(5,))
    quiet = render_text(report, quiet=True)
    assert quiet == render_text(report).rstrip("\n").split("\n\n")[-1] + "\n"
    assert quiet.startswith("fleet: 64 hosts")


def test_quiet_single_node_is_its_line() -> None:
    assert render_text(sample_report(failing_node()), quiet=True) == (
        "gpu-node-02  NOT_CERTIFIED  h100-sxm5-80gb  3 GPUs  memory.remap (GPU 1), "
        "gpu.present (GPU 2)  -> reset the GPU (+2 more)\n"
    )
    assert render_text(sample_report(healthy_node()), quiet=True) == (
        "gpu-node-01  CERTIFIED  h100-sxm5-80gb  2 GPUs\n"
    )


def test_a_certified_fleet_node_has_no_details() -> None:
    text = render_text(fleet_report(3, failing=(), unknown=()))
    assert text.startswith("gpu01  CERTIFIED  h100-sxm5-80gb  2 GPUs\ngpu02  CERTIFIED  ")
    assert "via ssh" not in text  # the details' header: none for a certified node
    assert "act on" not in text
    assert text.rstrip("\n").endswith("Overall: CERTIFIED  3 of 3 nodes certified")


def test_unreachable_node_in_text() -> None:
    lines = render_text(sample_report(unreachable_node())).splitlines()
    assert lines[0] == "gpu-node-99  UNKNOWN  no SKU matched  0 GPUs"
    assert lines[1] == f"  could not reach the host: {REACH_MESSAGE}"
    # The agent's last words, cleaned: the ESC it printed cannot repaint the terminal.
    assert lines[2] == "  agent stderr (2 lines): <b>agent</b> exited 255\\x1b[31m"
    assert lines[3] == f"  UNKNOWN  transport.reach  node  {REACH_MESSAGE}"
    assert lines[4] == " " * 34 + "-> run it again"
    assert lines[5] == "  1 check: 0 passed, 0 warnings, 0 failed, 1 unknown"
    assert len(lines) == 6


def test_fleet_without_comparison_says_so() -> None:
    report = fleet_report(2, failing=(), unknown=())
    assert report.fleet is not None
    report = dataclasses.replace(report, fleet=dataclasses.replace(report.fleet, skus=()))
    assert "  no fleet speed comparison: no GPU model had burn-in figures from 3 GPUs\n" in (
        render_text(report)
    )


# ------------------------------------------------------------------ interconnect

BRIEF_LINE = (
    "Interconnect: H2D 53.1-55.0 GB/s, D2H 52.8-54.9, HBM 2,612-2,650, P2P 370.2-391.0 "
    "(slowest GPU 6 -> GPU 2), all-reduce 477.4 GB/s busbw at 4 GiB (8 GPUs)"
)


def _brief_interconnect() -> Interconnect:
    """The figures of the issue's example line: 8 GPUs, GPU 6 -> GPU 2 the slowest pair."""
    h2d = [53.1, 54.0, 55.0, 54.2, 53.8, 54.4, 54.9, 53.6]
    d2h = [52.8, 54.9, 53.3, 53.9, 54.1, 53.0, 54.6, 53.5]
    hbm = [2612.0, 2650.0, 2630.0, 2641.0, 2622.0, 2633.0, 2619.0, 2648.0]
    figures = {
        (src, dst): 370.2 if (src, dst) == (6, 2) else 391.0 if (src, dst) == (0, 1) else 385.5
        for src in range(IC_GPUS)
        for dst in range(IC_GPUS)
        if src != dst
    }
    return ic_sample(gpus=copy_rows(h2d, d2h, hbm), peers=peer_pairs(figures))


def test_interconnect_summary_reads_like_the_brief() -> None:
    lines = render_text(sample_report(interconnect_node(_brief_interconnect()))).splitlines()
    # Too wide for one line of 100 columns: two, broken between phrases, the second
    # indented under the first.
    assert lines[1:3] == [
        "  Interconnect: H2D 53.1-55.0 GB/s, D2H 52.8-54.9, HBM 2,612-2,650,",
        "                P2P 370.2-391.0 (slowest GPU 6 -> GPU 2), all-reduce 477.4 GB/s busbw"
        " at 4 GiB (8 GPUs)",
    ]
    assert " ".join(line.strip() for line in lines[1:3]) == BRIEF_LINE
    assert lines[3] == "  3 checks: 3 passed, 0 warnings, 0 failed, 0 unknown"


def test_a_short_interconnect_summary_is_one_line() -> None:
    two = ic_sample(
        gpus=copy_rows([25.13], [26.25], [1310.0]),
        peers=(),
        all_reduce=Unavailable(Reason.NOT_SUPPORTED, "one GPU"),
    )
    lines = render_text(sample_report(interconnect_node(two))).splitlines()
    assert lines[1] == "  Interconnect: H2D 25.1 GB/s, D2H 26.2, HBM 1,310, all-reduce n/a"


def test_gpus_and_pairs_without_a_figure_are_counted() -> None:
    rows = list(copy_rows([53.0] * 4, [52.0] * 4, [2600.0] * 4))
    rows[1] = dataclasses.replace(rows[1], h2d=Bandwidth(Unavailable(Reason.ERROR, "copy failed")))
    pairs = list(peer_pairs(uniform_figures(4, slow=None)))
    pairs[2] = dataclasses.replace(pairs[2], unidirectional=Bandwidth())
    partial = ic_sample(
        gpus=tuple(rows), peers=tuple(pairs), all_reduce=Unavailable(Reason.ERROR, "no NCCL")
    )
    text = " ".join(
        line.strip()
        for line in render_text(sample_report(interconnect_node(partial))).splitlines()[1:3]
    )
    assert text.startswith(
        "Interconnect: H2D 53.0 GB/s (1 n/a), D2H 52.0, HBM 2,600, "
        "P2P 276.0 (slowest GPU 0 -> GPU 1; 1 pair n/a), all-reduce n/a"
    )


def test_interconnect_that_could_not_run_says_why_in_one_line() -> None:
    failed = Interconnect(source="cuda", error="libcudart.so.12: not found\x1b[2J <script>")
    lines = render_text(sample_report(interconnect_node(failed))).splitlines()
    assert lines[1] == (
        "  Interconnect could not be measured: libcudart.so.12: not found\\x1b[2J <script>"
    )
    assert "\x1b" not in "\n".join(lines)


def test_simulated_interconnect_is_marked() -> None:
    simulated = dataclasses.replace(_brief_interconnect(), simulated=True, source="simulate")
    lines = render_text(sample_report(interconnect_node(simulated))).splitlines()
    assert lines[2].endswith("(8 GPUs)  SIMULATED")
    assert "SIMULATED" not in lines[1]
    colored = render_text(sample_report(interconnect_node(simulated)), color=True)
    assert "\x1b[33mSIMULATED\x1b[0m" in colored


def test_interconnect_summary_from_the_real_captures(captures_dir: Path) -> None:
    # The RTX 4090 H2D/D2H rows (the sample's copies), the README's 276 GB/s matrix,
    # the 8x H200 all-reduce at 8 GiB.
    interconnect = ic_sample(
        peers=peer_pairs(capture_matrix(captures_dir / README_MATRIX)),
        all_reduce=capture_sweep(captures_dir / H200_SWEEP),
    )
    lines = render_text(sample_report(interconnect_node(interconnect))).splitlines()
    assert " ".join(line.strip() for line in lines[1:3]) == (
        "Interconnect: H2D 23.9-26.4 GB/s, D2H 26.2-27.1, HBM 2,612-2,647, "
        "P2P 274.9-276.8 (slowest GPU 0 -> GPU 6), all-reduce 476.7 GB/s busbw at 8 GiB (8 GPUs)"
    )


def test_sizes_and_figures_read_as_people_write_them() -> None:
    assert [size_words(size) for size in (0, 8, 1000, 1536, 1 << 20, 4 << 30, 3 << 29)] == [
        "0 B",
        "8 B",
        "1000 B",
        "1.5 KiB",
        "1 MiB",
        "4 GiB",
        "1.5 GiB",
    ]
    assert [shared.gbs_text(value) for value in (25.13, 476.72, 999.96, 2612.4)] == [
        "25.1",
        "476.7",
        "1,000",
        "2,612",
    ]
    assert shared.gbs_range([26.77, 26.47, 26.25]) == "26.2-26.8"
    assert shared.gbs_range([276.01, 275.98]) == "276.0"


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_a_zero_negative_or_nan_figure_is_no_figure(value: float) -> None:
    # The shared rule (validator.model.measured_gb_s): such a median was not measured.
    rows = list(copy_rows([53.0] * 4, [52.0] * 4, [2600.0] * 4))
    rows[1] = dataclasses.replace(rows[1], h2d=Bandwidth(value))
    pairs = list(peer_pairs(uniform_figures(4, slow=None)))
    pairs[2] = dataclasses.replace(pairs[2], unidirectional=Bandwidth(value))
    odd = ic_sample(
        gpus=tuple(rows), peers=tuple(pairs), all_reduce=Unavailable(Reason.ERROR, "no NCCL")
    )
    text = " ".join(
        line.strip()
        for line in render_text(sample_report(interconnect_node(odd))).splitlines()[1:3]
    )
    assert text.startswith(
        "Interconnect: H2D 53.0 GB/s (1 n/a), D2H 52.0, HBM 2,600, "
        "P2P 276.0 (slowest GPU 0 -> GPU 1; 1 pair n/a), all-reduce n/a"
    )
