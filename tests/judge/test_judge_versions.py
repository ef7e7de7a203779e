"""Version checks: driver pin, CUDA floor, kernel module, nvcc, cuDNN, VBIOS."""

from __future__ import annotations

import pytest

from tests.judge.test_judge_healthy import (
    NOT_SUPPORTED,
    healthy_node,
    judge,
    not_passed,
    only,
    with_gpu,
    with_tools,
)
from validator.judge import Policy
from validator.model import (
    NOT_MEASURED,
    NodeFacts,
    NvmlStatus,
    Reason,
    Severity,
    Unavailable,
    Verdict,
)

FAIL, UNKNOWN, WARN = Severity.FAIL, Severity.UNKNOWN, Severity.WARN
NODE = None

CASES = [
    ("exact driver pin holds", healthy_node(), Policy(driver_version="550.90.07"), set()),
    (
        "exact driver pin differs",
        healthy_node(),
        Policy(driver_version="550.127.05"),
        {("versions.driver", FAIL, NODE)},
    ),
    ("branch pin holds", healthy_node(), Policy(driver_branch="550"), set()),
    (
        "branch pin differs",
        healthy_node(),
        Policy(driver_branch="535"),
        {("versions.driver", FAIL, NODE)},
    ),
    (
        "driver unreadable, pinned",
        healthy_node(driver_version=NOT_MEASURED, kernel_module_version=NOT_MEASURED),
        Policy(driver_branch="550"),
        {("versions.driver", UNKNOWN, NODE), ("versions.kernel_module", UNKNOWN, NODE)},
    ),
    ("CUDA above floor", healthy_node(), Policy(cuda_version="12.2"), set()),
    (
        "CUDA below floor",
        healthy_node(),
        Policy(cuda_version="12.6"),
        {("versions.cuda", FAIL, NODE)},
    ),
    (
        "CUDA 12.10 beats 12.4 numerically",
        with_tools(healthy_node(cuda_driver_version="12.10"), nvidia_smi_cuda_version="12.10"),
        Policy(cuda_version="12.4"),
        set(),
    ),
    (
        "nvidia-smi prints another driver than NVML",
        with_tools(healthy_node(), nvidia_smi_driver_version="535.183.01"),
        Policy(),
        {("versions.driver", FAIL, NODE)},
    ),
    (
        "nvidia-smi prints the driver shorter",
        with_tools(healthy_node(), nvidia_smi_driver_version="550.90"),
        Policy(),
        set(),
    ),
    (
        "nvidia-smi prints another CUDA than NVML",
        with_tools(healthy_node(), nvidia_smi_cuda_version="12.2"),
        Policy(),
        {("versions.cuda", FAIL, NODE)},
    ),
    (
        "nvidia-smi not run",
        with_tools(healthy_node(), nvidia_smi_driver_version=NOT_MEASURED),
        Policy(),
        set(),
    ),
    (
        "module and library differ",
        healthy_node(kernel_module_version="550.54.14"),
        Policy(),
        {("versions.kernel_module", FAIL, NODE)},
    ),
    (
        "nvcc not installed",
        with_tools(
            healthy_node(), nvcc_version=Unavailable(Reason.NOT_SUPPORTED, "nvcc not on PATH")
        ),
        Policy(),
        {("versions.nvcc", FAIL, NODE)},
    ),
    (
        "nvcc not installed, not required",
        with_tools(healthy_node(), nvcc_version=NOT_SUPPORTED),
        Policy(require_nvcc=False),
        set(),
    ),
    (
        "nvcc not measured",
        with_tools(healthy_node(), nvcc_version=NOT_MEASURED),
        Policy(),
        {("versions.nvcc", UNKNOWN, NODE)},
    ),
    ("nvcc pin holds", healthy_node(), Policy(nvcc_version="12.4"), set()),
    (
        "nvcc pin differs",
        healthy_node(),
        Policy(nvcc_version="12.6"),
        {("versions.nvcc", FAIL, NODE)},
    ),
    (
        "nvcc newer than driver",
        with_tools(healthy_node(), nvcc_version="12.6.20"),
        Policy(),
        {("versions.nvcc_driver", FAIL, NODE)},
    ),
    ("cuDNN pin holds", healthy_node(), Policy(cudnn_version="9.1"), set()),
    (
        "cuDNN pin differs",
        healthy_node(),
        Policy(cudnn_version="8.9"),
        {("versions.cudnn", FAIL, NODE)},
    ),
    (
        "cuDNN not installed",
        with_tools(healthy_node(), cudnn_version=NOT_SUPPORTED),
        Policy(),
        {("versions.cudnn", FAIL, NODE)},
    ),
    (
        "cuDNN built for CUDA 11",
        with_tools(healthy_node(), cudnn_cuda_major=11),
        Policy(),
        {("versions.cudnn_cuda", FAIL, NODE)},
    ),
    (
        "cuDNN CUDA major unknown",
        with_tools(healthy_node(), cudnn_cuda_major=NOT_MEASURED),
        Policy(),
        {("versions.cudnn_cuda", UNKNOWN, NODE)},
    ),
    (
        "VBIOS differs on two GPUs",
        with_gpu(
            with_gpu(healthy_node(), 2, vbios_version="96.00.74.00.11"),
            5,
            vbios_version="96.00.74.00.11",
        ),
        Policy(),
        {("versions.vbios", WARN, NODE)},
    ),
]


