"""Sample reports for the report tests (built from model objects); checks of the shared helpers."""

from __future__ import annotations

from validator.model import (
    NOT_SUPPORTED,
    Finding,
    GpuFacts,
    GpuStatus,
    KernelLogFacts,
    NodeFacts,
    NodeResult,
    NvmlStatus,
    Reason,
    Report,
    Severity,
    ToolFacts,
    Unavailable,
    Verdict,
    XidEvent,
)
from validator.report import common

XSS_HOST = "<script>document.title='pwned'</script>"


def _gpu(index: int, **changes: object) -> GpuFacts:
    base: dict[str, object] = {
        "index": index,
        "uuid": f"GPU-1b2c3d4e-0000-1111-2222-00000000000{index}",
        "serial": f"165232300{index:04d}",
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "vbios_version": "96.00.74.00.0D",
        "memory_total_mib": 81559,
        "memory_used_mib": 0,
        "ecc_mode_current": True,
        "temperature_gpu_c": 31.0 + index,
        "temperature_memory_c": 40.0,
        "power_draw_w": 71.5,
        "power_limit_enforced_w": 700.0,
        "power_limit_default_w": 700.0,
        "pcie_gen_current": 5,
        "pcie_gen_max": 5,
        "pcie_width_current": 16,
        "pcie_width_max": 16,
        "persistence_mode": True,
        "clock_event_reasons": ("gpu_idle",),
    }
    base.update(changes)
    return GpuFacts(**base)  # type: ignore[arg-type]


def _facts(hostname: str, gpus: tuple[GpuFacts, ...], **changes: object) -> NodeFacts:
    base: dict[str, object] = {
        "hostname": hostname,
        "source": "simulate",
        "source_detail": "healthy-h100",
        "collected_at": "2025-03-04T10:11:12Z",
        "os_name": "Ubuntu 22.04.4 LTS",
        "kernel": "5.15.0-105-generic",
        "nvml_status": NvmlStatus.OK,
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "kernel_module_version": "550.54.15",
        "pci_gpu_count": len(gpus),
        "pci_nvswitch_count": 0,
        "gpus": gpus,
        "tools": ToolFacts(
            nvidia_smi_driver_version="550.54.15",
            nvidia_smi_cuda_version="12.4",
            nvcc_version="12.4.131",
            nvcc_path="/usr/local/cuda/bin/nvcc",
            cudnn_version="9.1.0",
            cudnn_source="/usr/include/cudnn_version.h",
            cudnn_cuda_major=12,
        ),
        "kernel_log": KernelLogFacts(source="dmesg", window_hours=24.0, events=()),
    }
    base.update(changes)
    return NodeFacts(**base)  # type: ignore[arg-type]


def healthy_node(hostname: str = "gpu-node-01") -> NodeResult:
    """A certified node with two healthy GPUs and only passing findings."""
    gpus = (_gpu(0), _gpu(1))
    findings = (
        Finding(
            "driver.version",
            Severity.PASS,
            "Driver 550.54.15 matches the pin.",
            observed="550.54.15",
            expected="550.54.15",
        ),
        Finding(
            "memory.capacity",
            Severity.PASS,
            "81559 MiB as the SKU expects.",
            observed="81559 MiB",
            expected=">= 81000 MiB",
            gpu_index=0,
            gpu_uuid=gpus[0].uuid,
        ),  # type: ignore[arg-type]
        Finding(
            "memory.capacity",
            Severity.PASS,
            "81559 MiB as the SKU expects.",
            observed="81559 MiB",
            expected=">= 81000 MiB",
            gpu_index=1,
            gpu_uuid=gpus[1].uuid,
        ),  # type: ignore[arg-type]
        Finding(
            "gpu.count", Severity.PASS, "2 GPUs found, 2 expected.", observed="2", expected="2"
        ),
    )
    return NodeResult(
        hostname=hostname,
        verdict=Verdict.CERTIFIED,
        facts=_facts(hostname, gpus),
        findings=findings,
        sku="h100-sxm5-80gb",
        policy_digest="sha256:3f1a9c",
        summary="All 4 checks passed.",
    )


