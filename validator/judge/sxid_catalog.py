"""NVSwitch SXid errors: what each means, how severe it is, and what to do about it.

From NVIDIA's Fabric Manager User Guide (DU-09883-001_v1.3, October 2023), appendix D:
"Non-Fatal NVSwitch SXid Errors" (D.4), "Fatal NVSwitch SXid Errors" (D.5), "Always
Fatal NVSwitch SXid Errors" (D.6) and "Other Notable NVSwitch SXid Errors" (D.7)
(https://docs.nvidia.com/datacenter/tesla/pdf/fabric-manager-user-guide.pdf), as
transcribed in leptonai/gpud ``components/accelerator/nvidia/sxid/sxid.go``
@4a8de33a3f02e207f39e9023d67125592d599731. The guide's facts carry over (name,
section, recovery), not the code.

Actions, on bare metal (the guide's guest-VM wording read for the host):

* non-fatal (D.4): no recovery needed ("Not Applicable"): certify again; where the
  guide names a recovery, that one.
* fatal (D.5): the error is fatal to the partition using the port; the guide's recovery
  is to reset the GPUs and NVSwitches (D.9; for SXid 20034 on H100, "reset the GPU"):
  reset_gpu.
* always fatal (D.6): "Restart the host to reset the entire fabric/system": reboot.
* D.7: host errors, of which only 10003 ("Host_unhandled_interrupt") is fatal; thermal
  events ask for cooling to be checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from validator.model import Action

NON_FATAL = "non-fatal"
FATAL = "fatal"
ALWAYS_FATAL = "always fatal"

GUIDE = "NVIDIA Fabric Manager User Guide, SXid errors"


@dataclass(frozen=True)
class SxidInfo:
    """One SXid of the guide: its name, how fatal, the action and the guide's recovery."""

    name: str
    severity: str  # NON_FATAL, FATAL or ALWAYS_FATAL
    action: Action
    recovery: str = ""  # the guide's recovery where it names one beyond its section's

    @property
    def fatal(self) -> bool:
        """Whether the guide calls it fatal (to the partition or to the whole fabric)."""
        return self.severity != NON_FATAL


