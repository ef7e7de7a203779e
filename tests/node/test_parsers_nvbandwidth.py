"""nvbandwidth's text and JSON, read as its own writer (NVIDIA/nvbandwidth) prints them.

Real outputs are read in place: ``../shared/captures/nvbandwidth/`` and
``tests/fixtures/nvbandwidth/`` (each with the figures its SOURCES row names). No real
``-j`` output is public; the JSON documents below are those captures' figures in the
shape ``json_output.cpp`` writes (its quirks included), each saying which capture.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from validator.node.parsers.base import ParseError
from validator.node.parsers.nvbandwidth import (
    NvbParsed,
    NvbStatus,
    parse_nvbandwidth,
    parse_nvbandwidth_json,
    parse_nvbandwidth_text,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nvbandwidth"
RTX4090_V02 = "issue-nvbandwidth15-8xrtx4090-545.29.06-v0.2-h2d-d2h-ce-TRUNCATED.txt"
A100_ASSERT = (
    "issue-nvbandwidth34-8xa100-sxm4-80gb-550.127.08-v0.7-d2d-read-ce-ASSERT-pattern-fail.txt"
)
A100_SM_V08 = "issue-nvbandwidth42-a100-sxm4-40gb-560.35.05-v0.8-h2d-memcpy-sm-b512-pass.txt"
README_OLD = "repo-NVIDIA-nvbandwidth-README-8xgpu-d2d-memcpy-write-ce-276GBps.txt"
H100_V010 = "WEAKPROV-codeidx-62193952648-8xh100-80gb-hbm3-595.71.05-v0.10.0-ce-five-runs.txt"
B300_BIDIR = (
    "WEAKPROV-codeidx-63314792526-7xb300-sxm6-610.57.04-v0.10.0-ce-bidirectional-TRUNCATED.txt"
)
H20_LOCAL = "issue-nvbandwidth48-8xh20-3e-550.127.08-v0.8-device-local-copy-TRUNCATED.txt"


def _shared(captures_dir: Path, name: str) -> str:
    return (captures_dir / "nvbandwidth" / name).read_text(encoding="utf-8")


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def _row(parsed: NvbParsed, testcase: str, part: str = "") -> tuple[float | None, ...]:
    case = parsed.testcase(testcase)
    assert case is not None
    assert case.status is NvbStatus.PASSED
    matrix = case.matrix(part)
    assert matrix is not None
    return matrix.rows[0]


# ---------------------------------------------------------------- the shared captures


def test_v02_rtx4090_h2d_and_d2h_as_sources_row_says(captures_dir: Path) -> None:
    parsed = parse_nvbandwidth_text(_shared(captures_dir, RTX4090_V02))
    assert (parsed.version, parsed.cuda_runtime_version, parsed.driver_version) == (
        "v0.2",
        12030,
        "545.29.06",
    )
    assert [device.index for device in parsed.devices] == list(range(8))
    assert all(device.pci_bus_id is None for device in parsed.devices)  # v0.2 prints none
    h2d = _row(parsed, "host_to_device_memcpy_ce")
    d2h = _row(parsed, "device_to_host_memcpy_ce")
    assert (min(h2d), max(h2d)) == (23.90, 26.38)
    assert (min(d2h), max(d2h)) == (26.25, 27.11)
    assert parsed.testcase("host_to_device_memcpy_ce").matrices[0].sum == 205.04
    assert parsed.testcase("device_to_host_memcpy_ce").matrices[0].sum == 214.28
    assert [case.name for case in parsed.testcases] == [
        "host_to_device_memcpy_ce",
        "device_to_host_memcpy_ce",
    ]


def test_assert_during_data_verification_is_a_failed_testcase_never_a_figure(
    captures_dir: Path,
) -> None:
    parsed = parse_nvbandwidth_text(_shared(captures_dir, A100_ASSERT))
    case = parsed.testcase("device_to_device_memcpy_read_ce")
    assert case is not None
    assert case.status is NvbStatus.FAILED
    assert case.matrices == ()
    assert case.error is not None
    assert "Invalid value when checking the pattern" in case.error
    assert "ASSERT in expression h_errorFlag == 0" in case.error
    assert parsed.devices[4].pci_bus_id == "00000000:9B:00.0"
    assert parsed.version == "v0.7"


def test_v08_single_gpu_sm_copy(captures_dir: Path) -> None:
    parsed = parse_nvbandwidth_text(_shared(captures_dir, A100_SM_V08))
    assert (parsed.version, parsed.cuda_runtime_version, parsed.driver_version) == (
        "v0.8",
        12060,
        "560.35.05",
    )
    assert _row(parsed, "host_to_device_memcpy_sm") == (25.13,)
    assert parsed.testcase("host_to_device_memcpy_sm").matrices[0].sum == 25.13
    assert parsed.devices[0].pci_bus_id == "00000000:99:00.0"


def test_old_matrix_with_zero_diagonal_and_no_sum(captures_dir: Path) -> None:
    parsed = parse_nvbandwidth_text(_shared(captures_dir, README_OLD))
    case = parsed.testcase("device_to_device_memcpy_write_ce")
    assert case is not None
    assert case.status is NvbStatus.PASSED
    (matrix,) = case.matrices
    assert len(matrix.rows) == 8
    assert matrix.sum is None
    off_diagonal = [v for r, row in enumerate(matrix.rows) for c, v in enumerate(row) if r != c]
    assert (min(off_diagonal), max(off_diagonal)) == (274.89, 276.76)
    assert matrix.value(6, 0) == 274.89
    assert all(matrix.value(i, i) == 0.0 for i in range(8))


# ---------------------------------------------------------------- fixtures of this repo


def test_h100_v010_five_runs_in_one_file() -> None:
    parsed = parse_nvbandwidth_text(_fixture(H100_V010))
    assert (parsed.version, parsed.cuda_runtime_version, parsed.driver_version) == (
        "v0.10.0",
        13020,
        "595.71.05",
    )
    assert parsed.devices == ()  # v0.10 lists none
    h2d, d2h = _row(parsed, "host_to_device_memcpy_ce"), _row(parsed, "device_to_host_memcpy_ce")
    assert (min(h2d), max(h2d)) == (55.33, 55.37)
    assert (min(d2h), max(d2h)) == (55.18, 55.26)
    for name, low, high, total in (
        ("device_to_device_memcpy_read_ce", 395.05, 395.25, 22126.64),
        ("device_to_device_memcpy_write_ce", 397.44, 397.52, 22258.35),
    ):
        case = parsed.testcase(name)
        assert case is not None
        (matrix,) = case.matrices
        cells = [v for row in matrix.rows for v in row if v is not None]
        assert (min(cells), max(cells), matrix.sum) == (low, high, total)
        assert all(matrix.value(i, i) is None for i in range(8))
        assert matrix.coefficient_of_variation == 0.0
    latency = parsed.testcase("device_to_device_latency_sm")
    assert latency is not None
    assert latency.matrices[0].unit == "ns"


def test_b300_bidirectional_three_matrices_each() -> None:
    parsed = parse_nvbandwidth_text(_fixture(B300_BIDIR))
    write = parsed.testcase("device_to_device_bidirectional_memcpy_write_ce")
    assert write is not None
    assert write.status is NvbStatus.PASSED
    assert [m.key for m in write.matrices] == [
        "device_to_device_bidirectional_memcpy_write_ce_write1",
        "device_to_device_bidirectional_memcpy_write_ce_write2",
        "device_to_device_bidirectional_memcpy_write_ce_total",
    ]
    assert write.matrix("write2").value(0, 1) == 770.05
    assert write.matrix("write1").value(0, 1) == 770.33
    assert write.matrix("total").value(0, 1) == 1540.38
    read = parsed.testcase("device_to_device_bidirectional_memcpy_read_ce")
    assert read is not None
    assert read.matrix("total").coefficient_of_variation == 0.0
    assert _row(parsed, "device_to_host_memcpy_ce")[6] == 56.92


def test_v08_hostname_line_and_device_local_copy() -> None:
    parsed = parse_nvbandwidth_text(_fixture(H20_LOCAL))
    assert [d.pci_bus_id for d in parsed.devices][-1] == "00000000:DA:00.0"
    assert parsed.devices[0].name == "NVIDIA H20-3e"
    row = _row(parsed, "device_local_copy")
    assert (min(row), max(row)) == (1115.72, 1117.17)
    assert parsed.testcase("device_local_copy").matrices[0].sum == 8930.99


# ---------------------------------------------------------------- cut short


def test_a_file_cut_inside_a_table_leaves_that_testcase_cut(captures_dir: Path) -> None:
    text = _shared(captures_dir, RTX4090_V02)
    cut = text[: text.index("27.10")]  # mid-row of device_to_host_memcpy_ce
    parsed = parse_nvbandwidth_text(cut)
    assert parsed.testcase("host_to_device_memcpy_ce").status is NvbStatus.PASSED
    d2h = parsed.testcase("device_to_host_memcpy_ce")
    assert d2h is not None
    assert d2h.status is NvbStatus.CUT
    assert d2h.matrices == ()


def test_a_file_cut_between_bidirectional_matrices_is_cut_not_passed() -> None:
    text = _fixture(B300_BIDIR)
    cut = text[: text.index("memcpy CE GPU(row) <-> GPU(column) Write2")]
    case = parse_nvbandwidth_text(cut).testcase("device_to_device_bidirectional_memcpy_write_ce")
    assert case is not None
    assert case.status is NvbStatus.CUT


def test_a_file_cut_after_running_line_is_cut(captures_dir: Path) -> None:
    text = _shared(captures_dir, RTX4090_V02)
    cut = text[: text.index("memcpy CE CPU(row) <- GPU(column)")]
    case = parse_nvbandwidth_text(cut).testcase("device_to_host_memcpy_ce")
    assert case is not None
    assert case.status is NvbStatus.CUT


# ---------------------------------------------------------------- hostile text


def test_a_row_that_does_not_fit_mid_file_is_bad_input(captures_dir: Path) -> None:
    text = _shared(captures_dir, README_OLD).replace("276.19      0.00    276.29", "276.19", 1)
    with pytest.raises(ParseError, match=r"nvbandwidth output line \d+: row 1 .* 6 values for 8"):
        parse_nvbandwidth_text(text)


def test_a_table_missing_rows_before_the_next_testcase_is_bad_input(captures_dir: Path) -> None:
    text = _shared(captures_dir, README_OLD)
    lines = text.splitlines()
    broken = "\n".join([*lines[:6], "", "Running device_local_copy.", *lines[6:]])
    with pytest.raises(ParseError, match="ends after 3 of 8 rows"):
        parse_nvbandwidth_text(broken)


@pytest.mark.parametrize(
    "value",
    ["1e999", "9" * 5000, "-25.50", "nan", "25.5.0", "0x1A"],
)
def test_a_value_that_is_no_bandwidth_is_bad_input(captures_dir: Path, value: str) -> None:
    text = _shared(captures_dir, RTX4090_V02).replace("25.50", value, 1)
    with pytest.raises(ParseError, match="nvbandwidth output line 23"):
        parse_nvbandwidth_text(text)


def test_a_device_number_of_thousands_of_digits_is_bad_input(captures_dir: Path) -> None:
    text = _shared(captures_dir, RTX4090_V02).replace("Device 7:", "Device " + "7" * 5000 + ":")
    with pytest.raises(ParseError, match="not a device number"):
        parse_nvbandwidth_text(text)


def test_text_that_is_not_nvbandwidth_output_is_bad_input() -> None:
    with pytest.raises(ParseError, match="not nvbandwidth output"):
        parse_nvbandwidth_text("Hello\nthis is a log of something else\n")


def test_a_header_alone_is_nvbandwidth_output_that_measured_nothing(captures_dir: Path) -> None:
    text = _shared(captures_dir, RTX4090_V02)
    parsed = parse_nvbandwidth_text(text[: text.index("Running")])
    assert parsed.testcases == ()
    assert parsed.version == "v0.2"


def test_a_table_without_its_column_numbers_is_bad_input(captures_dir: Path) -> None:
    lines = _shared(captures_dir, RTX4090_V02).splitlines()
    header = lines.index("memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)") + 1
    text = "\n".join(lines[:header] + lines[header + 1 :])
    with pytest.raises(ParseError, match="no row of column numbers"):
        parse_nvbandwidth_text(text)


def test_a_repeated_testcase_that_failed_once_reads_as_failed(captures_dir: Path) -> None:
    failing = _shared(captures_dir, A100_ASSERT)
    passing = failing.replace(
        failing[failing.index(" Invalid") :],
        _fixture(H100_V010).split("Running device_to_device_memcpy_read_ce.\n")[1].split("NOTE")[0],
    )
    parsed = parse_nvbandwidth_text(passing + "\n" + failing)
    assert [c.status for c in parsed.testcases] == [NvbStatus.PASSED, NvbStatus.FAILED]
    assert parsed.testcase("device_to_device_memcpy_read_ce").status is NvbStatus.FAILED


# ---------------------------------------------------------------- JSON


def _json(testcases: list[dict[str, object]], **root: object) -> str:
    body = {
        "version": "v0.8",
        "git_version": "v0.8",
        "CUDA Runtime Version": 12040,
        "Driver Version": "550.127.08",
        "GPU Device list": [
            f"{i}: NVIDIA A100-SXM4-80GB (00000000:{bus}:00): (node-01)"
            for i, bus in enumerate(("34", "35", "36", "37", "9b", "9c", "9d", "9e"))
        ],
        "testcases": testcases,
        **root,
    }
    # json_output.cpp's bug leaves a null "testcases" beside the real root.
    return json.dumps({"nvbandwidth": body, "testcases": None}, indent=3)


# The RTX 4090 capture's H2D row, as json_output.cpp writes it (numbers as strings).
RTX_H2D = ["25.5", "24.26", "23.9", "26.3", "26.28", "26.38", "26.09", "26.31"]


def test_json_passed_testcase_and_device_list() -> None:
    text = _json(
        [
            {
                "name": "host_to_device_memcpy_ce",
                "status": "Passed",
                "bandwidth_description": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
                "bandwidth_matrix": [RTX_H2D],
                "sum": 205.04,
            }
        ]
    )
    parsed = parse_nvbandwidth_json(text)
    assert parsed.version == "v0.8"
    assert parsed.cuda_runtime_version == 12040
    assert parsed.devices[4].pci_bus_id == "00000000:9B:00.0"
    assert parsed.devices[4].name == "NVIDIA A100-SXM4-80GB"
    assert _row(parsed, "host_to_device_memcpy_ce")[2] == 23.9
    assert parsed.error is None


def test_json_assert_leaves_the_testcase_running_and_the_error_on_top() -> None:
    # The A100 capture's failure in -j mode: RecordError() puts the ASSERT in
    # "error", prints the document and exits; the kernel's printf came first.
    error = (
        "ASSERT in expression h_errorFlag == 0 in void memcmpPatternHelper(...)() : "
        "/mnt/project/cuda_related/nvbandwidth/memcpy.cpp:165\n"
    )
    text = " Invalid value when checking the pattern at 0x70a640000000\n" + _json(
        [{"name": "device_to_device_memcpy_read_ce", "status": "Running"}], error=error
    )
    parsed = parse_nvbandwidth_json(text)
    case = parsed.testcase("device_to_device_memcpy_read_ce")
    assert case is not None
    assert case.status is NvbStatus.FAILED
    assert "ASSERT in expression" in (case.error or "")
    assert "Invalid value when checking the pattern" in (case.error or "")
    assert parsed.error is None  # it is the testcase's


def test_json_caught_error_adds_a_second_entry_read_as_one_failure() -> None:
    text = _json(
        [
            {"name": "host_to_device_memcpy_ce", "status": "Running"},
            {"name": "host_to_device_memcpy_ce", "status": "Error"},
            {"name": "device_local_copy", "status": "Waived"},
        ]
    )
    parsed = parse_nvbandwidth_json(text)
    assert [(c.name, c.status) for c in parsed.testcases] == [
        ("host_to_device_memcpy_ce", NvbStatus.FAILED),
        ("device_local_copy", NvbStatus.WAIVED),
    ]


def test_json_bidirectional_three_matrices_in_one_list_are_split() -> None:
    # The B300 capture's first two GPUs' bidirectional write matrices, as the writer
    # appends them: write1, write2 and total rows in one bandwidth_matrix.
    rows = [
        ["N/A", "770.33"],
        ["770.33", "N/A"],
        ["N/A", "770.05"],
        ["770.05", "N/A"],
        ["N/A", "1540.38"],
        ["1540.38", "N/A"],
    ]
    text = _json(
        [
            {
                "name": "device_to_device_bidirectional_memcpy_write_ce",
                "status": "Passed",
                "bandwidth_description": (
                    "memcpy CE GPU(row) <-> GPU(column) Total bandwidth (GB/s)"
                ),
                "bandwidth_matrix": rows,
                "sum": 3080.76,
            }
        ]
    )
    case = parse_nvbandwidth_json(text).testcase("device_to_device_bidirectional_memcpy_write_ce")
    assert case is not None
    assert case.matrix("write1").value(0, 1) == 770.33
    assert case.matrix("write2").value(1, 0) == 770.05
    assert case.matrix("total").sum == 3080.76
    assert case.matrix("write1").sum is None


def test_json_run_error_before_any_testcase_is_the_runs() -> None:
    text = _json([], error="Specified list of testcase prefixes did not match any testcases")
    parsed = parse_nvbandwidth_json(text)
    assert parsed.testcases == ()
    assert parsed.error == "Specified list of testcase prefixes did not match any testcases"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply|not valid JSON"),
        ("{not json", "not valid JSON"),
        ('{"dcgm": {}}', "no 'nvbandwidth' object"),
        ('{"nvbandwidth": {"testcases": {}}}', "'testcases' is not a list"),
        ('{"nvbandwidth": {"testcases": [{"status": "Passed"}]}}', "testcase 0 has no name"),
        (
            '{"nvbandwidth": {"testcases": [{"name": "h2d", "status": "Smiling"}]}}',
            "status 'smiling'",
        ),
        (
            '{"nvbandwidth": {"testcases": [{"name": "h2d", "status": "Passed"}]}}',
            "not a list of rows",
        ),
        (
            '{"nvbandwidth": {"testcases": [{"name": "h2d", "status": "Passed",'
            ' "bandwidth_matrix": [["1e999"]]}]}}',
            "not a finite number",
        ),
        (
            '{"nvbandwidth": {"testcases": [{"name": "h2d", "status": "Passed",'
            ' "bandwidth_matrix": [["1", "2"], ["3"]]}]}}',
            "rows of different lengths",
        ),
        (
            '{"nvbandwidth": {"testcases": [{"name": "h2d", "status": "Passed",'
            ' "bandwidth_matrix": [[true]]}]}}',
            "is not a number",
        ),
        ('{"nvbandwidth": {"GPU Device list": ["zero: a GPU"]}}', "device entry"),
    ],
)
def test_hostile_json_is_one_line_of_bad_input(text: str, words: str) -> None:
    with pytest.raises(ParseError, match=words) as raised:
        parse_nvbandwidth_json(text)
    assert "\n" not in str(raised.value)


def test_by_name_json_or_text(captures_dir: Path) -> None:
    text = _shared(captures_dir, A100_SM_V08)
    assert parse_nvbandwidth(text, "nvbandwidth.txt").version == "v0.8"
    with pytest.raises(ParseError, match="not valid JSON"):
        parse_nvbandwidth(text, "nvbandwidth.json")


def test_json_saved_as_text_says_where_it_belongs() -> None:
    with pytest.raises(ParseError, match=r"save it as nvbandwidth\.json"):
        parse_nvbandwidth_text(_json([]))


def test_a_blank_line_after_a_row_cut_with_the_output_is_still_cut(captures_dir: Path) -> None:
    text = _shared(captures_dir, RTX4090_V02)
    cut = text[: text.index("27.10")] + "\n\n"
    d2h = parse_nvbandwidth_text(cut).testcase("device_to_host_memcpy_ce")
    assert d2h is not None
    assert d2h.status is NvbStatus.CUT


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # str.isdigit() takes '²' (int() refuses it) and '٣' (int() reads it as 3).
        ("\n1    276.19", "\n²    276.19"),
        ("\n1    276.19", "\n٣    276.19"),
    ],
)
def test_a_row_label_of_non_ascii_digits_is_one_line_of_bad_input(
    captures_dir: Path, old: str, new: str
) -> None:
    text = _shared(captures_dir, README_OLD)
    assert old in text
    with pytest.raises(ParseError, match=r"nvbandwidth output line 5: .* is not a device number"):
        parse_nvbandwidth_text(text.replace(old, new, 1))


def test_column_numbers_of_non_ascii_digits_are_bad_input(captures_dir: Path) -> None:
    text = _shared(captures_dir, README_OLD).replace("         7\n", "         \u0667\n", 1)
    with pytest.raises(ParseError, match="has no row of column numbers below it"):
        parse_nvbandwidth_text(text)


@pytest.mark.parametrize("label", ["Device ²:", "Device ٣:"])
def test_a_device_line_of_non_ascii_digits_is_no_device(captures_dir: Path, label: str) -> None:
    text = _shared(captures_dir, RTX4090_V02).replace("Device 3:", label, 1)
    parsed = parse_nvbandwidth_text(text)
    assert [device.index for device in parsed.devices] == [0, 1, 2, 4, 5, 6, 7]


def test_json_device_entry_of_non_ascii_digits_is_bad_input() -> None:
    text = json.dumps({"nvbandwidth": {"GPU Device list": ["²: NVIDIA H100"], "testcases": []}})
    with pytest.raises(ParseError, match=r"device entry .* is unreadable"):
        parse_nvbandwidth_json(text)


GB200_MULTINODE = "cloud-native-docs-dra-cds-2x4xgb200-570.124.06-v0.7-multinode-d2d-read-ce.txt"


def test_gb200_multinode_run_names_its_processes_hosts() -> None:
    text = (Path(__file__).parent.parent / "fixtures" / "nvbandwidth" / GB200_MULTINODE).read_text()
    parsed = parse_nvbandwidth_text(text)
    assert parsed.hosts == ("nvbandwidth-test-worker-0",) * 4 + ("nvbandwidth-test-worker-1",) * 4
    assert parsed.multi_node
    case = parsed.testcase("multinode_device_to_device_memcpy_read_ce")
    assert case is not None
    matrix = case.matrix()
    assert matrix is not None
    assert matrix.sum == 44685.29
    assert matrix.value(0, 1) == 798.02


def test_a_one_node_run_is_not_multi_node(captures_dir: Path) -> None:
    text = (
        captures_dir
        / "nvbandwidth/repo-NVIDIA-nvbandwidth-README-8xgpu-d2d-memcpy-write-ce-276GBps.txt"
    ).read_text()
    parsed = parse_nvbandwidth_text(text)
    assert parsed.hosts == ()
    assert not parsed.multi_node


def _json_with_devices(devices: object) -> str:
    root = {
        "CUDA Runtime Version": 13000,
        "Driver Version": "580.105.08",
        "GPU Device list": devices,
        "git_version": "v0.8",
        "testcases": [],
    }
    return json.dumps({"nvbandwidth": root})


def test_json_device_entries_name_their_host() -> None:
    # the entry shape of NVIDIA/nvbandwidth pull 54's real GB200 output
    parsed = parse_nvbandwidth_json(
        _json_with_devices(
            [
                "0: NVIDIA GB200 (00000008:06:00): (n179-067-085)",
                "1: NVIDIA GB200 (00000009:06:00): (n179-067-085)",
            ]
        )
    )
    assert [d.pci_bus_id for d in parsed.devices] == ["00000008:06:00.0", "00000009:06:00.0"]
    assert parsed.hosts == ("n179-067-085", "n179-067-085")
    assert not parsed.multi_node  # one host, no multinode testcase


def test_json_devices_on_two_hosts_are_a_multi_node_run() -> None:
    parsed = parse_nvbandwidth_json(
        _json_with_devices(
            [
                "0: NVIDIA GB200 (00000008:06:00): (tray-a)",
                "1: NVIDIA GB200 (00000008:06:00): (tray-b)",
            ]
        )
    )
    assert parsed.multi_node


def test_a_null_json_device_list_is_no_devices() -> None:
    # v0.9 and v0.10 write null whatever the GPU count (NVIDIA/nvbandwidth issue 66)
    parsed = parse_nvbandwidth_json(_json_with_devices(None))
    assert parsed.devices == ()
    assert parsed.hosts == ()
