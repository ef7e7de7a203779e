"""The JSON report: schema-valid, round-trips, and the schema keeps up with the model."""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.report.test_report_samples import (
    SCRIPT_DETAIL,
    TIMEOUT_DETAIL,
    XSS_HOST,
    burn_node,
    failing_node,
    fleet_report,
    healthy_node,
    sample_report,
    unreachable_node,
)
from validator import model
from validator.cli.main import main
from validator.cli.options import JSON_FORMS
from validator.error_tree import BadInputError, ReportError
from validator.model import Report, Unavailable
from validator.report.json_report import (
    JsonForm,
    json_chunks,
    load_report_json,
    load_schema,
    render_json,
    render_summary_json,
    resolve_form,
)


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.fixture
def document() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        render_json(sample_report(healthy_node(), failing_node(XSS_HOST), burn_node()))
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


def test_burn_is_written_in_full(document: dict[str, Any]) -> None:
    assert document["nodes"][0]["facts"]["burn"] is None
    burn = document["nodes"][2]["facts"]["burn"]
    assert burn["backend"] == "cublas"
    assert burn["error"] is None
    assert burn["xid_events_during"] == []
    gpus = burn["gpus"]
    assert [g["status"] for g in gpus] == ["completed", "completed", "timeout"]
    assert gpus[0]["tflops"] == 712.4
    assert gpus[2]["tflops"] == {"unavailable": "not_measured"}
    assert gpus[2]["samples"] == []
    assert len(gpus[1]["samples"]) == 12
    assert gpus[1]["samples"][0]["power_w"] == {
        "unavailable": "not_supported",
        "detail": "power readings not supported",
    }
    assert gpus[0]["samples"][-1]["clock_event_reasons"] == ["sw_power_cap"]
    assert gpus[0]["counters_before"]["ecc_volatile_uncorrected"] == 0


def test_burn_report_round_trips() -> None:
    report = sample_report(
        burn_node(simulated=True, timeout_detail=TIMEOUT_DETAIL + SCRIPT_DETAIL), healthy_node()
    )
    again = load_report_json(render_json(report))
    assert again == report
    burn = again.nodes[0].facts.burn
    assert burn is not None
    assert burn.simulated is True
    assert isinstance(burn.gpus[1].samples[3].power_w, Unavailable)
    assert burn.gpus[0].samples[3].sm_clock_mhz == 1868
    assert again.nodes[1].facts.burn is None


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
        (lambda d: d["nodes"][2]["facts"].__setitem__("burn", "yes"), "yes"),
        (lambda d: d["nodes"][2]["facts"].pop("burn"), "burn"),
        (
            lambda d: d["nodes"][2]["facts"]["burn"]["gpus"][0].__setitem__("status", "ok"),
            "ok",
        ),
        (
            lambda d: d["nodes"][2]["facts"]["burn"]["gpus"][0]["samples"][0].__setitem__(
                "fan_pct", 40
            ),
            "fan_pct",
        ),
        (
            lambda d: d["nodes"][2]["facts"]["burn"]["gpus"][1]["samples"][0].__setitem__(
                "power_w", None
            ),
            "None",
        ),
        (
            lambda d: d["nodes"][2]["facts"]["burn"]["gpus"][0]["counters_after"].pop(
                "remap_pending"
            ),
            "remap_pending",
        ),
        (lambda d: d["nodes"][2]["facts"]["burn"].__setitem__("matrix_size", 8.5), "8.5"),
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
        "burn-not-an-object",
        "burn-missing",
        "bad-burn-status",
        "unknown-sample-field",
        "power-null",
        "counter-missing",
        "float-matrix-size",
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


# ---------------------------------------------- fleet


def test_fleet_report_validates_and_round_trips(validator: Draft202012Validator) -> None:
    report = fleet_report(8, failing=(3,), unknown=(5,))
    text = render_json(report)
    document = json.loads(text)
    assert _errors(validator, document) == []
    assert document["fleet"] == {
        "hosts": 8,
        "certified": 6,
        "not_certified": 1,
        "unknown": 1,
        "skus": [
            {
                "sku": "h100-sxm5-80gb",
                "gpus": 126,
                "median_tflops": 712.4,
                "mad_tflops": 6.1,
                "threshold_tflops": 662.5,
            }
        ],
        "interrupted": False,
    }
    # JSON keeps the nodes in the report's order; ordering for reading is the renderers'.
    assert [n["hostname"] for n in document["nodes"]] == [f"gpu0{i}" for i in range(1, 9)]
    unreachable = document["nodes"][5]
    assert (unreachable["transport"], unreachable["elapsed_s"]) == ("ssh", 41.25)
    assert unreachable["agent_stderr"].endswith("exited 255\x1b[31m\n")
    assert load_report_json(text) == report


