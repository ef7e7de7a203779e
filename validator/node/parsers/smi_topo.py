r"""Parse ``nvidia-smi topo -m`` (or ``-mp``): how each GPU reaches each NIC.

The matrix has a header of column names (``GPU0``..``GPUn``, then the NICs: ``NIC0``..
on newer drivers with a ``NIC Legend`` naming each, ``mlx5_0``.. on older ones), then
``CPU Affinity``, ``NUMA Affinity``, ``GPU NUMA ID``; one row a device. Newer drivers
separate cells with tabs and underline the header with ANSI escapes; older ones pad with
spaces. Affinity cells may be empty, so only the matrix cells (the first as many tokens
as there are columns) are read. A shell prompt or the command echoed above the header
is not nvidia-smi's and is skipped.

A GPU column with no whole row (a paste cut short) is listed in ``missing_rows``: its
nearest NIC is not known, never guessed. A matrix cell that is none of nvidia-smi's
link words is bad input.

Pure functions over text, standard library only (Python 3.9): shipped to hosts.
"""

from __future__ import annotations

import re

from validator.limits import TOOL_OUTPUT_BYTES
from validator.model import TOPO_LINKS, GpuNicLink, TopoMatrix
from validator.node.parsers.base import ParseError

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GPU = re.compile(r"^GPU([0-9]{1,4})$")
_CELL = re.compile(r"^(?:X|SYS|SOC|NODE|PHB|PXB|PIX|PSB|NV[0-9]{1,3}|C2C|N/A)$")
_LEGEND_ROW = re.compile(r"^\s*(NIC[0-9]{1,4})\s*:\s*(\S+)\s*$")
# The first column that is no device: the affinities follow it.
_AFFINITY = "CPU"


def parse_topo_matrix(text: str) -> TopoMatrix:
    """The GPUs, the NICs and each GPU's nearest NIC from ``nvidia-smi topo -m``.

    Raises:
        ParseError: no matrix header, an unknown link word, or output over the bound.
    """
    if len(text) > TOOL_OUTPUT_BYTES:
        raise ParseError(f"nvidia-smi topo -m output is over {TOOL_OUTPUT_BYTES} bytes")
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    at, columns = _header(lines)
    legend = _legend(lines)
    gpus = tuple(name for name in columns if _GPU.match(name))
    nic_columns = [name for name in columns if not _GPU.match(name)]
    rows = _rows(lines[at + 1 :], columns)
    links: list[GpuNicLink] = []
    missing: list[str] = []
    for gpu in gpus:
        cells = rows.get(gpu)
        if cells is None:
            missing.append(gpu)
            continue
        links.append(_nearest(gpu, cells, nic_columns, legend))
    return TopoMatrix(
        gpus=gpus,
        nics=tuple(legend.get(name, name) for name in nic_columns),
        links=tuple(links),
        missing_rows=tuple(missing),
    )


def _header(lines: list[str]) -> tuple[int, list[str]]:
    for at, line in enumerate(lines):
        tokens = line.split()
        if not tokens or not _GPU.match(tokens[0]) or line[:1] not in (" ", "\t"):
            continue
        columns: list[str] = []
        for token in tokens:
            if token == _AFFINITY:
                break
            columns.append(token)
        return at, columns
    raise ParseError(
        "no topology matrix header (a line of GPU0 GPU1 ... columns): "
        "is this `nvidia-smi topo -m` output?"
    )


def _legend(lines: list[str]) -> dict[str, str]:
    names: dict[str, str] = {}
    for line in lines:
        found = _LEGEND_ROW.match(line)
        if found:
            names[found.group(1)] = found.group(2)
    return names


def _rows(lines: list[str], columns: list[str]) -> dict[str, list[str]]:
    """Each whole device row's matrix cells, by its name; a cut row is left out."""
    known = set(columns)
    rows: dict[str, list[str]] = {}
    for line in lines:
        tokens = line.split()
        if not tokens or tokens[0] not in known or line[:1] in (" ", "\t"):
            continue
        cells = tokens[1 : 1 + len(columns)]
        if len(cells) < len(columns):
            continue  # cut short: this row is not read
        for cell in cells:
            if not _CELL.match(cell):
                raise ParseError(f"{tokens[0]}: {cell[:40]!r} is no nvidia-smi topology link")
        rows[tokens[0]] = cells
    return rows


def _nearest(
    gpu: str, cells: list[str], nic_columns: list[str], legend: dict[str, str]
) -> GpuNicLink:
    index = int(_GPU.match(gpu).group(1))  # type: ignore[union-attr]
    offset = len(cells) - len(nic_columns)
    best: tuple[int, str, str] | None = None
    for position, name in enumerate(nic_columns):
        link = cells[offset + position]
        link = "SYS" if link == "SOC" else link
        if link not in TOPO_LINKS:
            continue
        rank = TOPO_LINKS.index(link)
        if best is None or rank < best[0]:
            best = (rank, legend.get(name, name), link)
    if best is None:
        return GpuNicLink(gpu=gpu, index=index, nearest_nic=None, link=None)
    return GpuNicLink(gpu=gpu, index=index, nearest_nic=best[1], link=best[2])


__all__ = ["parse_topo_matrix"]
