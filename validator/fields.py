"""One way to check every document we read: each field declared once, one-line errors.

Policy and SKU catalog (YAML), scenario files, certificates, stored results and reports
(JSON) and inventory variables are all checked through this module, so they refuse the
same things with the same words:

* a key the document does not know, naming the closest known one;
* a value of the wrong kind, out of its range, or not one of its choices;
* NaN and infinity wherever a number is expected;
* a key given twice (:func:`load_json` here; the YAML loader in ``validator.judge.yamlfile``).

Every message is one line, shaped
``<origin>[, line L column C][: <label>]: <problem>[; <fix>]``, where the problem is one of::

    '<key path>' must be <wanted>, got <excerpt> (<type>)
    unknown key '<key path>' (did you mean '<name>'?); valid keys: a, b, c
    lacks the key '<key path>'
    duplicate key '<key path>'

Line and column appear where the loader knows them (YAML); without them the key path
(``nvml.gpu_overrides.3.power_limit_enforced_w``, ``gpus[2].uuid``) says where. A value is
never echoed in full: :func:`excerpt` cuts it to about 40 characters.

Standard library only, Python 3.9: the node agent ships with this module.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Union

from validator.safe_text import ELLIPSIS, one_line

PathPart = Union[str, int]
KeyPath = tuple[PathPart, ...]
Mark = tuple[int, int]  # 1-based line and column

EXCERPT_LIMIT = 40  # the most characters of a value a message shows
LISTED_NAMES_LIMIT = 30  # more valid keys than this are not listed, only the closest named
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_LINE_BREAKS = re.compile(r"\s*[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]\s*")

_REPR = reprlib.Repr()
_REPR.maxstring = EXCERPT_LIMIT
_REPR.maxother = EXCERPT_LIMIT
_REPR.maxlong = EXCERPT_LIMIT
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4
_REPR.maxlevel = 2


# ---------------------------------------------------------------- words


def excerpt(value: object, limit: int = EXCERPT_LIMIT) -> str:
    """``value`` as Python shows it, on one line and at most ``limit`` characters."""
    if value is None:
        return "null"
    try:
        text = _REPR.repr(value)
    except ValueError:  # an integer too long for str() (Python 3.11's digit limit)
        text = "<a number too long to show>"
    if "\n" in text or "\r" in text:  # only an odd object's repr spans lines
        text = one_line(text)
    if len(text) > limit:
        text = text[: max(0, limit - len(ELLIPSIS))] + ELLIPSIS
    return text


def type_name(value: object) -> str:
    """The name of ``value``'s type, as messages give it: ``str``, ``int``, ``dict``."""
    return type(value).__name__


def got(value: object) -> str:
    """``'high' (str)``: the excerpt and the type of an offending value; ``null`` for None."""
    if value is None:
        return "null"
    return f"{excerpt(value)} ({type_name(value)})"


def render_path(path: Sequence[PathPart]) -> str:
    """A key path as messages write it: ``nvml.gpu_overrides.3``, ``gpus[2].uuid``, ``files["/x"]``.

    Keys other than letters, digits, ``_`` and ``-`` are written in brackets as JSON
    strings; every key is cut to an excerpt, so a huge key cannot flood a message.
    """
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
            continue
        key = one_line(part, EXCERPT_LIMIT) if isinstance(part, str) else excerpt(part)
        if _BARE_KEY.fullmatch(key):
            out += f".{key}" if out else key
        else:
            out += f"[{json.dumps(key)}]"
    return out


def quoted(path: Sequence[PathPart] | str) -> str:
    """The key path in quotes, as every problem names it: ``'thresholds.retired_pages_max'``."""
    return repr(path if isinstance(path, str) else render_path(path))


def suggest(name: str, valid: Sequence[str]) -> str | None:
    """The valid name closest to a misspelt ``name``, or None when none is close."""
    close = difflib.get_close_matches(name[:100], list(valid), n=1)
    return close[0] if close else None


def must_be(path: Sequence[PathPart] | str, wanted: str, value: object) -> str:
    """``'<path>' must be <wanted>, got <excerpt> (<type>)`` (the empty path: the document)."""
    subject = quoted(path) if path else "the document"
    return f"{subject} must be {wanted}, got {got(value)}"


