"""What each GPU recovery action the driver reports asks of the operator, in one table.

The driver names the step a GPU needs before it can be trusted again
(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, ``<gpu_recovery_action>`` in ``nvidia-smi -q -x``).
Words follow NVIDIA's "Error Recovery and Response Flags" (GPU memory error management:
https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html)
and nvmlDeviceGpuRecoveryAction_t's own descriptions for the codes added later (5-7).
Both the certify check (``state.recovery_action``) and drift (``drift.recovery_action``)
read it, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from validator.model import Action


@dataclass(frozen=True)
class RecoveryStep:
    """One recovery action: what we call it, and what to do, in a sentence."""

    action: Action
    words: str  # "{index}" stands for the GPU's index


RECOVERY_STEPS: dict[str, RecoveryStep] = {
    "gpu_reset": RecoveryStep(
        Action.RESET_GPU, "stop every process on it and reset it (nvidia-smi -r -i {index})"
    ),
    "node_reboot": RecoveryStep(
        Action.REBOOT, "reboot the node: the fault may have left the OS in an inconsistent state"
    ),
    # Drain P2P: the GPU must carry no peer-to-peer traffic until the processes doing it
    # are gone; the driver then names the next step, which is read again.
    "drain_p2p": RecoveryStep(
        Action.RESET_GPU,
        "stop the processes doing peer-to-peer traffic with it and disable UVM persistence "
        "mode, then read its recovery action again (nvidia-smi -q -i {index})",
    ),
    "drain_and_reset": RecoveryStep(
        Action.RESET_GPU,
        "stop the processes doing peer-to-peer traffic with it, then reset it "
        "(nvidia-smi -r -i {index})",
    ),
    # An IMEX domain is the software that shares GPU memory across the nodes of one NVLink
    # domain (GB200 NVL72): its daemons are restarted, the GPU itself is not touched.
    "recover_imex_domain": RecoveryStep(
        Action.FIX_SOFTWARE,
        "recover its IMEX domain: restart nvidia-imex on every node of the NVLink domain",
    ),
    "bus_reset": RecoveryStep(
        Action.RESET_GPU, "stop every process on it and reset its PCIe bus (or reboot the node)"
    ),
    "system_reboot": RecoveryStep(Action.REBOOT, "reboot the system"),
}


def recovery_step(name: str) -> RecoveryStep:
    """The step for a recovery action name (every name but "none" has one: a test says so)."""
    return RECOVERY_STEPS[name]
