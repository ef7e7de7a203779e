"""The pairing and bisection planner against modelled fabrics (validator/remote/pair_plan.py).

A fabric here answers a test as a real one would: the slowest of its nodes, and of any
slow link whose two ends are both in the test; no result when a dead node is in it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from validator.remote.pair_plan import (
    CROSS,
    FIRST,
    HALF,
    PEER,
    Outcome,
    Test,
    is_power_of_two,
    plan_groups,
    rounds_bound,
    search,
)

HEALTHY = 390.0  # Gb/s, an NDR HCA's ib_write_bw with GPUDirect
FLOOR = 380.0
SLOW = 200.0


@dataclass
class Fabric:
    """A modelled fabric: slow nodes, slow links, dead nodes; it keeps every round asked."""

    slow: dict[str, float] = field(default_factory=dict)
    links: dict[frozenset[str], float] = field(default_factory=dict)
    dead: set[str] = field(default_factory=set)
    rounds: list[tuple[Test, ...]] = field(default_factory=list)

    def figure(self, test: Test) -> float | None:
        if any(node in self.dead for node in test):
            return None
        figures = [HEALTHY, *(self.slow.get(node, HEALTHY) for node in test)]
        members = set(test)
        figures += [speed for link, speed in self.links.items() if link <= members]
        return min(figures)

    def __call__(self, tests: Sequence[Test]) -> Mapping[Test, float | None]:
        seen = [node for test in tests for node in test]
        assert len(seen) == len(set(seen)), "a round's tests share a node"
        self.rounds.append(tuple(tests))
        return {test: self.figure(test) for test in tests}


def names(count: int) -> list[str]:
    return [f"n{index:03d}" for index in range(count)]


def peers_checked(outcome: Outcome, nodes: Sequence[str]) -> None:
    """Every good node met the floor in a test beside nodes that are good."""
    good = set(outcome.good)
    for node in outcome.good:
        assert any(
            result.passed and node in result.nodes and set(result.nodes) <= good | {node}
            for result in outcome.results
        ), node
    assert good <= set(nodes)


def test_a_healthy_fleet_is_all_good_in_one_round() -> None:
    fabric = Fabric()
    outcome = search(names(10), fabric, FLOOR)
    assert outcome.good == tuple(names(10))
    assert len(outcome.rounds) == 1
    assert outcome.rounds[0].purposes == (FIRST,) * 5
    assert outcome.rounds[0].out_of_service == 10
    assert (outcome.slow_nodes, outcome.slow_links, outcome.unreachable) == ((), (), ())
    assert outcome.unresolved == ()
    peers_checked(outcome, names(10))


def test_a_slow_node_is_named_and_its_first_peer_cleared() -> None:
    fabric = Fabric(slow={"n004": SLOW})
    outcome = search(names(10), fabric, FLOOR)
    assert outcome.slow_nodes == ("n004",)
    assert "n005" in outcome.good  # its first-round partner, cleared by a known-good peer
    assert set(outcome.good) == set(names(10)) - {"n004"}
    assert outcome.slow_links == ()
    assert len(outcome.rounds) == 2
    second = outcome.rounds[1]
    assert second.purposes == (PEER, PEER)
    assert second.out_of_service == 4  # only the suspects and their peers
    for test in second.tests:
        other = [node for node in test if node not in {"n004", "n005"}]
        assert other
        assert other[0] in outcome.good
    peers_checked(outcome, names(10))


def test_a_slow_link_is_named_not_its_two_nodes() -> None:
    fabric = Fabric(links={frozenset({"n002", "n003"}): SLOW})
    outcome = search(names(8), fabric, FLOOR)
    assert outcome.slow_links == (("n002", "n003"),)
    assert outcome.slow_nodes == ()
    assert set(outcome.good) == set(names(8))


def test_a_dead_node_is_named_unreachable_and_never_good() -> None:
    fabric = Fabric(dead={"n006"})
    outcome = search(names(8), fabric, FLOOR)
    assert outcome.unreachable == ("n006",)
    assert "n006" not in outcome.good
    assert outcome.slow_nodes == ()
    assert set(outcome.good) == set(names(8)) - {"n006"}
    # Round 2 meets a known-good peer with no result: that peer may have died, so it is in
    # question until it meets the floor again (round 3), while n006 meets a second peer.
    assert len(outcome.rounds) == 3
    second, third = outcome.rounds[1], outcome.rounds[2]
    (first_peer,) = [n for t in second.tests if "n006" in t for n in t if n != "n006"]
    assert any(first_peer in test for test in third.tests)
    assert outcome.results[-1].round == 3  # named after round 3: nothing more is measured


@pytest.mark.parametrize("count", [3, 5, 7, 9, 33])
def test_an_odd_node_out_meets_a_known_good_peer(count: int) -> None:
    fabric = Fabric()
    outcome = search(names(count), fabric, FLOOR)
    assert outcome.good == tuple(names(count))
    assert len(outcome.rounds) == 2
    (lone,) = outcome.rounds[1].tests
    assert lone[0] == names(count)[-1]
    assert lone[1] in {node for test in outcome.rounds[0].tests for node in test}


def test_a_lone_node_meets_a_reference_node_in_the_first_round() -> None:
    fabric = Fabric()
    outcome = search(names(3), fabric, FLOOR, reference=["ref0"])
    assert len(outcome.rounds) == 1
    assert ("n002", "ref0") in outcome.rounds[0].tests
    assert outcome.good == tuple(names(3))  # the reference node is not reported as measured


def test_two_slow_nodes_paired_together_are_both_named() -> None:
    fabric = Fabric(slow={"n000": SLOW, "n001": SLOW})
    outcome = search(names(8), fabric, FLOOR)
    assert set(outcome.slow_nodes) == {"n000", "n001"}
    assert set(outcome.good) == set(names(8)) - {"n000", "n001"}
    assert len(outcome.rounds) == 3  # each needs two known-good peers; the other is not one


def test_several_slow_nodes_a_link_and_a_dead_node_at_once() -> None:
    nodes = names(40)
    fabric = Fabric(
        slow={"n003": SLOW, "n017": 300.0, "n030": SLOW},
        links={frozenset({"n010", "n011"}): SLOW},
        dead={"n021"},
    )
    outcome = search(nodes, fabric, FLOOR)
    assert set(outcome.slow_nodes) == {"n003", "n017", "n030"}
    assert outcome.slow_links == (("n010", "n011"),)
    assert outcome.unreachable == ("n021",)
    assert set(outcome.good) == set(nodes) - {"n003", "n017", "n030", "n021"}
    assert len(outcome.rounds) <= 3


def test_no_pair_is_measured_twice() -> None:
    nodes = names(30)
    rng = random.Random(7)  # noqa: S311 - repeatable fabrics, not secrets
    for _ in range(20):
        fabric = Fabric(slow=dict.fromkeys(rng.sample(nodes, 4), SLOW), dead={rng.choice(nodes)})
        outcome = search(nodes, fabric, FLOOR)
        pairs = [frozenset(result.nodes) for result in outcome.results if len(result.nodes) == 2]
        assert len(pairs) == len(set(pairs))


def test_a_node_met_only_by_slow_nodes_is_left_undecided_not_blamed() -> None:
    fabric = Fabric(slow={"n000": SLOW, "n001": SLOW})
    outcome = search(names(2), fabric, FLOOR)
    assert outcome.slow_nodes == ()
    assert outcome.good == ()
    assert {nodes for nodes, _ in outcome.unresolved} == {("n000",), ("n001",)}
    assert all("known-good" in why for _, why in outcome.unresolved)


def test_groups_are_powers_of_two_and_follow_the_blocks() -> None:
    nodes = names(13)
    blocks = {node: ("leaf-a" if int(node[1:]) % 2 else "leaf-b") for node in nodes}
    groups, lone = plan_groups(nodes, 4, blocks)
    assert [len(group) for group in groups] == [4, 4, 4]
    assert lone == ["n011"]
    assert all(is_power_of_two(len(group)) for group in groups)
    assert {blocks[node] for node in groups[0]} == {"leaf-b"}  # a first group under one leaf
    pairs, lone = plan_groups(nodes, 2, blocks)
    assert all(len({blocks[n] for n in pair}) == 1 for pair in pairs[:3])
    with pytest.raises(ValueError, match="not a power of two"):
        plan_groups(nodes, 6)
    with pytest.raises(ValueError, match="named twice"):
        plan_groups(["a", "a"], 2)


def test_a_suspect_meets_a_peer_from_its_own_block_first() -> None:
    nodes = names(8)
    blocks = {node: ("leaf-a" if node < "n004" else "leaf-b") for node in nodes}
    fabric = Fabric(slow={"n005": SLOW})
    outcome = search(nodes, fabric, FLOOR, blocks=blocks)
    assert outcome.slow_nodes == ("n005",)
    for test in outcome.rounds[1].tests:
        assert len({blocks[node] for node in test}) == 1


def test_a_slow_group_is_halved_down_to_the_slow_node() -> None:
    nodes = names(64)
    fabric = Fabric(slow={"n037": SLOW})
    outcome = search(nodes, fabric, FLOOR, group_size=64)
    assert outcome.slow_nodes == ("n037",)
    assert set(outcome.good) == set(nodes) - {"n037"}
    purposes = [set(one.purposes) for one in outcome.rounds]
    assert purposes[0] == {FIRST}
    assert HALF in purposes[1]
    assert len(outcome.rounds) <= math.ceil(math.log2(64)) + 2
    # out of service: the whole group once, then only the halves still in question
    assert [one.out_of_service for one in outcome.rounds][:3] == [64, 64, 32]


def test_a_link_between_two_halves_is_found_by_crossing() -> None:
    nodes = names(32)
    fabric = Fabric(links={frozenset({"n003", "n029"}): SLOW})
    outcome = search(nodes, fabric, FLOOR, group_size=32)
    assert outcome.slow_links == (("n003", "n029"),)
    assert outcome.slow_nodes == ()
    assert set(outcome.good) == set(nodes)
    assert any(CROSS in one.purposes for one in outcome.rounds)
    assert len(outcome.rounds) <= math.ceil(math.log2(32)) + 2


def test_a_dead_node_in_a_group_is_cornered_and_named() -> None:
    nodes = names(16)
    fabric = Fabric(dead={"n009"})
    outcome = search(nodes, fabric, FLOOR, group_size=16)
    assert outcome.unreachable == ("n009",)
    assert set(outcome.good) == set(nodes) - {"n009"}


def test_a_floor_per_size_is_used_for_each_test() -> None:
    # NCCL's bus bandwidth across nodes falls as a group grows: the floor says by how much.
    nodes = names(8)

    def measure(tests: Sequence[Test]) -> dict[Test, float | None]:
        return {test: 50.0 - len(test) for test in tests}

    outcome = search(nodes, measure, lambda size: 50.0 - size, group_size=8)
    assert outcome.good == tuple(nodes)
    strict = search(nodes, measure, 49.0, group_size=8)  # even a pair falls short
    assert strict.good == ()


def test_no_result_and_nonsense_figures_are_never_a_pass() -> None:
    nodes = names(4)

    def measure(tests: Sequence[Test]) -> dict[Test, object]:
        return {tests[0]: float("nan"), tests[1]: "fast"} if len(tests) > 1 else {}

    outcome = search(nodes, measure, FLOOR)  # type: ignore[arg-type]
    assert outcome.good == ()


def test_a_known_good_node_that_dies_loses_its_standing() -> None:
    nodes = names(8)
    fabric = Fabric(slow={"n000": SLOW})
    calls = 0

    def measure(tests: Sequence[Test]) -> Mapping[Test, float | None]:
        nonlocal calls
        calls += 1
        if calls == 2:  # every known-good peer of the second round dies at once
            fabric.dead.update(
                node for test in tests for node in test if node not in {"n000", "n001"}
            )
        return fabric(tests)

    outcome = search(nodes, measure, FLOOR)
    dead = fabric.dead
    assert not dead & set(outcome.good)
    assert "n001" not in outcome.slow_nodes  # the live suspect is not blamed for its dead peer


def test_the_rounds_stop_at_the_bound_asked() -> None:
    fabric = Fabric(slow={"n000": SLOW, "n001": SLOW})
    outcome = search(names(8), fabric, FLOOR, max_rounds=1)
    assert len(outcome.rounds) == 1
    assert {nodes for nodes, _ in outcome.unresolved} == {("n000",), ("n001",)}
    assert all("rounds ran out" in why for _, why in outcome.unresolved)


@pytest.mark.parametrize("group_size", [2, 8, 64])
def test_random_fabrics_find_every_fault_and_blame_no_healthy_node(group_size: int) -> None:
    rng = random.Random(20261206 + group_size)  # noqa: S311 - repeatable fabrics, not secrets
    for _ in range(60):
        count = rng.randint(6, 120)
        nodes = names(count)
        faulty = rng.sample(nodes, rng.randint(0, 3))
        slow = {node: rng.uniform(100.0, 370.0) for node in faulty[:-1]}
        dead = set(faulty[-1:]) if rng.random() < 0.5 else set()
        slow.update({node: SLOW for node in faulty[-1:] if node not in dead})
        healthy = [node for node in nodes if node not in slow and node not in dead]
        links = {}
        if rng.random() < 0.5 and len(healthy) >= 2:
            links[frozenset(rng.sample(healthy, 2))] = SLOW
        fabric = Fabric(slow=slow, links=links, dead=dead)
        outcome = search(nodes, fabric, FLOOR, group_size=group_size)
        assert set(outcome.slow_nodes) == set(slow), (count, slow, links, dead)
        assert set(outcome.unreachable) == dead
        # every link named is real; one must be named where it alone slowed a first test
        # (pairs meet few links; a slow node in the same group may hide one)
        named = {frozenset(link) for link in outcome.slow_links}
        assert named <= set(links)
        alone = {
            link
            for link in links
            for r in outcome.results
            if r.purpose == FIRST and link <= set(r.nodes) and not set(r.nodes) & set(faulty)
        }
        assert alone <= named
        assert set(outcome.good) == set(healthy)
        assert len(outcome.rounds) <= rounds_bound(count, group_size), outcome.rounds
        peers_checked(outcome, nodes)


def test_the_pair_matrix_holds_each_pair_measured_once_with_its_figure() -> None:
    fabric = Fabric(slow={"n001": SLOW}, dead={"n004"})
    outcome = search(names(6), fabric, FLOOR)
    matrix = outcome.pair_matrix()
    assert matrix[("n000", "n001")] == SLOW
    assert matrix[("n002", "n003")] == HEALTHY
    assert matrix[("n004", "n005")] is None
    pairs = {tuple(sorted(r.nodes)) for r in outcome.results if len(r.nodes) == 2}
    assert set(matrix) == pairs


@pytest.mark.parametrize(("group_size", "cap"), [(2, 10), (8, 16), (8, 8)])
def test_a_cap_on_nodes_held_runs_the_fleet_in_waves(group_size: int, cap: int) -> None:
    nodes = names(41)
    fabric = Fabric(
        slow={"n003": SLOW, "n030": SLOW}, links={frozenset({"n016", "n020"}): SLOW}, dead={"n025"}
    )
    outcome = search(nodes, fabric, FLOOR, group_size=group_size, max_held=cap)
    assert all(one.out_of_service <= cap for one in outcome.rounds)
    assert set(outcome.slow_nodes) == {"n003", "n030"}
    assert outcome.unreachable == ("n025",)
    assert set(outcome.good) == set(nodes) - {"n003", "n030", "n025"}
    firsts = [one.number for one in outcome.rounds if FIRST in one.purposes]
    assert len(firsts) >= len(nodes) // cap  # waves, not the fleet at once
    uncapped = search(nodes, Fabric(), FLOOR, group_size=group_size)
    assert uncapped.max_out_of_service == 40


def test_a_cap_below_the_group_size_is_refused() -> None:
    with pytest.raises(ValueError, match="raise the cap or lower the group size"):
        search(names(8), Fabric(), FLOOR, group_size=8, max_held=4)


def test_a_fabric_where_nothing_passes_stops_early_and_names_no_one() -> None:
    nodes = names(20)
    fabric = Fabric(slow=dict.fromkeys(nodes, SLOW))
    outcome = search(nodes, fabric, FLOOR)
    assert len(outcome.rounds) <= 3
    assert (outcome.good, outcome.slow_nodes, outcome.unreachable) == ((), (), ())
    assert {nodes for nodes, _ in outcome.unresolved} == {(node,) for node in nodes}


def test_one_node_alone_or_none_at_all() -> None:
    assert search([], Fabric(), FLOOR).rounds == ()
    alone = search(["n000"], Fabric(), FLOOR)
    assert alone.rounds == ()
    assert alone.unresolved == ((("n000",), "never measured: no known-good peer was free"),)
    with_reference = search(["n000"], Fabric(), FLOOR, reference=["ref"])
    assert with_reference.good == ("n000",)
