"""Short meanings of the common Xid codes and what to do about each.

Meanings (:data:`XID_MEANINGS`) follow NVIDIA's Xid catalog
(https://docs.nvidia.com/deploy/xid-errors/), as summarised in
captures/xid/XID_MEANINGS.md. Resolutions (:data:`XID_RESOLUTIONS`) are the catalog's
"Resolution Bucket" columns for each code of :data:`XID_MEANINGS`, taken from
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html as generated into
leptonai/gpud ``components/accelerator/nvidia/xid/catalog_generated.go``
@4a8de33a3f02e207f39e9023d67125592d599731 ("Generated at 2025-10-29T00:35:32Z").
"""

from __future__ import annotations

from dataclasses import dataclass

from validator.model import Action

# Mnemonics and descriptions from NVIDIA's Xid catalog, without parentheses: findings
# print them inside a pair already
# (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, via captures/xid/XID_MEANINGS.md).
XID_MEANINGS: dict[int, str] = {
    13: "graphics engine exception, usually an application fault",
    31: "GPU memory page fault, usually an application fault",
    43: "GPU stopped processing after an application fault",
    45: "preemptive cleanup due to previous errors",
    48: "double-bit ECC error",
    56: "display engine error",
    57: "error programming video memory interface",
    58: "unstable video memory interface detected",
    61: "internal micro-controller breakpoint or warning",
    62: "internal micro-controller halt",
    63: "GPU memory remapping or page retirement event, applied at the next reset",
    64: "GPU memory remapping or page retirement failure",
    65: "video processor exception",
    68: "NVDEC video decoder exception",
    69: "graphics engine class error",
    73: "NVENC video encoder error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    80: "corrupted data sent to the GPU",
    81: "VGA subsystem error",
    92: "high single-bit ECC error rate",
    94: "contained memory error: uncorrectable, contained to the application",
    95: "uncontained memory error",
    109: "context switch timeout",
    119: "GSP RPC timeout, the GPU likely needs a reset",
    120: "GSP error",
    121: "C2C chip-to-chip link error",
    140: "unrecovered ECC error",
    143: "GPU initialization failure",
    144: "NVLink5 error NVLINK_SAW_ERROR",
    145: "NVLink5 error NVLINK_RLW_ERROR",
    146: "NVLink5 error NVLINK_TLW_ERROR",
    147: "NVLink5 error NVLINK_TREX_ERROR",
    148: "NVLink5 error NVLINK_NVLPW_CTRL_ERROR",
    149: "NVLink5 error NVLINK_NETIR_ERROR",
    150: "NVLink5 error NVLINK_MSE_ERROR",
    154: "recovery action for another Xid changed, informational",
}


def xid_meaning(xid: int) -> str:
    """A short description of an Xid, or a pointer to NVIDIA's catalog."""
    return XID_MEANINGS.get(xid, "see NVIDIA's Xid catalog")


@dataclass(frozen=True)
class XidResolution:
    """One Xid's row of NVIDIA's catalog: its mnemonic and the two resolution buckets."""

    mnemonic: str
    immediate: str  # "Resolution Bucket (Immediate Action)"
    investigatory: str  # "Resolution Bucket (Investigatory Action)"; "" where none is given


