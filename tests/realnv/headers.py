"""What NVIDIA's real headers declare, read with libclang (PyPI's ``libclang``).

A header is parsed as C++ the way a host compiler sees it; what is kept is what the
project's ctypes bindings must agree with: each function's return and parameter types
(canonical: typedefs and enums resolved to what they are in memory), each enum
constant's and each integer macro's value, and each struct's fields with their offsets
and sizes.
"""

from __future__ import annotations

import functools
import glob
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import clang.cindex as ci

# The host compiler's own headers (stddef.h, stdint.h): libclang's wheel has none.
GCC_INCLUDES = sorted(glob.glob("/usr/lib/gcc/x86_64-linux-gnu/*/include"))


@dataclass(frozen=True)
class CType:
    """A C type as memory holds it: pointer, signed or unsigned integer, floating, void."""

    kind: str  # "pointer", "int", "uint", "enum", "float", "void", "record"
    size: int  # bytes; 0 for void
    pointee: CType | None = None  # what a pointer points at (None: void or opaque)
    spelling: str = ""

    def __str__(self) -> str:
        return self.spelling or f"{self.kind}{self.size * 8}"


@dataclass(frozen=True)
class Function:
    """A declared function: its return type and parameter types."""

    name: str
    result: CType
    params: tuple[CType, ...]


@dataclass(frozen=True)
class Field:
    """A struct field: its name, byte offset and size."""

    name: str
    offset: int
    size: int


@dataclass
class Header:
    """What one header (and what it includes) declares."""

    path: Path
    functions: dict[str, Function] = field(default_factory=dict)
    constants: dict[str, int] = field(default_factory=dict)  # enum constants and int macros
    records: dict[str, tuple[int, tuple[Field, ...]]] = field(default_factory=dict)  # size, fields
    aliases: dict[str, str] = field(default_factory=dict)  # #define nvmlInit nvmlInit_v2

    def function(self, name: str) -> Function | None:
        """The function ``name`` declares, through a versioning macro where it is one."""
        return self.functions.get(name) or self.functions.get(self.aliases.get(name, ""))

    def symbol(self, name: str) -> str:
        """The library symbol a call of ``name`` binds to (``nvmlInit`` is ``nvmlInit_v2``)."""
        return self.aliases.get(name, name) if name not in self.functions else name


_SIGNED = {
    ci.TypeKind.CHAR_S, ci.TypeKind.SCHAR, ci.TypeKind.SHORT, ci.TypeKind.INT,
    ci.TypeKind.LONG, ci.TypeKind.LONGLONG, ci.TypeKind.WCHAR,
}  # fmt: skip
_UNSIGNED = {
    ci.TypeKind.BOOL, ci.TypeKind.CHAR_U, ci.TypeKind.UCHAR, ci.TypeKind.USHORT,
    ci.TypeKind.UINT, ci.TypeKind.ULONG, ci.TypeKind.ULONGLONG,
}  # fmt: skip
_FLOATING = {ci.TypeKind.FLOAT, ci.TypeKind.DOUBLE, ci.TypeKind.LONGDOUBLE}


def _number_kind(kind: ci.TypeKind) -> str | None:
    if kind in _SIGNED:
        return "int"
    if kind in _UNSIGNED:
        return "uint"
    return "float" if kind in _FLOATING else None


def c_type(clang_type: ci.Type, depth: int = 0) -> CType:
    """A libclang type as memory holds it."""
    canonical = clang_type.get_canonical()
    kind = canonical.kind
    spelling = clang_type.spelling
    if kind == ci.TypeKind.VOID:
        return CType("void", 0, spelling=spelling)
    if kind == ci.TypeKind.POINTER:
        target = canonical.get_pointee()
        pointee = None
        if depth < 2 and target.get_canonical().kind not in (ci.TypeKind.VOID, ci.TypeKind.RECORD):
            pointee = c_type(target, depth + 1)
        return CType("pointer", canonical.get_size(), pointee, spelling)
    if kind == ci.TypeKind.ENUM:
        # An unfixed enum's signedness is the compiler's choice; its size and values are not.
        return CType("enum", canonical.get_size(), spelling=spelling)
    number = _number_kind(kind)
    if number is not None:
        return CType(number, canonical.get_size(), spelling=spelling)
    return CType("record", max(canonical.get_size(), 0), spelling=spelling)


def _macro_value(cursor: ci.Cursor) -> int | None:
    """An object-like macro's integer value (``#define X 1``, ``(0x01)``, ``-1``); else None."""
    tokens = [token.spelling for token in cursor.get_tokens()][1:]
    text = "".join(token for token in tokens if token not in ("(", ")"))
    text = text.rstrip("uUlL") if text[:1].isdigit() or text[:2] in ("-0", "-1") else text
    try:
        return int(text, 0)
    except ValueError:
        return None


@functools.cache
def parse(path: Path, include_dirs: tuple[Path, ...]) -> Header:
    """Everything ``path`` declares, its includes found in ``include_dirs``.

    Raises:
        AssertionError: the header does not parse (a missing include, a compile error).
    """
    args = ["-x", "c++", "-std=c++17", *(f"-I{d}" for d in include_dirs)]
    for gcc in GCC_INCLUDES:
        args += ["-isystem", gcc]
    index = ci.Index.create()
    unit = index.parse(
        str(path),
        args=args,
        options=ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES
        | ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD,
    )
    errors = [str(d) for d in unit.diagnostics if d.severity >= ci.Diagnostic.Error]
    assert not errors, f"{path.name} does not parse: {errors[:3]}"
    header = Header(path)
    for cursor in unit.cursor.walk_preorder():
        kind = cursor.kind
        if kind == ci.CursorKind.FUNCTION_DECL:
            header.functions[cursor.spelling] = Function(
                cursor.spelling,
                c_type(cursor.result_type),
                tuple(c_type(arg.type) for arg in cursor.get_arguments()),
            )
        elif kind == ci.CursorKind.ENUM_CONSTANT_DECL:
            header.constants[cursor.spelling] = cursor.enum_value
        elif kind == ci.CursorKind.MACRO_DEFINITION and not cursor.spelling.startswith("_"):
            value = _macro_value(cursor)
            if value is not None:
                header.constants.setdefault(cursor.spelling, value)
            tokens = [token.spelling for token in cursor.get_tokens()]
            if len(tokens) == 2 and tokens[1].isidentifier():
                header.aliases[cursor.spelling] = tokens[1]
        elif kind == ci.CursorKind.TYPEDEF_DECL:
            underlying = cursor.underlying_typedef_type.get_canonical()
            if underlying.kind == ci.TypeKind.RECORD:
                header.records[cursor.spelling] = _record(underlying)
        elif kind == ci.CursorKind.STRUCT_DECL and cursor.spelling and cursor.is_definition():
            header.records.setdefault(cursor.spelling, _record(cursor.type))
    return header


def _record(record_type: ci.Type) -> tuple[int, tuple[Field, ...]]:
    fields = tuple(
        Field(item.spelling, item.get_field_offsetof() // 8, item.type.get_size())
        for item in record_type.get_fields()
    )
    return record_type.get_size(), fields


def merged(headers: Sequence[Header]) -> Header:
    """One view of several headers: a later one's declarations after an earlier one's."""
    out = Header(headers[0].path if headers else Path())
    for header in headers:
        out.functions.update(header.functions)
        for name, value in header.constants.items():
            out.constants.setdefault(name, value)
        out.records.update(header.records)
        out.aliases.update(header.aliases)
    return out
