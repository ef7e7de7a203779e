"""The one validation mechanism: declarations, messages, and the strict JSON and YAML loaders."""

from __future__ import annotations

import time
from typing import Any

import pytest

from validator import fields
from validator.fields import Document, Field, FieldError, Invalid, LoadError, Marks, Source
from validator.judge import yamlfile

SOURCE = Source("doc.yaml")


def _problem(field: Field, value: object, source: Source = SOURCE) -> str:
    with pytest.raises(FieldError) as caught:
        field.check(value, source, (field.name,))
    message = str(caught.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- words


def test_excerpt_is_short_and_one_line() -> None:
    long_text = "secret-" * 200 + "\nnext line"
    shown = fields.excerpt(long_text)
    assert len(shown) <= fields.EXCERPT_LIMIT
    assert "\n" not in shown
    assert shown.startswith("'secret-")
    assert len(fields.excerpt(list(range(10_000)))) <= fields.EXCERPT_LIMIT
    assert len(fields.excerpt({"k" * 100: ["v" * 100] * 100})) <= fields.EXCERPT_LIMIT
    assert fields.excerpt(None) == "null"
    assert fields.excerpt("high") == "'high'"
    assert fields.excerpt(1.5) == "1.5"


def test_excerpt_of_an_integer_too_long_to_print() -> None:
    huge = int("9" * 4000) * int("9" * 4000)  # more digits than str() converts on 3.11+
    assert len(fields.excerpt(huge)) <= fields.EXCERPT_LIMIT


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (("thresholds", "retired_pages_max"), "thresholds.retired_pages_max"),
        (("nvml", "gpu_overrides", "3"), "nvml.gpu_overrides.3"),
        (("gpus", 2, "uuid"), "gpus[2].uuid"),
        ((0, "id"), "[0].id"),
        (("files", "/etc/os-release"), 'files["/etc/os-release"]'),
        (("commands", "nvcc --version", "rc"), 'commands["nvcc --version"].rc'),
        ((), ""),
    ],
)
def test_render_path(path: tuple[Any, ...], text: str) -> None:
    assert fields.render_path(path) == text


def test_render_path_cuts_a_huge_key() -> None:
    assert len(fields.render_path(("x" * 10_000,))) <= fields.EXCERPT_LIMIT + 4


def test_child_path() -> None:
    assert fields.child_path("Report", "nodes") == "Report.nodes"
    assert fields.child_path("Report.nodes", 0) == "Report.nodes[0]"
    assert fields.child_path("x.files", "/a b") == 'x.files["/a b"]'


def test_unknown_names_the_closest_and_lists_the_valid() -> None:
    assert fields.unknown(("retired_page_max",), ["retired_pages_max", "tdp_w"]) == (
        "unknown key 'retired_page_max' (did you mean 'retired_pages_max'?); "
        "valid keys: retired_pages_max, tdp_w"
    )
    assert fields.unknown(("colour",), ["a", "b"], "field") == (
        "unknown field 'colour'; valid fields: a, b"
    )
    many = [f"key_{i}" for i in range(fields.LISTED_NAMES_LIMIT + 1)]
    assert fields.unknown(("key_1x",), many) == "unknown key 'key_1x' (did you mean 'key_1'?)"


# ---------------------------------------------------------------- one field


def test_int_refuses_bool_float_and_text() -> None:
    count = Field("count", int)
    assert count.check(3, SOURCE, ("count",)) == 3
    for value in (True, 3.0, "3"):
        assert "'count' must be an integer, got" in _problem(count, value)


def test_float_refuses_nan_inf_and_bool() -> None:
    ratio = Field("ratio", float, minimum=0.0, maximum=1.0, above=True)
    assert ratio.check(1, SOURCE, ("ratio",)) == 1  # kept as written
    assert _problem(ratio, float("nan")) == (
        "doc.yaml: 'ratio' must be a number above 0 up to 1, got nan (float)"
    )
    assert "got inf (float)" in _problem(ratio, float("inf"))
    assert "got -inf (float)" in _problem(ratio, float("-inf"))
    assert "got True (bool)" in _problem(ratio, True)
    assert "got 0 (int)" in _problem(ratio, 0)
    assert Field("x", float, finite=False).check(float("inf"), SOURCE, ("x",)) == float("inf")


