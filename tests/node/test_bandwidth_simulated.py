"""The simulated interconnect: a scenario's ``interconnect`` section, checked and measured."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.collecting import collect_simulated
from validator.error_tree import ScenarioError
from validator.model import (
    AllReduce,
    GpuCopyBandwidth,
    Interconnect,
    NodeFacts,
    PeerBandwidth,
    Reason,
    Unavailable,
)
from validator.node.bandwidth.bandwidth_config import GIB, MIB, InterconnectConfig
from validator.node.sim.scenario import Scenario, load_scenario
from validator.node.sim.simulated_bandwidth import (
    NO_SECTION,
    busbw_at,
    check_interconnect_section,
    simulated_interconnect,
)

CAPTURES = Path(__file__).resolve().parents[3] / "shared" / "captures"
A100_SWEEP = (
    CAPTURES / "nccl-tests/repo-microsoft-superbenchmark-8xa100-sxm4-40gb-"
    "all_reduce_perf-8G-old-format-pass.txt"
)
CONFIG = InterconnectConfig()
HEALTHY = "healthy-8x-h100-sxm"


# ---------------------------------------------------------------- helpers


def _facts(scenario: str | Scenario) -> NodeFacts:
    name = scenario if isinstance(scenario, str) else str(scenario.path)
    return collect_simulated(name)


def _measure(name: str, config: InterconnectConfig = CONFIG) -> Interconnect:
    scenario = load_scenario(name)
    return simulated_interconnect(_facts(name), scenario, config)


def _file(tmp_path: Path, section: dict[str, Any] | None, **extra: Any) -> str:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({"extends": HEALTHY, "interconnect": section, **extra}))
    return str(path)


def _gpus(result: Interconnect) -> dict[int, GpuCopyBandwidth]:
    assert not isinstance(result.gpus, Unavailable)
    return {gpu.index: gpu for gpu in result.gpus}


def _peers(result: Interconnect) -> dict[tuple[int, int], PeerBandwidth]:
    assert not isinstance(result.peers, Unavailable)
    return {(peer.src, peer.dst): peer for peer in result.peers}


def _gb_s(value: object) -> float:
    assert isinstance(value, float), value
    return value


def _all_reduce(result: Interconnect) -> AllReduce:
    assert isinstance(result.all_reduce, AllReduce), result.all_reduce
    return result.all_reduce


def _median_of_others(values: dict[int, float], skip: int) -> float:
    return statistics.median(value for index, value in values.items() if index != skip)


# ---------------------------------------------------------------- the section's checks


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        (5, "'interconnect' must be an object of interconnect figures, got 5 (int)"),
        (
            {"h2d_gbs": 55},
            "unknown key 'interconnect.h2d_gbs' (did you mean 'h2d_gb_s'?); valid keys: source,",
        ),
        (
            {"h2d_gb_s": "fast"},
            "'interconnect.h2d_gb_s' must be GB/s above 0 up to 100000, got 'fast' (str)",
        ),
        ({"hbm_gb_s": 0}, "'interconnect.hbm_gb_s' must be GB/s above 0 up to 100000, got 0"),
        ({"p2p_gb_s": None}, "lacks the key 'interconnect.p2p_gb_s'"),
        (
            {"all_reduce_busbw_gb_s": None},
            "lacks the key 'interconnect.all_reduce_busbw_gb_s' (or 'interconnect."
            "all_reduce_curve', or 'interconnect.all_reduce_error' for an all-reduce that fails)",
        ),
        (
            {"all_reduce_curve": [[1 * MIB, 25.0], [8 * GIB, 235.0]]},
            "'interconnect.all_reduce_busbw_gb_s' and 'interconnect.all_reduce_curve' are both "
            "given: keep one (null drops an inherited one)",
        ),
        (
            {"all_reduce_busbw_gb_s": None, "all_reduce_curve": [[8 * GIB, 235], [MIB, 25]]},
            "'interconnect.all_reduce_curve' must be a list of 2-64 [size_bytes, busbw_gb_s] "
            "pairs, sizes rising",
        ),
        ({"jitter": 0.5}, "'interconnect.jitter' must be a share from 0 up to 0.2, got 0.5"),
        ({"seed": "x"}, "'interconnect.seed' must be a whole number from 0, got 'x' (str)"),
        ({"nccl_version": "new"}, "'interconnect.nccl_version' must be a version like '2.21.5'"),
        ({"source": ""}, "'interconnect.source' must be a non-empty text of at most 500"),
        (
            {"all_reduce_wrong": -1},
            "'interconnect.all_reduce_wrong' must be a count from 0 to 1e15, got -1 (int)",
        ),
        (
            {"busy_gpus": [8]},
            "'interconnect.busy_gpus[0]' must be a GPU index 0-7 (the scenario's GPUs), got 8",
        ),
        (
            {"gpu_overrides": {"9": {"h2d_gb_s": 1.0}}},
            "'interconnect.gpu_overrides.9' must be a GPU index 0-7 (the scenario's GPUs)",
        ),
        (
            {"gpu_overrides": {"2": {"p2p_gb_s": 1.0}}},
            "unknown key 'interconnect.gpu_overrides.2.p2p_gb_s' (did you mean 'h2d_gb_s'?); "
            "valid keys: h2d_gb_s, d2h_gb_s, hbm_gb_s, numa_node, error",
        ),
        (
            {"gpu_overrides": {"2": {"numa_node": -1}}},
            "'interconnect.gpu_overrides.2.numa_node' must be a NUMA node number 0-1023, got -1",
        ),
        (
            {"gpu_overrides": {"2": 27.6}},
            "'interconnect.gpu_overrides.2' must be an object, got 27.6 (float)",
        ),
        (
            {"link_overrides": {"2_5": {}}},
            "'interconnect.link_overrides.2_5' is not a pair: write 'A-B' (both directions), "
            "'A->B' (one) or 'A-*' (GPU A and every peer)",
        ),
        (
            {"link_overrides": {"2-2": {}}},
            "'interconnect.link_overrides.2-2' names GPU 2 twice: a pair joins two GPUs",
        ),
        (
            {"link_overrides": {"2->9": {}}},
            "'interconnect.link_overrides[\"2->9\"]' names GPU 9: give a GPU index 0-7",
        ),
        (
            {"link_overrides": {"6-*": {"p2p_gb_s": -1}}},
            "'interconnect.link_overrides[\"6-*\"].p2p_gb_s' must be GB/s above 0 up to 100000",
        ),
        (
            {"link_overrides": {"6-*": {"hbm_gb_s": 1.0}}},
            "unknown key 'interconnect.link_overrides[\"6-*\"].hbm_gb_s'",
        ),
        (
            {"peer_access_off": ["1-3", "1+3"]},
            "'interconnect.peer_access_off[1]' is not a pair, got '1+3': write 'A-B'",
        ),
        ({"peer_access_off": "1-3"}, "'interconnect.peer_access_off' must be a list of pairs"),
        # isdigit() takes '²', which int() refuses: an ASCII GPU number or a one-line error.
        (
            {"gpu_overrides": {"²": {"h2d_gb_s": 1.0}}},
            r"""'interconnect.gpu_overrides["\\u00b2"]' must be a GPU index 0-7 (the scenario's""",
        ),
        (
            {"gpu_overrides": {"٣": {"h2d_gb_s": 1.0}}},
            r"""'interconnect.gpu_overrides["\\u0663"]' must be a GPU index 0-7 (the scenario's""",
        ),
        # "02" would be accepted and then never looked up (the GPU is "2"): refused.
        (
            {"gpu_overrides": {"02": {"h2d_gb_s": 1.0}}},
            "'interconnect.gpu_overrides.02' must be a GPU index written as it is numbered: "
            "write 2, not 02",
        ),
        (
            {"link_overrides": {"02-5": {"p2p_gb_s": 1.0}}},
            "'interconnect.link_overrides.02-5' must name GPUs as they are numbered: "
            "write '2-5', not '02-5'",
        ),
        (
            {"link_overrides": {"6->00": {}}},
            "must name GPUs as they are numbered: write '6->0', not '6->00'",
        ),
        (
            {"peer_access_off": ["03-*"]},
            "'interconnect.peer_access_off[0]' must name GPUs as they are numbered: "
            "write '3-*', not '03-*'",
        ),
        (
            {"peer_access_off": ["٣-5"]},
            "'interconnect.peer_access_off[0]' is not a pair, got '٣-5': write 'A-B'",
        ),
    ],
)
def test_each_bad_key_or_value_is_one_line_naming_the_file_and_key(
    tmp_path: Path, section: object, problem: str
) -> None:
    path = _file(tmp_path, section)  # type: ignore[arg-type]
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"scenario file {path}: ")
    assert problem in message
    assert message.endswith("; fix the scenario")


