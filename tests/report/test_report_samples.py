"""Sample reports for the report tests (built from model objects); checks of the shared helpers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from validator.model import (
    NOT_SUPPORTED,
    Action,
    BurnResult,
    BurnStatus,
    ErrorCounters,
    Finding,
    FleetSummary,
    GpuBurn,
    GpuFacts,
    GpuStatus,
    KernelLogFacts,
    NodeFacts,
    NodeResult,
    NvmlStatus,
    Reason,
    Report,
    Severity,
    SkuFleetStats,
    TelemetrySample,
    ToolFacts,
    Unavailable,
    Verdict,
    XidEvent,
)
from validator.report import shared

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
            gpu_uuid=str(gpus[0].uuid),
        ),
        Finding(
            "memory.capacity",
            Severity.PASS,
            "81559 MiB as the SKU expects.",
            observed="81559 MiB",
            expected=">= 81000 MiB",
            gpu_index=1,
            gpu_uuid=str(gpus[1].uuid),
        ),
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
            action=Action.CHECK_COOLING_POWER,
            action_source="gpuready default",
        ),
        Finding(
            "memory.remap",
            Severity.FAIL,
            "Row remap pending: reset the GPU before use." + message_extra,
            observed="remap_pending=yes",
            expected="no",
            gpu_index=1,
            gpu_uuid="GPU-1b2c3d4e-0000-1111-2222-000000000001",
            action=Action.RESET_GPU,
            action_source="gpuready default",
        ),
        Finding(
            "power.limit",
            Severity.UNKNOWN,
            "Power limit not supported by this GPU.",
            observed="n/a (not supported)",
            expected="700 W",
            gpu_index=1,
            action=Action.RERUN,
            action_source="gpuready default",
        ),
        Finding(
            "gpu.count", Severity.PASS, "3 GPUs found, 3 expected.", observed="3", expected="3"
        ),
        Finding(
            "gpu.present",
            Severity.FAIL,
            "GPU 2 has fallen off the bus (Xid 79).",
            gpu_index=2,
            action=Action.REBOOT,
            action_source="NVIDIA Xid catalog: RESTART_BM",
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


TIMEOUT_DETAIL = "worker stopped answering after 30 s"
SCRIPT_DETAIL = " <script>alert('burn')</script>"


def _samples(index: int, *, power: bool = True) -> tuple[TelemetrySample, ...]:
    """Twelve ticks, 5 s apart: power and heat rise, the SM clock settles lower."""
    samples = []
    for tick in range(12):
        ramp = min(tick / 6, 1.0)
        samples.append(
            TelemetrySample(
                t_s=5.0 * tick,
                power_w=round(300.0 + 388.0 * ramp - 6.0 * index, 1)
                if power
                else Unavailable(Reason.NOT_SUPPORTED, "power readings not supported"),
                temperature_gpu_c=45.0 + 37.0 * ramp - index,
                temperature_memory_c=50.0 + 20.0 * ramp,
                sm_clock_mhz=1980 - int(225 * ramp) + 15 * index,
                mem_clock_mhz=2619,
                utilization_pct=100,
                clock_event_reasons=("sw_power_cap",) if ramp == 1.0 and power else (),
            )
        )
    return tuple(samples)


def burn_result(*, simulated: bool = False, timeout_detail: str = TIMEOUT_DETAIL) -> BurnResult:
    """A burn over 3 GPUs: 0 healthy, 1 with mismatches and no power readings, 2 timed out."""
    counters = ErrorCounters(ecc_volatile_corrected=0, ecc_volatile_uncorrected=0)
    return BurnResult(
        backend="cublas",
        dtype="bf16",
        matrix_size=8192,
        duration_s=60.0,
        elapsed_s=61.25,
        memory_fraction=0.9,
        started_at="2025-03-04T10:12:00Z",
        sampler="simulated" if simulated else "nvml",
        simulated=simulated,
        gpus=(
            GpuBurn(
                index=0,
                status=BurnStatus.COMPLETED,
                uuid="GPU-1b2c3d4e-0000-1111-2222-000000000000",
                iterations=5120,
                tflops=712.4,
                tflops_windows=(710.0, 712.4, 713.1),
                reference_max_error=0.0019,
                reference_ok=True,
                digest="9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822c",
                samples=_samples(0),
                counters_before=counters,
                counters_after=counters,
                load_start_s=6.0,
                load_end_s=60.0,
                duty=0.987,
            ),
            GpuBurn(
                index=1,
                status=BurnStatus.COMPLETED,
                uuid="GPU-1b2c3d4e-0000-1111-2222-000000000001",
                iterations=4980,
                tflops=598.7,
                tflops_windows=(601.0, 598.7),
                mismatched_elements=37,
                mismatched_iterations=2,
                reference_max_error=0.0021,
                reference_ok=True,
                digest="1c2d3e4f",
                samples=_samples(1, power=False),
                load_start_s=6.0,
                load_end_s=60.0,
            ),
            GpuBurn(
                index=2,
                status=BurnStatus.TIMEOUT,
                detail=timeout_detail,
                uuid="GPU-1b2c3d4e-0000-1111-2222-000000000002",
                iterations=0,
            ),
        ),
        xid_events_during=(),
    )


def burn_node(
    hostname: str = "gpu-node-03", *, simulated: bool = False, timeout_detail: str = TIMEOUT_DETAIL
) -> NodeResult:
    """A node that ran the burn-in: GPU 1 computed wrong results, GPU 2 timed out."""
    gpus = (_gpu(0), _gpu(1), _gpu(2))
    findings = (
        Finding(
            "burn.correctness",
            Severity.FAIL,
            "GPU 1 computed 37 mismatched elements in 2 iterations.",
            observed="37",
            expected="0",
            gpu_index=1,
            action=Action.DRAIN_RMA,
            action_source="gpuready default",
        ),
        Finding(
            "burn.completed",
            Severity.FAIL,
            "GPU 2 burn-in timed out.",
            observed="timeout",
            expected="completed",
            gpu_index=2,
            action=Action.RESET_GPU,
            action_source="gpuready default",
        ),
        Finding("burn.throughput", Severity.PASS, "GPU 0 at 712.4 TFLOPS.", gpu_index=0),
    )
    return NodeResult(
        hostname=hostname,
        verdict=Verdict.NOT_CERTIFIED,
        facts=_facts(
            hostname, gpus, burn=burn_result(simulated=simulated, timeout_detail=timeout_detail)
        ),
        findings=findings,
        sku="h100-sxm5-80gb",
        policy_digest="sha256:3f1a9c",
        summary="2 checks failed: burn.correctness, burn.completed.",
    )


def sample_report(*nodes: NodeResult) -> Report:
    """A report over the given nodes; a healthy and a failing node by default."""
    return Report(
        generated_at="2025-03-04T10:15:00Z",
        tool_version="0.1.0",
        nodes=nodes or (healthy_node(), failing_node()),
    )


REACH_MESSAGE = "ssh: connect to host 10.0.9.9 port 22: Connection timed out"
STDERR_TEXT = "warning: nvidia-smi slow to answer\n<b>agent</b> exited 255\x1b[31m\n"


def unreachable_node(hostname: str = "gpu-node-99") -> NodeResult:
    """A host that could not be reached: no facts, one UNKNOWN finding, stderr kept."""
    return NodeResult(
        hostname=hostname,
        verdict=Verdict.UNKNOWN,
        facts=NodeFacts(hostname=hostname, source="live"),
        findings=(
            Finding("transport.reach", Severity.UNKNOWN, REACH_MESSAGE, action=Action.RERUN),
        ),
        summary=f"could not reach the host: {REACH_MESSAGE}",
        transport="ssh",
        agent_stderr=STDERR_TEXT,
        elapsed_s=30.0,
    )


FLEET_STATS = SkuFleetStats(
    sku="h100-sxm5-80gb", gpus=126, median_tflops=712.4, mad_tflops=6.1, threshold_tflops=662.5
)


def fleet_report(
    hosts: int = 64, *, failing: tuple[int, ...] = (17, 40), unknown: tuple[int, ...] = (5,)
) -> Report:
    """A fleet of ``hosts``: certified ones, with ``failing`` and ``unknown`` positions mixed in."""
    nodes = []
    for position in range(hosts):
        name = f"gpu{position + 1:02d}"
        if position in failing:
            node = failing_node(name)
        elif position in unknown:
            node = unreachable_node(name)
        else:
            node = healthy_node(name)
        nodes.append(dataclasses.replace(node, transport="ssh", elapsed_s=40.0 + position / 4))
    return Report(
        generated_at="2025-03-04T10:15:00Z",
        tool_version="0.1.0",
        nodes=tuple(nodes),
        fleet=FleetSummary(
            hosts=hosts,
            certified=hosts - len(failing) - len(unknown),
            not_certified=len(failing),
            unknown=len(unknown),
            skus=(FLEET_STATS,),
        ),
    )


# ------------------------------------------------------- the shared helpers


def test_sorted_findings_put_blocking_ones_first() -> None:
    order = [f.severity for f in shared.sorted_findings(failing_node().findings)]
    assert order == [
        Severity.FAIL,
        Severity.FAIL,
        Severity.UNKNOWN,
        Severity.WARN,
        Severity.PASS,
        Severity.PASS,
    ]


def test_sorted_findings_keep_judge_order_within_a_severity() -> None:
    fails = [f.check for f in shared.sorted_findings(failing_node().findings)][:2]
    assert fails == ["memory.remap", "gpu.present"]


def test_count_line_reads_like_the_brief() -> None:
    counts = shared.count_checks(failing_node().findings)
    # Six findings of five checks: memory.remap passed on GPU 0 and failed on GPU 1.
    assert counts.line() == "5 checks: 1 passed, 1 warning, 2 failed, 1 unknown"
    assert counts.total == 5


def test_overall_verdict_follows_the_one_rule() -> None:
    assert shared.overall_verdict(sample_report()) is Verdict.NOT_CERTIFIED
    assert shared.overall_verdict(sample_report(healthy_node())) is Verdict.CERTIFIED
    unknown = NodeResult("dark", Verdict.UNKNOWN, NodeFacts("dark", "live"), ())
    # One node that could not be judged keeps the fleet from being certified (exit 1),
    # without calling the whole run "nothing could be judged".
    assert shared.overall_verdict(sample_report(healthy_node(), unknown)) is Verdict.NOT_CERTIFIED
    assert shared.overall_verdict(sample_report(unknown)) is Verdict.UNKNOWN
    assert shared.overall_verdict(Report("t", "v", ())) is Verdict.UNKNOWN


def test_overall_summary_names_hosts_that_failed() -> None:
    summary = shared.overall_summary(sample_report())
    assert summary == "1 of 2 nodes certified; not certified: gpu-node-02."


def test_show_says_why_a_value_is_missing() -> None:
    assert shared.show(NOT_SUPPORTED) == "n/a (not supported)"
    assert shared.show(Unavailable(Reason.GPU_LOST, "Xid 79")) == "n/a (gpu lost: Xid 79)"
    assert shared.show(700.0, "W") == "700 W"
    assert shared.show(45.25) == "45.25"
    assert shared.show(True) == "yes"
    assert shared.show(("a", "b")) == "a, b"
    assert shared.show(None) == "-"


def test_clean_makes_control_characters_visible() -> None:
    assert shared.clean("a\x1b[2Jb\x00") == "a\\x1b[2Jb\\x00"
    assert shared.one_line("two\nlines\tand tab") == "two lines and tab"


def test_burn_stats_from_samples() -> None:
    node = burn_node()
    burn = node.facts.burn
    assert burn is not None
    healthy = shared.burn_stats(burn.gpus[0], node.facts)
    assert healthy.peak_power_w == 688.0
    assert healthy.power_limit_w == 700.0
    assert round(healthy.peak_power_pct, 1) == 98.3  # type: ignore[arg-type]
    assert healthy.peak_temperature_c == 82.0
    assert healthy.min_sm_clock_mhz == 1755
    assert healthy.clock_events == ("sw_power_cap",)
    assert healthy.errors == 0


def test_burn_stats_say_why_figures_are_missing() -> None:
    node = burn_node()
    burn = node.facts.burn
    assert burn is not None
    no_power = shared.burn_stats(burn.gpus[1], node.facts)
    assert no_power.peak_power_w == Unavailable(
        Reason.NOT_SUPPORTED, "power readings not supported"
    )
    assert no_power.peak_power_pct == no_power.peak_power_w
    assert no_power.peak_temperature_c == 81.0
    assert no_power.errors == 37
    timed_out = shared.burn_stats(burn.gpus[2], node.facts)
    assert timed_out.peak_power_w == shared.NO_TELEMETRY
    assert timed_out.min_sm_clock_mhz == shared.NO_TELEMETRY
    assert timed_out.clock_events == shared.NO_TELEMETRY
    assert shared.burn_failed(burn.gpus[0]) is False
    assert shared.burn_failed(burn.gpus[1]) is True
    assert shared.burn_failed(burn.gpus[2]) is True


def test_telemetry_skips_unavailable_points() -> None:
    burn = burn_result()
    assert shared.telemetry(burn.gpus[1].samples, "power_w") == []
    points = shared.telemetry(burn.gpus[0].samples, "sm_clock_mhz")
    assert len(points) == 12
    assert points[0] == (0.0, 1980.0)
    assert points[-1] == (55.0, 1755.0)


def test_shorten_marks_the_cut() -> None:
    assert shared.shorten("short", 10) == "short"
    assert shared.shorten("a much longer line", 8) == "a much\u2026"
    assert len(shared.shorten("x" * 50, 20)) == 20


def test_tflops_text_keeps_small_figures_visible() -> None:
    assert shared.tflops_text(712.44) == "712.4"
    assert shared.tflops_text(10.0) == "10.0"
    assert shared.tflops_text(0.0234) == "0.0234"
    assert shared.tflops_text(3.14159) == "3.14"


def test_reading_order_puts_failing_nodes_first_in_a_fleet() -> None:
    report = fleet_report(8, failing=(3, 6), unknown=(1,))
    order = [node.hostname for node in shared.reading_order(report)]
    assert order == ["gpu04", "gpu07", "gpu02", "gpu01", "gpu03", "gpu05", "gpu06", "gpu08"]
    # Without a fleet summary the report's own order is kept.
    plain = dataclasses.replace(report, fleet=None)
    assert [n.hostname for n in shared.reading_order(plain)] == [f"gpu0{i}" for i in range(1, 9)]


def test_fleet_line_reads_like_the_brief() -> None:
    report = fleet_report(64, failing=(17, 40), unknown=(5,))
    assert report.fleet is not None
    assert shared.fleet_line(report.fleet) == (
        "fleet: 64 hosts, 61 certified, 2 not certified, 1 unknown"
    )
    interrupted = dataclasses.replace(report.fleet, interrupted=True)
    assert shared.fleet_line(interrupted).endswith("(interrupted: not every host finished)")
    assert shared.sku_fleet_line(FLEET_STATS) == (
        "h100-sxm5-80gb: median 712.4 TFLOPS over 126 GPUs, MAD 6.1, below 662.5 (93%) fails"
    )


def test_has_facts_tells_an_unreachable_host() -> None:
    assert shared.has_facts(unreachable_node().facts) is False
    assert shared.has_facts(healthy_node().facts) is True
    no_driver = NodeFacts(hostname="x", source="live", nvml_status=NvmlStatus.DRIVER_NOT_LOADED)
    assert shared.has_facts(no_driver) is True  # something was said: show it


def test_elapsed_text() -> None:
    assert shared.elapsed_text(12.345) == "12.3 s"
    assert shared.elapsed_text(0.0) == "-"
    assert shared.elapsed_text(0.04) == "<0.1 s"  # measured, just quick: not "0.0 s"


# ------------------------------------------------------------------ fleets at scale

SCALE_SCENARIO = "healthy-8x-h100-sxm"


def scenario_node(directory: Path, scenario: str = SCALE_SCENARIO) -> NodeResult:
    """One node certified from a simulated scenario (a 1 s burn), read back from its report.

    The real thing, charts and all: what a fleet report's healthy node weighs.
    """
    from validator.cli.main import main
    from validator.report.json_report import load_report_json

    out = directory / "scenario-report"
    argv = ["certify", "--simulate", scenario, "--burn", "1s", "--db", str(directory / "h.db")]
    code = main([*argv, "--report-dir", str(out)])
    assert code in (0, 1), code
    (node,) = load_report_json((out / "report.json").read_text()).nodes
    return node


def scale_report(node: NodeResult, count: int, failing: dict[int, NodeResult]) -> Report:
    """``count`` copies of ``node`` (gpu00001...) with ``failing[i]`` in place of copy ``i``."""
    nodes = tuple(
        dataclasses.replace(failing.get(i, node), hostname=f"gpu{i:05d}")
        for i in range(1, count + 1)
    )
    verdicts = [n.verdict for n in nodes]
    fleet = FleetSummary(
        hosts=count,
        certified=verdicts.count(Verdict.CERTIFIED),
        not_certified=verdicts.count(Verdict.NOT_CERTIFIED),
        unknown=verdicts.count(Verdict.UNKNOWN),
        skus=(),
        interrupted=False,
    )
    return Report(
        generated_at="2025-03-04T10:15:00Z", tool_version="0.1.0", nodes=nodes, fleet=fleet
    )