@pytest.mark.parametrize(
    ("field", "wanted"),
    [
        (Field("n", int), "an integer"),
        (Field("n", int, minimum=1), "a whole number >= 1"),
        (Field("n", int, minimum=1, maximum=6), "a whole number 1-6"),
        (Field("n", int, maximum=6), "a whole number <= 6"),
        (Field("n", int, minimum=0, above=True), "a whole number > 0"),
        (Field("n", float), "a number"),
        (Field("n", float, minimum=0.0), "a number >= 0"),
        (Field("n", float, minimum=0.0, above=True), "a number > 0"),
        (Field("n", float, minimum=0.0, maximum=8760.0, above=True), "a number above 0 up to 8760"),
        (Field("n", float, minimum=-50.0, maximum=150.0), "a number from -50 up to 150"),
        (Field("n", float, minimum=0.0, maximum=10.0, below=True), "a number from 0 below 10"),
        (Field("n", float, minimum=0.5, maximum=1.5), "a number from 0.5 up to 1.5"),
        (Field("n", str), "a string"),
        (Field("n", str, non_empty=True), "a non-empty string"),
        (Field("n", bool), "true or false"),
        (Field("n", str, choices=("sxm", "pcie")), "one of sxm, pcie"),
        (Field("n", list), "a list"),
        (Field("n", dict), "a mapping"),
        (Field("n", dict, document=Document((), wanted="an object")), "an object"),
        (Field("n", int, wanted="a count"), "a count"),
    ],
)
def test_describe(field: Field, wanted: str) -> None:
    assert field.describe() == wanted


def test_range_bounds_are_inclusive_unless_said() -> None:
    gen = Field("gen", int, minimum=1, maximum=6)
    assert gen.check(1, SOURCE, ("gen",)) == 1
    assert gen.check(6, SOURCE, ("gen",)) == 6
    assert "got 7 (int)" in _problem(gen, 7)
    assert "got 0 (int)" in _problem(gen, 0)
    below = Field("share", float, minimum=0.0, maximum=1.0, below=True)
    assert "got 1.0 (float)" in _problem(below, 1.0)


def test_text_choices_pattern_and_empty() -> None:
    assert "got 'shared' (str)" in _problem(Field("m", str, choices=("default",)), "shared")
    assert "got '12.x' (str)" in _problem(Field("v", str, pattern=r"\d+(\.\d+)?"), "12.x")
    assert "got '  ' (str)" in _problem(Field("t", str, non_empty=True), "  ")
    assert "got [] (list)" in _problem(Field("l", list, non_empty=True), [])
    assert "got [1, 2, 3] (list)" in _problem(Field("l", list, max_items=2), [1, 2, 3])


def test_null_only_where_nullable() -> None:
    assert Field("x", int, nullable=True).check(None, SOURCE, ("x",)) is None
    assert _problem(Field("x", int), None) == "doc.yaml: 'x' must be an integer, got null"


def test_list_items_and_mapping_values_are_checked_with_their_path() -> None:
    watts = Field("limits", list, item=Field("w", float, minimum=0.0, above=True), convert=tuple)
    assert watts.check([300, 700.5], SOURCE, ("limits",)) == (300, 700.5)
    assert _problem(watts, [300, -1]) == "doc.yaml: 'limits[1]' must be a number > 0, got -1 (int)"
    files = Field("files", dict, values=Field("text", str))
    assert _problem(files, {"/etc/x": 5}) == (
        "doc.yaml: 'files[\"/etc/x\"]' must be a string, got 5 (int)"
    )


def test_coerce_accept_and_convert() -> None:
    version = Field("v", str, pattern=r"\d+", coerce=lambda v: str(v) if fields.is_int(v) else v)
    assert version.check(550, SOURCE, ("v",)) == "550"
    assert "got 12.5 (float)" in _problem(version, 12.5)  # the value as given, not coerced
    marker = Field("t", float, accept=lambda v: v == "not_supported")
    assert marker.check("not_supported", SOURCE, ("t",)) == "not_supported"
    assert "got 'hot' (str)" in _problem(marker, "hot")


def test_invalid_from_a_converter_points_at_the_item() -> None:
    def even(items: list[int]) -> list[int]:
        for index, item in enumerate(items):
            if item % 2:
                raise Invalid(item, at=(index,))
        return items

    marks = Marks(values={(): (1, 1), ("evens",): (1, 8), ("evens", 1): (1, 13)})
    field = Field("evens", list, wanted="a list of even numbers", convert=even)
    assert _problem(field, [2, 3], Source("f.yaml", marks=marks)) == (
        "f.yaml, line 1 column 13: 'evens' must be a list of even numbers, got 3 (int)"
    )

    def sentence(value: str) -> str:
        raise Invalid(problem="names unknown reason 'hot'")

    assert _problem(Field("r", str, convert=sentence), "hot") == (
        "doc.yaml: 'r' names unknown reason 'hot'"
    )


