"""State checks: persistence, MIG, Fabric Manager, NVLinks, the GPU recovery action."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.judge.test_judge_healthy import NOT_SUPPORTED, judge, not_passed, only, with_gpu
from tests.judge.test_judge_healthy import healthy_node as shared_healthy_node
from validator.judge import Policy
from validator.judge.checks.state import check as state_check
from validator.model import (
    NOT_MEASURED,
    Action,
    Finding,
    GpuStatus,
    NodeFacts,
    Reason,
    Severity,
    Unavailable,
)


def healthy_node(**changes: Any) -> NodeFacts:
    """The shared healthy node, its driver (R575+) asking no recovery action of any GPU."""
    facts = shared_healthy_node(**changes)
    gpus = tuple(dataclasses.replace(g, recovery_action="none") for g in facts.gpus)
    return dataclasses.replace(facts, gpus=gpus)


FAIL, UNKNOWN, WARN = Severity.FAIL, Severity.UNKNOWN, Severity.WARN


CASES = [
    (
        "persistence off",
        with_gpu(healthy_node(), 0, persistence_mode=False),
        Policy(),
        {("state.persistence", FAIL, 0)},
    ),
    (
        "persistence off, not required",
        with_gpu(healthy_node(), 0, persistence_mode=False),
        Policy(persistence_mode_required=False),
        set(),
    ),
    (
        "persistence unreadable",
        with_gpu(healthy_node(), 0, persistence_mode=Unavailable(Reason.ERROR)),
        Policy(),
        {("state.persistence", UNKNOWN, 0)},
    ),
    (
        "MIG wanted, off",
        healthy_node(),
        Policy(mig_mode=True),
        {("state.mig", FAIL, i) for i in range(8)},
    ),
    (
        "MIG unwanted, on",
        with_gpu(healthy_node(), 3, mig_mode_current=True, mig_mode_pending=True),
        Policy(mig_mode=False),
        {("state.mig", FAIL, 3)},
    ),
    (
        "MIG change pending",
        with_gpu(healthy_node(), 3, mig_mode_pending=True),
        Policy(),
        {("state.mig", WARN, 3)},
    ),
    (
        "MIG unsupported counts as off",
        with_gpu(healthy_node(), 3, mig_mode_current=NOT_SUPPORTED, mig_mode_pending=NOT_SUPPORTED),
        Policy(mig_mode=False),
        set(),
    ),
    (
        "fabric in progress",
        with_gpu(healthy_node(), 0, fabric_state="in_progress", fabric_status="in_progress"),
        Policy(),
        {("state.fabric", FAIL, 0)},
    ),
    (
        "fabric not started",
        with_gpu(healthy_node(), 7, fabric_state="not_started", fabric_status="not_started"),
        Policy(),
        {("state.fabric", FAIL, 7)},
    ),
    (
        "fabric completed with error",
        with_gpu(healthy_node(), 7, fabric_status="NV_ERR_INSUFFICIENT_RESOURCES"),
        Policy(),
        {("state.fabric", FAIL, 7)},
    ),
    (
        "no NVSwitch on the bus",
        with_gpu(healthy_node(pci_nvswitch_count=0), 0, fabric_state="not_started"),
        Policy(),
        set(),
    ),
    (
        "switch count unknown: SKU says NVSwitch",
        with_gpu(healthy_node(pci_nvswitch_count=NOT_MEASURED), 0, fabric_state="not_started"),
        Policy(),
        {("state.fabric", FAIL, 0)},
    ),
    (
        "policy says not needed",
        with_gpu(healthy_node(), 0, fabric_state="not_started"),
        Policy(require_fabric_manager=False),
        set(),
    ),
    (
        "fabric unreadable",
        with_gpu(healthy_node(), 1, fabric_state=Unavailable(Reason.ERROR)),
        Policy(),
        {("state.fabric", UNKNOWN, 1)},
    ),
    (
        "fabric not reported (pre-Hopper)",
        with_gpu(healthy_node(), 1, fabric_state=NOT_SUPPORTED),
        Policy(),
        {("state.fabric", UNKNOWN, 1)},
    ),
    (
        "GPU 3 needs a reset",
        with_gpu(healthy_node(), 3, recovery_action="gpu_reset"),
        Policy(),
        {("state.recovery_action", FAIL, 3)},
    ),
    (
        "recovery action not reported (driver before R575)",
        with_gpu(healthy_node(), 3, recovery_action=NOT_SUPPORTED),
        Policy(),
        {("state.recovery_action", UNKNOWN, 3)},
    ),
]


@pytest.mark.parametrize(
    ("facts", "policy", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_state_table(
    facts: NodeFacts, policy: Policy, expected: set[tuple[str, Severity, int | None]]
) -> None:
    assert not_passed(judge(facts, policy), "state.") == expected


def test_persistence_message_gives_the_fix() -> None:
    facts = with_gpu(healthy_node(), 0, persistence_mode=False)
    (finding,) = [f for f in only(judge(facts), "state.persistence") if f.gpu_index == 0]
    assert "systemctl enable --now nvidia-persistenced" in finding.message


def test_fabric_message_says_start_fabric_manager() -> None:
    facts = with_gpu(healthy_node(), 0, fabric_state="in_progress", fabric_status="in_progress")
    (finding,) = [f for f in only(judge(facts), "state.fabric") if f.gpu_index == 0]
    assert "start nvidia-fabricmanager" in finding.message
    assert finding.observed == "in_progress/in_progress"


def test_pre_hopper_fabric_unknown_is_not_required_but_unreadable_is() -> None:
    old = [
        f
        for f in only(
            judge(with_gpu(healthy_node(), 1, fabric_state=NOT_SUPPORTED)), "state.fabric"
        )
        if f.gpu_index == 1
    ]
    err = [
        f
        for f in only(
            judge(with_gpu(healthy_node(), 1, fabric_state=Unavailable(Reason.ERROR))),
            "state.fabric",
        )
        if f.gpu_index == 1
    ]
    assert (old[0].required, err[0].required) == (False, True)


# ---------------------------------------------------------------- recovery action


def recovery_findings(facts: NodeFacts, index: int | None = None) -> list[Finding]:
    """The state check's recovery-action findings, all or one GPU's."""
    return [
        f
        for f in state_check(facts, Policy(), None)
        if f.check == "state.recovery_action" and index in (None, f.gpu_index)
    ]


RECOVERY = [
    ("gpu_reset", Action.RESET_GPU, "stop every process on it and reset it (nvidia-smi -r -i 3)"),
    ("node_reboot", Action.REBOOT, "reboot the node"),
    ("drain_p2p", Action.RESET_GPU, "stop the processes doing peer-to-peer traffic with it"),
    ("drain_and_reset", Action.RESET_GPU, "then reset it (nvidia-smi -r -i 3)"),
    ("bus_reset", Action.RESET_GPU, "reset its PCIe bus"),
]


@pytest.mark.parametrize(("value", "action", "words"), RECOVERY, ids=[r[0] for r in RECOVERY])
def test_a_recovery_action_fails_the_gpu_saying_what_to_do(
    value: str, action: Action, words: str
) -> None:
    (finding,) = recovery_findings(with_gpu(healthy_node(), 3, recovery_action=value), 3)
    assert finding.severity is FAIL
    assert finding.message.startswith(f"GPU 3: the driver asks for recovery action {value}; ")
    assert words in finding.message
    assert finding.action is action
    assert finding.action_source == f"NVML GPU recovery action: {value}"
    assert finding.gpu_uuid == "GPU-00000003-aaaa-bbbb-cccc-000000000000"


def test_no_recovery_action_passes_with_no_action() -> None:
    findings = recovery_findings(healthy_node())
    assert len(findings) == 8
    assert {(f.severity, f.action) for f in findings} == {(Severity.PASS, Action.NONE)}


@pytest.mark.parametrize(
    ("value", "required"),
    [
        (NOT_SUPPORTED, False),  # drivers before R575 do not report it: not blocking
        (NOT_MEASURED, False),  # a capture without it
        (Unavailable(Reason.ERROR, "NVML error 999"), True),  # the driver failed to answer
        (Unavailable(Reason.NO_PERMISSION), True),
    ],
    ids=["not supported", "not measured", "error", "no permission"],
)
def test_an_unread_recovery_action_is_unknown_blocking_only_when_it_could_be_read(
    value: Unavailable, required: bool
) -> None:
    (finding,) = recovery_findings(with_gpu(healthy_node(), 5, recovery_action=value), 5)
    assert finding.severity is UNKNOWN
    assert finding.required is required
    assert finding.message.startswith("GPU 5 recovery action (NVML's, R575 and newer) could not")


def test_every_recovery_action_but_none_has_one_step_for_certify_and_drift() -> None:
    from validator.judge.recovery import RECOVERY_STEPS
    from validator.model import RECOVERY_ACTIONS

    assert set(RECOVERY_STEPS) == set(RECOVERY_ACTIONS) - {"none"}


@pytest.mark.parametrize(
    ("value", "action"),
    [("bus_reset", "reset_gpu"), ("system_reboot", "reboot"), ("recover_imex_domain",
     "fix_software_stack"), ("drain_p2p", "reset_gpu")],
)  # fmt: skip
def test_the_later_recovery_actions_are_named_and_acted_on(value: str, action: str) -> None:
    (finding,) = recovery_findings(with_gpu(healthy_node(), 3, recovery_action=value), 3)
    assert (finding.severity, finding.action.value) == (FAIL, action)
    assert f"recovery action {value}" in finding.message


def test_each_gpus_state_is_worked_out_once_per_gpu_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every check family asks it; judging a node works each GPU's out once, by identity."""
    from validator.judge.checks import finding_helpers

    asked: list[int] = []
    real = finding_helpers._state

    def counted(gpu: Any) -> Any:
        asked.append(gpu.index)
        return real(gpu)

    monkeypatch.setattr(finding_helpers, "_state", counted)
    facts = healthy_node()
    fresh = dataclasses.replace(facts, gpus=tuple(dataclasses.replace(gpu) for gpu in facts.gpus))
    judge(fresh)
    assert sorted(asked) == sorted(gpu.index for gpu in fresh.gpus)
    # An equal GPU that is another object is worked out on its own, so a changed copy
    # (as the hostile-input tests make) never takes a cached state.
    lost = dataclasses.replace(fresh.gpus[0], status=GpuStatus.LOST, status_detail="gone")
    assert finding_helpers.gpu_state(lost) == (GpuStatus.LOST, "gone")
    assert finding_helpers.gpu_state(fresh.gpus[0])[0] is GpuStatus.OK
