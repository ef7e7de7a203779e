"""A host that passes its deadline: cut, judged as timed out, what it measured kept.

Every path binds the deadline (``--deadline``, or the burn plus a margin): the
collector cuts its own burn-in to end in time (:func:`validator.node.collect.burn_within`),
and the transports stop waiting when it passes. A host whose burn-in had to be cut,
or whose facts came later than its deadline, is UNKNOWN: not certified on a partial
run, its facts and findings kept in the report for the operator.
"""

from __future__ import annotations

import dataclasses

from validator.model import Finding, NodeFacts, NodeResult, Severity, Verdict
from validator.node.burnin.burn_config import BurnConfig

CHECK = "transport.deadline"
# A burn this much shorter than asked was cut, not rounded.
_CUT_TOLERANCE_S = 1e-3


def _seconds(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def cut_short(
    asked: BurnConfig | None, facts: NodeFacts, deadline_s: float, elapsed_s: float
) -> str | None:
    """How the deadline cut this host's run (one phrase), or None when it did not.

    Args:
        asked: the burn-in the run asked for; None for none.
        facts: what the host gave.
        deadline_s: the host's deadline.
        elapsed_s: how long the host took, from connect to facts.
    """
    if asked is not None and asked.duration_s > 0:
        burn = facts.burn
        if burn is None or burn.duration_s <= 0:
            return f"no time was left for the {_seconds(asked.duration_s)} s burn-in"
        # A burn that could not start for its own reason (no GPU to burn) was not cut.
        started = bool(burn.gpus) or burn.error is None
        if started and burn.duration_s < asked.duration_s - _CUT_TOLERANCE_S:
            return (
                f"the {_seconds(asked.duration_s)} s burn-in was cut to "
                f"{_seconds(burn.duration_s)} s"
            )
    if elapsed_s > deadline_s:
        return f"the facts came after {_seconds(elapsed_s)} s"
    return None


def timed_out(result: NodeResult, deadline_s: float, why: str) -> NodeResult:
    """The host judged as timed out: UNKNOWN, its findings kept behind the deadline's.

    Args:
        result: the host judged on what it measured before the cut.
        deadline_s: the deadline it passed.
        why: how it was cut (:func:`cut_short`).
    """
    reason = f"cut at the {deadline_s:g} s deadline: {why}"
    finding = Finding(
        check=CHECK,
        severity=Severity.UNKNOWN,
        message=(
            f"{result.hostname}: {reason}; the node cannot be certified on a partial run: "
            "give a --deadline longer than the burn-in and its setup, or a shorter --burn"
        ),
        observed=why,
        expected=f"a full run within {deadline_s:g} s",
    )
    failed = [f for f in result.findings if f.severity is Severity.FAIL]
    rest = [f for f in result.findings if f.severity is not Severity.FAIL]
    # A fault measured before the cut is proven: the node is not certified, not unknown.
    verdict = Verdict.NOT_CERTIFIED if failed else Verdict.UNKNOWN
    summary = (
        f"not certified: {len(failed)} check(s) failed before the run was {reason}"
        if failed
        else f"could not be judged: {reason}"
    )
    return dataclasses.replace(
        result,
        verdict=verdict,
        findings=(*failed, finding, *rest),  # still FAIL, UNKNOWN, WARN, PASS
        summary=summary,
    )


__all__ = ["CHECK", "cut_short", "timed_out"]
