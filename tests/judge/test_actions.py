"""What to do about each finding: the default table, assign_actions, and every check's ids."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import validator.judge.checks as checks_package
from tests.collecting import collect_simulated
from tests.judge.test_judge_healthy import (
    healthy_node,
    with_gpu,
    with_gpu_burn,
    with_tools,
)
from validator.judge import Policy, judge_node
from validator.judge.actions import (
    DEFAULT_SOURCE,
    FALLBACK,
    RULES,
    assign_action,
    assign_actions,
    default_action,
    has_rule,
    rule_for,
)
from validator.judge.catalog import load_catalog
from validator.judge.fleet import judge_fleet
from validator.judge.verdict import pick_sku
from validator.model import (
    NOT_SUPPORTED,
    Action,
    BurnStatus,
    CheckFamily,
    DriftCheck,
    Finding,
    GpuStatus,
    Interconnect,
    NodeFacts,
    NodeResult,
    NvLinkState,
    NvmlStatus,
    Reason,
    Severity,
    Unavailable,
    XidEvent,
)
from validator.node.burnin.burn_config import BurnConfig
from validator.node.sim.scenario import builtin_names

CHECKS_DIR = Path(checks_package.__file__).parent
FAMILY_NAMES = "|".join(family.value for family in CheckFamily)
CHECK_ID = re.compile(rf'"((?:{FAMILY_NAMES})\.[a-z_]+)"')


def _finding(check: str, severity: Severity, **changes: Any) -> Finding:
    return Finding(check, severity, f"{check} {severity.value}", **changes)


def _blocking(finding: Finding) -> bool:
    return finding.severity is Severity.FAIL or (
        finding.severity is Severity.UNKNOWN and finding.required
    )


# ------------------------------------------------------------------ assign_actions


def test_a_pass_carries_no_action_even_when_a_check_set_one() -> None:
    finding = _finding("memory.capacity", Severity.PASS, action=Action.DRAIN_RMA)
    assert assign_action(finding).action is Action.NONE
    assert assign_action(finding).action_source == ""


def test_an_action_a_check_set_is_kept() -> None:
    finding = _finding(
        "errors.xid",
        Severity.FAIL,
        action=Action.REBOOT,
        action_source="NVIDIA Xid catalog: RESTART_BM",
    )
    assert assign_action(finding) == finding


def test_a_finding_left_at_none_gets_the_default_and_its_source() -> None:
    finding = assign_action(_finding("memory.capacity", Severity.FAIL))
    assert (finding.action, finding.action_source) == (Action.DRAIN_RMA, DEFAULT_SOURCE)


def test_assign_actions_is_idempotent_and_keeps_the_order() -> None:
    findings = [
        _finding("pcie.width", Severity.FAIL, gpu_index=3),
        _finding("inventory.driver", Severity.PASS),
        _finding("burn.run", Severity.UNKNOWN),
    ]
    once = assign_actions(findings)
    assert [f.check for f in once] == ["pcie.width", "inventory.driver", "burn.run"]
    assert [f.action for f in once] == [Action.RESEAT_CABLE_RISER, Action.NONE, Action.RERUN]
    assert assign_actions(once) == once


@pytest.mark.parametrize(
    ("check", "severity", "message", "action"),
    [
        ("versions.driver", Severity.FAIL, "", Action.FIX_SOFTWARE),
        ("versions.cudnn", Severity.UNKNOWN, "", Action.RERUN),
        ("inventory.driver", Severity.UNKNOWN, "", Action.FIX_SOFTWARE),
        ("thermal.throttle", Severity.FAIL, "", Action.CHECK_COOLING_POWER),
        ("thermal.margin", Severity.WARN, "", Action.CHECK_COOLING_POWER),
        ("power.limit", Severity.FAIL, "", Action.FIX_SOFTWARE),  # a cap is a setting
        ("pcie.width", Severity.FAIL, "", Action.RESEAT_CABLE_RISER),
        ("pcie.gen", Severity.FAIL, "", Action.RESEAT_CABLE_RISER),
        ("pcie.replays", Severity.FAIL, "", Action.RESEAT_CABLE_RISER),
        ("nvlink.errors", Severity.FAIL, "", Action.RESEAT_CABLE_RISER),
        ("memory.capacity", Severity.FAIL, "", Action.DRAIN_RMA),
        ("errors.ecc_uncorrected_volatile", Severity.FAIL, "", Action.RESET_GPU),
        ("errors.row_remap", Severity.FAIL, "", Action.RESET_GPU),  # the check refines it
        ("errors.retired_pages", Severity.FAIL, "", Action.RESET_GPU),
        ("errors.ecc_corrected_volatile", Severity.WARN, "", Action.RERUN),
        ("burn.correctness", Severity.FAIL, "", Action.DRAIN_RMA),
        ("burn.speed", Severity.FAIL, "", Action.DRAIN_RMA),
        ("burn.correctness", Severity.UNKNOWN, "", Action.RERUN),
        ("fleet.speed", Severity.FAIL, "", Action.CHECK_COOLING_POWER),
        ("dcgm.run", Severity.UNKNOWN, "", Action.FIX_SOFTWARE),
        ("dcgm.memtest", Severity.FAIL, "", Action.DRAIN_RMA),  # by the dcgm. prefix
        ("dcgm.pcie", Severity.FAIL, "", Action.RESEAT_CABLE_RISER),  # its own row first
        ("dcgm.memory", Severity.WARN, "", Action.DRAIN_RMA),
        ("dcgm.memory", Severity.UNKNOWN, "", Action.RERUN),
        ("state.recovery_action", Severity.FAIL, "", Action.RESET_GPU),
        ("errors.sxid", Severity.FAIL, "", Action.REBOOT),
        ("errors.kernel_faults", Severity.FAIL, "", Action.RESET_GPU),
        ("transport.reach", Severity.UNKNOWN, "", Action.RERUN),
        ("drift.driver", Severity.FAIL, "", Action.FIX_SOFTWARE),
        ("drift.pcie_width", Severity.FAIL, "", Action.RESEAT_CABLE_RISER),
        ("something.new", Severity.FAIL, "", Action.RERUN),  # the fallback: never a guess
    ],
)
def test_default_actions(check: str, severity: Severity, message: str, action: Action) -> None:
    finding = Finding(check, severity, message or f"{check} {severity.value}")
    assert default_action(finding) is action


@pytest.mark.parametrize(
    ("check", "severity", "action"),
    [
        ("interconnect.run", Severity.UNKNOWN, Action.RERUN),
        ("interconnect.h2d", Severity.FAIL, Action.RESEAT_CABLE_RISER),
        ("interconnect.d2h", Severity.FAIL, Action.RESEAT_CABLE_RISER),
        ("interconnect.hbm", Severity.FAIL, Action.DRAIN_RMA),
        ("interconnect.hbm", Severity.UNKNOWN, Action.RERUN),
        ("interconnect.peer_access", Severity.FAIL, Action.RESEAT_CABLE_RISER),
        ("interconnect.p2p", Severity.FAIL, Action.RESEAT_CABLE_RISER),
        ("interconnect.all_reduce", Severity.FAIL, Action.RESEAT_CABLE_RISER),
        ("interconnect.all_reduce", Severity.UNKNOWN, Action.RERUN),
    ],
)
def test_interconnect_default_actions(check: str, severity: Severity, action: Action) -> None:
    # The fallback where the check set none (no SKU: the milder step for the links).
    assert has_rule(check)
    assert default_action(Finding(check, severity, check)) is action


def test_the_interconnect_checks_set_their_actions_and_the_judge_keeps_them() -> None:
    from tests.judge import test_judge_interconnect as ic

    def acted(facts: NodeFacts, check: str) -> Finding:
        result = judge_node(facts, Policy())
        found = [f for f in result.findings if f.check == check and f.severity is not Severity.PASS]
        assert len(found) == 1, found
        return found[0]

    # The host copies and HBM agree with their rows; the source says why.
    riser = acted(ic.node(gpus=ic.copies({3: (27.0, 27.5, 2540.0)})), "interconnect.h2d")
    assert riser.action is rule_for("interconnect.h2d").fail
    assert riser.action_source != DEFAULT_SOURCE
    hbm = acted(ic.node(gpus=ic.copies({5: (54.1, 55.2, 2100.0)})), "interconnect.hbm")
    assert hbm.action is rule_for("interconnect.hbm").fail
    # On an SXM baseboard the links are an RMA (checks.nvlink.link_repair), not the row's reseat.
    gpu6 = acted(ic.node(peers=ic.peers(ic._slow_gpu_six)), "interconnect.p2p")
    assert gpu6.action is Action.DRAIN_RMA
    assert gpu6.action_source.startswith("gpuready: NVLink on an SXM baseboard")
    # The NVSwitch fabric: the fabric manager first, else the baseboard.
    degraded = ic.node(all_reduce=ic.sweep(busbw=300.0))
    assert acted(degraded, "interconnect.all_reduce").action is Action.DRAIN_RMA
    unregistered = with_gpu(degraded, 2, fabric_state="in_progress")
    assert acted(unregistered, "interconnect.all_reduce").action is Action.FIX_SOFTWARE
    # Missing libraries are software; anything else that stopped it is a rerun.
    nccl = ic.node(all_reduce=Unavailable(Reason.NOT_SUPPORTED, "libnccl.so.2 not found"))
    assert acted(nccl, "interconnect.all_reduce").action is Action.FIX_SOFTWARE
    assert assign_actions([acted(nccl, "interconnect.all_reduce")])[0].action is (
        Action.FIX_SOFTWARE
    )


def test_a_check_id_nobody_knows_falls_back_to_rerun() -> None:
    assert not has_rule("something.new")
    assert rule_for("something.new") is FALLBACK
    assert has_rule("dcgm.targeted_stress")  # by prefix


def test_a_slow_gpu_takes_the_action_of_what_slows_it() -> None:
    findings = [
        _finding("burn.speed", Severity.FAIL, gpu_index=3),
        _finding("burn.speed", Severity.FAIL, gpu_index=5),
        _finding("power.limit", Severity.FAIL, gpu_index=3),
        _finding("thermal.throttle", Severity.FAIL, gpu_index=5),
        _finding("burn.throttle", Severity.FAIL, gpu_index=5),
    ]
    speed3, speed5 = assign_actions(findings)[:2]
    assert speed3.action is Action.FIX_SOFTWARE
    assert speed3.action_source == "gpuready: slow because of power.limit"
    assert speed5.action is Action.CHECK_COOLING_POWER
    assert speed5.action_source == "gpuready: slow because of thermal.throttle"
    # Without a cause the chip itself is slow; a cause on another GPU changes nothing.
    alone = assign_actions([findings[0], _finding("power.limit", Severity.FAIL, gpu_index=4)])
    assert alone[0].action is Action.DRAIN_RMA


def test_a_speed_action_a_check_set_is_not_explained_away() -> None:
    findings = [
        _finding("burn.speed", Severity.FAIL, gpu_index=3, action=Action.RESET_GPU),
        _finding("power.limit", Severity.FAIL, gpu_index=3),
    ]
    assert assign_actions(findings)[0].action is Action.RESET_GPU


def test_a_missing_gpu_takes_the_action_of_the_fault_that_explains_it() -> None:
    rm_init = _finding(
        "errors.kernel_faults",
        Severity.FAIL,
        observed="rm_init_adapter_failed x2",
        action=Action.REBOOT,
        action_source="NVIDIA Xid catalog: RESET_GPU (Xid 143, GPU initialization failure)",
    )
    count = _finding("inventory.gpu_count", Severity.FAIL)
    explained, cause = assign_actions([count, rm_init])
    assert explained.action is Action.REBOOT
    assert explained.action_source == (
        "gpuready: explained by errors.kernel_faults (rm_init_adapter_failed x2)"
    )
    assert cause == rm_init
    # Idempotent: a second pass keeps the explanation.
    assert assign_actions([explained, cause]) == (explained, cause)


def test_a_missing_gpu_with_an_xid_79_takes_its_action_its_own_gpus_first() -> None:
    xid79 = _finding(
        "errors.xid",
        Severity.FAIL,
        gpu_index=4,
        observed="Xid 79 x1",
        action=Action.REBOOT,
        action_source="NVIDIA Xid catalog: RESTART_BM",
    )
    gsp = _finding(
        "errors.kernel_faults",
        Severity.FAIL,
        gpu_index=4,
        observed="gsp_timeout x1",
        action=Action.RESET_GPU,
    )
    status = _finding("inventory.gpu_status", Severity.FAIL, gpu_index=4)
    (explained, *_) = assign_actions([status, gsp, xid79])
    assert (explained.action, explained.action_source) == (
        Action.REBOOT,
        "gpuready: explained by errors.xid (Xid 79 x1)",
    )


def test_a_missing_gpu_without_such_a_fault_keeps_its_default() -> None:
    unrelated = [
        _finding("errors.kernel_faults", Severity.FAIL, observed="gsp_error x1",
                 action=Action.RESET_GPU),
        _finding("errors.xid", Severity.FAIL, observed="Xid 48 x1", action=Action.RESET_GPU),
        _finding("errors.kernel_faults", Severity.WARN, observed="fallen_off_bus x1",
                 action=Action.RERUN),
    ]  # fmt: skip
    (count, *_) = assign_actions([_finding("inventory.gpu_count", Severity.FAIL), *unrelated])
    assert (count.action, count.action_source) == (Action.RESEAT_CABLE_RISER, DEFAULT_SOURCE)
    # A count a check gave its own action is not explained away either.
    own = _finding("inventory.gpu_count", Severity.FAIL, action=Action.DRAIN_RMA)
    cause = _finding("errors.xid", Severity.FAIL, observed="Xid 79 x1", action=Action.REBOOT)
    assert assign_actions([own, cause])[0].action is Action.DRAIN_RMA


def test_the_rm_init_scenario_asks_for_one_thing_only() -> None:
    # One RmInitAdapter fault: the kernel fault says reboot, and so does the GPU count
    # it explains, so "What to do" has one entry, not a reseat before the reboot.
    from validator.report.shared import what_to_do

    result = judge_node(
        collect_simulated("rm-init-adapter-failed", interconnect="auto"), Policy(require_burn=False)
    )
    blocking = [f for f in result.findings if _blocking(f)]
    count = next(f for f in blocking if f.check == "inventory.gpu_count")
    assert count.action is Action.REBOOT
    assert count.action_source.startswith("gpuready: explained by errors.kernel_faults")
    assert {f.action for f in blocking} == {Action.REBOOT}
    assert [group.action for group in what_to_do(result)] == [Action.REBOOT]


# ------------------------------------------------------------------ every check id


def _check_modules() -> list[Any]:
    modules = []
    for info in pkgutil.iter_modules([str(CHECKS_DIR)]):
        module = importlib.import_module(f"validator.judge.checks.{info.name}")
        if callable(getattr(module, "check", None)) and info.name != "common":
            modules.append(module)
    return modules


def test_every_check_id_written_in_a_check_module_has_a_row() -> None:
    found: dict[str, str] = {}
    for path in sorted(CHECKS_DIR.glob("*.py")):
        for check in CHECK_ID.findall(path.read_text(encoding="utf-8")):
            found.setdefault(check, path.name)
    assert "memory.capacity" in found
    assert "burn.correctness" in found
    missing = sorted(f"{check} ({where})" for check, where in found.items() if not has_rule(check))
    assert missing == []


@pytest.mark.parametrize("check", [c.value for c in DriftCheck])
def test_every_drift_check_has_a_row(check: str) -> None:
    assert check in RULES


def _variants() -> list[tuple[str, NodeFacts, Policy]]:
    """Hand-made facts that make each family fail or stay unknown in its own ways."""
    base = healthy_node()
    burn = base.burn
    assert burn is not None
    lost = Unavailable(Reason.GPU_LOST, "NVML_ERROR_GPU_IS_LOST")
    unread = Unavailable(Reason.ERROR, "NVML error 999")
    return [
        ("healthy", base, Policy()),
        (
            "links and slots",
            with_gpu(
                with_gpu(base, 1, pcie_width_current=8, pcie_width_max=8),
                2,
                pcie_gen_max=3,
                nvlinks=(NvLinkState(0, False), NvLinkState(1, True)),
            ),
            Policy(),
        ),
        (
            "memory",
            with_gpu(
                with_gpu(base, 2, memory_total_mib=40000, ecc_mode_current=False),
                3,
                remap_failure=True,
                remap_pending=True,
                ecc_volatile_uncorrected=4,
                ecc_aggregate_uncorrected=9,
                ecc_volatile_corrected=50000,
            ),
            Policy(),
        ),
        (
            "power and heat",
            with_gpu(
                with_gpu(base, 4, power_limit_enforced_w=400.0),
                5,
                clock_event_reasons=("hw_power_brake_slowdown",),
                persistence_mode=False,
            ),
            Policy(mig_mode=True),
        ),
        (
            "unreadable",
            with_gpu(
                with_gpu(base, 6, temperature_gpu_c=unread, clock_event_reasons=unread),
                7,
                status=GpuStatus.LOST,
                uuid=lost,
            ),
            Policy(expected_gpu_count=9),
        ),
        (
            "software",
            with_tools(
                dataclasses.replace(
                    base, kernel_log=dataclasses.replace(base.kernel_log, events=unread)
                ),
                nvcc_version=NOT_SUPPORTED,
                cudnn_version=unread,
            ),
            Policy(
                driver_version="535.129.03", cuda_version="12.8", expected_model="a100-sxm4-80gb"
            ),
        ),
        (
            "xids",
            dataclasses.replace(
                base,
                kernel_log=dataclasses.replace(
                    base.kernel_log,
                    events=(
                        XidEvent(79, str(base.gpus[0].pci_bus_id)[4:12], "fallen off the bus"),
                        XidEvent(13, str(base.gpus[1].pci_bus_id)[4:12], "graphics exception"),
                        XidEvent(20034, "0000:07:00", "link down", nvswitch=True),
                    ),
                ),
            ),
            Policy(),
        ),
        (
            "burn",
            with_gpu_burn(
                with_gpu_burn(
                    with_gpu_burn(base, 1, mismatched_elements=12, mismatched_iterations=1),
                    2,
                    status=BurnStatus.TIMEOUT,
                    detail="wedged",
                ),
                3,
                tflops=100.0,
                tflops_windows=(100.0,),
            ),
            Policy(),
        ),
        ("no burn", dataclasses.replace(base, burn=None), Policy()),
        (
            "burn failed to start",
            dataclasses.replace(base, burn=dataclasses.replace(burn, gpus=(), error="no backend")),
            Policy(),
        ),
        (
            "no driver",
            dataclasses.replace(base, nvml_status=NvmlStatus.LIBRARY_NOT_FOUND, gpus=(), burn=None),
            Policy(),
        ),
        (
            "driver mismatch",
            dataclasses.replace(base, nvml_status=NvmlStatus.DRIVER_MISMATCH, gpus=()),
            Policy(),
        ),
        (
            "unknown model",
            dataclasses.replace(
                base, gpus=tuple(dataclasses.replace(g, name="NVIDIA Z999") for g in base.gpus)
            ),
            Policy(),
        ),
        (
            "mixed models",
            with_gpu(base, 0, name="NVIDIA A100-SXM4-80GB"),
            Policy(),
        ),
        *_interconnect_variants(),
    ]


def _interconnect_variants() -> list[tuple[str, NodeFacts, Policy]]:
    """The interconnect failing and unknown in its own ways (test_judge_interconnect.py)."""
    from tests.judge import test_judge_interconnect as ic

    riser = with_gpu(ic.node(gpus=ic.copies({3: (27.0, 27.5, 2540.0)})), 3, pcie_width_current=8)
    slow_hbm = ic.node(gpus=ic.copies({5: (54.1, 55.2, 2100.0)}))
    links = ic.node(
        peers=ic.peers(ic._slow_gpu_six, access=lambda s, d: (s, d) != (1, 2)),
        all_reduce=ic.sweep(busbw=300.0),
    )
    unread = ic.node(
        gpus=Unavailable(Reason.ERROR, "no time left"),
        peers=Unavailable(Reason.ERROR, "no time left"),
        all_reduce=Unavailable(Reason.NOT_SUPPORTED, "libnccl.so.2 not found"),
    )
    return [
        ("riser at x8", riser, Policy()),
        ("slow HBM", slow_hbm, Policy()),
        ("one GPU's links and a denied pair", links, Policy()),
        ("NVSwitch degraded", ic.node(all_reduce=ic.sweep(busbw=300.0)), Policy()),
        ("all-reduce corrupted", ic.node(all_reduce=ic.sweep(wrong=5)), Policy()),
        ("interconnect not measured", unread, Policy()),
        (
            "interconnect could not run",
            healthy_node(
                interconnect=Interconnect(source="cuda", error="libcudart.so.12 not found")
            ),
            Policy(),
        ),
        ("busy GPU", ic.node(peers=ic.peers(ic._slow_gpu_six), busy_gpus=(6,)), Policy()),
    ]


def _scenarios() -> list[tuple[str, NodeFacts, Policy]]:
    """Every built-in scenario, with a short simulated burn-in."""
    burn = BurnConfig(duration_s=2.0)
    names = builtin_names()
    # At once: a simulated burn is paced to the clock, not the CPU (21 scenarios took
    # 36 s one after another, 7 s together), and each collection is its own.
    with ThreadPoolExecutor(max_workers=8) as pool:
        facts = list(pool.map(lambda name: collect_simulated(name, burn=burn), names))
    return [(name, found, Policy()) for name, found in zip(names, facts)]


@pytest.fixture(scope="module")
def cases() -> list[tuple[str, NodeFacts, Policy]]:
    return _variants() + _scenarios()


def _emitted(facts: NodeFacts, policy: Policy) -> list[Finding]:
    """Every finding of every check module, registered with the verdict or not yet."""
    sku = pick_sku(facts, policy, load_catalog())
    found: list[Finding] = []
    for module in _check_modules():
        check: Callable[..., list[Finding]] = module.check
        found += check(facts, policy, sku)
    return found


def test_every_emitted_check_id_has_a_row(cases: list[tuple[str, NodeFacts, Policy]]) -> None:
    ids: set[str] = set()
    for _, facts, policy in cases:
        ids |= {finding.check for finding in _emitted(facts, policy)}
    # The walk reaches the families it should (a FAIL or UNKNOWN of each of these).
    assert {"pcie.width", "memory.capacity", "burn.correctness", "versions.nvcc"} <= ids
    assert sorted(check for check in ids if not has_rule(check)) == []


def test_no_blocking_finding_leaves_the_judge_without_an_action(
    cases: list[tuple[str, NodeFacts, Policy]],
) -> None:
    blocking_seen: set[str] = set()
    bare: list[str] = []
    for name, facts, policy in cases:
        result = judge_node(facts, policy)
        for finding in result.findings:
            if finding.severity is Severity.PASS:
                assert finding.action is Action.NONE, (name, finding.check)
            elif _blocking(finding):
                blocking_seen.add(finding.check)
                if finding.action is Action.NONE:
                    bare.append(f"{name}: {finding.check} {finding.severity.value}")
    assert bare == []
    # Enough of the table is exercised for this to mean something.
    assert len(blocking_seen) >= 25, sorted(blocking_seen)


def test_no_blocking_finding_of_any_module_is_left_without_a_default(
    cases: list[tuple[str, NodeFacts, Policy]],
) -> None:
    # The modules not yet registered with the verdict (nvlink, dcgm) are called here
    # directly: their ids need rows too.
    for name, facts, policy in cases:
        for finding in assign_actions(_emitted(facts, policy)):
            if _blocking(finding):
                assert finding.action is not Action.NONE, (name, finding.check)


# ------------------------------------------------------------------ through the judge


def _actions(result: NodeResult, check: str) -> set[tuple[int | None, Action]]:
    return {(f.gpu_index, f.action) for f in result.findings if f.check == check}


def test_scenarios_give_their_fault_the_right_action() -> None:
    def judged(name: str) -> NodeResult:
        return judge_node(collect_simulated(name), Policy(require_burn=False))

    assert _actions(judged("row-remap-pending"), "errors.row_remap") >= {(2, Action.RESET_GPU)}
    assert (3, Action.FIX_SOFTWARE) in _actions(judged("one-gpu-power-capped"), "power.limit")
    capacity = _actions(judged("mixed-hbm-40gb-in-80gb-node"), "memory.capacity")
    assert {action for _, action in capacity} >= {Action.DRAIN_RMA}
    lost = _actions(judged("gpu-fallen-off-bus"), "inventory.gpu_status")
    assert {action for _, action in lost} == {Action.REBOOT}


def test_a_power_capped_gpu_is_not_sent_back_for_being_slow() -> None:
    facts = collect_simulated("one-gpu-power-capped", burn=BurnConfig(duration_s=2.0))
    result = judge_node(facts, Policy())
    speed = [
        f
        for f in result.findings
        if f.check.startswith("burn.speed") and f.severity is Severity.FAIL
    ]
    assert speed, "the scenario's capped GPU should be slow"
    assert {f.action for f in speed} == {Action.FIX_SOFTWARE}


def test_fleet_findings_get_actions() -> None:
    fast = healthy_node()
    slow = with_gpu_burn(fast, 0, tflops=300.0, tflops_windows=(300.0,))
    nodes = [
        judge_node(dataclasses.replace(fast, hostname=f"n{i}"), Policy()) for i in range(3)
    ] + [judge_node(dataclasses.replace(slow, hostname="slow"), Policy())]
    judged, _ = judge_fleet(nodes, Policy())
    fleet = [f for f in judged[-1].findings if f.check == "fleet.speed" and f.gpu_index == 0]
    assert fleet
    assert fleet[0].severity is Severity.FAIL
    # GPU 0 is also slow on its own node (burn.speed): the fleet finding's default stands.
    assert fleet[0].action is Action.CHECK_COOLING_POWER
    passing = [f for f in judged[0].findings if f.check == "fleet.speed"]
    assert passing
    assert all(f.action is Action.NONE for f in passing)


# ---------------------------------------------------------------- DCGM: one decision


def test_the_dcgm_rows_agree_with_the_dcgm_checks_own_actions() -> None:
    # The check sets the action on every dcgm.* finding; the table's rows are its fallback
    # and must not say otherwise (sm_stress was an RMA here, cooling there).
    from validator.judge.checks import dcgm as dcgm_check
    from validator.model import DcgmOutcome, DcgmTestResult

    tests = [*dcgm_check.TEST_ACTIONS, "diagnostic", "eud", "software.denylist"]
    for test in tests:
        failed = DcgmTestResult(test, DcgmOutcome.FAIL, "hardware", 0)
        warned = dataclasses.replace(failed, outcome=DcgmOutcome.WARN)
        skipped = dataclasses.replace(failed, outcome=DcgmOutcome.SKIP)
        rule = rule_for(f"dcgm.{test}")
        assert rule.fail is dcgm_check.action_for_result(failed)[0], test
        assert (rule.warn or rule.fail) is dcgm_check.action_for_result(warned)[0], test
        assert rule.unknown is dcgm_check.action_for_result(skipped)[0], test
    assert rule_for("dcgm.sm_stress").fail is Action.CHECK_COOLING_POWER
    assert rule_for("dcgm.context_create").fail is Action.FIX_SOFTWARE
