"""The largest NCCL message across nodes, sized to fit the smallest GPU of the group.

nccl-tests allocates the send, receive and (with -c, the default) expected buffers of the
largest size on every GPU before NCCL's own: ``-e 16G`` needs about 48 GiB and more, so a
40 GB A100 or a 24 GB card ran out of memory (or nccl-tests cut the size itself) on
today's fixed ``-e 16G``.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.collecting import collect_simulated
from validator.model import NodeResult, Reason, Unavailable, Verdict
from validator.remote.cross_node_facts_plan import plan_from_facts
from validator.remote.cross_node_runner import (
    CrossNodePlan,
    HostPlan,
    nccl_argv,
    nccl_largest_bytes,
)

GIB = 1 << 30


@pytest.mark.parametrize(
    ("memory_mib", "largest"),
    [
        (81559, 16 * GIB),  # H100 80GB HBM3 (nvidia-smi's MiB): a quarter is 19.9 GiB
        (143771, 16 * GIB),  # H200: capped at 16G, the size the floors were stated for
        (40536, 8 * GIB),  # A100-SXM4-40GB: a quarter is 9.9 GiB
        (24564, 4 * GIB),  # a 24 GB card
        (16160, 2 * GIB),  # V100 16GB: a quarter is just under 4 GiB
        (3000, 1 * GIB),  # never below 1G
        (None, 16 * GIB),  # not read: the size as before
    ],
)
def test_largest_message_is_a_power_of_two_within_a_quarter(
    memory_mib: int | None, largest: int
) -> None:
    assert nccl_largest_bytes(memory_mib) == largest


def _host(name: str, memory_mib: int | None) -> HostPlan:
    return HostPlan(name, name, ("mlx5_0",), (0,), gpu_count=8, gpu_memory_mib=memory_mib)


def test_the_group_is_sized_by_its_smallest_gpu() -> None:
    plan = CrossNodePlan(hosts=(_host("a", 81559), _host("b", 40536)))
    argv = nccl_argv("all_reduce", plan, plan.hosts)
    assert argv[argv.index("-e") + 1] == "8G"
    alone = nccl_argv("all_reduce", plan, (plan.host("a"),))
    assert alone[alone.index("-e") + 1] == "16G"


def test_unknown_memory_keeps_the_plan_size() -> None:
    plan = CrossNodePlan(hosts=(_host("a", None), _host("b", None)), nccl_bytes=("8", "4G"))
    argv = nccl_argv("alltoall", plan, plan.hosts)
    assert argv[argv.index("-e") + 1] == "4G"
    # the plan's size is a ceiling: memory never raises it
    plan = CrossNodePlan(hosts=(_host("a", 81559),), nccl_bytes=("8", "4G"))
    argv = nccl_argv("alltoall", plan, plan.hosts)
    assert argv[argv.index("-e") + 1] == "4G"


def _result(name: str) -> NodeResult:
    facts = dataclasses.replace(collect_simulated("healthy-8x-h100-sxm"), hostname=name)
    return NodeResult(name, Verdict.CERTIFIED, facts, ())


def test_the_plan_reads_gpu_count_and_smallest_memory_from_facts() -> None:
    result = _result("n1")
    gpus = list(result.facts.gpus)
    gpus[5] = dataclasses.replace(gpus[5], memory_total_mib=40536)
    gpus[6] = dataclasses.replace(gpus[6], memory_total_mib=Unavailable(Reason.ERROR, "x"))
    facts = dataclasses.replace(result.facts, gpus=tuple(gpus))
    host = plan_from_facts([dataclasses.replace(result, facts=facts)], []).host("n1")
    assert host.gpu_count == 8
    assert host.gpu_memory_mib == 40536
    healthy = plan_from_facts([_result("n2")], []).host("n2")
    assert healthy.gpu_memory_mib is not None
    assert healthy.gpu_memory_mib > 80000
