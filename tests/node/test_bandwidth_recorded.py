"""A bundle's nvbandwidth and all_reduce_perf outputs become the node's Interconnect.

The outputs are the real ones (``../shared/captures/`` read in place and copied into a
temporary bundle; ``tests/fixtures/nvbandwidth/``). The bundle's GPUs are given by the
facts, with the bus ids the same captures print (the A100 and H20 device lists), or
those of the same host's other tools where nvbandwidth prints none (the H100 sheet's
``p2pBandwidthLatencyTest``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from validator.error_tree import CaptureError
from validator.model import (
    IMPLAUSIBLE,
    AllReduce,
    GpuFacts,
    Interconnect,
    NodeFacts,
    PeerBandwidth,
    Reason,
    Unavailable,
)
from validator.node.capture.capture_replay import (
    ALL_REDUCE,
    NVBANDWIDTH_JSON,
    NVBANDWIDTH_TEXT,
    CaptureSystem,
    write_capture,
)
from validator.node.capture.recorded_bandwidth import recorded_interconnect
from validator.node.system import CommandResult

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nvbandwidth"
A100_ASSERT = (
    "issue-nvbandwidth34-8xa100-sxm4-80gb-550.127.08-v0.7-d2d-read-ce-ASSERT-pattern-fail.txt"
)
A100_SM_V08 = "issue-nvbandwidth42-a100-sxm4-40gb-560.35.05-v0.8-h2d-memcpy-sm-b512-pass.txt"
RTX4090_V02 = "issue-nvbandwidth15-8xrtx4090-545.29.06-v0.2-h2d-d2h-ce-TRUNCATED.txt"
README_OLD = "repo-NVIDIA-nvbandwidth-README-8xgpu-d2d-memcpy-write-ce-276GBps.txt"
H100_V010 = "WEAKPROV-codeidx-62193952648-8xh100-80gb-hbm3-595.71.05-v0.10.0-ce-five-runs.txt"
B300_BIDIR = (
    "WEAKPROV-codeidx-63314792526-7xb300-sxm6-610.57.04-v0.10.0-ce-bidirectional-TRUNCATED.txt"
)
H20_LOCAL = "issue-nvbandwidth48-8xh20-3e-550.127.08-v0.8-device-local-copy-TRUNCATED.txt"
A100_NCCL = "repo-microsoft-superbenchmark-8xa100-sxm4-40gb-all_reduce_perf-8G-old-format-pass.txt"
H200_NCCL = (
    "WEAKPROV-codeidx-19124581599-8xh200-ndv5-nccl2.19.3-all_reduce_perf-8G-single-size-pass.txt"
)
H200_TWO_NODES = (
    "WEAKPROV-codeidx-39419071200-oci-2node-16xh200-nccl2.27.5-all_reduce_perf-1G-16G-pass.txt"
)

A100_BUSES = ("34", "35", "36", "37", "9B", "9C", "9D", "9E")  # the ASSERT capture's list
H20_BUSES = ("18", "38", "49", "59", "9B", "BB", "CA", "DA")  # issue 48's list
H100_BUSES = ("19", "3B", "4C", "5D", "9B", "BB", "CB", "DB")  # the sheet's p2p test


def _facts(buses: tuple[str, ...], order: tuple[int, ...] | None = None) -> NodeFacts:
    """GPUs with these bus ids; ``order`` gives each one's NVML index (default: in turn)."""
    indices = order or tuple(range(len(buses)))
    gpus = tuple(
        GpuFacts(index=index, uuid=f"GPU-{index:08d}", pci_bus_id=f"00000000:{bus}:00.0")
        for index, bus in zip(indices, buses)
    )
    return NodeFacts(hostname="node-01", source="capture", gpus=gpus)


def _bundle(tmp_path: Path, files: dict[str, Path | str]) -> CaptureSystem:
    for name, source in files.items():
        target = tmp_path / name
        if isinstance(source, Path):
            shutil.copyfile(source, target)
        else:
            target.write_text(source, encoding="utf-8")
    return CaptureSystem(tmp_path)


