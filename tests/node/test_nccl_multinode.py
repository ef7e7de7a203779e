"""nccl-tests across nodes: all_reduce_perf and alltoall_perf launched by mpirun or srun."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from validator.model import NcclGroupResult, from_dict, to_dict
from validator.node.cross_node_results import nccl_group_result
from validator.node.parsers.base import ParseError
from validator.node.parsers.nccl_tests import parse_all_reduce, parse_alltoall

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nccl-tests-multinode"
SHARED = Path("/work/shared/captures/nccl-tests")
OCI = SHARED / (
    "WEAKPROV-codeidx-39419071200-oci-2node-16xh200-nccl2.27.5-all_reduce_perf-1G-16G-pass.txt"
)
H100_2NODE = "issue-nccltests309-2node-16xh100-ndr-nccl2.26.2-all_reduce_perf_mpi-mpirun.txt"
A2A_2NODE = "codeidx-52913594292-2node-16xrtx6000d-nccl2.30.3-alltoall_perf-mpirun-shm-disabled.txt"
AR_OLD = "issue-nccltests78-8node-64xv100-all_reduce_perf-old-format-TRUNCATED.txt"
A2A_OLD = "issue-nccltests78-8node-64xv100-alltoall_perf-old-format-blank-redop-TRUNCATED.txt"
FAILURE = "issue-nccltests204-2node-4090-test-nccl-failure-remote-peer-closed-TRUNCATED.txt"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_every_fixture_is_listed_in_sources() -> None:
    sources = (FIXTURES / "SOURCES.md").read_text(encoding="utf-8")
    for path in FIXTURES.glob("*.txt"):
        assert f"`{path.name}`" in sources, path.name


@pytest.mark.skipif(not OCI.is_file(), reason="the shared captures are not mounted here")
def test_oci_two_node_h200_capture_read_in_place() -> None:
    parsed = parse_all_reduce(OCI.read_text(encoding="utf-8"))
    assert parsed.multi_node
    assert parsed.hosts == ("GPU-6550", "GPU-3841")
    assert len(parsed.ranks) == 16
    assert parsed.complete
    assert parsed.rows[-1].busbw_gb_s == 486.49
    assert parsed.rows[-1].in_place_busbw_gb_s == 486.40
    result = nccl_group_result(OCI.read_text(encoding="utf-8"), "all_reduce", "ib_only")
    assert result.completed
    assert result.largest_busbw_gb_s == 486.49
    assert result.wrong == 0


def test_mpirun_two_node_all_reduce_with_mpi_chatter_in_the_rank_list() -> None:
    parsed = parse_all_reduce(_read(H100_2NODE))
    assert parsed.hosts == ("bm-h100-01", "bm-h100-02")
    assert len(parsed.ranks) == 16
    assert [rank.rank for rank in parsed.ranks] == list(range(16))
    assert parsed.complete
    assert parsed.out_of_bounds == 0
    assert len(parsed.rows) == 32
    assert (parsed.rows[-1].size_bytes, parsed.rows[-1].busbw_gb_s) == (17179869184, 469.21)
    assert parsed.average_busbw_gb_s == 139.56
    assert parsed.nccl_version == "2.26.2+cuda12.8"


def test_alltoall_newest_layout_across_two_nodes() -> None:
    parsed = parse_alltoall(_read(A2A_2NODE))
    assert parsed.program == "alltoall_perf"
    assert parsed.multi_node
    assert len(parsed.ranks) == 16
    assert {row.redop for row in parsed.rows} == {"none"}
    assert len(parsed.rows) == 24
    assert parsed.complete
    last = parsed.rows[-1]
    assert (last.size_bytes, last.busbw_gb_s, last.in_place_busbw_gb_s) == (
        8589934592,
        35.90,
        38.01,
    )
    assert last.wrong == 0
    assert last.in_place_wrong is None
    result = nccl_group_result(_read(A2A_2NODE), "alltoall", "ib_only", "alltoall_perf -b 1k")
    assert result.completed
    assert result.largest_busbw_gb_s == 35.90
    assert result.hosts == ("R6KD-CX8aaS-GPU-11", "R6KD-CX8aaS-GPU-12")
    assert result.ranks == 16


def test_alltoall_old_layout_with_a_blank_reduction() -> None:
    parsed = parse_alltoall(_read(A2A_OLD))
    assert [row.busbw_gb_s for row in parsed.rows] == [0.51, 0.51]
    assert [row.time_us for row in parsed.rows] == [520935.0, 1041974.0]
    assert parsed.rows[0].redop == ""
    assert parsed.complete


def test_old_all_reduce_layout_across_eight_nodes() -> None:
    parsed = parse_all_reduce(_read(AR_OLD))
    assert [row.busbw_gb_s for row in parsed.rows] == [4.33, 4.32]
    assert parsed.complete


def test_all_reduce_parser_refuses_alltoall_output_and_back() -> None:
    with pytest.raises(ParseError, match="no all-reduce"):
        parse_all_reduce(_read(A2A_2NODE))
    with pytest.raises(ParseError):
        parse_alltoall(_read(H100_2NODE))


def test_nccl_tests_failure_lines_make_a_failed_run() -> None:
    parsed = parse_all_reduce(_read(FAILURE))
    assert not parsed.complete
    assert parsed.rows == ()
    assert parsed.failure is not None
    assert "Test NCCL failure common.cu:961" in parsed.failure
    result = nccl_group_result(_read(FAILURE), "all_reduce")
    assert not result.completed
    assert "Test NCCL failure" in result.detail
    assert not isinstance(result.largest_busbw_gb_s, float)


def test_a_failure_after_a_complete_table_is_not_complete() -> None:
    text = _read(H100_2NODE) + "bm-h100-02: Test NCCL failure common.cu:961 'unhandled'\n"
    assert not parse_all_reduce(text).complete


def test_a_run_cut_before_its_footer_keeps_no_figure() -> None:
    text = _read(H100_2NODE)
    cut = text[: text.index("  1073741824     268435456")]
    parsed = parse_all_reduce(cut)
    assert not parsed.complete
    assert len(parsed.rows) == 27
    result = nccl_group_result(cut, "all_reduce")
    assert not result.completed
    assert not isinstance(result.largest_busbw_gb_s, float)
    assert len(result.points) == 27  # the rows read are kept, as facts, not as a figure


def test_several_runs_in_one_output_are_refused() -> None:
    """A build without MPI, launched once per process: each prints its own rank 0."""
    header = "#   Rank  0 Pid   1320 on ip-172-31-20-228 device  0 [0x00] Tesla V100-SXM2-16GB\n"
    other = "#   Rank  0 Pid   2066 on ip-172-31-22-230 device  0 [0x00] Tesla V100-SXM2-16GB\n"
    with pytest.raises(ParseError, match="listed twice"):
        parse_all_reduce("# Using devices\n" + header + other)


def test_group_result_rejects_unknown_collective_and_variant() -> None:
    with pytest.raises(ValueError, match="variant"):
        nccl_group_result(_read(H100_2NODE), "all_reduce", "nvlink_only")


def test_group_results_go_through_json_and_back() -> None:
    for result in (
        nccl_group_result(_read(H100_2NODE), "all_reduce", "ib_only", "srun all_reduce_perf"),
        nccl_group_result(_read(FAILURE), "alltoall", "default"),
    ):
        encoded = json.loads(json.dumps(to_dict(result)))
        assert from_dict(NcclGroupResult, encoded) == result
