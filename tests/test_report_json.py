"""The JSON report: schema-valid, round-trips, and the schema keeps up with the model."""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import typing
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.test_report_samples import XSS_HOST, failing_node, healthy_node, sample_report
from validator import model
from validator.errors import BadInputError, ReportError
from validator.model import Report, Unavailable
from validator.report.json_report import load_report_json, load_schema, render_json


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.fixture
def document() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        render_json(sample_report(healthy_node(), failing_node(XSS_HOST)))
    )
    return doc


def _errors(validator: Draft202012Validator, doc: object) -> list[str]:
    return [error.message for error in validator.iter_errors(doc)]


def test_rendered_report_validates(
    validator: Draft202012Validator, document: dict[str, Any]
) -> None:
    assert _errors(validator, document) == []


def test_render_json_layout() -> None:
    text = render_json(sample_report())
    assert text.endswith("}\n")
    assert text.startswith('{\n  "generated_at": "2025-03-04T10:15:00Z",\n')
    # Model order, not sorted: tool_version follows generated_at.
    assert text.index('"tool_version"') < text.index('"nodes"') < text.index('"schema_version"')


def test_unavailable_is_written_with_its_reason(document: dict[str, Any]) -> None:
    gpu1 = document["nodes"][1]["facts"]["gpus"][1]
    assert gpu1["serial"] == {"unavailable": "not_supported"}
    kernel = document["nodes"][1]["facts"]["kernel"]
    assert kernel == {"unavailable": "no_permission", "detail": "uname denied"}


def test_round_trip_gives_an_equal_report() -> None:
    report = sample_report(healthy_node(), failing_node(XSS_HOST))
    again = load_report_json(render_json(report))
    assert again == report
    assert isinstance(again.nodes[1].facts.gpus[1].serial, Unavailable)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d["nodes"][0].__setitem__("colour", "green"), "colour"),
        (lambda d: d["nodes"][0]["facts"]["gpus"][0].__setitem__("extra", 1), "extra"),
        (lambda d: d["nodes"][0].__setitem__("verdict", "PASSED"), "PASSED"),
        (lambda d: d["nodes"][1]["findings"][0].__setitem__("severity", "INFO"), "INFO"),
        (
            lambda d: d["nodes"][1]["facts"]["gpus"][1].__setitem__(
                "serial", {"unavailable": "because"}
            ),
            "serial",
        ),
        (
            lambda d: d["nodes"][0]["facts"]["gpus"][0].__setitem__("memory_total_mib", "80GB"),
            "80GB",
        ),
        (lambda d: d["nodes"][0]["findings"][0].pop("message"), "message"),
        (lambda d: d.__setitem__("schema_version", 2), "schema_version"),
    ],
    ids=[
        "unknown-node-field",
        "unknown-gpu-field",
        "bad-verdict",
        "bad-severity",
        "bad-reason",
        "wrong-type",
        "missing-field",
        "newer-schema",
    ],
)
def test_mutated_document_fails_validation(
    validator: Draft202012Validator,
    document: dict[str, Any],
    mutate: typing.Callable[[dict[str, Any]], object],
    needle: str,
) -> None:
    broken = copy.deepcopy(document)
    mutate(broken)
    errors = _errors(validator, broken)
    assert errors, "the schema accepted a broken document"
    assert any(needle in message for message in errors) or any(
        needle in str(list(error.absolute_path)) for error in validator.iter_errors(broken)
    )


def test_load_rejects_unknown_field(document: dict[str, Any]) -> None:
    document["nodes"][0]["colour"] = "green"
    with pytest.raises(BadInputError, match="colour"):
        load_report_json(json.dumps(document))


def test_load_rejects_bad_enum(document: dict[str, Any]) -> None:
    document["nodes"][0]["verdict"] = "PASSED"
    with pytest.raises(BadInputError, match="PASSED"):
        load_report_json(json.dumps(document))


def test_load_rejects_other_schema_version(document: dict[str, Any]) -> None:
    document["schema_version"] = 99
    with pytest.raises(BadInputError, match="schema_version 99"):
        load_report_json(json.dumps(document))