def _recorded(system: CaptureSystem, facts: NodeFacts) -> Interconnect:
    interconnect = recorded_interconnect(system, facts)
    assert interconnect is not None
    return interconnect


def _gpus(interconnect: Interconnect) -> dict[int, tuple[object, object, object]]:
    assert isinstance(interconnect.gpus, tuple)
    return {gpu.index: (gpu.h2d.gb_s, gpu.d2h.gb_s, gpu.hbm.gb_s) for gpu in interconnect.gpus}


def _peers(interconnect: Interconnect) -> dict[tuple[int, int], PeerBandwidth]:
    assert isinstance(interconnect.peers, tuple)
    return {(peer.src, peer.dst): peer for peer in interconnect.peers}


def _reason(value: object) -> Unavailable:
    assert isinstance(value, Unavailable), value
    return value


# ---------------------------------------------------------------- per GPU


def test_h2d_and_d2h_per_gpu_from_the_ce_testcases(tmp_path: Path, captures_dir: Path) -> None:
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: captures_dir / "nvbandwidth" / RTX4090_V02})
    interconnect = _recorded(system, _facts(tuple(f"{b:02X}" for b in range(1, 9))))
    figures = _gpus(interconnect)
    assert figures[2][0] == 23.90
    assert figures[5][0] == 26.38
    assert figures[2][1] == 26.25
    assert figures[6][1] == 27.11
    assert _reason(figures[0][2]).reason is Reason.NOT_MEASURED  # no device_local_copy
    # v0.2 prints no bus ids: matched by order, and the source says so.
    assert interconnect.source == (
        "nvbandwidth.txt (nvbandwidth.txt: CUDA devices matched to GPUs by order "
        "(nvbandwidth printed no bus ids))"
    )
    assert not interconnect.simulated
    assert _reason(interconnect.peers).detail == "nvbandwidth.txt has no device_to_device testcase"


def test_healthy_h100_figures(tmp_path: Path) -> None:
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: FIXTURES / H100_V010})
    interconnect = _recorded(system, _facts(H100_BUSES))
    figures = _gpus(interconnect)
    assert [figures[i][0] for i in range(8)] == [
        55.37,
        55.36,
        55.37,
        55.36,
        55.36,
        55.36,
        55.36,
        55.33,
    ]
    assert figures[7][1] == 55.20
    peers = _peers(interconnect)
    assert len(peers) == 56
    assert peers[(0, 1)].unidirectional.gb_s == 397.44  # write CE preferred to read
    assert peers[(2, 6)].unidirectional.gb_s == 397.52
    assert all(peer.access is True for peer in peers.values())


def test_hbm_is_bytes_read_plus_written(tmp_path: Path) -> None:
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: FIXTURES / H20_LOCAL})
    figures = _gpus(_recorded(system, _facts(H20_BUSES)))
    # nvbandwidth's 1116.30 GB/s copied is 2232.60 GB/s of HBM traffic.
    assert figures[0][2] == pytest.approx(2232.60)
    assert figures[6][2] == pytest.approx(2234.34)


def test_gpus_are_matched_by_the_bus_ids_nvbandwidth_prints(tmp_path: Path) -> None:
    # NVML numbers the boards otherwise than CUDA here: index 0 is the board at 9B.
    order = (4, 5, 6, 7, 0, 1, 2, 3)
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: FIXTURES / H20_LOCAL})
    interconnect = _recorded(system, _facts(H20_BUSES, order))
    figures = _gpus(interconnect)
    # CUDA device 6 (bus CA, 1117.17 GB/s) is NVML GPU 2.
    assert figures[2][2] == pytest.approx(2234.34)
    assert figures[4][2] == pytest.approx(2232.60)
    assert "by order" not in interconnect.source


