"""The IOMMU's sysfs in a capture bundle: ``iommu-sysfs.txt``, one ``path<TAB>value`` a line.

``gpuready capture`` records each ``/sys/kernel/iommu_groups/N/type`` with its text and
each ``/sys/class/iommu/*`` unit with an empty value (its presence is the fact), as
``pci-devices.txt`` records the PCI bus; the bundle's System answers those paths and
globs from it. A file recorded with no line is an IOMMU that is off (no group, no
unit), not a file missing.
"""

from __future__ import annotations

from collections.abc import Iterator

from validator.node.capture.tree_record import Leaf, Recorded, record_tree
from validator.node.gpudirect_probe import IOMMU_GROUP_TYPES, IOMMU_GROUPS_READ, IOMMU_UNITS
from validator.node.system import System

IOMMU_SYSFS = "iommu-sysfs.txt"
IOMMU_ROOTS = ("/sys/kernel/iommu_groups/", "/sys/class/iommu/")


def _walk(system: System) -> Iterator[Leaf]:
    """The groups' types the probe reads (the first IOMMU_GROUPS_READ), then the units."""
    types = system.glob(IOMMU_GROUP_TYPES)[:IOMMU_GROUPS_READ]
    units = system.glob(IOMMU_UNITS)
    yield from ((path, True) for path in types)
    yield from ((path, False) for path in units)


def record_iommu(system: System) -> Recorded:
    """The bundle text of the host's IOMMU groups' types and units, or why not."""
    return record_tree(system, tuple(root.rstrip("/") for root in IOMMU_ROOTS), _walk)


def iommu_files(text: str) -> dict[str, str]:
    """The recorded paths and their text; a line outside the IOMMU's roots is ignored."""
    files: dict[str, str] = {}
    for line in text.splitlines():
        path, _, value = line.partition("\t")
        if path.startswith(IOMMU_ROOTS) and ".." not in path.split("/"):
            files[path] = value
    return files


__all__ = ["IOMMU_ROOTS", "IOMMU_SYSFS", "iommu_files", "record_iommu"]
