"""The stage across nodes at 1,000 and 10,000 nodes: rounds, time per round, nodes held.

Drives the real planner (validator.remote.pair_plan.search) against modelled fabrics;
nothing is measured for real. A fabric answers a test with the slowest of its nodes and of
any slow link whose two ends are both in it, or with no result when a dead node is in it.
Fabrics: ``healthy``; ``slow-k`` (k slow nodes, drawn); ``slow-link`` (one link between two
healthy nodes that meet in a first-round test); ``dead`` (one node gives no result);
``mixed`` (k slow nodes, a slow link and a dead node at once).

Stages:

- ``rdma``: pairs of nodes (group size 2), each pair running ib_write_bw both ways and
  ib_write_lat one way on every HCA;
- ``nccl-G``: groups of G nodes (a power of two) running all_reduce_perf, alltoall_perf and
  the IB-only all_reduce (NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1); a failed group is halved.

How long a round takes (a round's tests run at once; it lasts as long as its slowest):

- ib_write_bw: 10 s a run (``-D 10``) plus 5 s for the server side to start, per HCA:
  the figures Azure's health checks use (Azure/azurehpc-health-checks,
  customTests/azure_ib_write_bw_non_gdr.nhc at 98231bc: IB_WRITE_BW_DURATION=10,
  SLEEP_TIME=5). HCAs one after another, as HPE's bwcheck measures "all of a node's NICs in
  series" (HewlettPackard/shs-docs, net_diags_bwcheck.md), 8 HCAs a node.
- ib_write_lat: 3 s per HCA (an assumption: a default run is a few thousand round trips of
  a few microseconds; the time is the connection set-up).
- launch over SSH or srun: 2 s a test (an assumption; bench/fanout.py measures ~0.2 s of
  SSH set-up per host on localhost).
- one NCCL run across nodes: 15 s plus 10 ms per node in the group (an assumption: srun
  step start, NCCL bootstrap and the size sweep of all_reduce_perf -b 512M -e 8G, as
  nebius/soperator#428 runs it); three runs a group.

Every figure is modelled; change the assumptions with the options.

    python bench/cross_node_scale.py                     # 1,000 and 10,000 nodes
    python bench/cross_node_scale.py --nodes 1000 --stages rdma nccl-8 --seed 3
    python bench/cross_node_scale.py --nodes 1000 --max-held 250   # in waves of 250 nodes
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from validator.remote.pair_plan import FIRST, Outcome, Test, search  # noqa: E402

HEALTHY = 390.0  # Gb/s: an NDR HCA's ib_write_bw with GPUDirect, near its 400 Gb/s line rate
FLOOR = 380.0  # Azure's check_ib_bw_gdr 380
SLOW_RANGE = (150.0, 370.0)
FABRICS = ("healthy", "slow-k", "slow-link", "dead", "mixed")


@dataclass(frozen=True)
class Timing:
    """What one test costs, in seconds (see the module's docstring for the sources)."""

    hcas: int = 8
    bw_run_s: float = 10.0
    server_wait_s: float = 5.0
    lat_run_s: float = 3.0
    launch_s: float = 2.0
    nccl_run_s: float = 15.0
    nccl_per_node_s: float = 0.01
    nccl_runs: int = 3

    def test_s(self, size: int, stage: str) -> float:
        """One test's wall time: a pair's RDMA runs, or a group's NCCL runs."""
        if stage == "rdma":
            # Bandwidth both ways (each node the sender once), latency one way.
            bandwidth = 2 * (self.bw_run_s + self.server_wait_s)
            return self.launch_s + self.hcas * (bandwidth + self.lat_run_s)
        return self.launch_s + self.nccl_runs * (self.nccl_run_s + self.nccl_per_node_s * size)


@dataclass
class Fabric:
    """A modelled fabric; the truth it hides, and the rounds it was asked."""

    slow: dict[str, float] = field(default_factory=dict)
    links: dict[frozenset[str], float] = field(default_factory=dict)
    dead: set[str] = field(default_factory=set)

    def figure(self, test: Test) -> float | None:
        """The slowest of the test's nodes and of the slow links inside it; None if one is dead."""
        if any(node in self.dead for node in test):
            return None
        figure = min([HEALTHY, *(self.slow.get(node, HEALTHY) for node in test)])
        members = set(test)
        for link, speed in self.links.items():
            if link <= members:
                figure = min(figure, speed)
        return figure

    def __call__(self, tests: Sequence[Test]) -> Mapping[Test, float | None]:
        return {test: self.figure(test) for test in tests}


def names(count: int) -> list[str]:
    """Node names, n00000 onwards."""
    return [f"n{index:05d}" for index in range(count)]


def _first_tests(nodes: Sequence[str], group_size: int) -> list[list[str]]:
    groups = []
    start = 0
    while len(nodes) - start >= 2:
        width = min(group_size, 1 << ((len(nodes) - start).bit_length() - 1))
        groups.append(list(nodes[start : start + width]))
        start += width
    return groups


def draw_fabric(
    kind: str, nodes: Sequence[str], group_size: int, rng: random.Random, slow_count: int
) -> Fabric:
    """A fabric of the kind asked, its faults drawn with ``rng``."""
    fabric = Fabric()
    if kind in ("slow-k", "mixed"):
        for node in rng.sample(list(nodes), slow_count):
            fabric.slow[node] = rng.uniform(*SLOW_RANGE)
    if kind in ("dead", "mixed"):
        fabric.dead.add(rng.choice([node for node in nodes if node not in fabric.slow]))
    if kind in ("slow-link", "mixed"):
        faulty = set(fabric.slow) | fabric.dead
        groups = _first_tests(nodes, group_size)
        clean = [group for group in groups if not faulty & set(group)]
        group = rng.choice(clean or groups)  # a slow node beside it may hide it: see check
        half = (len(group) + 1) // 2  # its two ends in different halves: the hard case
        left = [node for node in group[:half] if node not in faulty]
        right = [node for node in group[half:] if node not in faulty]
        if left and right:
            ends = (rng.choice(left), rng.choice(right))
            fabric.links[frozenset(ends)] = rng.uniform(*SLOW_RANGE)
    return fabric


def check(outcome: Outcome, fabric: Fabric, nodes: Sequence[str]) -> list[str]:
    """What the search got wrong against the fabric's truth (empty: all found, none blamed)."""
    problems = []
    if set(outcome.slow_nodes) != set(fabric.slow):
        problems.append(f"slow nodes {sorted(outcome.slow_nodes)} != {sorted(fabric.slow)}")
    if set(outcome.unreachable) != fabric.dead:
        problems.append(f"unreachable {sorted(outcome.unreachable)} != {sorted(fabric.dead)}")
    named = {frozenset(link) for link in outcome.slow_links}
    if not named <= set(fabric.links):
        problems.append(f"links named that are not slow: {sorted(map(sorted, named))}")
    for link in fabric.links:
        alone = any(
            result.purpose == FIRST
            and link <= set(result.nodes)
            and not set(result.nodes) & (set(fabric.slow) | fabric.dead)
            for result in outcome.results
        )
        if alone and link not in named:
            problems.append(f"link {sorted(link)} not named")
    healthy = set(nodes) - set(fabric.slow) - fabric.dead
    if set(outcome.good) != healthy:
        problems.append(f"{len(healthy - set(outcome.good))} healthy nodes not cleared")
    return problems


def group_size_of(stage: str) -> int:
    """The stage's first-round test size: 2 for rdma, G for nccl-G."""
    if stage == "rdma":
        return 2
    size = int(stage.split("-", 1)[1])
    if size < 2 or size & (size - 1):
        raise SystemExit(f"{stage}: a group size must be a power of two (nccl-8, nccl-1024)")
    return size


def simulate(
    count: int,
    stage: str,
    kind: str,
    *,
    seed: int,
    slow_count: int,
    timing: Timing,
    max_held: int | None = None,
) -> dict[str, object]:
    """One search over one drawn fabric: rounds, time per round, nodes held, and its errors."""
    rng = random.Random(f"{seed}/{count}/{stage}/{kind}")
    nodes = names(count)
    group_size = group_size_of(stage)
    fabric = draw_fabric(kind, nodes, group_size, rng, slow_count)
    started = time.perf_counter()
    outcome = search(nodes, fabric, FLOOR, group_size=group_size, max_held=max_held)
    planner_s = time.perf_counter() - started
    round_s = [max(timing.test_s(len(t), stage) for t in one.tests) for one in outcome.rounds]
    return {
        "nodes": count,
        "stage": stage,
        "fabric": kind,
        "max_held": max_held,
        "rounds": len(outcome.rounds),
        "log2_bound": math.ceil(math.log2(min(count, group_size))) + 4,
        "round_s": [round(value, 1) for value in round_s],
        "total_s": round(sum(round_s), 1),
        "out_of_service": [one.out_of_service for one in outcome.rounds],
        "max_out_of_service": outcome.max_out_of_service,
        "tests": len(outcome.results),
        "planner_s": round(planner_s, 3),
        "problems": check(outcome, fabric, nodes),
    }


def table(rows: Sequence[Mapping[str, object]]) -> str:
    """One line a run: rounds, time, the most nodes held at once, the planner's own time."""
    head = f"{'nodes':>6} {'stage':<10} {'fabric':<10} {'rounds':>6} {'round time s':<22} "
    head += f"{'total':>8} {'held max':>8} {'after r1':>8} {'plan s':>7}  ok"
    lines = [head]
    for row in rows:
        times = list(row["round_s"])  # type: ignore[call-overload]
        held = list(row["out_of_service"])  # type: ignore[call-overload]
        low, high = f"{min(times):.0f}", f"{max(times):.0f}"
        spread = low if low == high else f"{low}-{high}"
        later = max(held[1:], default=0)
        ok = "yes" if not row["problems"] else "NO: " + "; ".join(row["problems"])  # type: ignore[arg-type]
        lines.append(
            f"{row['nodes']:>6} {row['stage']:<10} {row['fabric']:<10} {row['rounds']:>6} "
            f"{spread + ' each':<22} {_minutes(sum(times)):>8} {row['max_out_of_service']:>8} "
            f"{later:>8} {row['planner_s']:>7}  {ok}"
        )
    return "\n".join(lines)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def main(argv: Sequence[str] | None = None) -> int:
    """Runs every size, stage and fabric asked; prints JSON, then the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--stages", nargs="+", default=["rdma", "nccl-8", "nccl-1024"])
    parser.add_argument("--fabrics", nargs="+", default=list(FABRICS), choices=FABRICS)
    parser.add_argument("--slow", type=int, default=5, help="slow nodes in slow-k and mixed")
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument(
        "--max-held", type=int, help="the most nodes out of service at once (first groups in waves)"
    )
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    for stage in args.stages:
        if args.max_held is not None and group_size_of(stage) > args.max_held:
            raise SystemExit(f"{stage}: a group does not fit under --max-held {args.max_held}")
    rows = [
        simulate(
            count,
            stage,
            kind,
            seed=args.seed,
            slow_count=args.slow,
            timing=Timing(),
            max_held=args.max_held,
        )
        for count in args.nodes
        for stage in args.stages
        for kind in args.fabrics
    ]
    text = json.dumps({"timing": dataclasses.asdict(Timing()), "runs": rows})
    if args.json_out:
        args.json_out.write_text(text + "\n", encoding="utf-8")
    print(table(rows))
    return 1 if any(row["problems"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