# ---------------------------------------------------------------- documents

DOC = Document(
    (
        Field("name", str, required=True),
        Field("count", int, minimum=0, maximum=999_999),
        Field("section", dict, document=Document((Field("ratio", float, convert=float),))),
    )
)


def _doc_error(data: object, source: Source = SOURCE) -> str:
    with pytest.raises(FieldError) as caught:
        DOC.check(data, source)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_document_gives_checked_values_in_document_order() -> None:
    values = DOC.check({"section": {"ratio": 1}, "name": "x"}, SOURCE)
    assert values == {"section": {"ratio": 1.0}, "name": "x"}
    assert list(values) == ["section", "name"]
    assert isinstance(values["section"]["ratio"], float)


def test_document_unknown_missing_and_not_a_mapping() -> None:
    assert _doc_error({"name": "x", "cuont": 1}) == (
        "doc.yaml: unknown key 'cuont' (did you mean 'count'?); valid keys: name, count, section"
    )
    assert _doc_error({"name": "x", "section": {"ration": 1}}) == (
        "doc.yaml: unknown key 'section.ration' (did you mean 'ratio'?); valid keys: ratio"
    )
    assert _doc_error({"count": 1}) == "doc.yaml: lacks the key 'name'"
    assert _doc_error(["name"]) == "doc.yaml: the document must be a mapping, got ['name'] (list)"
    assert _doc_error({"name": "x", 5: 1}).startswith("doc.yaml: unknown key '5'")


def test_open_document_lets_other_keys_through() -> None:
    open_doc = Document((Field("a", int),), closed=False)
    assert open_doc.check({"a": 1, "b": "anything"}, SOURCE) == {"a": 1, "b": "anything"}


def test_source_location_label_base_fix_and_error_class() -> None:
    class Oops(ValueError):
        pass

    marks = Marks(
        values={(): (1, 1), (3,): (40, 3), (3, "count"): (41, 10)},
        keys={(3, "count"): (41, 3), (3, "cuont"): (42, 3)},
    )
    source = Source("skus.yaml", marks=marks, fix="fix the file", error=Oops)
    row = source.within(label="row 'h100'", base=(3,))
    with pytest.raises(Oops) as caught:
        DOC.check({"name": "x", "count": -1}, row)
    assert str(caught.value) == (
        "skus.yaml, line 41 column 10: row 'h100': 'count' must be a whole number 0-999999, "
        "got -1 (int); fix the file"
    )
    with pytest.raises(Oops) as caught:
        DOC.check({"name": "x", "cuont": 1}, row)
    assert str(caught.value).startswith(
        "skus.yaml, line 42 column 3: row 'h100': unknown key 'cuont' (did you mean 'count'?)"
    )
    # A path without a mark of its own takes the nearest enclosing one.
    assert row.where(("section", "ratio")) == "skus.yaml, line 40 column 3: row 'h100'"


def test_every_message_is_one_line_whatever_the_value() -> None:
    text = "line one\nline two\r\n\tline three " * 50
    assert "\n" not in _problem(Field("x", int), text)
    assert "\n" not in _doc_error({"name": "x", text: 1})


# ---------------------------------------------------------------- JSON


def _json_error(text: str) -> LoadError:
    with pytest.raises(LoadError) as caught:
        fields.load_json(text)
    assert "\n" not in str(caught.value)
    return caught.value


def test_json_loads_plain_data() -> None:
    data = fields.load_json('{"a": [1, 2.5, {"b": null}], "c": "d"}')
    assert data == {"a": [1, 2.5, {"b": None}], "c": "d"}
    assert type(data) is dict
    assert type(data["a"][2]) is dict


def test_json_refuses_duplicate_keys_with_their_path() -> None:
    top = _json_error('{"name": "a", "name": "b"}')
    assert (top.problem, top.path, top.syntax) == ("duplicate key 'name'", (), False)
    nested = _json_error('{"nvml": {"gpu": [{}, {"serial": "1", "serial": "2"}]}}')
    assert nested.problem == "duplicate key 'nvml.gpu[1].serial'"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"t": NaN}', "'t' must be a finite number, got nan (float)"),
        ('{"t": [1, Infinity]}', "'t[1]' must be a finite number, got inf (float)"),
        ('{"a": {"t": -Infinity}}', "'a.t' must be a finite number, got -inf (float)"),
        ('{"t": 1e999}', "'t' must be a finite number, got inf (float)"),
        ("NaN", "the document must be a finite number, got nan (float)"),
    ],
)
def test_json_refuses_nan_and_infinity(text: str, problem: str) -> None:
    error = _json_error(text)
    assert (error.problem, error.syntax) == (problem, False)


