"""A fleet in the terminal: one line per node, and a summary that names what to act on.

At 1,000 nodes the terminal shows 1,000 node lines, the details of only the nodes
that are not certified (validator.report.terminal renders those), and a summary at
the end: the counts by verdict, each model's burn-in speed, and one line per node to
act on with what to do. Every count comes from the one counting unit
(validator.model.check_counts): the checks a node line names are the checks its
count line counts as failed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from validator.model import Report, Severity, Verdict
from validator.model.check_counts import check_words, checks_at
from validator.model.results import NodeResult
from validator.report import shared

WIDTH = 100
_HOST_MOST = 28  # a longer name widens its own line, not every line
_SKU_MOST = 18
_NO_SKU = "no SKU matched"  # as the node's details say
_NO_COMPARISON = "no fleet speed comparison: no GPU model had burn-in figures from 3 GPUs"
_CHECKS_LEAST = 80  # room for the failing checks, however wide the rest

# Colours a verdict for the terminal (plain where it is not one).
Paint = Callable[[Verdict, str], str]


def _plain(verdict: Verdict, text: str) -> str:
    del verdict
    return text


def _fit_checks(items: Sequence[tuple[str, tuple[int, ...]]], room: int) -> str:
    """``burn.speed (GPU 3), power.limit (GPU 3)``: as many as fit in ``room``, then ``+2 more``.

    The first check is always named, however long: a line that names none says nothing.
    """
    words = [shared.one_line(check_words(check, gpus)) for check, gpus in items]
    for shown in range(len(words), 0, -1):
        rest = len(words) - shown
        text = ", ".join(words[:shown]) + (f", +{rest} more" if rest else "")
        if len(text) <= room or shown == 1:
            return text
    return ""


def action_text(node: NodeResult) -> str:
    """What to do about a node: the most serious action, ``drain and RMA (+1 more)``.

    The summary's line for the node names them all, each with its GPUs. A node whose
    blocking findings carry no action (a host that was never reached, in a report from
    before actions) says why it could not be judged instead.
    """
    groups = shared.what_to_do(node)
    if groups:
        more = f" (+{len(groups) - 1} more)" if len(groups) > 1 else ""
        return groups[0].words + more
    if node.verdict is Verdict.CERTIFIED:
        return ""
    return shared.shorten(shared.one_line(node.summary or shared.verdict_words(node.verdict)), 60)


@dataclass(frozen=True)
class Columns:
    """The widths of a node line's first columns, from the nodes shown together."""

    host: int = 0
    verdict: int = 0
    sku: int = 0
    gpus: int = 0


def columns(nodes: Sequence[NodeResult]) -> Columns:
    """The widths that line up ``nodes``' lines (a long host name or SKU widens its own)."""
    return Columns(
        host=min(max((len(shared.one_line(n.hostname)) for n in nodes), default=0), _HOST_MOST),
        verdict=max((len(n.verdict.value) for n in nodes), default=0),
        sku=min(max((len(shared.one_line(n.sku or _NO_SKU)) for n in nodes), default=0), _SKU_MOST),
        gpus=max((len(shared.plural(len(n.facts.gpus), "GPU")) for n in nodes), default=0),
    )


def node_line(node: NodeResult, paint: Paint = _plain, widths: Columns = Columns()) -> str:
    """One node in a line: ``gpu17  NOT_CERTIFIED  h100-sxm  8 GPUs  burn.speed (GPU 3)  -> ...``.

    Its verdict, SKU and GPU count; the checks it failed (where none failed, the ones that
    could not be judged; on a certified node, the ones that warned), each with its GPUs;
    and what to do, after ``->``.
    """
    host = shared.one_line(node.hostname).ljust(widths.host)
    verdict = node.verdict.value.ljust(widths.verdict)
    sku = shared.one_line(node.sku or _NO_SKU).ljust(widths.sku)
    gpus = shared.plural(len(node.facts.gpus), "GPU").rjust(widths.gpus)
    head = f"{host}  {paint(node.verdict, verdict)}  {sku}  {gpus}"
    shown = len(host) + len(verdict) + len(sku) + len(gpus) + 6
    if node.verdict is Verdict.CERTIFIED:
        warned = checks_at(node.findings, Severity.WARN)
        if not warned:
            return head.rstrip()
        word = "warning" if len(warned) == 1 else "warnings"
        lead = f"{len(warned)} {word}: "
        return f"{head}  {lead}{_fit_checks(warned, WIDTH - shown - 2 - len(lead))}"
    todo = action_text(node)
    todo_part = f"  -> {todo}" if todo else ""
    # The checks before the width: a line may run past it to name two or three of them.
    room = max(WIDTH - shown - 2 - len(todo_part), _CHECKS_LEAST)
    checks = _fit_checks(shared.failing_checks(node), room)
    return f"{head}  {checks}{todo_part}" if checks else f"{head}{todo_part}"


def node_lines(report: Report, paint: Paint = _plain) -> list[str]:
    """Every node in a line, in reading order (not certified first)."""
    nodes = shared.reading_order(report)
    widths = columns(nodes)
    return [node_line(node, paint, widths) for node in nodes]


def _act_on_line(node: NodeResult, width: int) -> str:
    """``  gpu17  drain and RMA: GPU 3 (serial ...); reboot the node: the node``."""
    groups = shared.what_to_do(node)
    if not groups:
        return f"  {shared.one_line(node.hostname).ljust(width)}  {action_text(node)}"
    parts = []
    for group in groups:
        targets = ", ".join(
            "the node" if t.gpu_index is None else f"GPU {t.gpu_index}" for t in group.targets
        )
        parts.append(f"{group.words}: {targets}")
    return f"  {shared.one_line(node.hostname).ljust(width)}  {'; '.join(parts)}"


def summary_lines(report: Report, paint: Paint = _plain) -> list[str]:
    """The fleet's summary: counts by verdict, speed per model, each node to act on, overall.

    One line per node to act on (not certified, or not judged), none for a certified one:
    at 1,000 nodes the summary grows only with the nodes that need someone.
    """
    fleet = report.fleet
    lines = []
    if fleet is not None:
        lines.append(shared.fleet_line(fleet))
        lines.extend(f"  {shared.sku_fleet_line(stats)}" for stats in fleet.skus)
        if not fleet.skus:
            lines.append(f"  {_NO_COMPARISON}")
    if report.cross_node is not None:  # a fleet's only: one node's start-up skips it
        from validator.report.fabric_text import stage_lines

        lines.extend(stage_lines(report.cross_node))
    act_on = [n for n in shared.reading_order(report) if n.verdict is not Verdict.CERTIFIED]
    if act_on:
        width = columns(act_on).host
        lines.append(f"act on {shared.plural(len(act_on), 'node')}:")
        lines.extend(_act_on_line(node, width) for node in act_on)
    verdict = shared.overall_verdict(report)
    certified = sum(1 for node in report.nodes if node.verdict is Verdict.CERTIFIED)
    overall = f"{certified} of {shared.plural(len(report.nodes), 'node')} certified"
    if act_on:
        overall += f"; {len(act_on)} to act on (above)"
    lines.append(f"Overall: {paint(verdict, verdict.value)}  {overall}")
    return lines


__all__ = ["Columns", "action_text", "columns", "node_line", "node_lines", "summary_lines"]
