"""perftest's ib_write_bw / ib_write_lat parser against real recorded outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from validator.model import RdmaEnd, RdmaPairResult, from_dict, to_dict
from validator.node.cross_node_results import rdma_pair_result
from validator.node.parsers.base import ParseError
from validator.node.parsers.perftest import WRITE_BW, WRITE_LAT, parse_perftest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "perftest"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


NDR = "codeidx-58145501009-ndr-cx7-ib_write_bw-report_gbits-client-conflicting-cpu-freq.txt"
A100_SERVER = "codeidx-38131338192-a100-ib_write_bw-use_cuda-a-q2-server.txt"
A100_CLIENT = "codeidx-38131338192-a100-ib_write_bw-use_cuda-a-q2-client-sweep.txt"
H200_ROCE = "codeidx-26924035472-h200-roce-ib_write_bw-use_cuda-dmabuf-a-client-sweep.txt"
BIDIR = "codeidx-310222282-100gbe-roce-ib_write_bw-b-bidirectional-client.txt"
LAT = "codeidx-70127220898-dgx-spark-ib_write_lat-rdma_cm-client.txt"
REFUSED = "pr-perftest228-ib_write_bw-client-connect-refused.txt"
SEND_LAT = "codeidx-58145501009-ndr-cx7-ib_send_lat-client-not-a-write-test.txt"


def test_every_fixture_is_listed_in_sources() -> None:
    sources = (FIXTURES / "SOURCES.md").read_text(encoding="utf-8")
    for path in FIXTURES.glob("*.txt"):
        assert f"`{path.name}`" in sources, path.name


def test_ndr_client_with_cpu_frequency_warning_between_header_and_row() -> None:
    parsed = parse_perftest(_read(NDR))
    assert parsed.test == WRITE_BW
    assert parsed.complete
    assert not parsed.server
    assert (parsed.device, parsed.link_type, parsed.qps) == ("mlx5_0", "IB", 1)
    assert parsed.unit == "Gb/sec"
    assert parsed.cuda_device is None
    assert len(parsed.warnings) == 1
    assert "Conflicting CPU frequency" in parsed.warnings[0]
    (row,) = parsed.bw_rows
    assert (row.size_bytes, row.iterations) == (65536, 5000)
    assert (row.peak_gbit_s, row.average_gbit_s, row.msg_rate_mpps) == (392.38, 392.34, 0.748336)


def test_use_cuda_server_side_prints_only_the_last_row() -> None:
    parsed = parse_perftest(_read(A100_SERVER))
    assert parsed.server
    assert parsed.complete
    assert (parsed.cuda_device, parsed.gpu_name) == (0, "NVIDIA A100-SXM4-80GB")
    assert parsed.qps == 2
    (row,) = parsed.bw_rows
    assert (row.size_bytes, row.peak_gbit_s, row.average_gbit_s) == (8388608, 81.02, 80.96)


def test_use_cuda_client_sweep() -> None:
    parsed = parse_perftest(_read(A100_CLIENT))
    assert not parsed.server
    assert parsed.complete
    assert parsed.cuda_device == 0
    assert len(parsed.bw_rows) == 23
    first, last = parsed.bw_rows[0], parsed.largest
    assert (first.size_bytes, first.peak_gbit_s, first.average_gbit_s) == (2, 0.061867, 0.060962)
    assert last is not None
    assert (last.size_bytes, last.average_gbit_s) == (8388608, 80.96)


def test_roce_gpudirect_dmabuf_sweep() -> None:
    parsed = parse_perftest(_read(H200_ROCE))
    assert parsed.link_type == "Ethernet"
    assert parsed.gpu_name == "NVIDIA H200"
    assert parsed.largest is not None
    assert parsed.largest.average_gbit_s == 140.40


def test_bidirectional_peak_is_not_a_reading() -> None:
    parsed = parse_perftest(_read(BIDIR))
    assert parsed.bidirectional
    assert parsed.complete
    (row,) = parsed.bw_rows
    assert row.peak_gbit_s is None  # printed 0.00: perftest did not measure it
    assert (row.iterations, row.average_gbit_s) == (560845, 98.02)


def test_write_latency() -> None:
    parsed = parse_perftest(_read(LAT))
    assert parsed.test == WRITE_LAT
    assert parsed.complete
    (row,) = parsed.lat_rows
    assert (row.size_bytes, row.iterations, row.typical_us) == (2, 1000, 1.47)
    assert (row.min_us, row.max_us, row.average_us, row.stdev_us) == (1.42, 1.93, 1.47, 0.0)
    assert (row.p99_us, row.p999_us) == (1.57, 1.93)


def test_a_refused_connection_is_a_failed_run_not_a_figure() -> None:
    parsed = parse_perftest(_read(REFUSED))
    assert not parsed.complete
    assert parsed.bw_rows == ()
    assert parsed.failure == "Couldn't connect to 192.168.125.211:18515"
    end = RdmaEnd("client-host", "mlx5_0")
    result = rdma_pair_result(_read(REFUSED), RdmaEnd("s", "mlx5_0"), end, "ib_write_bw x")
    assert not result.completed
    assert "Couldn't connect" in result.detail
    assert not isinstance(result.bw_average_gbit_s, float)


def test_another_perftest_program_is_refused() -> None:
    with pytest.raises(ParseError, match="Send Latency Test"):
        parse_perftest(_read(SEND_LAT))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello world\n",
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 128\n",
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n",
    ],
)
def test_text_that_is_not_perftest_output_is_refused(text: str) -> None:
    with pytest.raises(ParseError):
        parse_perftest(text)


def test_a_run_cut_short_is_incomplete_never_a_figure() -> None:
    text = _read(A100_CLIENT)
    cut = text[: text.index(" 4096       10000")]  # the output ends mid-sweep
    parsed = parse_perftest(cut)
    assert not parsed.complete
    assert len(parsed.bw_rows) == 11
    result = rdma_pair_result(cut, RdmaEnd("a", "mlx5_0", 0), RdmaEnd("b", "mlx5_0", 0))
    assert not result.completed
    assert "cut short" in result.detail


def test_a_row_cut_mid_line_at_the_end_is_incomplete() -> None:
    text = _read(NDR)
    cut = text[: text.index("392.34")]
    parsed = parse_perftest(cut)
    assert not parsed.complete
    assert parsed.bw_rows == ()


def test_a_short_row_inside_the_table_is_refused() -> None:
    text = _read(A100_CLIENT).replace(
        " 16         10000            0.52               0.52   \t\t   4.029406", " 16 10000"
    )
    with pytest.raises(ParseError, match="fewer than its header"):
        parse_perftest(text)


def test_a_figure_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(ParseError, match="not a number"):
        parse_perftest(_read(NDR).replace("392.34", "nan"))


def test_megabytes_are_converted_to_gigabits() -> None:
    text = _read(NDR).replace("[Gb/sec]", "[MB/sec]").replace("392.34", "46767.34")
    (row,) = parse_perftest(text).bw_rows
    assert row.average_gbit_s == pytest.approx(46767.34 * 8 * 2**20 / 1e9)


def test_pair_result_of_a_sweep_takes_the_largest_size() -> None:
    server, client = RdmaEnd("node-a", "mlx5_0", 0), RdmaEnd("node-b", "mlx5_0", 0)
    result = rdma_pair_result(_read(A100_CLIENT), server, client, "ib_write_bw -a")
    assert result.completed
    assert result.gpudirect
    assert (result.size_bytes, result.bw_average_gbit_s, result.bw_peak_gbit_s) == (
        8388608,
        80.96,
        81.02,
    )
    lat = rdma_pair_result(_read(LAT), server, client, "ib_write_lat")
    assert lat.test == "write_lat"
    assert (lat.lat_typical_us, lat.lat_p999_us) == (1.47, 1.93)


def test_oversized_input_is_refused() -> None:
    with pytest.raises(ParseError, match="over the"):
        parse_perftest("x" * (4 * 1024 * 1024 + 1))


def test_real_mebibyte_output_without_report_gbits() -> None:
    parsed = parse_perftest(
        _read("codeidx-67471084612-rtx4080-ib_write_bw-use_cuda-server-mib.txt")
    )
    assert parsed.unit == "MiB/sec"
    assert parsed.server
    assert parsed.gpu_name == "NVIDIA GeForce RTX 4080"
    (row,) = parsed.bw_rows
    assert row.average_gbit_s == pytest.approx(125.40, abs=0.01)  # 14948.67 MiB/s
    assert row.peak_gbit_s == pytest.approx(14954.91 * 8 * 2**20 / 1e9)


def test_two_runs_in_one_output_are_refused() -> None:
    text = _read(NDR)
    with pytest.raises(ParseError, match="second test title"):
        parse_perftest(text + text)


def test_pair_results_go_through_json_and_back() -> None:
    ends = RdmaEnd("node-a", "mlx5_0", 0), RdmaEnd("node-b", "mlx5_1", 3)
    for name in (A100_CLIENT, BIDIR, LAT, REFUSED):
        result = rdma_pair_result(_read(name), *ends, command="ib_write_bw --use_cuda=3 node-a")
        encoded = json.loads(json.dumps(to_dict(result)))
        assert from_dict(RdmaPairResult, encoded) == result


def test_a_zero_peak_without_the_warning_is_not_a_reading() -> None:
    text = _read(BIDIR).replace("WARNING: BW peak won't be measured in this run.\n", "")
    (row,) = parse_perftest(text).bw_rows
    assert row.peak_gbit_s is None
    assert row.average_gbit_s == 98.02
