"""Do a bundle's files describe one host at one moment? Cross-file checks, no I/O.

A support bundle holds several views of the same GPUs: ``nvidia-smi -q -x``,
``nvidia-smi -q``, the banner table and the PCI listing (``pci-devices.txt`` or
``lspci -n``). Facts read from files that contradict each other, or from a
file cut short, are not facts: each disagreement becomes a
:class:`~validator.model.SourceConflict`, which the judge makes a required finding.

Only what both files state is compared:

* driver version: between the nvidia-smi views that list GPUs (the "NVML
  library version" an error text names is the user-space half of a mismatch,
  not the driver);
* GPU count: between whole nvidia-smi views; a query's declared ``Attached
  GPUs`` against the GPU sections it holds;
* bus ids: written the NVML way on both sides (8-digit domain, upper case). The
  PCI listing is compared one way only: a GPU the driver lists is on the bus,
  so one missing from the listing means the files come from different hosts
  or moments; a GPU on the bus the driver does not list is a fault that
  ``inventory.gpu_count`` fails, not a disagreement between files;
* UUIDs: per bus id where both files print one (a GPU has one UUID);
* names: per bus id where both files name the GPU (by the set of names where
  no bus id is shared); the banner's cut names ("NVIDIA RTX 2000 Ada Gene...")
  compare as prefixes; the PCI listing names none.

A file cut short is compared on the GPUs it holds, never on those it lacks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

from validator.model import GpuFacts, Measured, NvmlStatus, SourceConflict
from validator.node.host import classify_pci_device
from validator.node.parsers.smi_banner import SmiBanner
from validator.node.parsers.smi_common import SmiQuery, normalize_bus_id
from validator.node.parsers.smi_errors import lost_gpu_bus_ids

_SHOWN_IDS = 3  # bus ids named in one sentence before "and N more"


@dataclass(frozen=True)
class GpuSighting:
    """One GPU as one file states it: its bus id (NVML form), name and UUID, where stated."""

    bus_id: str | None
    name: str | None
    uuid: str | None = None


@dataclass(frozen=True)
class BundleView:
    """What one file of a bundle says about the node's GPUs.

    Attributes:
        file: the file's name in the bundle.
        gpus: the GPUs it lists, in file order.
        driver_version: the driver version it states, or None.
        declared_gpus: how many GPUs it says are attached (a query's header), or None.
        cut: where the file ends mid-GPU, "" when it is whole.
        lost: bus ids (NVML form) of GPUs it says the driver could not reach.
        on_bus: a PCI listing: every device on the bus, by address, no names.
    """

    file: str
    gpus: tuple[GpuSighting, ...]
    driver_version: str | None = None
    declared_gpus: int | None = None
    cut: str = ""
    lost: tuple[str, ...] = ()
    on_bus: bool = False

    @property
    def whole(self) -> bool:
        """Whether the file holds every GPU it had to: not cut, its declared count met."""
        return not self.cut and self.declared_gpus in (None, len(self.gpus))

    def bus_ids(self) -> set[str]:
        """The bus ids it states."""
        return {gpu.bus_id for gpu in self.gpus if gpu.bus_id is not None}


def _known(value: Measured[str] | Measured[int]) -> str | int | None:
    return value if isinstance(value, (str, int)) else None


def _sighting(gpu: GpuFacts) -> GpuSighting:
    bus_id, name = gpu.pci_bus_id, gpu.name
    return GpuSighting(
        normalize_bus_id(bus_id) if isinstance(bus_id, str) else None,
        name if isinstance(name, str) else None,
        gpu.uuid if isinstance(gpu.uuid, str) else None,
    )


def query_view(file: str, query: SmiQuery, text: str = "") -> BundleView | None:
    """The view of an ``nvidia-smi -q`` (text or XML) file; None when it printed an error.

    Args:
        file: the file's name in the bundle.
        query: the file parsed.
        text: the file's text, read for lines naming a lost GPU.
    """
    if query.status is not NvmlStatus.OK:
        return None
    driver, declared = _known(query.driver_version), _known(query.attached_gpus)
    lost = (normalize_bus_id(bus_id) for bus_id in lost_gpu_bus_ids(text))
    return BundleView(
        file=file,
        gpus=tuple(_sighting(gpu) for gpu in query.gpus),
        driver_version=driver if isinstance(driver, str) else None,
        declared_gpus=declared if isinstance(declared, int) else None,
        cut=query.cut,
        lost=tuple(bus_id for bus_id in lost if bus_id is not None),
    )


def banner_view(file: str, banner: SmiBanner) -> BundleView | None:
    """The view of a plain ``nvidia-smi`` table; None when it printed an error."""
    if banner.status is not NvmlStatus.OK:
        return None
    driver = _known(banner.driver_version)
    return BundleView(
        file=file,
        gpus=tuple(
            GpuSighting(
                normalize_bus_id(gpu.pci_bus_id) if isinstance(gpu.pci_bus_id, str) else None,
                gpu.name,
            )
            for gpu in banner.gpus
        ),
        driver_version=driver if isinstance(driver, str) else None,
    )


def pci_view(file: str, devices: Iterable[tuple[str, str, str]]) -> BundleView:
    """The view of a PCI listing: its NVIDIA GPUs by address.

    Args:
        file: the file's name in the bundle.
        devices: (address, vendor, class) per device, as sysfs writes vendor and class.
    """
    return BundleView(
        file=file,
        gpus=tuple(
            GpuSighting(normalize_bus_id(address), None)
            for address, vendor, device_class in devices
            if classify_pci_device(vendor, device_class) == "gpu"
        ),
        on_bus=True,
    )


# ---------------------------------------------------------------- the checks


def bundle_conflicts(views: Sequence[BundleView]) -> tuple[SourceConflict, ...]:
    """Every disagreement between a bundle's views, and every view cut short.

    Args:
        views: the bundle's views, in order of preference (XML, -q, banner, PCI).

    Returns:
        The conflicts: first each file against itself, then each pair of files.
    """
    found = [conflict for view in views if (conflict := _self_conflict(view)) is not None]
    listings = [view for view in views if not view.on_bus]
    for first, second in combinations(listings, 2):
        found += _driver(first, second)
        found += _names(first, second)
        found += _uuids(first, second)
        found += _gpu_sets(first, second)
    for bus in (view for view in views if view.on_bus):
        found += [conflict for view in listings if (conflict := _off_bus(view, bus)) is not None]
    return tuple(found)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _ids(bus_ids: Iterable[str]) -> str:
    ordered = sorted(bus_ids)
    shown = ", ".join(ordered[:_SHOWN_IDS])
    rest = len(ordered) - _SHOWN_IDS
    return f"{shown} and {rest} more" if rest > 0 else shown


def _self_conflict(view: BundleView) -> SourceConflict | None:
    """A file that declares more GPUs than it holds, or ends mid-GPU."""
    held, declared = len(view.gpus), view.declared_gpus
    sections = _plural(held, "GPU section")
    if declared is not None and declared > held and view.lost:
        return SourceConflict(
            "gpu_lost",
            f"{view.file} declares {declared} attached GPUs but holds {sections} and says the "
            f"driver cannot reach {_ids(view.lost)}",
            (view.file,),
            proves_fault=True,
        )
    short = declared is not None and declared != held
    reasons = [f"it declares {declared} attached GPUs but holds {sections}"] if short else []
    reasons += [view.cut] if view.cut else []
    if not reasons:
        return None
    if declared is not None and declared < held and not view.cut:
        return SourceConflict(
            "gpu_count", f"{view.file} contradicts itself: {reasons[0]}", (view.file,)
        )
    return SourceConflict(
        "truncated", f"{view.file} is cut short: {'; '.join(reasons)}", (view.file,)
    )


def _driver(first: BundleView, second: BundleView) -> list[SourceConflict]:
    one, other = first.driver_version, second.driver_version
    if one is None or other is None or one == other:
        return []
    return [
        SourceConflict(
            "driver_version",
            f"{first.file} says driver {one} but {second.file} says driver {other}",
            (first.file, second.file),
        )
    ]


def _gpu_sets(first: BundleView, second: BundleView) -> list[SourceConflict]:
    """GPU count and bus ids; a side cut short is not blamed for the GPUs it lacks."""
    only_first = first.bus_ids() - second.bus_ids() if second.whole else set()
    only_second = second.bus_ids() - first.bus_ids() if first.whole else set()
    files = (first.file, second.file)
    if only_first and only_second:
        return [
            SourceConflict(
                "pci_bus_id",
                f"{first.file} lists GPUs at {_ids(only_first)} that {second.file} does not, "
                f"and {second.file} lists GPUs at {_ids(only_second)} that {first.file} does not",
                files,
            )
        ]
    counts = len(first.gpus), len(second.gpus)
    if first.whole and second.whole and counts[0] != counts[1]:
        missing = (
            f" ({_ids(only_first)} missing from {second.file})"
            if only_first
            else f" ({_ids(only_second)} missing from {first.file})"
            if only_second
            else ""
        )
        return [
            SourceConflict(
                "gpu_count",
                f"{first.file} lists {_plural(counts[0], 'GPU')} but {second.file} lists "
                f"{counts[1]}{missing}",
                files,
            )
        ]
    extra, holder, lacking = (
        (only_first, first, second) if only_first else (only_second, second, first)
    )
    if not extra:
        return []
    return [
        SourceConflict(
            "pci_bus_id",
            f"{holder.file} lists GPUs at {_ids(extra)} that {lacking.file} does not",
            (holder.file, lacking.file),
        )
    ]


def _uuids(first: BundleView, second: BundleView) -> list[SourceConflict]:
    """Per bus id, the UUID both files print: a GPU has one (files of other hosts, or edited)."""
    by_bus = {gpu.bus_id: gpu.uuid for gpu in second.gpus if gpu.bus_id and gpu.uuid}
    differing = [
        (gpu.bus_id, gpu.uuid, by_bus[gpu.bus_id])
        for gpu in first.gpus
        if gpu.bus_id in by_bus and gpu.uuid and gpu.uuid != by_bus[gpu.bus_id]
    ]
    if not differing:
        return []
    bus, one, other = differing[0]
    more = f" (and {_plural(len(differing) - 1, 'other GPU')})" if len(differing) > 1 else ""
    return [
        SourceConflict(
            "gpu_uuid",
            f"{first.file} gives the GPU at {bus} UUID {one} but {second.file} gives it "
            f"{other}{more}",
            (first.file, second.file),
        )
    ]


def _normal_name(name: str) -> str:
    return " ".join(name.split()).casefold()


def same_name(one: str, other: str) -> bool:
    """Whether two printed names can name the same GPU model.

    The banner cuts long names with "..." ("NVIDIA GeForce RTX 2080 ...",
    even mid-word: "NVIDIA RTX 2000 Ada Gene..."): a cut name matches the names
    it is the start of. Case and runs of spaces do not count.
    """
    first, second = _normal_name(one), _normal_name(other)
    if first == second:
        return True
    for cut, full in ((first, second), (second, first)):
        stem = cut[:-3].rstrip() if cut.endswith("...") else ""
        if stem and full.startswith(stem):
            return True
    return False


def _names(first: BundleView, second: BundleView) -> list[SourceConflict]:
    by_bus = {gpu.bus_id: gpu.name for gpu in second.gpus if gpu.bus_id and gpu.name}
    paired = [
        (gpu.bus_id, gpu.name, by_bus[gpu.bus_id])
        for gpu in first.gpus
        if gpu.bus_id in by_bus and gpu.name
    ]
    if paired:
        differing = [(bus, one, other) for bus, one, other in paired if not same_name(one, other)]
        if not differing:
            return []
        bus, one, other = differing[0]
        more = f" (and {_plural(len(differing) - 1, 'other GPU')})" if len(differing) > 1 else ""
        detail = f"{first.file} names the GPU at {bus} {one} but {second.file} names it {other}"
        return [SourceConflict("gpu_name", detail + more, (first.file, second.file))]
    return _name_sets(first, second)


def _name_sets(first: BundleView, second: BundleView) -> list[SourceConflict]:
    """Without a shared bus id: every model one file names must be named by the other."""
    names = [{gpu.name for gpu in view.gpus if gpu.name} for view in (first, second)]
    if not names[0] or not names[1]:
        return []
    # A file cut short may lack models the other names, never name models the other lacks.
    checked = [(names[0], names[1], second.whole), (names[1], names[0], first.whole)]
    if not any(
        not any(same_name(name, theirs) for theirs in others)
        for mine, others, others_whole in checked
        if others_whole
        for name in mine
    ):
        return []
    return [
        SourceConflict(
            "gpu_name",
            f"{first.file} names {', '.join(sorted(names[0]))} but {second.file} names "
            f"{', '.join(sorted(names[1]))}",
            (first.file, second.file),
        )
    ]


def _off_bus(view: BundleView, bus: BundleView) -> SourceConflict | None:
    missing = view.bus_ids() - bus.bus_ids()
    if not missing:
        return None
    return SourceConflict(
        "pci_bus_id",
        f"{view.file} lists GPUs at {_ids(missing)} that {bus.file} does not show on the PCI bus",
        (view.file, bus.file),
    )


__all__ = [
    "BundleView",
    "GpuSighting",
    "banner_view",
    "bundle_conflicts",
    "pci_view",
    "query_view",
    "same_name",
]
