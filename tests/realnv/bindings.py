"""The project's ctypes bindings, found mechanically: a binding added later is checked too.

- **Function tables**: every module-level ``*_FUNCTIONS`` dict of ``name: (restype,
  argtypes)`` in ``validator`` (``CUDART_FUNCTIONS``, ``NCCL_FUNCTIONS``, ...); the prefix
  of the table's name says its library.
- **Constants**: every module-level integer of a module that imports ctypes whose name is a
  header's (``CUBLAS_COMPUTE_32F``), or that its module's ``HEADER_NAMES`` maps to one
  (``MEMCPY_HOST_TO_DEVICE: cudaMemcpyHostToDevice``); a module-level ``{int: "NAME"}``
  dict of header names (``CUBLAS_STATUS_NAMES``).
- **NVML**: every ``const("NVML_...", default)`` call's default, every ``NVML_... = n`` of
  the fake NVML, and every ``"nvml..."`` function name the code passes as a string.
- **Structs**: every ``ctypes.Structure`` subclass, named for its C type by ``_c_name_`` or
  as pynvml names them (``c_nvmlGpuFabricInfo_t``).
"""

from __future__ import annotations

import ast
import ctypes
import importlib
import pkgutil
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import validator

ROOT = Path(validator.__file__).resolve().parent
# The library each table's name starts with.
TABLE_LIBRARIES = {"CUDART": "cudart", "CUBLAS": "cublas", "NCCL": "nccl"}


def modules() -> Iterator[ModuleType]:
    """Every module of the validator package that imports ctypes (the bindings live there)."""
    for info in pkgutil.walk_packages([str(ROOT)], prefix="validator."):
        path = ROOT / Path(*info.name.split(".")[1:])
        source = path.with_suffix(".py") if not info.ispkg else path / "__init__.py"
        if source.is_file() and "ctypes" in source.read_text(encoding="utf-8"):
            yield importlib.import_module(info.name)


@dataclass(frozen=True)
class Table:
    """One function table: where it is, its library, its entries."""

    where: str  # module.NAME
    library: str
    functions: dict[str, tuple[Any, list[Any]]]


def tables() -> list[Table]:
    """Every ``*_FUNCTIONS`` table of the validator package."""
    found = []
    for module in modules():
        for name, value in vars(module).items():
            if not (name.endswith("_FUNCTIONS") and isinstance(value, dict) and value):
                continue
            prefix = name.split("_")[0]
            library = TABLE_LIBRARIES.get(prefix)
            assert library is not None, (
                f"{module.__name__}.{name}: no library known for the prefix {prefix}: "
                "name it in tests/realnv/bindings.py TABLE_LIBRARIES, with its header"
            )
            found.append(Table(f"{module.__name__}.{name}", library, value))
    return found


def constants(header_names: set[str]) -> list[tuple[str, str, int]]:
    """(where, header name, the project's value) of every constant a header also names."""
    found = []
    for module in modules():
        mapped: dict[str, str] = getattr(module, "HEADER_NAMES", {})
        for name, value in vars(module).items():
            if not name.isupper() or isinstance(value, bool):
                continue
            if isinstance(value, int):
                header_name = mapped.get(name, name)
                if header_name in header_names or name in mapped:
                    found.append((f"{module.__name__}.{name}", header_name, value))
            elif isinstance(value, dict) and value and all(
                isinstance(k, int) and isinstance(v, str) and v in header_names
                for k, v in value.items()
            ):
                found += [(f"{module.__name__}.{name}[{k}]", v, k) for k, v in value.items()]
    return found


def _sources() -> Iterator[tuple[Path, ast.AST]]:
    for path in sorted(ROOT.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def nvml_constants() -> list[tuple[str, str, int]]:
    """(where, name, value) of every NVML constant the code assumes a value of."""
    found = []
    for path, tree in _sources():
        where = str(path.relative_to(ROOT.parent))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name not in ("_const", "const"):
                    continue
                literals = [a for a in node.args if isinstance(a, ast.Constant)]
                strings = [a.value for a in literals if isinstance(a.value, str)]
                numbers = [a.value for a in literals if isinstance(a.value, int)]
                if strings and numbers and strings[0].startswith("NVML_"):
                    found.append((f"{where}:{node.lineno}", strings[0], numbers[-1]))
            elif isinstance(node, ast.Tuple):
                # ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT", 2): a name and its value
                items = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                names = [v for v in items if isinstance(v, str) and v.startswith("NVML_")]
                numbers = [v for v in items if isinstance(v, int) and not isinstance(v, bool)]
                if len(names) == 1 and len(numbers) == 1:
                    found.append((f"{where}:{node.lineno}", names[0], numbers[0]))
            elif isinstance(node, ast.Assign) and path.name == "fake_nvml.py":
                value = node.value.value if isinstance(node.value, ast.Constant) else None
                if not isinstance(value, int) or isinstance(value, bool):
                    continue
                for target in node.targets:
                    named = getattr(target, "id", "")
                    if named.startswith("NVML_"):
                        found.append((f"{where}:{node.lineno}", named, value))
    return found


_NVML_FUNCTION = re.compile(r"nvml[A-Z][A-Za-z0-9_]+(?<!_t)")  # not a type (nvmlMemory_t)


def nvml_functions() -> dict[str, str]:
    """Every NVML function the code calls by name: name -> where first."""
    found: dict[str, str] = {}
    for path, tree in _sources():
        if path.name == "fake_nvml.py":
            continue  # the fake defines them; the adapter is what calls them
        for node in ast.walk(tree):
            named = node.value if isinstance(node, ast.Constant) else None
            if isinstance(named, str) and _NVML_FUNCTION.fullmatch(named):
                found.setdefault(named, f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    return found


def structs() -> list[tuple[str, str, type[ctypes.Structure]]]:
    """(where, C type name, class) of every ctypes.Structure of the validator package."""
    found = []
    for module in modules():
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, ctypes.Structure):
                if value.__module__ != module.__name__:
                    continue
                c_name = getattr(value, "_c_name_", None) or (
                    name[2:] if name.startswith("c_") else None
                )
                assert c_name, f"{module.__name__}.{name}: set _c_name_ to its C type's name"
                found.append((f"{module.__name__}.{name}", c_name, value))
    return found


_CODES = {
    **dict.fromkeys("fdg", "float"),
    **dict.fromkeys("bhilqc", "int"),
    **dict.fromkeys("BHILQ?", "uint"),
}


def ctypes_shape(kind: Any) -> tuple[str, int, Any]:
    """(kind, size, pointee) of a ctypes type, as tests/realnv/headers.CType has them."""
    if kind is None:
        return "void", 0, None
    pointer = ctypes.sizeof(ctypes.c_void_p)
    if kind in (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_wchar_p):
        return "pointer", pointer, ctypes.c_char if kind is ctypes.c_char_p else None
    if isinstance(kind, type) and issubclass(kind, ctypes._Pointer):
        return "pointer", pointer, kind._type_
    return _CODES.get(getattr(kind, "_type_", ""), "record"), ctypes.sizeof(kind), None