SXID_CATALOG: dict[int, SxidInfo] = {
    11004: SxidInfo(
        "Ingress invalid ACL",
        NON_FATAL,
        Action.FIX_SOFTWARE,
        "validate the fabric partition routing with the NVSwitch-audit tool",
    ),
    11012: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    11021: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    11022: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    11023: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    12021: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    12023: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    15008: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    15011: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    19049: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    19055: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    19057: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    19059: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    19062: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    19065: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    19068: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    19071: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    24001: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    24002: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    24003: SxidInfo("Single bit ECC errors", NON_FATAL, Action.RERUN),
    20001: SxidInfo("TX Replay Error", NON_FATAL, Action.RERUN),
    12028: SxidInfo(
        "egress nonposted PRIV error",
        NON_FATAL,
        Action.REBOOT,
        "restart the guest VM (bare metal: the host)",
    ),
    19084: SxidInfo(
        "AN1 Heartbeat Timeout Error",
        NON_FATAL,
        Action.RESET_GPU,
        "reset all GPUs and all NVSwitches",
    ),
    22013: SxidInfo("Minion Link DLREQ interrupt", NON_FATAL, Action.RERUN),
    20012: SxidInfo(
        "Broken/inconsistent connection",
        NON_FATAL,
        Action.RESEAT_CABLE_RISER,
        "unless after an uncoordinated shutdown, check the link's mechanical connections",
    ),
    11001: SxidInfo("ingress invalid command", FATAL, Action.RESET_GPU),
    11009: SxidInfo("ingress invalid VCSet", FATAL, Action.RESET_GPU),
    11013: SxidInfo("ingress header DBE", FATAL, Action.RESET_GPU),
    11018: SxidInfo("ingress RID DBE", FATAL, Action.RESET_GPU),
    11019: SxidInfo("ingress RLAN DBE", FATAL, Action.RESET_GPU),
    11020: SxidInfo("ingress control parity", FATAL, Action.RESET_GPU),
    12001: SxidInfo("egress crossbar overflow", FATAL, Action.RESET_GPU),
    12002: SxidInfo("egress packet route", FATAL, Action.RESET_GPU),
    12022: SxidInfo("egress input ECC DBE error", FATAL, Action.RESET_GPU),
    12024: SxidInfo("egress output ECC DBE error", FATAL, Action.RESET_GPU),
    12025: SxidInfo("egress credit overflow", FATAL, Action.RESET_GPU),
    12026: SxidInfo("egress destination request ID error", FATAL, Action.RESET_GPU),
    12027: SxidInfo("egress destination response ID error", FATAL, Action.RESET_GPU),
    12030: SxidInfo("egress control parity error", FATAL, Action.RESET_GPU),
    12031: SxidInfo("egress credit parity error", FATAL, Action.RESET_GPU),
    12032: SxidInfo("egress flit type mismatch", FATAL, Action.RESET_GPU),
    14017: SxidInfo("TS ATO timeout", FATAL, Action.RESET_GPU),
    15001: SxidInfo("route buffer over/underflow", FATAL, Action.RESET_GPU),
    15006: SxidInfo("route transdone over/underflow", FATAL, Action.RESET_GPU),
    15009: SxidInfo("route GLT DBE", FATAL, Action.RESET_GPU),
    15010: SxidInfo("route parity", FATAL, Action.RESET_GPU),
    15012: SxidInfo("route incoming DBE", FATAL, Action.RESET_GPU),
    15013: SxidInfo("route credit parity", FATAL, Action.RESET_GPU),
    19047: SxidInfo("NCISOC HDR ECC DBE Error", FATAL, Action.RESET_GPU),
    19048: SxidInfo("NCISOC DAT ECC DBE Error", FATAL, Action.RESET_GPU),
    19054: SxidInfo("HDR RAM ECC DBE Error", FATAL, Action.RESET_GPU),
    19056: SxidInfo("DAT0 RAM ECC DBE Error", FATAL, Action.RESET_GPU),
    19058: SxidInfo("DAT1 RAM ECC DBE Error", FATAL, Action.RESET_GPU),
    19060: SxidInfo("CREQ RAM HDR ECC DBE Error", FATAL, Action.RESET_GPU),
    19061: SxidInfo("CREQ RAM DAT ECC DBE Error", FATAL, Action.RESET_GPU),
    19063: SxidInfo("Response RAM HDR ECC DBE Error", FATAL, Action.RESET_GPU),
    19064: SxidInfo("Response RAM DAT ECC DBE Error", FATAL, Action.RESET_GPU),
    19066: SxidInfo("COM RAM HDR ECC DBE Error", FATAL, Action.RESET_GPU),
    19067: SxidInfo("COM RAM DAT ECC DBE Error", FATAL, Action.RESET_GPU),
    19069: SxidInfo("RSP1 RAM HDR ECC DBE Error", FATAL, Action.RESET_GPU),
    19070: SxidInfo("RSP1 RAM DAT ECC DBE Error", FATAL, Action.RESET_GPU),
    20034: SxidInfo(
        "LTSSM Fault Up",
        FATAL,
        Action.RESET_GPU,
        "the link went down from active; if it persists, report the GPU",
    ),
    22012: SxidInfo(
        "Minion Link NA interrupt",
        FATAL,
        Action.RESEAT_CABLE_RISER,
        "unless after an uncoordinated shutdown, check the link's mechanical connections",
    ),
    24004: SxidInfo("sourcetrack TCEN0 crubmstore DBE", FATAL, Action.RESET_GPU),
    24005: SxidInfo("sourcetrack TCEN0 TD crubmstore DBE", FATAL, Action.RESET_GPU),
    24006: SxidInfo("sourcetrack TCEN1 crubmstore DBE", FATAL, Action.RESET_GPU),
    24007: SxidInfo("sourcetrack timeout error", FATAL, Action.RESET_GPU),
    12020: SxidInfo("egress sequence ID error", ALWAYS_FATAL, Action.REBOOT),
    22003: SxidInfo("Minion Halt", ALWAYS_FATAL, Action.REBOOT),
    22011: SxidInfo("Minion exterror", ALWAYS_FATAL, Action.REBOOT),
    23001: SxidInfo("ingress SRC-VC buffer overflow", ALWAYS_FATAL, Action.REBOOT),
    23002: SxidInfo("ingress SRC-VC buffer underflow", ALWAYS_FATAL, Action.REBOOT),
    23003: SxidInfo("egress DST-VC credit overflow", ALWAYS_FATAL, Action.REBOOT),
    23004: SxidInfo("egress DST-VC credit underflow", ALWAYS_FATAL, Action.REBOOT),
    23005: SxidInfo("ingress packet burst error", ALWAYS_FATAL, Action.REBOOT),
    23006: SxidInfo("ingress packet sticky error", ALWAYS_FATAL, Action.REBOOT),
    23007: SxidInfo("possible bubbles at ingress", ALWAYS_FATAL, Action.REBOOT),
    23008: SxidInfo("ingress packet invalid dst error", ALWAYS_FATAL, Action.REBOOT),
    23009: SxidInfo("ingress packet parity error", ALWAYS_FATAL, Action.REBOOT),
    23010: SxidInfo("ingress SRC-VC buffer overflow", ALWAYS_FATAL, Action.REBOOT),
    23011: SxidInfo("ingress SRC-VC buffer underflow", ALWAYS_FATAL, Action.REBOOT),
    23012: SxidInfo("egress DST-VC credit overflow", ALWAYS_FATAL, Action.REBOOT),
    23013: SxidInfo("egress DST-VC credit underflow", ALWAYS_FATAL, Action.REBOOT),
    23014: SxidInfo("ingress packet burst error", ALWAYS_FATAL, Action.REBOOT),
    23015: SxidInfo("ingress packet sticky error", ALWAYS_FATAL, Action.REBOOT),
    23016: SxidInfo("possible bubbles at ingress", ALWAYS_FATAL, Action.REBOOT),
    23017: SxidInfo("ingress credit parity error", ALWAYS_FATAL, Action.REBOOT),
    10001: SxidInfo(
        "Host_priv_error",
        NON_FATAL,
        Action.RERUN,
        "not fatal, but may be followed by fatal events",
    ),
    10002: SxidInfo(
        "Host_priv_timeout",
        NON_FATAL,
        Action.RERUN,
        "not fatal, but may be followed by fatal events",
    ),
    10003: SxidInfo(
        "Host_unhandled_interrupt",
        FATAL,
        Action.RESET_GPU,
        "reset all GPUs and NVSwitches",
    ),
    10004: SxidInfo(
        "Host_thermal_event_start",
        NON_FATAL,
        Action.CHECK_COOLING_POWER,
        "ensure the system cooling is sufficient",
    ),
    10005: SxidInfo(
        "Host_thermal_event_end",
        NON_FATAL,
        Action.CHECK_COOLING_POWER,
        "ensure the system cooling is sufficient",
    ),
}


def sxid_info(sxid: int) -> SxidInfo | None:
    """The guide's entry for an SXid; None for one the guide does not list."""
    return SXID_CATALOG.get(sxid)
