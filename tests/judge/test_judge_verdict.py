"""Verdict rules, summaries and the policy digest carried in the result."""

from __future__ import annotations

import dataclasses

import pytest

from tests.judge.test_judge_healthy import NOT_SUPPORTED, healthy_node, judge, with_gpu, with_tools
from validator.judge import Policy, Thresholds, judge_node, load_catalog, policy_digest
from validator.model import (
    NOT_MEASURED,
    GpuFacts,
    GpuStatus,
    KernelLogFacts,
    NodeFacts,
    NvmlStatus,
    Reason,
    Severity,
    Unavailable,
    Verdict,
)


def no_driver(**changes: object) -> NodeFacts:
    facts = NodeFacts(hostname="bare-01", source="live", nvml_status=NvmlStatus.LIBRARY_NOT_FOUND)
    return dataclasses.replace(facts, **changes)  # type: ignore[arg-type]


def test_fail_means_not_certified_with_failed_checks_and_gpus_listed() -> None:
    facts = with_gpu(
        with_gpu(healthy_node(), 3, power_limit_enforced_w=500.0), 5, power_limit_enforced_w=500.0
    )
    facts = with_gpu(facts, 1, persistence_mode=False)
    result = judge(facts)
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert (
        result.summary
        == "8x H100 SXM5 80GB: 2 checks failed: power.limit (GPUs 3, 5), state.persistence (GPU 1)"
    )


def test_required_unknown_means_not_certified() -> None:
    result = judge(with_gpu(healthy_node(), 2, power_limit_enforced_w=NOT_SUPPORTED))
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert (
        result.summary
        == "8x H100 SXM5 80GB: 2 required checks could not be judged: burn.power (GPU 2), "
        "power.limit (GPU 2)"
    )


def test_non_required_unknown_stays_certified() -> None:
    result = judge(with_gpu(healthy_node(), 2, vbios_version=NOT_MEASURED))
    unknowns = [f for f in result.findings if f.severity is Severity.UNKNOWN]
    assert [(f.check, f.required) for f in unknowns] == [("versions.vbios", False)]
    assert result.verdict is Verdict.CERTIFIED


def test_warn_only_is_certified_and_summarised() -> None:
    # A GPU 3 C from T.Limit at idle is hot: its temperature says so too.
    result = judge(with_gpu(healthy_node(), 1, tlimit_margin_c=3.0, temperature_gpu_c=84.0))
    assert result.verdict is Verdict.CERTIFIED
    assert result.summary.endswith("passed with 1 warning: thermal.margin (GPU 1)")


def test_no_driver_is_unknown_with_a_clear_summary() -> None:
    result = judge_node(no_driver(), Policy())
    assert result.verdict is Verdict.UNKNOWN
    assert (
        result.summary == "no usable NVIDIA driver on this host (libnvidia-ml.so.1 not found); "
        "no NVIDIA GPU found: nothing to certify"
    )
    assert result.sku is None
    assert not any(f.severity is Severity.FAIL for f in result.findings)


def test_no_driver_summary_carries_the_detail() -> None:
    result = judge_node(
        no_driver(
            nvml_status=NvmlStatus.DRIVER_NOT_LOADED, nvml_detail="NVML_ERROR_DRIVER_NOT_LOADED"
        ),
        Policy(),
    )
    assert result.verdict is Verdict.UNKNOWN
    assert result.summary == (
        "the NVIDIA driver is installed but its kernel module is not loaded "
        "(NVML_ERROR_DRIVER_NOT_LOADED); no NVIDIA GPU found: nothing to certify"
    )


def test_no_gpu_and_no_driver_is_unknown_even_with_a_failing_tool_check() -> None:
    # A CPU-only machine lacks cuDNN too; that must not hide "no GPU here".
    facts = no_driver(
        tools=dataclasses.replace(
            no_driver().tools, nvcc_version=Unavailable(NOT_SUPPORTED.reason, "nvcc not on PATH")
        )
    )
    result = judge_node(facts, Policy())
    assert any(f.severity is Severity.FAIL for f in result.findings)
    assert result.verdict is Verdict.UNKNOWN
    assert "no NVIDIA GPU found" in result.summary


def test_gpus_on_the_pci_bus_without_a_driver_fail() -> None:
    result = judge_node(no_driver(pci_gpu_count=8), Policy())
    (count,) = [f for f in result.findings if f.check == "inventory.gpu_count"]
    assert count.severity is Severity.UNKNOWN
    assert "the PCI bus shows 8" in count.message
    (driver,) = [f for f in result.findings if f.check == "inventory.driver"]
    assert driver.severity is Severity.FAIL
    assert "8 NVIDIA GPUs" in driver.message
    assert result.verdict is Verdict.NOT_CERTIFIED


def test_driver_mismatch_without_gpus_is_not_certified_not_unknown() -> None:
    facts = healthy_node(
        nvml_status=NvmlStatus.DRIVER_MISMATCH, gpus=(), kernel_module_version="550.54.14"
    )
    assert judge(facts).verdict is Verdict.NOT_CERTIFIED


def test_result_carries_policy_digest_and_sku() -> None:
    policy = Policy(driver_branch="550")
    result = judge_node(healthy_node(), policy, load_catalog())
    assert result.policy_digest == policy_digest(policy)
    assert result.sku == "h100-sxm"
    assert result.hostname == "gpu-node-01"


