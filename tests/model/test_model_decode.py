"""from_dict on a whole host's facts: what it accepts, and where it says a value is wrong.

The decoder takes JSON's own scalars as they are and writes a value's path out only
once something in it is wrong (issue 16: decoding is most of what the controller
spends per host). These pin what that must not change: the same objects back, and
each refusal naming the exact place, however deep.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import sys
import typing
from typing import Any

import pytest

import validator.model
from tests.collecting import collect_simulated
from validator.model import GpuBurn, NodeFacts, SchemaError, from_dict, to_dict

SCENARIOS = (
    "healthy-8x-h100-sxm",
    "gpu-fallen-off-bus",
    "row-remap-pending",
    "no-gpu-driver",
    "nvswitch-sxid-fatal",
)


@pytest.fixture(scope="module")
def healthy() -> dict[str, Any]:
    data: dict[str, Any] = to_dict(collect_simulated("healthy-8x-h100-sxm"))
    return data


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_facts_come_back_equal_through_json(scenario: str) -> None:
    facts = collect_simulated(scenario)
    assert from_dict(NodeFacts, json.loads(json.dumps(to_dict(facts)))) == facts


# Every dataclass the model exports, each defined in one module of validator/model/.
MODEL_DATACLASSES = [
    cls
    for cls in (getattr(validator.model, name) for name in validator.model.__all__)
    if isinstance(cls, type) and dataclasses.is_dataclass(cls)
]


@pytest.mark.parametrize("cls", MODEL_DATACLASSES, ids=lambda cls: cls.__name__)
def test_each_class_finds_its_field_types_in_its_own_module(cls: type) -> None:
    """The decoder reads a class's type hints in the module that defines it, at run time.

    A type a field names that its module does not import fails only when decoding.
    """
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    assert list(hints) == [field.name for field in dataclasses.fields(cls)]


def _refusal(data: dict[str, Any]) -> str:
    with pytest.raises(SchemaError) as raised:
        from_dict(NodeFacts, data)
    return str(raised.value)


def _gpu(data: dict[str, Any], index: int) -> dict[str, Any]:
    gpu: dict[str, Any] = data["gpus"][index]
    return gpu


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("memory_total_mib", "lots", "an integer"),
        ("memory_total_mib", True, "an integer"),  # a bool is an int in Python, never here
        ("temperature_gpu_c", math.nan, "finite"),
        ("temperature_gpu_c", math.inf, "finite"),
        ("power_draw_w", "72 W", "number"),
        ("ecc_mode_current", 1, "true or false"),
        ("uuid", 7, "a string"),
        ("status", "melted", "one of"),
    ],
)
def test_a_wrong_value_deep_in_the_facts_is_named_at_its_place(
    healthy: dict[str, Any], field: str, value: object, words: str
) -> None:
    data = copy.deepcopy(healthy)
    _gpu(data, 3)[field] = value
    message = _refusal(data)
    assert f"NodeFacts.gpus[3].{field}" in message
    assert words in message


def test_a_wrong_item_in_a_list_is_named_by_its_index(healthy: dict[str, Any]) -> None:
    data = copy.deepcopy(healthy)
    links = _gpu(data, 5)["nvlinks"]
    assert len(links) > 2
    links[2] = "up"
    assert "NodeFacts.gpus[5].nvlinks[2]" in _refusal(data)


def test_an_unknown_field_deep_in_the_facts_names_it_and_the_closest(
    healthy: dict[str, Any],
) -> None:
    data = copy.deepcopy(healthy)
    _gpu(data, 1)["memory_total_mb"] = 81559
    message = _refusal(data)
    assert "NodeFacts.gpus[1].memory_total_mb" in message
    assert "memory_total_mib" in message


def test_a_missing_field_deep_in_the_facts_is_named(healthy: dict[str, Any]) -> None:
    data = copy.deepcopy(healthy)
    del _gpu(data, 6)["index"]
    assert "NodeFacts.gpus[6].index" in _refusal(data)


def test_the_first_wrong_value_is_the_one_named(healthy: dict[str, Any]) -> None:
    data = copy.deepcopy(healthy)
    _gpu(data, 2)["memory_used_mib"] = "x"
    _gpu(data, 4)["memory_used_mib"] = "y"
    message = _refusal(data)
    assert "NodeFacts.gpus[2].memory_used_mib" in message
    assert "gpus[4]" not in message


def test_an_int_where_a_float_is_declared_is_taken_as_a_float(healthy: dict[str, Any]) -> None:
    data = copy.deepcopy(healthy)
    _gpu(data, 0)["power_draw_w"] = 72
    value = from_dict(NodeFacts, data).gpus[0].power_draw_w
    assert value == 72.0
    assert type(value) is float


# The kinds a host holds by the hundred or thousand (a default burn: 2,400 samples).
MANY_PER_HOST = ("TelemetrySample", "NvLinkErrorCounts", "NvLinkState", "Bandwidth", "Finding")


@pytest.mark.parametrize("name", MANY_PER_HOST)
def test_the_many_small_objects_of_a_host_keep_no_dict_each(name: str) -> None:
    """Slots, not a per-object dict: the controller holds every host's until its report."""
    from validator import model
    from validator.judge import judge_node
    from validator.judge.policy import Policy
    from validator.node.burnin.burn_config import BurnConfig

    facts = collect_simulated("healthy-8x-h100-sxm", burn=BurnConfig(duration_s=1.0))
    found: list[object] = []

    def walk(value: object) -> None:
        if type(value).__name__ == name:
            found.append(value)
        if hasattr(value, "__dataclass_fields__"):
            for field_name in value.__dataclass_fields__:  # type: ignore[attr-defined]
                walk(getattr(value, field_name))
        elif isinstance(value, tuple):
            for item in value:
                walk(item)

    walk(facts)
    walk(judge_node(facts, Policy()).findings)
    assert found, f"no {name} in a healthy host's facts or findings"
    one = found[0]
    # Python 3.9 has no dataclass slots (validator.model keeps the dict there).
    assert hasattr(one, "__dict__") is (sys.version_info < (3, 10))
    assert dataclasses.replace(one) == one  # frozen and comparable as before
    assert type(one) is getattr(model, name)