def test_a_section_standing_alone_must_give_every_figure() -> None:
    problems = check_interconnect_section({}, "interconnect", 8)
    assert problems == [
        "lacks the key 'interconnect.h2d_gb_s'",
        "lacks the key 'interconnect.d2h_gb_s'",
        "lacks the key 'interconnect.hbm_gb_s'",
        "lacks the key 'interconnect.p2p_gb_s'",
        "lacks the key 'interconnect.p2p_bidirectional_gb_s'",
        "lacks the key 'interconnect.all_reduce_busbw_gb_s' (or 'interconnect.all_reduce_curve',"
        " or 'interconnect.all_reduce_error' for an all-reduce that fails)",
    ]


def test_every_problem_is_reported_not_only_the_first() -> None:
    section = {**load_scenario(HEALTHY).data["interconnect"], "jitter": 1, "seed": -1}
    problems = check_interconnect_section(section, "interconnect", 8)
    assert [problem.split("'")[1] for problem in problems] == [
        "interconnect.jitter",
        "interconnect.seed",
    ]


def test_without_a_gpu_count_indexes_are_bounded_by_the_largest_node() -> None:
    section = {**load_scenario(HEALTHY).data["interconnect"], "busy_gpus": [12]}
    assert check_interconnect_section(section, "interconnect") == []
    assert check_interconnect_section(section, "interconnect", 8) == [
        "'interconnect.busy_gpus[0]' must be a GPU index 0-7 (the scenario's GPUs), got 12 (int)"
    ]
    section["busy_gpus"] = [64]
    assert check_interconnect_section(section, "interconnect") == [
        "'interconnect.busy_gpus[0]' must be a GPU index 0-63, got 64 (int)"
    ]


