"""Find the cuDNN version from its header or from the package list."""

from __future__ import annotations

import re

from validator.model import NOT_MEASURED, Measured, Reason, Unavailable
from validator.node.parsers.base import ParseError

_DEFINE = re.compile(r"^\s*#\s*define\s+CUDNN_(MAJOR|MINOR|PATCHLEVEL)\s+(\d+)\s*$", re.M)


def parse_cudnn_header(text: str) -> str:
    """The cuDNN version from cudnn_version.h (or cudnn.h before 8.0).

    Reads the MAJOR/MINOR/PATCHLEVEL defines, not CUDNN_VERSION, whose multiplier
    changed in cuDNN 9 (MAJOR*10000, was *1000).

    Args:
        text: the header, or the lines ``grep CUDNN_MAJOR -A 2`` kept of it.

    Returns:
        "MAJOR.MINOR.PATCHLEVEL", e.g. "9.6.0".

    Raises:
        ParseError: one of the three defines is missing.
    """
    parts = dict(_DEFINE.findall(text))
    missing = [name for name in ("MAJOR", "MINOR", "PATCHLEVEL") if name not in parts]
    if missing:
        raise ParseError(f"cuDNN header lacks #define CUDNN_{missing[0]}")
    return f"{int(parts['MAJOR'])}.{int(parts['MINOR'])}.{int(parts['PATCHLEVEL'])}"


# Package names: libcudnn8, libcudnn8-dev, libcudnn9-cuda-12, libcudnn9-dev-cuda-12,
# cudnn9-cuda-12 and cudnn9-cuda-12-6 (meta packages), cudnn (meta).
_NAME = re.compile(r"^(lib)?cudnn(\d*)((?:-[a-z]+)*?)(?:-cuda-(\d+)(?:-\d+)?)?$")
# dpkg -l: "ii  libcudnn8  8.3.2.44-1+cuda11.5  amd64  cuDNN runtime libraries"
_DPKG_L = re.compile(r"^([a-zA-Z]{2,3})\s+(\S+?)(?::\S+)?\s+(\S+)\s")
# rpm -qa: "libcudnn8-8.9.7.29-1.cuda12.2.x86_64", "libcudnn9-cuda-12-9.6.0.74-1.x86_64"
_RPM = re.compile(
    r"^(\S*?cudnn\S*?)-(\d+\.\d+\.\d+[^-\s]*)-(\S+?)(?:\.(?:x86_64|aarch64|ppc64le|noarch))?$"
)
_VERSION = re.compile(r"^(?:\d+:)?(\d+)\.(\d+)\.(\d+)")
_CUDA_IN_VERSION = re.compile(r"cuda(\d+)(?:\.\d+)?")


def _entries(text: str) -> list[tuple[str, str]]:
    """(package, version) for every cuDNN line, whatever the listing's format."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if "cudnn" not in line.lower():
            continue
        dpkg = _DPKG_L.match(line)
        if dpkg and "cudnn" in dpkg.group(2):
            if dpkg.group(1) in ("ii", "hi"):  # installed; "rc" means removed
                out.append((dpkg.group(2), dpkg.group(3)))
            continue
        fields = line.split()
        if len(fields) >= 2 and "cudnn" in fields[0]:
            out.append((fields[0].split(":")[0], fields[1]))
            continue
        rpm = _RPM.match(line)
        if rpm:
            out.append((rpm.group(1), f"{rpm.group(2)}-{rpm.group(3)}"))
    return out


def _rank(name: str) -> int:
    """Runtime libraries first, then -dev and others, then meta packages."""
    match = _NAME.match(name)
    if match is None:
        return 3
    if match.group(1) and not match.group(3):
        return 0
    return 1 if match.group(1) else 2


def parse_cudnn_packages(text: str) -> tuple[Measured[str], Measured[int]]:
    r"""The installed cuDNN version and the CUDA major it was built for.

    Args:
        text: ``dpkg -l``, ``dpkg-query -W -f '${Package} ${Version}\\n'`` or
            ``rpm -qa`` output (whole or grepped for cudnn).

    Returns:
        ("8.3.2", 11) for libcudnn8 8.3.2.44-1+cuda11.5; ("9.6.0", 12) for
        libcudnn9-cuda-12 9.6.0.74-1. NOT_MEASURED in either place when no cuDNN
        package is listed or the package does not say its CUDA major.
    """
    entries = [(name, version) for name, version in _entries(text) if _VERSION.match(version)]
    if not entries:
        missing = Unavailable(Reason.NOT_MEASURED, "no installed cuDNN package listed")
        return missing, missing
    name, version = sorted(entries, key=lambda entry: _rank(entry[0]))[0]
    match = _VERSION.match(version)
    assert match is not None  # noqa: S101 -- filtered above
    cudnn = ".".join(str(int(part)) for part in match.groups())
    cuda: Measured[int] = NOT_MEASURED
    name_match = _NAME.match(name)
    if name_match and name_match.group(4):
        cuda = int(name_match.group(4))
    else:
        in_version = _CUDA_IN_VERSION.search(version)
        cuda = (
            int(in_version.group(1))
            if in_version
            else Unavailable(Reason.NOT_MEASURED, f"package {name} {version} names no CUDA major")
        )
    return cudnn, cuda