def unknown(
    path: Sequence[PathPart] | str, valid: Sequence[str], noun: str = "key", name: str = ""
) -> str:
    """``unknown key '<path>' (did you mean '<name>'?); valid keys: ...``.

    ``name`` is the unknown key itself (by default the path's last part); the valid
    names are listed when there are at most :data:`LISTED_NAMES_LIMIT`.
    """
    if isinstance(path, str):
        text, name = path, name or path.rsplit(".", 1)[-1]
    else:
        text, name = render_path(path), name or (str(path[-1]) if path else "")
    close = suggest(name, valid)
    hint = f" (did you mean {close!r}?)" if close else ""
    problem = f"unknown {noun} {text!r}{hint}"
    if 0 < len(valid) <= LISTED_NAMES_LIMIT:
        problem += f"; valid {noun}s: {', '.join(valid)}"
    return problem


def child_path(path: str, key: PathPart) -> str:
    """``path`` (written out) and one more key: ``Report.nodes`` and 0 give ``Report.nodes[0]``."""
    if isinstance(key, str) and len(key) <= EXCERPT_LIMIT and _BARE_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key  # the common case, kept fast for big reports
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    part = render_path((key,))
    return f"{path}{part}" if part.startswith("[") or not path else f"{path}.{part}"


def lacks(path: Sequence[PathPart] | str, noun: str = "key") -> str:
    """``lacks the key '<path>'``: a required key that is absent."""
    return f"lacks the {noun} {quoted(path)}"


def is_int(value: object) -> bool:
    """A whole number, and not a bool (True is an int in Python, never in our documents)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """An int or a float that is neither bool, NaN nor infinite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not isinstance(value, float) or math.isfinite(value)


def _number_text(number: float) -> str:
    if isinstance(number, int) or float(number).is_integer():
        return str(int(number))
    return repr(float(number))


# ---------------------------------------------------------------- where


@dataclass(frozen=True)
class Marks:
    """Where each key and value of a document starts in its text (1-based line, column)."""

    values: Mapping[KeyPath, Mark] = field(default_factory=dict)
    keys: Mapping[KeyPath, Mark] = field(default_factory=dict)

    def at(self, path: KeyPath, *, key: bool = False) -> Mark | None:
        """The mark of ``path`` (its key, when ``key``), else of the nearest enclosing value."""
        if key and path in self.keys:
            return self.keys[path]
        for end in range(len(path), -1, -1):
            mark = self.values.get(path[:end])
            if mark is not None:
                return mark
        return None


class FieldError(ValueError):
    """A document that does not fit its declaration; the message is one line."""


class Invalid(ValueError):
    """Raised by a field's ``convert`` hook: the value (or the part ``at``) does not fit.

    Args:
        value: the offending value, shown as an excerpt (the whole field's value by default).
        at: where inside the field's value the offending part sits, for its line and column.
        wanted: what the field must be, when the field's own description is not the right one.
        problem: a whole problem sentence instead of ``must be <wanted>, got <value>``.
    """

    def __init__(
        self,
        value: object = ...,
        *,
        at: KeyPath = (),
        wanted: str = "",
        problem: str = "",
    ) -> None:
        super().__init__(problem or wanted or "invalid value")
        self.value = value
        self.at = at
        self.wanted = wanted
        self.problem = problem


