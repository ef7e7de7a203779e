"""JSON in: a model object built from :func:`~validator.model.encoding.to_dict` output.

Each dataclass's type hints are resolved against the module that defines it, so that
module must import every name its field annotations use.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import typing
from typing import Any, Dict, Tuple, Union

from validator import fields
from validator.model.measured import Reason, T, Unavailable
from validator.safe_text import one_line


class SchemaError(ValueError):
    """JSON that does not fit the model; the one-line message names the path."""


def from_dict(cls: type[T], data: Any) -> T:
    """Build a model object of type ``cls`` from :func:`to_dict` output.

    The dataclasses' type hints are the declaration; every value is checked with the
    words of :mod:`validator.fields`: an unknown field names the closest known one, a
    number must be finite (NaN and infinity are refused), and a bad value is shown only
    as a short excerpt. Parse JSON text with :func:`validator.fields.load_json`, which
    also refuses a key given twice.

    Raises:
        SchemaError: when ``data`` does not fit, naming where.
    """
    return typing.cast(T, _decode(cls, data, cls.__name__))


_HINTS: Dict[type, Dict[str, Any]] = {}
_REQUIRED: Dict[type, Tuple[str, ...]] = {}


def _hints(cls: type) -> Dict[str, Any]:
    if cls not in _HINTS:
        module = sys.modules[cls.__module__]
        hints = typing.get_type_hints(cls, vars(module))
        # _REQUIRED first: a thread that sees the hints must find the required names too.
        _REQUIRED[cls] = tuple(
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        _HINTS[cls] = hints
    return _HINTS[cls]


def _decoder_for(tp: Any) -> Decoder:
    """The one decoder of ``tp``, made on first use.

    Made eagerly for a type's parts, so that decoding a value never looks a type
    up (hashing a typing Union for each value cost a third of decoding a host's
    facts). Safe for a dataclass that holds its own type: a dataclass's decoder
    finds its fields' decoders only when it first decodes.
    """
    decoder = _DECODERS.get(tp)
    if decoder is None:
        decoder = _DECODERS[tp] = _make_decoder(tp)
    return decoder


def _wrong(path: str, wanted: str, data: Any) -> SchemaError:
    return SchemaError(fields.must_be(path, wanted, data))


Decoder = typing.Callable[[Any, str], Any]
# One decoder per type, built on first use: the controller decodes every host's facts
# (thousands of values each), and working out a type's shape again for every value
# cost more than checking the values.
_DECODERS: Dict[Any, Decoder] = {}


def _decode(tp: Any, data: Any, path: str) -> Any:
    return _decoder_for(tp)(data, path)


def _make_decoder(tp: Any) -> Decoder:  # noqa: PLR0911
    origin = typing.get_origin(tp)
    if origin is Union:
        return _union_decoder(typing.get_args(tp))
    if origin in (tuple, list):
        args = typing.get_args(tp)
        return _sequence_decoder(args[0] if args else Any, origin is tuple)
    if origin is dict:
        value_decoder = _decoder_for(typing.get_args(tp)[1])

        def decode_dict(data: Any, path: str) -> Any:
            if not isinstance(data, dict):
                raise _wrong(path, "an object", data)
            try:
                return {key: value_decoder(value, path) for key, value in data.items()}
            except SchemaError:  # again, each value at its own path, for the message
                return {
                    key: value_decoder(value, fields.child_path(path, key))
                    for key, value in data.items()
                }

        return decode_dict
    if tp is Unavailable:
        return _unavailable
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_decoder(tp)
    if tp is Any:
        return lambda data, path: data
    if tp in _SCALARS:
        return _SCALARS[tp]

    def cannot(data: Any, path: str) -> Any:
        raise SchemaError(f"{path}: cannot decode type {tp!r}")

    return cannot


def _union_decoder(options: Tuple[Any, ...]) -> Decoder:
    may_be_unavailable = Unavailable in options
    may_be_none = type(None) in options
    others = [
        _decoder_for(option)
        for option in options
        if option is not type(None) and option is not Unavailable
    ]

    def decode_union(data: Any, path: str) -> Any:
        if may_be_unavailable and isinstance(data, dict) and "unavailable" in data:
            return _unavailable(data, path)
        if data is None and may_be_none:
            return None
        errors = []
        for option in others:
            try:
                return option(data, path)
            except SchemaError as exc:
                errors.append(str(exc))
        raise SchemaError(errors[0] if errors else fields.must_be(path, "a value", data))

    return decode_union


def _sequence_decoder(item_type: Any, as_tuple: bool) -> Decoder:
    item_decoder = _decoder_for(item_type)
    wanted = _as_is(item_type)

    def decode_sequence(data: Any, path: str) -> Any:
        if not isinstance(data, list):
            raise _wrong(path, "a list", data)
        try:
            if wanted is float:  # as in decode_dataclass: a finite float is taken as it is
                items = [
                    item if type(item) is float and item - item == 0.0 else item_decoder(item, path)
                    for item in data
                ]
            elif wanted is not None:
                items = [
                    item if type(item) is wanted else item_decoder(item, path) for item in data
                ]
            else:
                items = [item_decoder(item, path) for item in data]
        except SchemaError:  # again, each item at its own path, for the message
            items = [item_decoder(item, f"{path}[{i}]") for i, item in enumerate(data)]
        return tuple(items) if as_tuple else items

    return decode_sequence


def _enum_decoder(tp: Any) -> Decoder:
    def decode_enum(data: Any, path: str) -> Any:
        try:
            return tp(data)
        except (ValueError, TypeError):
            choices = ", ".join(str(member.value) for member in tp)
            raise _wrong(path, f"one of {choices}", data) from None

    return decode_enum


def _decode_float(data: Any, path: str) -> float:
    if not fields.is_number(data):
        raise _wrong(path, "a finite number" if isinstance(data, float) else "a number", data)
    return float(data)


def _decode_int(data: Any, path: str) -> int:
    if not fields.is_int(data):
        raise _wrong(path, "an integer", data)
    return typing.cast(int, data)


def _decode_str(data: Any, path: str) -> str:
    if not isinstance(data, str):
        raise _wrong(path, "a string", data)
    return data


def _decode_bool(data: Any, path: str) -> bool:
    if not isinstance(data, bool):
        raise _wrong(path, "true or false", data)
    return data


_SCALARS: Dict[Any, Decoder] = {
    float: _decode_float,
    int: _decode_int,
    str: _decode_str,
    bool: _decode_bool,
}


def _unavailable(data: Any, path: str) -> Unavailable:
    if not isinstance(data, dict) or "unavailable" not in data:
        raise _wrong(path, "an unavailable marker", data)
    try:
        reason = Reason(data["unavailable"])
    except (ValueError, TypeError):
        choices = ", ".join(member.value for member in Reason)
        raise _wrong(f"{path}.unavailable", f"one of {choices}", data["unavailable"]) from None
    detail = data.get("detail", "")
    if not isinstance(detail, str):
        raise _wrong(f"{path}.detail", "a string", detail)
    return Unavailable(reason, detail)


# Scalars a field's value is taken as it is when its type is exactly this (JSON's own
# types: json.loads makes no subclasses), with no call: most of a host's facts.
_AS_IS = (int, float, str, bool)


def _one_option(hint: Any) -> Any:
    """``hint`` without None and Unavailable when one type is left, else None."""
    if typing.get_origin(hint) is Union:
        options = [a for a in typing.get_args(hint) if a is not type(None) and a is not Unavailable]
        return options[0] if len(options) == 1 else None
    return hint


def _as_is(hint: Any) -> type | None:
    """The exact type a value of ``hint`` is taken as it is (None: always decoded)."""
    hint = _one_option(hint)
    return hint if hint in _AS_IS else None


def _is_str_tuple(hint: Any) -> bool:
    """Whether ``hint`` is a tuple of strings (measured or not): a list of them is taken whole."""
    hint = _one_option(hint)
    return typing.get_origin(hint) is tuple and typing.get_args(hint) == (str, ...)


# Values a host repeats by the thousand are kept once: a default burn's 2,400 samples
# read the same clocks, temperatures and throttle reasons again and again, and each
# decoded copy would be an object of its own (28 bytes an int, 24 a float, ~110 a
# reasons tuple), two fifths of a decoded host. Kept: integers, whole-number floats
# (never 0.0, which -0.0 equals) and tuples of strings, one table each (1 equals 1.0),
# each bounded, so a stream of distinct values cannot grow it without end.
_SHARED_MOST = 4096
_SHARED_INTS: Dict[int, int] = {}
_SHARED_FLOATS: Dict[float, float] = {}
_SHARED_STR_TUPLES: Dict[Tuple[str, ...], Tuple[str, ...]] = {}


def _shared(table: Dict[Any, Any], value: Any) -> Any:
    """The one copy of ``value`` kept in ``table`` (``value`` itself once the table is full)."""
    kept = table.get(value)
    if kept is not None:
        return kept
    if len(table) < _SHARED_MOST:
        table[value] = value
    return value


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How one dataclass is decoded: its fields, the required ones, each field's decoder."""

    known: frozenset[str]
    required: frozenset[str]
    decoders: Dict[str, Decoder]
    as_is: Dict[str, type]
    str_tuples: frozenset[str]  # fields holding a tuple of strings


