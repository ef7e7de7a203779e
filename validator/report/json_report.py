"""The report as JSON: the machine-readable record, described by report.schema.json."""

from __future__ import annotations

import importlib.resources
import json
from typing import Any

from validator.errors import BadInputError, ReportError
from validator.fields import LoadError, load_json
from validator.model import SCHEMA_VERSION, Report, SchemaError, from_dict, to_dict

SCHEMA_RESOURCE = "report.schema.json"


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
    try:
        text = json.dumps(to_dict(report), indent=2, sort_keys=False, allow_nan=False)
    except ValueError as exc:
        raise ReportError(
            f"report JSON: {exc}; a measured value is NaN or infinite, record it as Unavailable"
        ) from exc
    return text + "\n"


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