def test_single_node_report_has_null_fleet(
    validator: Draft202012Validator, document: dict[str, Any]
) -> None:
    assert document["fleet"] is None
    assert document["nodes"][0]["transport"] == "local"
    assert document["nodes"][0]["elapsed_s"] == 0.0


def test_unreachable_node_round_trips(validator: Draft202012Validator) -> None:
    report = sample_report(unreachable_node())
    document = json.loads(render_json(report))
    assert _errors(validator, document) == []
    assert load_report_json(render_json(report)) == report


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d["fleet"].__setitem__("hosts", "8"), "'8'"),
        (lambda d: d["fleet"]["skus"][0].pop("mad_tflops"), "mad_tflops"),
        (lambda d: d["fleet"]["skus"][0].__setitem__("p99", 1.0), "p99"),
        (lambda d: d["nodes"][0].__setitem__("elapsed_s", "fast"), "fast"),
        (lambda d: d.pop("fleet"), "fleet"),
    ],
    ids=["hosts-type", "mad-missing", "extra-stat", "elapsed-type", "fleet-missing"],
)
def test_schema_rejects_a_broken_fleet(
    validator: Draft202012Validator, mutate: typing.Callable[[dict[str, Any]], object], needle: str
) -> None:
    document = json.loads(render_json(fleet_report(4, failing=(), unknown=())))
    mutate(document)
    # oneOf (full or summary form; fleet may be null) nests the reason in each error's context.
    errors = _nested_messages(validator.iter_errors(document))
    assert any(needle in error for error in errors), errors


def _nested_messages(errors: typing.Iterable[Any]) -> list[str]:
    """Every message of these schema errors and of the alternatives inside them, all levels."""
    found: list[str] = []
    for error in errors:
        found.append(error.message)
        found.extend(_nested_messages(error.context or ()))
    return found


# ---------------------------------------------- the schema keeps up with the model


def _hints(cls: type) -> dict[str, Any]:
    """A model class's field types, read as the decoder reads them: in the class's module."""
    return typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))


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
            todo.extend(_hints(tp).values())
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


def _model_enums() -> list[type[enum.Enum]]:
    """Every enum a field of a model class uses."""
    found: list[type[enum.Enum]] = []
    for cls in _model_dataclasses():
        todo: list[Any] = list(_hints(cls).values())
        while todo:
            tp = todo.pop()
            if isinstance(tp, type) and issubclass(tp, enum.Enum):
                if tp not in found:
                    found.append(tp)
            else:
                todo.extend(typing.get_args(tp))
    return found


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
        "BurnResult",
        "GpuBurn",
        "TelemetrySample",
        "ErrorCounters",
        "FleetSummary",
        "SkuFleetStats",
        "NvLinkErrorCounts",
        "KernelFault",
        "DcgmDiag",
        "DcgmTestResult",
    } <= names
    enums = {cls.__name__ for cls in _model_enums()}
    assert enums == {
        "Reason",
        "Severity",
        "Verdict",
        "NvmlStatus",
        "GpuStatus",
        "BurnStatus",
        "Action",
        "DcgmOutcome",
    }


def _schema_mismatches(schema: dict[str, Any], cls: type) -> list[str]:
    """How the schema's definition of ``cls`` differs from the model; empty when in step."""
    definition = schema["$defs"].get(cls.__name__)
    if definition is None:
        return [f"no $defs entry for {cls.__name__}"]
    fields = [f.name for f in dataclasses.fields(cls)]
    properties = list(definition["properties"])
    problems = []
    if definition.get("additionalProperties") is not False:
        problems.append("additionalProperties is not false")
    if cls is Unavailable:
        # to_dict writes the reason under the key "unavailable".
        assert fields == ["reason", "detail"], "Unavailable changed: update to_dict and the schema"
        if properties != ["unavailable", "detail"] or definition["required"] != ["unavailable"]:
            problems.append("Unavailable must be {unavailable, detail?}")
        if definition["properties"].get("unavailable") != {"$ref": "#/$defs/Reason"}:
            problems.append("Unavailable.unavailable must be a Reason")
        return problems
    if properties != fields:
        problems.append(f"properties {properties} != fields {fields}")
    if definition.get("required") != fields:
        problems.append("not every field is required")
    hints = _hints(cls)
    for name in fields:
        want = (
            {"const": model.SCHEMA_VERSION} if name == "schema_version" else _expected(hints[name])
        )
        if definition["properties"].get(name) != want:
            problems.append(f"{name}: {definition['properties'].get(name)} != {want}")
    return problems


