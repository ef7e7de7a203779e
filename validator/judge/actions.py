"""What to do about each finding: one table of default actions, by check id and severity.

A check that knows the right action for one finding (an Xid by NVIDIA's catalog, a
DCGM error by its severity, a recovery action the driver gave) sets it on the
finding, and it is kept. Every other non-PASS finding gets the default of its check
id here; a PASS carries none. :func:`assign_actions` is applied once where findings
leave the judge (``judge_node``, the fleet view, drift) and is idempotent, so the
service layer may apply it again to findings made outside the judge (transport).

The table is written the way an operator triages: the least disruptive step that
fixes the cause. UNKNOWN defaults to "run it again", except where what blocked the
check is missing software; the judge then keeps that only where the cause is transient
and gives every other the step that helps (validator.judge.checks.advice: the driver's
fix, a capture's missing file, ``--burn``). A WARN takes its check's FAIL action unless
its row says otherwise (a milder step: watch it, run again, or nothing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from validator.model import Action, Finding, NodeResult, Report, Severity

# Short names keep the table one row a check.
NONE = Action.NONE
RERUN = Action.RERUN
SOFTWARE = Action.FIX_SOFTWARE
REBOOT = Action.REBOOT
RESET = Action.RESET_GPU
COOLING = Action.CHECK_COOLING_POWER
RESEAT = Action.RESEAT_CABLE_RISER
RMA = Action.DRAIN_RMA
TRANSCEIVER = Action.REPLACE_TRANSCEIVER

# Where a default comes from, for Finding.action_source: the table, not a catalog.
DEFAULT_SOURCE = "gpuready default"


@dataclasses.dataclass(frozen=True)
class Rule:
    """The default action of one check, per severity.

    Where one check id covers faults with different fixes (a pending row remap is a
    reset, a failed one an RMA), the check sets the action itself; this is its fallback.
    """

    fail: Action
    unknown: Action = RERUN
    warn: Action | None = None  # None: as ``fail``

    def action_for(self, finding: Finding) -> Action:
        """The default for ``finding`` by its severity (NONE on a PASS)."""
        if finding.severity is Severity.PASS:
            return NONE
        if finding.severity is Severity.UNKNOWN:
            return self.unknown
        if finding.severity is Severity.WARN:
            return self.warn if self.warn is not None else self.fail
        return self.fail


RULES: dict[str, Rule] = {
    # ---- inventory: what is there
    # No driver answers while the PCI bus shows GPUs: install or load it.
    "inventory.driver": Rule(SOFTWARE, unknown=SOFTWARE),
    # A GPU fell off the bus: NVIDIA's catalog (Xid 79) says reboot the bare metal first;
    # a GPU none of whose readings succeeded is wedged: a reboot clears the driver too.
    "inventory.gpu_status": Rule(REBOOT, unknown=REBOOT),
    # Fewer GPUs than the bus or the policy says: one is unseated or lost its power;
    # no count to compare with is the policy's expected_gpu_count missing (a setting).
    "inventory.gpu_count": Rule(RESEAT, unknown=SOFTWARE),
    # On the bus but not initialised by the driver (RmInitAdapter): reboot first.
    "inventory.pci_visible": Rule(REBOOT),
    # Mixed models or not the model ordered: the wrong part was delivered.
    "inventory.model": Rule(RMA),
    "inventory.expected_model": Rule(RMA),
    # The model is not in the catalog: a catalog row or the policy's expected_model.
    "inventory.sku": Rule(SOFTWARE),
    # A bundle that proves the driver cannot reach a GPU; conflicting files: capture again.
    "inventory.sources_agree": Rule(REBOOT),
    # An impossible reading is "not measured": read it again (a driver glitch).
    "inventory.readings_plausible": Rule(RERUN),
    # A figure above the hardware's ceiling: measure again (a tool's or a unit's slip).
    "inventory.figures_plausible": Rule(RERUN),
    # ---- versions: the software stack against its pins
    # Every version is installed software: reprovision. Unreadable: ask again.
    "versions.driver": Rule(SOFTWARE),
    "versions.kernel_module": Rule(SOFTWARE),
    "versions.cuda": Rule(SOFTWARE),
    "versions.nvcc": Rule(SOFTWARE),
    "versions.nvcc_driver": Rule(SOFTWARE),
    "versions.cudnn": Rule(SOFTWARE),
    "versions.cudnn_cuda": Rule(SOFTWARE),
    # VBIOS is firmware the vendor's tool flashes: part of the stack, not a broken part.
    "versions.vbios": Rule(SOFTWARE),
    # ---- state: settings and what the driver says about each GPU
    # Others' work on the GPUs (a job's processes, a Slurm job): not tested; drain or wait.
    "state.busy": Rule(Action.WAIT_IDLE, unknown=Action.WAIT_IDLE),
    "state.persistence": Rule(SOFTWARE),  # nvidia-persistenced / nvidia-smi -pm 1
    # MIG off where wanted is a setting; a pending change is applied by a GPU reset.
    "state.mig": Rule(SOFTWARE, warn=RESET),
    # Fabric manager not running or its registration failed: start it / match its version.
    "state.fabric": Rule(SOFTWARE),
    # NVLinks down: the baseboard or bridge connection.
    # The driver asks for a reset before the GPU can be trusted (the check names the
    # exact one, a reboot included, when it knows it).
    "state.recovery_action": Rule(RESET),
    # ---- memory
    # Less HBM than the SKU has: a part that is not what it claims; no repair on site.
    "memory.capacity": Rule(RMA),
    # ECC off is a setting (nvidia-smi -e 1, then a reset).
    "memory.ecc_mode": Rule(SOFTWARE),
    # ---- power: a cap is a setting, a brake is the chassis
    "power.limit": Rule(SOFTWARE),  # capped below its default: nvidia-smi -pl / the BMC
    "power.default": Rule(SOFTWARE),  # another default than the SKU's: VBIOS / board variant
    "power.range": Rule(SOFTWARE),  # enforced limit outside min..max: a bad setting
    # ---- thermal: slowdown, brake and headroom are cooling or power delivery
    "thermal.margin": Rule(COOLING),
    # Thermal slowdown or the PSU/BMC power brake; reasons this tool does not know:
    # run again (and report them).
    "thermal.throttle": Rule(COOLING, warn=RERUN),
    # ---- PCIe and NVLink: links are cables, risers and seating
    "pcie.gen": Rule(RESEAT),
    "pcie.width": Rule(RESEAT),
    "pcie.replays": Rule(RESEAT),  # replays grow on a marginal riser or slot
    # The nvlink checks set checks.nvlink.link_repair(sku) on each FAIL (RMA on an SXM
    # baseboard, reseat elsewhere): these rows are its answer where no SKU is known.
    "nvlink.links": Rule(RESEAT),
    "nvlink.errors": Rule(RESEAT),  # CRC and replays: the link, its cable or bridge
    # ---- errors
    # Uncorrected ECC since the driver loaded: a reset applies the row remap; if it
    # comes back, memory.capacity / row_remap tell the RMA.
    "errors.ecc_uncorrected_volatile": Rule(RESET),
    # A lifetime count never clears: no rerun or reset changes it. Whether its errors
    # still matter is the row remap (or page retirement) state's finding, whose step
    # checks.advice gives it; alone, it is history (nothing to do).
    "errors.ecc_uncorrected_aggregate": Rule(RESET, warn=NONE),
    # Corrected counts since the driver loaded: burn it again and watch.
    "errors.ecc_corrected_volatile": Rule(RESET, warn=RERUN),
    "errors.memory_repair": Rule(RESET),
    # Pending is a reset; failed or too many rows is an RMA (set by the check).
    "errors.row_remap": Rule(RESET),
    "errors.retired_pages": Rule(RESET),
    # A hardware Xid the catalog gives no resolution for: reset is its commonest one;
    # an Xid on the policy's warn list is usually the application's: run again.
    "errors.xid": Rule(RESET, warn=RERUN),
    # A fatal SXid leaves the NVSwitch fabric degraded: the node's reboot resets it.
    "errors.sxid": Rule(REBOOT, warn=RERUN),
    # RmInitAdapter, fallen off the bus, GSP faults, ECC lines: reset (the check
    # names a reboot where the kind needs one).
    "errors.kernel_faults": Rule(RESET),
    # ---- burn-in
    "burn.run": Rule(RERUN),  # the burn-in could not run at all: run again
    # Wedged, failed or not visible to CUDA: reset it and burn again.
    "burn.status": Rule(RESET),
    # Wrong results or too slow for its model: the chip itself.
    "burn.correctness": Rule(RMA),
    "burn.cross_gpu": Rule(RMA),  # a silent data corruption suspect
    "burn.speed": Rule(RMA),
    "burn.speed_relative": Rule(RMA),
    # Under load: power not reached, throttled, hot or slow clocks: the chassis.
    "burn.power": Rule(COOLING),
    "burn.throttle": Rule(COOLING),
    "burn.thermal": Rule(COOLING),
    "burn.clocks": Rule(COOLING),
    # New uncorrected errors under load on a part being accepted; corrected ones: again.
    "burn.errors": Rule(RMA, warn=RERUN),
    "burn.xid": Rule(RESET, warn=RERUN),
    # ---- DCGM (dcgm.<test> by prefix below; DCGM's own severity wins where given)
    # dcgmi missing (install the dcgm role), timed out or unreadable.
    "dcgm.run": Rule(SOFTWARE, unknown=SOFTWARE),
    "dcgm.software": Rule(SOFTWARE),  # DCGM's deployment checks: libraries, permissions
    "dcgm.pcie": Rule(RESEAT),
    "dcgm.nvlink": Rule(RESEAT),
    "dcgm.nvbandwidth": Rule(RESEAT),
    "dcgm.targeted_power": Rule(COOLING),
    "dcgm.pulse_test": Rule(COOLING),  # power transients: the PSU and delivery
    # Short of its stress level: heat or power first (DCGM files it as thermal).
    "dcgm.sm_stress": Rule(COOLING),
    "dcgm.targeted_stress": Rule(COOLING),
    "dcgm.context_create": Rule(SOFTWARE),  # CUDA could not open the GPU
    # These rows are the fallback of validator.judge.checks.dcgm.TEST_ACTIONS, which
    # sets the action on every dcgm.* finding (error id and words first) and agrees
    # with them (tests/judge/test_actions.py).
    # ---- interconnect: the checks set the action on each finding (the host link, the
    # chip, checks.nvlink.link_repair for the board's links, the fabric manager or the
    # baseboard for the NVSwitch fabric); these rows are the fallback where none was set.
    # Not measured: measure it; the check names a missing library (fix the software).
    "interconnect.run": Rule(RERUN),
    "interconnect.h2d": Rule(RESEAT),  # the GPU's PCIe path: riser, cable, slot
    "interconnect.d2h": Rule(RESEAT),
    "interconnect.hbm": Rule(RMA),  # a copy within the GPU's own memory: the chip
    "interconnect.peer_access": Rule(RESEAT),
    "interconnect.p2p": Rule(RESEAT),
    # Slow: the links or the fabric (the milder step without a SKU); wrong values are
    # data corruption, an RMA the check sets.
    "interconnect.all_reduce": Rule(RESEAT),
    # ---- network: the HCAs (validator.judge.checks.network sets the action it knows)
    # No HCA where ports are expected: the driver (mlx5_ib) or the card's seating.
    "network.ports": Rule(RESEAT),
    "network.port_state": Rule(RESEAT),  # Polling: the cable or transceiver
    "network.rate": Rule(RESEAT),  # trained slow: a lower-class or marginal cable
    "network.link_layer": Rule(SOFTWARE),
    "network.firmware": Rule(SOFTWARE, unknown=RERUN),
    "network.pkey": Rule(SOFTWARE),
    "network.errors": Rule(TRANSCEIVER, warn=NONE),  # since boot: watched, judged by growth
    "network.error_growth": Rule(TRANSCEIVER),
    "network.link_flaps": Rule(RESEAT),
    "network.sources": Rule(RERUN, warn=RERUN),
    # ---- container: the toolkit, its CDI spec and the runtimes are software; the checks
    # set each action (regenerate the spec, configure the runtime, measure a capture's gap).
    "container.toolkit": Rule(SOFTWARE, unknown=SOFTWARE),
    "container.cdi": Rule(SOFTWARE, unknown=SOFTWARE),
    "container.runtime": Rule(SOFTWARE, unknown=Action.MEASURE),
    "container.gpus_visible": Rule(SOFTWARE, unknown=SOFTWARE),
    # ---- fleet: a GPU slow against its fleet while its node passed: the chassis
    # (cooling or power), as validator.judge.fleet explains.
    "fleet.speed": Rule(COOLING),
    # A bandwidth figure low against its fleet: interconnect_actions.figure_action sets the
    # interconnect checks' own action on each FAIL (riser, chip, links, fabric); this is
    # the fallback.
    "fleet.interconnect": Rule(RESEAT),
    # ---- transport: the host did not answer or was cut at its deadline
    "transport.reach": Rule(RERUN),
    "transport.deadline": Rule(RERUN),
    # ---- drift: what moved since the certificate
    "drift.baseline": Rule(RERUN),  # never certified: certify it
    "drift.certificate": Rule(RERUN),  # not trusted: find out why, certify again
    "drift.driver": Rule(SOFTWARE),
    "drift.cuda": Rule(SOFTWARE),
    "drift.kernel_module": Rule(SOFTWARE),
    "drift.nvcc": Rule(SOFTWARE),
    "drift.cudnn": Rule(SOFTWARE),
    "drift.vbios": Rule(SOFTWARE),
    "drift.power_limit": Rule(SOFTWARE),
    "drift.persistence": Rule(SOFTWARE),
    "drift.pcie_gen": Rule(RESEAT),
    "drift.pcie_width": Rule(RESEAT),
    # Drift sets the same link_repair(sku) as certify on its FAILs; as above with no SKU.
    "drift.nvlink": Rule(RESEAT),
    "drift.nvlink_errors": Rule(RESEAT),
    "drift.pcie_replay": Rule(RESEAT),
    "drift.ecc": Rule(RESET),
    "drift.row_remap": Rule(RESET),
    "drift.retired_pages": Rule(RESET),
    "drift.xid": Rule(RESET),
    "drift.recovery_action": Rule(RESET),
    "drift.dcgm": Rule(RMA),
    # A bandwidth fell since certified: drift sets interconnect_actions.figure_action's
    # answer on each FAIL, as the interconnect checks decide it; this is the fallback.
    "drift.interconnect": Rule(RESEAT),
    "drift.burn": Rule(COOLING),  # slower than certified: the chassis before the chip
    "drift.gpu_removed": Rule(RESEAT),  # a GPU gone from the bus
    "drift.gpu_added": Rule(RERUN),  # the inventory changed: certify it again
    "drift.gpu_swapped": Rule(RERUN),  # a replaced GPU needs its own certificate
    "drift.scope": Rule(RERUN),  # a certificate of some GPUs: certify the whole node
    "drift.network": Rule(RESEAT),  # an HCA port down or slower: its cable or transceiver
    "drift.network_firmware": Rule(SOFTWARE),  # back to the certified firmware, or recertify
    "drift.network_errors": Rule(TRANSCEIVER),
    # ---- gpudirect: GPUDirect RDMA readiness (each check sets its own action; these
    # are the fallbacks): peermem not loaded is the stack; ACS on is a BIOS setting; a
    # NIC across the socket is a card in the wrong slot; the IOMMU a kernel argument.
    "gpudirect.peermem": Rule(SOFTWARE),
    "gpudirect.acs": Rule(Action.FIX_BIOS),
    "gpudirect.nic_affinity": Rule(RESEAT),
    "gpudirect.iommu": Rule(SOFTWARE),
    "drift.gpudirect": Rule(Action.FIX_BIOS),
    # The host around the GPUs (validator/judge/checks/host_health.py): a CPU or DIMM
    # short of the system's count is the board's (after the BIOS is ruled out); a drive
    # not seen is reseated first; a failing drive is replaced; the rest is software.
    "host.cpu": Rule(RMA),
    "host.memory": Rule(RMA),
    "host.swap": Rule(SOFTWARE),
    "host.nvme_count": Rule(RESEAT),
    "host.nvme_smart": Rule(RMA),
    "host.mounts": Rule(SOFTWARE),
    "host.kernel_params": Rule(SOFTWARE),
    "host.services": Rule(SOFTWARE),
    "host.stack_versions": Rule(SOFTWARE),
    "drift.host": Rule(RERUN),  # the host changed since certification: certify it again
    "drift.container_toolkit": Rule(SOFTWARE),
    "drift.container_cdi": Rule(SOFTWARE),  # regenerate the CDI spec
    "drift.container_runtime": Rule(SOFTWARE),
}

# Check ids made per item (one a DCGM test): the longest matching prefix applies.
PREFIX_RULES: dict[str, Rule] = {
    # A DCGM test that failed (memory, memtest, sm_stress, targeted_stress, eud...)
    # without a more specific row: the hardware diagnostic failed: the chip.
    "dcgm.": Rule(RMA),
    # DCGM 3's deployment checks, one id each (dcgm.software.persistence_mode...).
    "dcgm.software.": Rule(SOFTWARE),
}

# A check id no row names (a report from another version): run it again rather
# than guess at hardware.
FALLBACK = Rule(RERUN)


def rule_for(check: str) -> Rule:
    """The rule of a check id: its own row, else its longest prefix row, else FALLBACK."""
    rule = RULES.get(check)
    if rule is not None:
        return rule
    prefixes = [prefix for prefix in PREFIX_RULES if check.startswith(prefix)]
    if prefixes:
        return PREFIX_RULES[max(prefixes, key=len)]
    return FALLBACK


def has_rule(check: str) -> bool:
    """True when the table (a row or a prefix) names ``check``, not the fallback."""
    return check in RULES or any(check.startswith(prefix) for prefix in PREFIX_RULES)


def default_action(finding: Finding) -> Action:
    """The table's action for a finding by its check id and severity (NONE on a PASS)."""
    return rule_for(finding.check).action_for(finding)


