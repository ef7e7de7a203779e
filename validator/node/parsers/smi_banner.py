"""Parse the table plain ``nvidia-smi`` prints into :class:`SmiBanner`.

Each GPU takes three table lines::

    |   0  NVIDIA H100 80GB HBM3          On  |   00000000:00:09.0 Off |                   On |
    | N/A   52C    P0            432W /  700W |   11125MiB /  81559MiB |     N/A      Default |
    |                                         |                        |              Enabled |

The first names the GPU (index, name as printed, possibly cut with "...",
persistence On/Off or the Windows driver model WDDM/TCC, bus id); the second
its fan, temperature, power and memory; the third, where printed, MIG mode.
The "MIG devices" and "Processes" tables that follow are not GPUs and are not
read. R610 prints ``KMD Version:``/``CUDA UMD Version:`` in the header instead of
``Driver Version:``/``CUDA Version:``; both are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from validator.model import NOT_MEASURED, Measured, NvmlStatus, Reason, Unavailable
from validator.node.parsers.base import ParseError
from validator.node.parsers.smi_common import (
    check_gpu_count,
    read_bool,
    read_bus_id,
    read_float,
    read_int,
)
from validator.node.parsers.smi_errors import smi_error


@dataclass(frozen=True)
class BannerGpu:
    """One GPU row of the nvidia-smi table."""

    index: int
    name: str  # as printed, may be cut: "NVIDIA GeForce RTX 2080 ..."
    pci_bus_id: Measured[str]
    persistence_mode: Measured[bool]
    memory_used_mib: Measured[int]
    memory_total_mib: Measured[int]
    power_draw_w: Measured[float]
    power_cap_w: Measured[float]
    temperature_gpu_c: Measured[float]
    mig_mode: Measured[bool]


@dataclass(frozen=True)
class SmiBanner:
    """What plain ``nvidia-smi`` says: versions and one row per GPU."""

    status: NvmlStatus
    detail: str
    driver_version: Measured[str]
    cuda_version: Measured[str]
    gpus: tuple[BannerGpu, ...]


_HEADER = re.compile(r"\|\s*NVIDIA-SMI\s+(\S+)")
_DRIVER = re.compile(r"(?:Driver|KMD) Version:\s*(\S+)")
_CUDA = re.compile(r"CUDA (?:UMD )?Version:\s*(\S+)")
_ROW1 = re.compile(
    r"^\|\s*(\d+)\s+(.*?)\s+(On|Off|WDDM|TCC|MCDM|N/A)\s*\|"
    r"\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+\S+\s*\|"
)
_ROW2 = re.compile(r"^\|\s*\S+\s+(\S+)\s+\S+\s+(\S+)\s*/\s*(\S+)\s*\|\s*(\S+)\s*/\s*(\S+)\s*\|")
_ROW3 = re.compile(r"^\|\s*\|\s*\|\s*(\S.*?)\s*\|$")
_TABLE_END = re.compile(r"^\|\s*(MIG devices|Processes):")


def _gpu_rows(lines: list[str]) -> list[BannerGpu]:
    gpus = []
    for number, line in enumerate(lines):
        if _TABLE_END.match(line):
            break
        row1 = _ROW1.match(line.strip())
        if not row1:
            continue
        row2 = _ROW2.match(lines[number + 1].strip()) if number + 1 < len(lines) else None
        row3 = _ROW3.match(lines[number + 2].strip()) if number + 2 < len(lines) else None
        if row2 is None:
            raise ParseError(f"nvidia-smi table: GPU row {row1.group(1)} has no second line")
        gpus.append(_gpu(row1, row2, row3))
    return gpus


def _gpu(row1: re.Match[str], row2: re.Match[str], row3: re.Match[str] | None) -> BannerGpu:
    mode = row1.group(3)
    persistence: Measured[bool] = (
        Unavailable(Reason.NOT_SUPPORTED, f"Windows driver model {mode}")
        if mode in ("WDDM", "TCC", "MCDM")
        else read_bool(mode)
    )
    temp, draw, cap, used, total = row2.groups()
    return BannerGpu(
        index=int(row1.group(1)),
        name=row1.group(2).strip(),
        pci_bus_id=read_bus_id(row1.group(4)),
        persistence_mode=persistence,
        # Old nvidia-smi (R319 in our fixture) printed "6143MB" for what were MiB.
        memory_used_mib=read_int(used, "MiB", "MB"),
        memory_total_mib=read_int(total, "MiB", "MB"),
        power_draw_w=read_float(_err(draw), "W"),
        power_cap_w=read_float(_err(cap), "W"),
        temperature_gpu_c=read_float(_err(temp), "C"),
        mig_mode=read_bool(row3.group(1)) if row3 else NOT_MEASURED,
    )


def _err(cell: str) -> str:
    # nvidia-smi prints ERR! in a cell it failed to read.
    return "Unknown Error" if cell.upper().startswith("ERR!") else cell


def parse_banner(text: str) -> SmiBanner:
    """Parse the output of plain ``nvidia-smi``.

    Args:
        text: the command's output.

    Returns:
        Versions and GPU rows. When nvidia-smi printed a known error instead of
        the table, the status says which and ``gpus`` is empty.

    Raises:
        ParseError: neither the table nor a known error message, or a table
            without any GPU row.
    """
    header = _HEADER.search(text)
    if header is None:
        error = smi_error(text, "nvidia-smi table output", "no NVIDIA-SMI header")
        return SmiBanner(error.status, error.detail, error.library_version, NOT_MEASURED, ())
    lines = text.splitlines()
    gpus = _gpu_rows(lines)
    check_gpu_count(len(gpus), "nvidia-smi banner")
    if not gpus:
        raise ParseError("nvidia-smi table has no GPU row (output cut short?)")
    driver = _DRIVER.search(text)
    cuda = _CUDA.search(text)
    return SmiBanner(
        status=NvmlStatus.OK,
        detail="",
        driver_version=driver.group(1) if driver else NOT_MEASURED,
        cuda_version=_version_or_missing(cuda.group(1) if cuda else None),
        gpus=tuple(gpus),
    )


def _version_or_missing(raw: str | None) -> Measured[str]:
    if raw is None:
        return NOT_MEASURED
    if raw.upper() == "N/A":
        return Unavailable(Reason.NOT_SUPPORTED)
    return raw