def test_an_all_reduce_that_fails_needs_no_figure() -> None:
    section = {**load_scenario(HEALTHY).data["interconnect"], "all_reduce_error": "x"}
    del section["all_reduce_busbw_gb_s"]
    assert check_interconnect_section(section, "interconnect", 8) == []


# ---------------------------------------------------------------- healthy figures


def test_healthy_h100_gives_its_recorded_figures_on_every_gpu_and_pair() -> None:
    result = _measure(HEALTHY)
    assert (result.source, result.simulated, result.error) == ("simulate", True, None)
    assert result.started_at == "2026-01-01T12:00:00+00:00"
    gpus = _gpus(result)
    assert sorted(gpus) == list(range(8))
    for gpu in gpus.values():
        # nvbandwidth v0.10 on 8x H100: H2D 55.33-55.37, D2H 55.18-55.26 GB/s
        assert _gb_s(gpu.h2d.gb_s) == pytest.approx(55.36, rel=0.005)
        assert _gb_s(gpu.d2h.gb_s) == pytest.approx(55.21, rel=0.005)
        assert _gb_s(gpu.hbm.gb_s) == pytest.approx(2880.0, rel=0.005)
        assert gpu.h2d.size_bytes == CONFIG.copy_size_bytes
        assert len(gpu.h2d.repeats_gb_s) == CONFIG.repeats
        assert gpu.numa_node == (0 if gpu.index < 4 else 1)
    facts = _facts(HEALTHY)
    assert [gpus[gpu.index].uuid for gpu in facts.gpus] == [gpu.uuid for gpu in facts.gpus]
    assert [gpus[g.index].pci_bus_id for g in facts.gpus] == [g.pci_bus_id for g in facts.gpus]
    peers = _peers(result)
    assert len(peers) == 56
    for peer in peers.values():
        assert peer.access is True
        assert _gb_s(peer.unidirectional.gb_s) == pytest.approx(395.1, rel=0.005)
        assert _gb_s(peer.bidirectional.gb_s) == pytest.approx(387.0, rel=0.005)
    run = _all_reduce(result)
    assert (run.ranks, run.gpu_indices, run.source) == (8, tuple(range(8)), "simulate")
    assert run.nccl_version == "2.21.5"