def assign_action(finding: Finding) -> Finding:
    """One finding with its action: NONE on a PASS, a check's own kept, else the default."""
    if finding.severity is Severity.PASS:
        if finding.action is NONE and not finding.action_source:
            return finding
        return dataclasses.replace(finding, action=NONE, action_source="")
    if finding.action is not NONE:
        return finding
    action = default_action(finding)
    if action is NONE:
        return finding
    return dataclasses.replace(finding, action=action, action_source=DEFAULT_SOURCE)


# A GPU that is slow is slow for a reason the other checks may already have found: a
# power cap, a brake, heat. Then its speed finding takes that finding's action rather
# than sending a healthy chip back to its vendor.
SPEED_CHECKS = frozenset({"burn.speed", "burn.speed_relative", "fleet.speed"})
SLOWNESS_CAUSES: tuple[str, ...] = (
    "power.limit",
    "power.range",
    "thermal.throttle",
    "burn.throttle",
    "burn.thermal",
    "burn.power",
    "burn.clocks",
)


def _explained(finding: Finding, causes: dict[int, Finding]) -> Finding:
    """A speed FAIL given its default, with its cause's action where one was found."""
    if (
        finding.check not in SPEED_CHECKS
        or finding.severity is not Severity.FAIL
        or finding.action_source != DEFAULT_SOURCE
        or finding.gpu_index not in causes
    ):
        return finding
    cause = causes[finding.gpu_index]
    return dataclasses.replace(
        finding, action=cause.action, action_source=f"gpuready: slow because of {cause.check}"
    )