def test_another_hosts_output_matches_none_of_the_bundles_gpus(tmp_path: Path) -> None:
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: FIXTURES / H20_LOCAL})
    interconnect = _recorded(system, _facts(A100_BUSES))
    why = _reason(interconnect.gpus)
    assert why.reason is Reason.ERROR
    assert "are not the bundle's GPUs' (another host's output?)" in why.detail


def test_sm_testcase_stands_in_for_a_missing_ce_one_and_says_so(
    tmp_path: Path, captures_dir: Path
) -> None:
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: captures_dir / "nvbandwidth" / A100_SM_V08})
    interconnect = _recorded(system, _facts(("99",)))
    assert _gpus(interconnect)[0][0] == 25.13
    assert "h2d from host_to_device_memcpy_sm (no host_to_device_memcpy_ce in nvbandwidth.txt)" in (
        interconnect.source
    )
    assert (
        _reason(_gpus(interconnect)[0][1]).detail
        == "nvbandwidth.txt has no device_to_host_memcpy_ce"
    )


def test_a_gpu_nvbandwidth_did_not_see_is_not_measured(tmp_path: Path, captures_dir: Path) -> None:
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: captures_dir / "nvbandwidth" / A100_SM_V08})
    interconnect = _recorded(system, _facts(("99", "9A")))
    why = _reason(_gpus(interconnect)[1][0])
    assert why.reason is Reason.NOT_MEASURED
    assert "did not see this GPU" in why.detail


# ---------------------------------------------------------------- pairs


def test_assert_in_the_peer_testcase_fails_every_pair_never_zero(
    tmp_path: Path, captures_dir: Path
) -> None:
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: captures_dir / "nvbandwidth" / A100_ASSERT})
    interconnect = _recorded(system, _facts(A100_BUSES))
    peers = _peers(interconnect)
    assert len(peers) == 56
    for peer in peers.values():
        why = _reason(peer.unidirectional.gb_s)
        assert why.reason is Reason.ERROR
        assert "device_to_device_memcpy_read_ce failed" in why.detail
        assert "ASSERT in expression h_errorFlag == 0" in why.detail
        assert not isinstance(peer.access, bool)  # nothing says either way


def test_old_zero_diagonal_is_self_and_measured_pairs_had_access(
    tmp_path: Path, captures_dir: Path
) -> None:
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: captures_dir / "nvbandwidth" / README_OLD})
    interconnect = _recorded(system, _facts(A100_BUSES))
    peers = _peers(interconnect)
    assert (0, 0) not in peers
    assert peers[(6, 0)].unidirectional.gb_s == 274.89
    assert peers[(4, 3)].unidirectional.gb_s == 276.76
    assert peers[(0, 1)].access is True
    assert _reason(peers[(0, 1)].bidirectional.gb_s).reason is Reason.NOT_MEASURED


def test_na_pair_in_a_testcase_that_ran_had_no_peer_access(tmp_path: Path) -> None:
    # The B300 output with GPU 2 -> 5 left N/A, as nvbandwidth leaves a pair whose
    # peer access it cannot enable.
    text = (FIXTURES / B300_BIDIR).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    lines = [
        line.replace("766.07    764.16", "766.07       N/A")
        if line.startswith(" 2    766.14")
        else line
        for line in lines
    ]
    only_read = "".join(lines).split("Running device_to_device_memcpy_write_ce.")[0]
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: only_read})
    peers = _peers(_recorded(system, _facts(tuple(f"{b:02X}" for b in range(1, 8)))))
    assert peers[(2, 5)].access is False
    assert peers[(5, 2)].access is True
    # A read matrix's row is the destination: the 5 -> 2 copy is row 2, column 5.
    assert _reason(peers[(5, 2)].unidirectional.gb_s).reason is Reason.NOT_MEASURED
    # ... and the 0 -> 1 copy row 1, column 0 (765.86), not row 0, column 1 (764.71).
    assert peers[(0, 1)].unidirectional.gb_s == 765.86