class LoadError(ValueError):
    """A document's text that cannot be read: a syntax error, a duplicate key, NaN in JSON.

    ``syntax`` is true for text that is not JSON or YAML at all (callers keep their own
    wording for those, from ``detail``: the parser's own words); ``line``/``column`` are
    1-based where known, ``path`` the key path.
    """

    def __init__(
        self,
        problem: str,
        *,
        line: int | None = None,
        column: int | None = None,
        path: KeyPath = (),
        syntax: bool = False,
        detail: str = "",
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line
        self.column = column
        self.path = path
        self.syntax = syntax
        self.detail = detail or problem


def _one_line(message: str) -> str:
    """``message`` with any line break made a space (the excerpts inside keep their spaces)."""
    return _LINE_BREAKS.sub(" ", message)


def where_text(origin: str, mark: Mark | None) -> str:
    """``origin, line L column C`` (or just ``origin`` without a mark)."""
    if mark is None:
        return origin
    return f"{origin}, line {mark[0]} column {mark[1]}"


@dataclass(frozen=True)
class Source:
    """Where a document came from, and how its errors are made.

    Attributes:
        origin: the file or description every message starts with.
        marks: line and column of each key path, where the loader knows them.
        fix: appended to every problem with a value (``fix the scenario``).
        error: the exception class (or factory) raised, given the one-line message.
        label: said after the location, before the problem (``row 'h100-sxm'``).
        base: the path of the checked part inside the document the marks describe;
            messages name paths relative to it.
    """

    origin: str
    marks: Marks = field(default_factory=Marks)
    fix: str = ""
    error: Callable[[str], Exception] = FieldError
    label: str = ""
    base: KeyPath = ()

    def within(self, *, label: str | None = None, base: KeyPath | None = None) -> Source:
        """This source for one part of the document (a catalog row, a section)."""
        return dataclasses.replace(
            self,
            label=self.label if label is None else label,
            base=self.base if base is None else base,
        )

    def where(self, path: KeyPath = (), *, key: bool = False) -> str:
        """The message's start: origin, line and column of ``path``, label."""
        text = where_text(self.origin, self.marks.at(self.base + path, key=key))
        return f"{text}: {self.label}" if self.label else text

    def fail(
        self, path: KeyPath, problem: str, *, key: bool = False, fix: bool = True
    ) -> Exception:
        """The error for ``problem`` at ``path``, with this source's fix appended."""
        message = f"{self.where(path, key=key)}: {problem}"
        if fix and self.fix:
            message += f"; {self.fix}"
        return self.error(_one_line(message))

    def wrong(self, path: KeyPath, wanted: str, value: object, *, at: KeyPath = ()) -> Exception:
        """``'<path>' must be <wanted>, got <value>``, located at ``path + at``."""
        message = f"{self.where(path + at)}: {must_be(path, wanted, value)}"
        if self.fix:
            message += f"; {self.fix}"
        return self.error(_one_line(message))

    def unknown(self, path: KeyPath, valid: Sequence[str], noun: str = "key") -> Exception:
        """An unknown key at ``path``, naming the closest valid one."""
        return self.fail(path, unknown(path, valid, noun), key=True, fix=False)

    def missing(self, path: KeyPath, noun: str = "key") -> Exception:
        """A required key that ``path``'s mapping lacks."""
        return self.fail(path[:-1], lacks(path, noun))

    def loaded(self, exc: LoadError) -> Exception:
        """The error for what a loader refused (a duplicate key, a non-finite number)."""
        mark = (exc.line, exc.column or 1) if exc.line is not None else None
        text = where_text(self.origin, mark or self.marks.at(exc.path))
        if self.label:
            text += f": {self.label}"
        message = f"{text}: {exc.problem}"
        if self.fix:
            message += f"; {self.fix}"
        return self.error(_one_line(message))


# ---------------------------------------------------------------- declarations

_KIND_WORDS: dict[type, str] = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
    list: "a list",
    dict: "a mapping",
    object: "a value",
}


