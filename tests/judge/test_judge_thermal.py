"""Thermal checks: idle margin to slowdown (absolute and T.Limit forms), throttle reasons."""

from __future__ import annotations

import pytest

from tests.judge.test_judge_healthy import (
    NOT_SUPPORTED,
    healthy_node,
    judge,
    not_passed,
    only,
    with_gpu,
)
from validator.judge import Policy, Thresholds
from validator.model import NodeFacts, Reason, Severity, Unavailable, Verdict

FAIL, UNKNOWN, WARN = Severity.FAIL, Severity.UNKNOWN, Severity.WARN

ABSOLUTE = {
    "tlimit_margin_c": NOT_SUPPORTED,
    "tlimit_slowdown_c": NOT_SUPPORTED,
    "temp_slowdown_c": 87.0,
}

CASES = [
    (
        "T.Limit margin 5 C",
        with_gpu(healthy_node(), 1, tlimit_margin_c=5.0),
        Policy(),
        {("thermal.margin", WARN, 1)},
    ),
    ("T.Limit margin 8+2 C", with_gpu(healthy_node(), 1, tlimit_margin_c=8.0), Policy(), set()),
    (
        "healthy margin under a strict policy",
        healthy_node(),
        Policy(thresholds=Thresholds(thermal_margin_min_c=60)),
        {("thermal.margin", WARN, i) for i in range(8)},
    ),
    (
        "absolute form, hot",
        with_gpu(healthy_node(), 2, temperature_gpu_c=80.0, **ABSOLUTE),
        Policy(),
        {("thermal.margin", WARN, 2)},
    ),
    (
        "absolute form, cool",
        with_gpu(healthy_node(), 2, temperature_gpu_c=40.0, **ABSOLUTE),
        Policy(),
        set(),
    ),
    (
        "no thresholds reported",
        with_gpu(healthy_node(), 2, tlimit_margin_c=NOT_SUPPORTED),
        Policy(),
        {("thermal.margin", UNKNOWN, 2)},
    ),
    (
        "hw slowdown",
        with_gpu(healthy_node(), 4, clock_event_reasons=("hw_slowdown",)),
        Policy(),
        {("thermal.throttle", FAIL, 4)},
    ),
    (
        "hw thermal slowdown",
        with_gpu(healthy_node(), 4, clock_event_reasons=("hw_slowdown", "hw_thermal_slowdown")),
        Policy(),
        {("thermal.throttle", FAIL, 4)},
    ),
    (
        "power brake",
        with_gpu(healthy_node(), 4, clock_event_reasons=("hw_power_brake_slowdown",)),
        Policy(),
        {("thermal.throttle", FAIL, 4)},
    ),
    (
        "sw thermal",
        with_gpu(healthy_node(), 4, clock_event_reasons=("sw_thermal_slowdown",)),
        Policy(),
        {("thermal.throttle", FAIL, 4)},
    ),
    (
        "sw power cap is normal",
        with_gpu(healthy_node(), 4, clock_event_reasons=("sw_power_cap",)),
        Policy(),
        set(),
    ),
    (
        "idle with app clocks is normal",
        with_gpu(
            healthy_node(), 4, clock_event_reasons=("gpu_idle", "applications_clocks_setting")
        ),
        Policy(),
        set(),
    ),
    ("no reasons", with_gpu(healthy_node(), 4, clock_event_reasons=()), Policy(), set()),
    (
        "unknown bit",
        with_gpu(healthy_node(), 4, clock_event_reasons=("unknown_0x200",)),
        Policy(),
        {("thermal.throttle", WARN, 4)},
    ),
    (
        "reasons unreadable",
        with_gpu(
            healthy_node(), 4, clock_event_reasons=Unavailable(Reason.ERROR, "NVML_ERROR_UNKNOWN")
        ),
        Policy(),
        {("thermal.throttle", UNKNOWN, 4)},
    ),
]