def test_bidirectional_is_the_source_to_destination_copy_under_load(tmp_path: Path) -> None:
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: FIXTURES / B300_BIDIR})
    peers = _peers(_recorded(system, _facts(tuple(f"{b:02X}" for b in range(1, 8)))))
    # write2's cell (0, 1) is the 0 -> 1 copy while 1 -> 0 runs; the total is not it.
    assert peers[(0, 1)].bidirectional.gb_s == 770.05
    assert peers[(4, 3)].bidirectional.gb_s == 769.36
    assert peers[(0, 1)].unidirectional.gb_s == 774.50


def test_waived_peer_testcase_means_no_pair_had_access(tmp_path: Path) -> None:
    text = (
        '{"nvbandwidth": {"version": "v0.8", "GPU Device list": ['
        '"0: NVIDIA H20-3e (00000000:18:00): (node-01)", '
        '"1: NVIDIA H20-3e (00000000:38:00): (node-01)"], "testcases": ['
        '{"name": "device_to_device_memcpy_write_ce", "status": "Waived"}]}}'
    )
    system = _bundle(tmp_path, {NVBANDWIDTH_JSON: text})
    peers = _peers(_recorded(system, _facts(H20_BUSES[:2])))
    assert peers[(0, 1)].access is False
    assert _reason(peers[(0, 1)].unidirectional.gb_s).reason is Reason.NOT_SUPPORTED


def test_json_is_preferred_to_text(tmp_path: Path, captures_dir: Path) -> None:
    text = (
        '{"nvbandwidth": {"version": "v0.8", "GPU Device list": '
        '["0: NVIDIA A100-SXM4-40GB (00000000:99:00): (node-01)"], "testcases": ['
        '{"name": "host_to_device_memcpy_ce", "status": "Passed", '
        '"bandwidth_matrix": [["24.5"]], "sum": 24.5}]}}'
    )
    system = _bundle(
        tmp_path,
        {NVBANDWIDTH_JSON: text, NVBANDWIDTH_TEXT: captures_dir / "nvbandwidth" / A100_SM_V08},
    )
    interconnect = _recorded(system, _facts(("99",)))
    assert _gpus(interconnect)[0][0] == 24.5
    assert interconnect.source == "nvbandwidth.json"


def test_an_implausible_figure_is_not_measured(tmp_path: Path, captures_dir: Path) -> None:
    text = (captures_dir / "nvbandwidth" / A100_SM_V08).read_text(encoding="utf-8")
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: text.replace("25.13", "2513000.00", 1)})
    why = _reason(_gpus(_recorded(system, _facts(("99",))))[0][0])
    assert why.reason is Reason.ERROR
    assert why.detail.startswith(IMPLAUSIBLE)


# ---------------------------------------------------------------- all-reduce


def test_one_node_h200_all_reduce(tmp_path: Path, captures_dir: Path) -> None:
    system = _bundle(tmp_path, {ALL_REDUCE: captures_dir / "nccl-tests" / H200_NCCL})
    interconnect = _recorded(system, _facts(H100_BUSES))
    all_reduce = interconnect.all_reduce
    assert not isinstance(all_reduce, Unavailable)
    assert all_reduce.ranks == 8
    assert all_reduce.source == "all_reduce_perf.txt"
    assert all_reduce.nccl_version == "2.19.3+cuda12.2"
    assert isinstance(all_reduce.points, tuple)
    (point,) = all_reduce.points
    assert (point.size_bytes, point.busbw_gb_s, point.busbw_in_place_gb_s, point.algbw_gb_s) == (
        8589934592,
        476.72,
        478.11,
        272.41,
    )
    assert point.wrong == 0
    # Every rank printed bus 0x00: matched by device number, and the source says so.
    assert all_reduce.gpu_indices == tuple(range(8))
    assert "ranks matched to GPUs by CUDA device number" in interconnect.source
    assert _reason(interconnect.gpus).detail.startswith("the bundle has no nvbandwidth output")


