"""The bundle's record of ``/sys/class/infiniband``: one ``path<TAB>value`` line a file read.

``gpuready capture`` asks the System for the very files the network probe reads
(validator.node.network_probe): each HCA's firmware, PSID, GUID and model, its network
interfaces, and each port's state, rate, link layer, PKey and error counters. A host
with no RDMA device records an empty file: "no HCA", unlike a bundle without the file
("not measured").
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from validator.model import IB_ERROR_COUNTERS
from validator.node.capture.tree_record import Leaf, Recorded, record_tree
from validator.node.network_probe import HCA_FILES, PORT_FILES, ROOT
from validator.node.system import System

NAME = "infiniband-sysfs.txt"


def _walk(system: System) -> Iterator[Leaf]:
    """Each HCA's files, its interfaces (present), each numbered port's files and counters."""
    for device in system.glob(f"{ROOT}/*"):
        yield from ((f"{device}/{name}", True) for name in HCA_FILES)
        yield from ((net, False) for net in system.glob(f"{device}/device/net/*"))
        for port in system.glob(f"{device}/ports/*"):
            if not posixpath.basename(port).isdigit():
                continue
            yield from ((f"{port}/{name}", True) for name in PORT_FILES)
            yield from ((f"{port}/counters/{name}", True) for name in IB_ERROR_COUNTERS)


def record_infiniband(system: System) -> Recorded:
    """The tree's record, or why it was left out ("skipped: ...")."""
    return record_tree(system, (ROOT,), _walk)


__all__ = ["NAME", "record_infiniband"]
