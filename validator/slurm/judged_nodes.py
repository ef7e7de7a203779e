"""What Slurm is told about judged nodes: drain the failing, resume the passing we drained.

Certify (``--slurm-drain``) and drift both end here; each words its own drain reason.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from validator.error_tree import GpureadyError
from validator.model import NodeResult, Report, Severity, Verdict
from validator.safe_text import one_line
from validator.slurm.commands import Runner
from validator.slurm.drain import Action, drain, resume_if_ours, run_scontrol

REASON_MAX_CHARS = 240


@dataclass(frozen=True)
class SlurmStep:
    """What ``--slurm-drain`` did about one node."""

    hostname: str
    action: Action | None  # None: Slurm could not be told (see error)
    error: str = ""


def tell_slurm(
    results: Sequence[NodeResult],
    reason: Callable[[NodeResult], str],
    runner: Runner | None = None,
) -> tuple[SlurmStep, ...]:
    """Drain failing nodes; resume the passing ones gpuready drained; leave the rest alone.

    A node that could not be checked is neither: nothing to drain for, not shown good.
    A node Slurm could not be told about does not stop the others. ``reason`` words a
    failing node's drain (drift's summary; certify names its failing checks).
    """
    scontrol = runner or run_scontrol
    steps = []
    for result in results:
        try:
            if result.verdict is Verdict.NOT_CERTIFIED:
                action = drain(result.hostname, reason(result), scontrol)
            elif result.verdict is Verdict.CERTIFIED:
                action = resume_if_ours(result.hostname, scontrol)
            else:
                continue
        except GpureadyError as exc:
            steps.append(SlurmStep(result.hostname, None, str(exc)))
            continue
        steps.append(SlurmStep(result.hostname, action))
    return tuple(steps)


def certify_reason(result: NodeResult) -> str:
    """The drain reason for a node certify failed: ``gpuready:`` and its failing checks."""
    failing = list(dict.fromkeys(f.check for f in result.findings if f.severity is Severity.FAIL))
    checks = ", ".join(failing) if failing else result.summary
    return one_line(f"gpuready: not certified: {checks}", REASON_MAX_CHARS)


def with_quarantine(
    steps: Sequence[SlurmStep], report: Report, quarantined: Collection[str]
) -> tuple[SlurmStep, ...]:
    """What --slurm-drain did, counting the quarantined nodes that passed as resumed.

    They were resumed inside the quarantine reservation before they ran, so the drain
    pass after judging finds them not drained; passing, they stay resumed.
    """
    passed = {n.hostname for n in report.nodes if n.verdict is Verdict.CERTIFIED}
    return tuple(
        SlurmStep(step.hostname, Action.RESUMED)
        if step.hostname in passed and step.hostname in quarantined
        and step.action is Action.NOT_DRAINED
        else step
        for step in steps
    )


__all__ = ["REASON_MAX_CHARS", "SlurmStep", "certify_reason", "tell_slurm", "with_quarantine"]
