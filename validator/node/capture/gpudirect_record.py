"""The IOMMU's sysfs in a capture bundle: ``iommu-sysfs.txt``, one ``path<TAB>value`` a line.

``gpuready capture`` records each ``/sys/kernel/iommu_groups/N/type`` with its text and
each ``/sys/class/iommu/*`` unit with an empty value (its presence is the fact), as
``pci-devices.txt`` records the PCI bus; the bundle's System answers those paths and
globs from it. A file recorded with no line is an IOMMU that is off (no group, no
unit), not a file missing.
"""

from __future__ import annotations

from validator.model import Unavailable
from validator.node.gpudirect_probe import IOMMU_GROUP_TYPES, IOMMU_GROUPS_READ, IOMMU_UNITS
from validator.node.system import NotRecordedError, System
from validator.node.system_facts import read_file

IOMMU_SYSFS = "iommu-sysfs.txt"
IOMMU_ROOTS = ("/sys/kernel/iommu_groups/", "/sys/class/iommu/")


def record_iommu(system: System) -> tuple[str, None] | str:
    """The bundle text of the host's IOMMU groups' types and units, or why not."""
    try:
        types = system.glob(IOMMU_GROUP_TYPES)[:IOMMU_GROUPS_READ]
        units = system.glob(IOMMU_UNITS)
    except (NotRecordedError, OSError) as exc:
        return f"skipped: {exc}"
    lines = []
    for path in types:
        text = read_file(system, path)
        if not isinstance(text, Unavailable):
            lines.append(f"{path}\t{text.strip()}\n")
    lines += [f"{path}\t\n" for path in units]
    return "".join(lines), None


def iommu_files(text: str) -> dict[str, str]:
    """The recorded paths and their text; a line outside the IOMMU's roots is ignored."""
    files: dict[str, str] = {}
    for line in text.splitlines():
        path, _, value = line.partition("\t")
        if path.startswith(IOMMU_ROOTS) and ".." not in path.split("/"):
            files[path] = value
    return files


__all__ = ["IOMMU_ROOTS", "IOMMU_SYSFS", "iommu_files", "record_iommu"]