@pytest.mark.parametrize("cls", _model_dataclasses(), ids=lambda cls: cls.__name__)
def test_schema_covers_every_model_field(cls: type) -> None:
    assert _schema_mismatches(load_schema(), cls) == [], (
        f"report.schema.json {cls.__name__} is out of date"
    )


@pytest.mark.parametrize(
    ("cls", "mutate", "needle"),
    [
        (model.NodeFacts, lambda d: d["NodeFacts"]["properties"].pop("burn"), "properties"),
        (
            model.GpuBurn,
            lambda d: d["GpuBurn"]["properties"].__setitem__("tflops", {"type": "number"}),
            "tflops",
        ),
        (
            model.BurnResult,
            lambda d: d["BurnResult"]["properties"].__setitem__("error", {"type": "string"}),
            "error",
        ),
        (model.TelemetrySample, lambda d: d.pop("TelemetrySample"), "no $defs"),
        (
            model.ErrorCounters,
            lambda d: d["ErrorCounters"].__setitem__("additionalProperties", True),
            "additionalProperties",
        ),
    ],
    ids=["burn-missing", "not-measured-dropped", "optional-dropped", "def-missing", "lax"],
)
def test_schema_check_catches_a_stale_schema(
    cls: type, mutate: typing.Callable[[dict[str, Any]], object], needle: str
) -> None:
    schema = copy.deepcopy(load_schema())
    mutate(schema["$defs"])
    problems = _schema_mismatches(schema, cls)
    assert any(needle in problem for problem in problems), problems


@pytest.mark.parametrize("enum_cls", _model_enums(), ids=lambda cls: cls.__name__)
def test_schema_enums_match_the_model(enum_cls: type[enum.Enum]) -> None:
    assert load_schema()["$defs"][enum_cls.__name__]["enum"] == [m.value for m in enum_cls]


@pytest.mark.parametrize("enum_cls", [model.CheckFamily, model.DriftCheck], ids=str)
def test_schema_documents_the_check_ids(enum_cls: type[enum.Enum]) -> None:
    # Finding.check is a string; the schema still lists the families and drift ids.
    assert load_schema()["$defs"][enum_cls.__name__]["enum"] == [m.value for m in enum_cls]


def test_action_is_written_and_validated(
    validator: Draft202012Validator, document: dict[str, Any]
) -> None:
    remap = next(
        f
        for f in document["nodes"][1]["findings"]
        if f["check"] == "memory.remap" and f["severity"] == "FAIL"
    )
    assert (remap["action"], remap["action_source"]) == ("reset_gpu", "gpuready default")
    remap["action"] = "panic"
    assert any("panic" in message for message in _errors(validator, document))


def test_new_facts_validate_and_round_trip(validator: Draft202012Validator) -> None:
    node = healthy_node()
    gpu = dataclasses.replace(
        node.facts.gpus[0],
        nvlinks=(model.NvLinkState(0, True, 26.562), model.NvLinkState(1, False)),
        nvlink_errors=(model.NvLinkErrorCounts(0, crc_flit=3, crc_data=0, replay=1),),
        pcie_replay_count=12,
        recovery_action="gpu_reset",
    )
    facts = dataclasses.replace(
        node.facts,
        gpus=(gpu, *node.facts.gpus[1:]),
        kernel_log=model.KernelLogFacts(
            source="dmesg",
            window_hours=24.0,
            events=(),
            faults=(model.KernelFault("rm_init_adapter_failed", "0000:18:00", "RmInitAdapter"),),
        ),
        dcgm=model.DcgmDiag(
            level=3,
            source="dcgmi diag -r 3 -j",
            version="4.2.3",
            results=(
                model.DcgmTestResult("memory", model.DcgmOutcome.FAIL, "hardware", 0, "bad", 7),
                model.DcgmTestResult("pcie", model.DcgmOutcome.SKIP),
            ),
            elapsed_s=312.5,
        ),
    )
    report = sample_report(dataclasses.replace(node, facts=facts))
    text = render_json(report)
    assert _errors(validator, json.loads(text)) == []
    assert load_report_json(text) == report


