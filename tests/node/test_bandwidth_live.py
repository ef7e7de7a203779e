"""The live interconnect measurement against a fake CUDA runtime and NCCL (tests/fake_cuda.py).

The fake's copies take bytes / the link's speed on a fake clock, so every bandwidth is
exact: a slow link in the fake's tables must come out as that GPU or pair, by NVML index.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.fake_cuda import FakeClock, FakeFunction, FakeLib, FakeNccl, FakeNode
from validator.model import (
    AllReduce,
    Bandwidth,
    GpuCopyBandwidth,
    GpuFacts,
    GpuStatus,
    Interconnect,
    NodeFacts,
    PeerBandwidth,
    Reason,
    Unavailable,
    from_dict,
    to_dict,
)
from validator.node import nvml
from validator.node.bandwidth import live, measure
from validator.node.bandwidth.bandwidth_config import InterconnectConfig
from validator.node.bandwidth.live import (
    Affinity,
    Seams,
    measure_live,
    parse_cpulist,
    sysfs_bus_id,
)
from validator.node.bandwidth.nccl_lib import (
    NCCL_FUNCTIONS,
    NOT_FOUND,
    NcclApi,
    NcclError,
    find_nccl,
    version_text,
)
from validator.node.burnin.backend import BackendUnavailable
from validator.node.burnin.cuda_libs import (
    CUDART_PEER_FUNCTIONS,
    CudaApi,
    CudaRuntime,
    declare,
    find_cuda_runtimes,
    open_runtime,
)
from validator.node.burnin.devices import CudaEnvironment

MB = 1_000_000
# 1 MB copies: at 50 GB/s one takes 20 us on the fake clock.
SMALL = InterconnectConfig(
    copy_size_bytes=MB,
    repeats=5,
    warmup=1,
    all_reduce_sizes=(4096, 16384, 65536),
    all_reduce_iterations=4,
    all_reduce_warmup=1,
    idle_timeout_s=2.0,
    idle_poll_s=0.5,
)


def nvml_bus(number: int) -> str:
    return f"00000000:{number:02X}:00.0"


def cuda_bus(number: int) -> str:
    return f"0000:{number:02x}:00.0"


def node_facts(count: int, first_bus: int = 0x18, **gpu: Any) -> NodeFacts:
    gpus = tuple(
        GpuFacts(index=i, uuid=f"GPU-{i:04d}", pci_bus_id=nvml_bus(first_bus + i), **gpu)
        for i in range(count)
    )
    return NodeFacts(hostname="node-01", source="live", gpus=gpus)


# ------------------------------------------------------------------ NVML and CPU affinity


class FakeUtilisation:
    """pynvml's handle and utilisation calls; ``busy_until[i]``: GPU i is at 90 % until then."""

    def __init__(self, clock: FakeClock, busy_until: dict[int, float] | None = None) -> None:
        self.clock = clock
        self.busy_until = busy_until or {}
        self.asked = 0

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        self.asked += 1
        busy = self.clock.now < self.busy_until.get(handle, 0.0)
        return SimpleNamespace(gpu=90 if busy else 0, memory=40 if busy else 2)


def session_of(lib: object) -> Any:
    @contextlib.contextmanager
    def session() -> Iterator[object]:
        yield lib

    return session


@contextlib.contextmanager
def no_nvml() -> Iterator[object]:
    raise RuntimeError("nvidia-ml-py (pynvml) is not installed")
    yield  # pragma: no cover


class FakeAffinity(Affinity):
    def __init__(self, cpus: set[int]) -> None:
        self.cpus = set(cpus)
        self.history: list[set[int]] = []

    def get(self) -> set[int]:
        return set(self.cpus)

    def set(self, cpus: set[int]) -> None:
        self.cpus = set(cpus)
        self.history.append(set(cpus))


# ------------------------------------------------------------------ the rig


class Rig:
    """A fake node, its NCCL, library files to find, NVML, sysfs and the seams to them."""

    def __init__(
        self,
        tmp_path: Path,
        bus_ids: Sequence[str],
        *,
        nccl: bool = True,
        busy_until: dict[int, float] | None = None,
        nvml_session: Any = None,
        **speeds: Any,
    ) -> None:
        self.clock = FakeClock()
        self.node = FakeNode(bus_ids, self.clock, **speeds)
        self.nccl = FakeNccl(self.node)
        self.libs = tmp_path / "lib"
        self.libs.mkdir()
        (self.libs / "libcudart.so.12").touch()
        if nccl:
            (self.libs / "libnccl.so.2").touch()
        self.sysfs = tmp_path / "sys"
        self.sysfs.mkdir()
        self.affinity = FakeAffinity({0, 1, 2, 3})
        self.utilisation = FakeUtilisation(self.clock, busy_until)
        self.cudart_lib = FakeLib(self.node)
        self.nccl_lib = FakeLib(self.nccl)
        self.opened: list[str] = []
        self.seams = Seams(
            dirs=[str(self.libs)],
            opener=self.open,
            nvml_session=nvml_session or session_of(self.utilisation),
            clock=self.clock,
            sleep=self.clock.sleep,
            sysfs=str(self.sysfs),
            affinity=self.affinity,
            environment=CudaEnvironment(visible_devices=None, device_order="PCI_BUS_ID"),
        )

    def open(self, path: str) -> FakeLib:
        self.opened.append(os.path.basename(path))
        return self.nccl_lib if "nccl" in os.path.basename(path) else self.cudart_lib

    def numa(self, bus: str, node: int | str, cpulist: str = "2-3") -> None:
        device = self.sysfs / "bus" / "pci" / "devices" / bus
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{node}\n")
        if isinstance(node, int) and node >= 0:
            where = self.sysfs / "devices" / "system" / "node" / f"node{node}"
            where.mkdir(parents=True, exist_ok=True)
            (where / "cpulist").write_text(cpulist + "\n")

    def measure(
        self, facts: NodeFacts, config: InterconnectConfig = SMALL, until: float | None = None
    ) -> Interconnect:
        return measure_live(facts, config, until, seams=self.seams)

    def released(self) -> None:
        assert set(self.node.live().values()) == {0}, self.node.live()
        assert self.nccl.comms == {}