def _burn_with(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {"index": 0, "status": "completed", "samples": samples}


def _sample(t_s: float, **readings: object) -> dict[str, Any]:
    return {"t_s": t_s, **readings}


def test_readings_a_burn_repeats_are_kept_once() -> None:
    """A default burn's 2,400 samples repeat their clocks, temperatures and reasons."""
    # As json.loads gives them: every value its own object, equal ones too.
    text = json.dumps(
        _burn_with(
            [
                _sample(
                    t_s=0.5 * i,
                    power_w=690.0 + i / 7,
                    temperature_gpu_c=54.0,
                    sm_clock_mhz=1815,
                    clock_event_reasons=["sw_power_cap"],
                )
                for i in range(2, 6)
            ]
        )
    )
    samples = [from_dict(GpuBurn, json.loads(text)).samples for _ in range(2)]
    first, *others = [s for run in samples for s in run]
    for other in others:
        assert other.temperature_gpu_c is first.temperature_gpu_c
        assert other.sm_clock_mhz is first.sm_clock_mhz
        assert other.clock_event_reasons is first.clock_event_reasons
    assert first.clock_event_reasons == ("sw_power_cap",)
    # What differs at every tick stays each sample's own.
    assert [s.power_w for s in samples[0]] == [690.0 + i / 7 for i in range(2, 6)]


def test_kept_readings_keep_their_type_and_sign() -> None:
    samples = from_dict(
        GpuBurn,
        json.loads(
            json.dumps(
                _burn_with(
                    [
                        _sample(1.0, utilization_pct=1, power_w=1.0, temperature_gpu_c=0.0),
                        _sample(-0.0, utilization_pct=2, power_w=1, temperature_gpu_c=-0.0),
                        _sample(2.0, clock_event_reasons=[]),
                    ]
                )
            )
        ),
    ).samples
    assert type(samples[0].utilization_pct) is int
    assert type(samples[0].power_w) is float
    assert type(samples[1].power_w) is float  # an int where a float is declared
    assert math.copysign(1.0, samples[1].temperature_gpu_c) == -1.0  # type: ignore[arg-type]
    assert math.copysign(1.0, samples[0].temperature_gpu_c) == 1.0  # type: ignore[arg-type]
    assert math.copysign(1.0, samples[1].t_s) == -1.0
    assert samples[2].clock_event_reasons == ()


def test_the_kept_values_are_bounded_however_many_distinct_ones_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from validator.model import decoding

    # Filled here, not for the tests after (the times are whole-number floats).
    monkeypatch.setattr(decoding, "_SHARED_INTS", {})
    monkeypatch.setattr(decoding, "_SHARED_FLOATS", {})
    distinct = [
        _sample(float(i), sm_clock_mhz=100_000 + i) for i in range(decoding._SHARED_MOST + 50)
    ]
    samples = from_dict(GpuBurn, json.loads(json.dumps(_burn_with(distinct)))).samples
    assert len(decoding._SHARED_INTS) == decoding._SHARED_MOST  # filled to the bound, no further
    assert [s.sm_clock_mhz for s in samples] == [100_000 + i for i in range(len(distinct))]


@pytest.mark.parametrize("reasons", [["sw_power_cap", 3], "sw_power_cap", [None]])
def test_a_wrong_reason_list_is_named_at_its_place(reasons: object) -> None:
    data = _burn_with([_sample(0.0), _sample(1.0, clock_event_reasons=reasons)])
    with pytest.raises(SchemaError) as raised:
        from_dict(GpuBurn, data)
    assert "GpuBurn.samples[1].clock_event_reasons" in str(raised.value)