def test_old_format_all_reduce_drops_zero_byte_rows(tmp_path: Path, captures_dir: Path) -> None:
    system = _bundle(tmp_path, {ALL_REDUCE: captures_dir / "nccl-tests" / A100_NCCL})
    all_reduce = _recorded(system, _facts(A100_BUSES)).all_reduce
    assert not isinstance(all_reduce, Unavailable)
    assert isinstance(all_reduce.points, tuple)
    assert len(all_reduce.points) == 32
    assert all_reduce.points[-1].busbw_gb_s == 235.26
    assert all_reduce.points[-1].busbw_in_place_gb_s == 235.03
    assert all(point.wrong is None for point in all_reduce.points)  # validation 0
    assert _reason(all_reduce.nccl_version).reason is Reason.NOT_MEASURED


def test_multi_node_run_is_not_a_one_node_figure(tmp_path: Path, captures_dir: Path) -> None:
    system = _bundle(tmp_path, {ALL_REDUCE: captures_dir / "nccl-tests" / H200_TWO_NODES})
    why = _reason(_recorded(system, _facts(H100_BUSES)).all_reduce)
    assert why == Unavailable(
        Reason.NOT_MEASURED, "multi-node run (16 ranks on 2 hosts): not a one-node figure"
    )


def _all_reduce(interconnect: Interconnect) -> AllReduce:
    all_reduce = interconnect.all_reduce
    assert isinstance(all_reduce, AllReduce), all_reduce
    return all_reduce


A100_LAST_ROW = "134.44  235.26    N/A    63959  134.30  235.03    N/A"


def test_old_format_out_of_bounds_failed_is_wrong_data_with_its_figures(
    tmp_path: Path, captures_dir: Path
) -> None:
    # Before 2.13 nccl-tests counts the results out of bounds only in its footer: the
    # run's figures stay, and the count is the all-reduce's wrong (the judge fails it).
    text = (captures_dir / "nccl-tests" / A100_NCCL).read_text(encoding="utf-8")
    system = _bundle(tmp_path, {ALL_REDUCE: text.replace("0 OK", "2 FAILED")})
    all_reduce = _all_reduce(_recorded(system, _facts(A100_BUSES)))
    assert all_reduce.wrong == 2
    assert isinstance(all_reduce.points, tuple)
    assert len(all_reduce.points) == 32
    assert all_reduce.points[-1].busbw_gb_s == 235.26
    assert all(point.wrong is None for point in all_reduce.points)  # counted per run only


def test_old_format_error_column_above_tolerance_is_wrong_data(
    tmp_path: Path, captures_dir: Path
) -> None:
    # A validated old-format run cut before its footer: its error column still says.
    text = (captures_dir / "nccl-tests" / A100_NCCL).read_text(encoding="utf-8")
    bad = A100_LAST_ROW.replace("235.26    N/A", "235.26  4e-01").replace("N/A", "2e-07")
    cut = text.replace(A100_LAST_ROW, bad)
    cut = cut[: cut.index("# Out of bounds")]
    all_reduce = _all_reduce(_recorded(_bundle(tmp_path, {ALL_REDUCE: cut}), _facts(A100_BUSES)))
    assert all_reduce.wrong == 1  # the out-of-place half; 2e-07 is within 1e-5
    assert isinstance(all_reduce.points, tuple)
    assert len(all_reduce.points) == 32


def test_old_format_errors_within_tolerance_are_no_wrong_data(
    tmp_path: Path, captures_dir: Path
) -> None:
    text = (captures_dir / "nccl-tests" / A100_NCCL).read_text(encoding="utf-8")
    fine = text.replace(A100_LAST_ROW, A100_LAST_ROW.replace("N/A", "2e-07"))
    all_reduce = _all_reduce(_recorded(_bundle(tmp_path, {ALL_REDUCE: fine}), _facts(A100_BUSES)))
    assert all_reduce.wrong == 0


def test_an_unvalidated_old_format_run_counts_nothing(tmp_path: Path, captures_dir: Path) -> None:
    system = _bundle(tmp_path, {ALL_REDUCE: captures_dir / "nccl-tests" / A100_NCCL})
    assert _all_reduce(_recorded(system, _facts(A100_BUSES))).wrong is None  # validation 0


