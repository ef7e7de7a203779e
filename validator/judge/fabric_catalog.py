"""The fabric catalog: floors between nodes per fabric, loaded from ``fabrics.yaml``.

Each figure is stated with its source, or marked unconfirmed with why; a figure with
no value states no floor (the fleet's own median judges). The file is checked as the
SKU catalog is (:mod:`validator.judge.catalog`): one declaration per field
(:mod:`validator.fields`), one-line errors naming the file, line and key.

The NCCL all-reduce floor is a list of rows, one per group size (``min_nodes``: the row
holds for groups of that many nodes up to the next row's), each for a range of largest
messages (``largest_min_gib``..``largest_max_gib``): busbw across two nodes goes beyond
one NIC's figure (NCCL's tree, NVLink SHARP), across more it tends to the per-NIC ring
figure, and below its plateau it is lower. A group no row holds for has no catalog floor.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from validator import fields, limits
from validator.error_tree import PolicyError
from validator.fields import Document, Field, Invalid
from validator.judge import yamlfile

LINKS = ("infiniband", "roce")
_DEFAULT_PATH = Path(__file__).with_name("fabrics.yaml")
_ID = r"[a-z0-9][a-z0-9-]{0,62}"
# The fabric figures, in the words reports use for them.
FABRIC_FIGURES: dict[str, str] = {
    "ib_write_bw_gdr_min_gbit_s": "ib_write_bw floor with GPUDirect (Gb/s)",
    "ib_write_lat_max_us": "ib_write_lat ceiling (us)",
    "nccl_alltoall_min_gbs_per_hca": "NCCL alltoall busbw floor per HCA (GB/s)",
}
NCCL_FLOORS = "nccl_all_reduce_min_gbs_per_hca"  # NCCL all-reduce busbw floor per HCA (GB/s)
NODE_FIGURES: dict[str, str] = {
    "all_reduce_min_gbs": "all-reduce busbw floor inside one node (GB/s)",
    "all_reduce_typical_gbs": "all-reduce busbw a healthy node reaches (GB/s)",
}


@dataclass(frozen=True)
class Figure:
    """One stated figure: its value (None: no floor) and where it comes from.

    Exactly one of ``source`` and ``unconfirmed`` is non-empty.
    """

    value: float | None
    source: str = ""  # the address or repository path and what it states
    unconfirmed: str = ""  # why no source confirms it

    @property
    def confirmed(self) -> bool:
        """A source states this figure."""
        return bool(self.source)


@dataclass(frozen=True)
class NcclFloor:
    """The NCCL all-reduce busbw floor per HCA for groups from ``min_nodes`` nodes.

    It holds where the largest message is within ``largest_min_gib``..``largest_max_gib``.
    """

    min_nodes: int
    largest_min_gib: float
    largest_max_gib: float
    figure: Figure

    def holds_for(self, largest_bytes: int) -> bool:
        """Whether a run whose largest message is ``largest_bytes`` is judged by this row."""
        return self.largest_min_gib <= largest_bytes / (1 << 30) <= self.largest_max_gib


@dataclass(frozen=True)
class Fabric:
    """One network fabric and the floors a healthy link on it meets, per HCA."""

    id: str
    label: str
    link: str  # infiniband | roce
    rate_gbit_s: float
    ib_write_bw_gdr_min_gbit_s: Figure
    ib_write_lat_max_us: Figure
    nccl_alltoall_min_gbs_per_hca: Figure
    nccl_all_reduce_min_gbs_per_hca: tuple[NcclFloor, ...] = ()  # by min_nodes, ascending

    def figure(self, name: str) -> Figure:
        """The figure called ``name`` (one of FABRIC_FIGURES)."""
        if name not in FABRIC_FIGURES:
            raise KeyError(name)
        value: Figure = getattr(self, name)
        return value

    def nccl_floor(self, nodes: int) -> NcclFloor | None:
        """The row for a group of ``nodes``: the largest ``min_nodes`` not above it; or None."""
        held = [row for row in self.nccl_all_reduce_min_gbs_per_hca if row.min_nodes <= nodes]
        return held[-1] if held else None


@dataclass(frozen=True)
class NodeReference:
    """What one node reaches inside itself, to read the cross-node figures against."""

    id: str
    label: str
    all_reduce_min_gbs: Figure
    all_reduce_typical_gbs: Figure


@dataclass(frozen=True)
class FabricCatalog:
    """Every fabric and node reference the file states."""

    fabrics: tuple[Fabric, ...]
    node_references: tuple[NodeReference, ...]

    def fabric(self, fabric_id: str) -> Fabric:
        """The fabric with that id.

        Raises:
            PolicyError: no fabric has that id; the message lists the valid ids.
        """
        for fabric in self.fabrics:
            if fabric.id == fabric_id:
                return fabric
        valid = ", ".join(f.id for f in self.fabrics)
        raise PolicyError(f"unknown fabric id {fabric_id[:40]!r}; valid ids: {valid}")

    def node_reference(self, reference_id: str) -> NodeReference:
        """The node reference with that id.

        Raises:
            PolicyError: none has that id; the message lists the valid ids.
        """
        for reference in self.node_references:
            if reference.id == reference_id:
                return reference
        valid = ", ".join(r.id for r in self.node_references)
        raise PolicyError(f"unknown node reference id {reference_id[:40]!r}; valid ids: {valid}")


def _figure(value: Mapping[str, Any]) -> Figure:
    source, unconfirmed = value.get("source", ""), value.get("unconfirmed", "")
    if bool(source) == bool(unconfirmed):
        raise Invalid(problem="must give exactly one of 'source' and 'unconfirmed'")
    if value["value"] is None and source:
        raise Invalid(problem="states no value: mark it 'unconfirmed' with why, not 'source'")
    number = value["value"]
    return Figure(None if number is None else float(number), source, unconfirmed)


_FIGURE_DOC = Document(
    (
        Field("value", float, minimum=0, above=True, nullable=True, required=True),
        Field("source", str, non_empty=True),
        Field("unconfirmed", str, non_empty=True),
    )
)


def _nccl_floor(value: Mapping[str, Any]) -> NcclFloor:
    low, high = float(value["largest_min_gib"]), float(value["largest_max_gib"])
    if low > high:
        raise Invalid(problem=f"largest_min_gib {low:g} is above largest_max_gib {high:g}")
    figure = _figure({k: v for k, v in value.items() if k in ("value", "source", "unconfirmed")})
    return NcclFloor(int(value["min_nodes"]), low, high, figure)


def _nccl_floors(rows: list[NcclFloor]) -> tuple[NcclFloor, ...]:
    seen: set[int] = set()
    for index, row in enumerate(rows):
        if row.min_nodes in seen:
            raise Invalid(at=(index,), problem=f"duplicate min_nodes {row.min_nodes}")
        seen.add(row.min_nodes)
    return tuple(sorted(rows, key=lambda row: row.min_nodes))


_NCCL_FLOOR_DOC = Document(
    (
        Field("min_nodes", int, minimum=2, required=True),
        Field("largest_min_gib", float, minimum=0, above=True, required=True),
        Field("largest_max_gib", float, minimum=0, above=True, required=True),
        *_FIGURE_DOC.fields,
    )
)


def _figure_field(name: str) -> Field:
    return Field(name, dict, document=_FIGURE_DOC, required=True, convert=_figure)


_FABRIC = Document(
    (
        Field("id", str, pattern=_ID, wanted="a lower-case id (a-z, 0-9, -)", required=True),
        Field("label", str, non_empty=True, required=True),
        Field("link", str, choices=LINKS, required=True),
        Field("rate_gbit_s", float, minimum=0, above=True, required=True),
        *(_figure_field(name) for name in FABRIC_FIGURES),
        Field(
            NCCL_FLOORS,
            list,
            wanted="a list of at least one row (min_nodes, largest_min_gib, "
            "largest_max_gib, value, source or unconfirmed)",
            non_empty=True,
            required=True,
            item=Field("floor", dict, document=_NCCL_FLOOR_DOC, convert=_nccl_floor),
            convert=_nccl_floors,
        ),
    )
)
_NODE_REFERENCE = Document(
    (
        Field("id", str, pattern=_ID, wanted="a lower-case id (a-z, 0-9, -)", required=True),
        Field("label", str, non_empty=True, required=True),
        *(_figure_field(name) for name in NODE_FIGURES),
    )
)
FILE_FIELDS = Document(
    (
        Field("fabrics", list, item=Field("fabric", dict, document=_FABRIC), required=True),
        Field(
            "node_references",
            list,
            item=Field("node reference", dict, document=_NODE_REFERENCE),
            required=True,
        ),
    )
)


def load_fabric_catalog(path: str | None = None) -> FabricCatalog:
    """Load the fabric catalog; the packaged ``fabrics.yaml`` by default. Cached per path.

    Raises:
        PolicyError: the file cannot be read, is not YAML, or a row is invalid (one line
            naming the file, line and key).
    """
    resolved = Path(path).resolve() if path else _DEFAULT_PATH
    return _load(str(resolved))


@functools.lru_cache(maxsize=8)
def _load(path: str) -> FabricCatalog:
    name = Path(path).name
    try:
        text = limits.read_text(path, limits.DOCUMENT_BYTES)
    except limits.OverLimitError as exc:
        raise PolicyError(f"{path}: cannot read the fabric catalog: it {exc}") from None
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the fabric catalog: {exc.strerror}") from None
    source = fields.Source(name, error=PolicyError, fix="fix the fabric catalog")
    try:
        data, marks = yamlfile.load_located(text)
    except fields.LoadError as exc:
        if not exc.syntax:
            raise source.loaded(exc) from None
        where = f":{exc.line}" if exc.line is not None else ""
        raise PolicyError(
            f"{name}{where}: YAML syntax error in the fabric catalog: {exc.problem}"
        ) from None
    source = dataclasses.replace(source, marks=marks)
    values = FILE_FIELDS.check(data, source)
    fabrics = tuple(Fabric(**row) for row in values["fabrics"])
    references = tuple(NodeReference(**row) for row in values["node_references"])
    _unique(source, "fabrics", [fabric.id for fabric in fabrics])
    _unique(source, "node_references", [reference.id for reference in references])
    return FabricCatalog(fabrics, references)


def _unique(source: fields.Source, kind: str, ids: list[str]) -> None:
    seen: set[str] = set()
    for index, row_id in enumerate(ids):
        if row_id in seen:
            raise source.fail((kind, index, "id"), f"duplicate id {row_id!r}")
        seen.add(row_id)


__all__ = [
    "FABRIC_FIGURES",
    "LINKS",
    "NCCL_FLOORS",
    "NODE_FIGURES",
    "Fabric",
    "FabricCatalog",
    "Figure",
    "NcclFloor",
    "NodeReference",
    "load_fabric_catalog",
]
