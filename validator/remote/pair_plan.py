"""Which nodes meet across the fabric, round by round, until the slow node or link is named.

A pure planner for the stage across nodes: the caller measures, this module chooses what
to measure next. Every round is a set of disjoint tests (a test: two nodes for
``ib_write_bw``, or a group of nodes for an NCCL collective), run at once, so a round
takes nodes out of service only while it runs: :attr:`Round.out_of_service`.

How a fleet is searched (:func:`search`):

- Round 1 splits the nodes into groups of ``group_size`` (a power of two: 2 for pairs),
  in order of their topology block (leaf switch, rail, Slurm block) when one is known,
  so a first test stays under one switch and measures the nodes and their cables rather
  than the spine under load. What does not fill a group forms smaller power-of-two
  groups; a lone node is paired with a known-good peer in the next round.
- A test that meets the floor proves every node in it good: a known-good peer.
- A failed group (slow, or no result) is halved; both halves run in the next round, so
  several slow nodes are chased at once and a single one is cornered in about log2(n)
  rounds. When both halves meet the floor but the whole did not, the fault lies between
  them (a link): the halves' halves are crossed, two disjoint groups a round, so each
  round halves both sides again (:class:`_Cross`).
- A failed pair leaves its two nodes suspect. Each suspect meets a known-good peer it has
  not met before (same block first). A suspect that failed with two distinct known-good
  peers is named: unreachable when it never gave a result, else slow. A pair that failed
  while both of its nodes met the floor elsewhere is named as a slow link, not as either
  node.
- A node that gives no result is never counted good; a known-good node beside which a later
  test gave no result is in question (it may have died after it passed) until it meets the
  floor again or its partner is named unreachable.
- Where no known-good peer is free, suspects meet one another, a few times at most; what
  stays undecided is reported as such, with why, never as good.
- ``max_held`` caps the nodes a round holds: the first groups then run in waves.

The measuring is a callback: ``measure(tests) -> {test: figure or None}`` for one round (a
figure is GB/s or Gb/s, whichever unit the floor is in; a test left out, or None, means
no result). Plain types only (node names as ``str``), so the orchestration over SSH or
Slurm and the tests' modelled fabrics drive it alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional, Union

Test = tuple[str, ...]
"""The nodes of one test, in the order they were planned."""
Measure = Callable[[Sequence[Test]], Mapping[Test, Optional[float]]]
"""Runs one round's tests at once: each test's figure, None (or left out) for no result."""
Floor = Union[float, Callable[[int], float]]
"""The figure a test must reach: one number, or one per test size (nodes in the test)."""

FIRST, HALF, CROSS, PEER = "first", "half", "cross", "peer"
"""Why a test was planned: the first round, a half of a failed group, crossed halves, a
suspect against a known-good peer."""
DEFAULT_MAX_ROUNDS = 64
SUSPECT_MEETINGS = 3
"""Failed pairs after which a suspect waits for a known-good peer rather than meet others."""


@dataclass(frozen=True)
class Result:
    """One test's outcome: its nodes, its figure (None: no result), its round, and why."""

    nodes: Test
    figure: float | None
    round: int
    purpose: str
    passed: bool


@dataclass(frozen=True)
class Round:
    """One round: its tests, run at once, and why each was planned."""

    number: int
    tests: tuple[Test, ...]
    purposes: tuple[str, ...]

    @property
    def out_of_service(self) -> int:
        """How many nodes this round holds at once (every node in one of its tests)."""
        return sum(len(test) for test in self.tests)


@dataclass(frozen=True)
class Outcome:
    """What the search found.

    Attributes:
        good: nodes that met the floor, in the input's order (reference nodes left out).
        slow_nodes: nodes slow with two distinct known-good peers.
        slow_links: pairs slow together while each node met the floor elsewhere.
        unreachable: nodes that gave no result with two distinct known-good peers.
        unresolved: nodes (or a group) the search could not decide, with why.
        rounds: every round, in order.
        results: every test's outcome, in order.
    """

    good: tuple[str, ...]
    slow_nodes: tuple[str, ...]
    slow_links: tuple[tuple[str, str], ...]
    unreachable: tuple[str, ...]
    unresolved: tuple[tuple[Test, str], ...]
    rounds: tuple[Round, ...]
    results: tuple[Result, ...]

    @property
    def max_out_of_service(self) -> int:
        """The most nodes any one round held at once."""
        return max((one.out_of_service for one in self.rounds), default=0)

    def pair_matrix(self) -> dict[tuple[str, str], float | None]:
        """Each measured pair's latest figure (its names sorted): the report's matrix."""
        matrix: dict[tuple[str, str], float | None] = {}
        for result in self.results:
            if len(result.nodes) == 2:
                first, second = sorted(result.nodes)
                matrix[(first, second)] = result.figure
        return matrix


