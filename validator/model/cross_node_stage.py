"""The stage across nodes as it ran: every test of every round, and what they proved.

A test is one RDMA pair (``ib_write_bw``/``ib_write_lat`` per HCA) or one NCCL group
(nccl-tests' collectives), run in one round beside others on disjoint nodes. Its
``figure`` is what was judged against the floor:

- rdma: the pair's slowest HCA, BW average at the largest message, Gb/s;
- nccl: all-reduce busbw at the largest size (the IB-only variant where it ran), divided
  by the HCAs of the group's node with fewest, GB/s per HCA, as the floors are stated.

A kind's outcome names the nodes good, slow, unreachable, the slow links and what stayed
undecided, each with why. ``figure`` None means no result (never zero, never a pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from validator.model.cross_node_facts import NcclGroupResult, RdmaPairResult

STAGE_KINDS = ("rdma", "nccl")
KIND_UNITS = {"rdma": "Gb/s", "nccl": "GB/s per HCA"}


@dataclass(frozen=True)
class CrossNodeTest:
    """One test of one round: who met, the figure judged, the floor, and the raw records."""

    round: int
    kind: str  # one of STAGE_KINDS
    hosts: Tuple[str, ...]
    figure: Optional[float]  # None: no result
    floor: float
    passed: bool
    purpose: str  # why planned: first | half | cross | peer (validator.remote.pair_plan)
    rdma: Tuple[RdmaPairResult, ...] = ()
    nccl: Tuple[NcclGroupResult, ...] = ()
    detail: str = ""  # why there is no result, in the tool's words (escaped)

    def __post_init__(self) -> None:
        if self.kind not in STAGE_KINDS:
            raise ValueError(f"stage kind {self.kind!r} is not one of {', '.join(STAGE_KINDS)}")

    @property
    def unit(self) -> str:
        """The figure's unit, as messages write it."""
        return KIND_UNITS[self.kind]


@dataclass(frozen=True)
class Named:
    """Nodes named by the search (one, or the two ends of a link), and why."""

    hosts: Tuple[str, ...]
    why: str


@dataclass(frozen=True)
class KindOutcome:
    """What one kind's search found.

    ``skipped`` says why the kind did not run at all (NCCL over SSH without mpirun):
    then every node entered is unresolved with that reason.
    """

    kind: str
    floor: float
    floor_source: str  # the catalog's words, or the fleet median it was set from
    fleet_median: Optional[float] = None  # median of the first round's figures
    fleet_mad: Optional[float] = None
    good: Tuple[str, ...] = ()
    slow_nodes: Tuple[Named, ...] = ()
    slow_links: Tuple[Named, ...] = ()
    unreachable: Tuple[Named, ...] = ()
    unresolved: Tuple[Named, ...] = ()
    rounds: int = 0
    max_out_of_service: int = 0
    skipped: str = ""


@dataclass(frozen=True)
class CrossNodeStage:
    """The whole stage: kinds asked, nodes entered, every test, each kind's outcome."""

    kinds: Tuple[str, ...]
    fabric: str  # the fabric catalog id the floors came from
    nodes: Tuple[str, ...]  # the nodes that entered (certified alone)
    tests: Tuple[CrossNodeTest, ...] = ()
    outcomes: Tuple[KindOutcome, ...] = ()
    interrupted: bool = False

    @property
    def rounds(self) -> int:
        """Rounds run, every kind together."""
        return sum(outcome.rounds for outcome in self.outcomes)

    @property
    def max_out_of_service(self) -> int:
        """The most nodes any one round held at once."""
        return max((outcome.max_out_of_service for outcome in self.outcomes), default=0)

    @property
    def good(self) -> Tuple[str, ...]:
        """Nodes good in every kind that ran (the entered order)."""
        if not self.outcomes:
            return ()
        # Sets: certify asks this once per certified node, and tuples made that n cubed.
        kinds = [frozenset(outcome.good) for outcome in self.outcomes]
        return tuple(node for node in self.nodes if all(node in good for good in kinds))

    def outcome(self, kind: str) -> Optional[KindOutcome]:
        """The outcome of ``kind``; None when it was not asked."""
        return next((outcome for outcome in self.outcomes if outcome.kind == kind), None)


__all__ = ["KIND_UNITS", "STAGE_KINDS", "CrossNodeStage", "CrossNodeTest", "KindOutcome", "Named"]