@dataclass(frozen=True)
class Field:
    """One key of a document: what its value must be, declared once.

    Attributes:
        name: the key.
        kind: ``int`` (never a bool), ``float`` (an int or a float, finite), ``str``,
            ``bool``, ``list``, ``dict`` (any mapping) or ``object`` (anything).
        wanted: how messages say what the value must be; derived from the rest when empty.
        minimum, maximum: the range of a number, inclusive unless ``above``/``below``.
        above: the minimum itself is refused (``a number above 0``).
        below: the maximum itself is refused.
        choices: the only values allowed.
        pattern: a regular expression a string must match in full.
        non_empty: a string must have more than white space, a list an item.
        finite: refuse NaN and infinity (numbers only).
        required: the key must be present.
        nullable: null is allowed (and checked no further).
        item: the field every list item must fit (its name is not used).
        document: the keys of a mapping value.
        values: the field every value of a mapping with free keys must fit.
        max_items: the most items a list (or entries a mapping) may have.
        accept: values taken as they are, before any check (a scenario's error markers).
        coerce: applied before the checks (an unquoted ``550`` made the text ``"550"``).
        convert: applied after the checks; may raise :class:`Invalid`.
    """

    name: str
    kind: type = object
    wanted: str = ""
    minimum: float | None = None
    maximum: float | None = None
    above: bool = False
    below: bool = False
    choices: tuple[Any, ...] = ()
    pattern: str = ""
    non_empty: bool = False
    finite: bool = True
    required: bool = False
    nullable: bool = False
    item: Field | None = None
    document: Document | None = None
    values: Field | None = None
    max_items: int | None = None
    accept: Callable[[Any], bool] | None = None
    coerce: Callable[[Any], Any] | None = None
    convert: Callable[[Any], Any] | None = None

    def describe(self) -> str:  # noqa: PLR0911 - a rule a line
        """What the value must be, as messages say it."""
        if self.wanted:
            return self.wanted
        if self.choices:
            return "one of " + ", ".join(str(choice) for choice in self.choices)
        if self.kind is int and (self.minimum is not None or self.maximum is not None):
            return "a whole number " + self._range_words(integer=True)
        if self.kind is float and (self.minimum is not None or self.maximum is not None):
            return "a number " + self._range_words(integer=False)
        if self.kind is str and self.non_empty:
            return "a non-empty string"
        if self.document is not None:
            return self.document.wanted
        return _KIND_WORDS.get(self.kind, f"a {self.kind.__name__}")

    def _range_words(self, *, integer: bool) -> str:
        low, high = self.minimum, self.maximum
        if low is not None and high is not None:
            if integer and not self.above and not self.below:
                return f"{_number_text(low)}-{_number_text(high)}"
            start = "above" if self.above else "from"
            end = "below" if self.below else "up to"
            return f"{start} {_number_text(low)} {end} {_number_text(high)}"
        if low is not None:
            return f"{'>' if self.above else '>='} {_number_text(low)}"
        return f"{'<' if self.below else '<='} {_number_text(high or 0)}"

    def check(self, value: object, source: Source, path: KeyPath) -> Any:  # noqa: ANN401
        """``value`` checked (and converted) against this field.

        Raises:
            source.error: one line naming where, the key path, what it must be and
                an excerpt of what it is.
        """
        if self.accept is not None and self.accept(value):
            return value
        if value is None:
            if self.nullable:
                return None
            raise source.wrong(path, self.describe(), value)
        original = value
        if self.coerce is not None:
            value = self.coerce(value)
        if not self._fits(value):
            raise source.wrong(path, self.describe(), original)
        if isinstance(value, list):
            value = self._check_items(value, source, path)
        elif isinstance(value, Mapping):
            value = self._check_mapping(value, source, path)
        if self.convert is not None:
            try:
                value = self.convert(value)
            except Invalid as exc:
                if exc.problem:
                    raise source.fail(path + exc.at, f"{quoted(path)} {exc.problem}") from None
                shown = original if exc.value is ... else exc.value
                raise source.wrong(path, exc.wanted or self.describe(), shown, at=exc.at) from None
        return value

    def _fits(self, value: object) -> bool:  # noqa: PLR0911 - a rule a line
        if not self._kind_fits(value):
            return False
        if isinstance(value, (int, float)) and not self._in_range(value):
            return False
        if self.choices and value not in self.choices:
            return False
        if isinstance(value, str):
            if self.non_empty and not value.strip():
                return False
            if self.pattern and re.fullmatch(self.pattern, value) is None:
                return False
        if isinstance(value, (list, Mapping)):
            if self.non_empty and not value:
                return False
            if self.max_items is not None and len(value) > self.max_items:
                return False
        return True

    def _kind_fits(self, value: object) -> bool:
        kind = self.kind
        if kind is object:
            return True
        if kind is int:
            return is_int(value)
        if kind is float:
            if self.finite:
                return is_number(value)
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind is dict:
            return isinstance(value, Mapping)
        return isinstance(value, kind)

    def _in_range(self, value: float) -> bool:
        low, high = self.minimum, self.maximum
        if low is not None and (value <= low if self.above else value < low):
            return False
        return not (high is not None and (value >= high if self.below else value > high))

    def _check_items(self, items: list[Any], source: Source, path: KeyPath) -> list[Any]:
        if self.item is None:
            return items
        return [self.item.check(item, source, (*path, index)) for index, item in enumerate(items)]

    def _check_mapping(
        self, data: Mapping[Any, Any], source: Source, path: KeyPath
    ) -> Mapping[Any, Any]:
        if self.document is not None:
            return self.document.check(data, source, path)
        if self.values is not None:
            values = self.values
            return {
                key: values.check(item, source, (*path, str(key))) for key, item in data.items()
            }
        return data


