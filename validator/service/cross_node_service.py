"""The stage across nodes: the nodes certified alone, measured in pairs and groups, judged.

:func:`run_cross_node_stage` is the one entry point. Only nodes the per-node stage
CERTIFIED enter. Each kind asked (``rdma``: pairs; ``nccl``: power-of-two groups) is a
:func:`validator.remote.pair_plan.search` whose measure callback runs one round through
the runner and reads each test's figure (:func:`validator.judge.cross_node_judge.rdma_figure`,
:func:`~validator.judge.cross_node_judge.nccl_figure`). The floor is the fabric
catalog's, raised to ``ratio`` of the fleet median once the first round has given one
(:func:`~validator.judge.cross_node_judge.stage_floor`).

Stopping: ``stop()`` is asked before each round, and the deadline too; a Ctrl-C
(KeyboardInterrupt) during a round is answered by the runner killing its steps. Either
way no further round starts, the stage is marked interrupted (a passed deadline is not an
interruption; its nodes are undecided "at the deadline"), and what the finished rounds
proved stands: the planner is deterministic, so it is asked again over the recorded
figures alone, up to the last finished round, and every node it had not decided is left
UNKNOWN with why.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Union

from validator.judge.catalog import Catalog, load_catalog
from validator.judge.cross_node_judge import (
    DEFAULT_FLEET_RATIO,
    judge_stage,
    nccl_figure,
    nccl_floor_problem,
    rdma_figure,
    rejudged,
    stage_floor,
)
from validator.judge.fabric_catalog import Fabric, load_fabric_catalog
from validator.model import (
    STAGE_KINDS,
    CrossNodeStage,
    CrossNodeTest,
    KindOutcome,
    Named,
    NcclGroupResult,
    NodeResult,
    RdmaPairResult,
    Verdict,
)
from validator.remote.cross_node_runner import (
    CrossNodePlan,
    CrossNodeRunner,
    group_largest_bytes,
)
from validator.remote.pair_plan import Measure, Outcome, Test, is_power_of_two, search
from validator.safe_text import one_line

DEFAULT_NCCL_GROUP = 8
_INTERRUPTED = "the stage was interrupted before it was decided"
_AT_DEADLINE = "the stage's deadline passed before it was decided: rerun with a longer deadline"
_Records = Union[tuple[RdmaPairResult, ...], tuple[NcclGroupResult, ...]]


class _Stopped(Exception):
    """No further round: stopped (or out of time) before it."""


@dataclass
class _Kind:
    """One kind's search as it runs: the figures recorded and the floor they set."""

    kind: str
    fabric: Fabric
    ratio: float
    floor: float = 0.0
    source: str = ""
    median: float | None = None
    mad: float | None = None
    floor_set: bool = False
    rounds: list[list[tuple[Test, float | None, _Records, str]]] = field(default_factory=list)
    first_round: list[float] = field(default_factory=list)

    def set_floor(self, figures: Sequence[float], size: int) -> None:
        """The floor, from the catalog and the first round's figures (once)."""
        if not self.floor_set:
            self.first_round = list(figures)
            self.floor, self.source, self.median, self.mad = stage_floor(
                self.fabric, self.kind, figures, self.ratio, size
            )
            self.floor_set = True

    def floor_for(self, size: int) -> float:
        """The floor a test of ``size`` nodes must meet (NCCL's catalog row is per size)."""
        if self.kind == "rdma" or not self.floor_set:
            return self.floor
        return stage_floor(self.fabric, self.kind, self.first_round, self.ratio, size)[0]

    def replay(self, tests: Sequence[Test]) -> dict[Test, float | None]:
        """The recorded figures of the round the planner asks for again."""
        done = self.rounds[self._replayed]
        self._replayed += 1
        return {test: figure for test, figure, _, _ in done if test in tests}

    _replayed: int = 0


def _detail(records: _Records) -> str:
    whys = [record.detail for record in records if not record.completed and record.detail]
    return one_line(whys[0], 300) if whys else ""


def _measure(
    state: _Kind,
    runner: CrossNodeRunner,
    plan: CrossNodePlan,
    deadline: float,
    stop: Callable[[], bool],
) -> Callable[[Sequence[Test]], dict[Test, float | None]]:
    def measure(tests: Sequence[Test]) -> dict[Test, float | None]:
        if stop():
            raise _Stopped(_INTERRUPTED)
        if time.monotonic() >= deadline:
            raise _Stopped(_AT_DEADLINE)
        recorded: list[tuple[Test, float | None, _Records, str]] = []
        if state.kind == "rdma":
            pairs = [(test[0], test[1]) for test in tests]
            rdma = runner.rdma_round(pairs, plan, deadline)
            for test in tests:
                records = rdma.get((test[0], test[1]), ())
                recorded.append((test, rdma_figure(records), records, _detail(records)))
        else:
            nccl = runner.nccl_round(list(tests), plan, deadline)
            for test in tests:
                group = nccl.get(test, ())
                figure = nccl_figure(group, plan.hcas_of(test))
                recorded.append((test, figure, group, _detail(group)))
        if time.monotonic() >= deadline and any(figure is None for _, figure, _, _ in recorded):
            # Cut by the deadline: a missing result says nothing of its nodes.
            raise _Stopped(_AT_DEADLINE)
        size = max((len(test) for test in tests), default=2)
        state.set_floor([figure for _, figure, _, _ in recorded if figure is not None], size)
        state.rounds.append(recorded)
        return {test: figure for test, figure, _, _ in recorded}

    return measure