@pytest.mark.parametrize(
    ("facts", "policy", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_thermal_table(
    facts: NodeFacts, policy: Policy, expected: set[tuple[str, Severity, int | None]]
) -> None:
    assert not_passed(judge(facts, policy), "thermal.") == expected


def test_tlimit_margin_is_margin_minus_slowdown_offset() -> None:
    (finding,) = [f for f in only(judge(healthy_node()), "thermal.margin") if f.gpu_index == 0]
    assert finding.observed == "59 C (T.Limit margin 57 C, slowdown at -2 C)"


def test_absolute_margin_message() -> None:
    facts = with_gpu(healthy_node(), 2, temperature_gpu_c=80.0, **ABSOLUTE)
    (finding,) = [f for f in only(judge(facts), "thermal.margin") if f.gpu_index == 2]
    assert finding.message.startswith(
        "GPU 2 is only 7 C below its slowdown point at idle (80 C now, slowdown at 87 C)"
    )


def test_unknown_margin_blocks_like_unreadable_throttle() -> None:
    # Fail closed: a GPU whose thermal headroom cannot be read is not certified on its word.
    margin = judge(with_gpu(healthy_node(), 2, tlimit_margin_c=NOT_SUPPORTED))
    assert margin.verdict is Verdict.NOT_CERTIFIED
    assert "could not be judged: thermal.margin (GPU 2)" in margin.summary
    throttle = judge(with_gpu(healthy_node(), 2, clock_event_reasons=NOT_SUPPORTED))
    assert throttle.verdict is Verdict.NOT_CERTIFIED
    assert "could not be judged: thermal.throttle (GPU 2)" in throttle.summary


# What the collector's plausibility pass makes of `GPU Current Temp : -273 C`.
IMPLAUSIBLE_TEMP = Unavailable(
    Reason.ERROR, "implausible value -273.0 for temperature_gpu_c, outside -40..150 C"
)


@pytest.mark.parametrize(
    "form",
    [{}, ABSOLUTE],
    ids=["T.Limit form", "absolute form"],
)
@pytest.mark.parametrize(
    "temperature",
    [IMPLAUSIBLE_TEMP, Unavailable(Reason.NOT_MEASURED), NOT_SUPPORTED],
    ids=["implausible", "not measured", "not supported"],
)
def test_unreadable_temperature_is_a_required_unknown(
    form: dict[str, object], temperature: Unavailable
) -> None:
    result = judge(with_gpu(healthy_node(), 3, temperature_gpu_c=temperature, **form))
    (finding,) = [f for f in only(result, "thermal.margin") if f.gpu_index == 3]
    assert finding.severity is UNKNOWN
    assert finding.required
    assert finding.message.startswith(
        "GPU 3's temperature could not be read, so its thermal headroom is unknown"
    )
    assert result.verdict is Verdict.NOT_CERTIFIED
    # An implausible reading is also inventory.readings_plausible's: listed before it.
    assert "could not be judged: " in result.summary
    assert "thermal.margin (GPU 3)" in result.summary


def test_implausible_temperature_names_the_value() -> None:
    facts = with_gpu(healthy_node(), 3, temperature_gpu_c=IMPLAUSIBLE_TEMP, **ABSOLUTE)
    (finding,) = [f for f in only(judge(facts), "thermal.margin") if f.gpu_index == 3]
    assert "implausible value -273.0 for temperature_gpu_c" in finding.message


def test_no_threshold_message_says_what_is_missing() -> None:
    facts = with_gpu(healthy_node(), 2, tlimit_margin_c=NOT_SUPPORTED)
    (finding,) = [f for f in only(judge(facts), "thermal.margin") if f.gpu_index == 2]
    assert finding.required
    assert finding.message == (
        "GPU 2 reported neither a slowdown temperature nor a T.Limit margin and offset, so "
        "its thermal headroom is unknown: slowdown temperature not supported; T.Limit "
        "margin not supported"
    )


def test_absolute_form_still_judged_without_tlimit() -> None:
    # An A10 / A100 reports N/A for T.Limit: its absolute slowdown point is a sound basis.
    facts = with_gpu(healthy_node(), 2, temperature_gpu_c=33.0, **ABSOLUTE)
    (finding,) = [f for f in only(judge(facts), "thermal.margin") if f.gpu_index == 2]
    assert finding.severity is Severity.PASS
    assert finding.observed == "54 C (33 C now, slowdown at 87 C)"


def test_throttle_message_names_the_reason() -> None:
    facts = with_gpu(healthy_node(), 4, clock_event_reasons=("gpu_idle", "hw_thermal_slowdown"))
    (finding,) = [f for f in only(judge(facts), "thermal.throttle") if f.gpu_index == 4]
    assert finding.message.startswith("GPU 4 is being slowed down (hw_thermal_slowdown)")
    assert finding.observed == "gpu_idle, hw_thermal_slowdown"
