"""Burn-in findings, from tables of burn facts."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.judge.test_judge_healthy import (
    healthy_burn,
    healthy_node,
    judge,
    not_passed,
    with_gpu_burn,
)
from validator.judge import Policy
from validator.model import (
    BurnStatus,
    ErrorCounters,
    GpuStatus,
    NodeFacts,
    Reason,
    Severity,
    TelemetrySample,
    Unavailable,
    Verdict,
    XidEvent,
)

FAIL, WARN, UNKNOWN = Severity.FAIL, Severity.WARN, Severity.UNKNOWN


def samples(**changes: Any) -> tuple[TelemetrySample, ...]:
    base = TelemetrySample(
        t_s=1.0,
        power_w=680.0,
        temperature_gpu_c=70.0,
        temperature_memory_c=78.0,
        sm_clock_mhz=1830,
        mem_clock_mhz=2619,
        utilization_pct=100,
        clock_event_reasons=("sw_power_cap",),
    )
    return tuple(dataclasses.replace(base, t_s=float(t), **changes) for t in range(1, 6))


def with_burn(facts: NodeFacts, **changes: Any) -> NodeFacts:
    assert facts.burn is not None
    return dataclasses.replace(facts, burn=dataclasses.replace(facts.burn, **changes))


H = healthy_node()
UNCORRECTED = ErrorCounters(
    ecc_volatile_corrected=0,
    ecc_volatile_uncorrected=2,
    remapped_rows_correctable=0,
    remapped_rows_uncorrectable=0,
    remap_pending=False,
)
CORRECTED = dataclasses.replace(UNCORRECTED, ecc_volatile_uncorrected=0, ecc_volatile_corrected=5)

CASES: list[tuple[str, NodeFacts, set[tuple[str, Severity, int | None]]]] = [
    ("healthy", H, set()),
    ("no burn", dataclasses.replace(H, burn=None), {("burn.run", UNKNOWN, None)}),
    (
        "could not start",
        with_burn(H, error="cublas: libcublas.so.12 not found", gpus=()),
        {("burn.run", UNKNOWN, None)},
    ),
    (
        "wedged GPU",
        with_gpu_burn(H, 3, status=BurnStatus.TIMEOUT, detail="no answer"),
        {("burn.status", FAIL, 3)},
    ),
    (
        "worker error",
        with_gpu_burn(H, 2, status=BurnStatus.ERROR, detail="cudaMalloc"),
        {("burn.status", FAIL, 2)},
    ),
    (
        "no worker",
        with_gpu_burn(H, 2, status=BurnStatus.NOT_RUN, detail="busy"),
        {("burn.status", UNKNOWN, 2)},
    ),
    (
        "wrong elements",
        with_gpu_burn(H, 5, mismatched_elements=7, mismatched_iterations=1),
        {("burn.correctness", FAIL, 5)},
    ),
    (
        "NaN",
        with_gpu_burn(H, 5, nonfinite_elements=1, mismatched_iterations=1),
        {("burn.correctness", FAIL, 5)},
    ),
    (
        "reference tile off",
        with_gpu_burn(H, 1, reference_ok=False, reference_max_error=0.5),
        {("burn.correctness", FAIL, 1)},
    ),
    (
        "reference not checked",
        with_gpu_burn(H, 1, reference_ok=Unavailable(Reason.ERROR, "NaN")),
        {("burn.correctness", UNKNOWN, 1)},
    ),
    (
        "slow against the datasheet",
        with_gpu_burn(H, 4, tflops=600.0),
        {("burn.speed", FAIL, 4), ("burn.speed_relative", FAIL, 4)},
    ),
    (
        "straggler within the datasheet floor",
        with_gpu_burn(H, 6, tflops=650.0),
        {("burn.speed_relative", FAIL, 6)},
    ),
    (
        "speed not measured",
        with_gpu_burn(H, 6, tflops=Unavailable(Reason.NOT_MEASURED)),
        {("burn.speed", UNKNOWN, 6)},
    ),
    (
        "power never reached",
        with_gpu_burn(H, 0, samples=samples(power_w=400.0)),
        {("burn.power", FAIL, 0)},
    ),
    (
        "power not sampled",
        with_gpu_burn(H, 0, samples=samples(power_w=Unavailable(Reason.NOT_SUPPORTED))),
        {("burn.power", UNKNOWN, 0)},
    ),
    (
        "hardware slowdown",
        with_gpu_burn(
            H, 7, samples=samples(clock_event_reasons=("hw_slowdown", "hw_power_brake_slowdown"))
        ),
        {("burn.throttle", FAIL, 7)},
    ),
    (
        "thermal slowdown",
        with_gpu_burn(H, 7, samples=samples(clock_event_reasons=("sw_thermal_slowdown",))),
        {("burn.throttle", FAIL, 7)},
    ),
    (
        "reasons not sampled",
        with_gpu_burn(H, 7, samples=samples(clock_event_reasons=Unavailable(Reason.NOT_SUPPORTED))),
        {("burn.throttle", UNKNOWN, 7)},
    ),
    # Healthy facts: 30 C now, 57 C from T.Limit, slowdown 2 C past it: slowdown at 89 C.
    (
        "hot under load",
        with_gpu_burn(H, 2, samples=samples(temperature_gpu_c=86.0)),
        {("burn.thermal", FAIL, 2)},
    ),
    (
        "clock sag",
        with_gpu_burn(H, 2, samples=samples(sm_clock_mhz=1200)),
        {("burn.clocks", FAIL, 2)},
    ),
    (
        "new uncorrected ECC",
        with_gpu_burn(H, 3, counters_after=UNCORRECTED),
        {("burn.errors", FAIL, 3)},
    ),
    (
        "new corrected ECC",
        with_gpu_burn(H, 3, counters_after=CORRECTED),
        {("burn.errors", WARN, 3)},
    ),
    (
        "counters unreadable",
        with_gpu_burn(H, 3, counters_before=ErrorCounters(), counters_after=ErrorCounters()),
        {("burn.errors", UNKNOWN, 3)},
    ),
    (
        "hardware Xid during the burn",
        with_burn(
            H,
            xid_events_during=(
                XidEvent(xid=79, pci_bus_id="0000:9a:00", message="GPU has fallen off the bus"),
            ),
        ),
        {("burn.xid", FAIL, None)},
    ),
    (
        "application Xid during the burn",
        with_burn(
            H,
            xid_events_during=(
                XidEvent(xid=13, pci_bus_id="0000:9a:00", message="Graphics SM Warp Exception"),
            ),
        ),
        {("burn.xid", WARN, None)},
    ),
    (
        "kernel log unreadable",
        with_burn(H, xid_events_during=Unavailable(Reason.NO_PERMISSION, "dmesg")),
        {("burn.xid", UNKNOWN, None)},
    ),
    (
        "different product on one GPU",
        with_gpu_burn(H, 6, digest="deadbeefdeadbeef"),
        {("burn.cross_gpu", FAIL, None)},
    ),
    (
        "different products, backend not deterministic",
        with_burn(with_gpu_burn(H, 6, digest="deadbeef"), deterministic=False),
        set(),
    ),
    (
        "CPU stand-in on a real node",
        with_burn(H, backend="numpy", simulated=False),
        {("burn.speed", UNKNOWN, i) for i in range(8)},
    ),
]


@pytest.mark.parametrize(
    ("facts", "expected"), [(f, e) for _, f, e in CASES], ids=[n for n, _, _ in CASES]
)
def test_burn_table(facts: NodeFacts, expected: set[tuple[str, Severity, int | None]]) -> None:
    assert not_passed(judge(facts), "burn.") == expected


def test_healthy_burn_passes_every_check_on_every_gpu() -> None:
    result = judge(H)
    passed = {(f.check, f.gpu_index) for f in result.findings if f.severity is Severity.PASS}
    for check in (
        "burn.correctness",
        "burn.speed",
        "burn.power",
        "burn.throttle",
        "burn.thermal",
        "burn.clocks",
        "burn.errors",
    ):
        assert {(check, i) for i in range(8)} <= passed, check
    assert ("burn.cross_gpu", None) in passed
    assert ("burn.xid", None) in passed
    assert result.verdict is Verdict.CERTIFIED


def test_no_burn_blocks_certification_unless_the_policy_waives_it() -> None:
    facts = dataclasses.replace(H, burn=None)
    assert judge(facts).verdict is Verdict.NOT_CERTIFIED
    assert "burn.run" in judge(facts).summary
    assert judge(facts, Policy(require_burn=False)).verdict is Verdict.CERTIFIED


def test_speed_thresholds_come_from_the_policy() -> None:
    facts = with_gpu_burn(H, 4, tflops=600.0)
    lenient = Policy(
        thresholds=dataclasses.replace(
            Policy().thresholds, burn_speed_ratio=0.5, burn_relative_min=0.8
        )
    )
    assert not_passed(judge(facts, lenient), "burn.") == set()


def test_correctness_message_names_the_gpu_and_the_count() -> None:
    facts = with_gpu_burn(H, 5, mismatched_elements=7, mismatched_iterations=1)
    (finding,) = [
        f for f in judge(facts).findings if f.check == "burn.correctness" and f.gpu_index == 5
    ]
    assert "GPU 5" in finding.message
    assert "7 result elements" in finding.message
    assert finding.gpu_uuid == H.gpus[5].uuid


def test_burn_of_an_unreadable_gpu_is_not_passed() -> None:
    lost = dataclasses.replace(H.gpus[2], status=GpuStatus.LOST)
    facts = dataclasses.replace(H, gpus=(*H.gpus[:2], lost, *H.gpus[3:]))
    passed_on = {
        f.gpu_index
        for f in judge(facts).findings
        if f.check.startswith("burn.") and f.severity is Severity.PASS
    }
    assert 2 not in passed_on


def test_burn_result_fixture_is_consistent() -> None:
    burn = healthy_burn()
    assert [g.index for g in burn.gpus] == list(range(8))
    assert [g.uuid for g in burn.gpus] == [g.uuid for g in H.gpus]


def test_a_burn_that_ran_but_cannot_be_used_is_not_called_unstarted() -> None:
    # An injection never applied: the GPUs burned, so "could not start" would mislead.
    facts = with_burn(
        H, error="--burn-inject flip:1:99999 was never applied (GPU 1 ran 12 batches)"
    )
    (finding,) = [f for f in judge(facts).findings if f.check == "burn.run"]
    assert finding.severity is UNKNOWN
    assert finding.required
    assert finding.message.startswith("The burn-in result cannot be used: --burn-inject")
    assert finding.observed == "not usable"