def test_healthy_a100_gives_its_recorded_figures() -> None:
    result = _measure("healthy-8x-a100-80gb")
    gpu = _gpus(result)[0]
    assert _gb_s(gpu.h2d.gb_s) == pytest.approx(25.13, rel=0.005)  # nvbandwidth#42
    assert all(  # nvbandwidth README: 274.89-276.76 GB/s
        274.0 <= _gb_s(peer.unidirectional.gb_s) <= 278.0 for peer in _peers(result).values()
    )
    points = _all_reduce(result).points
    assert not isinstance(points, Unavailable)
    assert points[-1].busbw_gb_s == pytest.approx(234.37, rel=0.01)  # the capture at 4 GiB


# ---------------------------------------------------------------- fault scenarios


def test_a_riser_at_x8_halves_one_gpus_host_copies() -> None:
    facts = _facts("pcie-riser-x8-h2d-half")
    assert facts.gpus[1].pcie_width_current == 8
    assert facts.gpus[1].pcie_width_max == 16
    gpus = _gpus(_measure("pcie-riser-x8-h2d-half"))
    for direction in ("h2d", "d2h"):
        speeds = {index: _gb_s(getattr(gpu, direction).gb_s) for index, gpu in gpus.items()}
        assert speeds[1] / _median_of_others(speeds, 1) == pytest.approx(0.5, abs=0.01)
        assert speeds[1] < 48.0  # Azure's H2D/D2H gate on H100
    assert _gb_s(gpus[1].hbm.gb_s) == pytest.approx(2880.0, rel=0.005)


def test_the_riser_with_replays_is_slow_on_the_host_link_too() -> None:
    gpus = _gpus(_measure("pcie-riser-replays"))
    h2d = {index: _gb_s(gpu.h2d.gb_s) for index, gpu in gpus.items()}
    assert h2d[2] / _median_of_others(h2d, 2) == pytest.approx(0.5, abs=0.01)


def test_nvlinks_down_slow_one_gpus_row_and_column_only() -> None:
    facts = _facts("nvlink-down-slow-peers")
    links = facts.gpus[6].nvlinks
    assert not isinstance(links, Unavailable)
    assert (len(links), sum(link.active for link in links)) == (18, 6)
    peers = _peers(_measure("nvlink-down-slow-peers"))
    for (src, dst), peer in peers.items():
        speed = _gb_s(peer.unidirectional.gb_s)
        both = _gb_s(peer.bidirectional.gb_s)
        if 6 in (src, dst):
            assert speed == pytest.approx(395.1 / 3, rel=0.01), (src, dst)
            assert both == pytest.approx(129.0, rel=0.01)
        else:
            assert speed == pytest.approx(395.1, rel=0.005), (src, dst)
    slow = {pair for pair, peer in peers.items() if _gb_s(peer.unidirectional.gb_s) < 300}
    assert slow == {(6, peer) for peer in range(8) if peer != 6} | {
        (peer, 6) for peer in range(8) if peer != 6
    }


