"""The report as JSON: the machine-readable record, described by report.schema.json.

Two forms. The full form is every field of the model (``Report``), what one node's
``--json`` has always printed. The summary form is for a fleet: per node the host,
its verdict, SKU, GPU count, severity counts and only its non-PASS findings, and
where that host's full result is on disk (``hosts/<name>.json``), so 10,000 nodes
make megabytes, not a gigabyte. Both are rendered in chunks, one node at a time, so
writing them needs no second copy of the fleet in memory.
"""

from __future__ import annotations

import enum
import importlib.resources
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from validator.error_tree import BadInputError, ReportError
from validator.fields import LoadError, load_json
from validator.model import (
    SCHEMA_VERSION,
    NodeResult,
    Report,
    SchemaError,
    Severity,
    from_dict,
    provenance_of,
    to_dict,
)
from validator.packed import with_samples
from validator.report import shared

SCHEMA_RESOURCE = "report.schema.json"
SUMMARY_FORM = "summary"


class JsonForm(str, enum.Enum):
    """Which JSON document to write: ``auto`` is full for one node, summary for a fleet."""

    AUTO = "auto"
    FULL = "full"
    SUMMARY = "summary"


def resolve_form(report: Report, form: JsonForm | str = JsonForm.AUTO) -> JsonForm:
    """The form ``form`` stands for with this report: ``auto`` becomes full or summary.

    A fleet is a report with a fleet summary (an inventory's or a partition's hosts)
    and more than one node: one node, even from a one-host inventory, is written in full.
    """
    chosen = JsonForm(form)
    if chosen is not JsonForm.AUTO:
        return chosen
    fleet = report.fleet is not None and len(report.nodes) > 1
    return JsonForm.SUMMARY if fleet else JsonForm.FULL


def render_json(report: Report) -> str:
    """Serialise a report: every field, in model order, indented, newline at the end.

    Args:
        report: the acceptance report.

    Returns:
        The JSON document.

    Raises:
        ReportError: a value JSON cannot carry (NaN or infinity) slipped into the
            facts; JSON readers would reject the file, so none is written.
    """
    return "".join(json_chunks(report, JsonForm.FULL))


def _dumps(data: object) -> str:
    try:
        return json.dumps(data, indent=2, sort_keys=False, allow_nan=False)
    except ValueError as exc:
        raise ReportError(
            f"report JSON: {exc}; a measured value is NaN or infinite, record it as Unavailable"
        ) from exc


def _nested(text: str, levels: int) -> str:
    """``text`` (json.dumps with indent=2) as it reads ``levels`` deep in a larger document."""
    return text.replace("\n", "\n" + "  " * levels)


def node_summary(node: NodeResult, result_file: str | None = None) -> dict[str, Any]:
    """One node in the summary form: who, the verdict, counts and what did not pass.

    Args:
        node: one judged node.
        result_file: where its full result is, relative to the report (``None``: nowhere).

    Returns:
        The node's entry, JSON-ready (``NodeSummary`` in report.schema.json).
    """
    counts = shared.count_checks(node.findings)
    return {
        "hostname": node.hostname,
        "verdict": node.verdict.value,
        "sku": node.sku,
        "gpu_count": len(node.facts.gpus),
        "transport": node.transport,
        "provenance": provenance_of(node.facts),
        "summary": node.summary,
        "elapsed_s": node.elapsed_s,
        "counts": {
            "passed": counts.passed,
            "warnings": counts.warnings,
            "failed": counts.failed,
            "unknown": counts.unknown,
        },
        "findings": [to_dict(f) for f in node.findings if f.severity is not Severity.PASS],
        "result_file": result_file,
    }


def json_chunks(
    report: Report,
    form: JsonForm | str = JsonForm.AUTO,
    result_files: Mapping[str, str] | Callable[[str], str | None] | None = None,
) -> Iterator[str]:
    """The report's JSON document in pieces, one node at a time.

    The full form joined is exactly what ``json.dumps(to_dict(report), indent=2)``
    writes, plus a newline; the summary form has ``"form": "summary"`` and a
    ``NodeSummary`` per node (see :func:`node_summary`).

    Args:
        report: the acceptance report.
        form: full, summary, or auto (full for one node, summary for a fleet).
        result_files: each host's full-result file relative to the report, by
            hostname (a mapping or a function); summary form only.

    Yields:
        Pieces of the document, in order.

    Raises:
        ReportError: a value JSON cannot carry (NaN or infinity); raised before the
            piece holding it is yielded.
    """
    chosen = resolve_form(report, form)
    head = {
        field: to_dict(getattr(report, field))
        for field in ("generated_at", "tool_version", "schema_version", "fleet", "cross_node")
    }
    lookup: Callable[[str], str | None]
    if result_files is None:
        lookup = lambda _host: None  # noqa: E731 - a one-line default
    elif callable(result_files):
        lookup = result_files
    else:
        lookup = result_files.get
    # Model order: generated_at, tool_version, nodes, schema_version, fleet, cross_node.
    yield "{\n"
    if chosen is JsonForm.SUMMARY:
        yield f'  "form": {_dumps(SUMMARY_FORM)},\n'
    yield f'  "generated_at": {_dumps(head["generated_at"])},\n'
    yield f'  "tool_version": {_dumps(head["tool_version"])},\n'
    if not report.nodes:
        yield '  "nodes": [],\n'
    else:
        yield '  "nodes": [\n'
        last = len(report.nodes) - 1
        for position, node in enumerate(report.nodes):
            if chosen is JsonForm.SUMMARY:
                data = node_summary(node, lookup(node.hostname))
            else:
                data = to_dict(with_samples(node))  # every field: a held node's samples too
            comma = "," if position < last else ""
            yield f"    {_nested(_dumps(data), 2)}{comma}\n"
        yield "  ],\n"
    yield f'  "schema_version": {_dumps(head["schema_version"])},\n'
    yield f'  "fleet": {_nested(_dumps(head["fleet"]), 1)},\n'
    yield f'  "cross_node": {_nested(_dumps(head["cross_node"]), 1)}\n'
    yield "}\n"


def render_summary_json(
    report: Report, result_files: Mapping[str, str] | Callable[[str], str | None] | None = None
) -> str:
    """The summary form of the report as one string (see :func:`json_chunks`)."""
    return "".join(json_chunks(report, JsonForm.SUMMARY, result_files))


def load_report_json(text: str) -> Report:
    """Read a report written by :func:`render_json`.

    Args:
        text: the JSON document.

    Returns:
        The report.

    Raises:
        BadInputError: not JSON, a different schema version, or a document that
            does not fit the model; the message says where.
    """
    try:
        data = load_json(text)
    except LoadError as exc:
        if not exc.syntax:
            raise BadInputError(
                f"report JSON: {exc.problem}; pass a report.json written by gpuready"
            ) from None
        raise BadInputError(
            f"report is not valid JSON (line {exc.line}, column {exc.column}: {exc.detail}); "
            "pass a report.json written by gpuready"
        ) from None
    if not isinstance(data, dict):
        raise BadInputError("report JSON must be an object; pass a report.json written by gpuready")
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise BadInputError(
            f"report has schema_version {version!r}, this gpuready reads {SCHEMA_VERSION}; "
            "use the gpuready version that wrote it"
        )
    try:
        return from_dict(Report, data)
    except SchemaError as exc:
        raise BadInputError(f"report JSON does not fit the model: {exc}") from exc


def load_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the report document, as shipped in the package.

    Returns:
        The parsed schema.
    """
    resource = importlib.resources.files("validator.report").joinpath(SCHEMA_RESOURCE)
    schema: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    return schema