def test_load_rejects_non_json() -> None:
    with pytest.raises(BadInputError, match="line 1, column 2"):
        load_report_json("{oops")


def test_nan_is_refused_rather_than_written() -> None:
    node = healthy_node()
    gpu = dataclasses.replace(node.facts.gpus[0], temperature_gpu_c=float("nan"))
    facts = dataclasses.replace(node.facts, gpus=(gpu,))
    report = sample_report(dataclasses.replace(node, facts=facts))
    with pytest.raises(ReportError, match="NaN"):
        render_json(report)


# ---------------------------------------------- the schema keeps up with model.py


def _model_dataclasses() -> list[type]:
    """Every dataclass reachable from Report, found by walking the type hints."""
    seen: list[type] = []
    todo: list[Any] = [Report]
    while todo:
        tp = todo.pop()
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if tp in seen:
                continue
            seen.append(tp)
            todo.extend(typing.get_type_hints(tp, vars(model)).values())
        else:
            todo.extend(typing.get_args(tp))
    return seen


def _expected(tp: Any) -> dict[str, Any]:
    """The subschema a field of type ``tp`` must have."""
    if typing.get_origin(tp) is typing.Union:
        args = typing.get_args(tp)
        rest = [a for a in args if a not in (type(None), Unavailable)]
        assert len(rest) == 1
        inner = _expected(rest[0])
        if Unavailable in args:
            return {"oneOf": [inner, {"$ref": "#/$defs/Unavailable"}]}
        if set(inner) == {"type"}:
            return {"type": [inner["type"], "null"]}
        return {"oneOf": [inner, {"type": "null"}]}
    if typing.get_origin(tp) is tuple:
        return {"type": "array", "items": _expected(typing.get_args(tp)[0])}
    if isinstance(tp, type) and (issubclass(tp, enum.Enum) or dataclasses.is_dataclass(tp)):
        return {"$ref": f"#/$defs/{tp.__name__}"}
    names = {int: "integer", float: "number", str: "string", bool: "boolean"}
    return {"type": names[tp]}


def test_walk_finds_the_model_classes() -> None:
    names = {cls.__name__ for cls in _model_dataclasses()}
    assert {
        "Report",
        "NodeResult",
        "Finding",
        "NodeFacts",
        "GpuFacts",
        "ToolFacts",
        "KernelLogFacts",
        "XidEvent",
        "NvLinkState",
        "Unavailable",
    } <= names


@pytest.mark.parametrize("cls", _model_dataclasses(), ids=lambda cls: cls.__name__)
def test_schema_covers_every_model_field(cls: type) -> None:
    schema = load_schema()
    definition = schema["$defs"][cls.__name__]
    fields = [f.name for f in dataclasses.fields(cls)]
    properties = list(definition["properties"])
    assert definition["additionalProperties"] is False
    if cls is Unavailable:
        # to_dict writes the reason under the key "unavailable".
        assert fields == ["reason", "detail"], "Unavailable changed: update to_dict and the schema"
        assert properties == ["unavailable", "detail"]
        assert definition["required"] == ["unavailable"]
        assert definition["properties"]["unavailable"] == {"$ref": "#/$defs/Reason"}
        return
    assert properties == fields, f"report.schema.json {cls.__name__} is out of date"
    assert definition["required"] == fields
    hints = typing.get_type_hints(cls, vars(model))
    for name in fields:
        if name == "schema_version":
            assert definition["properties"][name] == {"const": model.SCHEMA_VERSION}
            continue
        assert definition["properties"][name] == _expected(hints[name]), name


@pytest.mark.parametrize(
    "enum_cls",
    [model.Reason, model.Severity, model.Verdict, model.NvmlStatus, model.GpuStatus],
    ids=lambda cls: cls.__name__,
)
def test_schema_enums_match_the_model(enum_cls: type[enum.Enum]) -> None:
    assert load_schema()["$defs"][enum_cls.__name__]["enum"] == [m.value for m in enum_cls]


def test_schema_describes_the_whole_document() -> None:
    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$ref"] == "#/$defs/Report"
