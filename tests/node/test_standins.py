"""The stand-ins print real recordings that the parsers read to the recorded figures.

Each stand-in is run as a program found on PATH, as the test hosts will run it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.standins import STANDINS
from validator.model import RdmaEnd
from validator.node.cross_node_results import nccl_group_result, rdma_pair_result
from validator.node.parsers.nccl_tests import parse_all_reduce, parse_alltoall
from validator.node.parsers.perftest import parse_perftest

PROGRAMS = ("ib_write_bw", "ib_write_lat", "all_reduce_perf", "alltoall_perf")
_CLEAN = (
    "GPUREADY_STANDIN_",
    "GPUREADY_STEP_",
    "SLURM_",
    "OMPI_COMM_WORLD_RANK",
    "PMIX_RANK",
    "PMI_RANK",
)


def _run(argv: list[str], timeout: float = 30, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(_CLEAN)}
    python_dir = str(Path(sys.executable).parent)
    base["PATH"] = f"{STANDINS}{os.pathsep}{python_dir}{os.pathsep}{base.get('PATH', '')}"
    base.update({"GPUREADY_STEP_HOST": "node-a", **env})
    program = shutil.which(argv[0], path=base["PATH"])
    assert program is not None
    assert Path(program).parent == STANDINS
    return subprocess.run(
        [program, *argv[1:]], env=base, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_every_stand_in_is_an_executable_with_a_readme() -> None:
    readme = (STANDINS / "README.md").read_text(encoding="utf-8")
    for name in PROGRAMS:
        assert os.access(STANDINS / name, os.X_OK), name
        assert f"`{name}`" in readme


@pytest.mark.parametrize(
    ("mode", "average", "peak"),
    [("healthy", 392.34, 392.38), ("slow-link", 140.40, 140.55)],
)
def test_ib_write_bw_client(mode: str, average: float, peak: float) -> None:
    done = _run(
        ["ib_write_bw", "-d", "mlx5_0", "--use_cuda=0", "node-b"], GPUREADY_STANDIN_MODE=mode
    )
    assert done.returncode == 0
    assert not done.stdout.startswith(("vyl@", "root@"))  # the recorded prompt is not printed
    result = rdma_pair_result(
        done.stdout, RdmaEnd("node-b", "mlx5_0", 0), RdmaEnd("node-a", "mlx5_0", 0)
    )
    assert result.completed
    assert (result.bw_average_gbit_s, result.bw_peak_gbit_s) == (average, peak)


def test_ib_write_bw_dead_node_fails_with_the_recorded_words() -> None:
    done = _run(["ib_write_bw", "-d", "mlx5_0", "node-b"], GPUREADY_STANDIN_MODE="dead-node")
    assert done.returncode == 1
    assert done.stdout == ""
    parsed = parse_perftest(done.stderr)
    assert not parsed.complete
    assert parsed.failure is not None
    assert parsed.failure.startswith("Couldn't connect to")


def test_ib_write_bw_server_side() -> None:
    done = _run(["ib_write_bw", "-d", "mlx5_0", "--use_cuda", "0", "-a"])
    assert done.returncode == 0
    parsed = parse_perftest(done.stdout)
    assert parsed.server
    assert parsed.complete
    assert parsed.cuda_device == 0
    dead = _run(["ib_write_bw", "-d", "mlx5_0"], GPUREADY_STANDIN_MODE="dead-node")
    assert (dead.returncode, dead.stdout, dead.stderr) == (1, "", "")


def test_ib_write_lat() -> None:
    done = _run(["ib_write_lat", "-d", "mlx5_0", "node-b"])
    result = rdma_pair_result(done.stdout, RdmaEnd("node-b", "mlx5_0"), RdmaEnd("node-a", "mlx5_0"))
    assert result.completed
    assert result.test == "write_lat"
    assert (result.lat_typical_us, result.lat_p999_us) == (1.47, 1.93)
    assert _run(["ib_write_lat", "node-b"], GPUREADY_STANDIN_MODE="dead-node").returncode == 1


@pytest.mark.parametrize(
    ("program", "collective", "mode", "busbw"),
    [
        ("all_reduce_perf", "all_reduce", "healthy", 469.21),
        ("all_reduce_perf", "all_reduce", "slow-link", 4.32),
        ("alltoall_perf", "alltoall", "healthy", 35.90),
        ("alltoall_perf", "alltoall", "slow-link", 0.51),
    ],
)
def test_collectives(program: str, collective: str, mode: str, busbw: float) -> None:
    done = _run([program, "-b", "8", "-e", "16G", "-f", "2", "-g", "1"], GPUREADY_STANDIN_MODE=mode)
    assert done.returncode == 0
    result = nccl_group_result(done.stdout, collective)
    assert result.completed
    assert result.largest_busbw_gb_s == busbw


@pytest.mark.parametrize("program", ["all_reduce_perf", "alltoall_perf"])
def test_collective_dead_node(program: str) -> None:
    done = _run([program], GPUREADY_STANDIN_MODE="dead-node")
    assert done.returncode == 1
    parse = parse_alltoall if program == "alltoall_perf" else parse_all_reduce
    parsed = parse(done.stdout)
    assert not parsed.complete
    assert parsed.failure is not None


def test_only_rank_zero_prints() -> None:
    assert _run(["all_reduce_perf"], SLURM_PROCID="3").stdout == ""
    assert _run(["all_reduce_perf"], OMPI_COMM_WORLD_RANK="1").stdout == ""
    assert "Out of bounds" in _run(["all_reduce_perf"], SLURM_PROCID="0").stdout
    assert (
        _run(["all_reduce_perf"], PMIX_RANK="2", GPUREADY_STANDIN_MODE="dead-node").returncode == 1
    )


def test_a_map_chooses_per_pair_and_per_host(tmp_path: Path) -> None:
    table = {
        "default": "healthy",
        "pairs": {"node-a,node-c": "slow-link"},
        "hosts": {"node-d": "dead-node"},
    }
    path = tmp_path / "map.json"
    path.write_text(json.dumps(table), encoding="utf-8")
    env = {"GPUREADY_STANDIN_MAP": str(path)}

    def average(peer: str) -> object:
        done = _run(["ib_write_bw", peer], **env)
        end = RdmaEnd(peer, "mlx5_0")
        return rdma_pair_result(done.stdout + done.stderr, end, end).bw_average_gbit_s

    assert average("node-b") == 392.34
    assert average("node-c") == 140.40  # the pair's entry
    assert not isinstance(average("node-d"), float)  # a dead host fails its pairs
    group = _run(["all_reduce_perf"], SLURM_JOB_NODELIST="node-b,node-d", **env)
    assert group.returncode == 1  # node-d is dead: the group fails with the recorded words
    assert "Test NCCL failure" in group.stdout
    slurm = _run(["all_reduce_perf"], SLURM_JOB_NODELIST="node-a,node-[1-2]", **env)
    assert nccl_group_result(slurm.stdout, "all_reduce").largest_busbw_gb_s == 469.21


def test_slurm_host_lists_are_expanded(tmp_path: Path) -> None:
    odd = _run(["alltoall_perf"], SLURM_STEP_NODELIST="gpu[a-b],gpu07")
    assert odd.returncode == 0  # a bracket without numbers is a name, not a crash
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"hosts": {"gpu07": "slow-link"}}), encoding="utf-8")
    env = {"GPUREADY_STANDIN_MAP": str(path)}
    slow = _run(["alltoall_perf"], SLURM_STEP_NODELIST="gpu[01-03,07]", **env)
    assert nccl_group_result(slow.stdout, "alltoall").largest_busbw_gb_s == 0.51
    fine = _run(["alltoall_perf"], SLURM_STEP_NODELIST="gpu[01-03,08]", **env)
    assert nccl_group_result(fine.stdout, "alltoall").largest_busbw_gb_s == 35.90


def test_an_unknown_mode_is_refused() -> None:
    done = _run(["ib_write_bw", "node-b"], GPUREADY_STANDIN_MODE="flaky")
    assert done.returncode == 2
    assert "unknown mode 'flaky'" in done.stderr


def test_hang_runs_until_killed() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        _run(["all_reduce_perf"], timeout=1.5, GPUREADY_STANDIN_MODE="hang")
