"""Memory: capacity against the SKU, and ECC switched on."""

from __future__ import annotations

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    gpu_finding,
    readable_gpus,
    unknown_gpu,
    unknown_sku,
)
from validator.judge.policy import Policy
from validator.model import Finding, GpuFacts, NodeFacts, Reason, Unavailable


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge each GPU's memory size and ECC mode."""
    findings: list[Finding] = []
    gpus = readable_gpus(facts)
    if sku is None and gpus:
        findings.append(unknown_sku("memory.capacity", "Memory capacity"))
    for gpu in gpus:
        if sku is not None:
            findings.append(_capacity(gpu, policy, sku))
        findings.append(_ecc(gpu, policy))
    return findings


def _capacity(gpu: GpuFacts, policy: Policy, sku: Sku) -> Finding:
    check_id = "memory.capacity"
    total = gpu.memory_total_mib
    if isinstance(total, Unavailable):
        return unknown_gpu(check_id, gpu, "memory size", total)
    tolerance = policy.thresholds.memory_tolerance_mib
    if tolerance is None:
        tolerance = sku.memory_tolerance_mib
    expected = f"{sku.memory_mib} MiB +- {tolerance}"
    estimate = "" if sku.memory_verified else " (catalog figure is an estimate)"
    delta = total - sku.memory_mib
    if abs(delta) <= tolerance:
        return gpu_finding(
            check_id,
            PASS,
            gpu,
            f"GPU {gpu.index} has {total} MiB, matching the {sku.label} catalog figure{estimate}",
            observed=f"{total} MiB",
            expected=expected,
        )
    if delta < 0 and gpu.mig_mode_current is True:
        # With MIG on, the size shown can be one GPU instance's share, not the whole board,
        # so a short figure proves nothing either way.
        return gpu_finding(
            check_id,
            UNKNOWN,
            gpu,
            f"GPU {gpu.index} shows {total} MiB with MIG enabled, which may be one GPU "
            f"instance's share of the {sku.memory_mib} MiB the {sku.label} has; disable MIG to "
            "verify the full size",
            observed=f"{total} MiB (MIG on)",
            expected=expected,
            required=False,
        )
    return gpu_finding(
        check_id,
        FAIL,
        gpu,
        f"GPU {gpu.index} has {total} MiB but the {sku.label} has {sku.memory_mib} MiB "
        f"(+- {tolerance}){estimate}; it is a different part or memory is disabled",
        observed=f"{total} MiB",
        expected=expected,
    )


def _ecc(gpu: GpuFacts, policy: Policy) -> Finding:
    check_id = "memory.ecc_mode"
    current, pending = gpu.ecc_mode_current, gpu.ecc_mode_pending
    if not policy.require_ecc:
        state = "unknown" if isinstance(current, Unavailable) else ("on" if current else "off")
        return gpu_finding(
            check_id,
            PASS if not isinstance(current, Unavailable) else UNKNOWN,
            gpu,
            f"GPU {gpu.index} ECC is {state}; the policy does not require ECC",
            observed=state,
            expected="any",
            required=False,
        )
    if isinstance(current, Unavailable):
        if current.reason is Reason.NOT_SUPPORTED:
            return gpu_finding(
                check_id,
                FAIL,
                gpu,
                f"GPU {gpu.index} does not support ECC, which the policy requires",
                observed="not supported",
                expected="on",
            )
        return unknown_gpu(check_id, gpu, "ECC mode", current)
    if not current:
        then = " (it turns on at the next GPU reset)" if pending is True else ""
        return gpu_finding(
            check_id,
            FAIL,
            gpu,
            f"GPU {gpu.index} has ECC off{then}; enable it with nvidia-smi -i {gpu.index} "
            "-e 1 and reset the GPU",
            observed="off",
            expected="on",
        )
    if pending is False:
        return gpu_finding(
            check_id,
            FAIL,
            gpu,
            f"GPU {gpu.index} has ECC on but set to turn off at the next reset; run "
            f"nvidia-smi -i {gpu.index} -e 1",
            observed="on, pending off",
            expected="on",
        )
    return gpu_finding(
        check_id, PASS, gpu, f"GPU {gpu.index} has ECC on", observed="on", expected="on"
    )
