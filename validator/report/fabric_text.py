"""The stage across nodes in the terminal summary: a few lines, the nodes to act on named.

One line for the stage (fabric, rounds, the most nodes out of service at once, how many
good), then per kind its floor and fleet median, and one line per slow node, slow link,
unreachable node or undecided group. Everything from a node or a tool is escaped.
"""

from __future__ import annotations

from validator.model import KIND_UNITS, CrossNodeStage, KindOutcome
from validator.safe_text import one_line

_NAMED_LINES = 8  # per kind and list: beyond it, a count (a thousand-node summary stays short)


def _kind_lines(outcome: KindOutcome) -> list[str]:
    unit = KIND_UNITS.get(outcome.kind, "")
    if outcome.skipped:
        return [f"  {outcome.kind}: not run: {one_line(outcome.skipped, 200)}"]
    median = f"; fleet median {outcome.fleet_median:.1f} {unit}" if outcome.fleet_median else ""
    head = (
        f"  {outcome.kind}: floor {outcome.floor:.1f} {unit}{median}; "
        f"{len(outcome.good)} good in {outcome.rounds} rounds"
    )
    lines = [head]
    for label, named in (
        ("slow node", outcome.slow_nodes),
        ("slow link", outcome.slow_links),
        ("unreachable", outcome.unreachable),
        ("not decided", outcome.unresolved),
    ):
        for entry in named[:_NAMED_LINES]:
            hosts = "-".join(one_line(host, 80) for host in entry.hosts)
            lines.append(f"    {label} {hosts}: {one_line(entry.why, 200)}")
        if len(named) > _NAMED_LINES:
            lines.append(f"    ... and {len(named) - _NAMED_LINES} more {label}s (report.json)")
    return lines


def stage_lines(stage: CrossNodeStage | None) -> list[str]:
    """The stage's summary lines; none when it was not asked."""
    if stage is None:
        return []
    fabric = one_line(stage.fabric, 40) or "no fabric"
    interrupted = ", interrupted" if stage.interrupted else ""
    lines = [
        f"across nodes ({fabric}): {len(stage.good)} of {len(stage.nodes)} nodes good, "
        f"{stage.rounds} rounds, at most {stage.max_out_of_service} nodes out of service "
        f"at once{interrupted}"
    ]
    for outcome in stage.outcomes:
        lines.extend(_kind_lines(outcome))
    return lines


__all__ = ["stage_lines"]