def is_power_of_two(size: int) -> bool:
    """Whether ``size`` is 2, 4, 8, ... (a group size the planner accepts)."""
    return size >= 2 and size & (size - 1) == 0


def block_order(nodes: Sequence[str], blocks: Mapping[str, str] | None = None) -> list[str]:
    """The nodes with each topology block's together, blocks in first-seen order."""
    if not blocks:
        return list(nodes)
    seen: dict[str, list[str]] = {}
    for node in nodes:
        seen.setdefault(blocks.get(node, ""), []).append(node)
    return [node for members in seen.values() for node in members]


def plan_groups(
    nodes: Sequence[str], size: int, blocks: Mapping[str, str] | None = None
) -> tuple[list[Test], list[str]]:
    """The first round: groups of ``size``, then power-of-two groups of what is left.

    Returns:
        The groups (disjoint, each of a power-of-two size) and the lone node left over
        (at most one), which the search pairs with a known-good peer next.

    Raises:
        ValueError: ``size`` is not a power of two, or a node is named twice.
    """
    if not is_power_of_two(size):
        raise ValueError(f"group size {size} is not a power of two (2, 4, 8, ...): choose one")
    if len(set(nodes)) != len(nodes):
        raise ValueError("a node is named twice: name each node once")
    ordered = block_order(nodes, blocks)
    groups: list[Test] = []
    start = 0
    while len(ordered) - start >= 2:
        width = min(size, 1 << ((len(ordered) - start).bit_length() - 1))
        groups.append(tuple(ordered[start : start + width]))
        start += width
    return groups, ordered[start:]


def _halves(nodes: Test) -> tuple[Test, Test]:
    middle = (len(nodes) + 1) // 2
    return nodes[:middle], nodes[middle:]


@dataclass
class _Halve:
    """A failed group: its halves run next; a failed half is halved again."""

    group: Test
    halves: tuple[Test, Test] = field(init=False)

    def __post_init__(self) -> None:
        self.halves = _halves(self.group)

    def tests(self, usable: Callable[[str], bool]) -> list[Test]:
        return [half for half in self.halves if len(half) >= 2 and all(map(usable, half))]


@dataclass
class _Cross:
    """A fault between two sides that each met the floor: block pairs, one of which holds it.

    The candidates pair distinct blocks of one side with distinct blocks of the other, so
    crossing each pair's halves (X1 with Y1, X2 with Y2) gives disjoint groups: one round.
    A failed group becomes the only candidate; if none failed, the other crossings (X1 with
    Y2, X2 with Y1) are candidates, still disjoint. Either way every block halves.
    """

    whole: Test
    candidates: list[tuple[Test, Test]] = field(default_factory=list)
    found: bool = False

    def planned(self) -> list[Test]:
        """Each candidate's crossed tests: X1 with Y1, and X2 with Y2 where both exist."""
        out = []
        for left, right in self.candidates:
            lx, rx = _halves(left)
            ly, ry = _halves(right)
            out.append(lx + ly)
            if rx and ry:
                out.append(rx + ry)
        return out