def gpu(result: Interconnect, index: int) -> GpuCopyBandwidth:
    assert isinstance(result.gpus, tuple), result.gpus
    return next(g for g in result.gpus if g.index == index)


def pair(result: Interconnect, src: int, dst: int) -> PeerBandwidth:
    assert isinstance(result.peers, tuple), result.peers
    return next(p for p in result.peers if (p.src, p.dst) == (src, dst))


def reduce_of(result: Interconnect) -> AllReduce:
    assert isinstance(result.all_reduce, AllReduce), result.all_reduce
    return result.all_reduce


def figure(value: Bandwidth) -> float:
    assert isinstance(value.gb_s, float), value.gb_s
    return value.gb_s


# ------------------------------------------------------------------ a healthy node


def test_a_healthy_node_gives_every_figure_exactly(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18 + i) for i in range(4)])
    rig.nccl.busbw = lambda size: 300.0
    result = rig.measure(node_facts(4))
    assert result.error is None
    assert (result.source, result.simulated) == ("cuda", False)
    for index in range(4):
        copies = gpu(result, index)
        assert (copies.uuid, copies.pci_bus_id) == (f"GPU-{index:04d}", nvml_bus(0x18 + index))
        assert figure(copies.h2d) == figure(copies.d2h) == 50.0
        assert copies.h2d.repeats_gb_s == (50.0,) * 5
        assert copies.h2d.size_bytes == MB
        # within the GPU: bytes read plus written, as the datasheet's HBM figure counts them
        assert figure(copies.hbm) == 4000.0
        assert copies.hbm.size_bytes == 2 * MB
    assert isinstance(result.peers, tuple)
    assert len(result.peers) == 12  # every ordered pair
    for peer in result.peers:
        assert peer.access is True
        assert figure(peer.unidirectional) == 400.0
        assert figure(peer.bidirectional) == 380.0
    reduce = reduce_of(result)
    assert (reduce.ranks, reduce.source, reduce.nccl_version) == (4, "nccl", "2.21.5")
    assert reduce.gpu_indices == (0, 1, 2, 3)
    assert isinstance(reduce.points, tuple)
    assert [p.size_bytes for p in reduce.points] == [4096, 16384, 65536]
    for point in reduce.points:
        assert point.busbw_gb_s == point.busbw_in_place_gb_s == 300.0
        assert point.algbw_gb_s == 200.0  # 300 / (2 x 3 / 4)
        assert point.time_us == round(point.size_bytes / 200e9 * 1e6, 2)
    assert [p.wrong for p in reduce.points] == [0, None, 0]  # checked smallest and largest
    assert result.idle_wait_s == 0.0
    assert result.busy_gpus == ()
    assert from_dict(Interconnect, json.loads(json.dumps(to_dict(result)))) == result
    rig.released()


def test_only_the_runtime_is_opened_never_cublas(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18)])
    (rig.libs / "libcublas.so.12").touch()
    rig.measure(node_facts(1))
    assert rig.opened == ["libcudart.so.12"]


def test_each_repeat_times_a_loop_of_copies_sized_from_the_warmup(tmp_path: Path) -> None:
    # The warm-up copy goes at 1 GB/s: 1 ms, so a repeat of at least 5 ms is 5 copies, and
    # each repeat's figure is its own five copies' (bytes x 5 over the loop's time).
    speeds = [1.0] + [40.0] * 5 + [60.0] * 5 + [50.0] * 5 + [45.0] * 5 + [55.0] * 5
    rig = Rig(tmp_path, [cuda_bus(0x18)], h2d={0: speeds})
    copies = gpu(rig.measure(node_facts(1)), 0)
    assert copies.h2d.repeats_gb_s == (40.0, 60.0, 50.0, 45.0, 55.0)
    assert copies.h2d.gb_s == 50.0
    h2d = [copy for copy in rig.node.copies if copy[0] == "h2d"]
    assert len(h2d) == 1 + 5 * 5


def test_loops_are_long_enough_and_capped() -> None:
    assert measure.copy_loops(0.001) == 5  # 1 ms copies: 5 ms a repeat
    assert measure.copy_loops(0.0011) == 5
    assert measure.copy_loops(0.02) == 1  # longer than the target alone
    assert measure.copy_loops(110e-6) == 46  # 256 MiB within an H200's HBM
    assert measure.copy_loops(1e-9) == measure.MAX_COPY_LOOPS