def test_a_degraded_nvswitch_keeps_peers_fast_and_the_all_reduce_low() -> None:
    result = _measure("nvswitch-degraded-all-reduce-low")
    assert min(_gb_s(peer.unidirectional.gb_s) for peer in _peers(result).values()) > 390.0
    points = _all_reduce(result).points
    assert not isinstance(points, Unavailable)
    assert max(point.busbw_gb_s for point in points) == pytest.approx(200.0, rel=0.01)


def test_slow_hbm_on_one_gpu() -> None:
    gpus = _gpus(_measure("hbm-slow-one-gpu"))
    hbm = {index: _gb_s(gpu.hbm.gb_s) for index, gpu in gpus.items()}
    assert hbm[3] / _median_of_others(hbm, 3) == pytest.approx(0.6, abs=0.01)
    assert hbm[3] < 1905.0  # DCGM's memory_bandwidth floor for H100 80GB
    assert {index for index, speed in hbm.items() if speed < 2800} == {3}


def test_a_lost_gpu_has_a_reason_and_no_pairs() -> None:
    result = _measure("gpu-fallen-off-bus")
    lost = _gpus(result)[6]
    assert isinstance(lost.h2d.gb_s, Unavailable)
    assert lost.h2d.gb_s.reason is Reason.GPU_LOST
    assert all(6 not in pair for pair in _peers(result))
    assert len(_peers(result)) == 42
    run = _all_reduce(result)
    assert (run.ranks, run.gpu_indices) == (7, (0, 1, 2, 3, 4, 5, 7))


# ---------------------------------------------------------------- the section's features


def _with(tmp_path: Path, **changes: Any) -> Interconnect:
    path = _file(tmp_path, changes)
    return simulated_interconnect(_facts(path), load_scenario(path), CONFIG)


def test_peer_access_off_for_a_pair_and_for_a_gpu(tmp_path: Path) -> None:
    peers = _peers(_with(tmp_path, peer_access_off=["2-5", "7-*"]))
    closed = {pair for pair, peer in peers.items() if peer.access is False}
    assert closed == {(2, 5), (5, 2)} | {(7, n) for n in range(7)} | {(n, 7) for n in range(7)}
    speed = peers[2, 5].unidirectional.gb_s
    assert isinstance(speed, Unavailable)
    assert speed.reason is Reason.NOT_SUPPORTED
    assert "GPU 2 cannot access GPU 5 as a peer" in speed.detail


def test_link_overrides_most_specific_first(tmp_path: Path) -> None:
    links = {
        "3-*": {"p2p_gb_s": 200.0},
        "6-*": {"p2p_gb_s": 100.0},
        "2-6": {"p2p_gb_s": 300.0},
        "1->4": {"p2p_gb_s": 50.0, "error": "cudaErrorLaunchTimeout"},
    }
    peers = _peers(_with(tmp_path, link_overrides=links))

    def speed(src: int, dst: int) -> float:
        return _gb_s(peers[src, dst].unidirectional.gb_s)

    for src, dst, figure in ((2, 6, 300.0), (3, 6, 100.0)):  # the pair's own; the lower GPU's
        assert speed(src, dst) == pytest.approx(figure, rel=0.01)
        assert speed(dst, src) == pytest.approx(figure, rel=0.01)
    assert speed(3, 0) == pytest.approx(200.0, rel=0.01)
    assert _gb_s(peers[3, 0].bidirectional.gb_s) == pytest.approx(387.0, rel=0.01)  # node's
    failed = peers[1, 4].unidirectional.gb_s
    assert isinstance(failed, Unavailable)
    assert failed.reason is Reason.ERROR
    assert failed.detail == "cudaErrorLaunchTimeout"
    assert speed(4, 1) == pytest.approx(395.1, rel=0.01)  # one way only


