"""The host family's bundle files: the NVMe sysfs tree and each drive's smartctl JSON.

Recorded only for the drives the host has (validator.node.host_probe reads them).

A sysfs tree is one text file of ``path<TAB>value`` lines; a drive's smartctl JSON is
``smartctl-nvmeN.json`` (N below :data:`MAX_DRIVES`), as smartctl printed it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Callable

from validator.node.capture.tree_record import Leaf, Recorded, record_tree
from validator.node.host_probe import NVME_PATTERN, NVME_ROOT, OFED_INFO, smartctl_argv
from validator.node.system import NotRecordedError, System

NVME_TREE = "nvme-sysfs.txt"
MAX_DRIVES = 32  # a bundle records smartctl for nvme0..nvme31
NVME_FILES = ("model", "serial")


def smartctl_file(index: int) -> str:
    """The bundle file of drive ``nvme<index>``'s smartctl JSON."""
    return f"smartctl-nvme{index}.json"


def _nvme_walk(system: System) -> Iterator[Leaf]:
    controllers = system.glob(NVME_PATTERN)
    yield NVME_ROOT, False  # the root itself: a tree recorded empty lists no drive
    for path in controllers:
        yield from ((f"{path}/{leaf}", True) for leaf in NVME_FILES)


def record_nvme_tree(system: System) -> Recorded:
    """Each controller's model and serial under /sys/class/nvme, a line a file."""
    return record_tree(system, (NVME_ROOT,), _nvme_walk)


def smartctl_recorder(index: int) -> Callable[[System], Recorded]:
    """The recorder of drive ``nvme<index>``: its smartctl JSON where the host has it."""

    def record(system: System) -> Recorded:
        name = f"nvme{index}"
        try:
            present = f"{NVME_ROOT}/{name}" in system.glob(NVME_PATTERN)
            if not present:
                return f"skipped: no {name}"
            result = system.run(smartctl_argv(name), timeout_s=60.0)
        except NotRecordedError as exc:
            return f"skipped: {exc}"
        if not result.stdout.strip():
            return f"skipped: smartctl exited {result.rc} with no output"
        return result.stdout, None  # a bit mask: a failing drive's document is the fact

    return record


def record_ofed_info(system: System) -> Recorded:
    """``ofed_info -s``; where the host has no ofed_info, an empty file: MOFED is not there."""
    try:
        result = system.run(OFED_INFO)
    except NotRecordedError as exc:
        return f"skipped: {exc}"
    if result.rc == 127:
        return "", None  # recorded as absent, not left out: "not installed" is a fact
    if not result.ok:
        return f"skipped: ofed_info -s exited {result.rc}"
    return result.stdout, None


def tree_files(text: str, root: str) -> dict[str, str]:
    """The files a recorded tree holds, by path (only under ``root``)."""
    files = {}
    for line in text.splitlines():
        path, tab, value = line.partition("\t")
        if tab and path.startswith(root + "/") and ".." not in path.split("/"):
            files[path] = value + "\n"
    return files


__all__ = [
    "MAX_DRIVES",
    "NVME_TREE",
    "Recorded",
    "record_nvme_tree",
    "record_ofed_info",
    "smartctl_file",
    "smartctl_recorder",
    "tree_files",
]