def test_the_hosts_queuing_gap_is_outside_the_figure(tmp_path: Path) -> None:
    # Queuing costs the host 5 us a call; a 1 MB H2D copy takes 20 us. One copy timed from
    # an idle stream would give 1 MB / 25 us = 40 GB/s; a loop leaves one gap in 5 ms.
    rig = Rig(tmp_path, [cuda_bus(0x18)], call_s=5e-6)
    copies = gpu(rig.measure(node_facts(1), replace(SMALL, peers=False, all_reduce=False)), 0)
    for figures in (copies.h2d, copies.d2h):
        assert min(figures.repeats_gb_s) >= 49.8, figures
    rig.released()


@pytest.mark.parametrize("slower", [(0, 1), (1, 0)])
def test_both_directions_start_together(tmp_path: Path, slower: tuple[int, int]) -> None:
    # Queuing costs the host 0.5 us a call, so one direction's loop is queued after the
    # other's. Each round must still start both together: the faster direction then runs
    # at 380 GB/s throughout, and the slower at 300 until the faster is done, then alone
    # at 400: 1 / (1/380 + (1 - 300/380)/400) = 316.67 GB/s. A round that started one
    # direction early (no wait for the other stream) would run it alone first, faster.
    faster = (slower[1], slower[0])
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)], call_s=0.5e-6, both={slower: 300.0})
    result = rig.measure(node_facts(2), replace(SMALL, all_reduce=False))
    assert pair(result, *faster).bidirectional.repeats_gb_s == (380.0,) * 5
    assert pair(result, *slower).bidirectional.repeats_gb_s == (316.67,) * 5
    assert "cudaStreamWaitEvent" in rig.cudart_lib.names()
    rig.released()


def test_every_copy_runs_on_a_non_blocking_stream_with_pinned_memory(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)])
    rig.measure(node_facts(2), replace(SMALL, all_reduce=False))
    # the fake refuses pageable host memory and blocking streams; every buffer was pinned
    assert rig.node.host_allocs == [MB, MB]
    kinds = {kind for kind, *_ in rig.node.copies}
    assert kinds == {"h2d", "d2h", "d2d", "peer"}
    rig.released()


# ------------------------------------------------------------------ by PCI bus id


def test_cuda_devices_are_matched_to_nvml_gpus_by_bus_id(tmp_path: Path) -> None:
    # CUDA's ordinals run 0x1A, 0x18, 0x19 (as CUDA_VISIBLE_DEVICES=2,0,1 would have them):
    # ordinal 0 is NVML's GPU 2, and its slow H2D and its slow link to ordinal 1 (GPU 0)
    # must be GPU 2's, never GPU 0's.
    rig = Rig(
        tmp_path,
        [cuda_bus(0x1A), cuda_bus(0x18), cuda_bus(0x19)],
        h2d={0: 25.0},
        hbm={2: 3000.0},
        peer={(0, 1): 150.0},
    )
    result = rig.measure(node_facts(3))
    assert figure(gpu(result, 2).h2d) == 25.0
    assert figure(gpu(result, 0).h2d) == figure(gpu(result, 1).h2d) == 50.0
    assert figure(gpu(result, 1).hbm) == 3000.0  # ordinal 2 is bus 0x19: NVML's GPU 1
    assert figure(pair(result, 2, 0).unidirectional) == 150.0
    assert figure(pair(result, 0, 2).unidirectional) == 400.0
    assert reduce_of(result).gpu_indices == (0, 1, 2)
    rig.released()


def test_a_gpu_cuda_cannot_see_is_named_and_the_others_finish(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)])
    result = rig.measure(node_facts(3))
    missing = gpu(result, 2)
    assert missing.h2d.gb_s == Unavailable(
        Reason.ERROR, "CUDA cannot see GPU 2 (00000000:1A:00.0), though NVML lists it"
    )
    assert missing.numa_node == missing.h2d.gb_s
    assert figure(gpu(result, 0).h2d) == 50.0
    assert figure(pair(result, 0, 1).unidirectional) == 400.0
    lost = pair(result, 0, 2).unidirectional.gb_s
    assert isinstance(lost, Unavailable)
    assert lost.detail.startswith("GPU 2: CUDA cannot see GPU 2")
    assert result.all_reduce == Unavailable(
        Reason.ERROR, "GPU 2 cannot take part: an all-reduce needs every GPU"
    )
    rig.released()


def test_a_gpu_that_fell_off_the_bus_has_its_reason(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18)])
    facts = node_facts(2)
    facts = replace(facts, gpus=(facts.gpus[0], replace(facts.gpus[1], status=GpuStatus.LOST)))
    result = rig.measure(facts, replace(SMALL, peers=False, all_reduce=False))
    assert gpu(result, 1).hbm.gb_s == Unavailable(
        Reason.GPU_LOST, "GPU 1 did not answer NVML (lost)"
    )
    assert figure(gpu(result, 0).hbm) == 4000.0


def test_gpus_that_cannot_be_matched_safely_are_errors_not_unasked(tmp_path: Path) -> None:
    # The runtime reads no bus ids and sees 2 devices for 3 GPUs: none can be matched.
    rig = Rig(tmp_path, ["", ""])
    result = rig.measure(node_facts(3))
    why = Unavailable(
        Reason.ERROR,
        "the backend cannot read its devices' PCI bus ids and sees 2 devices for 3 GPUs: "
        "no GPU can be matched to a device safely",
    )
    for index in range(3):
        assert gpu(result, index).h2d.gb_s == why
        assert gpu(result, index).numa_node == why
    reason = pair(result, 0, 1).unidirectional.gb_s
    assert isinstance(reason, Unavailable)
    assert reason.reason is Reason.ERROR
    assert pair(result, 0, 1).access == reason
    assert isinstance(result.all_reduce, Unavailable)
    assert result.all_reduce.reason is Reason.ERROR
    rig.released()