def test_new_format_wrong_counts_stay_on_their_points(tmp_path: Path, captures_dir: Path) -> None:
    text = (captures_dir / "nccl-tests" / H200_NCCL).read_text(encoding="utf-8")
    text = text.replace("478.11      0", "478.11      3").replace("0 OK", "3 FAILED")
    all_reduce = _all_reduce(_recorded(_bundle(tmp_path, {ALL_REDUCE: text}), _facts(H100_BUSES)))
    assert isinstance(all_reduce.points, tuple)
    assert [point.wrong for point in all_reduce.points] == [3]
    assert all_reduce.wrong is None  # the rows account for the footer


def test_a_footer_the_rows_do_not_account_for_is_wrong_data(
    tmp_path: Path, captures_dir: Path
) -> None:
    text = (captures_dir / "nccl-tests" / H200_NCCL).read_text(encoding="utf-8")
    system = _bundle(tmp_path, {ALL_REDUCE: text.replace("0 OK", "5 FAILED")})
    all_reduce = _all_reduce(_recorded(system, _facts(H100_BUSES)))
    assert all_reduce.wrong == 5
    assert isinstance(all_reduce.points, tuple)
    assert [point.wrong for point in all_reduce.points] == [0]


@pytest.mark.parametrize("spelling", ["[0000:{bus}:00]", "[0x{bus}]"])
def test_ranks_are_matched_to_gpus_by_their_bus_ids(
    tmp_path: Path, captures_dir: Path, spelling: str
) -> None:
    # nccl-tests 2.19.6 prints domain:bus:device, older builds the bus alone; NVML the
    # long form: the same boards either way. NVML numbers them in reverse here.
    text = (captures_dir / "nccl-tests" / H200_NCCL).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if "Rank  0" in line)
    for rank in range(8):
        bus = spelling.format(bus=H100_BUSES[rank].lower())
        lines[start + rank] = lines[start + rank].replace("[0x00]", bus)
    system = _bundle(tmp_path, {ALL_REDUCE: "".join(lines)})
    facts = _facts(H100_BUSES, order=tuple(range(7, -1, -1)))
    interconnect = _recorded(system, facts)
    assert _all_reduce(interconnect).gpu_indices == tuple(range(7, -1, -1))
    assert "matched to GPUs by CUDA device number" not in interconnect.source


def test_both_files_name_the_source(tmp_path: Path, captures_dir: Path) -> None:
    system = _bundle(
        tmp_path,
        {
            NVBANDWIDTH_TEXT: FIXTURES / H20_LOCAL,
            ALL_REDUCE: captures_dir / "nccl-tests" / H200_TWO_NODES,
        },
    )
    assert _recorded(system, _facts(H20_BUSES)).source == "nvbandwidth.txt, all_reduce_perf.txt"


# ---------------------------------------------------------------- the bundle


def test_neither_file_is_no_interconnect(tmp_path: Path) -> None:
    system = _bundle(tmp_path, {"hostname.txt": "node-01\n"})
    assert recorded_interconnect(system, _facts(H20_BUSES)) is None


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        (NVBANDWIDTH_TEXT, "it crashed\n", "not nvbandwidth output"),
        (NVBANDWIDTH_JSON, "[" * 50_000, "nvbandwidth"),
        (ALL_REDUCE, "Segmentation fault\n", "not nccl-tests output"),
    ],
)
def test_a_file_that_does_not_parse_is_one_line_naming_it(
    tmp_path: Path, name: str, text: str, words: str
) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(CaptureError, match=words) as raised:
        CaptureSystem(tmp_path)
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / name}: ")
    assert message.endswith("; capture it again or remove the file")
    assert "\n" not in message