@pytest.mark.parametrize(
    ("facts", "policy", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_versions_table(
    facts: NodeFacts, policy: Policy, expected: set[tuple[str, Severity, int | None]]
) -> None:
    assert not_passed(judge(facts, policy), "versions.") == expected


def test_driver_mismatch_is_a_fail_with_the_fix() -> None:
    facts = healthy_node(
        nvml_status=NvmlStatus.DRIVER_MISMATCH,
        nvml_detail="Failed to initialize NVML: Driver/library version mismatch",
        driver_version="550.127.05",
        kernel_module_version="550.90.07",
        gpus=(),
    )
    result = judge(facts)
    (finding,) = only(result, "versions.kernel_module")
    assert finding.severity is Severity.FAIL
    assert finding.message == (
        "Driver/library version mismatch: kernel module 550.90.07, user space 550.127.05: "
        "reboot or reload the nvidia kernel modules"
    )
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert "versions.kernel_module" in result.summary


def test_nvcc_newer_than_driver_message() -> None:
    (finding,) = only(
        judge(with_tools(healthy_node(), nvcc_version="12.6.20")), "versions.nvcc_driver"
    )
    assert finding.message.startswith(
        "nvcc 12.6.20 is newer than the CUDA 12.4 the driver supports"
    )


def test_nvcc_pin_is_by_component_not_by_characters() -> None:
    facts = with_tools(
        healthy_node(cuda_driver_version="12.40"),
        nvcc_version="12.40.1",
        cudnn_cuda_major=12,
        nvidia_smi_cuda_version="12.40",
    )
    result = judge(facts, Policy(nvcc_version="12.4"))
    assert not_passed(result, "versions.") == {("versions.nvcc", FAIL, None)}


def test_vbios_message_names_the_odd_gpus() -> None:
    facts = with_gpu(
        with_gpu(healthy_node(), 2, vbios_version="96.00.74.00.11"),
        5,
        vbios_version="96.00.74.00.11",
    )
    (finding,) = only(judge(facts), "versions.vbios")
    assert finding.message.startswith(
        "GPUs 2, 5 run VBIOS 96.00.74.00.11 while the other 6 NVIDIA H100 80GB HBM3 GPUs "
        "run 96.00.99.00.01"
    )


def test_cudnn_cuda_unknown_does_not_block() -> None:
    result = judge(with_tools(healthy_node(), cudnn_cuda_major=NOT_MEASURED))
    assert result.verdict is Verdict.CERTIFIED


def test_nvidia_smi_disagreement_names_both_versions() -> None:
    facts = with_tools(healthy_node(), nvidia_smi_driver_version="535.183.01")
    (finding,) = only(judge(facts, Policy(driver_version="550.90.07")), "versions.driver")
    assert finding.severity is FAIL
    assert finding.observed == "NVML 550.90.07, nvidia-smi 535.183.01"
    assert finding.message.startswith(
        "NVML reports driver 550.90.07 but nvidia-smi prints 535.183.01"
    )


_NO_LIBRARY = "libnvidia-ml.so.1 not found: no NVIDIA user-space driver on this machine"


@pytest.mark.parametrize(
    "status",
    [
        NvmlStatus.LIBRARY_NOT_FOUND,
        NvmlStatus.DRIVER_NOT_LOADED,
        NvmlStatus.DRIVER_MISMATCH,
        NvmlStatus.ERROR,
    ],
)
def test_versions_say_one_short_thing_when_nvml_failed(status: NvmlStatus) -> None:
    missing = Unavailable(Reason.NOT_MEASURED, _NO_LIBRARY)
    facts = healthy_node(
        nvml_status=status,
        nvml_detail=_NO_LIBRARY,
        driver_version=missing,
        cuda_driver_version=missing,
        gpus=(),
    )
    result = judge(facts, Policy(driver_branch="550"))
    messages = {}
    for check in ("versions.driver", "versions.cuda", "versions.nvcc_driver"):
        (finding,) = only(result, check)
        assert finding.severity is UNKNOWN
        assert _NO_LIBRARY not in finding.message
        messages[check] = (finding.message, finding.required)
    assert messages == {
        "versions.driver": ("The driver version was not read: the driver did not answer", True),
        "versions.cuda": (
            "The CUDA version the driver supports was not read: the driver did not answer",
            False,
        ),
        "versions.nvcc_driver": (
            "nvcc 12.4.131 cannot be compared with the driver's CUDA version, which was not "
            "read: the driver did not answer",
            True,
        ),
    }


def test_a_version_nvml_could_not_give_says_why_without_nesting() -> None:
    facts = healthy_node(driver_version=Unavailable(Reason.ERROR, "nvmlSystemGetDriverVersion (x)"))
    (finding,) = only(judge(facts), "versions.driver")
    assert finding.message == (
        "The driver version was not read: error: nvmlSystemGetDriverVersion (x)"
    )