# A GPU missing from the driver's list (or none of whose readings succeeded) is missing
# for a reason the kernel log may name: it did not initialise, or it fell off the bus.
# Then the fix is that fault's (reboot, reset), not a reseat for a GPU that is seated.
MISSING_GPU_CHECKS = frozenset({"inventory.gpu_count", "inventory.gpu_status"})
MISSING_GPU_FAULTS = ("rm_init_adapter_failed", "fallen_off_bus")  # errors.kernel_faults kinds
MISSING_GPU_XIDS = (79,)  # errors.xid: the GPU has fallen off the bus


def _missing_gpu_cause(finding: Finding) -> bool:
    """True for a FAIL that says why a GPU is missing: its kernel fault or its Xid 79."""
    if finding.severity is not Severity.FAIL or finding.action is NONE:
        return False
    observed = str(finding.observed)  # "fallen_off_bus x1" / "Xid 79 x2", as the checks write
    if finding.check == "errors.kernel_faults":
        return any(observed.startswith(f"{kind} ") for kind in MISSING_GPU_FAULTS)
    if finding.check == "errors.xid":
        return any(observed.startswith(f"Xid {xid} ") for xid in MISSING_GPU_XIDS)
    return False


def _explained_missing(finding: Finding, causes: list[Finding]) -> Finding:
    """A missing-GPU FAIL given its default, with its fault's action (its own GPU's first)."""
    if (
        finding.check not in MISSING_GPU_CHECKS
        or finding.severity is not Severity.FAIL
        or finding.action_source != DEFAULT_SOURCE
        or not causes
    ):
        return finding
    same_gpu = [
        c for c in causes if finding.gpu_index is not None and c.gpu_index == finding.gpu_index
    ]
    cause = (same_gpu or causes)[0]
    return dataclasses.replace(
        finding,
        action=cause.action,
        action_source=f"gpuready: explained by {cause.check} ({cause.observed})",
    )