def test_schema_describes_the_whole_document() -> None:
    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    # report.json is the full Report, or a fleet's summary form.
    assert schema["oneOf"] == [{"$ref": "#/$defs/Report"}, {"$ref": "#/$defs/ReportSummary"}]


# ---------------------------------------------- one validation mechanism (validator.fields)


def _load_error(document: dict[str, Any]) -> str:
    with pytest.raises(BadInputError) as caught:
        load_report_json(json.dumps(document))
    message = str(caught.value)
    assert "\n" not in message
    prefix = "report JSON does not fit the model: "
    assert message.startswith(prefix)
    return message[len(prefix) :]


def test_unknown_field_names_the_closest(document: dict[str, Any]) -> None:
    document["nodes"][0]["verdit"] = document["nodes"][0].pop("verdict")
    assert _load_error(document) == (
        "unknown field 'Report.nodes[0].verdit' (did you mean 'verdict'?); valid fields: "
        "hostname, verdict, facts, findings, sku, policy_digest, summary, transport, "
        "agent_stderr, elapsed_s"
    )


def test_many_valid_fields_are_not_listed(document: dict[str, Any]) -> None:
    document["nodes"][0]["facts"]["gpus"][0]["temprature_gpu_c"] = 30.0
    assert _load_error(document) == (
        "unknown field 'Report.nodes[0].facts.gpus[0].temprature_gpu_c' "
        "(did you mean 'temperature_gpu_c'?)"
    )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["nodes"][0].update(elapsed_s="fast"),
            "'Report.nodes[0].elapsed_s' must be a number, got 'fast' (str)",
        ),
        (
            lambda d: d["nodes"][0].update(verdict="PASSED"),
            "'Report.nodes[0].verdict' must be one of CERTIFIED, NOT_CERTIFIED, UNKNOWN, "
            "got 'PASSED' (str)",
        ),
        (
            lambda d: d["nodes"][0]["facts"]["gpus"][0].update(index=True),
            "'Report.nodes[0].facts.gpus[0].index' must be an integer, got True (bool)",
        ),
        (
            lambda d: d["nodes"][0]["facts"].update(kernel={"unavailable": "lost"}),
            "'Report.nodes[0].facts.kernel.unavailable' must be one of not_supported, "
            "not_measured, no_permission, gpu_lost, error, got 'lost' (str)",
        ),
        (
            lambda d: d["nodes"][0].pop("hostname"),
            "lacks the field 'Report.nodes[0].hostname'",
        ),
        (
            lambda d: d["nodes"][0].update(findings={}),
            "'Report.nodes[0].findings' must be a list, got {} (dict)",
        ),
    ],
)
def test_wrong_kind_or_value_names_the_path(
    document: dict[str, Any], mutate: Any, message: str
) -> None:
    mutate(document)
    assert _load_error(document) == message


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinity_are_refused(literal: str) -> None:
    text = render_json(sample_report(healthy_node()))
    gpu = '"temperature_gpu_c": 31.0'
    assert gpu in text
    with pytest.raises(BadInputError) as caught:
        load_report_json(text.replace(gpu, f'"temperature_gpu_c": {literal}', 1))
    # Refused by the model's float today; by the JSON loader once load_report_json parses
    # with fields.load_json: the same words either way.
    assert (
        "nodes[0].facts.gpus[0].temperature_gpu_c' must be a finite number, "
        f"got {float(literal)} (float)"
    ) in str(caught.value)


def test_stored_results_refuse_nan_in_the_data() -> None:
    data = model.to_dict(healthy_node())
    data["facts"]["gpus"][1]["power_draw_w"] = float("inf")
    with pytest.raises(model.SchemaError) as caught:
        model.from_dict(model.NodeResult, data)
    assert str(caught.value) == (
        "'NodeResult.facts.gpus[1].power_draw_w' must be a finite number, got inf (float)"
    )


def test_a_long_bad_value_is_shown_as_an_excerpt(document: dict[str, Any]) -> None:
    document["nodes"][0]["hostname"] = {"name": "gpu-" * 5000}
    message = _load_error(document)
    assert message.startswith("'Report.nodes[0].hostname' must be a string, got {'name': ")
    assert len(message) < 120


