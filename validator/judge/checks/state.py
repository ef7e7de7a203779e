"""State: persistence, MIG, Fabric Manager registration, NVLinks up, recovery action.

Fabric Manager is required when the policy says so; otherwise when the PCI bus shows
NVSwitches; and only when that was not measured, when the SKU ships on NVSwitch boards
(a 4-GPU HGX board has none, so the bus count is the better witness).
"""

from __future__ import annotations

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    gpu_finding,
    node_finding,
    readable_gpus,
    unknown_gpu,
    why_not,
    with_action,
)
from validator.judge.policy import Policy
from validator.judge.recovery import recovery_step
from validator.model import Finding, GpuFacts, NodeFacts, Reason, Unavailable


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge persistence, MIG, recovery action and fabric registration per GPU."""
    gpus = readable_gpus(facts)
    findings: list[Finding] = []
    for gpu in gpus:
        findings.append(_persistence(gpu, policy))
        findings.append(_mig(gpu, policy))
        findings.append(_recovery_action(gpu))
    if gpus:
        findings += _fabric(facts, gpus, policy, sku)
    return findings


def _persistence(gpu: GpuFacts, policy: Policy) -> Finding:
    check_id = "state.persistence"
    mode = gpu.persistence_mode
    required = policy.persistence_mode_required
    if isinstance(mode, Unavailable):
        return unknown_gpu(check_id, gpu, "persistence mode", mode, required=required)
    if mode or not required:
        return gpu_finding(
            check_id,
            PASS,
            gpu,
            f"GPU {gpu.index} persistence mode is {'on' if mode else 'off (not required)'}",
            observed="on" if mode else "off",
            expected="on" if required else "any",
            required=required,
        )
    return gpu_finding(
        check_id,
        FAIL,
        gpu,
        f"GPU {gpu.index} persistence mode is off, so the driver tears the GPU down between "
        "jobs; run systemctl enable --now nvidia-persistenced",
        observed="off",
        expected="on",
    )


def _mig(gpu: GpuFacts, policy: Policy) -> Finding:
    check_id = "state.mig"
    current, pending = gpu.mig_mode_current, gpu.mig_mode_pending
    want = policy.mig_mode
    expected = "any" if want is None else ("on" if want else "off")
    if isinstance(current, Unavailable):
        if current.reason is Reason.NOT_SUPPORTED:
            current = False  # a GPU without MIG runs with MIG off
        else:
            return unknown_gpu(check_id, gpu, "MIG mode", current, required=want is not None)
    state = "on" if current else "off"
    if want is not None and current != want:
        return gpu_finding(
            check_id,
            FAIL,
            gpu,
            f"GPU {gpu.index} has MIG {state} but the policy wants it {expected}; run "
            f"nvidia-smi -i {gpu.index} -mig {int(want)} and reset the GPU",
            observed=state,
            expected=expected,
        )
    if isinstance(pending, bool) and pending != current:
        return gpu_finding(
            check_id,
            WARN,
            gpu,
            f"GPU {gpu.index} has MIG {state} with a change to {'on' if pending else 'off'} "
            "pending; reset the GPU to apply or revert it",
            observed=f"{state}, pending {'on' if pending else 'off'}",
            expected=expected,
        )
    return gpu_finding(
        check_id,
        PASS,
        gpu,
        f"GPU {gpu.index} has MIG {state}" + (" as the policy wants" if want is not None else ""),
        observed=state,
        expected=expected,
    )


def _fabric_required(facts: NodeFacts, policy: Policy, sku: Sku | None) -> tuple[bool | None, str]:
    if policy.require_fabric_manager is not None:
        return policy.require_fabric_manager, "the policy"
    if isinstance(facts.pci_nvswitch_count, int):
        count = facts.pci_nvswitch_count
        return count > 0, f"{count} NVSwitches on the PCI bus"
    if sku is not None:
        return sku.nvswitch, f"{sku.label} boards" + ("" if sku.nvswitch else " (no NVSwitch)")
    return None, ""


def _fabric(
    facts: NodeFacts, gpus: list[GpuFacts], policy: Policy, sku: Sku | None
) -> list[Finding]:
    check_id = "state.fabric"
    required, basis = _fabric_required(facts, policy, sku)
    if required is None:
        return [
            node_finding(
                check_id,
                UNKNOWN,
                "Whether this node has NVSwitches (and needs Fabric Manager) is unknown",
                required=False,
            )
        ]
    if not required:
        return [
            node_finding(
                check_id,
                PASS,
                f"Fabric Manager is not needed ({basis})",
                observed="not needed",
                expected="not needed",
            )
        ]
    findings: list[Finding] = []
    for gpu in gpus:
        state, status = gpu.fabric_state, gpu.fabric_status
        if isinstance(state, Unavailable):
            # Only Hopper and newer report fabric registration through NVML.
            old = state.reason is Reason.NOT_SUPPORTED
            findings.append(
                gpu_finding(
                    check_id,
                    UNKNOWN,
                    gpu,
                    f"GPU {gpu.index} does not report its fabric registration through NVML; "
                    "check systemctl status nvidia-fabricmanager instead"
                    if old
                    else f"GPU {gpu.index} fabric registration could not be read: {why_not(state)}",
                    observed=state,
                    expected="completed/success",
                    required=not old,
                )
            )
            continue
        status_text = status if isinstance(status, str) else "unknown"
        if state.lower() == "completed" and status_text.lower() == "success":
            findings.append(
                gpu_finding(
                    check_id,
                    PASS,
                    gpu,
                    f"GPU {gpu.index} is registered with the NVSwitch fabric",
                    observed="completed/success",
                    expected="completed/success",
                )
            )
            continue
        findings.append(
            gpu_finding(
                check_id,
                FAIL,
                gpu,
                f"GPU {gpu.index} fabric registration is {state} ({status_text}) on a node "
                f"that needs it ({basis}); start nvidia-fabricmanager (systemctl enable --now "
                "nvidia-fabricmanager)",
                observed=f"{state}/{status_text}",
                expected="completed/success",
            )
        )
    return findings


def _recovery_action(gpu: GpuFacts) -> Finding:
    check_id = "state.recovery_action"
    action = gpu.recovery_action
    if isinstance(action, Unavailable):
        return _recovery_unknown(gpu, action)
    if action == "none":
        return gpu_finding(
            check_id,
            PASS,
            gpu,
            f"GPU {gpu.index} needs no recovery action",
            observed="none",
            expected="none",
        )
    step = recovery_step(action)
    finding = gpu_finding(
        check_id,
        FAIL,
        gpu,
        f"GPU {gpu.index}: the driver asks for recovery action {action}; "
        + step.words.format(index=gpu.index),
        observed=action,
        expected="none",
    )
    return with_action(finding, step.action, f"NVML GPU recovery action: {action}")


def _recovery_unknown(gpu: GpuFacts, value: Unavailable) -> Finding:
    """UNKNOWN; blocking only when the driver could have said and did not answer.

    Drivers before R575 do not report the field (not supported), and a capture may not
    hold it (not measured): the Xid and memory checks stand in, so neither blocks.
    """
    quiet = value.reason in (Reason.NOT_SUPPORTED, Reason.NOT_MEASURED)
    what = "recovery action (NVML's, R575 and newer)"
    return unknown_gpu(
        "state.recovery_action", gpu, what, value, expected="none", required=not quiet
    )