@dataclass(frozen=True)
class Document:
    """The keys of a mapping: a document, or a section of one.

    Attributes:
        fields: the keys, in the order messages list them.
        closed: a key not declared is an error (naming the closest declared one).
        noun: what the document calls its keys in messages (``key``, ``field``, ``variable``).
        wanted: what a value that is no mapping at all must be.
    """

    fields: tuple[Field, ...]
    closed: bool = True
    noun: str = "key"
    wanted: str = "a mapping"
    _index: dict[str, Field] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {f.name: f for f in self.fields})

    @property
    def names(self) -> tuple[str, ...]:
        """The declared keys, in order."""
        return tuple(self._index)

    def field(self, name: str) -> Field | None:
        """The declaration of key ``name``, if there is one."""
        return self._index.get(name)

    def check_keys(self, data: object, source: Source, path: KeyPath = ()) -> Mapping[Any, Any]:
        """``data`` when it is a mapping with no unknown and no missing key.

        Raises:
            source.error: not a mapping, an unknown key (with did-you-mean) or a missing one.
        """
        if not isinstance(data, Mapping):
            raise source.wrong(path, self.wanted, data)
        if self.closed:
            for key in data:
                if not isinstance(key, str) or key not in self._index:
                    raise source.unknown((*path, str(key)), self.names, self.noun)
        for declared in self.fields:
            if declared.required and declared.name not in data:
                raise source.missing((*path, declared.name), self.noun)
        return data

    def check(self, data: object, source: Source, path: KeyPath = ()) -> dict[str, Any]:
        """The keys of ``data`` that are given, each checked and converted, in document order.

        Raises:
            source.error: the first problem, as one line.
        """
        mapping = self.check_keys(data, source, path)
        out: dict[str, Any] = {}
        for key, value in mapping.items():
            declared = self._index.get(key) if isinstance(key, str) else None
            checked = value if declared is None else declared.check(value, source, (*path, key))
            out[str(key)] = checked
        return out


# ---------------------------------------------------------------- JSON


class _Duplicated(dict):  # type: ignore[type-arg]
    """A JSON object that had a key twice (only while loading)."""

    duplicate: str = ""


class _NonFinite:
    """NaN, Infinity or a number too large for a float (only while loading)."""

    def __init__(self, text: str) -> None:
        self.text = text


def load_json(text: str | bytes) -> Any:  # noqa: ANN401 - JSON is any shape
    """Parse JSON, refusing what ``json.loads`` lets through: duplicate keys, NaN, Infinity.

    Raises:
        LoadError: with ``syntax`` set, line and column for text that is not JSON; with
            the key path for a duplicate key or a number that is not finite.
    """
    trouble: list[bool] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) == len(items):
            return obj
        seen: set[str] = set()
        duplicate = ""
        for key, _ in items:
            if key in seen:
                duplicate = key
                break
            seen.add(key)
        trouble.append(True)
        marked = _Duplicated(obj)
        marked.duplicate = duplicate
        return marked

    def constant(name: str) -> _NonFinite:
        trouble.append(True)
        return _NonFinite(name)

    def number(literal: str) -> float | _NonFinite:
        value = float(literal)
        if math.isfinite(value):
            return value
        trouble.append(True)
        return _NonFinite(literal)

    try:
        data = json.loads(
            text, object_pairs_hook=pairs, parse_constant=constant, parse_float=number
        )
    except json.JSONDecodeError as exc:
        raise LoadError(
            f"invalid JSON ({exc.msg})",
            line=exc.lineno,
            column=exc.colno,
            syntax=True,
            detail=exc.msg,
        ) from None
    except RecursionError:
        raise LoadError("invalid JSON (nested too deep)", syntax=True) from None
    except ValueError as exc:  # an integer with more digits than Python converts
        raise LoadError(f"invalid JSON ({one_line(exc, 80)})", syntax=True) from None
    if trouble:
        _raise_trouble(data)
    return data


def _raise_trouble(data: object) -> None:
    """The first duplicate key or non-finite number, in document order, as a LoadError."""
    stack: list[tuple[KeyPath, object]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _NonFinite):
            raise LoadError(must_be(path, "a finite number", float(value.text)), path=path)
        if isinstance(value, _Duplicated):
            where = (*path, value.duplicate)
            raise LoadError(f"duplicate key {quoted(where)}", path=path)
        if isinstance(value, dict):
            stack.extend(reversed([((*path, key), item) for key, item in value.items()]))
        elif isinstance(value, list):
            stack.extend(reversed([((*path, index), item) for index, item in enumerate(value)]))


__all__ = [
    "Document",
    "Field",
    "FieldError",
    "Invalid",
    "LoadError",
    "Marks",
    "Source",
    "child_path",
    "excerpt",
    "got",
    "is_int",
    "is_number",
    "lacks",
    "load_json",
    "must_be",
    "quoted",
    "render_path",
    "suggest",
    "unknown",
    "where_text",
]
