"""PCIe checks: maximum generation and current width against SKU or policy."""

from __future__ import annotations

import dataclasses

import pytest

from tests.test_judge_healthy import healthy_node, judge, not_passed, only, with_gpu
from validator.judge import Policy
from validator.model import NodeFacts, Reason, Severity, Unavailable, Verdict

FAIL, UNKNOWN = Severity.FAIL, Severity.UNKNOWN


def gh200_node() -> NodeFacts:
    facts = healthy_node()
    gpus = tuple(
        dataclasses.replace(
            g,
            name="NVIDIA GH200 480GB",
            memory_total_mib=97871,
            pcie_gen_max=4,
            pcie_width_current=1,
            power_limit_default_w=900.0,
            power_limit_enforced_w=900.0,
            power_limit_max_w=900.0,
        )
        for g in facts.gpus[:1]
    )
    return dataclasses.replace(facts, gpus=gpus, pci_gpu_count=1, pci_nvswitch_count=0)


CASES = [
    (
        "H100 trained at Gen4 max",
        with_gpu(healthy_node(), 2, pcie_gen_max=4),
        Policy(),
        {("pcie.gen", FAIL, 2)},
    ),
    ("idle at Gen1 is normal", with_gpu(healthy_node(), 2, pcie_gen_current=1), Policy(), set()),
    (
        "x8 in an x16 slot",
        with_gpu(healthy_node(), 5, pcie_width_current=8),
        Policy(),
        {("pcie.width", FAIL, 5)},
    ),
    (
        "policy accepts Gen4",
        with_gpu(healthy_node(), 2, pcie_gen_max=4),
        Policy(min_pcie_gen=4),
        set(),
    ),
    (
        "policy wants x32",
        healthy_node(),
        Policy(min_pcie_width=32),
        {("pcie.width", FAIL, i) for i in range(8)},
    ),
    (
        "width unreadable",
        with_gpu(healthy_node(), 5, pcie_width_current=Unavailable(Reason.ERROR)),
        Policy(),
        {("pcie.width", UNKNOWN, 5)},
    ),
    (
        "GH200 has no SKU link figure",
        gh200_node(),
        Policy(),
        {("pcie.gen", UNKNOWN, None), ("pcie.width", UNKNOWN, None)},
    ),
    ("GH200 judged by policy", gh200_node(), Policy(min_pcie_gen=4, min_pcie_width=1), set()),
]


@pytest.mark.parametrize(
    ("facts", "policy", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_pcie_table(
    facts: NodeFacts, policy: Policy, expected: set[tuple[str, Severity, int | None]]
) -> None:
    assert not_passed(judge(facts, policy), "pcie.") == expected


def test_idle_gen_is_mentioned_in_the_pass_message() -> None:
    facts = with_gpu(healthy_node(), 2, pcie_gen_current=1)
    (finding,) = [f for f in only(judge(facts), "pcie.gen") if f.gpu_index == 2]
    assert finding.severity is Severity.PASS
    assert "Gen1 now" in finding.message
    assert "normal" in finding.message


def test_gh200_link_unknown_is_not_required() -> None:
    result = judge(gh200_node())
    pcie = {
        (f.check, f.severity, f.required) for f in result.findings if f.check.startswith("pcie.")
    }
    # The catalog has no link figure for GH200: both are UNKNOWN, and neither blocks.
    assert pcie == {("pcie.gen", Severity.UNKNOWN, False), ("pcie.width", Severity.UNKNOWN, False)}
    assert result.sku == "gh200"
    assert result.verdict is Verdict.CERTIFIED
