"""State checks: persistence, MIG, Fabric Manager, NVLinks."""

from __future__ import annotations

import pytest

from tests.test_judge_healthy import NOT_SUPPORTED, healthy_node, judge, not_passed, only, with_gpu
from validator.judge import Policy
from validator.model import NOT_MEASURED, NodeFacts, NvLinkState, Reason, Severity, Unavailable

FAIL, UNKNOWN, WARN = Severity.FAIL, Severity.UNKNOWN, Severity.WARN

SIXTEEN_UP = tuple(NvLinkState(link=i, active=i not in (4, 9)) for i in range(18))

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
        "two NVLinks down",
        with_gpu(healthy_node(), 6, nvlinks=SIXTEEN_UP),
        Policy(),
        {("state.nvlink", FAIL, 6)},
    ),
    (
        "NVLinks unreadable",
        with_gpu(healthy_node(), 6, nvlinks=NOT_SUPPORTED),
        Policy(),
        {("state.nvlink", UNKNOWN, 6)},
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


def test_nvlink_message_names_down_links() -> None:
    (finding,) = [
        f
        for f in only(judge(with_gpu(healthy_node(), 6, nvlinks=SIXTEEN_UP)), "state.nvlink")
        if f.gpu_index == 6
    ]
    assert finding.message.startswith("GPU 6 has 16 of 18 NVLinks active (down: 4, 9)")