def test_a_gpu_without_a_bus_id_has_no_numa_node_by_error(tmp_path: Path) -> None:
    node, cpus = live.numa_cpus(None, str(tmp_path))
    assert node == Unavailable(Reason.ERROR, "NVML gave no PCI bus id to find its NUMA node")
    assert cpus == set()


# ------------------------------------------------------------------ the peer matrix


def test_a_slow_link_shows_as_its_pair_both_ways(tmp_path: Path) -> None:
    rig = Rig(
        tmp_path,
        [cuda_bus(0x18 + i) for i in range(3)],
        peer={(1, 2): 120.0, (2, 1): 130.0},
        both={(1, 2): 100.0, (2, 1): 90.0},
    )
    result = rig.measure(node_facts(3), replace(SMALL, all_reduce=False))
    assert figure(pair(result, 1, 2).unidirectional) == 120.0
    assert figure(pair(result, 2, 1).unidirectional) == 130.0
    # each direction's own figure while the other runs, stored in its own entry; the
    # slower direction's last copies run alone (at 130 GB/s) once the faster one is done:
    # 1 / (1/100 + (1 - 90/100)/130) = 92.86 GB/s
    assert figure(pair(result, 1, 2).bidirectional) == 100.0
    assert figure(pair(result, 2, 1).bidirectional) == 92.86
    assert figure(pair(result, 0, 1).bidirectional) == 380.0
    rig.released()


def test_a_pair_that_fails_gets_its_reason_and_the_others_finish(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18 + i) for i in range(3)])
    rig.node.peer_failures[(0, 1)] = 719  # cudaErrorLaunchFailure
    result = rig.measure(node_facts(3))
    why = Unavailable(Reason.ERROR, "cudaMemcpyPeerAsync failed: fake error 719 (status 719)")
    assert pair(result, 0, 1).unidirectional.gb_s == why
    assert pair(result, 0, 1).bidirectional.gb_s == why
    assert pair(result, 1, 0).bidirectional.gb_s == why  # the pair could not run both ways
    assert figure(pair(result, 1, 0).unidirectional) == 400.0
    assert figure(pair(result, 0, 2).bidirectional) == 380.0
    assert figure(pair(result, 2, 1).unidirectional) == 400.0
    assert isinstance(reduce_of(result).points, tuple)
    rig.released()


def test_a_pair_without_peer_access_is_measured_through_the_host(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)], no_access=[(0, 1), (1, 0)])
    result = rig.measure(node_facts(2), replace(SMALL, all_reduce=False))
    assert pair(result, 0, 1).access is False
    assert figure(pair(result, 0, 1).unidirectional) == 10.0  # staged by the driver
    rig.released()


def test_peer_access_is_enabled_for_the_copies_and_left_as_found(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18 + i) for i in range(3)])
    rig.node.peer_enabled.add((0, 1))  # someone enabled this one before us
    result = rig.measure(node_facts(3), replace(SMALL, all_reduce=False))
    assert {figure(p.unidirectional) for p in result.peers} == {400.0}  # type: ignore[union-attr]
    assert rig.node.peer_enabled == {(0, 1)}
    assert rig.node.last_error == 0  # the 704 was cleared, not left for the next call


def test_enabling_peer_access_that_fails_is_that_pairs_finding(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)])
    rig.node.failures["cudaDeviceEnablePeerAccess"] = 711  # cudaErrorTooManyPeers
    result = rig.measure(node_facts(2), replace(SMALL, all_reduce=False))
    entry = pair(result, 0, 1)
    assert entry.access is True
    assert entry.unidirectional.gb_s == Unavailable(
        Reason.ERROR, "cudaDeviceEnablePeerAccess failed: fake error 711 (status 711)"
    )


# ------------------------------------------------------------------ NCCL


def test_no_nccl_leaves_the_copies_measured(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)], nccl=False)
    result = rig.measure(node_facts(2))
    assert result.all_reduce == Unavailable(Reason.NOT_SUPPORTED, NOT_FOUND)
    assert NOT_FOUND == (
        "libnccl.so.2 not found: install NCCL (gpuready provision installs it with the nccl role)"
    )
    assert figure(gpu(result, 1).d2h) == 50.0
    assert figure(pair(result, 1, 0).unidirectional) == 400.0
    assert result.error is None


def test_nccl_errors_carry_ncclgeterrorstring_and_the_last_error(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)])
    rig.nccl.failures["ncclCommInitAll"] = 2
    reduce = reduce_of(rig.measure(node_facts(2)))
    assert reduce.points == Unavailable(
        Reason.ERROR,
        "ncclCommInitAll failed: unhandled system error (run with NCCL_DEBUG=INFO for details): "
        "NET/IB : fake transport failure (status 2)",
    )
    assert reduce.nccl_version == "2.21.5"
    rig.released()


def test_an_all_reduce_that_fails_mid_sweep_leaves_its_reason(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)])
    rig.nccl.failures["ncclGroupEnd"] = 3
    reduce = reduce_of(rig.measure(node_facts(2)))
    assert isinstance(reduce.points, Unavailable)
    assert reduce.points.detail.startswith("ncclGroupEnd failed: internal error")
    rig.released()