@dataclass
class _State:
    """What the search knows: every result, who passed when, and who is named."""

    floor: Callable[[int], float]
    last_pass: dict[str, int] = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)
    met: set[frozenset[str]] = field(default_factory=set)
    pair_fails: dict[str, list[Result]] = field(default_factory=dict)
    none_tests: dict[str, list[Result]] = field(default_factory=dict)
    slow: dict[str, None] = field(default_factory=dict)
    unreachable: dict[str, None] = field(default_factory=dict)
    unmeasured: dict[str, None] = field(default_factory=dict)
    unresolved: list[tuple[Test, str]] = field(default_factory=list)

    def record(self, nodes: Test, figure: float | None, number: int, purpose: str) -> Result:
        """Keeps one test's outcome and what it proves about its nodes."""
        passed = figure is not None and figure >= self.floor(len(nodes))
        result = Result(nodes, figure, number, purpose, passed)
        self.results.append(result)
        for node in nodes:
            self.unmeasured.pop(node, None)
            if passed:
                self.last_pass[node] = number
            elif figure is None:
                self.none_tests.setdefault(node, []).append(result)
        if len(nodes) == 2:
            self.met.add(frozenset(nodes))
            if not passed:
                for node in nodes:
                    self.pair_fails.setdefault(node, []).append(result)
        return result

    def named(self, node: str) -> bool:
        """Whether the node is already named slow or unreachable."""
        return node in self.slow or node in self.unreachable

    def good(self, node: str) -> bool:
        """Met the floor, and every test since that gave no result held a node named unreachable.

        A known-good node beside which a test gave no result may have died since it passed:
        it is in question until it meets the floor again, or its partner is named.
        """
        passed = self.last_pass.get(node)
        if passed is None or self.named(node):
            return False
        return all(
            result.round <= passed or any(other in self.unreachable for other in result.nodes)
            for result in self.none_tests.get(node, ())
        )

    def good_peers_failed(self, node: str) -> set[str]:
        """Known-good nodes this node failed a pair with."""
        peers: set[str] = set()
        for result in self.pair_fails.get(node, ()):
            peers.update(other for other in result.nodes if other != node and self.good(other))
        return peers

    def name_suspects(self) -> None:
        """Names every suspect that failed with two distinct known-good peers."""
        for node, fails in self.pair_fails.items():
            if self.named(node) or self.good(node) or len(self.good_peers_failed(node)) < 2:
                continue
            if all(result.figure is None for result in fails):
                self.unreachable[node] = None
            else:
                self.slow[node] = None

    def suspects(self) -> list[str]:
        """Nodes that need a known-good peer: a failed pair, or never measured."""
        found = [node for node in self.pair_fails if not self.good(node) and not self.named(node)]
        return found + [node for node in self.unmeasured if node not in self.pair_fails]

    def lapsed(self) -> list[str]:
        """Nodes that met the floor once but lost that standing (no result since)."""
        return [node for node in self.last_pass if not self.good(node) and not self.named(node)]


def _floor_of(floor: Floor) -> Callable[[int], float]:
    if callable(floor):
        return floor
    value = float(floor)
    return lambda _size: value


