"""A healthy 8x H100 node, the base every judge test varies; and that it is certified."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.interconnect_samples import healthy_interconnect
from validator.judge import Policy, judge_node
from validator.model import (
    BurnResult,
    BurnStatus,
    ErrorCounters,
    GpuBurn,
    GpuFacts,
    KernelLogFacts,
    NodeFacts,
    NodeResult,
    NvLinkErrorCounts,
    NvLinkState,
    NvmlStatus,
    Reason,
    Severity,
    TelemetrySample,
    ToolFacts,
    Unavailable,
    Verdict,
)

H100 = "NVIDIA H100 80GB HBM3"
# Bus ids of a real 8x H100 HGX box (captures/nvidia-smi-q/gls-H100SXMx8-565.57.01.txt layout).
BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
NOT_SUPPORTED = Unavailable(Reason.NOT_SUPPORTED)


# H100 SXM: 18 links, no error counted on any (as the healthy scenario's counters).
HEALTHY_LINK_ERRORS = tuple(
    NvLinkErrorCounts(link=i, crc_flit=0, crc_data=0, replay=0, recovery=0) for i in range(18)
)


def healthy_gpu(index: int) -> GpuFacts:
    return GpuFacts(
        index=index,
        uuid=f"GPU-{index:08d}-aaaa-bbbb-cccc-000000000000",
        serial=f"165232300{index:04d}",
        name=H100,
        pci_bus_id=f"00000000:{BUSES[index]}:00.0",
        vbios_version="96.00.99.00.01",
        memory_total_mib=81559,
        memory_used_mib=1,
        ecc_mode_current=True,
        ecc_mode_pending=True,
        ecc_volatile_corrected=0,
        ecc_volatile_uncorrected=0,
        ecc_aggregate_corrected=0,
        ecc_aggregate_uncorrected=0,
        retired_pages_sbe=NOT_SUPPORTED,
        retired_pages_dbe=NOT_SUPPORTED,
        retired_pages_pending=NOT_SUPPORTED,
        remapped_rows_correctable=0,
        remapped_rows_uncorrectable=0,
        remap_pending=False,
        remap_failure=False,
        temperature_gpu_c=30.0,
        temperature_memory_c=36.0,
        temp_shutdown_c=NOT_SUPPORTED,
        temp_slowdown_c=NOT_SUPPORTED,
        tlimit_margin_c=57.0,
        tlimit_shutdown_c=-8.0,
        tlimit_slowdown_c=-2.0,
        tlimit_max_operating_c=0.0,
        power_draw_w=100.9,
        power_limit_enforced_w=700.0,
        power_limit_default_w=700.0,
        power_limit_min_w=200.0,
        power_limit_max_w=700.0,
        clock_event_reasons=("gpu_idle",),
        sm_clock_max_mhz=1980,
        pcie_gen_current=5,
        pcie_gen_max=5,
        pcie_width_current=16,
        pcie_width_max=16,
        persistence_mode=True,
        compute_mode="default",
        mig_mode_current=False,
        mig_mode_pending=False,
        nvlinks=tuple(NvLinkState(link=i, active=True, speed_gb_s=26.562) for i in range(18)),
        nvlink_errors=HEALTHY_LINK_ERRORS,
        pcie_replay_count=0,
        recovery_action="none",
        fabric_state="completed",
        fabric_status="success",
    )


def healthy_gpu_burn(index: int, **changes: Any) -> GpuBurn:
    counters = ErrorCounters(
        ecc_volatile_corrected=0,
        ecc_volatile_uncorrected=0,
        remapped_rows_correctable=0,
        remapped_rows_uncorrectable=0,
        remap_pending=False,
        retired_pages_pending=NOT_SUPPORTED,
        pcie_replay_count=0,
        nvlink_errors=HEALTHY_LINK_ERRORS,
    )
    # As a real trace runs: the sampler's first sample is an idle GPU (345 MHz, a tenth of
    # the power), then the load, then an idle tail after the last batch.
    idle = TelemetrySample(
        t_s=0.0,
        power_w=72.0,
        temperature_gpu_c=34.0,
        temperature_memory_c=40.0,
        sm_clock_mhz=345,
        mem_clock_mhz=2619,
        utilization_pct=0,
        clock_event_reasons=("gpu_idle",),
    )
    samples = (
        idle,
        *(
            TelemetrySample(
                t_s=float(t),
                power_w=680.0,
                temperature_gpu_c=60.0 + t,
                temperature_memory_c=70.0 + t,
                sm_clock_mhz=1830,
                mem_clock_mhz=2619,
                utilization_pct=100,
                clock_event_reasons=("sw_power_cap",),
            )
            for t in range(1, 11)
        ),
        dataclasses.replace(idle, t_s=11.0, temperature_gpu_c=65.0),
    )
    burn = GpuBurn(
        index=index,
        status=BurnStatus.COMPLETED,
        uuid=healthy_gpu(index).uuid,
        iterations=5000,
        tflops=720.0 + index,
        tflops_windows=(720.0 + index,) * 5,
        reference_max_error=0.004,
        reference_ok=True,
        digest="5cb39e4a59863cec",
        samples=samples,
        counters_before=counters,
        counters_after=counters,
        load_start_s=0.8,
        load_end_s=10.6,
        duty=0.991,
    )
    return dataclasses.replace(burn, **changes)


def healthy_burn(**changes: Any) -> BurnResult:
    burn = BurnResult(
        backend="cublas",
        dtype="bf16",
        matrix_size=8192,
        duration_s=300.0,
        elapsed_s=300.4,
        memory_fraction=0.9,
        started_at="2025-03-01T11:55:00+00:00",
        sampler="nvml",
        gpus=tuple(healthy_gpu_burn(i) for i in range(8)),
        xid_events_during=(),
    )
    return dataclasses.replace(burn, **changes)


def with_gpu_burn(facts: NodeFacts, index: int, **changes: Any) -> NodeFacts:
    assert facts.burn is not None
    gpus = [dataclasses.replace(g, **changes) if g.index == index else g for g in facts.burn.gpus]
    return dataclasses.replace(facts, burn=dataclasses.replace(facts.burn, gpus=tuple(gpus)))


def healthy_node(**changes: Any) -> NodeFacts:
    facts = NodeFacts(
        hostname="gpu-node-01",
        source="simulate",
        source_detail="healthy-h100",
        collected_at="2025-03-01T12:00:00+00:00",
        os_name="Ubuntu 22.04.4 LTS",
        kernel="5.15.0-105-generic",
        nvml_status=NvmlStatus.OK,
        driver_version="550.90.07",
        cuda_driver_version="12.4",
        kernel_module_version="550.90.07",
        pci_gpu_count=8,
        pci_nvswitch_count=4,
        gpus=tuple(healthy_gpu(i) for i in range(8)),
        tools=ToolFacts(
            nvidia_smi_driver_version="550.90.07",
            nvidia_smi_cuda_version="12.4",
            nvcc_version="12.4.131",
            nvcc_path="/usr/local/cuda/bin/nvcc",
            cudnn_version="9.1.0",
            cudnn_source="/usr/include/cudnn_version.h",
            cudnn_cuda_major=12,
        ),
        kernel_log=KernelLogFacts(source="dmesg", window_hours=24.0, events=(), faults=()),
        burn=healthy_burn(),
        interconnect=healthy_interconnect(),
    )
    return dataclasses.replace(facts, **changes)


def with_gpu(facts: NodeFacts, index: int, **changes: Any) -> NodeFacts:
    gpus = list(facts.gpus)
    gpus[index] = dataclasses.replace(gpus[index], **changes)
    return dataclasses.replace(facts, gpus=tuple(gpus))


def with_tools(facts: NodeFacts, **changes: Any) -> NodeFacts:
    return dataclasses.replace(facts, tools=dataclasses.replace(facts.tools, **changes))


def judge(facts: NodeFacts, policy: Policy | None = None) -> NodeResult:
    return judge_node(facts, policy if policy is not None else Policy())


def not_passed(result: NodeResult, family: str = "") -> set[tuple[str, Severity, int | None]]:
    """(check, severity, gpu index) of every finding that is not PASS, optionally one family."""
    return {
        (f.check, f.severity, f.gpu_index)
        for f in result.findings
        if f.severity is not Severity.PASS and f.check.startswith(family)
    }


def only(result: NodeResult, check: str) -> list[Any]:
    return [f for f in result.findings if f.check == check]


# ---------------------------------------------------------------- tests


def test_healthy_node_is_certified_with_every_finding_passing() -> None:
    result = judge(healthy_node())
    assert not_passed(result) == set()
    assert result.verdict is Verdict.CERTIFIED
    assert result.sku == "h100-sxm"
    assert result.summary.startswith("8x H100 SXM5 80GB: all ")
    assert len(result.policy_digest) == 64


def test_healthy_node_covers_every_family_and_gpu() -> None:
    result = judge(healthy_node())
    families = {f.check.split(".")[0] for f in result.findings}
    assert families == {
        "inventory",
        "versions",
        "state",
        "memory",
        "power",
        "thermal",
        "pcie",
        "nvlink",
        "errors",
        "burn",
        "interconnect",
    }
    per_gpu = {f.gpu_index for f in result.findings if f.check == "memory.capacity"}
    assert per_gpu == set(range(8))
    # uuids travel with per-GPU findings
    cap3 = [f for f in result.findings if f.check == "memory.capacity" and f.gpu_index == 3]
    assert cap3[0].gpu_uuid == "GPU-00000003-aaaa-bbbb-cccc-000000000000"


def test_findings_are_sorted_fail_unknown_warn_pass_then_check_then_gpu() -> None:
    facts = with_gpu(healthy_node(), 5, power_limit_enforced_w=500.0)
    facts = with_gpu(facts, 2, power_limit_enforced_w=500.0, temperature_gpu_c=90.0)
    facts = with_gpu(facts, 1, tlimit_margin_c=5.0, temperature_gpu_c=82.0)
    facts = with_gpu(facts, 4, clock_event_reasons=NOT_SUPPORTED)
    result = judge(facts)
    head = [(f.severity, f.check, f.gpu_index) for f in result.findings[:4]]
    assert head == [
        (Severity.FAIL, "power.limit", 2),
        (Severity.FAIL, "power.limit", 5),
        (Severity.UNKNOWN, "thermal.throttle", 4),
        (Severity.WARN, "thermal.margin", 1),
    ]
    assert all(f.severity is Severity.PASS for f in result.findings[4:])
    checks = [f.check for f in result.findings[4:]]
    assert checks == sorted(checks)
