"""Inventory checks: driver reach, lost GPUs, GPU count, one known model."""

from __future__ import annotations

import dataclasses

import pytest

from tests.judge.test_judge_healthy import healthy_node, judge, not_passed, only, with_gpu
from validator.error_tree import PolicyError
from validator.judge import Policy
from validator.model import (
    NOT_MEASURED,
    GpuStatus,
    NodeFacts,
    NvmlStatus,
    Reason,
    Severity,
    Unavailable,
    Verdict,
)

FAIL, UNKNOWN, WARN = Severity.FAIL, Severity.UNKNOWN, Severity.WARN


def lost(facts: NodeFacts) -> NodeFacts:
    return with_gpu(facts, 6, status=GpuStatus.LOST, status_detail="NVML_ERROR_GPU_IS_LOST")


def seven_gpus(facts: NodeFacts) -> NodeFacts:
    return dataclasses.replace(facts, gpus=facts.gpus[:7])


def renamed(name: str) -> NodeFacts:
    facts = healthy_node()
    return dataclasses.replace(
        facts, gpus=tuple(dataclasses.replace(g, name=name) for g in facts.gpus)
    )


CASES = [
    ("gpu lost", lost(healthy_node()), Policy(), {("inventory.gpu_status", FAIL, 6)}),
    (
        "gpu unreadable",
        with_gpu(healthy_node(), 2, status=GpuStatus.ERROR, status_detail="NVML_ERROR_UNKNOWN"),
        Policy(),
        {("inventory.gpu_status", UNKNOWN, 2)},
    ),
    (
        "pci shows 8, driver 7",
        seven_gpus(healthy_node()),
        Policy(),
        {("inventory.gpu_count", FAIL, None)},
    ),
    (
        "policy wants 4",
        healthy_node(),
        Policy(expected_gpu_count=4),
        {("inventory.gpu_count", FAIL, None)},
    ),
    (
        "policy 8, pci 9",
        healthy_node(pci_gpu_count=9),
        Policy(expected_gpu_count=8),
        {("inventory.pci_visible", FAIL, None)},
    ),
    (
        "no count to compare",
        healthy_node(pci_gpu_count=NOT_MEASURED),
        Policy(),
        {("inventory.gpu_count", UNKNOWN, None)},
    ),
    (
        "mixed models",
        with_gpu(healthy_node(), 7, name="NVIDIA H200"),
        Policy(),
        {("inventory.model", FAIL, None)},
    ),
    (
        "name unreadable",
        with_gpu(healthy_node(), 3, name=Unavailable(Reason.ERROR, "NVML_ERROR_UNKNOWN")),
        Policy(),
        {("inventory.model", UNKNOWN, 3)},
    ),
    (
        "unknown model",
        renamed("NVIDIA H100 80GB HBM4"),
        Policy(),
        {
            ("inventory.sku", FAIL, None),
            ("memory.capacity", UNKNOWN, None),
            ("power.default", UNKNOWN, None),
            ("pcie.gen", UNKNOWN, None),
            ("pcie.width", UNKNOWN, None),
            # No catalog peak: burn speed is judged only against the node's best GPU.
            *{("burn.speed", UNKNOWN, i) for i in range(8)},
        },
    ),
    (
        "expected model by name",
        healthy_node(),
        Policy(expected_model="NVIDIA H100 80GB HBM3"),
        set(),
    ),
    ("expected model by id", healthy_node(), Policy(expected_model="h100-sxm"), set()),
]


@pytest.mark.parametrize(
    ("facts", "policy", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_inventory_table(
    facts: NodeFacts, policy: Policy, expected: set[tuple[str, Severity, int | None]]
) -> None:
    assert not_passed(judge(facts, policy)) == expected


def test_lost_gpu_message_names_bus_and_other_checks_skip_it() -> None:
    result = judge(lost(healthy_node()))
    (finding,) = [f for f in result.findings if f.check == "inventory.gpu_status"]
    assert finding.message.startswith(
        "GPU 6 (00000000:BA:00.0) has fallen off the bus: NVML_ERROR_GPU_IS_LOST"
    )
    assert {f.gpu_index for f in only(result, "memory.capacity")} == {0, 1, 2, 3, 4, 5, 7}
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert "inventory.gpu_status (GPU 6)" in result.summary


def test_missing_gpu_message() -> None:
    (finding,) = only(judge(seven_gpus(healthy_node())), "inventory.gpu_count")
    assert finding.message.startswith("The driver sees 7 GPUs but the PCI bus shows 8")
    assert (finding.observed, finding.expected) == ("7", "8")


def test_unknown_model_message_says_how_to_fix() -> None:
    (finding,) = only(judge(renamed("NVIDIA H100 80GB HBM4")), "inventory.sku")
    assert "'NVIDIA H100 80GB HBM4' is not in the SKU catalog" in finding.message
    assert "skus.yaml" in finding.message
    assert "expected_model" in finding.message


def test_expected_model_differs_fails_and_judges_against_the_expected_sku() -> None:
    result = judge(healthy_node(), Policy(expected_model="h200-sxm"))
    bad = not_passed(result)
    assert ("inventory.expected_model", FAIL, None) in bad
    assert {g for c, s, g in bad if c == "memory.capacity"} == set(range(8))
    assert result.sku == "h200-sxm"
    assert result.verdict is Verdict.NOT_CERTIFIED


def test_unknown_expected_model_is_a_policy_error_listing_ids() -> None:
    with pytest.raises(PolicyError, match=r"expected_model 'h100-sxmm' .*valid ids: .*h100-sxm"):
        judge(healthy_node(), Policy(expected_model="h100-sxmm"))


def test_no_gpu_at_all_fails_even_when_the_bus_agrees() -> None:
    result = judge(healthy_node(gpus=(), pci_gpu_count=0, nvml_status=NvmlStatus.NO_DEVICES))
    assert ("inventory.gpu_count", FAIL, None) in not_passed(result)
    assert result.verdict is Verdict.NOT_CERTIFIED
