"""The drift results for a terminal: per host its state and summary, then what is not PASS.

A finding that keeps the node from reading "no drift" (a FAIL, or an UNKNOWN that
blocks) ends with what to do, in the words of the certify report:
``-> drain and RMA``, so ``grep -- '-> drain'`` finds them in either output.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from validator.model import (
    DRIFT_CHECKS,
    Action,
    DriftCheck,
    DriftState,
    Finding,
    NodeResult,
    Severity,
    drift_state,
)
from validator.report.shared import action_words, one_line

STATE_WORDS = {
    DriftState.OK: "NO DRIFT",
    DriftState.DRIFT: "DRIFT",
    DriftState.UNKNOWN: "UNKNOWN",
    DriftState.NEVER_CERTIFIED: "NEVER CERTIFIED",
    DriftState.NOT_CERTIFIED: "NOT CERTIFIED",
}
# Every drift check id fits the column: drift.recovery_action is the longest.
CHECK_WIDTH = max(len(check) for check in DRIFT_CHECKS)


def _todo(finding: Finding) -> str:
    """``  -> reset the GPU`` for a finding that blocks and carries an action, else nothing."""
    blocks = finding.severity is Severity.FAIL or (
        finding.severity is Severity.UNKNOWN and finding.required
    )
    if not blocks or finding.action is Action.NONE:
        return ""
    return f"  -> {action_words(finding.action)}"


def _finding_lines(result: NodeResult) -> list[str]:
    lines = []
    for finding in result.findings:
        if finding.severity is Severity.PASS or finding.check == DriftCheck.BASELINE:
            continue
        where = f"gpu{finding.gpu_index}" if finding.gpu_index is not None else "node"
        optional = "" if finding.required or finding.severity is Severity.FAIL else " (optional)"
        lines.append(
            f"  {finding.severity.value:<8} {finding.check:<{CHECK_WIDTH}} {where:<5} "
            f"{one_line(finding.message)}{optional}{_todo(finding)}"
        )
    return lines


def render_drift_text(results: Sequence[NodeResult]) -> str:
    """Each host's state and summary, its findings that are not PASS; then counts for a fleet.

    Args:
        results: the drift results, one per host.
    """
    lines = []
    for result in results:
        state = STATE_WORDS[drift_state(result)]
        lines.append(f"{one_line(result.hostname)}  {state}  {one_line(result.summary)}")
        lines += _finding_lines(result)
    if len(results) > 1:
        counts = Counter(drift_state(result) for result in results)
        lines.append(
            f"{len(results)} hosts: {counts[DriftState.OK]} no drift, "
            f"{counts[DriftState.DRIFT]} drifted, {counts[DriftState.UNKNOWN]} unknown, "
            f"{counts[DriftState.NEVER_CERTIFIED]} never certified, "
            f"{counts[DriftState.NOT_CERTIFIED]} not certified"
        )
    return "\n".join(lines) + "\n"


__all__ = ["CHECK_WIDTH", "STATE_WORDS", "render_drift_text"]
