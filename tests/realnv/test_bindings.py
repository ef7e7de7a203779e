"""Every ctypes binding of the project against NVIDIA's real headers and libraries.

The headers are parsed with libclang: CUDA 12/13 from PyPI's wheels, CUDA 11.8 and its
NVML header from Debian 12's non-free archive. Each function table's prototypes, each
constant, each NVML constant and function name, and each struct layout is found in the
code mechanically (tests/realnv/bindings.py): one added later is checked with no edit here.
The symbols are resolved in the real libraries with the same loader the code uses.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.realnv import bindings
from tests.realnv.headers import CType, Header, merged, parse
from tests.realnv.software import DebianCuda, DebianNvidia, PypiCuda


@dataclass(frozen=True)
class Toolkit:
    """One CUDA's headers and libraries, by library: cudart, cublas, nccl, nvml."""

    name: str
    headers: dict[str, Header]
    libraries: dict[str, Path]


def _pypi_toolkit(pypi: PypiCuda) -> Toolkit:
    runtime = pypi.part("cuda_runtime") / "include"
    includes = (runtime, pypi.part("cuda_nvcc") / "include", pypi.part("cuda_cccl") / "include")
    return Toolkit(
        "CUDA 12.9 (PyPI)",
        {
            "cudart": parse(runtime / "cuda_runtime_api.h", includes),
            # cublas_v2.h defines CUBLASAPI and includes cublas_api.h, as a program does
            "cublas": parse(pypi.part("cublas") / "include/cublas_v2.h", includes),
            "nccl": parse(pypi.part("nccl") / "include/nccl.h", includes),
            "nvml": parse(pypi.part("cu13") / "include/nvml.h", includes),
        },
        {
            "cudart": pypi.part("cuda_runtime") / "lib/libcudart.so.12",
            "cublas": pypi.part("cublas") / "lib/libcublas.so.12",
            "nccl": pypi.part("nccl") / "lib/libnccl.so.2",
        },
    )


def _debian_toolkit(cuda: DebianCuda, driver: DebianNvidia) -> Toolkit:
    include = cuda.include_dir
    return Toolkit(
        "CUDA 11.8 (Debian 12)",
        {
            "cudart": parse(include / "cuda_runtime_api.h", (include,)),
            "cublas": parse(include / "cublas_v2.h", (include,)),
            "nvml": parse(include / "nvml.h", (include,)),
        },
        {
            "cudart": cuda.lib_dir / "libcudart.so.11.0",
            "cublas": cuda.lib_dir / "libcublas.so.11",
            "nvml": driver.lib_dir / "libnvidia-ml.so.1",
        },
    )


@pytest.fixture(scope="module", params=["pypi", "debian"])
def toolkit(request: pytest.FixtureRequest) -> Toolkit:
    if request.param == "pypi":
        return _pypi_toolkit(request.getfixturevalue("pypi"))
    return _debian_toolkit(
        request.getfixturevalue("debian_cuda11"), request.getfixturevalue("debian_driver")
    )


def _agrees(ours: object, theirs: CType) -> str | None:
    """Why the ctypes type ``ours`` does not fit the header's type, or None when it does."""
    kind, size, pointee = bindings.ctypes_shape(ours)
    if theirs.kind == "enum" and kind in ("int", "uint"):
        kind = "enum"  # an enum travels as an integer of its size, either signedness
    if (kind, size) != (theirs.kind, theirs.size):
        return f"{kind}{size * 8} for {theirs}"
    if kind == "pointer" and pointee is not None and theirs.pointee is not None:
        inner = _agrees(pointee, theirs.pointee)
        if inner is not None:
            return f"a pointer to {inner}"
    return None


def _functions(toolkit: Toolkit) -> Iterator[tuple[str, str, tuple[object, list[object]], Header]]:
    for table in bindings.tables():
        header = toolkit.headers.get(table.library)
        if header is None:
            continue  # this toolkit ships no such library (NCCL is not in Debian's CUDA)
        for name, prototype in table.functions.items():
            yield table.where, name, prototype, header


def test_every_prototype_matches_the_header(toolkit: Toolkit) -> None:
    checked, wrong = 0, []
    for where, name, (restype, argtypes), header in _functions(toolkit):
        declared = header.functions.get(name)
        if declared is None:
            # an *_OPTIONAL_FUNCTIONS table's entry is newer than some toolkits
            if "_OPTIONAL_" not in where:
                wrong.append(f"{where}: {name} is not declared in {header.path.name}")
            continue
        checked += 1
        if len(argtypes) != len(declared.params):
            wrong.append(
                f"{where}: {name} takes {len(declared.params)} arguments, not {len(argtypes)}"
            )
            continue
        why = _agrees(restype, declared.result)
        if why is not None:
            wrong.append(f"{where}: {name} returns {why}")
        for position, (ours, theirs) in enumerate(zip(argtypes, declared.params), 1):
            why = _agrees(ours, theirs)
            if why is not None:
                wrong.append(f"{where}: {name} argument {position} is {why}")
    assert not wrong, f"{toolkit.name}:\n" + "\n".join(wrong)
    assert checked >= 30, f"only {checked} prototypes found to check"


