"""A sysfs tree in a capture bundle: one ``path<TAB>value`` line a file, bounded.

The bundle's sysfs records (``infiniband-sysfs.txt``, ``nvme-sysfs.txt``,
``iommu-sysfs.txt``) are each written by :func:`record_tree`. A family names the
places it reads (its walk: the paths its probe globs, each with whether its text is the
fact or only its presence); the helper reads them through the
:class:`~validator.node.system.System`, as the probe does, and writes the lines.

The walk never descends on its own: only the paths the family's fixed patterns
name are read, so no directory is listed past them and no link the kernel placed
(``device``, ``subsystem``) is walked into; each path must lie under the tree's
roots, spelled without ``..``. The record is bounded by its count of files and its
bytes (what a bundle file may hold and still be read back); a tree over either is
left out whole, with the reason, rather than cut: a path missing from a recorded
tree reads as "the host has no such file".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Optional, Union

from validator.limits import LINE_BYTES, TOOL_OUTPUT_BYTES
from validator.model import Unavailable
from validator.node.system import NotRecordedError, System
from validator.node.system_facts import read_file

# (text, where it was found), or why it was left out ("skipped: ...").
Recorded = Union[tuple[str, Optional[str]], str]
# One place of a walk: its path, and True where its text is read (False: its presence is
# the fact, recorded with an empty value).
Leaf = tuple[str, bool]
Walk = Callable[[System], Iterable[Leaf]]

MAX_TREE_FILES = 16_384  # a host's HCA ports' counters, its IOMMU groups: far fewer
MAX_TREE_BYTES = TOOL_OUTPUT_BYTES  # the most the bundle's reader takes of the file


def tree_line(path: str, value: str) -> str:
    """One ``path<TAB>value`` line (the value's line breaks and tabs flattened to spaces)."""
    flat = " ".join(value.split())
    return f"{path}\t{flat}\n"


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    parts = path.split("/")
    if ".." in parts or "." in parts or "" in parts[1:]:
        return False
    return any(path == root or path.startswith(root + "/") for root in roots)


def _line(system: System, path: str, read: bool) -> str | None:
    if not read:
        return tree_line(path, "")
    text = read_file(system, path)
    return None if isinstance(text, Unavailable) else tree_line(path, text)


def record_tree(
    system: System,
    roots: tuple[str, ...],
    walk: Walk,
    *,
    max_files: int = MAX_TREE_FILES,
    max_bytes: int = MAX_TREE_BYTES,
) -> Recorded:
    """The record of the places ``walk`` names under ``roots``, or why it was left out.

    A file that cannot be read (gone, no permission) has no line, as the probe
    finds it missing; a tree with no file at all is an empty record (the host has
    none), unlike a tree left out.
    """
    lines: list[str] = []
    size = 0
    try:
        for path, read in walk(system):
            if not _inside(path, roots):
                return f"skipped: {path[:200]!r} is not under {' or '.join(roots)}"
            if len(lines) >= max_files:
                return f"skipped: {roots[0]} holds more than {max_files} files"
            line = _line(system, path, read)
            if line is None:
                continue
            length = len(line.encode("utf-8"))  # bytes, as the bundle's reader counts them
            size += length
            if length > LINE_BYTES or size > max_bytes:
                return _too_long(roots[0], path, line, max_bytes)
            lines.append(line)
    except NotRecordedError as exc:  # re-capturing a bundle that lacks it
        return f"skipped: {exc}"
    except OSError as exc:
        return f"skipped: {roots[0]}: {exc.strerror or exc}"
    return "".join(lines), None


def _too_long(root: str, path: str, line: str, max_bytes: int) -> str:
    if len(line.encode("utf-8")) > LINE_BYTES:  # the bundle's reader takes no longer line
        return f"skipped: {path[:200]!r} holds more than {LINE_BYTES} bytes"
    return f"skipped: {root} records to more than {max_bytes} bytes"


__all__ = [
    "MAX_TREE_BYTES",
    "MAX_TREE_FILES",
    "Leaf",
    "Recorded",
    "Walk",
    "record_tree",
    "tree_line",
]