def test_stored_results_with_a_duplicate_key_are_refused() -> None:
    from validator import fields

    text = json.dumps(model.to_dict(healthy_node()))
    doubled = text.replace('"verdict": ', '"verdict": "UNKNOWN", "verdict": ', 1)
    with pytest.raises(fields.LoadError) as caught:
        fields.load_json(doubled)
    assert str(caught.value) == "duplicate key 'verdict'"
    assert model.from_dict(model.NodeResult, fields.load_json(text)) == healthy_node()


def test_report_with_a_duplicate_key_is_refused() -> None:
    text = render_json(sample_report(healthy_node()))
    doubled = text.replace('"hostname": ', '"hostname": "x", "hostname": ', 1)
    with pytest.raises(BadInputError, match="duplicate key"):
        load_report_json(doubled)


# ---------------------------------------------- the summary form (a fleet)


def test_summary_form_validates_and_keeps_only_what_did_not_pass(
    validator: Draft202012Validator,
) -> None:
    report = fleet_report(6, failing=(2,), unknown=(4,))
    text = render_summary_json(report, {"gpu01": "hosts/gpu01.json"})
    document = json.loads(text)
    assert _errors(validator, document) == []
    assert document["form"] == "summary"
    assert document["fleet"]["hosts"] == 6
    nodes = {node["hostname"]: node for node in document["nodes"]}
    assert set(nodes) == {node.hostname for node in report.nodes}
    full = {node.hostname: node for node in report.nodes}
    for host, node in nodes.items():
        passed = sum(1 for f in full[host].findings if f.severity.value == "PASS")
        # Checks are counted, each once: one whose findings all passed counts as passed.
        not_passed = {f.check for f in full[host].findings if f.severity.value != "PASS"}
        all_passed = {f.check for f in full[host].findings} - not_passed
        assert node["counts"]["passed"] == len(all_passed)
        assert all(f["severity"] != "PASS" for f in node["findings"])
        assert len(node["findings"]) == len(full[host].findings) - passed
        assert node["gpu_count"] == len(full[host].facts.gpus)
        assert node["verdict"] == full[host].verdict.value
    assert nodes["gpu01"]["result_file"] == "hosts/gpu01.json"
    assert nodes["gpu02"]["result_file"] is None
    # A failing node's findings are there, whole, as in the full form.
    failing = [n for n in nodes.values() if n["verdict"] == "NOT_CERTIFIED"]
    assert failing
    assert all(n["findings"] for n in failing)
    assert set(failing[0]["findings"][0]) == set(
        json.loads(render_json(report))["nodes"][0]["findings"][0]
    )


def test_schema_refuses_a_summary_with_a_pass_finding_or_a_stray_field(
    validator: Draft202012Validator,
) -> None:
    report = fleet_report(3, failing=(), unknown=())
    document = json.loads(render_summary_json(report))
    passing = json.loads(render_json(report))["nodes"][0]["findings"][0]
    document["nodes"][0]["findings"].append(passing)
    assert any("PASS" in m for m in _nested_messages(validator.iter_errors(document)))
    document = json.loads(render_summary_json(report))
    document["nodes"][0]["facts"] = {}
    assert any("facts" in m for m in _nested_messages(validator.iter_errors(document)))


def test_auto_form_is_full_for_one_node_and_summary_for_a_fleet() -> None:
    one = sample_report(healthy_node())
    assert resolve_form(one) is JsonForm.FULL
    assert resolve_form(fleet_report(1, failing=(), unknown=())) is JsonForm.FULL
    fleet = fleet_report(3, failing=(), unknown=())
    assert resolve_form(fleet) is JsonForm.SUMMARY
    assert resolve_form(fleet, "full") is JsonForm.FULL
    assert "".join(json_chunks(one)) == render_json(one)
    assert "".join(json_chunks(fleet)) == render_summary_json(fleet)
    assert (
        "".join(json_chunks(fleet, JsonForm.FULL))
        == json.dumps(model.to_dict(fleet), indent=2) + "\n"
    )


def test_summary_of_a_thousand_nodes_is_small() -> None:
    report = fleet_report(1000, failing=(3,), unknown=())
    text = render_summary_json(report, lambda host: f"hosts/{host}.json")
    assert len(text.encode()) / 1000 < 1_000
    assert len(json.loads(text)["nodes"]) == 1000


