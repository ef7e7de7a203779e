"""DCGM diagnostics: one finding per test per GPU (``dcgm.<test>``), and ``dcgm.run``.

A test DCGM passed is a PASS; one it failed is a FAIL with DCGM's own message. A test
DCGM skipped or did not run proves nothing, and neither does a warning at a level the
policy asks for: UNKNOWN, required when the policy asks for a DCGM level
(``dcgm_level`` > 0). A recorded run judged with no level asked (a bundle's file,
judged whatever the level: a recorded FAIL is a FAIL) gives a warning as a WARN and a
skip as an UNKNOWN that does not block.

``dcgm.run`` says why there are no results (dcgmi missing, timed out, unreadable), or
that the level run was below the policy's: UNKNOWN, required when a level is asked for.
With no DCGM facts and no level asked for, nothing is said.

Actions (:func:`action_for_result`, which drift calls too, so certify and drift tell
the technician the same thing): DCGM's error id first (its severity RESET errors are a
GPU reset, from DCGM's ``dcgm_errors.c``), then its words (thermal violations, pending
row remaps, a busy device), then the test (:data:`TEST_ACTIONS`): memory faults drain
and RMA the GPU, PCIe and NVLink faults send a technician to the cable or riser,
thermal, power and stress shortfalls to the cooling and power, deployment (software)
checks to the software stack; any other failed test drains the GPU for RMA.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    gpu_finding,
    node_finding,
    why_not,
    with_action,
)
from validator.judge.policy import Policy
from validator.model import (
    Action,
    DcgmDiag,
    DcgmOutcome,
    DcgmTestResult,
    Finding,
    NodeFacts,
    Reason,
    Severity,
    Unavailable,
)

RUN = "dcgm.run"
PREFIX = "dcgm."

# DCGM_FR_* ids whose severity DCGM gives as DCGM_ERROR_RESET ("drain and reset GPU"),
# from dcgmlib/src/dcgm_errors.c (NVIDIA/DCGM @72fa3feaa67d716a75323a8f47c34ff3ee73f824).
RESET_ERRORS = {
    6: "DCGM_FR_PENDING_PAGE_RETIREMENTS",
    25: "DCGM_FR_GRAPHICS_PROCESSES",
    80: "DCGM_FR_ROW_REMAP_FAILURE",
    83: "DCGM_FR_DBE_PENDING_PAGE_RETIREMENTS",
    84: "DCGM_FR_UNCORRECTABLE_ROW_REMAP",
    85: "DCGM_FR_PENDING_ROW_REMAP",
    125: "DCGM_FR_GPU_RECOVERY_RESET",
    127: "DCGM_FR_GPU_RECOVERY_DRAIN_P2P",
    128: "DCGM_FR_GPU_RECOVERY_DRAIN_RESET",
    129: "DCGM_FR_NCCL_ERROR",
}
RESET_SOURCE = "DCGM error severity RESET"

# By test (DCGM 4 plugin names; deployment checks are ``software.<name>``). The dcgm.*
# rows of validator.judge.actions agree with this table (tests/judge/test_actions.py).
TEST_ACTIONS = {
    "memory": Action.DRAIN_RMA,
    "memtest": Action.DRAIN_RMA,
    "memory_bandwidth": Action.DRAIN_RMA,
    "pcie": Action.RESEAT_CABLE_RISER,
    # Bandwidth between GPUs: the NVLink bridge, cable or riser before the chip.
    "nvlink": Action.RESEAT_CABLE_RISER,
    "nvbandwidth": Action.RESEAT_CABLE_RISER,
    "targeted_power": Action.CHECK_COOLING_POWER,
    "pulse_test": Action.CHECK_COOLING_POWER,
    # A GPU that does not reach its stress level is held back by heat or power first
    # (DCGM files it as a thermal error).
    "sm_stress": Action.CHECK_COOLING_POWER,
    "targeted_stress": Action.CHECK_COOLING_POWER,
    "software": Action.FIX_SOFTWARE,
    "context_create": Action.FIX_SOFTWARE,
}
# A failed test the table does not name: the GPU cannot do its work.
DEFAULT_TEST_ACTION = Action.DRAIN_RMA
TEST_SOURCE = "gpuready: DCGM test"
# DCGM's thermal findings name the cooling whatever test caught them.
_THERMAL_WORDS = ("thermal violation", "cooling", "temperature is too high")
_BUSY = "busy or unavailable"
_REMAP_WORDS = ("row remapping", "row remap", "remappings are pending", "pending page retirement")


@dataclass(frozen=True)
class _GpuRef:
    """A GPU named by DCGM's index, for a GPU the facts do not hold."""

    index: int
    uuid: str | None = None


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge the DCGM diagnostic the facts carry against the policy's level."""
    level = policy.dcgm_level
    diag = facts.dcgm
    if diag is None:
        if level <= 0:
            return []
        return [_not_run(f"DCGM level {level} was asked for but was not run on this node")]
    results = diag.results
    if isinstance(results, Unavailable):
        return [_no_results(diag, results, level)]
    findings = [_finding(facts, result, level > 0) for result in results]
    short = _below_level(diag, level)
    return ([short] if short is not None else []) + findings


def _not_run(message: str, *, required: bool = True, observed: object = "not run") -> Finding:
    finding = node_finding(
        RUN, UNKNOWN, message, observed=observed, expected="dcgmi diag results", required=required
    )
    return with_action(finding, Action.RERUN, TEST_SOURCE)