def test_a_device_the_bundle_lacks_is_left_out_and_named(tmp_path: Path) -> None:
    # The bundle's nvidia-smi lists seven of the eight boards nvbandwidth saw.
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: FIXTURES / H20_LOCAL})
    interconnect = _recorded(system, _facts(H20_BUSES[:7]))
    assert sorted(_gpus(interconnect)) == list(range(7))
    assert "CUDA device 7 (00000000:DA:00.0) is none of the bundle's GPUs" in interconnect.source


def test_gpus_without_bus_ids_are_matched_by_order_and_it_says_why(tmp_path: Path) -> None:
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: FIXTURES / H20_LOCAL})
    facts = NodeFacts(
        hostname="node-01", source="capture", gpus=tuple(GpuFacts(index=i) for i in range(8))
    )
    interconnect = _recorded(system, facts)
    assert _gpus(interconnect)[6][2] == pytest.approx(2234.34)
    assert "matched to GPUs by order (the bundle gives no bus ids)" in interconnect.source


# ---------------------------------------------------------------- gpuready capture


class _HostWithNvbandwidth:
    """A recorded host whose PATH has nvbandwidth, answering as ``result`` says."""

    def __init__(self, base: CaptureSystem, result: CommandResult | None) -> None:
        self.base = base
        self.result = result
        self.calls: list[tuple[tuple[str, ...], float]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.base, name)

    def which(self, name: str) -> str | None:
        if name == "nvbandwidth":
            return "/opt/nvbandwidth/nvbandwidth" if self.result is not None else None
        return self.base.which(name)

    def run(self, argv: tuple[str, ...], timeout_s: float = 30.0) -> CommandResult:
        if argv[0].endswith("nvbandwidth"):
            assert self.result is not None
            self.calls.append((tuple(argv), timeout_s))
            return self.result
        return self.base.run(argv, timeout_s)


# The A100 capture's failure as nvbandwidth -j prints it before exiting 1.
A100_ASSERT_JSON = (
    " Invalid value when checking the pattern at 0x70a640000000\n"
    '{"nvbandwidth": {"version": "v0.8", "GPU Device list": ['
    + ", ".join(
        f'"{i}: NVIDIA A100-SXM4-80GB (00000000:{b.lower()}:00): (node-01)"'
        for i, b in enumerate(A100_BUSES)
    )
    + '], "testcases": [{"name": "device_to_device_memcpy_read_ce", "status": "Running"}],'
    ' "error": "ASSERT in expression h_errorFlag == 0 in void memcmpPatternHelper(...)() :'
    ' memcpy.cpp:165\\n"}}\n'
)


def _host(tmp_path: Path, result: CommandResult | None) -> _HostWithNvbandwidth:
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    (recorded / "hostname.txt").write_text("node-01\n", encoding="utf-8")
    return _HostWithNvbandwidth(CaptureSystem(recorded), result)


def test_capture_records_nvbandwidth_json_even_when_a_testcase_failed(tmp_path: Path) -> None:
    host = _host(tmp_path, CommandResult(1, A100_ASSERT_JSON))
    outcome = write_capture(tmp_path / "bundle", host, interconnect=True)
    assert outcome[NVBANDWIDTH_JSON] == "written"
    assert host.calls == [(("/opt/nvbandwidth/nvbandwidth", "-j"), 1800.0)]
    bundle = CaptureSystem(tmp_path / "bundle")
    peers = _peers(_recorded(bundle, _facts(A100_BUSES)))
    assert "ASSERT in expression" in _reason(peers[(0, 1)].unidirectional.gb_s).detail


@pytest.mark.parametrize(
    ("result", "words"),
    [
        (None, "skipped: nvbandwidth not found on PATH"),
        (CommandResult(124, ""), "skipped: nvbandwidth -j ran past 1800 s"),
        (
            CommandResult(1, "", "nvbandwidth: error while loading shared libraries"),
            "skipped: nvbandwidth -j exited 1 without readable JSON",
        ),
    ],
)
def test_capture_without_a_usable_nvbandwidth_says_why(
    tmp_path: Path, result: CommandResult | None, words: str
) -> None:
    outcome = write_capture(tmp_path / "bundle", _host(tmp_path, result), interconnect=True)
    assert outcome[NVBANDWIDTH_JSON].startswith(words)
    assert not (tmp_path / "bundle" / NVBANDWIDTH_JSON).exists()


