"""Memory checks: capacity against the SKU, ECC mode."""

from __future__ import annotations

import pytest

from tests.judge.test_judge_healthy import healthy_node, judge, not_passed, only, with_gpu
from validator.judge import Policy, Thresholds
from validator.model import NodeFacts, Reason, Severity, Unavailable, Verdict

FAIL, UNKNOWN = Severity.FAIL, Severity.UNKNOWN

CASES = [
    (
        "80GB part shows 40960",
        with_gpu(healthy_node(), 3, memory_total_mib=40960),
        Policy(),
        {("memory.capacity", FAIL, 3)},
    ),
    (
        "within SKU tolerance",
        with_gpu(healthy_node(), 3, memory_total_mib=81559 - 400),
        Policy(),
        set(),
    ),
    (
        "outside a tighter policy tolerance",
        with_gpu(healthy_node(), 3, memory_total_mib=81559 - 400),
        Policy(thresholds=Thresholds(memory_tolerance_mib=100)),
        {("memory.capacity", FAIL, 3)},
    ),
    (
        "larger than the SKU",
        with_gpu(healthy_node(), 0, memory_total_mib=95830),
        Policy(),
        {("memory.capacity", FAIL, 0)},
    ),
    (
        "MIG on shows one instance",
        with_gpu(
            healthy_node(), 3, memory_total_mib=40448, mig_mode_current=True, mig_mode_pending=True
        ),
        Policy(),
        {("memory.capacity", UNKNOWN, 3)},
    ),
    (
        "size unreadable",
        with_gpu(
            healthy_node(), 5, memory_total_mib=Unavailable(Reason.ERROR, "NVML_ERROR_UNKNOWN")
        ),
        Policy(),
        {("memory.capacity", UNKNOWN, 5)},
    ),
    (
        "ECC off",
        with_gpu(healthy_node(), 1, ecc_mode_current=False, ecc_mode_pending=False),
        Policy(),
        {("memory.ecc_mode", FAIL, 1)},
    ),
    (
        "ECC off, on at reset",
        with_gpu(healthy_node(), 1, ecc_mode_current=False),
        Policy(),
        {("memory.ecc_mode", FAIL, 1)},
    ),
    (
        "ECC to turn off at reset",
        with_gpu(healthy_node(), 1, ecc_mode_pending=False),
        Policy(),
        {("memory.ecc_mode", FAIL, 1)},
    ),
    (
        "ECC not supported",
        with_gpu(healthy_node(), 2, ecc_mode_current=Unavailable(Reason.NOT_SUPPORTED)),
        Policy(),
        {("memory.ecc_mode", FAIL, 2)},
    ),
    (
        "ECC unreadable",
        with_gpu(healthy_node(), 2, ecc_mode_current=Unavailable(Reason.NO_PERMISSION)),
        Policy(),
        {("memory.ecc_mode", UNKNOWN, 2)},
    ),
    (
        "ECC off, not required",
        with_gpu(healthy_node(), 1, ecc_mode_current=False, ecc_mode_pending=False),
        Policy(require_ecc=False),
        set(),
    ),
]


@pytest.mark.parametrize(
    ("facts", "policy", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_memory_table(
    facts: NodeFacts, policy: Policy, expected: set[tuple[str, Severity, int | None]]
) -> None:
    assert not_passed(judge(facts, policy), "memory.") == expected


def test_short_memory_message_and_verdict() -> None:
    result = judge(with_gpu(healthy_node(), 3, memory_total_mib=40960))
    (finding,) = [f for f in only(result, "memory.capacity") if f.gpu_index == 3]
    assert finding.message.startswith(
        "GPU 3 has 40960 MiB but the H100 SXM5 80GB has 81559 MiB (+- 512)"
    )
    assert finding.observed == "40960 MiB"
    assert result.verdict is Verdict.NOT_CERTIFIED


def test_mig_short_memory_is_not_required_so_node_stays_certified() -> None:
    facts = with_gpu(
        healthy_node(), 3, memory_total_mib=40448, mig_mode_current=True, mig_mode_pending=True
    )
    result = judge(facts)
    (finding,) = [f for f in only(result, "memory.capacity") if f.gpu_index == 3]
    assert finding.required is False
    assert "MIG enabled" in finding.message
    assert result.verdict is Verdict.CERTIFIED


def test_ecc_off_message_gives_the_fix() -> None:
    facts = with_gpu(healthy_node(), 1, ecc_mode_current=False, ecc_mode_pending=False)
    (finding,) = [f for f in only(judge(facts), "memory.ecc_mode") if f.gpu_index == 1]
    assert (
        finding.message
        == "GPU 1 has ECC off; enable it with nvidia-smi -i 1 -e 1 and reset the GPU"
    )
