"""The bundle's record of ``/sys/class/infiniband``: one ``path<TAB>value`` line a file read.

``gpuready capture`` asks the System for the very files the network probe reads
(validator.node.network_probe): each HCA's firmware, PSID, GUID and model, its network
interfaces, and each port's state, rate, link layer, PKey and error counters. A host
with no RDMA device records an empty file: "no HCA", unlike a bundle without the file
("not measured").
"""

from __future__ import annotations

import posixpath

from validator.model import IB_ERROR_COUNTERS, Unavailable
from validator.node.network_probe import HCA_FILES, PORT_FILES, ROOT
from validator.node.parsers.ib_sysfs import tree_line
from validator.node.system import NotRecordedError, System
from validator.node.system_facts import read_file

NAME = "infiniband-sysfs.txt"


def _lines(system: System, paths: list[str]) -> list[str]:
    lines = []
    for path in paths:
        text = read_file(system, path)
        if not isinstance(text, Unavailable):
            lines.append(tree_line(path, text))
    return lines


def record_infiniband(system: System) -> tuple[str, None] | str:
    """The tree's record, or why it was left out ("skipped: ...")."""
    try:
        devices = system.glob(f"{ROOT}/*")
        lines: list[str] = []
        for device in devices:
            lines += _lines(system, [f"{device}/{name}" for name in HCA_FILES])
            lines += [tree_line(net, "") for net in system.glob(f"{device}/device/net/*")]
            for port in system.glob(f"{device}/ports/*"):
                if not posixpath.basename(port).isdigit():
                    continue
                files = [f"{port}/{name}" for name in PORT_FILES]
                files += [f"{port}/counters/{name}" for name in IB_ERROR_COUNTERS]
                lines += _lines(system, files)
    except NotRecordedError as exc:  # re-capturing a bundle that lacks it
        return f"skipped: {exc}"
    except OSError as exc:
        return f"skipped: {ROOT}: {exc.strerror or exc}"
    return "".join(lines), None


__all__ = ["NAME", "record_infiniband"]