def failing_node(hostname: str = "gpu-node-02", message_extra: str = "") -> NodeResult:
    """A node that is not certified: one FAIL, one UNKNOWN, one WARN, facts not supported."""
    gpus = (
        _gpu(0, temperature_gpu_c=88.0),
        _gpu(
            1,
            serial=NOT_SUPPORTED,
            power_limit_enforced_w=Unavailable(Reason.NOT_SUPPORTED),
            power_limit_default_w=Unavailable(Reason.NOT_SUPPORTED),
            temperature_memory_c=Unavailable(Reason.NOT_SUPPORTED),
            pcie_gen_current=4,
            remap_pending=True,
        ),
        GpuFacts(
            index=2,
            status=GpuStatus.LOST,
            status_detail="GPU has fallen off the bus",
            uuid=Unavailable(Reason.GPU_LOST, "NVML_ERROR_GPU_IS_LOST"),
        ),
    )
    findings = (
        Finding("memory.remap", Severity.PASS, "No rows remapped.", gpu_index=0),
        Finding(
            "thermal.idle",
            Severity.WARN,
            "GPU 0 idles at 88 C, 20 C above the fleet.",
            observed="88 C",
            expected="<= 60 C",
            gpu_index=0,
        ),
        Finding(
            "memory.remap",
            Severity.FAIL,
            "Row remap pending: reset the GPU before use." + message_extra,
            observed="remap_pending=yes",
            expected="no",
            gpu_index=1,
            gpu_uuid="GPU-1b2c3d4e-0000-1111-2222-000000000001",
        ),
        Finding(
            "power.limit",
            Severity.UNKNOWN,
            "Power limit not supported by this GPU.",
            observed="n/a (not supported)",
            expected="700 W",
            gpu_index=1,
        ),
        Finding(
            "gpu.count", Severity.PASS, "3 GPUs found, 3 expected.", observed="3", expected="3"
        ),
        Finding(
            "gpu.present", Severity.FAIL, "GPU 2 has fallen off the bus (Xid 79).", gpu_index=2
        ),
    )
    events = (
        XidEvent(
            xid=79,
            pci_bus_id="0000:1a:00",
            message="GPU has fallen off the bus.",
            timestamp="2025-03-04T09:00:00Z",
            pid=None,
            process=None,
        ),
    )
    return NodeResult(
        hostname=hostname,
        verdict=Verdict.NOT_CERTIFIED,
        facts=_facts(
            hostname,
            gpus,
            cuda_driver_version="12.4",
            kernel=Unavailable(Reason.NO_PERMISSION, "uname denied"),
            tools=ToolFacts(
                nvidia_smi_driver_version="550.54.15",
                nvcc_version=Unavailable(Reason.NOT_MEASURED, "nvcc not on PATH"),
                cudnn_version=NOT_SUPPORTED,
            ),
            kernel_log=KernelLogFacts(source="journalctl", window_hours=24.0, events=events),
        ),
        findings=findings,
        sku="h100-sxm5-80gb",
        policy_digest="sha256:3f1a9c",
        summary="2 checks failed: memory.remap, gpu.present.",
    )


def sample_report(*nodes: NodeResult) -> Report:
    """A report over the given nodes; a healthy and a failing node by default."""
    return Report(
        generated_at="2025-03-04T10:15:00Z",
        tool_version="0.1.0",
        nodes=nodes or (healthy_node(), failing_node()),
    )


# ------------------------------------------------------- the shared helpers


def test_sorted_findings_put_blocking_ones_first() -> None:
    order = [f.severity for f in common.sorted_findings(failing_node().findings)]
    assert order == [
        Severity.FAIL,
        Severity.FAIL,
        Severity.UNKNOWN,
        Severity.WARN,
        Severity.PASS,
        Severity.PASS,
    ]


def test_sorted_findings_keep_judge_order_within_a_severity() -> None:
    fails = [f.check for f in common.sorted_findings(failing_node().findings)][:2]
    assert fails == ["memory.remap", "gpu.present"]


def test_count_line_reads_like_the_brief() -> None:
    counts = common.count_severities(failing_node().findings)
    assert counts.line() == "2 passed, 1 warning, 2 failed, 1 unknown"
    assert counts.total == 6


def test_overall_verdict_is_the_worst_node() -> None:
    assert common.overall_verdict(sample_report()) is Verdict.NOT_CERTIFIED
    assert common.overall_verdict(sample_report(healthy_node())) is Verdict.CERTIFIED
    unknown = NodeResult("dark", Verdict.UNKNOWN, NodeFacts("dark", "live"), ())
    assert common.overall_verdict(sample_report(healthy_node(), unknown)) is Verdict.UNKNOWN
    assert common.overall_verdict(Report("t", "v", ())) is Verdict.UNKNOWN


def test_overall_summary_names_hosts_that_failed() -> None:
    summary = common.overall_summary(sample_report())
    assert summary == "1 of 2 nodes certified; not certified: gpu-node-02."


def test_show_says_why_a_value_is_missing() -> None:
    assert common.show(NOT_SUPPORTED) == "n/a (not supported)"
    assert common.show(Unavailable(Reason.GPU_LOST, "Xid 79")) == "n/a (gpu lost: Xid 79)"
    assert common.show(700.0, "W") == "700 W"
    assert common.show(45.25) == "45.25"
    assert common.show(True) == "yes"
    assert common.show(("a", "b")) == "a, b"
    assert common.show(None) == "-"


def test_clean_makes_control_characters_visible() -> None:
    assert common.clean("a\x1b[2Jb\x00") == "a\\x1b[2Jb\\x00"
    assert common.one_line("two\nlines\tand tab") == "two lines and tab"