class _Search:
    """One search's rounds: the work in hand, and the next round planned from it."""

    def __init__(
        self,
        nodes: Sequence[str],
        floor: Floor,
        blocks: Mapping[str, str] | None,
        reference: Sequence[str],
    ) -> None:
        self.nodes = list(nodes)
        self.blocks = dict(blocks or {})
        self.state = _State(_floor_of(floor))
        self.reference = [node for node in reference if node not in set(nodes)]
        for node in self.reference:
            self.state.last_pass[node] = 0
        self.halving: list[_Halve] = []
        self.crossing: list[_Cross] = []
        self.waiting: list[Test] = []  # first groups not yet run (a cap on nodes held)

    def usable(self, node: str) -> bool:
        """Whether a node may still be tested (not named slow or unreachable)."""
        return not self.state.named(node)

    def plan_work(self) -> tuple[list[Test], list[str], set[str]]:
        """The halving and crossing tests of the next round, and the nodes they hold."""
        tests: list[Test] = []
        purposes: list[str] = []
        for item in self.halving:
            for test in item.tests(self.usable):
                tests.append(test)
                purposes.append(HALF)
        for cross in self.crossing:
            for test in cross.planned():
                if all(map(self.usable, test)):
                    tests.append(test)
                    purposes.append(CROSS)
        busy = {node for test in tests for node in test}
        return tests, purposes, busy

    def plan_peers(self, busy: set[str]) -> list[Test]:
        """Each free suspect with a known-good peer it has not met (same block first).

        Where no known-good peer is free, two suspects that have not met are paired: if
        they meet the floor together both are cleared.
        """
        state = self.state
        order = {node: index for index, node in enumerate([*self.reference, *self.nodes])}
        pool = [n for n in order if n not in busy and state.good(n)]
        by_block: dict[str, list[str]] = {}
        for node in pool:
            by_block.setdefault(self.blocks.get(node, ""), []).append(node)
        taken = set(busy)
        tests: list[Test] = []
        waiting: list[str] = []
        for node in dict.fromkeys([*state.suspects(), *state.lapsed()]):
            if node in taken:
                continue
            peer = self._peer(node, by_block, taken)
            if peer is None:
                waiting.append(node)
                continue
            taken.update((node, peer))
            tests.append((node, peer))
        # Suspects meet one another only a few times: where no peer ever passes (the floor
        # is wrong for this fabric, or every node is slow) more rounds would tell nothing.
        waiting = [n for n in waiting if len(state.pair_fails.get(n, ())) < SUSPECT_MEETINGS]
        for index, node in enumerate(waiting):
            if node in taken:
                continue
            other = next(
                (o for o in waiting[index + 1 :] if o not in taken and o != node
                 and frozenset((node, o)) not in state.met),
                None,
            )  # fmt: skip
            if other is not None:
                taken.update((node, other))
                tests.append((node, other))
        return tests

    def _peer(self, node: str, by_block: dict[str, list[str]], taken: set[str]) -> str | None:
        """A free known-good peer the node has not met, from its own block first."""
        own = self.blocks.get(node, "")
        blocks = [own, *(block for block in by_block if block != own)]
        for block in blocks:
            members = by_block.get(block, [])
            for index, peer in enumerate(members):
                if peer in taken or peer == node:
                    continue
                if frozenset((node, peer)) in self.state.met:
                    continue
                del members[index]
                return peer
        return None

    def plan(self, max_held: int | None) -> tuple[list[Test], list[str]]:
        """The next round: the work in hand, suspects with peers, then first groups waiting.

        Peers and first groups join while the round holds at most ``max_held`` nodes (None:
        no cap). The work in hand never needs more: its nodes ran together last round.
        """
        tests, purposes, busy = self.plan_work()  # within what the last round held
        held = sum(len(test) for test in tests)
        for pair in self.plan_peers(busy):
            if max_held is not None and held + 2 > max_held:
                break
            tests.append(pair)
            purposes.append(PEER)
            held += 2
        while self.waiting and (
            max_held is None or held + len(self.waiting[0]) <= max_held or not tests
        ):
            group = self.waiting.pop(0)
            tests.append(group)
            purposes.append(FIRST)
            held += len(group)
        return tests, purposes

    def consume(self, results: Sequence[Result]) -> None:
        """Turns a round's failed groups into halving, and passed halves into crossing."""
        by_nodes = {result.nodes: result for result in results}
        halving, self.halving = self.halving, []
        crossing, self.crossing = self.crossing, []
        for result in results:
            if result.purpose == FIRST and not result.passed and len(result.nodes) >= 3:
                self.halving.append(_Halve(result.nodes))
        for item in halving:
            self._after_halves(item, by_nodes)
        for cross in crossing:
            self._after_cross(cross, by_nodes)

    def _after_halves(self, item: _Halve, by_nodes: Mapping[Test, Result]) -> None:
        tested = [by_nodes[half] for half in item.halves if half in by_nodes]
        failed = [result for result in tested if not result.passed]
        for result in failed:
            if len(result.nodes) >= 3:
                self.halving.append(_Halve(result.nodes))
        if failed:
            for half in item.halves:
                if len(half) == 1 and self.usable(half[0]):
                    self.state.unmeasured[half[0]] = None
        elif len(tested) == len([half for half in item.halves if len(half) >= 2]):
            left, right = item.halves
            self.crossing.append(_Cross(item.group, [(left, right)]))

    def _after_cross(self, cross: _Cross, by_nodes: Mapping[Test, Result]) -> None:
        failed: list[tuple[Test, Test]] = []
        others: list[tuple[Test, Test]] = []
        for left, right in cross.candidates:
            lx, rx = _halves(left)
            ly, ry = _halves(right)
            for x_side, y_side in ((lx, ly), (rx, ry)):
                result = by_nodes.get(x_side + y_side)
                if x_side and y_side and result is not None and not result.passed:
                    failed.append((x_side, y_side))
            others.extend(pair for pair in ((lx, ry), (rx, ly)) if pair[0] and pair[1])
        if failed:
            cross.found = cross.found or any(len(x) == len(y) == 1 for x, y in failed)
            cross.candidates = [(x, y) for x, y in failed if len(x) + len(y) > 2]
        else:
            cross.candidates = others
        if cross.candidates:
            self.crossing.append(cross)
        elif not cross.found:
            self.state.unresolved.append(
                (cross.whole, "slow as a whole, yet every part met the floor (contention?)")
            )

    def outcome(self, rounds: Sequence[Round], out_of_rounds: bool) -> Outcome:
        """What was found, and why each node left undecided is so."""
        state = self.state
        good = tuple(node for node in self.nodes if state.good(node))
        links: dict[frozenset[str], tuple[str, str]] = {}
        for result in state.results:
            if len(result.nodes) == 2 and not result.passed and all(map(state.good, result.nodes)):
                first, second = sorted(result.nodes)
                links[frozenset(result.nodes)] = (first, second)
        unresolved = list(state.unresolved)
        for node in self.nodes:
            if state.good(node) or state.named(node):
                continue
            if out_of_rounds:
                why = "the rounds ran out before it was decided"
            elif node in state.pair_fails:
                why = "failed beside fewer than two known-good peers, and no other was free"
            else:
                why = "never measured: no known-good peer was free"
            unresolved.append(((node,), why))
        named = [node for node in self.nodes if node in state.slow]
        gone = [node for node in self.nodes if node in state.unreachable]
        return Outcome(
            good, tuple(named), tuple(links.values()), tuple(gone), tuple(unresolved),
            tuple(rounds), tuple(state.results),
        )  # fmt: skip