def test_an_all_reduce_that_fails_gives_nccls_words(tmp_path: Path) -> None:
    error = "ncclSystemError: System call (e.g. socket, malloc) or external library call failed"
    run = _all_reduce(_with(tmp_path, all_reduce_error=error))
    assert run.ranks == 8
    assert run.points == Unavailable(Reason.ERROR, f"NCCL error: {error}")


def test_a_gpu_whose_copies_fail_and_wrong_results(tmp_path: Path) -> None:
    result = _with(
        tmp_path, gpu_overrides={"4": {"error": "cudaErrorECCUncorrectable"}}, all_reduce_wrong=3
    )
    gpus = _gpus(result)
    for copy in (gpus[4].h2d, gpus[4].d2h, gpus[4].hbm):
        assert copy.gb_s == Unavailable(Reason.ERROR, "cudaErrorECCUncorrectable")
    assert isinstance(gpus[3].h2d.gb_s, float)
    points = _all_reduce(result).points
    assert not isinstance(points, Unavailable)
    assert {point.wrong for point in points} == {3}


def test_busy_gpus_are_reported_after_the_idle_gate_gave_up(tmp_path: Path) -> None:
    result = _with(tmp_path, busy_gpus=[5, 2])
    assert result.busy_gpus == (2, 5)
    assert result.idle_wait_s == CONFIG.idle_timeout_s
    assert _measure(HEALTHY).busy_gpus == ()


def test_the_config_decides_sizes_repeats_and_what_is_measured() -> None:
    config = dataclasses.replace(
        CONFIG,
        copy_size_bytes=64 * MIB,
        repeats=3,
        all_reduce_sizes=(MIB, GIB),
        peers=False,
    )
    result = _measure(HEALTHY, config)
    gpu = _gpus(result)[0]
    assert (gpu.hbm.size_bytes, len(gpu.hbm.repeats_gb_s)) == (64 * MIB, 3)
    assert result.peers == Unavailable(Reason.NOT_MEASURED, "peer matrix not asked for")
    points = _all_reduce(result).points
    assert not isinstance(points, Unavailable)
    assert [point.size_bytes for point in points] == [MIB, GIB]
    result = _measure(HEALTHY, dataclasses.replace(CONFIG, all_reduce=False))
    assert isinstance(result.all_reduce, Unavailable)


# ---------------------------------------------------------------- determinism and jitter


def test_the_same_scenario_gives_the_same_figures_every_run() -> None:
    assert _measure(HEALTHY) == _measure(HEALTHY)


def test_repeats_do_not_depend_on_the_process_hash_seed() -> None:
    script = (
        "from validator.node.bandwidth.bandwidth_config import InterconnectConfig\n"
        "from validator.node.sim.simulated_bandwidth import simulated_interconnect\n"
        "from validator.node.sim.scenario import load_scenario\n"
        "from validator.node.collect import collect\n"
        "from validator.node.sim.simulated_source import SimulatedSource\n"
        "r = simulated_interconnect(collect(SimulatedSource('healthy-8x-h100-sxm')),"
        " load_scenario('healthy-8x-h100-sxm'), InterconnectConfig())\n"
        "print(r.gpus[3].h2d.repeats_gb_s, r.peers[10].unidirectional.repeats_gb_s)\n"
    )
    here = _measure(HEALTHY)
    gpus, peers = here.gpus, here.peers
    assert not isinstance(gpus, Unavailable)
    assert not isinstance(peers, Unavailable)
    expected = f"{gpus[3].h2d.repeats_gb_s} {peers[10].unidirectional.repeats_gb_s}"
    root = Path(__file__).resolve().parents[2]
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", script],
            check=False,
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == expected