XID_RESOLUTIONS: dict[int, XidResolution] = {
    13: XidResolution(
        "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY",
        "RESTART_APP",
        "WORKFLOW_XID_13",
    ),
    31: XidResolution("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP", "WORKFLOW_XID_31"),
    43: XidResolution("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE", "CONTACT_SUPPORT"),
    45: XidResolution(
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "WORKFLOW_XID_45",
        "Solo: RESTART_FM; Not Solo: IGNORE (follow other Xid)",
    ),
    48: XidResolution("ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", "WORKFLOW_XID_48"),
    56: XidResolution("DISPLAY_CHANNEL_EXCEPTION", "CONTACT_SUPPORT", ""),
    57: XidResolution("FB_LINK_TRAINING_FAILURE_ERROR", "CONTACT_SUPPORT", ""),
    58: XidResolution("FB_MEMORY_ERROR", "CONTACT_SUPPORT", ""),
    61: XidResolution("PMU_BREAKPOINT", "CONTACT_SUPPORT", ""),
    62: XidResolution("PMU_HALT_ERROR", "RESET_GPU", "CONTACT_SUPPORT"),
    63: XidResolution("INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", "IGNORE"),
    64: XidResolution("INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", "CONTACT_SUPPORT"),
    65: XidResolution("ROBUST_CHANNEL_NVENC1_ERROR", "CONTACT_SUPPORT", ""),
    68: XidResolution("ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP", "CONTACT_SUPPORT"),
    69: XidResolution("ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP", "CHECK_APP/CUDA"),
    73: XidResolution("ROBUST_CHANNEL_NVENC2_ERROR", "CONTACT_SUPPORT", ""),
    74: XidResolution("NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT"),
    79: XidResolution("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "CONTACT_SUPPORT"),
    80: XidResolution("PBDMA_PUSHBUFFER_CRC_MISMATCH", "RESTART_APP", "CHECK_APP/CUDA"),
    81: XidResolution("ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", "CONTACT_SUPPORT", ""),
    92: XidResolution("EXCESSIVE_SBE_INTERRUPTS", "IGNORE", "CONTACT_SUPPORT"),
    94: XidResolution("ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", "IGNORE (sympathetic)"),
    95: XidResolution("ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", "IGNORE (sympathetic)"),
    109: XidResolution("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU", "CONTACT_SUPPORT"),
    119: XidResolution("GSP_RPC_TIMEOUT", "RESET_GPU", "INVESTIGATE_SW"),
    120: XidResolution("GSP_ERROR", "RESET_GPU", "INVESTIGATE_SW"),
    121: XidResolution("C2C_ERROR", "IGNORE", "CONTACT_SUPPORT"),
    140: XidResolution("UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", "CONTACT_SUPPORT"),
    143: XidResolution("GPU_INIT_ERROR", "RESET_GPU", "CONTACT_SUPPORT"),
    144: XidResolution("NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    145: XidResolution("NVLINK_RLW_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    146: XidResolution("NVLINK_TLW_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    147: XidResolution("NVLINK_TREX_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    148: XidResolution("NVLINK_NVLPW_CTRL_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    149: XidResolution("NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    150: XidResolution("NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    154: XidResolution(
        "GPU_RECOVERY_ACTION_CHANGED", "XID_154", "N/A Informational only regarding another Xid"
    ),
}

# The catalog's immediate-action buckets as our actions.
RESOLUTION_ACTIONS: dict[str, Action] = {
    # The application died of its own fault (or a contained error): run it again.
    "RESTART_APP": Action.RERUN,
    "RESET_GPU": Action.RESET_GPU,
    # "Restart bare metal": the node, not the GPU (Xid 79: the GPU is off the bus, no
    # reset through the driver can reach it).
    "RESTART_BM": Action.REBOOT,
    # NVIDIA's own support is the next step: the GPU goes back to its vendor.
    "CONTACT_SUPPORT": Action.DRAIN_RMA,
    # The workflows' first steps. Xid 48: drain the node and reset the GPU, which retires
    # or remaps the failing memory (NVIDIA GPU debug guidelines, "Xid 48 followed by 63
    # or 64: drain and reset"; NVIDIA Health Validation gpu_xid_48: drain, reset_gpu,
    # then service_required). Xid 74: stop the workloads and reset the GPU to bring the
    # link back (NVIDIA's Xid doc: "GPU reset or system reboot is needed"); the
    # investigatory CONTACT_SUPPORT follows when it recurs. NVLink5 (144-150): drain,
    # then reset_gpu, restart_os, service_required (NVIDIA Health Validation, NVLink
    # checks).
    "WORKFLOW_XID_48": Action.RESET_GPU,
    "WORKFLOW_NVLINK_ERR": Action.RESET_GPU,
    "WORKFLOW_NVLINK5_ERR": Action.RESET_GPU,
    # Xid 45 is the cleanup after another error: that Xid carries the action; alone, the
    # work it killed is run again.
    "WORKFLOW_XID_45": Action.RERUN,
    # No immediate action: if it recurs, the investigatory bucket is the next step.
    "IGNORE": Action.RERUN,
    # Informational: the GPU's recovery action (state.recovery_action) says what to do.
    "XID_154": Action.RERUN,
}

# Where the catalog's bucket is not the whole story for an acceptance run.
_OVERRIDES: dict[int, tuple[Action, str]] = {
    # IGNORE in the catalog because the remap is applied at the next GPU reset; a node
    # being accepted should carry the remap, so: reset (NVIDIA GPU memory error
    # management, "row-remapping will happen at the next GPU reset"; the line itself
    # says "reset gpu to activate").
    63: (Action.RESET_GPU, "the remap is applied at the next GPU reset"),
}


def xid_action(xid: int) -> tuple[Action, str] | None:
    """What to do about an Xid, and where that comes from; None for a code not catalogued.

    Returns:
        The action and its source, e.g. (RESET_GPU, "NVIDIA Xid catalog: RESET_GPU").
    """
    row = XID_RESOLUTIONS.get(xid)
    if row is None:
        return None
    source = f"NVIDIA Xid catalog: {row.immediate}"
    if xid in _OVERRIDES:
        override, why = _OVERRIDES[xid]
        return override, f"{source}; {why}"
    action = RESOLUTION_ACTIONS.get(row.immediate)
    if action is None:
        return None
    if row.immediate.startswith("WORKFLOW_"):
        source += f", first step: {action.value}"
    return action, source


# Immediate buckets that assume the application was at fault: no step for hardware.
_APPLICATION_BUCKETS = frozenset({"RESTART_APP", "IGNORE"})


def hardware_xid_action(xid: int) -> tuple[Action, str] | None:
    """What to do about an Xid the policy fails as a hardware fault; None if not catalogued.

    The catalog's immediate step for some of them (68, 69, 80, 92, 94) is RESTART_APP or
    IGNORE: right for a job that crashed, wrong for a node being accepted, where it would
    read "certify again". Those take the investigatory step instead: CONTACT_SUPPORT is
    an RMA; any other (CHECK_APP/CUDA, IGNORE (sympathetic)) a GPU reset, which clears
    the engine's state before the node is certified again.
    """
    found = xid_action(xid)
    row = XID_RESOLUTIONS.get(xid)
    if found is None or row is None:
        return found
    if row.immediate not in _APPLICATION_BUCKETS or xid in _OVERRIDES:
        return found
    source = f"NVIDIA Xid catalog: {row.immediate}, failed by the policy as hardware"
    if row.investigatory == "CONTACT_SUPPORT":
        return Action.DRAIN_RMA, f"{source}: the investigatory CONTACT_SUPPORT"
    investigatory = row.investigatory or "none given"
    return Action.RESET_GPU, f"{source}: reset the GPU (investigatory: {investigatory})"


__all__ = [
    "RESOLUTION_ACTIONS",
    "XID_MEANINGS",
    "XID_RESOLUTIONS",
    "XidResolution",
    "hardware_xid_action",
    "xid_action",
    "xid_meaning",
]