def test_capture_runs_no_nvbandwidth_unless_asked(tmp_path: Path) -> None:
    host = _host(tmp_path, CommandResult(0, A100_ASSERT_JSON))
    outcome = write_capture(tmp_path / "bundle", host)
    assert host.calls == []
    assert NVBANDWIDTH_JSON not in outcome


def test_recapturing_a_bundle_records_no_nvbandwidth(tmp_path: Path) -> None:
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    (recorded / "hostname.txt").write_text("node-01\n", encoding="utf-8")
    outcome = write_capture(tmp_path / "bundle", CaptureSystem(recorded), interconnect=True)
    assert outcome[NVBANDWIDTH_JSON] == "skipped: nvbandwidth not in the capture"


def test_capture_command_asks_for_nvbandwidth_and_says_why_it_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from validator.cli.main import main

    bundle = tmp_path / "bundle"
    code = main(["capture", "--simulate", "healthy-8x-h100-sxm", "--interconnect", str(bundle)])
    assert code == 0
    assert "nvbandwidth.json           skipped: nvbandwidth not found on PATH" in (
        capsys.readouterr().out
    )
    assert not (bundle / "nvbandwidth.json").exists()


def test_capture_command_leaves_nvbandwidth_out_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from validator.cli.main import main

    assert main(["capture", "--simulate", "healthy-8x-h100-sxm", str(tmp_path / "b")]) == 0
    assert "nvbandwidth" not in capsys.readouterr().out


GB200_MULTINODE = (
    Path(__file__).parent.parent
    / "fixtures"
    / "nvbandwidth"
    / "cloud-native-docs-dra-cds-2x4xgb200-570.124.06-v0.7-multinode-d2d-read-ce.txt"
)


def test_a_multinode_run_is_said_to_be_one_and_is_no_figure_of_the_node(tmp_path: Path) -> None:
    # A real 2-host GB200 run beside one of its 4-GPU trays: its figures span both hosts.
    system = _bundle(tmp_path, {NVBANDWIDTH_TEXT: GB200_MULTINODE})
    interconnect = _recorded(system, _facts(("01", "02", "03", "04")))
    for figures in (interconnect.gpus, interconnect.peers):
        why = _reason(figures)
        assert why.reason is Reason.NOT_MEASURED
        assert "multi-node run (8 GPUs on 2 hosts)" in why.detail
        assert "not a one-node figure" in why.detail
        assert "device_to_device testcase" not in why.detail
    assert "multi-node" in interconnect.source
    assert system.conflicts() == ()


DCGM_ONE_GPU_JSON = (
    Path(__file__).parent.parent
    / "fixtures"
    / "nvbandwidth"
    / "repo-NVIDIA-DCGM-NVBandwidthTestsInputs-1xgpu-565.02-v0.5-all-testcases.json"
)


def test_a_real_one_gpu_json_beside_an_eight_gpu_node_is_judged_never_a_crash(
    tmp_path: Path, captures_dir: Path
) -> None:
    # It exited 70 (IndexError in the judge's unmeasured pairs) before.
    from tests.collecting import collect_capture
    from validator.judge import Policy, judge_node

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copyfile(
        captures_dir / "nvidia-smi-q/gpud-8x-h100-535.161.08.txt", bundle / "nvidia-smi-q.txt"
    )
    shutil.copyfile(DCGM_ONE_GPU_JSON, bundle / "nvbandwidth.json")
    facts = collect_capture(bundle)
    assert len(facts.gpus) == 8
    result = judge_node(facts, Policy())
    interconnect = [f for f in result.findings if f.check.startswith("interconnect.")]
    assert interconnect, "the recorded run is judged"
    h2d = [f for f in interconnect if f.check == "interconnect.h2d" and f.gpu_index == 0]
    assert h2d
    assert "12.4" in h2d[0].message
