"""What a check concludes: severities, verdicts, check families, actions, findings."""

from __future__ import annotations

import enum
import typing
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from validator.model.measured import _MANY_PER_HOST


class Severity(str, enum.Enum):
    """How a check came out."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"  # could not be measured or judged: never a pass


class Verdict(str, enum.Enum):
    """The node's outcome."""

    CERTIFIED = "CERTIFIED"
    NOT_CERTIFIED = "NOT_CERTIFIED"
    UNKNOWN = "UNKNOWN"  # nothing could be judged (no driver, no GPU, unreachable)


def overall_verdict(verdicts: typing.Iterable[Verdict]) -> Verdict:
    """The verdict of a whole run from its nodes' verdicts, the one rule for every command.

    CERTIFIED only when every node is; UNKNOWN when no node could be judged (or
    there is none); anything else, a mix of CERTIFIED and UNKNOWN included,
    NOT_CERTIFIED: one node that could not be judged keeps a fleet from being
    certified without hiding the nodes that were.
    """
    seen = set(verdicts)
    if not seen or seen == {Verdict.UNKNOWN}:
        return Verdict.UNKNOWN
    if seen == {Verdict.CERTIFIED}:
        return Verdict.CERTIFIED
    return Verdict.NOT_CERTIFIED


class CheckFamily(str, enum.Enum):
    """The family a check belongs to: the part of its id before the dot (``memory.capacity``)."""

    INVENTORY = "inventory"
    VERSIONS = "versions"
    STATE = "state"
    MEMORY = "memory"
    POWER = "power"
    THERMAL = "thermal"
    PCIE = "pcie"
    NVLINK = "nvlink"
    ERRORS = "errors"
    BURN = "burn"
    DCGM = "dcgm"
    INTERCONNECT = "interconnect"
    NETWORK = "network"  # the HCAs: InfiniBand and RoCE ports
    GPUDIRECT = "gpudirect"
    HOST = "host"  # the host around the GPUs: CPUs, memory, NVMe, mounts, services
    CONTAINER = "container"
    FLEET = "fleet"
    DRIFT = "drift"
    FABRIC = "fabric"  # the stage across nodes (validator.judge.cross_node_judge)

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, check: str) -> CheckFamily | None:
        """The family of a check id; None for an id outside every family."""
        family, _, _ = check.partition(".")
        try:
            return cls(family)
        except ValueError:
            return None


class Action(str, enum.Enum):
    """What the operator should do about a finding, from the least disruptive to the most.

    Each non-PASS finding carries one (``validator.judge.actions`` fills it in where a
    check does not choose); PASS findings carry NONE.
    """

    NONE = "none"
    RERUN = "rerun"  # a transient fault kept the check from telling: run it again
    # Not measured, and no rerun as it was would measure it: measure (or capture) what is
    # missing, as the finding says (--burn, --interconnect, the capture's missing file).
    MEASURE = "measure"
    WAIT_IDLE = "wait_for_idle_gpus"  # others' work is on the GPUs: drain or wait, then again
    FIX_SOFTWARE = "fix_software_stack"  # driver, CUDA, cuDNN, DCGM, settings: reprovision
    # A firmware (BIOS) setting is wrong: PCIe ACS on the switches between GPUs and NICs.
    FIX_BIOS = "fix_bios_setting"
    REBOOT = "reboot"
    RESET_GPU = "reset_gpu"  # nvidia-smi -r (or the node's reboot) with the GPU drained
    CHECK_COOLING_POWER = "check_cooling_or_power"
    RESEAT_CABLE_RISER = "reseat_or_replace_cable_or_riser"
    REPLACE_TRANSCEIVER = "replace_transceiver"  # an HCA port's optics or cable
    DRAIN_RMA = "drain_and_rma"

    def __str__(self) -> str:
        return self.value


# The actions that send a technician to the hardware (or its vendor): a GPU failing
# with one of these gets an RMA evidence file (validator.report.rma).
HARDWARE_ACTIONS: Tuple[Action, ...] = (
    Action.RESET_GPU,
    Action.CHECK_COOLING_POWER,
    Action.RESEAT_CABLE_RISER,
    Action.REPLACE_TRANSCEIVER,
    Action.DRAIN_RMA,
)

# What each action asks of the operator, in the words every report and finding uses
# (one mapping, so the terminal, HTML, JUnit, RMA files and messages never differ).
ACTION_WORDS: Dict[Action, str] = {
    Action.NONE: "nothing to do",
    Action.RERUN: "run it again",
    Action.MEASURE: "measure what is missing",
    Action.WAIT_IDLE: "drain the node or wait for its jobs to end, then certify again",
    Action.FIX_SOFTWARE: "fix the software stack",
    Action.REBOOT: "reboot the node",
    Action.RESET_GPU: "reset the GPU",
    Action.CHECK_COOLING_POWER: "check cooling and power",
    Action.RESEAT_CABLE_RISER: "reseat or replace the cable or riser",
    Action.REPLACE_TRANSCEIVER: "replace the transceiver or cable",
    Action.FIX_BIOS: "fix the BIOS setting",
    Action.DRAIN_RMA: "drain and RMA",
}


@dataclass(frozen=True, **_MANY_PER_HOST)
class Finding:
    """What one check concluded, for the node or for one GPU."""

    check: str  # family.name, e.g. "memory.capacity"
    severity: Severity
    message: str  # one readable sentence
    observed: str = ""
    expected: str = ""
    gpu_index: Optional[int] = None
    gpu_uuid: Optional[str] = None
    required: bool = True  # an UNKNOWN on a required check blocks certification
    action: Action = Action.NONE  # what to do about it (NONE on a PASS)
    action_source: str = ""  # where the action comes from, e.g. NVIDIA's Xid catalog