def test_missing_tools_in_facts_are_unknown_never_pass() -> None:
    facts = with_tools(healthy_node(), nvcc_version=NOT_MEASURED, cudnn_version=NOT_MEASURED)
    result = judge(facts)
    states = {
        f.check: f.severity
        for f in result.findings
        if f.check in ("versions.nvcc", "versions.cudnn")
    }
    assert states == {"versions.nvcc": Severity.UNKNOWN, "versions.cudnn": Severity.UNKNOWN}


def test_policy_digest_changes_with_thresholds() -> None:
    assert policy_digest(Policy()) == policy_digest(Policy())
    assert policy_digest(Policy()) != policy_digest(
        Policy(thresholds=Thresholds(power_limit_min_ratio=0.9))
    )


# ---------------------------------------------------------------- fail closed

_LOST = Unavailable(Reason.GPU_LOST, "nvidia-smi: GPU is lost")
_ERROR = Unavailable(Reason.ERROR, "Unknown Error")
_SILENT_FIELDS = [
    f.name
    for f in dataclasses.fields(GpuFacts)
    if f.name not in ("index", "status", "status_detail")
]


def _silent_gpu(index: int, value: Unavailable) -> GpuFacts:
    """A GPU NVML counted whose every reading failed with ``value``."""
    return GpuFacts(index=index, **dict.fromkeys(_SILENT_FIELDS, value))  # type: ignore[arg-type]


def _all_silent(value: Unavailable) -> NodeFacts:
    return healthy_node(gpus=tuple(_silent_gpu(i, value) for i in range(8)))


# (case, facts, GPUs that must have no PASS finding, a finding that must be there)
FAIL_CLOSED_CASES = [
    (
        "GPU whose handle could not be read",
        with_gpu(healthy_node(), 3, status=GpuStatus.ERROR, status_detail="Unknown Error"),
        {3},
        ("inventory.gpu_status", Severity.UNKNOWN, 3),
    ),
    (
        "GPU whose readings say it is lost, status left ok (a capture)",
        with_gpu(healthy_node(), 3, temperature_gpu_c=_LOST, power_draw_w=_LOST),
        {3},
        ("inventory.gpu_status", Severity.FAIL, 3),
    ),
    (
        "GPU whose every reading failed",
        with_gpu(healthy_node(), 6, **dict.fromkeys(_SILENT_FIELDS, _ERROR)),
        {6},
        ("inventory.gpu_status", Severity.UNKNOWN, 6),
    ),
    (
        "eight GPUs counted, every reading unavailable",
        _all_silent(_ERROR),
        set(range(8)),
        ("inventory.gpu_status", Severity.UNKNOWN, 0),
    ),
    (
        "eight GPUs counted, every reading not supported",
        _all_silent(NOT_SUPPORTED),
        set(range(8)),
        ("inventory.gpu_status", Severity.UNKNOWN, 7),
    ),
    (
        "nvidia-smi names another driver than NVML",
        with_tools(healthy_node(), nvidia_smi_driver_version="535.183.01"),
        set(),
        ("versions.driver", Severity.FAIL, None),
    ),
    (
        "kernel log unreadable",
        healthy_node(
            kernel_log=KernelLogFacts(
                source="dmesg", window_hours=24.0, events=Unavailable(Reason.ERROR, "empty")
            )
        ),
        set(),
        ("errors.xid", Severity.UNKNOWN, None),
    ),
]


@pytest.mark.parametrize(
    ("facts", "silent_gpus", "expected"),
    [c[1:] for c in FAIL_CLOSED_CASES],
    ids=[c[0] for c in FAIL_CLOSED_CASES],
)
def test_what_could_not_be_measured_never_certifies(
    facts: NodeFacts, silent_gpus: set[int], expected: tuple[str, Severity, int | None]
) -> None:
    result = judge(facts)
    assert result.verdict is Verdict.NOT_CERTIFIED
    seen = {(f.check, f.severity, f.gpu_index) for f in result.findings}
    assert expected in seen
    passed_on = {f.gpu_index for f in result.findings if f.severity is Severity.PASS}
    assert not passed_on & silent_gpus
    if silent_gpus == set(range(8)):
        assert not any(
            f.check == "inventory.gpu_status" and f.severity is Severity.PASS
            for f in result.findings
        )


def test_no_findings_at_all_is_never_certified() -> None:
    from validator.judge.verdict import decide

    verdict, summary = decide(healthy_node(), ())
    assert verdict is Verdict.UNKNOWN
    assert "nothing could be judged" in summary


def test_every_check_id_belongs_to_its_family() -> None:
    from tests.collecting import collect_simulated
    from validator.judge.checks import FAMILIES
    from validator.model import CheckFamily
    from validator.node.sim.scenario import builtin_names

    for name in builtin_names():
        facts = collect_simulated(name)
        for family, check in FAMILIES:
            for finding in check(facts, Policy(), None):
                assert CheckFamily.of(finding.check) is family, (name, finding.check)
    assert CheckFamily.of("memory.capacity") is CheckFamily.MEMORY
    assert CheckFamily.of("nonsense.check") is None