def test_wrong_results_are_counted(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18 + i) for i in range(3)])
    rig.nccl.wrong_rank = 1
    points = reduce_of(rig.measure(node_facts(3))).points
    assert isinstance(points, tuple)
    assert points[0].wrong == 1  # one element of one rank's result is not 1 + 2 + 3
    assert points[1].wrong is None
    assert points[2].wrong == 1  # the large check too


def test_a_fault_only_large_messages_meet_is_counted(tmp_path: Path, monkeypatch: Any) -> None:
    # NCCL takes another protocol for large messages: a fault there leaves 4 KiB right.
    # Compared a chunk at a time (4 KiB here), wrong elements in two chunks both count.
    monkeypatch.setattr(measure, "CHECK_CHUNK_BYTES", 4096)
    rig = Rig(tmp_path, [cuda_bus(0x18 + i) for i in range(3)])
    rig.nccl.wrong_rank = 2
    rig.nccl.wrong_at = (0, -1)
    rig.nccl.wrong_from_count = 16384  # 64 KiB of floats
    points = reduce_of(rig.measure(node_facts(3), replace(SMALL, peers=False))).points
    assert isinstance(points, tuple)
    assert [(p.size_bytes, p.wrong) for p in points] == [(4096, 0), (16384, None), (65536, 2)]


def test_the_check_is_at_the_smallest_size_and_near_256_mib() -> None:
    default = InterconnectConfig().all_reduce_sizes
    assert measure.checked_sizes(default) == (1 << 20, 256 << 20)
    assert measure.checked_sizes((1 << 20, 512 << 20)) == (1 << 20,)
    assert measure.checked_sizes((4096,)) == (4096,)


def test_busbw_is_nccl_tests_definition() -> None:
    assert measure.bus_bandwidth(100.0, 8) == 175.0
    assert measure.bus_bandwidth(100.0, 2) == 100.0
    assert measure.bus_bandwidth(100.0, 4) == 150.0


def test_busbw_matches_the_recorded_8x_h200_row(captures_dir: Path) -> None:
    name = "WEAKPROV-codeidx-19124581599-8xh200-ndv5-nccl2.19.3-all_reduce_perf-8G-single-size-pass"
    path = captures_dir / "nccl-tests" / f"{name}.txt"
    row = next(
        line.split() for line in path.read_text().splitlines() if line.strip().startswith("8589")
    )
    size, time_us, algbw, busbw = int(row[0]), float(row[5]), float(row[6]), float(row[7])
    point = measure._point(size, time_us / 1e6, None, 8, 0)
    assert (point.algbw_gb_s, point.busbw_gb_s) == (algbw, busbw) == (272.41, 476.72)
    assert point.time_us == time_us


def test_eight_ranks_through_the_fake_give_the_recorded_busbw(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18 + i) for i in range(8)])
    rig.nccl.busbw = lambda size: 476.72
    config = replace(SMALL, peers=False, all_reduce_sizes=(65536,))
    (point,) = reduce_of(rig.measure(node_facts(8), config)).points  # type: ignore[misc]
    assert point.busbw_gb_s == 476.72
    assert point.algbw_gb_s == round(476.72 / 1.75, 2)


def test_sizes_that_do_not_fit_memory_are_not_run(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)], free_bytes=100_000)
    points = reduce_of(rig.measure(node_facts(2), replace(SMALL, peers=False))).points
    assert isinstance(points, tuple)
    assert [p.size_bytes for p in points] == [4096, 16384]  # 2 x 65536 > 0.8 x 100000


# ------------------------------------------------------------------ one GPU


def test_one_gpu_has_copies_and_says_why_no_peers_or_all_reduce(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18)])
    result = rig.measure(node_facts(1))
    assert figure(gpu(result, 0).hbm) == 4000.0
    assert result.peers == Unavailable(Reason.NOT_SUPPORTED, "one GPU: no peer to copy to")
    assert result.all_reduce == Unavailable(
        Reason.NOT_SUPPORTED, "one GPU: an all-reduce needs two or more"
    )
    rig.released()


def test_parts_not_asked_for_are_not_measured(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)])
    result = rig.measure(node_facts(2), replace(SMALL, peers=False, all_reduce=False))
    assert result.peers == Unavailable(Reason.NOT_MEASURED, "the peer matrix was not asked for")
    assert result.all_reduce == Unavailable(Reason.NOT_MEASURED, "the all-reduce was not asked for")
    assert rig.nccl_lib.calls == []


# ------------------------------------------------------------------ nothing can start


def test_no_cuda_runtime_is_the_interconnects_error(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18)])
    (rig.libs / "libcudart.so.12").unlink()
    result = rig.measure(node_facts(1))
    assert result.error is not None
    assert result.error.startswith("no CUDA runtime can run: libcudart.so.13/libcudart.so.12")
    assert result.error.endswith("install the CUDA toolkit (gpuready provision)")
    assert result.gpus == Unavailable(Reason.ERROR, result.error)
    assert result.all_reduce == Unavailable(Reason.ERROR, result.error)


def test_no_gpu_in_the_facts_is_nothing_to_measure(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18)])
    result = rig.measure(node_facts(0))
    assert result.error == "no GPU answered NVML: nothing to measure"
    assert rig.opened == []


