"""Power checks: cap below default, default vs SKU, enforced within range."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.judge.test_judge_healthy import healthy_node, judge, not_passed, only, with_gpu
from validator.judge import Policy, Thresholds
from validator.model import NodeFacts, NvLinkState, Reason, Severity, Unavailable, Verdict

FAIL, UNKNOWN, WARN = Severity.FAIL, Severity.UNKNOWN, Severity.WARN


def as_model(**changes: Any) -> NodeFacts:
    facts = healthy_node()
    return dataclasses.replace(
        facts, gpus=tuple(dataclasses.replace(g, **changes) for g in facts.gpus)
    )


A100_80 = {
    "name": "NVIDIA A100-SXM4-80GB",
    "memory_total_mib": 81920,
    "pcie_gen_max": 4,
    "nvlinks": tuple(NvLinkState(link=i, active=True) for i in range(12)),
}
GH200 = {
    "name": "NVIDIA GH200 480GB",
    "memory_total_mib": 97871,
    "pcie_gen_max": 4,
    "pcie_width_current": 1,
}

CASES = [
    (
        "capped at 500 W",
        with_gpu(healthy_node(), 3, power_limit_enforced_w=500.0),
        Policy(),
        {("power.limit", FAIL, 3)},
    ),
    ("97% of default", with_gpu(healthy_node(), 3, power_limit_enforced_w=680.0), Policy(), set()),
    (
        "97% under a 0.99 policy",
        with_gpu(healthy_node(), 3, power_limit_enforced_w=680.0),
        Policy(thresholds=Thresholds(power_limit_min_ratio=0.99)),
        {("power.limit", FAIL, 3)},
    ),
    (
        "vendor default differs",
        with_gpu(healthy_node(), 2, power_limit_enforced_w=650.0, power_limit_default_w=650.0),
        Policy(),
        {("power.default", WARN, 2)},
    ),
    (
        "enforced above max",
        with_gpu(healthy_node(), 4, power_limit_enforced_w=750.0),
        Policy(),
        {("power.range", FAIL, 4)},
    ),
    (
        "enforced unreadable",
        with_gpu(healthy_node(), 4, power_limit_enforced_w=Unavailable(Reason.NOT_SUPPORTED)),
        Policy(),
        {("power.limit", UNKNOWN, 4), ("power.range", UNKNOWN, 4)},
    ),
    (
        "default unreadable",
        with_gpu(healthy_node(), 4, power_limit_default_w=Unavailable(Reason.ERROR)),
        Policy(),
        {("power.limit", UNKNOWN, 4), ("power.default", UNKNOWN, 4)},
    ),
    (
        "A100 80GB HGX ships at 500 W",
        as_model(
            **A100_80,
            power_limit_enforced_w=500.0,
            power_limit_default_w=500.0,
            power_limit_max_w=500.0,
        ),
        Policy(),
        set(),
    ),
    (
        "A100 80GB at the 400 W datasheet default",
        as_model(
            **A100_80,
            power_limit_enforced_w=400.0,
            power_limit_default_w=400.0,
            power_limit_max_w=500.0,
        ),
        Policy(),
        set(),
    ),
    (
        "GH200 module steers the GPU limit",
        with_gpu(
            as_model(
                **GH200,
                power_limit_enforced_w=900.0,
                power_limit_default_w=900.0,
                power_limit_max_w=900.0,
            ),
            0,
            power_limit_enforced_w=700.0,
        ),
        Policy(),
        {("power.limit", WARN, 0)},
    ),
]


@pytest.mark.parametrize(
    ("facts", "policy", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_power_table(
    facts: NodeFacts, policy: Policy, expected: set[tuple[str, Severity, int | None]]
) -> None:
    assert not_passed(judge(facts, policy), "power.") == expected


def test_cap_message() -> None:
    result = judge(with_gpu(healthy_node(), 3, power_limit_enforced_w=500.0))
    (finding,) = [f for f in only(result, "power.limit") if f.gpu_index == 3]
    assert finding.message == (
        "GPU 3 enforced power limit 500 W is 71% of its 700 W default; a cap has been set "
        "(nvidia-smi -pl), restore it with nvidia-smi -i 3 -pl 700"
    )
    assert finding.gpu_uuid == "GPU-00000003-aaaa-bbbb-cccc-000000000000"
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert "1 check failed: power.limit (GPU 3)" in result.summary


def test_default_mismatch_only_warns() -> None:
    facts = with_gpu(healthy_node(), 2, power_limit_enforced_w=650.0, power_limit_default_w=650.0)
    result = judge(facts)
    assert result.verdict is Verdict.CERTIFIED
    assert "with 1 warning: power.default (GPU 2)" in result.summary
