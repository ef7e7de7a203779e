"""nvcc, cuDNN and /proc/driver/nvidia/version parsers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from validator.model import Reason, Unavailable
from validator.node.parsers.base import ParseError
from validator.node.parsers.cudnn import parse_cudnn_header, parse_cudnn_packages
from validator.node.parsers.nvcc import parse_nvcc_version
from validator.node.parsers.proc_version import parse_proc_driver_version

FIXTURES = Path(__file__).parent.parent / "fixtures" / "parsers"


def _fixtures(prefix: str) -> list[Path]:
    found = sorted(FIXTURES.glob(f"{prefix}-*.json"))
    assert found
    return found


@pytest.mark.parametrize("fixture", _fixtures("nvcc"), ids=lambda p: p.stem)
def test_nvcc_fixture(fixture: Path, captures_dir: Path) -> None:
    case = json.loads(fixture.read_text())
    text = (captures_dir / case["capture"]).read_text()
    assert parse_nvcc_version(text) == case["expected"]["version"]


@pytest.mark.parametrize("fixture", _fixtures("cudnn-header"), ids=lambda p: p.stem)
def test_cudnn_header_fixture(fixture: Path, captures_dir: Path) -> None:
    case = json.loads(fixture.read_text())
    text = (captures_dir / case["capture"]).read_text()
    assert parse_cudnn_header(text) == case["expected"]["version"]


@pytest.mark.parametrize("fixture", _fixtures("cudnn-dpkg"), ids=lambda p: p.stem)
def test_cudnn_package_fixture(fixture: Path, captures_dir: Path) -> None:
    case = json.loads(fixture.read_text())
    text = (captures_dir / case["capture"]).read_text()
    expected = case["expected"]
    assert parse_cudnn_packages(text) == (expected["version"], expected["cuda_major"])


# Documented nvcc 12.x/13.0 output shapes (SOURCES.md notes: build ids, 12-hour clock).
NVCC_13 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Jul_16_07:30:01_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.48
Build cuda_13.0.r13.0/compiler.36260728_0
"""


def test_nvcc_variants() -> None:
    assert parse_nvcc_version(NVCC_13) == "13.0.48"
    assert parse_nvcc_version("Cuda compilation tools, release 12.4, V12.4.131\n") == "12.4.131"
    with pytest.raises(ParseError, match="Cuda compilation tools"):
        parse_nvcc_version("bash: nvcc: command not found\n")
    with pytest.raises(ParseError):
        parse_nvcc_version("")
    with pytest.raises(ParseError, match=r"release 12\.4"):
        parse_nvcc_version("Cuda compilation tools, release 12.4, V11.8.89\n")


def test_cudnn_header_missing_define() -> None:
    with pytest.raises(ParseError, match="CUDNN_PATCHLEVEL"):
        parse_cudnn_header("#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 6\n")
    with pytest.raises(ParseError):
        parse_cudnn_header("")


@pytest.mark.parametrize(
    ("listing", "expected"),
    [
        ("libcudnn9-cuda-12 9.6.0.74-1\nlibcudnn9-dev-cuda-12 9.6.0.74-1\n", ("9.6.0", 12)),
        ("cudnn9-cuda-12 9.6.0.74-1\n", ("9.6.0", 12)),
        ("cudnn9-cuda-12-6 9.6.0.74-1\n", ("9.6.0", 12)),
        ("libcudnn8 8.9.7.29-1+cuda12.2\n", ("8.9.7", 12)),
        ("libcudnn8-8.9.7.29-1.cuda12.2.x86_64\n", ("8.9.7", 12)),
        ("libcudnn9-cuda-11-9.1.0.70-1.x86_64\n", ("9.1.0", 11)),
        (
            "ii  libcudnn9-cuda-12   9.6.0.74-1   amd64   cuDNN runtime libraries for CUDA 12.6\n",
            ("9.6.0", 12),
        ),
    ],
)
def test_cudnn_package_forms(listing: str, expected: tuple[str, int]) -> None:
    assert parse_cudnn_packages(listing) == expected


def test_cudnn_packages_absent_or_removed() -> None:
    for listing in ("", "rc  libcudnn8   8.3.2.44-1+cuda11.5   amd64   cuDNN runtime\n"):
        version, cuda = parse_cudnn_packages(listing)
        assert isinstance(version, Unavailable)
        assert version.reason == Reason.NOT_MEASURED
        assert isinstance(cuda, Unavailable)
    version, cuda = parse_cudnn_packages("libcudnn 7.6.5.32-1\n")
    assert version == "7.6.5"
    assert isinstance(cuda, Unavailable)


# The documented /proc/driver/nvidia/version formats (no capture of it exists in the corpus).
PROC_PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
PROC_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Fri May 31 09:30:47 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
PROC_AARCH64 = (
    "NVRM version: NVIDIA UNIX aarch64 Kernel Module  535.161.07  Sat Feb 17 22:51:54 UTC 2024\n"
)
PROC_OPEN_AARCH64 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.124.06  Release Build  "
    "(dvs-builder@U16-I3-C04-1)  Wed Feb 26 01:26:44 UTC 2025\n"
)


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (PROC_PROPRIETARY, "550.90.07"),
        (PROC_OPEN, "550.90.07"),
        (PROC_AARCH64, "535.161.07"),
        (PROC_OPEN_AARCH64, "570.124.06"),
    ],
)
def test_proc_driver_version(text: str, version: str) -> None:
    assert parse_proc_driver_version(text) == version


@pytest.mark.parametrize("text", ["", "GCC version:  gcc version 12.3.0\n", "NVRM version: \n"])
def test_proc_driver_version_malformed(text: str) -> None:
    with pytest.raises(ParseError, match="NVRM version"):
        parse_proc_driver_version(text)