def _plan_of(tp: type) -> _Plan:
    hints = _hints(tp)
    as_is = {name: wanted for name, hint in hints.items() if (wanted := _as_is(hint)) is not None}
    return _Plan(
        known=frozenset(hints),
        required=frozenset(_REQUIRED[tp]),
        decoders={name: _decoder_for(hint) for name, hint in hints.items()},
        as_is=as_is,
        str_tuples=frozenset(name for name, hint in hints.items() if _is_str_tuple(hint)),
    )


def _refuse_fields(tp: type, plan: _Plan, data: Dict[Any, Any], path: str) -> SchemaError:
    """Why ``data`` has not ``tp``'s fields: the first unknown one, else the first missing."""
    for name in data:
        if name not in plan.known:
            return SchemaError(
                fields.unknown(
                    fields.child_path(path, str(name)), list(_hints(tp)), "field", name=str(name)
                )
            )
    missing = next(name for name in _REQUIRED[tp] if name not in data)
    return SchemaError(fields.lacks(fields.child_path(path, missing), "field"))


def _dataclass_decoder(tp: type) -> Decoder:
    """``tp``'s decoder, writing a value's path out only when something in it is wrong.

    The values are decoded with the object's path, and on a refusal again with their
    own, for the message: a host's facts hold thousands of values, and formatting
    each one's path cost a fifth of decoding them.
    """
    plans: list[_Plan] = []  # made on the first decode: the type may hold itself

    # One function and its branches, no call per value: decoding the facts' thousands of
    # values is most of what the controller spends on a host.
    def decode_dataclass(data: Any, path: str) -> Any:  # noqa: PLR0912
        if not isinstance(data, dict):
            raise _wrong(path, f"an object for {tp.__name__}", data)
        if not plans:
            plans.append(_plan_of(tp))
        plan = plans[0]
        keys = data.keys()
        if not plan.known.issuperset(keys) or not plan.required <= keys:
            raise _refuse_fields(tp, plan, data, path)
        decoders, as_is, str_tuples = plan.decoders, plan.as_is, plan.str_tuples
        kwargs = {}
        try:
            for name, value in data.items():
                kind = type(value)
                if kind is not as_is.get(name):
                    if kind is list and name in str_tuples and all(type(v) is str for v in value):
                        kwargs[name] = _shared(_SHARED_STR_TUPLES, tuple(value))
                    else:
                        kwargs[name] = decoders[name](value, path)
                elif kind is int:  # the table asked first: no call for a value kept
                    kwargs[name] = _SHARED_INTS.get(value) or _shared(_SHARED_INTS, value)
                elif kind is not float:
                    kwargs[name] = value
                elif value - value != 0.0:  # NaN or infinity (a finite float gives 0.0)
                    kwargs[name] = decoders[name](value, path)  # which refuses it
                elif value and value.is_integer():
                    kwargs[name] = _SHARED_FLOATS.get(value) or _shared(_SHARED_FLOATS, value)
                else:
                    kwargs[name] = value
        except SchemaError:  # again, each value at its own path, for the message
            kwargs = {
                name: decoders[name](value, fields.child_path(path, name))
                for name, value in data.items()
            }
        try:
            return tp(**kwargs)
        except TypeError as exc:
            raise SchemaError(f"{path}: {one_line(exc, 200)}") from None

    return decode_dataclass
