"""The stage's plan read from the per-node facts (the simulated healthy node's, and variants)."""

from __future__ import annotations

import dataclasses

from tests.collecting import collect_simulated
from validator.model import HostSpec, NodeResult, Reason, Unavailable, Verdict
from validator.model.gpudirect_facts import GpuNicLink
from validator.remote.cross_node_facts_plan import active_hcas, plan_from_facts


def _result(name: str, scenario: str = "healthy-8x-h100-sxm") -> NodeResult:
    facts = dataclasses.replace(collect_simulated(scenario), hostname=name)
    return NodeResult(name, Verdict.CERTIFIED, facts, ())


def test_healthy_node_eight_rails_each_by_its_gpu() -> None:
    results = [_result("n1"), _result("n2")]
    plan = plan_from_facts(results, [HostSpec("n1", "10.0.0.1")], duration_s=3)
    assert [host.name for host in plan.hosts] == ["n1", "n2"]
    one = plan.host("n1")
    assert one.hcas == tuple(f"mlx5_{i}" for i in range(8))
    assert one.gpus == tuple(range(8))
    assert not one.guessed  # read from nvidia-smi topo -m, not assumed
    assert one.address == "10.0.0.1"
    assert plan.host("n2").address == "n2"  # no inventory entry: the name
    assert plan.duration_s == 3


def test_topology_decides_not_the_position() -> None:
    result = _result("n1")
    topology = result.facts.gpudirect.topology  # type: ignore[union-attr]
    # GPU3 is nearest mlx5_0 (PIX), GPU0 only through the host bridge: GPU3 is chosen.
    links = tuple(
        GpuNicLink(link.gpu, link.index, "mlx5_0", "PHB" if link.index == 0 else "PIX")
        if link.index in (0, 3)
        else link
        for link in topology.links  # type: ignore[union-attr]
    )
    gpudirect = dataclasses.replace(
        result.facts.gpudirect,  # type: ignore[type-var]
        topology=dataclasses.replace(topology, links=links),
    )
    facts = dataclasses.replace(result.facts, gpudirect=gpudirect)
    plan = plan_from_facts([dataclasses.replace(result, facts=facts)], [])
    host = plan.host("n1")
    assert host.gpus[0] == 3
    assert host.gpus[3] is None  # no GPU names mlx5_3 nearest any more: host memory


def test_without_topology_the_guess_is_marked() -> None:
    result = _result("n1")
    gone = Unavailable(Reason.NOT_MEASURED, "nvidia-smi topo -m not run")
    gpudirect = dataclasses.replace(result.facts.gpudirect, topology=gone)  # type: ignore[type-var]
    facts = dataclasses.replace(result.facts, gpudirect=gpudirect)
    host = plan_from_facts([dataclasses.replace(result, facts=facts)], []).host("n1")
    assert host.guessed
    assert host.gpus == tuple(range(8))


def test_no_active_port_no_plan() -> None:
    result = _result("n1")
    network = result.facts.network
    assert network is not None
    hcas = tuple(
        dataclasses.replace(
            hca, ports=tuple(dataclasses.replace(p, state="DOWN") for p in hca.ports)
        )
        if hca.device != "mlx5_10"
        else hca
        for hca in network.hcas  # type: ignore[union-attr]
    )
    down = dataclasses.replace(result.facts, network=dataclasses.replace(network, hcas=hcas))
    assert active_hcas(down.network) == ()
    assert plan_from_facts([dataclasses.replace(result, facts=down)], []).hosts == ()
    assert active_hcas(None) == ()


def test_rail_order_is_numeric() -> None:
    result = _result("n1")
    network = result.facts.network
    assert network is not None
    first = network.hcas[0]  # type: ignore[index]
    extra = tuple(dataclasses.replace(first, device=f"mlx5_{i}") for i in (10, 9))
    wider = dataclasses.replace(network, hcas=extra + tuple(network.hcas))  # type: ignore[arg-type]
    assert active_hcas(wider)[-3:] == ("mlx5_7", "mlx5_9", "mlx5_10")


def test_ranks_a_node_are_its_gpus() -> None:
    # One NCCL rank a GPU (nccl-tests -g 1): a group of 4-GPU nodes runs 4 ranks a node.
    eight = _result("n1")
    four = _result("n2")
    four = dataclasses.replace(
        four, facts=dataclasses.replace(four.facts, gpus=four.facts.gpus[:4])
    )
    assert plan_from_facts([eight, _result("n3")], []).gpus_per_node == 8
    assert plan_from_facts([eight, four], []).gpus_per_node == 4  # the fewest: every node
    assert plan_from_facts([eight, four], [], gpus_per_node=2).gpus_per_node == 2  # as given
    unread = dataclasses.replace(eight, facts=dataclasses.replace(eight.facts, gpus=()))
    assert plan_from_facts([unread], []).gpus_per_node == 8  # none read: the default


def test_a_node_that_failed_alone_does_not_set_the_ranks_of_those_that_passed() -> None:
    # It lost a GPU and failed alone, so it never enters the stage: were its 7 GPUs the
    # ranks a node, every healthy group would run 7 ranks on 8 HCAs and read slow.
    broken = _result("n4")
    broken = dataclasses.replace(
        broken,
        verdict=Verdict.NOT_CERTIFIED,
        facts=dataclasses.replace(broken.facts, gpus=broken.facts.gpus[:7]),
    )
    results = [_result("n1"), _result("n2"), _result("n3"), broken]
    assert plan_from_facts(results, []).gpus_per_node == 8
