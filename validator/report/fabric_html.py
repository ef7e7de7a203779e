"""The stage across nodes in the HTML report: its line, each kind's findings, the pair matrix.

The pair matrix is a heat map (validator.report.svg.heat_map) of the nodes that entered:
cell (a, b) holds the last figure measured with a and b together (an RDMA pair, or the
NCCL group they shared), its tooltip the round, why it was planned and whether it passed.
A pair never measured together is hatched "not paired": the search pairs each node with
known-good peers, not every node with every other. Past :data:`MATRIX_NODES` nodes the
map would be unreadable: the page says so, and report.json holds every figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from markupsafe import Markup

from validator.model import KIND_UNITS, CrossNodeStage, CrossNodeTest, KindOutcome
from validator.report import svg
from validator.report.fabric_text import stage_lines
from validator.safe_text import one_line

MATRIX_NODES = 64
_TITLES = {"rdma": "RDMA pairs (ib_write_bw)", "nccl": "NCCL groups (all_reduce_perf)"}


@dataclass(frozen=True)
class KindView:
    """One kind as the page shows it: title, floor words, the nodes named, the matrix."""

    kind: str
    title: str
    floor: str
    named: list[str] = field(default_factory=list)
    chart: Markup | None = None
    no_chart: str = ""


@dataclass(frozen=True)
class FabricView:
    """The stage's section: its summary line and one view per kind."""

    line: str
    kinds: list[KindView]


def _tooltip(test: CrossNodeTest, a: str, b: str) -> str:
    figure = "no result" if test.figure is None else f"{test.figure:.1f} {test.unit}"
    verdict = "passed" if test.passed else f"below the floor {test.floor:.1f}"
    detail = f": {one_line(test.detail, 160)}" if test.detail and test.figure is None else ""
    return f"{a} with {b}: {figure}, round {test.round} ({test.purpose}), {verdict}{detail}"


def pair_cells(
    stage: CrossNodeStage, kind: str
) -> tuple[list[str], dict[tuple[int, int], svg.HeatCell]]:
    """The matrix's labels (the entered nodes) and its cells, both halves, for ``kind``."""
    labels = list(stage.nodes)
    at = {name: i for i, name in enumerate(labels)}
    cells: dict[tuple[int, int], svg.HeatCell] = {}
    for test in stage.tests:  # in round order: a later test of the same pair wins
        if test.kind != kind:
            continue
        hosts = [host for host in test.hosts if host in at]
        for a in hosts:
            for b in hosts:
                if a != b:
                    cells[(at[a], at[b])] = svg.HeatCell(test.figure, _tooltip(test, a, b))
    for a in labels:
        for b in labels:
            if a != b and (at[a], at[b]) not in cells:
                cells[(at[a], at[b])] = svg.HeatCell(None, f"{a} with {b}: not paired")
    return labels, cells


def _named(outcome: KindOutcome) -> list[str]:
    lines: list[str] = []
    for label, named in (
        ("slow node", outcome.slow_nodes),
        ("slow link", outcome.slow_links),
        ("unreachable", outcome.unreachable),
        ("not decided", outcome.unresolved),
    ):
        lines.extend(
            f"{label} {'-'.join(entry.hosts)}: {one_line(entry.why, 300)}" for entry in named
        )
    return lines


def _kind_view(stage: CrossNodeStage, outcome: KindOutcome) -> KindView:
    unit = KIND_UNITS.get(outcome.kind, "")
    title = _TITLES.get(outcome.kind, outcome.kind)
    if outcome.skipped:
        return KindView(outcome.kind, title, f"not run: {one_line(outcome.skipped, 300)}")
    median = f"; fleet median {outcome.fleet_median:.1f} {unit}" if outcome.fleet_median else ""
    floor = (
        f"floor {outcome.floor:.1f} {unit} ({one_line(outcome.floor_source, 300)}){median}; "
        f"{len(outcome.good)} good in {outcome.rounds} rounds, at most "
        f"{outcome.max_out_of_service} nodes out of service at once"
    )
    if len(stage.nodes) > MATRIX_NODES:
        why = f"{len(stage.nodes)} nodes: too many to draw; report.json holds every figure"
        return KindView(outcome.kind, title, floor, _named(outcome), None, why)
    labels, cells = pair_cells(stage, outcome.kind)
    chart = svg.heat_map(
        labels,
        cells,
        title=f"{title}: the pair matrix ({unit})",
        row_label="node",
        column_label="with node",
        unit=unit,
    )
    return KindView(outcome.kind, title, floor, _named(outcome), chart)


def fabric_view(stage: CrossNodeStage | None) -> FabricView | None:
    """The section's view; None when the stage was not asked."""
    if stage is None:
        return None
    return FabricView(stage_lines(stage)[0], [_kind_view(stage, o) for o in stage.outcomes])


__all__ = ["MATRIX_NODES", "FabricView", "KindView", "fabric_view", "pair_cells"]