def _no_results(diag: DcgmDiag, why: Unavailable, level: int) -> Finding:
    what = f"DCGM diagnostic level {diag.level}" if diag.level else "the DCGM diagnostic"
    finding = _not_run(
        f"{what} gave no results ({diag.source}): {why_not(why)}",
        required=level > 0,
        observed=why,
    )
    if why.reason is Reason.NOT_SUPPORTED:
        # dcgmi is not installed: provisioning fixes it, running again does not.
        return replace(finding, action=Action.FIX_SOFTWARE)
    return finding


def _below_level(diag: DcgmDiag, level: int) -> Finding | None:
    if level <= 0:
        return None
    if diag.level is None:
        return _not_run(
            f"the DCGM output ({diag.source}) does not say which level ran, so it cannot "
            f"stand for the level {level} the policy asks for: capture it with "
            f"`gpuready capture --dcgm-level {level}` (meta.json records the level)",
            observed="level not recorded",
        )
    if diag.level < level:
        return _not_run(
            f"DCGM ran level {diag.level} ({diag.source}), below the level {level} the "
            f"policy asks for: its tests do not cover level {level}'s",
            observed=f"level {diag.level}",
        )
    return None


def _finding(facts: NodeFacts, result: DcgmTestResult, asked: bool) -> Finding:
    check_id = PREFIX + result.test
    severity, words = _judged(result.outcome, asked)
    where = f"GPU {result.gpu_index}" if result.gpu_index is not None else "the node"
    said = f": {result.message}" if result.message else ""
    message = f"DCGM {result.test} {words} on {where}{said}"
    required = severity is not UNKNOWN or asked
    observed = result.outcome.value
    expected = DcgmOutcome.PASS.value
    if result.gpu_index is None:
        finding = node_finding(
            check_id, severity, message, observed=observed, expected=expected, required=required
        )
    else:
        gpu = next((g for g in facts.gpus if g.index == result.gpu_index), None)
        if gpu is None and facts.gpus and severity is PASS:
            # A GPU the node does not have cannot pass (another host's diagnostic).
            severity, required = UNKNOWN, True
            message = (
                f"DCGM {result.test} passed on GPU {result.gpu_index}, which the node's "
                "nvidia-smi does not list: not this node's result"
            )
        finding = gpu_finding(
            check_id,
            severity,
            gpu if gpu is not None else _GpuRef(result.gpu_index),
            message,
            observed=observed,
            expected=expected,
            required=required,
        )
    if severity is PASS:
        return finding
    if result.outcome is DcgmOutcome.PASS:  # a pass on a GPU the node lacks: run it here
        return with_action(finding, Action.RERUN, TEST_SOURCE)
    return with_action(finding, *action_for_result(result))


def _judged(outcome: DcgmOutcome, asked: bool) -> tuple[Severity, str]:
    if outcome is DcgmOutcome.WARN and asked:
        # The bar: a warning at a required level is no pass, and no failure.
        return UNKNOWN, "warned (a warning at the level asked proves no pass)"
    return {
        DcgmOutcome.PASS: (PASS, "passed"),
        DcgmOutcome.FAIL: (FAIL, "failed"),
        DcgmOutcome.WARN: (WARN, "warned"),
        DcgmOutcome.SKIP: (UNKNOWN, "was skipped (proves nothing)"),
        DcgmOutcome.NOT_RUN: (UNKNOWN, "was not run (proves nothing)"),
    }[outcome]


def action_for_result(result: DcgmTestResult) -> tuple[Action, str]:
    """What to do about a DCGM result that is not a pass, and where that comes from.

    The one decision for DCGM faults: the check sets it on its ``dcgm.<test>`` findings
    and drift on its ``drift.dcgm`` ones. A skipped or unrun test is run again; a
    failure or warning is judged by DCGM's error id, its words, then the test.
    """
    if result.outcome in (DcgmOutcome.SKIP, DcgmOutcome.NOT_RUN):
        return Action.RERUN, TEST_SOURCE
    name = RESET_ERRORS.get(result.error_id) if result.error_id is not None else None
    if name is not None:
        return Action.RESET_GPU, f"{RESET_SOURCE} ({name})"
    text = result.message.lower()
    if any(word in text for word in _THERMAL_WORDS):
        return Action.CHECK_COOLING_POWER, f"{TEST_SOURCE} {result.test}: thermal violation"
    if any(word in text for word in _REMAP_WORDS):
        return Action.RESET_GPU, f"{TEST_SOURCE} {result.test}: pending row remap"
    if _BUSY in text:
        # DCGM's own advice for a GPU CUDA cannot open: "Reset GPU. Restart DCGM."
        return Action.RESET_GPU, f"{TEST_SOURCE} {result.test}: CUDA device busy or unavailable"
    return _test_action(result), f"{TEST_SOURCE} {result.test}"


def _test_action(result: DcgmTestResult) -> Action:
    family = result.test.split(".", 1)[0]
    action = TEST_ACTIONS.get(family)
    if action is not None:
        return action
    if result.category.lower() == "deployment":
        return Action.FIX_SOFTWARE
    # The rest (diagnostic, eud, a stress test DCGM adds later...) fail on a GPU that
    # cannot do its work: a hardware fault until shown otherwise.
    return DEFAULT_TEST_ACTION


__all__ = [
    "DEFAULT_TEST_ACTION",
    "PREFIX",
    "RESET_ERRORS",
    "RUN",
    "TEST_ACTIONS",
    "action_for_result",
    "check",
]
