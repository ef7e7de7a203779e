"""Drift: a certified H100 node, then one change at a time; each gives exactly its findings."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest

from tests.collecting import collect_simulated
from validator.certificate import Certificate, issue_certificate
from validator.drift import NEVER_CERTIFIED, compare, drift_node
from validator.error_tree import ExitCode
from validator.judge import Policy, Thresholds, judge_node
from validator.model import (
    DRIFT_CHECKS,
    BurnResult,
    GpuFacts,
    GpuStatus,
    KernelLogFacts,
    NodeFacts,
    Reason,
    Severity,
    Unavailable,
    Verdict,
    XidEvent,
)
from validator.node.burnin.burn_config import BurnConfig
from validator.service.outcome import exit_code

ISSUED = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)
POLICY = Policy()


@cache
def certified_facts() -> NodeFacts:
    """The healthy scenario with a one-second burn-in: judged CERTIFIED under the defaults."""
    return collect_simulated("healthy-8x-h100-sxm", burn=BurnConfig(duration_s=1.0))


@cache
def baseline() -> Certificate:
    result = judge_node(certified_facts(), POLICY)
    assert result.verdict is Verdict.CERTIFIED, result.summary
    return issue_certificate(result, now=ISSUED)


@cache
def quick_facts() -> NodeFacts:
    """What a drift run collects: the same node, no burn-in."""
    return collect_simulated("healthy-8x-h100-sxm", interconnect="off")


def with_gpu(facts: NodeFacts, index: int, **changes: Any) -> NodeFacts:
    gpus = tuple(
        dataclasses.replace(gpu, **changes) if gpu.index == index else gpu for gpu in facts.gpus
    )
    return dataclasses.replace(facts, gpus=gpus)


def drifted(facts: NodeFacts, policy: Policy = POLICY) -> set[tuple[str, int | None]]:
    return {
        (f.check, f.gpu_index)
        for f in compare(baseline(), facts, policy)
        if f.severity is Severity.FAIL
    }


def not_passed(facts: NodeFacts, policy: Policy = POLICY) -> set[tuple[str, str, int | None]]:
    return {
        (f.severity.value, f.check, f.gpu_index)
        for f in compare(baseline(), facts, policy)
        if f.severity is not Severity.PASS
    }


def test_the_baseline_is_a_real_certificate() -> None:
    cert = baseline()
    assert cert.hostname == "h100-node-01"
    assert cert.driver_version == "550.90.07"
    assert len(cert.gpus) == 8
    assert cert.gpus[0].burn_tflops == pytest.approx(720.0)
    assert cert.gpus[0].retired_pages_sbe is None  # H100 does not retire pages


# Each row: one change an operator meets in the field, and exactly the drift it must give.
SCENARIOS: list[tuple[str, Callable[[NodeFacts], NodeFacts], set[tuple[str, int | None]]]] = [
    ("nothing changed", lambda f: f, set()),
    (
        "driver upgraded",
        lambda f: dataclasses.replace(
            f,
            driver_version="560.35.03",
            kernel_module_version="560.35.03",
            cuda_driver_version="12.6",
            tools=dataclasses.replace(
                f.tools, nvidia_smi_driver_version="560.35.03", nvidia_smi_cuda_version="12.6"
            ),
        ),
        {("drift.driver", None), ("drift.kernel_module", None), ("drift.cuda", None)},
    ),
    (
        "GPU swapped",
        lambda f: with_gpu(
            f, 3, uuid="GPU-11111111-2222-3333-4444-555555555555", serial="1654423099999"
        ),
        {("drift.gpu_swapped", 3)},
    ),
    (
        "power cap lowered",
        lambda f: with_gpu(f, 5, power_limit_enforced_w=500.0),
        {("drift.power_limit", 5)},
    ),
    (
        "row remap appeared",
        lambda f: with_gpu(f, 2, remapped_rows_uncorrectable=1, remap_pending=True),
        {("drift.row_remap", 2)},
    ),
    (
        "PCIe link narrower",
        lambda f: with_gpu(f, 6, pcie_width_current=8),
        {("drift.pcie_width", 6)},
    ),
    ("PCIe generation lower", lambda f: with_gpu(f, 1, pcie_gen_max=4), {("drift.pcie_gen", 1)}),
    (
        "uncorrected ECC errors",
        lambda f: with_gpu(f, 4, ecc_volatile_uncorrected=2, ecc_aggregate_uncorrected=2),
        {("drift.ecc", 4)},
    ),
    (
        "VBIOS flashed",
        lambda f: with_gpu(f, 0, vbios_version="96.00.A1.00.01"),
        {("drift.vbios", 0)},
    ),
    (
        "persistence off",
        lambda f: with_gpu(f, 7, persistence_mode=False),
        {("drift.persistence", 7)},
    ),
    (
        "GPU removed",
        lambda f: dataclasses.replace(f, gpus=f.gpus[:7]),
        {("drift.gpu_removed", 7)},
    ),
    (
        "GPU fell off the bus",
        lambda f: with_gpu(
            f,
            6,
            status=GpuStatus.LOST,
            status_detail="nvmlDeviceGetHandleByIndex: GPU is lost",
            uuid=Unavailable(Reason.GPU_LOST),
            serial=Unavailable(Reason.GPU_LOST),
        ),
        {("drift.gpu_removed", 6)},
    ),
    (
        "GPU added",
        lambda f: dataclasses.replace(
            f,
            gpus=(
                *f.gpus,
                dataclasses.replace(f.gpus[7], index=8, uuid="GPU-8", serial="1654423000008"),
            ),
        ),
        {("drift.gpu_added", 8)},
    ),
    (
        "nvcc removed",
        lambda f: dataclasses.replace(
            f,
            tools=dataclasses.replace(
                f.tools, nvcc_version=Unavailable(Reason.NOT_SUPPORTED, "nvcc not found")
            ),
        ),
        {("drift.nvcc", None)},
    ),
    (
        "cuDNN upgraded",
        lambda f: dataclasses.replace(f, tools=dataclasses.replace(f.tools, cudnn_version="9.6.0")),
        {("drift.cudnn", None)},
    ),
]


@pytest.mark.parametrize(
    ("change", "expected"), [(s[1], s[2]) for s in SCENARIOS], ids=[s[0] for s in SCENARIOS]
)
def test_each_change_gives_exactly_its_drift(
    change: Callable[[NodeFacts], NodeFacts], expected: set[tuple[str, int | None]]
) -> None:
    facts = change(quick_facts())
    assert drifted(facts) == expected
    # Nothing else is left unjudged: every other fact was compared and passed.
    unknown = {(check, gpu) for sev, check, gpu in not_passed(facts) if sev == "UNKNOWN"}
    assert unknown == set()
    result = drift_node(facts, baseline(), POLICY)
    assert result.verdict is (Verdict.NOT_CERTIFIED if expected else Verdict.CERTIFIED)


def test_driver_upgrade_says_from_and_to() -> None:
    facts = dataclasses.replace(quick_facts(), driver_version="560.35.03")
    (finding,) = [f for f in compare(baseline(), facts, POLICY) if f.check == "drift.driver"]
    assert finding.severity is Severity.FAIL
    assert finding.observed == "560.35.03"
    assert finding.expected == "550.90.07"
    assert "from 550.90.07 to 560.35.03" in finding.message
    result = drift_node(facts, baseline(), POLICY)
    assert result.summary == "drift since the certificate of 2026-01-01T12:00:00+00:00: driver"


def test_swap_reports_the_new_identity_and_nothing_else_for_that_gpu() -> None:
    # Another board has other counters and another VBIOS: only the swap is reported.
    facts = with_gpu(
        quick_facts(),
        3,
        uuid="GPU-new",
        serial="999",
        vbios_version="96.00.AA.00.01",
        remapped_rows_correctable=5,
    )
    findings = [f for f in compare(baseline(), facts, POLICY) if f.gpu_index == 3]
    assert [(f.check, f.severity) for f in findings] == [("drift.gpu_swapped", Severity.FAIL)]
    assert findings[0].observed == "UUID GPU-new, serial 999"
    was = baseline().gpus[3]
    assert findings[0].expected == f"UUID {was.uuid}, serial {was.serial}"


def test_power_cap_message_and_tolerance() -> None:
    lowered = with_gpu(quick_facts(), 5, power_limit_enforced_w=500.0)
    (finding,) = [
        f
        for f in compare(baseline(), lowered, POLICY)
        if f.check == "drift.power_limit" and f.gpu_index == 5
    ]
    assert finding.message == "GPU 5: power limit lowered from 700 W to 500 W"
    # Rounding of the read-back is not a change of the cap.
    assert drifted(with_gpu(quick_facts(), 5, power_limit_enforced_w=700.4)) == set()


def test_volatile_ecc_reset_is_not_drift() -> None:
    cert = dataclasses.replace(
        baseline(),
        gpus=(
            dataclasses.replace(baseline().gpus[0], ecc_volatile_uncorrected=3),
            *baseline().gpus[1:],
        ),
    )
    findings = compare(cert, quick_facts(), POLICY)
    assert [f for f in findings if f.severity is Severity.FAIL] == []


def test_correctable_row_remaps_grown_is_drift() -> None:
    facts = with_gpu(quick_facts(), 2, remapped_rows_correctable=3)
    (finding,) = [f for f in compare(baseline(), facts, POLICY) if f.severity is Severity.FAIL]
    assert (finding.check, finding.gpu_index) == ("drift.row_remap", 2)
    assert finding.message == "GPU 2: remapped rows grew since certified: correctable 0 -> 3"


# ------------------------------------------------------------------ Xids


def with_xids(*events: XidEvent) -> NodeFacts:
    return dataclasses.replace(
        quick_facts(), kernel_log=KernelLogFacts(source="dmesg", window_hours=24.0, events=events)
    )


def xid(number: int, bus: str = "0000:3b:00", timestamp: str | None = None) -> XidEvent:
    return XidEvent(xid=number, pci_bus_id=bus, message="test", timestamp=timestamp)


def test_new_hardware_xid_is_drift_on_its_gpu() -> None:
    facts = with_xids(xid(79, "0000:3b:00", "2026-01-02T08:00:00+00:00"))
    assert drifted(facts) == {("drift.xid", 1)}  # 3B is GPU 1 in the scenario


def test_hardware_xid_before_the_certificate_is_not_new() -> None:
    facts = with_xids(xid(79, "0000:3b:00", "2026-01-01T11:59:00+00:00"))
    assert drifted(facts) == set()


def test_undated_hardware_xid_counts_as_new() -> None:
    assert drifted(with_xids(xid(48, "0000:c1:00"))) == {("drift.xid", 6)}


def test_software_xid_is_not_drift() -> None:
    assert drifted(with_xids(xid(13, "0000:3b:00", "2026-01-02T08:00:00+00:00"))) == set()


def test_xid_on_an_unknown_bus_is_a_node_finding() -> None:
    facts = with_xids(xid(79, "0000:ee:00", "2026-01-02T08:00:00+00:00"))
    assert drifted(facts) == {("drift.xid", None)}


def test_unreadable_kernel_log_is_unknown() -> None:
    facts = dataclasses.replace(
        quick_facts(),
        kernel_log=KernelLogFacts(
            source="dmesg", window_hours=24.0, events=Unavailable(Reason.NO_PERMISSION, "dmesg")
        ),
    )
    assert not_passed(facts) == {("UNKNOWN", "drift.xid", None)}
    result = drift_node(facts, baseline(), POLICY)
    assert result.verdict is Verdict.UNKNOWN
    assert result.summary == "could not be checked: xid"


# ------------------------------------------------------------------ burn-in


def with_burn(tflops: float) -> NodeFacts:
    burn = certified_facts().burn
    assert isinstance(burn, BurnResult)
    gpus = tuple(dataclasses.replace(g, tflops=tflops) if g.index == 4 else g for g in burn.gpus)
    return dataclasses.replace(quick_facts(), burn=dataclasses.replace(burn, gpus=gpus))


def test_burn_drop_beyond_the_policy_share_is_drift() -> None:
    assert drifted(with_burn(600.0)) == {("drift.burn", 4)}  # 16.7% below 720
    assert drifted(with_burn(660.0)) == set()  # 8.3%: within the default 10%
    strict = Policy(thresholds=Thresholds(drift_burn_drop=0.05))
    assert drifted(with_burn(660.0), strict) == {("drift.burn", 4)}


def test_no_burn_no_burn_findings() -> None:
    checks = {f.check for f in compare(baseline(), quick_facts(), POLICY)}
    assert "drift.burn" not in checks
    with_one = {f.check for f in compare(baseline(), with_burn(720.0), POLICY)}
    assert "drift.burn" in with_one


def test_failed_burn_is_unknown_not_passed() -> None:
    burn = certified_facts().burn
    assert burn is not None
    facts = dataclasses.replace(
        quick_facts(), burn=dataclasses.replace(burn, error="no burn backend can run")
    )
    assert {(s, c) for s, c, _ in not_passed(facts)} == {("UNKNOWN", "drift.burn")}
    assert drift_node(facts, baseline(), POLICY).verdict is Verdict.UNKNOWN


# ------------------------------------------------------------ unmeasurable, never certified


def test_never_certified_is_unknown_not_drift() -> None:
    result = drift_node(quick_facts(), None, POLICY)
    assert result.verdict is Verdict.UNKNOWN
    assert result.summary == NEVER_CERTIFIED == "never certified: run gpuready certify first"
    assert [(f.check, f.severity) for f in result.findings] == [
        ("drift.baseline", Severity.UNKNOWN)
    ]
    assert exit_code([result.verdict]) is ExitCode.COULD_NOT_RUN


def test_unreadable_uuid_is_unknown_and_blocks_no_drift() -> None:
    facts = with_gpu(quick_facts(), 2, uuid=Unavailable(Reason.ERROR, "NVML error 999"))
    assert not_passed(facts) == {("UNKNOWN", "drift.gpu_swapped", 2)}
    assert drift_node(facts, baseline(), POLICY).verdict is Verdict.UNKNOWN


def test_unreadable_power_limit_is_unknown() -> None:
    facts = with_gpu(quick_facts(), 0, power_limit_enforced_w=Unavailable(Reason.ERROR, "x"))
    assert not_passed(facts) == {("UNKNOWN", "drift.power_limit", 0)}


def test_unreadable_version_is_unknown_but_a_missing_tool_is_drift() -> None:
    unreadable = dataclasses.replace(
        quick_facts(),
        tools=dataclasses.replace(quick_facts().tools, cudnn_version=Unavailable(Reason.ERROR)),
    )
    assert not_passed(unreadable) == {("UNKNOWN", "drift.cudnn", None)}


def test_node_stripped_of_its_stack_drifts_and_its_gpus_are_unknown() -> None:
    # The driver library, kernel module, nvcc and cuDNN all gone: a reimaged node.
    facts = dataclasses.replace(collect_simulated("no-gpu-driver"), hostname="h100-node-01")
    assert drifted(facts) == {
        ("drift.kernel_module", None),
        ("drift.nvcc", None),
        ("drift.cudnn", None),
    }
    unknown = {(c, g) for sev, c, g in not_passed(facts) if sev == "UNKNOWN"}
    assert unknown == {("drift.driver", None), ("drift.cuda", None), ("drift.gpu_removed", None)}
    assert drift_node(facts, baseline(), POLICY).verdict is Verdict.NOT_CERTIFIED


def test_nothing_measured_is_unknown() -> None:
    facts = NodeFacts(hostname="h100-node-01", source="live")
    result = drift_node(facts, baseline(), POLICY)
    assert result.verdict is Verdict.UNKNOWN
    assert result.summary == "nothing measurable: not_measured"
    assert Severity.FAIL not in {f.severity for f in result.findings}
    assert exit_code([result.verdict]) is ExitCode.COULD_NOT_RUN


def test_version_absent_at_certification_and_now_is_silent() -> None:
    cert = dataclasses.replace(baseline(), cudnn_version=None)
    facts = dataclasses.replace(
        quick_facts(),
        tools=dataclasses.replace(
            quick_facts().tools,
            cudnn_version=Unavailable(Reason.NOT_SUPPORTED, "no cudnn_version.h"),
        ),
    )
    checks = {f.check for f in compare(cert, facts, POLICY)}
    assert "drift.cudnn" not in checks
    # Installed since: a warning, not drift.
    (found,) = [f for f in compare(cert, quick_facts(), POLICY) if f.check == "drift.cudnn"]
    assert found.severity is Severity.WARN


def test_every_check_id_is_declared() -> None:
    seen = {f.check for f in compare(baseline(), with_burn(720.0), POLICY)}
    seen |= {check for _, check, _ in not_passed(SCENARIOS[-1][1](quick_facts()))}
    assert seen <= set(DRIFT_CHECKS)
    assert {"drift.driver", "drift.power_limit", "drift.xid", "drift.burn"} <= seen


def test_gpu_facts_type_is_what_the_scenario_gives() -> None:
    # Guards the helpers above: the scenario's GPUs are GpuFacts indexed 0-7.
    assert [g.index for g in quick_facts().gpus] == list(range(8))
    assert all(isinstance(g, GpuFacts) for g in quick_facts().gpus)


# ------------------------------------------------------------ the judge's rules, shared


def test_a_driver_mismatch_is_drift_even_when_no_version_can_be_read() -> None:
    # The judge counts a mismatch as something to judge (versions.kernel_module FAILs):
    # the kernel module and user-space driver agreed when the node was certified.
    mismatch = dataclasses.replace(collect_simulated("driver-mismatch"), hostname="h100-node-01")
    assert ("drift.kernel_module", None) in drifted(mismatch)
    unread = dataclasses.replace(mismatch, driver_version=Unavailable(Reason.ERROR, "mismatch"))
    assert drifted(unread) == {("drift.kernel_module", None)}
    result = drift_node(unread, baseline(), POLICY)
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert result.summary.endswith(": kernel_module")
    # Its GPUs could not be read, so they are not compared: not reported as removed.
    assert ("UNKNOWN", "drift.gpu_removed", None) in not_passed(unread)


def test_no_driver_but_gpus_on_the_bus_is_unchecked_not_nothing_measurable() -> None:
    # The judge's "nothing to judge" needs no GPU on the PCI bus either. Simulated, as
    # the baseline is: a live host is never compared with a simulated node's certificate.
    facts = NodeFacts(hostname="h100-node-01", source="simulate", pci_gpu_count=8)
    result = drift_node(facts, baseline(), POLICY)
    assert result.verdict is Verdict.UNKNOWN
    assert result.summary.startswith("could not be checked: ")
    assert "gpu_removed" in result.summary


def test_xids_are_grouped_as_the_judge_groups_them() -> None:
    facts = with_xids(
        xid(79, "0000:ee:00", "2026-01-02T08:00:00+00:00"),
        xid(79, "0000:ef:00", "2026-01-02T08:00:01+00:00"),
        xid(79, "0000:3b:00", "2026-01-02T08:00:02+00:00"),
        xid(79, "0000:3b:00", "2026-01-02T08:00:03+00:00"),
    )
    found = [f for f in compare(baseline(), facts, POLICY) if f.check == "drift.xid"]
    judged = [f for f in judge_node(facts, POLICY).findings if f.check == "errors.xid"]
    assert [(f.gpu_index, f.observed) for f in found] == [(f.gpu_index, f.observed) for f in judged]
    assert sorted((f.gpu_index or -1, f.observed) for f in found) == [
        (-1, "Xid 79 x1"),
        (-1, "Xid 79 x1"),
        (1, "Xid 79 x2"),
    ]
    (on_gpu,) = [f for f in found if f.gpu_index == 1]
    assert on_gpu.message.startswith(
        "Xid 79 (GPU has fallen off the bus) on GPU 1 (0000:3b:00), 2 times"
    )


def test_a_clean_node_and_an_unchecked_one_exit_1() -> None:
    # operations.outcome's rule: 0 only when every node is shown unchanged.
    clean = drift_node(quick_facts(), baseline(), POLICY)
    never = drift_node(quick_facts(), None, POLICY)
    assert exit_code([clean.verdict, never.verdict]) is ExitCode.NOT_CERTIFIED
    assert exit_code([clean.verdict]) is ExitCode.OK
    assert exit_code([clean.verdict], interrupted=True) is ExitCode.INTERRUPTED


def test_persistence_off_reads_off() -> None:
    (finding,) = [
        f
        for f in compare(baseline(), with_gpu(quick_facts(), 7, persistence_mode=False), POLICY)
        if f.severity is Severity.FAIL
    ]
    assert (finding.check, finding.observed, finding.expected) == ("drift.persistence", "off", "on")