def _why_slow(outcome: Outcome, node: str, unit: str) -> str:
    failed = [
        f"{'+'.join(h for h in r.nodes if h != node)} {r.figure:.1f} {unit}"
        for r in outcome.results
        if node in r.nodes and not r.passed and r.figure is not None
    ]
    return "below the floor with " + "; ".join(failed[-4:]) if failed else "below the floor"


def _why_link(outcome: Outcome, link: tuple[str, str], unit: str) -> str:
    figures = [
        f"{r.figure:.1f} {unit}" if r.figure is not None else "no result"
        for r in outcome.results
        if set(r.nodes) == set(link) and not r.passed
    ]
    return f"{link[0]} with {link[1]}: {', '.join(figures) or 'below the floor'}"


def _why_gone(state: _Kind, node: str) -> str:
    for round_tests in reversed(state.rounds):
        for test, figure, _, detail in round_tests:
            if node in test and figure is None and detail:
                return detail
    return "no result with two known-good peers"


def _kind_outcome(state: _Kind, outcome: Outcome, stopped: str | None) -> KindOutcome:
    unit = "Gb/s" if state.kind == "rdma" else "GB/s per HCA"
    unresolved = []
    for nodes, planner_why in outcome.unresolved:
        cut = stopped is not None and planner_why.startswith("the rounds ran out")
        unresolved.append(Named(tuple(nodes), stopped if cut and stopped else planner_why))
    return KindOutcome(
        kind=state.kind,
        floor=state.floor,
        floor_source=state.source,
        fleet_median=state.median,
        fleet_mad=state.mad,
        good=outcome.good,
        slow_nodes=tuple(Named((n,), _why_slow(outcome, n, unit)) for n in outcome.slow_nodes),
        slow_links=tuple(
            Named(link, _why_link(outcome, link, unit)) for link in outcome.slow_links
        ),
        unreachable=tuple(Named((n,), _why_gone(state, n)) for n in outcome.unreachable),
        unresolved=tuple(unresolved),
        rounds=len(outcome.rounds),
        max_out_of_service=outcome.max_out_of_service,
    )


def _tests(state: _Kind, outcome: Outcome) -> list[CrossNodeTest]:
    tests = []
    for result in outcome.results:
        done = state.rounds[result.round - 1]
        records = next(r for t, _, r, _ in done if t == result.nodes)
        detail = next(d for t, _, _, d in done if t == result.nodes)
        tests.append(
            CrossNodeTest(
                round=result.round,
                kind=state.kind,
                hosts=result.nodes,
                figure=result.figure,
                floor=state.floor_for(len(result.nodes)),
                passed=result.passed,
                purpose=result.purpose,
                rdma=records if state.kind == "rdma" else (),  # type: ignore[arg-type]
                nccl=records if state.kind == "nccl" else (),  # type: ignore[arg-type]
                detail=detail,
            )
        )
    return tests


@dataclass(frozen=True)
class StageOptions:
    """How the search runs: topology blocks, the cap on nodes held, the NCCL group size."""

    ratio: float = DEFAULT_FLEET_RATIO  # of the fleet median, as fleet.interconnect
    nccl_group: int = DEFAULT_NCCL_GROUP
    blocks: Mapping[str, str] | None = None  # node -> leaf switch / Slurm block
    max_held: int | None = None
    max_rounds: int = 64


def _search_kind(
    state: _Kind,
    nodes: Sequence[str],
    runner: CrossNodeRunner,
    plan: CrossNodePlan,
    options: StageOptions,
    deadline: float,
    stop: Callable[[], bool],
) -> tuple[Outcome, str | None]:
    size = 2 if state.kind == "rdma" else _group_size(options.nccl_group, len(nodes))

    def planned(measure: Measure, max_rounds: int) -> Outcome:
        return search(
            nodes,
            measure,
            state.floor_for,
            group_size=size,
            blocks=options.blocks,
            max_held=options.max_held,
            max_rounds=max_rounds,
        )

    try:
        return planned(_measure(state, runner, plan, deadline, stop), options.max_rounds), None
    except (_Stopped, KeyboardInterrupt) as exc:
        why = str(exc) if isinstance(exc, _Stopped) else _INTERRUPTED
    # The planner again, over what the finished rounds gave: what they proved stands.
    return planned(state.replay, len(state.rounds)), why


