"""The NCCL search judged with the floor for each group's size, or not judged at all.

A fake runner gives each group a busbw (no processes: the planner, the judge and the
verdicts are the real ones); the fabric is read from a catalog file written here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from validator.judge.cross_node_judge import NCCL_BANDWIDTH
from validator.judge.fabric_catalog import Fabric, load_fabric_catalog
from validator.model import (
    GpuFacts,
    NcclGroupResult,
    NodeFacts,
    NodeResult,
    NvmlStatus,
    RdmaPairResult,
    Severity,
    Verdict,
)
from validator.remote.cross_node_runner import CrossNodePlan, Group, HostPlan, Pair
from validator.service.cross_node_service import StageOptions, run_cross_node_stage

_FIGURE = "{value: 380, source: 'https://example.org/x'}"


def _fabric(tmp_path: Path, rows: Sequence[tuple[int, float]]) -> Fabric:
    lines = "".join(
        f"      - {{min_nodes: {n}, largest_min_gib: 4, largest_max_gib: 16, value: {v},"
        f" source: 'https://example.org/{n}'}}\n"
        for n, v in rows
    )
    path = tmp_path / "fabrics.yaml"
    path.write_text(
        "fabrics:\n  - id: ndr\n    label: NDR\n    link: infiniband\n    rate_gbit_s: 400\n"
        f"    ib_write_bw_gdr_min_gbit_s: {_FIGURE}\n    ib_write_lat_max_us: {_FIGURE}\n"
        f"    nccl_alltoall_min_gbs_per_hca: {_FIGURE}\n"
        f"    nccl_all_reduce_min_gbs_per_hca:\n{lines}node_references: []\n",
        encoding="utf-8",
    )
    return load_fabric_catalog(str(path)).fabric("ndr")


class FakeRunner:
    """Each group's all-reduce busbw per HCA from ``busbw(group)``; every group recorded."""

    def __init__(self, busbw: Callable[[Group], float]) -> None:
        self.busbw = busbw
        self.groups: list[Group] = []

    def nccl_unavailable(self) -> str | None:
        return None

    def rdma_round(
        self, pairs: Sequence[Pair], plan: CrossNodePlan, deadline: float
    ) -> dict[Pair, tuple[RdmaPairResult, ...]]:
        raise AssertionError("no RDMA here")

    def nccl_round(
        self, groups: Sequence[Group], plan: CrossNodePlan, deadline: float
    ) -> dict[Group, tuple[NcclGroupResult, ...]]:
        self.groups += groups
        return {
            group: (
                NcclGroupResult(
                    hosts=group,
                    ranks=8 * len(group),
                    collective="all_reduce",
                    largest_busbw_gb_s=self.busbw(group),
                    completed=True,
                ),
            )
            for group in groups
        }


def _node(name: str) -> NodeResult:
    gpus = tuple(GpuFacts(index=i, name="NVIDIA H100 80GB HBM3") for i in range(8))
    facts = NodeFacts(name, source="simulate", nvml_status=NvmlStatus.OK, gpus=gpus)
    return NodeResult(name, Verdict.CERTIFIED, facts, (), sku="h100-sxm", summary="alone")


def _plan(names: Sequence[str], memory_mib: int | None = None) -> CrossNodePlan:
    return CrossNodePlan(
        hosts=tuple(
            HostPlan(n, n, ("mlx5_0",), (0,), gpu_count=8, gpu_memory_mib=memory_mib) for n in names
        )
    )


def _run(
    fabric: Fabric, runner: FakeRunner, names: Sequence[str], memory_mib: int | None = None
) -> tuple[dict[str, NodeResult], list[int]]:
    judged, stage = run_cross_node_stage(
        [_node(n) for n in names],
        runner,
        ("nccl",),
        fabric,
        _plan(names, memory_mib),
        deadline=time.monotonic() + 60,
        options=StageOptions(nccl_group=4),
    )
    floors = sorted({int(t.floor) * 100 + len(t.hosts) for t in stage.tests})
    return {r.hostname: r for r in judged}, floors


NAMES = ["n1", "n2", "n3", "n4"]


def test_each_group_is_held_to_the_floor_for_its_size(tmp_path: Path) -> None:
    fabric = _fabric(tmp_path, [(2, 50), (4, 40)])
    # 45 per HCA: above the 4-node floor (40), below the 2-node floor (50)
    judged, floors = _run(fabric, FakeRunner(lambda group: 45.0), NAMES)
    assert floors == [4004]  # one group of four, held to 40
    assert all(r.verdict is Verdict.CERTIFIED for r in judged.values())
    # a slow whole is bisected, and its pairs are held to the two-node floor
    runner = FakeRunner(lambda group: 30.0 if len(group) == 4 else 45.0)
    judged, floors = _run(fabric, runner, NAMES)
    assert floors == [4004, 5002]
    assert not any(r.verdict is Verdict.CERTIFIED for r in judged.values())


def test_a_group_size_without_a_floor_row_is_unknown_and_not_run(tmp_path: Path) -> None:
    fabric = _fabric(tmp_path, [(4, 40)])  # nothing for the pairs a bisection runs
    runner = FakeRunner(lambda group: 99.0)
    judged, _ = _run(fabric, runner, NAMES)
    assert runner.groups == []
    for result in judged.values():
        assert result.verdict is Verdict.UNKNOWN
        (finding,) = [f for f in result.findings if f.check == NCCL_BANDWIDTH]
        assert finding.severity is Severity.UNKNOWN
        assert "no NCCL all-reduce floor for groups of 2 nodes" in finding.message


def test_a_largest_message_the_floor_does_not_hold_for_is_unknown(tmp_path: Path) -> None:
    runner = FakeRunner(lambda group: 99.0)
    # 16 GB GPUs: -e 2G, below the 4-16 GiB the packaged floors hold for
    judged, _ = _run(load_fabric_catalog().fabric("ndr-400-ib"), runner, NAMES, 16160)
    assert runner.groups == []
    for result in judged.values():
        assert result.verdict is Verdict.UNKNOWN
        (finding,) = [f for f in result.findings if f.check == NCCL_BANDWIDTH]
        assert finding.severity is Severity.UNKNOWN
        assert "2G" in finding.message
    # 80 GB GPUs: -e 16G, judged (and passed at 99 GB/s per HCA)
    judged, _ = _run(load_fabric_catalog().fabric("ndr-400-ib"), runner, NAMES, 81559)
    assert all(r.verdict is Verdict.CERTIFIED for r in judged.values())