def test_the_cli_form_choices_are_the_model_forms() -> None:
    assert tuple(form.value for form in JsonForm) == JSON_FORMS


def _inventory(path: Path, hosts: dict[str, str]) -> Path:
    lines = ["[gpu]"] + [
        f"{name} gpuready_transport=local gpuready_simulate={scenario}"
        for name, scenario in hosts.items()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_certify_json_of_a_fleet_is_the_summary_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], validator: Draft202012Validator
) -> None:
    inventory = _inventory(
        tmp_path / "hosts.ini",
        {"n1": "healthy-8x-h100-sxm", "n2": "one-gpu-power-capped"},
    )
    base = ["certify", "-i", str(inventory), "--transport", "ansible", "--burn", "0", "--json"]
    reports = tmp_path / "reports"
    code = main([*base, "--db", str(tmp_path / "h.db"), "--report-dir", str(reports)])
    assert code == 1
    summary = json.loads(capsys.readouterr().out)
    assert _errors(validator, summary) == []
    assert summary["form"] == "summary"
    nodes = {node["hostname"]: node for node in summary["nodes"]}
    assert ("power.limit", 3) in {
        (f["check"], f["gpu_index"]) for f in nodes["n2"]["findings"] if f["severity"] == "FAIL"
    }
    # Each host's full result is where the summary says, and it is the final judgement.
    for host, node in nodes.items():
        result = json.loads(Path(node["result_file"]).read_text())
        assert result["hostname"] == host
        assert result["verdict"] == node["verdict"]
        # Counted as checks: each check id once.
        assert len({f["check"] for f in result["findings"]}) == sum(node["counts"].values())
    on_disk = json.loads((reports / "report.json").read_text())
    assert on_disk["form"] == "summary"
    assert sorted(n["result_file"] for n in on_disk["nodes"]) == ["hosts/n1.json", "hosts/n2.json"]

    code = main([*base, "--json-form", "full", "--db", str(tmp_path / "h.db")])
    assert code == 1
    full = json.loads(capsys.readouterr().out)
    assert "form" not in full
    assert _errors(validator, full) == []
    assert {len(node["facts"]["gpus"]) for node in full["nodes"]} == {8}


def test_json_form_full_reaches_the_report_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], validator: Draft202012Validator
) -> None:
    inventory = _inventory(
        tmp_path / "hosts.ini",
        {"n1": "healthy-8x-h100-sxm", "n2": "one-gpu-power-capped"},
    )
    reports = tmp_path / "reports"
    code = main(
        [
            *("certify", "-i", str(inventory), "--transport", "ansible", "--burn", "0"),
            *("--json-form", "full", "--db", str(tmp_path / "h.db"), "--report-dir", str(reports)),
        ]
    )
    assert code == 1
    capsys.readouterr()
    on_disk = json.loads((reports / "report.json").read_text())
    assert "form" not in on_disk  # the full form, as asked, not the summary
    assert _errors(validator, on_disk) == []
    assert {len(node["facts"]["gpus"]) for node in on_disk["nodes"]} == {8}


@pytest.mark.parametrize("form", ["full", "summary"])
def test_a_render_error_mid_fleet_prints_no_partial_document(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    form: str,
) -> None:
    from validator.cli import certify as cli_certify
    from validator.service.certify_service import CertifyOutcome

    report = fleet_report(3, failing=(1,), unknown=())
    # NaN in the 2nd node's elapsed time: both forms carry it.
    second = dataclasses.replace(report.nodes[1], elapsed_s=float("nan"))
    nodes = (report.nodes[0], second, report.nodes[2])
    broken = dataclasses.replace(report, nodes=nodes)
    monkeypatch.setattr(
        cli_certify, "run_with_display", lambda *_, **__: CertifyOutcome(report=broken, run_id=1)
    )
    inventory = _inventory(tmp_path / "hosts.ini", {"n1": "healthy-8x-h100-sxm"})
    code = main(
        [
            *("certify", "-i", str(inventory), "--transport", "ansible", "--burn", "0", "--json"),
            *("--json-form", form, "--db", str(tmp_path / "h.db")),
        ]
    )
    captured = capsys.readouterr()
    assert code == 3
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("gpuready: error:")
    assert "NaN" in lines[0]
