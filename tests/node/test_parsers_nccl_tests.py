"""nccl-tests' all_reduce_perf output, every layout in ../shared/captures/nccl-tests/.

The captures are read in place; each test asserts the figures its SOURCES row names.
Variants (a cut row, a failed check, the newest columns) are those captures' own
lines changed as the test says, in the format nccl-tests' ``src/util.cu`` prints.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from validator.node.parsers.base import ParseError
from validator.node.parsers.nccl_tests import parse_all_reduce

A100_OLD = "repo-microsoft-superbenchmark-8xa100-sxm4-40gb-all_reduce_perf-8G-old-format-pass.txt"
H200_ONE_SIZE = (
    "WEAKPROV-codeidx-19124581599-8xh200-ndv5-nccl2.19.3-all_reduce_perf-8G-single-size-pass.txt"
)
H200_TWO_NODES = (
    "WEAKPROV-codeidx-39419071200-oci-2node-16xh200-nccl2.27.5-all_reduce_perf-1G-16G-pass.txt"
)


def _capture(captures_dir: Path, name: str) -> str:
    return (captures_dir / "nccl-tests" / name).read_text(encoding="utf-8")


def test_old_format_a100_as_sources_row_says(captures_dir: Path) -> None:
    parsed = parse_all_reduce(_capture(captures_dir, A100_OLD))
    assert len(parsed.rows) == 34
    last = parsed.rows[-1]
    assert last.size_bytes == 8589934592
    assert (last.busbw_gb_s, last.in_place_busbw_gb_s, last.algbw_gb_s) == (235.26, 235.03, 134.44)
    assert last.wrong is None  # validation 0: N/A
    assert parsed.average_busbw_gb_s == 68.4048
    assert parsed.out_of_bounds == 0
    assert parsed.complete
    assert parsed.validation == 0
    assert len(parsed.ranks) == 8
    assert parsed.hosts == ("localhost",)
    assert not parsed.multi_node
    assert parsed.nccl_version is None
    assert [row.size_bytes for row in parsed.rows[:2]] == [0, 0]  # the two size-0 rows


def test_h200_single_size_as_sources_row_says(captures_dir: Path) -> None:
    parsed = parse_all_reduce(_capture(captures_dir, H200_ONE_SIZE))
    (row,) = parsed.rows
    assert (row.size_bytes, row.busbw_gb_s, row.in_place_busbw_gb_s, row.algbw_gb_s) == (
        8589934592,
        476.72,
        478.11,
        272.41,
    )
    assert (row.wrong, row.in_place_wrong) == (0, 0)
    assert parsed.average_busbw_gb_s == 477.416
    assert parsed.nccl_version == "2.19.3+cuda12.2"
    assert [rank.rank for rank in parsed.ranks] == list(range(8))
    assert parsed.ranks[3].device == 3
    assert parsed.ranks[3].bus == "0x00"
    assert parsed.ranks[0].name == "NVIDIA H200"
    assert not parsed.multi_node


def test_two_node_h200_is_multi_node(captures_dir: Path) -> None:
    parsed = parse_all_reduce(_capture(captures_dir, H200_TWO_NODES))
    assert len(parsed.rows) == 5
    assert parsed.rows[0].size_bytes == 1073741824
    last = parsed.rows[-1]
    assert (last.size_bytes, last.busbw_gb_s, last.in_place_busbw_gb_s) == (
        17179869184,
        486.49,
        486.40,
    )
    assert all(row.wrong == 0 and row.in_place_wrong == 0 for row in parsed.rows)
    assert parsed.average_busbw_gb_s == 476.572
    assert len(parsed.ranks) == 16
    assert parsed.hosts == ("GPU-6550", "GPU-3841")
    assert parsed.multi_node
    assert parsed.nccl_version == "2.27.5+cuda12.8"


def test_interleaved_nccl_info_line_is_skipped(captures_dir: Path) -> None:
    text = _capture(captures_dir, A100_OLD)
    assert "NCCL INFO Launch mode Parallel" in text
    assert len(parse_all_reduce(text).rows) == 34


# ---------------------------------------------------------------- variants


def test_out_of_bounds_failed_is_read(captures_dir: Path) -> None:
    text = _capture(captures_dir, H200_ONE_SIZE)
    text = text.replace("478.11      0", "478.11      3").replace("0 OK", "3 FAILED")
    parsed = parse_all_reduce(text)
    assert parsed.out_of_bounds == 3
    assert parsed.rows[0].in_place_wrong == 3


def test_a_wrong_count_printed_with_g_reads_as_a_count(captures_dir: Path) -> None:
    text = _capture(captures_dir, H200_ONE_SIZE).replace("476.72      0", "476.72  1.2e+07")
    assert parse_all_reduce(text).rows[0].wrong == 12_000_000


def test_newest_layout_with_domain_bus_and_per_iteration_columns(captures_dir: Path) -> None:
    # The H200 capture's device list and row as nccl-tests 2.19.6 prints them with -I 1.
    text = _capture(captures_dir, H200_ONE_SIZE)
    header = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "    i_min    i_max    i_p99    i_cv%     time   algbw   busbw #wrong    i_min    i_max"
        "    i_p99    i_cv%\n"
    )
    row = (
        "  8589934592    2147483648     float     sum      -1    31533  272.41  476.72      0"
        "    31400    31650    31640     0.22    31441  273.20  478.11      0    31380    31500"
        "    31490     0.11\n"
    )
    lines = [
        line.replace("[0x00]", f"[0000:{0x0F + i:02x}:00]") if "Rank" in line else line
        for i, line in enumerate(text.splitlines(keepends=True))
    ]
    start = next(i for i, line in enumerate(lines) if "#       size" in line)
    lines[start] = header
    lines[start + 2] = row
    lines.insert(0, "# nccl-tests version 2.19.6 nccl-headers=22807 nccl-library=22807\n")
    lines = [line for line in lines if not line.startswith("NCCL version")]
    parsed = parse_all_reduce("".join(lines))
    (got,) = parsed.rows
    assert (got.busbw_gb_s, got.in_place_busbw_gb_s, got.in_place_time_us) == (
        476.72,
        478.11,
        31441.0,
    )
    assert parsed.nccl_version == "2.28.7"
    assert parsed.ranks[0].bus.startswith("0000:")


def test_a_last_row_cut_with_the_output_is_dropped(captures_dir: Path) -> None:
    text = _capture(captures_dir, H200_TWO_NODES)
    cut = text[: text.index("66226")]  # the last row, mid-way; no footer
    parsed = parse_all_reduce(cut)
    assert len(parsed.rows) == 4
    assert not parsed.complete
    assert parsed.out_of_bounds is None


def test_a_row_that_does_not_fit_mid_table_is_bad_input(captures_dir: Path) -> None:
    text = _capture(captures_dir, H200_TWO_NODES).replace("  4382.1  245.03  459.43      0", "")
    with pytest.raises(
        ParseError, match=r"line 25: a result row with 9 fields where the header names 13"
    ):
        parse_all_reduce(text)


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("8589934592    2147483648", "9" * 5000 + "    2147483648", "size"),
        ("476.72", "1e999", "not finite"),
        ("476.72", "-1.00", "is not a number"),
        ("     sum ", "    none ", "is no all-reduce's"),
        ("# nThread", "# Collective test starting: all_gather_perf\n# nThread", "all_gather_perf"),
    ],
)
def test_hostile_or_foreign_output_is_one_line_of_bad_input(
    captures_dir: Path, old: str, new: str, words: str
) -> None:
    text = _capture(captures_dir, H200_ONE_SIZE).replace(old, new, 1)
    with pytest.raises(ParseError, match=words) as raised:
        parse_all_reduce(text)
    assert "\n" not in str(raised.value)


def test_text_that_is_not_nccl_tests_output_is_bad_input() -> None:
    with pytest.raises(ParseError, match="not nccl-tests output"):
        parse_all_reduce("Total: 42\nall good\n")


# ---------------------------------------------------------------- non-ASCII digits


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        # str.isdigit() takes '²' (int() refuses it) and '٣' (int() reads it as 3).
        ("  8589934592    2147483648", "  ²    2147483648", "size '²' is not a count"),
        ("  8589934592    2147483648", "  ٣    2147483648", "size '٣' is not a count"),
        ("    2147483648     float", "    ²     float", "count '²' is not a count"),
    ],
)
def test_a_row_of_non_ascii_digits_is_one_line_of_bad_input(
    captures_dir: Path, old: str, new: str, words: str
) -> None:
    text = _capture(captures_dir, H200_ONE_SIZE)
    assert old in text
    with pytest.raises(ParseError, match=words) as raised:
        parse_all_reduce(text.replace(old, new, 1))
    assert "\n" not in str(raised.value)


def test_non_ascii_digits_in_the_footer_are_not_a_count(captures_dir: Path) -> None:
    text = _capture(captures_dir, H200_ONE_SIZE).replace("0 OK", "٣ OK")
    parsed = parse_all_reduce(text)
    assert parsed.out_of_bounds is None  # not nccl-tests' footer: the run reads as cut
    assert not parsed.complete


# ---------------------------------------------------------------- old layout's error column


def test_an_error_column_above_nccl_tests_tolerance_is_out_of_bounds(captures_dir: Path) -> None:
    # nccl-tests before 2.13 prints the largest relative error; above DeltaMaxValue (1e-5
    # for float) the size is out of bounds. Here the 8 GiB row, validated, one half bad.
    text = _capture(captures_dir, A100_OLD)
    row = "134.44  235.26    N/A    63959  134.30  235.03    N/A"
    assert row in text
    bad = row.replace("235.26    N/A", "235.26  4e-01").replace("235.03    N/A", "235.03  2e-07")
    parsed = parse_all_reduce(text.replace(row, bad))
    last = parsed.rows[-1]
    assert (last.max_error, last.in_place_max_error) == (0.4, 2e-07)
    assert last.out_of_bounds == 1  # 0.4 is beyond 1e-5; 2e-07 within
    assert parsed.rows[-2].out_of_bounds is None  # N/A: not checked


def test_error_tolerance_follows_the_data_type(captures_dir: Path) -> None:
    text = _capture(captures_dir, A100_OLD)
    row = "134.44  235.26    N/A    63959  134.30  235.03    N/A"
    half = text.replace(row, row.replace("N/A", "1e-03")).replace(
        "8589934592    2147483648   float", "8589934592    2147483648    half"
    )
    assert parse_all_reduce(half).rows[-1].out_of_bounds == 0  # half allows 5e-02
    as_float = text.replace(row, row.replace("N/A", "1e-03"))
    assert parse_all_reduce(as_float).rows[-1].out_of_bounds == 2
    unknown = text.replace("8589934592    2147483648   float", "8589934592    2147483648   fp8e4")
    unknown = unknown.replace(row, row.replace("N/A", "1e-03"))
    assert parse_all_reduce(unknown).rows[-1].out_of_bounds is None  # no known tolerance


def test_new_layout_rows_carry_counts_not_errors(captures_dir: Path) -> None:
    row = parse_all_reduce(_capture(captures_dir, H200_ONE_SIZE)).rows[0]
    assert row.max_error is None
    assert row.out_of_bounds is None
