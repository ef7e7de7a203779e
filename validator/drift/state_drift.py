"""Drift of the GPUs' state, paired with :mod:`validator.judge.checks.state`.

* Persistence mode on when certified (or, not read then, required by the policy) and
  off now is drift.
* A recovery action other than none is drift whatever the certificate holds (a flag set
  now, as a pending row remap), with the action NVIDIA's guide gives for it
  (:func:`validator.judge.recovery.recovery_step`). It needs no baseline, so a
  certificate older than the check (schema 1) is judged too.
"""

from __future__ import annotations

from validator.certificate import CertifiedGpu
from validator.drift.drift_helpers import DriftInputs, moved
from validator.judge.checks.finding_helpers import FAIL, PASS, gpu_finding, unknown_gpu, with_action
from validator.judge.policy import Policy
from validator.judge.recovery import recovery_step
from validator.model import CheckFamily, DriftCheck, Finding, GpuFacts, Unavailable

FAMILY = CheckFamily.STATE


def _persistence(was: CertifiedGpu, gpu: GpuFacts, policy: Policy) -> Finding | None:
    check, now = DriftCheck.PERSISTENCE, gpu.persistence_mode
    expected_on = was.persistence_mode is True or (
        was.persistence_mode is None and policy.persistence_mode_required
    )
    if not expected_on:
        return None
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, "persistence mode", now, expected="on")
    changed = (
        "persistence mode is off (it was on when certified); turn it on with nvidia-persistenced"
        if now is False
        else None
    )
    state = "off" if now is False else "on"
    return moved(check, gpu, changed, "persistence mode on", observed=state, expected="on")


def _recovery_action(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    """Anything but "none" now is drift, whatever the certificate holds.

    A certified node had none (``state.recovery_action`` fails any other), and the
    driver asking for a reset or reboot needs no baseline to be acted on.
    """
    check, now = DriftCheck.RECOVERY_ACTION, gpu.recovery_action
    if isinstance(now, Unavailable):
        if was.recovery_action is None:
            return None  # not read then (a driver before R575), not read now
        return unknown_gpu(check, gpu, "recovery action", now, expected="none")
    if now == "none":
        text = f"GPU {gpu.index}: no recovery action needed"
        return gpu_finding(check, PASS, gpu, text, observed=now, expected="none")
    step = recovery_step(now)
    certified = f" (certified with {was.recovery_action})" if was.recovery_action else ""
    finding = gpu_finding(
        check,
        FAIL,
        gpu,
        f"GPU {gpu.index}: the driver asks for recovery action {now}; "
        f"{step.words.format(index=gpu.index)}{certified}",
        observed=now,
        expected="none",
    )
    return with_action(finding, step.action, f"NVML GPU recovery action: {now}")


def compare_state(inputs: DriftInputs) -> list[Finding]:
    """Each paired GPU's persistence mode, then each one's recovery action."""
    found = [_persistence(was, gpu, inputs.policy) for was, gpu in inputs.pairs]
    found += [_recovery_action(was, gpu) for was, gpu in inputs.pairs]
    return [finding for finding in found if finding is not None]


__all__ = ["FAMILY", "compare_state"]