def _figure(value: object) -> float | None:
    """A usable figure, or None for no result (missing, not a number, negative, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    figure = float(value)
    return figure if math.isfinite(figure) and figure >= 0 else None


def search(
    nodes: Sequence[str],
    measure: Measure,
    floor: Floor,
    *,
    group_size: int = 2,
    blocks: Mapping[str, str] | None = None,
    reference: Sequence[str] = (),
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    max_held: int | None = None,
) -> Outcome:
    """Measures the nodes round by round until each is good, or named, or undecided.

    Args:
        nodes: the nodes that passed the stage alone.
        measure: runs one round's tests at once; returns each test's figure (None or left
            out: no result).
        floor: what a test must reach (one figure, or one per test size).
        group_size: nodes per first-round test, a power of two (2: pairs).
        blocks: each node's topology block (leaf switch, rail, Slurm block), if known.
        reference: nodes known good already, used as peers and never measured as suspects.
        max_rounds: a bound, so a fabric that keeps changing cannot hold the stage forever.
        max_held: the most nodes a round may hold out of service (None: no cap); the first
            groups then run in waves, the later ones meeting earlier ones' good nodes.

    Returns:
        Every round, every result, and what they prove.

    Raises:
        ValueError: a group size that is not a power of two, a node named twice, or a cap
            on nodes held below the group size.
    """
    if max_held is not None and max_held < group_size:
        raise ValueError(
            f"a cap of {max_held} nodes held cannot run a group of {group_size}: "
            "raise the cap or lower the group size"
        )
    engine = _Search(nodes, floor, blocks, reference)
    groups, lone = plan_groups(engine.nodes, group_size, engine.blocks)
    for node in lone:
        engine.state.unmeasured[node] = None
    engine.waiting = list(groups)
    tests, purposes = engine.plan(max_held)
    rounds: list[Round] = []
    while tests and len(rounds) < max_rounds:
        number = len(rounds) + 1
        figures = measure(tuple(tests))
        rounds.append(Round(number, tuple(tests), tuple(purposes)))
        results = [
            engine.state.record(test, _figure(figures.get(test)), number, purpose)
            for test, purpose in zip(tests, purposes)
        ]
        engine.state.name_suspects()
        engine.consume(results)
        tests, purposes = engine.plan(max_held)
    return engine.outcome(rounds, out_of_rounds=bool(tests))


def rounds_bound(nodes: int, group_size: int) -> int:
    """Rounds a search needs at most for a few faults: log2 of the group, plus a constant.

    One first round, a halving a round down to pairs (or a crossing a round down to single
    nodes a side), then at most three rounds of known-good peers.
    """
    return math.ceil(math.log2(max(2, min(nodes, group_size)))) + 4
