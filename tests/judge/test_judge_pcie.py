"""PCIe checks: maximum generation and current width against SKU or policy; replays in the burn."""

from __future__ import annotations

import dataclasses

import pytest

from tests.judge.test_judge_healthy import healthy_node, judge, not_passed, only, with_gpu
from validator.judge import Policy, load_catalog
from validator.judge.checks import pcie
from validator.model import (
    NOT_MEASURED,
    Action,
    BurnStatus,
    Finding,
    Measured,
    NodeFacts,
    Reason,
    Severity,
    Unavailable,
    Verdict,
)

FAIL, PASS, UNKNOWN = Severity.FAIL, Severity.PASS, Severity.UNKNOWN


def with_replays(
    facts: NodeFacts, index: int | None = None, *, before: Measured[int], after: Measured[int]
) -> NodeFacts:
    """``facts`` with the PCIe replay counter read around the burn (one GPU, or every GPU)."""
    assert facts.burn is not None
    gpus = tuple(
        dataclasses.replace(
            g,
            counters_before=dataclasses.replace(g.counters_before, pcie_replay_count=before),
            counters_after=dataclasses.replace(g.counters_after, pcie_replay_count=after),
        )
        if index is None or g.index == index
        else g
        for g in facts.burn.gpus
    )
    return dataclasses.replace(facts, burn=dataclasses.replace(facts.burn, gpus=gpus))


def node() -> NodeFacts:
    """The healthy node, its PCIe replay counter read before and after the burn (unchanged)."""
    return with_replays(healthy_node(), before=1204, after=1204)


def gh200_node() -> NodeFacts:
    facts = node()
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
        with_gpu(node(), 2, pcie_gen_max=4),
        Policy(),
        {("pcie.gen", FAIL, 2)},
    ),
    ("idle at Gen1 is normal", with_gpu(node(), 2, pcie_gen_current=1), Policy(), set()),
    (
        "x8 in an x16 slot",
        with_gpu(node(), 5, pcie_width_current=8),
        Policy(),
        {("pcie.width", FAIL, 5)},
    ),
    (
        "policy accepts Gen4",
        with_gpu(node(), 2, pcie_gen_max=4),
        Policy(min_pcie_gen=4),
        set(),
    ),
    (
        "policy wants x32",
        node(),
        Policy(min_pcie_width=32),
        {("pcie.width", FAIL, i) for i in range(8)},
    ),
    (
        "width unreadable",
        with_gpu(node(), 5, pcie_width_current=Unavailable(Reason.ERROR)),
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
    facts = with_gpu(node(), 2, pcie_gen_current=1)
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
    assert pcie == {
        ("pcie.gen", Severity.UNKNOWN, False),
        ("pcie.width", Severity.UNKNOWN, False),
        ("pcie.replays", Severity.PASS, True),
    }
    assert result.sku == "gh200"
    assert result.verdict is Verdict.CERTIFIED


# ---------------------------------------------------------------- pcie.replays


def replays(facts: NodeFacts, policy: Policy | None = None) -> list[Finding]:
    sku = load_catalog().get("h100-sxm")
    found = pcie.check(facts, policy or Policy(), sku)
    return [f for f in found if f.check == "pcie.replays"]


def unread() -> NodeFacts:
    """The healthy node, its burn's replay counter not read before or after."""
    return with_replays(healthy_node(), before=NOT_MEASURED, after=NOT_MEASURED)


def test_replays_unchanged_pass_on_every_gpu() -> None:
    found = replays(node())
    assert [(f.gpu_index, f.severity) for f in found] == [(i, PASS) for i in range(8)]
    assert found[0].message == (
        "GPU 0 PCIe link resent 0 packets during the burn-in (at most 80 allowed)"
    )


def test_replays_above_the_limit_fail_with_the_figures() -> None:
    facts = with_replays(node(), 3, before=1204, after=1616)
    (failed,) = [f for f in replays(facts) if f.severity is not PASS]
    assert (failed.gpu_index, failed.severity) == (3, FAIL)
    assert failed.message == (
        "GPU 3 PCIe link resent 412 packets during the burn-in (1204 -> 1616 replays), above "
        "the 80 allowed; reseat the GPU and check its riser, cable and slot"
    )
    assert (failed.observed, failed.expected) == ("+412 (1204 -> 1616)", "growth <= 80")
    assert failed.action is Action.RESEAT_CABLE_RISER
    assert failed.gpu_uuid == "GPU-00000003-aaaa-bbbb-cccc-000000000000"


def test_a_replays_fail_says_where_its_action_comes_from() -> None:
    facts = with_replays(node(), 3, before=1204, after=1616)
    (failed,) = [f for f in replays(facts) if f.severity is FAIL]
    assert (failed.action, failed.action_source) == (
        Action.RESEAT_CABLE_RISER,
        "gpuready: replays grow on a marginal riser, cable, slot or seating",
    )
    # Through the judge the check's own source is kept, not the table's default.
    (judged,) = [
        f for f in judge(facts).findings if f.check == "pcie.replays" and f.severity is FAIL
    ]
    assert judged.action_source == failed.action_source


def test_the_limit_itself_passes_and_the_policy_sets_it() -> None:
    at_limit = with_replays(node(), 3, before=0, after=80)
    assert {f.severity for f in replays(at_limit)} == {PASS}
    strict = Policy(thresholds=dataclasses.replace(Policy().thresholds, pcie_replay_growth_max=10))
    assert [(f.gpu_index, f.severity) for f in replays(at_limit, strict) if f.severity is FAIL] == [
        (3, FAIL)
    ]


def test_replays_not_read_around_the_burn_are_a_required_unknown() -> None:
    # The burn's counters as read before issue 13: no replay counter.
    found = replays(unread())
    assert {(f.severity, f.required, f.action) for f in found} == {(UNKNOWN, True, Action.RERUN)}
    assert {f.action_source for f in found} == {
        "gpuready: the replay counter was not read around the burn; run it again"
    }
    assert found[0].message == (
        "GPU 0 PCIe replays during the burn-in cannot be judged: not measured"
    )


def test_a_gpu_without_the_counter_is_an_unknown_that_does_not_block() -> None:
    missing = Unavailable(Reason.NOT_SUPPORTED, "no replay counter")
    facts = with_replays(node(), 2, before=missing, after=missing)
    (finding,) = [f for f in replays(facts) if f.gpu_index == 2]
    assert (finding.severity, finding.required) == (UNKNOWN, False)


def test_a_counter_that_went_back_is_unknown() -> None:
    facts = with_replays(node(), 6, before=500, after=3)
    (finding,) = [f for f in replays(facts) if f.gpu_index == 6]
    assert finding.severity is UNKNOWN
    assert "went back from 500 to 3" in finding.message


def test_a_gpu_whose_burn_did_not_complete_does_not_block_on_replays() -> None:
    facts = unread()
    assert facts.burn is not None
    gpus = tuple(
        dataclasses.replace(g, status=BurnStatus.ERROR) if g.index == 1 else g
        for g in facts.burn.gpus
    )
    facts = dataclasses.replace(facts, burn=dataclasses.replace(facts.burn, gpus=gpus))
    (finding,) = [f for f in replays(facts) if f.gpu_index == 1]
    assert (finding.severity, finding.required) == (UNKNOWN, False)


def test_no_burn_judges_no_replays() -> None:
    assert replays(dataclasses.replace(node(), burn=None)) == []
    burn = node().burn
    assert burn is not None
    failed = dataclasses.replace(burn, error="CUDA not found")
    assert replays(dataclasses.replace(node(), burn=failed)) == []
