"""The stage's plan from what the per-node stage read: each host's HCAs and nearest GPUs.

Pure: NodeFacts in, :class:`~validator.remote.cross_node_runner.CrossNodePlan` out.

- HCAs: those of ``facts.network`` with an ACTIVE port, in rail order (``mlx5_2`` before
  ``mlx5_10``). A host without one (or whose network was not read) gets no plan: the
  stage then names it unresolved ("no plan for it").
- Nearest GPU per HCA: from ``facts.gpudirect``'s ``nvidia-smi topo -m`` reading, the GPU
  whose nearest NIC it is by the closest link (PIX before PXB, PHB, NODE, SYS; the lower
  index on a tie). Where the topology was not read, or names none of the HCAs, HCA i is
  taken to sit by GPU i (:func:`~validator.remote.cross_node_runner.host_plan`'s guess,
  which the plan records as guessed). An HCA no GPU names nearest, on a host whose
  topology names others, runs from host memory (no ``--use_cuda``).
- Address: the inventory's (``ansible_host``), else the name.
- GPUs: how many the node has and its smallest GPU's memory (``memory.total``), which
  size NCCL's largest message (:func:`~validator.remote.cross_node_runner.nccl_largest_bytes`)
  and the Slurm jobs' ``--gres=gpu:N``; None where the facts do not say.
- Ranks a node for NCCL groups (``gpus_per_node``): one a GPU (nccl-tests ``-g 1``), the
  fewest GPUs any planned host's facts list, so every node of a group has a GPU for each
  rank; the plan's default (8) where no host's GPUs were read.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from validator.model import TOPO_LINKS, HostSpec, NodeResult, Verdict, known
from validator.model.gpudirect_facts import GpudirectFacts
from validator.model.network_facts import NetworkFacts
from validator.remote.cross_node_runner import CrossNodePlan, HostPlan, host_plan


def _rail_order(device: str) -> tuple[str, int]:
    match = re.fullmatch(r"(.*?)(\d+)", device)
    return (match.group(1), int(match.group(2))) if match else (device, -1)


def active_hcas(network: NetworkFacts | None) -> tuple[str, ...]:
    """The HCAs with an ACTIVE port, in rail order; () when the network was not read."""
    if network is None or not known(network.hcas):
        return ()
    active = [
        hca.device
        for hca in network.hcas  # type: ignore[union-attr]
        if any(known(port.state) and port.state == "ACTIVE" for port in hca.ports)
    ]
    return tuple(sorted(set(active), key=_rail_order))


def nearest_gpus(gpudirect: GpudirectFacts | None, hcas: Sequence[str]) -> dict[str, int] | None:
    """HCA -> the GPU nearest it, as the topology says; None when it names none of ``hcas``."""
    if gpudirect is None or not known(gpudirect.topology):
        return None
    rank = {link: i for i, link in enumerate(TOPO_LINKS)}
    best: dict[str, tuple[int, int]] = {}
    for link in gpudirect.topology.links:  # type: ignore[union-attr]
        nic = link.nearest_nic
        if nic is None or nic not in hcas:
            continue
        key = (rank.get(link.link or "", len(TOPO_LINKS)), link.index)
        if nic not in best or key < best[nic]:
            best[nic] = key
    return {nic: index for nic, (_, index) in best.items()} or None


def gpu_sizes(result: NodeResult) -> tuple[int | None, int | None]:
    """(how many GPUs, the smallest one's memory in MiB) from the facts; None where unread."""
    gpus = result.facts.gpus
    memory = [g.memory_total_mib for g in gpus if isinstance(g.memory_total_mib, int)]
    return (len(gpus) or None), (min(memory) if memory else None)


def plan_of(result: NodeResult, spec: HostSpec | None) -> HostPlan | None:
    """One host's plan from its facts; None when it has no active HCA."""
    hcas = active_hcas(result.facts.network)
    if not hcas:
        return None
    address = spec.address if spec is not None else result.hostname
    plan = host_plan(result.hostname, hcas, address, nearest_gpus(result.facts.gpudirect, hcas))
    count, memory = gpu_sizes(result)
    return dataclasses.replace(plan, gpu_count=count, gpu_memory_mib=memory)


def plan_from_facts(
    results: Sequence[NodeResult], hosts: Sequence[HostSpec], **options: object
) -> CrossNodePlan:
    """The stage's plan for every host whose facts name an active HCA.

    Args:
        results: the nodes as the per-node stage judged them (their facts are read).
        hosts: the inventory's hosts, for each one's address (by name).
        options: the plan's other fields (``duration_s`` ...), as
            :class:`~validator.remote.cross_node_runner.CrossNodePlan` takes them
            (``gpus_per_node`` given wins over the facts').
    """
    specs: Mapping[str, HostSpec] = {host.name: host for host in hosts}
    plans = [plan_of(result, specs.get(result.hostname)) for result in results]
    # Only the nodes that enter (certified alone) set the ranks: one that failed for a lost
    # GPU would make every group run fewer ranks than its nodes have HCAs, and read slow.
    counts = [
        p.gpu_count
        for result, p in zip(results, plans)
        if p is not None and p.gpu_count and result.verdict is Verdict.CERTIFIED
    ]
    if counts and "gpus_per_node" not in options:
        options = {**options, "gpus_per_node": min(counts)}
    return CrossNodePlan(tuple(p for p in plans if p is not None), **options)  # type: ignore[arg-type]


__all__ = ["active_hcas", "gpu_sizes", "nearest_gpus", "plan_from_facts", "plan_of"]
