"""Thermal: headroom to the slowdown point at idle, and no thermal or hardware throttling.

Older GPUs report absolute thresholds (slowdown at 87 C); Hopper and newer report offsets
to T.Limit (slowdown at -2 C, current margin 57 C), so the margin is computed either way.
Every catalogued GPU in the shared captures reports one form or the other (only a GTX 680
and a GTX 1070 Ti report neither). A GPU whose temperature could not be read (or was
implausible: the collector makes such a reading "not measured"), or that reported
neither form, has an unknown headroom, and that UNKNOWN is required: fail closed. The
catalog holds no slowdown temperatures, so there is no other basis to judge it by.
Throttle reasons can FAIL, so their UNKNOWN is required too.
"""

from __future__ import annotations

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    gpu_finding,
    readable_gpus,
    unknown_gpu,
    why_not,
)
from validator.judge.policy import Policy
from validator.model import Finding, GpuFacts, NodeFacts, Unavailable

# Clock-event reasons that mean the GPU is being slowed by heat or by a hardware signal.
BAD_REASONS = (
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
)
# Normal at rest or by configuration: an idle GPU, its software power cap, set clocks.
BENIGN_REASONS = (
    "gpu_idle",
    "sw_power_cap",
    "applications_clocks_setting",
    "sync_boost",
    "display_clock_setting",
)


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge each GPU's thermal margin and active throttle reasons."""
    findings: list[Finding] = []
    for gpu in readable_gpus(facts):
        findings.append(_margin(gpu, policy))
        findings.append(_throttle(gpu))
    return findings


def slowdown_temperature(gpu: GpuFacts) -> float | None:
    """The slowdown point in degrees C: as reported, or from the T.Limit form.

    Hopper and newer report the margin to T.Limit now and the slowdown point as
    an offset to T.Limit: T.Limit = temperature + margin, slowdown = T.Limit -
    offset (the offset is negative: slowdown lies above T.Limit).
    """
    if isinstance(gpu.temp_slowdown_c, float):
        return gpu.temp_slowdown_c
    current, margin, offset = gpu.temperature_gpu_c, gpu.tlimit_margin_c, gpu.tlimit_slowdown_c
    if isinstance(current, float) and isinstance(margin, float) and isinstance(offset, float):
        return current + margin - offset
    return None


def _margin_of(gpu: GpuFacts) -> tuple[float, str] | None:
    current, slowdown = gpu.temperature_gpu_c, gpu.temp_slowdown_c
    if not isinstance(current, Unavailable) and not isinstance(slowdown, Unavailable):
        return slowdown - current, f"{current:g} C now, slowdown at {slowdown:g} C"
    margin, offset = gpu.tlimit_margin_c, gpu.tlimit_slowdown_c
    if not isinstance(margin, Unavailable) and not isinstance(offset, Unavailable):
        return margin - offset, f"T.Limit margin {margin:g} C, slowdown at {offset:g} C"
    return None


def _no_thresholds(gpu: GpuFacts) -> str:
    """Why neither threshold form could be used: each missing value and its reason."""
    parts = []
    for name, value in (
        ("slowdown temperature", gpu.temp_slowdown_c),
        ("T.Limit margin", gpu.tlimit_margin_c),
        ("T.Limit slowdown offset", gpu.tlimit_slowdown_c),
    ):
        if isinstance(value, Unavailable):
            parts.append(f"{name} {why_not(value)}")
    return "; ".join(parts)


def _margin(gpu: GpuFacts, policy: Policy) -> Finding:
    check_id = "thermal.margin"
    minimum = policy.thresholds.thermal_margin_min_c
    expected = f">= {minimum:g} C"
    current = gpu.temperature_gpu_c
    if isinstance(current, Unavailable):
        return gpu_finding(
            check_id,
            UNKNOWN,
            gpu,
            f"GPU {gpu.index}'s temperature could not be read, so its thermal headroom is "
            f"unknown: {why_not(current)}",
            observed=current,
            expected=expected,
        )
    found = _margin_of(gpu)
    if found is None:
        return gpu_finding(
            check_id,
            UNKNOWN,
            gpu,
            f"GPU {gpu.index} reported neither a slowdown temperature nor a T.Limit margin "
            f"and offset, so its thermal headroom is unknown: {_no_thresholds(gpu)}",
            expected=expected,
        )
    margin, how = found
    observed = f"{margin:g} C ({how})"
    if margin >= minimum:
        return gpu_finding(
            check_id,
            PASS,
            gpu,
            f"GPU {gpu.index} is {margin:g} C below its slowdown point at idle",
            observed=observed,
            expected=expected,
        )
    return gpu_finding(
        check_id,
        WARN,
        gpu,
        f"GPU {gpu.index} is only {margin:g} C below its slowdown point at idle ({how}); "
        "check airflow, fans and coolant",
        observed=observed,
        expected=expected,
    )


def _throttle(gpu: GpuFacts) -> Finding:
    check_id = "thermal.throttle"
    reasons = gpu.clock_event_reasons
    if isinstance(reasons, Unavailable):
        return unknown_gpu(check_id, gpu, "clock-event (throttle) reasons", reasons)
    bad = [r for r in reasons if r in BAD_REASONS]
    odd = [r for r in reasons if r not in BAD_REASONS and r not in BENIGN_REASONS]
    active = ", ".join(reasons) or "none"
    if bad:
        return gpu_finding(
            check_id,
            FAIL,
            gpu,
            f"GPU {gpu.index} is being slowed down ({', '.join(bad)}); check cooling, power "
            "delivery and the PSU/BMC power-brake signal",
            observed=active,
            expected="none of " + ", ".join(BAD_REASONS),
        )
    if odd:
        return gpu_finding(
            check_id,
            WARN,
            gpu,
            f"GPU {gpu.index} reports clock-event reasons this tool does not know "
            f"({', '.join(odd)})",
            observed=active,
            expected="known reasons",
        )
    note = f" (active: {active}, normal at rest)" if reasons else ""
    return gpu_finding(
        check_id,
        PASS,
        gpu,
        f"GPU {gpu.index} is not being throttled{note}",
        observed=active,
        expected="none of " + ", ".join(BAD_REASONS),
    )