def test_json_reports_the_first_trouble_in_document_order() -> None:
    error = _json_error('{"a": NaN, "b": {"c": 1, "c": 2}}')
    assert error.problem == "'a' must be a finite number, got nan (float)"


def test_json_syntax_error_has_line_and_column() -> None:
    error = _json_error('{\n  "a": 1,\n  "b": }')
    assert (error.syntax, error.line, error.column) == (True, 3, 8)
    assert error.problem.startswith("invalid JSON (Expecting value")


def test_json_too_deep_or_too_long_is_a_load_error() -> None:
    assert _json_error("[" * 100_000 + "]" * 100_000).syntax
    assert _json_error("1" * 5000).syntax


def test_source_renders_a_load_error() -> None:
    error = _json_error('{"a": {"b": 1, "b": 2}}')
    message = str(Source("s.json", fix="fix the scenario").loaded(error))
    assert message == "s.json: duplicate key 'a.b'; fix the scenario"


# ---------------------------------------------------------------- YAML


def _yaml_error(text: str) -> LoadError:
    with pytest.raises(LoadError) as caught:
        yamlfile.load_located(text)
    assert "\n" not in str(caught.value)
    return caught.value


def test_yaml_marks_every_key_and_value() -> None:
    data, marks = yamlfile.load_located(
        "a: 1\nthresholds:\n  retired_pages_max: x\nlist:\n  - 5\n  - {k: v}\n"
    )
    assert data == {"a": 1, "thresholds": {"retired_pages_max": "x"}, "list": [5, {"k": "v"}]}
    assert marks.at(()) == (1, 1)
    assert marks.at(("thresholds", "retired_pages_max")) == (3, 22)
    assert marks.at(("thresholds", "retired_pages_max"), key=True) == (3, 3)
    assert marks.at(("list", 1, "k")) == (6, 9)
    assert marks.at(("list", 0)) == (5, 5)


def test_yaml_refuses_duplicate_keys_at_the_second() -> None:
    error = _yaml_error("require_ecc: true\nthresholds:\n  a: 1\n  a: 2\n")
    assert (error.line, error.column, error.path) == (4, 3, ("thresholds", "a"))
    assert error.problem == "duplicate key 'thresholds.a' (first at line 3); keep one of them"
    assert not error.syntax
    assert _yaml_error("- {id: x, id: y}\n").problem.startswith("duplicate key '[0].id'")


def test_yaml_merge_keys_may_be_overridden() -> None:
    data, _ = yamlfile.load_located("base: &b {x: 1, y: 2}\nrow:\n  <<: *b\n  y: 3\n")
    assert data == {"base": {"x": 1, "y": 2}, "row": {"x": 1, "y": 3}}


def test_yaml_aliases_of_aliases_are_refused_before_they_explode() -> None:
    # 9 ** 9 values from nine lines: whatever walks them (ours, ansible's) never ends.
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    started = time.monotonic()
    error = _yaml_error("\n".join(lines) + "\n")
    assert time.monotonic() - started < 5
    assert "expands through its aliases" in str(error)
    assert error.line == 7  # a6: the first value past the bound


def test_yaml_aliases_within_the_bound_still_load() -> None:
    lines = ["a0: &a0 [x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 3)}]" for i in range(1, 4)]
    data, _ = yamlfile.load_located("\n".join(lines) + "\n")
    assert isinstance(data, dict)
    assert len(data["a3"]) == 3


def test_yaml_syntax_errors_and_unreadable_values() -> None:
    error = _yaml_error("a: 1\n b: [\n")
    assert error.syntax
    assert error.line == 2
    assert _yaml_error("[" * 20_000 + "]" * 20_000).syntax
    assert _yaml_error("n: " + "9" * 5000 + "\n").syntax
    assert _yaml_error("d: 2024-13-45\n").syntax


def test_yaml_empty_document() -> None:
    assert yamlfile.load_located("# nothing\n") == (None, Marks())
    assert yamlfile.load("a: 1\n") == {"a": 1}


def test_yaml_nan_parses_and_a_number_field_refuses_it() -> None:
    data, marks = yamlfile.load_located("hours: .nan\n")
    assert isinstance(data, dict)
    hours = Field("hours", float, minimum=0.0, maximum=8760.0, above=True)
    with pytest.raises(FieldError) as caught:
        Document((hours,)).check(data, Source("p.yaml", marks=marks))
    assert str(caught.value) == (
        "p.yaml, line 1 column 8: 'hours' must be a number above 0 up to 8760, got nan (float)"
    )