def assign_actions(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """Every finding with its action, in the same order (see :func:`assign_action`).

    A GPU's speed FAIL that got the table's default takes instead the action of a
    FAIL that explains it on the same GPU (the first of SLOWNESS_CAUSES found): a
    power-capped GPU is slow because of its cap, and the fix is the cap. Likewise a
    missing GPU (inventory.gpu_count / gpu_status FAIL) on a node whose kernel log says
    a GPU did not initialise or fell off the bus takes that fault's action: one fault,
    one thing to do.
    """
    assigned = [assign_action(finding) for finding in findings]
    missing_causes = [finding for finding in assigned if _missing_gpu_cause(finding)]
    assigned = [_explained_missing(finding, missing_causes) for finding in assigned]
    causes: dict[int, Finding] = {}
    for check in reversed(SLOWNESS_CAUSES):  # the first cause listed wins
        for finding in assigned:
            if (
                finding.check == check
                and finding.severity is Severity.FAIL
                and finding.gpu_index is not None
                and finding.action is not NONE
            ):
                causes[finding.gpu_index] = finding
    return tuple(_explained(finding, causes) for finding in assigned)


__all__ = [
    "DEFAULT_SOURCE",
    "FALLBACK",
    "MISSING_GPU_CHECKS",
    "PREFIX_RULES",
    "RULES",
    "SLOWNESS_CAUSES",
    "SPEED_CHECKS",
    "Rule",
    "assign_action",
    "assign_actions",
    "default_action",
    "has_rule",
    "rule_for",
]


def result_with_actions(result: NodeResult) -> NodeResult:
    """The node's result with every finding saying what to do, those made outside the judge too.

    The judge gives its findings their actions; a transport's (an unreachable host, a
    deadline cut) are made in the fan-out, which does not import the judge.
    """
    findings = assign_actions(result.findings)
    return result if findings == result.findings else dataclasses.replace(result, findings=findings)


def report_with_actions(report: Report) -> Report:
    """The report with every node's findings saying what to do (:func:`result_with_actions`)."""
    nodes = tuple(result_with_actions(node) for node in report.nodes)
    return report if nodes == report.nodes else dataclasses.replace(report, nodes=nodes)