def test_a_runtime_without_the_peer_calls_is_refused(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18)])
    rig.cudart_lib = FakeLib(rig.node, missing=["cudaMemcpyPeerAsync"])
    result = rig.measure(node_facts(1))
    assert result.error is not None
    assert "cudaMemcpyPeerAsync is missing" in result.error


def test_a_device_that_cannot_be_set_up_is_its_finding_and_everything_is_freed(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)])
    original = rig.node.cudaMalloc

    def malloc(pointer: Any, size: int) -> int:
        return 2 if rig.node.current == 1 else original(pointer, size)

    rig.node.cudaMalloc = malloc  # type: ignore[method-assign]
    result = rig.measure(node_facts(2))
    assert gpu(result, 1).h2d.gb_s == Unavailable(
        Reason.ERROR,
        "setting up CUDA device 1 failed: cudaMalloc failed: fake error 2 (status 2)",
    )
    assert figure(gpu(result, 0).h2d) == 50.0
    rig.released()


def test_pinned_memory_refused_is_that_gpus_finding(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18)])
    rig.node.failures["cudaHostAlloc"] = 2
    copies = gpu(rig.measure(node_facts(1)), 0)
    assert copies.h2d.gb_s == Unavailable(
        Reason.ERROR, "page-locked host memory: cudaHostAlloc failed: fake error 2 (status 2)"
    )
    assert figure(copies.hbm) == 4000.0
    rig.released()


# ------------------------------------------------------------------ the deadline


def test_nothing_starts_that_cannot_finish_by_the_deadline(tmp_path: Path) -> None:
    # 1 GB/s: each H2D or D2H measurement of 1 MB copies is a 1 ms warm-up, then 5 repeats
    # of 5 copies (5 ms each): 26 ms of device time.
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)], h2d={0: 1.0, 1: 1.0}, d2h={0: 1.0})
    start = rig.clock.now
    result = rig.measure(node_facts(2), until=start + 0.090)
    first = gpu(result, 0)
    assert figure(first.h2d) == figure(first.d2h) == 1.0  # done by 52 ms
    # no HBM copy measured yet: estimated at the slowest rate seen (32 ms), it fits by 84 ms
    # and takes a third of a millisecond
    assert figure(first.hbm) == 4000.0
    second = gpu(result, 1)
    assert figure(second.h2d) == 1.0  # 26 ms more, as GPU 0's took: ends by 79 ms
    cut = Unavailable(Reason.ERROR, "no time left within the deadline")
    assert second.d2h.gb_s == cut  # another 26 ms, as GPU 0's took, would end past 90 ms
    assert figure(second.hbm) == 4000.0  # well under a millisecond, as GPU 0's took: it fits
    assert {p.unidirectional.gb_s for p in result.peers} == {cut}  # type: ignore[union-attr]
    assert reduce_of(result).points == cut  # NCCL's set-up alone needs more than is left
    assert rig.clock.now <= start + 0.090
    assert rig.nccl_lib.names() == ["ncclGetVersion"]
    rig.released()


def test_the_all_reduce_sweep_stops_at_the_size_that_would_overrun(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)])
    # 2 ranks at 1e-5 GB/s busbw: 10^4 bytes a second, 0.41 s per 4 KiB all-reduce
    rig.nccl.busbw = lambda size: 1e-5
    config = replace(SMALL, peers=False, all_reduce_sizes=(4096, 16384, 65536))
    start = rig.clock.now
    result = rig.measure(node_facts(2), config, until=start + 6.0)
    points = reduce_of(result).points
    assert isinstance(points, tuple)
    # the check and 4 KiB's 10 all-reduces (1 + 4 out of place, 1 + 4 in place) end by
    # 4.6 s; 16 KiB would need 4 x 4.1 s at the rate 4 KiB went: not started
    assert [p.size_bytes for p in points] == [4096]
    assert points[0].busbw_gb_s == 0.0  # rounded to 2 places, as nccl-tests prints it
    assert rig.clock.now <= start + 6.0
    rig.released()


def test_without_a_deadline_everything_runs(tmp_path: Path) -> None:
    budget = measure.Budget(until=None, clock=FakeClock())
    assert budget.fits("h2d", 10**15)


def test_estimates_learn_from_what_was_measured() -> None:
    clock = FakeClock()
    budget = measure.Budget(until=clock.now + 1.0, clock=clock)
    assert budget.estimate("h2d", 5 * 10**9) == 1.0  # the first guess: 5 GB/s

    def copy() -> None:
        clock.now += 0.5

    budget.timed("h2d", 10**9, copy)  # 2 GB/s
    assert budget.estimate("h2d", 10**9) == 0.5
    assert budget.estimate("peer", 10**9) == 0.5  # no peer yet: the slowest seen
    # 0.5 s have gone: what needs 0.5 s still ends by the deadline, a little more does not
    assert budget.fits("h2d", 10**9)
    assert not budget.fits("h2d", 11 * 10**8)


# ------------------------------------------------------------------ the idle gate


def test_the_idle_gate_waits_for_a_busy_gpu(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)])
    rig.utilisation.busy_until = {1: rig.clock.now + 1.0}
    result = rig.measure(node_facts(2), replace(SMALL, peers=False, all_reduce=False))
    assert result.idle_wait_s == 1.0
    assert result.busy_gpus == ()


