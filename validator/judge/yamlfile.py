"""Reading the judge's YAML files (SKU catalog, policy) with the fastest safe loader."""

from __future__ import annotations

from typing import Any

import yaml

# libyaml's loader when PyYAML was built with it; the pure-Python safe loader otherwise.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

YAMLError = yaml.YAMLError


def load(text: str) -> object:
    """Parse one YAML document with a safe loader.

    Raises:
        yaml.YAMLError: on a syntax error; see :func:`error_line`.
    """
    loader = _SAFE_LOADER(text)
    try:
        document: object = loader.get_single_data()
        return document
    finally:
        loader.dispose()


def error_line(exc: yaml.YAMLError) -> int | None:
    """The 1-based line a YAML error points at, where it says."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = getattr(mark, "line", None)
    return line + 1 if isinstance(line, int) else None


def error_problem(exc: yaml.YAMLError) -> str:
    """The short description of a YAML error, without the file excerpt."""
    problem = getattr(exc, "problem", None)
    return str(problem) if problem else "invalid YAML"


def top_line(text: str) -> int:
    """The 1-based line where the document's top-level node starts (1 when unknown)."""
    try:
        node = yaml.compose(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError:
        return 1
    return node.start_mark.line + 1 if node is not None else 1