def test_repeats_jitter_a_little_around_the_figure_and_the_seed_moves_them(
    tmp_path: Path,
) -> None:
    gpu = _gpus(_measure(HEALTHY))[0]
    repeats = gpu.h2d.repeats_gb_s
    assert len(set(repeats)) > 1  # repeats differ, as real ones do
    assert all(abs(value / 55.36 - 1) <= 0.005 + 1e-4 for value in repeats)
    assert gpu.h2d.gb_s == pytest.approx(statistics.median(repeats), abs=0.01)
    reseeded = _gpus(_with(tmp_path, seed=7))[0]
    assert reseeded.h2d.repeats_gb_s != repeats
    still = _gpus(_with(tmp_path, jitter=0))[0]
    assert set(still.h2d.repeats_gb_s) == {55.36}


# ---------------------------------------------------------------- the all-reduce curve


def test_the_curve_rises_with_size_and_levels_off_near_the_plateau() -> None:
    points = _all_reduce(_measure(HEALTHY)).points
    assert not isinstance(points, Unavailable)
    busbw = [point.busbw_gb_s for point in points]
    assert busbw == sorted(busbw)
    assert len(set(busbw)) == len(busbw)
    assert busbw[0] < 0.1 * 477.0  # 1 MiB: latency-bound
    for point in points:
        if point.size_bytes >= 256 * MIB:
            assert 0.9 * 477.0 <= point.busbw_gb_s <= 477.0
        # nccl-tests' definitions: busbw = algbw x 2(n-1)/n, time = size / algbw
        assert point.busbw_gb_s == pytest.approx(point.algbw_gb_s * 2 * 7 / 8, rel=1e-3)
        assert point.time_us == pytest.approx(point.size_bytes / point.algbw_gb_s / 1e3, rel=1e-3)
        assert point.busbw_in_place_gb_s == pytest.approx(point.busbw_gb_s, rel=0.006)
        assert point.wrong == 0


def _capture_rows(path: Path) -> dict[int, float]:
    """size -> out-of-place busbw of an nccl-tests table (only the data rows)."""
    rows = {}
    for line in path.read_text().splitlines():
        words = line.split()
        if len(words) >= 12 and words[0].isdigit() and words[2] == "float":
            rows[int(words[0])] = float(words[6])
    return rows


def test_the_curve_is_shaped_like_the_real_a100_sweep() -> None:
    real = _capture_rows(A100_SWEEP)
    assert real[8 * GIB] == 235.26
    section = load_scenario("healthy-8x-a100-80gb").data["interconnect"]
    for size in CONFIG.all_reduce_sizes:
        assert busbw_at(section, size, 8) == pytest.approx(real[size], rel=0.2), size
    assert busbw_at(section, 8 * GIB, 8) == pytest.approx(real[8 * GIB], rel=0.005)


def test_the_h100_plateau_meets_the_recorded_8_gpu_run() -> None:
    section = load_scenario(HEALTHY).data["interconnect"]
    assert busbw_at(section, 8 * GIB, 8) == pytest.approx(476.72, rel=0.005)  # 8x H200 capture


def test_an_explicit_curve_is_interpolated_and_flat_beyond_its_ends() -> None:
    section = {"all_reduce_curve": [[1 * MIB, 24.0], [16 * MIB, 130.0], [1 * GIB, 230.0]]}
    assert busbw_at(section, MIB // 2, 8) == 24.0
    assert busbw_at(section, 16 * MIB, 8) == 130.0
    assert busbw_at(section, 4 * MIB, 8) == pytest.approx(24.0 + 106.0 / 2)  # halfway in log
    assert busbw_at(section, 4 * GIB, 8) == 230.0


# ---------------------------------------------------------------- no section: fail closed


def test_a_scenario_without_the_section_says_so(tmp_path: Path) -> None:
    path = _file(tmp_path, None)  # null drops the inherited section
    result = simulated_interconnect(_facts(path), load_scenario(path), CONFIG)
    assert result.error == NO_SECTION == "the scenario has no interconnect section"
    assert isinstance(result.gpus, Unavailable)
    assert isinstance(result.all_reduce, Unavailable)
    facts = collect_simulated(path, interconnect="on")
    assert facts.interconnect is not None
    assert facts.interconnect.error == NO_SECTION
