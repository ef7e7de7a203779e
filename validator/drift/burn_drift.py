"""Drift of the burn-in speed, paired with :mod:`validator.judge.checks.burn`.

When the drift run ran a burn-in (``facts.burn`` set), each GPU's TFLOPS against its
certified figure: more than ``thresholds.drift_burn_drop`` below is drift; no speed now
(the burn failed, the GPU was not burned) is UNKNOWN; no certified figure, an UNKNOWN that
does not block. A drift run without a burn-in has nothing to compare and says nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from validator.certificate import CertifiedGpu
from validator.drift.drift_helpers import DriftInputs, Pair
from validator.judge.checks.finding_helpers import FAIL, PASS, UNKNOWN, gpu_finding, why_not
from validator.judge.policy import Policy
from validator.model import (
    BurnResult,
    BurnStatus,
    CheckFamily,
    DriftCheck,
    Finding,
    GpuFacts,
    NodeFacts,
    Unavailable,
)

FAMILY = CheckFamily.BURN


def _burned(was: CertifiedGpu, gpu: GpuFacts, burn: BurnResult, policy: Policy) -> Finding:
    """One GPU's burn-in speed against its certified figure."""
    check = DriftCheck.BURN
    if was.burn_tflops is None:
        return gpu_finding(
            check,
            UNKNOWN,
            gpu,
            f"GPU {gpu.index}: the certificate holds no burn-in speed to compare with",
            expected="a certified TFLOPS figure",
            required=False,
        )
    drop = policy.thresholds.drift_burn_drop
    floor = was.burn_tflops * (1.0 - drop)
    expected = f">= {floor:.1f} TFLOPS ({was.burn_tflops:.1f} certified, -{drop:.0%})"
    ran = next((g for g in burn.gpus if g.index == gpu.index), None)
    if burn.error is not None or ran is None or ran.status is not BurnStatus.COMPLETED:
        why = burn.error or (ran.detail or ran.status.value if ran else "not burned")
        text = f"the burn-in gave no speed: {why}"
        return gpu_finding(
            check, UNKNOWN, gpu, f"GPU {gpu.index}: {text}", observed=why, expected=expected
        )
    tflops = ran.tflops
    if isinstance(tflops, Unavailable) or not math.isfinite(tflops):
        why = why_not(tflops) if isinstance(tflops, Unavailable) else str(tflops)
        text = f"no burn-in speed: {why}"
        return gpu_finding(
            check, UNKNOWN, gpu, f"GPU {gpu.index}: {text}", observed=why, expected=expected
        )
    if tflops < floor:
        share = 1.0 - tflops / was.burn_tflops
        severity = FAIL
        text = (
            f"burn-in {tflops:.1f} TFLOPS is {share:.0%} below the certified {was.burn_tflops:.1f}"
        )
    else:
        severity, text = PASS, f"burn-in {tflops:.1f} TFLOPS"
    return gpu_finding(
        check,
        severity,
        gpu,
        f"GPU {gpu.index}: {text}",
        observed=f"{tflops:.1f} TFLOPS",
        expected=expected,
    )


def burn_findings(pairs: Sequence[Pair], facts: NodeFacts, policy: Policy) -> list[Finding]:
    """Each GPU's burn-in speed against its certified figure; none without a burn-in."""
    burn = facts.burn
    if burn is None:
        return []  # a quick drift check runs no burn-in: nothing to compare
    return [_burned(was, gpu, burn, policy) for was, gpu in pairs]


def compare_burn(inputs: DriftInputs) -> list[Finding]:
    """Each paired GPU's burn-in speed, when this drift run ran a burn-in."""
    return burn_findings(inputs.pairs, inputs.facts, inputs.policy)


__all__ = ["FAMILY", "burn_findings", "compare_burn"]