def test_the_idle_gate_gives_up_and_names_the_busy_gpu(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)])
    rig.utilisation.busy_until = {1: rig.clock.now + 100.0}
    result = rig.measure(node_facts(2), replace(SMALL, peers=False, all_reduce=False))
    assert result.idle_wait_s == 2.0  # idle_timeout_s
    assert result.busy_gpus == (1,)
    assert figure(gpu(result, 1).h2d) == 50.0  # still measured; the judge knows it was busy


def test_the_idle_gate_keeps_to_half_of_the_time_left(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18)])
    rig.utilisation.busy_until = {0: rig.clock.now + 100.0}
    config = replace(SMALL, idle_timeout_s=30.0)
    result = rig.measure(node_facts(1), config, until=rig.clock.now + 3.0)
    assert result.idle_wait_s == 1.5
    assert result.busy_gpus == (0,)


def test_without_nvml_there_is_no_idle_gate_and_no_failure(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18)], nvml_session=no_nvml)
    result = rig.measure(node_facts(1))
    assert result.idle_wait_s is None
    assert result.busy_gpus == ()
    assert result.error is None
    assert figure(gpu(result, 0).h2d) == 50.0


def test_nvml_utilisation_reads_gpu_and_memory_use() -> None:
    clock = FakeClock()
    lib = FakeUtilisation(clock, {3: clock.now + 1})
    assert nvml.utilisation(lib, 3) == (90, 40)
    assert nvml.utilisation(lib, 0) == (0, 2)

    class Old:
        def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
            return index

    got = nvml.utilisation(Old(), 0)
    assert got[0] == got[1]
    assert isinstance(got[0], Unavailable)
    assert got[0].reason is Reason.NOT_SUPPORTED


# ------------------------------------------------------------------ NUMA placement


def test_the_host_buffer_is_made_on_the_gpus_numa_node(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18)])
    rig.numa("0000:18:00.0", 1, "2-3")
    seen: list[set[int]] = []
    rig.node.on_host_alloc = lambda: seen.append(rig.affinity.get())
    result = rig.measure(node_facts(1))
    assert gpu(result, 0).numa_node == 1
    assert seen == [{2, 3}]
    assert rig.affinity.cpus == {0, 1, 2, 3}  # restored


def test_a_platform_without_numa_information_says_so(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18), cuda_bus(0x19)])
    rig.numa("0000:18:00.0", -1)
    result = rig.measure(node_facts(2), replace(SMALL, peers=False, all_reduce=False))
    assert gpu(result, 0).numa_node == Unavailable(
        Reason.NOT_SUPPORTED, "the platform gives 0000:18:00.0 no NUMA node"
    )
    absent = gpu(result, 1).numa_node
    assert isinstance(absent, Unavailable)
    assert absent.detail.endswith("0000:19:00.0/numa_node cannot be read")
    assert rig.affinity.history == []  # never moved
    assert figure(gpu(result, 0).h2d) == 50.0


def test_cpus_outside_the_process_are_not_asked_for(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [cuda_bus(0x18)])
    rig.numa("0000:18:00.0", 1, "8-15")
    result = rig.measure(node_facts(1))
    assert gpu(result, 0).numa_node == Unavailable(
        Reason.ERROR,
        "cannot run on NUMA node 1's CPUs: none of node 1's CPUs is allowed to this process",
    )


def test_cpu_lists_and_sysfs_names() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpulist("") == set()
    with pytest.raises(ValueError, match="invalid literal"):
        parse_cpulist("zero")
    assert sysfs_bus_id("00000000:1A:00.0") == "0000:1a:00.0"
    assert sysfs_bus_id("00000001:C1:00.0") == "0001:c1:00.0"


# ------------------------------------------------------------------ the libraries


# As cuda_runtime_api.h and nccl.h declare them (CUDA 11-13, NCCL 2.x).
PEER_SIGNATURES = {
    "cudaDeviceCanAccessPeer": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
    "cudaDeviceEnablePeerAccess": [ctypes.c_int, ctypes.c_uint],
    "cudaDeviceDisablePeerAccess": [ctypes.c_int],
    "cudaMemcpyPeerAsync": [
        ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
        ctypes.c_void_p,
    ],
    "cudaGetLastError": [],
}  # fmt: skip
NCCL_SIGNATURES = {
    "ncclGetVersion": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]),
    "ncclCommInitAll": (
        ctypes.c_int,
        [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.POINTER(ctypes.c_int)],
    ),
    "ncclGroupStart": (ctypes.c_int, []),
    "ncclGroupEnd": (ctypes.c_int, []),
    "ncclAllReduce": (
        ctypes.c_int,
        [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ],
    ),
    "ncclCommDestroy": (ctypes.c_int, [ctypes.c_void_p]),
    "ncclGetErrorString": (ctypes.c_char_p, [ctypes.c_int]),
}


def test_the_peer_calls_have_their_c_signatures() -> None:
    lib = FakeLib(FakeNode([cuda_bus(0x18)], FakeClock()))
    CudaApi(lib).require_peer_functions()
    for name, argtypes in PEER_SIGNATURES.items():
        function = getattr(lib, name)
        assert (function.restype, function.argtypes) == (ctypes.c_int, argtypes), name
    assert lib.calls == []


