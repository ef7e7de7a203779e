"""inventory.readings_plausible: an implausible reading in any field blocks certification."""

from __future__ import annotations

import dataclasses

import pytest

from tests.collecting import collect_simulated
from validator.judge.checks import plausibility
from validator.judge.policy import Policy
from validator.judge.verdict import judge_node
from validator.model import NodeFacts, Reason, Severity, Unavailable, Verdict
from validator.node.physical_ranges import plausible_facts

NO_BURN = Policy(require_burn=False)


@pytest.fixture(scope="module")
def healthy() -> NodeFacts:
    return collect_simulated("healthy-8x-h100-sxm")


def test_a_healthy_node_has_no_implausible_reading(healthy: NodeFacts) -> None:
    assert plausibility.check(healthy, NO_BURN, None) == []
    assert judge_node(healthy, NO_BURN).verdict is Verdict.CERTIFIED


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("power_draw_w", 1e9),  # no check reads the draw at idle
        ("pcie_width_max", 999),
        ("sm_clock_max_mhz", 10**7),
        ("temp_shutdown_c", -1000.0),
    ],
)
def test_an_implausible_reading_nobody_else_reads_blocks(
    healthy: NodeFacts, field: str, value: object
) -> None:
    gpus = list(healthy.gpus)
    gpus[3] = dataclasses.replace(gpus[3], **{field: value})
    facts = plausible_facts(dataclasses.replace(healthy, gpus=tuple(gpus)))
    assert isinstance(getattr(facts.gpus[3], field), Unavailable)

    findings = plausibility.check(facts, NO_BURN, None)
    assert [(f.check, f.severity, f.gpu_index, f.required) for f in findings] == [
        ("inventory.readings_plausible", Severity.UNKNOWN, 3, True)
    ]
    assert field in findings[0].observed
    assert "implausible value" in findings[0].message
    assert judge_node(facts, NO_BURN).verdict is Verdict.NOT_CERTIFIED


def test_a_mere_error_is_not_called_implausible(healthy: NodeFacts) -> None:
    gpus = list(healthy.gpus)
    gpus[0] = dataclasses.replace(gpus[0], power_draw_w=Unavailable(Reason.ERROR, "NVML error 999"))
    facts = dataclasses.replace(healthy, gpus=tuple(gpus))
    assert plausibility.check(facts, NO_BURN, None) == []
