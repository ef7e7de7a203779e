"""Where each catalog figure comes from, and which ones no retrieved source confirms.

Each row of ``skus.yaml`` lists its figures under ``figure_sources``: groups of figure
names, each group either ``from`` a source (a capture, or a page that states the figure,
named by address and title) or ``unconfirmed`` (why: recalled, estimated, never found).
Every figure a row states and the judge holds a GPU to is in exactly one group, so a
figure is always either sourced or marked unconfirmed, never silently taken on trust.
The interconnect floors are sourced by ``bandwidth_source`` instead; the HBM floor
derived from an unconfirmed memory bandwidth is unconfirmed with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from validator import fields
from validator.fields import Document, Field

PRECISIONS = ("fp16", "bf16", "tf32", "fp8", "fp32")

# The figures a row states that need a source, in the words reports use for them.
# nvswitch is not one: it is the board's topology, used only where the node's PCI bus
# count of NVSwitches was not measured, and no check holds a GPU to a figure of it.
FIGURE_WORDS: dict[str, str] = {
    "memory_mib": "memory size",
    "memory_bandwidth_gbs": "memory bandwidth",
    "power_limits_w": "default power limit",
    "tdp_w": "board power",
    **{f"peak_tflops.{p}": f"dense {p.upper()} peak" for p in PRECISIONS},
    "pcie_gen": "PCIe generation",
    "pcie_width": "PCIe width",
    "nvlinks": "NVLink count",
    "nvlink_speed_gbs": "NVLink speed",
}
# Floors sourced by bandwidth_source; named here for the words a note uses.
FLOOR_WORDS: dict[str, str] = {
    "h2d_min_gbs": "host-to-device floor",
    "d2h_min_gbs": "device-to-host floor",
    "hbm_copy_min_gbs": "HBM copy floor",
    "p2p_min_gbs": "peer copy floor",
    "all_reduce_min_gbs": "all-reduce floor",
}


@dataclass(frozen=True)
class FigureSource:
    """One group of a row's figures and where they come from.

    ``source`` is the capture or page (address, title, what it says) when ``confirmed``;
    otherwise why no source confirms them.
    """

    figures: tuple[str, ...]
    source: str
    confirmed: bool


_ENTRY = Document(
    (
        Field(
            "figures",
            list,
            wanted="a non-empty list of figure names",
            non_empty=True,
            required=True,
            item=Field("figure", str, choices=tuple(FIGURE_WORDS)),
            convert=tuple,
        ),
        Field("from", str, non_empty=True),
        Field("unconfirmed", str, non_empty=True),
    )
)

FIELD = Field(
    "figure_sources",
    list,
    wanted="a non-empty list of {figures: [...], from: ...} or {figures: [...], unconfirmed: ...}",
    non_empty=True,
    required=True,
    item=Field("entry", dict, document=_ENTRY),
)


def stated(values: Mapping[str, object]) -> set[str]:
    """The figure names a checked row states: those not null."""
    named: set[str] = set()
    for name in FIGURE_WORDS:
        if name.startswith("peak_tflops."):
            value = values["peak_tflops"].get(name.partition(".")[2])  # type: ignore[attr-defined]
        else:
            value = values[name]
        if value is not None:
            named.add(name)
    return named


def parse(
    at: fields.Source, entries: list[dict[str, object]], values: Mapping[str, object]
) -> tuple[FigureSource, ...]:
    """The row's checked ``figure_sources`` as :class:`FigureSource` groups.

    Raises:
        at.error: an entry with both or neither of ``from``/``unconfirmed``, a figure named
            twice or one the row does not state (null), or a stated figure left unnamed.
    """
    groups: list[FigureSource] = []
    seen: set[str] = set()
    wanted = stated(values)
    for index, entry in enumerate(entries):
        path = ("figure_sources", index)
        if ("from" in entry) == ("unconfirmed" in entry):
            raise at.fail(path, "give either 'from' (a source) or 'unconfirmed' (why), not both")
        names: tuple[str, ...] = entry["figures"]  # type: ignore[assignment]
        for number, name in enumerate(names):
            if name in seen:
                raise at.fail((*path, "figures", number), f"figure {name!r} is named twice")
            if name not in wanted:
                raise at.fail((*path, "figures", number), f"figure {name!r} is null in this row")
            seen.add(name)
        confirmed = "from" in entry
        text = str(entry["from"] if confirmed else entry["unconfirmed"])
        groups.append(FigureSource(names, text, confirmed))
    missing = sorted(wanted - seen)
    if missing:
        raise at.fail(
            ("figure_sources",),
            f"'figure_sources' names no source for {', '.join(missing)}; add each to a group "
            "with 'from' (where it comes from) or 'unconfirmed' (why no source confirms it)",
        )
    return tuple(groups)


def unconfirmed(
    groups: tuple[FigureSource, ...], hbm_floor: float | None, bandwidth_source: str
) -> frozenset[str]:
    """The figures (floors included) that rest on no confirmed source.

    The HBM floor derived from ``memory_bandwidth_gbs`` (bandwidth_source says so) is as
    unconfirmed as the bandwidth it is a share of.
    """
    names = {name for group in groups if not group.confirmed for name in group.figures}
    derived = hbm_floor is not None and (
        f"HBM {hbm_floor:g} derived: memory_bandwidth_gbs" in bandwidth_source
    )
    if derived and "memory_bandwidth_gbs" in names:
        names.add("hbm_copy_min_gbs")
    return frozenset(names)