def _group_size(asked: int, nodes: int) -> int:
    if not is_power_of_two(asked):
        raise ValueError(f"NCCL group size {asked} is not a power of two (2, 4, 8, ...)")
    return max(2, min(asked, 1 << max(1, nodes.bit_length() - 1)))


def _nccl_problem(row: Fabric, nodes: Sequence[str], plan: CrossNodePlan, group: int) -> str | None:
    """Why NCCL cannot be judged here (no floor row for a size, or for the messages)."""
    size = _group_size(group, len(nodes))
    sizes = range(2, size + 1)  # the group, its halves and their halves
    largest = {group_largest_bytes(plan, [plan.host(name)]) for name in nodes}
    return nccl_floor_problem(row, sizes, largest)


def _stage(
    certified: Sequence[str],
    runner: CrossNodeRunner,
    kinds: Sequence[str],
    row: Fabric,
    plan: CrossNodePlan,
    options: StageOptions,
    deadline: float,
    stop: Callable[[], bool],
) -> CrossNodeStage:
    """Each kind's search in turn; after an interruption the kinds left are not run."""
    known = {host.name for host in plan.hosts}
    nodes = [name for name in certified if name in known]
    unplanned = tuple(
        Named((name,), "no plan for it: its HCAs are not known")
        for name in certified
        if name not in known
    )
    tests: list[CrossNodeTest] = []
    outcomes: list[KindOutcome] = []
    interrupted = False
    for kind in kinds:
        state = _Kind(kind, row, options.ratio)
        skipped = runner.nccl_unavailable() if kind == "nccl" else None
        if kind == "nccl" and not skipped and len(nodes) >= 2:
            skipped = _nccl_problem(row, nodes, plan, options.nccl_group)
        if interrupted or skipped or len(nodes) < 2:
            why = _INTERRUPTED if interrupted else skipped or "fewer than two nodes to pair"
            outcomes.append(KindOutcome(kind, 0.0, "", skipped=why, unresolved=unplanned))
            continue
        outcome, stopped = _search_kind(state, nodes, runner, plan, options, deadline, stop)
        interrupted = interrupted or stopped == _INTERRUPTED
        found = _kind_outcome(state, outcome, stopped)
        outcomes.append(dataclasses.replace(found, unresolved=found.unresolved + unplanned))
        tests += _tests(state, outcome)
    return CrossNodeStage(
        kinds=tuple(kinds),
        fabric=row.id,
        nodes=tuple(certified),
        tests=tuple(tests),
        outcomes=tuple(outcomes),
        interrupted=interrupted,
    )


def run_cross_node_stage(
    results: Sequence[NodeResult],
    runner: CrossNodeRunner,
    kinds: Sequence[str],
    fabric: str | Fabric,
    plan: CrossNodePlan,
    *,
    deadline: float,
    stop: Callable[[], bool] = lambda: False,
    options: StageOptions | None = None,
    catalog: Catalog | None = None,
) -> tuple[tuple[NodeResult, ...], CrossNodeStage]:
    """Measure the nodes certified alone across the fabric, judge them, decide their verdicts.

    Args:
        results: every node as the per-node stage judged it (any verdict).
        runner: runs one round (SSH: :mod:`validator.remote.cross_node_ssh`).
        kinds: any of ``rdma``, ``nccl``, in the order to run them.
        fabric: a fabric catalog id (``ndr-400-ib``) or the Fabric itself.
        plan: every entering host's HCAs, nearest GPUs and address.
        deadline: ``time.monotonic()`` by which the stage must end.
        stop: asked before each round; True ends the stage there (interrupted).
        options: the search's options (:class:`StageOptions`).
        catalog: the SKU catalog, for the summaries' labels; the packaged one by default.

    Returns:
        The results in the same order, entered nodes with their ``fabric.*`` findings and
        their verdicts decided again, and the stage as it ran.

    Raises:
        PolicyError: an unknown fabric id.
        ValueError: an unknown kind, or an NCCL group size that is not a power of two.
    """
    for kind in kinds:
        if kind not in STAGE_KINDS:
            raise ValueError(f"stage kind {kind!r} is not one of {', '.join(STAGE_KINDS)}")
    options = options or StageOptions()
    row = fabric if isinstance(fabric, Fabric) else load_fabric_catalog().fabric(fabric)
    certified = [r.hostname for r in results if r.verdict is Verdict.CERTIFIED]
    stage = _stage(certified, runner, kinds, row, plan, options, deadline, stop)
    catalog = catalog if catalog is not None else load_catalog()
    labels = {sku.id: sku.label for sku in catalog.all()}
    return rejudged(results, judge_stage(stage, row), labels), stage


__all__ = ["DEFAULT_NCCL_GROUP", "StageOptions", "run_cross_node_stage"]
