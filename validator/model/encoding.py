"""JSON out: a model object as plain JSON-ready data (:func:`to_dict`)."""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any, Dict, Tuple

from validator.model.measured import Unavailable


def to_dict(obj: Any) -> Any:  # noqa: PLR0911
    """Turn a model object into plain JSON-ready data."""
    kind = type(obj)
    if kind in _PLAIN:
        return obj
    names = _FIELD_NAMES.get(kind)
    if names is not None:
        # Plain values are tested here rather than in a call each: they are most of a
        # result's hundreds of thousands of values, and a call costs more than the test.
        out: Dict[str, Any] = {}
        for name in names:
            value = getattr(obj, name)
            out[name] = value if type(value) in _PLAIN else to_dict(value)
        return out
    if kind in _ENUM_TYPES:
        return obj.value
    if isinstance(obj, Unavailable):
        unavailable: Dict[str, Any] = {"unavailable": obj.reason.value}
        if obj.detail:
            unavailable["detail"] = obj.detail
        return unavailable
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Field names once per class: a fleet's results hold hundreds of thousands of objects.
        _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(obj))
        return to_dict(obj)
    if isinstance(obj, enum.Enum):
        _ENUM_TYPES.add(kind)  # a result holds hundreds of severities and actions
        return obj.value
    if isinstance(obj, (list, tuple)):
        return [item if type(item) in _PLAIN else to_dict(item) for item in obj]
    if isinstance(obj, dict):
        return {str(key): to_dict(value) for key, value in obj.items()}
    return obj


# Exactly these types (not subclasses: an enum may subclass str) come out as they are.
_PLAIN = frozenset({str, int, float, bool, type(None)})
_FIELD_NAMES: Dict[type, Tuple[str, ...]] = {}
_ENUM_TYPES: typing.Set[type] = set()