def test_the_nccl_calls_have_their_c_signatures() -> None:
    lib = FakeLib(FakeNccl(FakeNode([cuda_bus(0x18)], FakeClock())))
    NcclApi(lib)
    assert set(NCCL_FUNCTIONS) == set(NCCL_SIGNATURES)
    for name, (restype, argtypes) in NCCL_SIGNATURES.items():
        function = getattr(lib, name)
        assert (function.restype, function.argtypes) == (restype, argtypes), name
    assert lib.calls == []


def test_the_fake_refuses_an_argument_its_c_type_would_refuse() -> None:
    function = FakeFunction("cudaSetDevice", lambda device: 0, [])
    with pytest.raises(AssertionError, match="called before its signature"):
        function(0)
    function.argtypes = [ctypes.c_int]
    with pytest.raises(AssertionError, match="argument 0"):
        function(ctypes.c_void_p(1))
    assert function(1) == 0


def test_the_burn_can_still_use_a_runtime_without_the_peer_calls() -> None:
    node = FakeNode([cuda_bus(0x18)], FakeClock())
    api = CudaApi(FakeLib(node, missing=list(CUDART_PEER_FUNCTIONS)))
    assert api.device_count() == 1
    with pytest.raises(BackendUnavailable, match="cudaDeviceCanAccessPeer is missing"):
        api.require_peer_functions()


def test_peer_access_already_enabled_or_not_enabled_is_not_an_error() -> None:
    node = FakeNode([cuda_bus(0x18), cuda_bus(0x19)], FakeClock())
    api = CudaApi(FakeLib(node))
    api.require_peer_functions()
    assert api.can_access_peer(0, 1) is True
    assert api.enable_peer_access(1) is True
    assert api.enable_peer_access(1) is False  # 704
    assert node.last_error == 0
    api.disable_peer_access(1)
    api.disable_peer_access(1)  # 705: nothing to do
    assert node.last_error == 0
    node.no_access.add((0, 1))
    with pytest.raises(Exception, match=r"cudaDeviceEnablePeerAccess failed: fake error 217"):
        api.enable_peer_access(1)


def test_runtimes_are_found_without_cublas(tmp_path: Path) -> None:
    (tmp_path / "libcudart.so.12").touch()
    (tmp_path / "libcudart.so.13").touch()
    assert find_cuda_runtimes([str(tmp_path)]) == [
        CudaRuntime(13, str(tmp_path / "libcudart.so.13")),
        CudaRuntime(12, str(tmp_path / "libcudart.so.12")),
    ]
    with pytest.raises(BackendUnavailable, match=r"libcudart\.so\.13/.* not found in .*: install"):
        find_cuda_runtimes([str(tmp_path / "nothing")])


def test_open_runtime_says_why_each_runtime_failed() -> None:
    empty = FakeNode([], FakeClock())
    with pytest.raises(BackendUnavailable, match=r"CUDA 12 \(/x/libcudart.so.12\): no CUDA device"):
        open_runtime([CudaRuntime(12, "/x/libcudart.so.12")], lambda path: FakeLib(empty))


def test_nccl_is_found_where_provisioning_puts_it(tmp_path: Path) -> None:
    system = tmp_path / "usr" / "lib" / "x86_64-linux-gnu"
    wheel = tmp_path / "site-packages" / "nvidia" / "nccl" / "lib"
    for where in (system, wheel):
        where.mkdir(parents=True)
    (wheel / "libnccl.so.2").touch()
    assert find_nccl([str(system), str(wheel)]) == str(wheel / "libnccl.so.2")
    (system / "libnccl.so.2").touch()
    assert find_nccl([str(system), str(wheel)]) == str(system / "libnccl.so.2")
    assert find_nccl([str(tmp_path)]) is None


def test_nccl_versions_and_statuses() -> None:
    assert version_text(22105) == "2.21.5"
    assert version_text(21903) == "2.19.3"
    assert version_text(2804) == "2.8.4"
    nccl = FakeNccl(FakeNode([cuda_bus(0x18)], FakeClock()))
    nccl.failures["ncclGetVersion"] = 5
    api = NcclApi(FakeLib(nccl))
    with pytest.raises(NcclError) as caught:
        api.version()
    assert (caught.value.function, caught.value.status) == ("ncclGetVersion", 5)
    assert str(caught.value).startswith("ncclGetVersion failed: invalid usage")


REAL_CUDART = Path("/usr/local/cuda/lib64/libcudart.so.13")


@pytest.mark.skipif(not REAL_CUDART.exists(), reason="no CUDA 13 runtime on this machine")
def test_a_real_runtime_has_every_peer_call() -> None:
    from validator.node.burnin.cuda_libs import load_library

    declare(load_library(str(REAL_CUDART)), CUDART_PEER_FUNCTIONS)


# ------------------------------------------------------------------ on a real GPU


@pytest.mark.gpu
def test_gpu_copies_are_measured_on_this_host() -> None:
    from validator.node.bandwidth.live import _host_facts

    facts = _host_facts()
    if not facts.gpus:
        pytest.skip("no GPU answered NVML")
    config = replace(InterconnectConfig(), copy_size_bytes=64 << 20, all_reduce_sizes=(1 << 20,))
    result = measure_live(facts, config)
    if result.error and re.search(r"libcudart|no CUDA device", result.error):
        pytest.skip(result.error)
    assert result.error is None, result.error
    for copies in result.gpus:  # type: ignore[union-attr]
        assert figure(copies.h2d) > 1.0
        assert figure(copies.d2h) > 1.0
        assert figure(copies.hbm) > figure(copies.h2d)