def test_every_symbol_resolves_in_the_real_library(toolkit: Toolkit) -> None:
    from validator.node.burnin.cuda_libs import load_library

    loaded = {name: load_library(str(path)) for name, path in toolkit.libraries.items()}
    missing = []
    for where, name, _, header in _functions(toolkit):
        library = next(lib for lib, h in toolkit.headers.items() if h is header)
        known = library in loaded and name in header.functions
        if known and not hasattr(loaded[library], name):
            missing.append(f"{where}: {name} is not in {toolkit.libraries[library].name}")
    assert not missing, "\n".join(missing)


def test_every_constant_has_the_headers_value(toolkit: Toolkit) -> None:
    everything = merged(list(toolkit.headers.values()))
    found = bindings.constants(set(everything.constants))
    wrong = [
        f"{where}: {value}, but {name} is {everything.constants[name]}"
        for where, name, value in found
        if name in everything.constants and everything.constants[name] != value
    ]
    unknown = [f"{where}: {name} is in no header" for where, name, _ in found
               if name not in everything.constants]  # fmt: skip
    assert not wrong, f"{toolkit.name}:\n" + "\n".join(wrong)
    if toolkit.name.startswith("CUDA 12"):  # every library's header is here (NCCL too)
        assert not unknown, f"{toolkit.name}:\n" + "\n".join(unknown)
    assert len(found) >= 20, f"only {len(found)} constants found to check"


def test_every_nvml_constant_the_code_assumes_is_nvml_hs(toolkit: Toolkit) -> None:
    if not toolkit.name.startswith("CUDA 12"):
        # NVML keeps its values; only its limits grow (NVML_NVLINK_MAX_LINKS 12, 18, 36),
        # and the code follows the newest driver's.
        pytest.skip("NVML's constants are held to its newest header")
    header = toolkit.headers["nvml"]
    found = bindings.nvml_constants()
    wrong = [
        f"{where}: {name} = {value}, but nvml.h says {header.constants[name]}"
        for where, name, value in found
        if name in header.constants and header.constants[name] != value
    ]
    assert not wrong, f"{toolkit.name}:\n" + "\n".join(wrong)
    assert len(found) >= 40, f"only {len(found)} NVML constants found"


def test_every_nvml_function_called_is_declared_and_resolves(toolkit: Toolkit) -> None:
    header = toolkit.headers["nvml"]
    called = bindings.nvml_functions()
    newest = toolkit.name.startswith("CUDA 12")  # with NVML's CUDA 13 header
    undeclared = [f"{where}: {name}" for name, where in called.items()
                  if header.function(name) is None]  # fmt: skip
    if newest:  # the newest header declares every function the code calls
        assert not undeclared, "not in nvml.h:\n" + "\n".join(undeclared)
    library = toolkit.libraries.get("nvml")
    if library is not None:  # Debian's 535 driver: every function its era's header declares
        nvml = ctypes.CDLL(str(library))
        absent = [
            name
            for name in called
            if header.function(name) is not None and not hasattr(nvml, header.symbol(name))
        ]
        assert not absent, f"declared in {toolkit.name}'s nvml.h but not in the driver: {absent}"


def test_every_struct_has_the_headers_layout(toolkit: Toolkit) -> None:
    everything = merged(list(toolkit.headers.values()))
    found = bindings.structs()
    assert found, "no ctypes struct found in the validator package"
    wrong, checked = [], 0
    for where, c_name, struct in found:
        record = everything.records.get(c_name)
        if record is None:
            continue  # an older toolkit without it (fabric info came with CUDA 12)
        checked += 1
        size, fields = record
        ours = [(name, getattr(struct, name).offset, getattr(struct, name).size)
                for name, *_ in struct._fields_]  # fmt: skip
        theirs = [(f.name, f.offset, f.size) for f in fields]
        if ours != theirs or ctypes.sizeof(struct) != size:
            wrong.append(f"{where}: {ours} ({ctypes.sizeof(struct)} bytes), "
                         f"but {c_name} is {theirs} ({size} bytes)")  # fmt: skip
    assert not wrong, f"{toolkit.name}:\n" + "\n".join(wrong)
    if toolkit.name.startswith("CUDA 12"):  # the newest header declares every one
        assert checked == len(found), f"{len(found) - checked} structs are in no header"
