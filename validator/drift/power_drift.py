"""Drift of the power limit, paired with :mod:`validator.judge.checks.power`.

Each GPU's enforced power limit against the certified one: lowered or raised by more
than :data:`POWER_TOLERANCE_W` is drift; unreadable now, UNKNOWN; not read at
certification, nothing to compare.
"""

from __future__ import annotations

from validator.certificate import CertifiedGpu
from validator.drift.drift_helpers import DriftInputs, moved
from validator.judge.checks.finding_helpers import unknown_gpu, watts
from validator.model import CheckFamily, DriftCheck, Finding, GpuFacts, Unavailable

FAMILY = CheckFamily.POWER
# A power limit read back through NVML is in milliwatts rounded to watts by some
# readers; half a watt keeps rounding apart from a real change of the cap.
POWER_TOLERANCE_W = 0.5


def _power(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    check, before, now = (
        DriftCheck.POWER_LIMIT,
        was.power_limit_enforced_w,
        gpu.power_limit_enforced_w,
    )
    if before is None:
        return None
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, "power limit", now, expected=watts(before))
    changed = None
    if abs(now - before) > POWER_TOLERANCE_W:
        way = "lowered" if now < before else "raised"
        changed = f"power limit {way} from {watts(before)} to {watts(now)}"
    kept = f"power limit {watts(now)} as certified"
    return moved(check, gpu, changed, kept, observed=watts(now), expected=watts(before))


def compare_power(inputs: DriftInputs) -> list[Finding]:
    """Each paired GPU's enforced power limit against the certified one."""
    return [finding for was, gpu in inputs.pairs if (finding := _power(was, gpu)) is not None]


__all__ = ["FAMILY", "POWER_TOLERANCE_W", "compare_power"]
