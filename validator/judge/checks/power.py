"""Power: no cap set below the default, the default as the SKU ships, limits in range."""

from __future__ import annotations

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    WARN,
    gpu_finding,
    readable_gpus,
    unknown_gpu,
    unknown_sku,
    watts,
)
from validator.judge.policy import Policy
from validator.model import Finding, GpuFacts, NodeFacts, Unavailable

# NVML reports limits in milliwatts; half a watt absorbs the rounding to watts.
_WATT_SLACK = 0.5


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge each GPU's enforced and default power limits."""
    findings: list[Finding] = []
    gpus = readable_gpus(facts)
    if sku is None and gpus:
        findings.append(unknown_sku("power.default", "The default power limit", required=False))
    for gpu in gpus:
        findings.append(_cap(gpu, policy, sku))
        if sku is not None:
            findings.append(_default(gpu, sku))
        findings.append(_range(gpu))
    return findings


def _cap(gpu: GpuFacts, policy: Policy, sku: Sku | None) -> Finding:
    check_id = "power.limit"
    enforced, default = gpu.power_limit_enforced_w, gpu.power_limit_default_w
    if isinstance(enforced, Unavailable):
        return unknown_gpu(check_id, gpu, "enforced power limit", enforced)
    if isinstance(default, Unavailable):
        return unknown_gpu(check_id, gpu, "default power limit", default)
    ratio = enforced / default if default > 0 else 0.0
    minimum = policy.thresholds.power_limit_min_ratio
    observed = f"{watts(enforced)} ({ratio:.0%} of {watts(default)})"
    expected = f">= {minimum:.0%} of the default"
    if ratio >= minimum:
        return gpu_finding(
            check_id,
            PASS,
            gpu,
            f"GPU {gpu.index} enforces {watts(enforced)}, {ratio:.0%} of its "
            f"{watts(default)} default",
            observed=observed,
            expected=expected,
        )
    if sku is not None and sku.form_factor == "superchip":
        # Grace Hopper steers power between CPU and GPU within the module limit, so the
        # GPU's enforced limit sits below its default on a healthy, uncapped module.
        return gpu_finding(
            check_id,
            WARN,
            gpu,
            f"GPU {gpu.index} enforces {watts(enforced)}, {ratio:.0%} of its "
            f"{watts(default)} default; on a {sku.label} the module shares power with the "
            "CPU, so check the module power limit rather than the GPU's",
            observed=observed,
            expected=expected,
        )
    return gpu_finding(
        check_id,
        FAIL,
        gpu,
        f"GPU {gpu.index} enforced power limit {watts(enforced)} is {ratio:.0%} of its "
        f"{watts(default)} default; a cap has been set (nvidia-smi -pl), restore it with "
        f"nvidia-smi -i {gpu.index} -pl {default:g}",
        observed=observed,
        expected=expected,
    )


def _default(gpu: GpuFacts, sku: Sku) -> Finding:
    check_id = "power.default"
    default = gpu.power_limit_default_w
    accepted = " or ".join(watts(w) for w in sku.power_limits_w)
    if isinstance(default, Unavailable):
        return unknown_gpu(check_id, gpu, "default power limit", default, required=False)
    if any(abs(default - w) <= _WATT_SLACK for w in sku.power_limits_w):
        return gpu_finding(
            check_id,
            PASS,
            gpu,
            f"GPU {gpu.index} default power limit {watts(default)} is as the {sku.label} ships",
            observed=watts(default),
            expected=accepted,
            required=False,
        )
    basis = "" if sku.power_verified else " (catalog figure from the datasheet only)"
    return gpu_finding(
        check_id,
        WARN,
        gpu,
        f"GPU {gpu.index} default power limit {watts(default)} differs from the {accepted} the "
        f"{sku.label} ships with{basis}; the board vendor configured it differently",
        observed=watts(default),
        expected=accepted,
        required=False,
    )


def _range(gpu: GpuFacts) -> Finding:
    check_id = "power.range"
    enforced = gpu.power_limit_enforced_w
    low, high = gpu.power_limit_min_w, gpu.power_limit_max_w
    if isinstance(enforced, Unavailable):
        return unknown_gpu(check_id, gpu, "enforced power limit", enforced, required=False)
    if isinstance(low, Unavailable):
        return unknown_gpu(check_id, gpu, "minimum power limit", low, required=False)
    if isinstance(high, Unavailable):
        return unknown_gpu(check_id, gpu, "maximum power limit", high, required=False)
    expected = f"{watts(low)}-{watts(high)}"
    if low - _WATT_SLACK <= enforced <= high + _WATT_SLACK:
        return gpu_finding(
            check_id,
            PASS,
            gpu,
            f"GPU {gpu.index} enforced limit {watts(enforced)} is within {expected}",
            observed=watts(enforced),
            expected=expected,
            required=False,
        )
    return gpu_finding(
        check_id,
        FAIL,
        gpu,
        f"GPU {gpu.index} enforced limit {watts(enforced)} is outside the {expected} the "
        "board allows; the driver or firmware reports an impossible setting",
        observed=watts(enforced),
        expected=expected,
        required=False,
    )
