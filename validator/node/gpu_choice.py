"""``--gpus 0,3``: the GPUs a run certifies, by index, PCI bus id or UUID.

The selectors are checked for shape where they are given (the controller, before any
host is reached) and resolved against a node's GPUs where its facts are read (the
node's own numbering): a selector that names none of them is refused in one line
that lists the GPUs the node has.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from validator.error_tree import BadInputError
from validator.fields import excerpt
from validator.model import GpuFacts
from validator.node.parsers.smi_common import normalize_bus_id
from validator.safe_text import one_line

MAX_SELECTORS = 64  # more GPUs than any node has: a pasted list gone wrong
_INDEX = re.compile(r"[0-9]{1,4}")
_UUID = re.compile(r"(?:GPU|MIG)-[0-9A-Fa-f-]{8,60}")


def parse_gpus(text: str, flag: str = "--gpus") -> tuple[str, ...]:
    """The selectors of ``--gpus 0,3`` (``18:00.0``, ``GPU-...`` too), checked for shape.

    Raises:
        BadInputError: an empty list, or an item that is no index, bus id or UUID.
    """
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise BadInputError(
            f"{flag} {excerpt(text)} has an empty item: give GPU indexes, PCI bus ids or "
            "UUIDs separated by commas, e.g. 0,3"
        )
    if len(items) > MAX_SELECTORS:
        raise BadInputError(f"{flag} names {len(items)} GPUs: give at most {MAX_SELECTORS}")
    for item in items:
        if not (_INDEX.fullmatch(item) or _UUID.fullmatch(item) or normalize_bus_id(item)):
            raise BadInputError(
                f"{flag} {excerpt(item)} is no GPU index, PCI bus id (00000000:18:00.0 or "
                "18:00.0) or UUID (GPU-...): write e.g. 0,3"
            )
    return tuple(dict.fromkeys(items))


def _matches(selector: str, gpu: GpuFacts) -> bool:
    if _INDEX.fullmatch(selector):
        return int(selector) == gpu.index
    if _UUID.fullmatch(selector):
        return isinstance(gpu.uuid, str) and gpu.uuid.lower() == selector.lower()
    bus = normalize_bus_id(selector)
    return bus is not None and isinstance(gpu.pci_bus_id, str) and gpu.pci_bus_id == bus


def node_gpus_line(gpus: Sequence[GpuFacts]) -> str:
    """The node's GPUs in one line: ``0 00000000:19:00.0 GPU-5f3a...``, escaped."""
    if not gpus:
        return "it has no GPU NVML can see"
    parts = []
    for gpu in gpus:
        words = [str(gpu.index)]
        for value in (gpu.pci_bus_id, gpu.uuid):
            if isinstance(value, str):
                words.append(one_line(value, 48))
        parts.append(" ".join(words))
    return "its GPUs are " + ", ".join(parts)


def resolve_gpus(selectors: Sequence[str], gpus: Sequence[GpuFacts]) -> tuple[int, ...]:
    """The indexes of the GPUs the selectors name, in the node's order.

    Raises:
        BadInputError: a selector names none of the node's GPUs; the line lists them.
    """
    chosen: set[int] = set()
    for selector in selectors:
        found = [gpu.index for gpu in gpus if _matches(selector, gpu)]
        if not found:
            raise BadInputError(
                f"--gpus {excerpt(selector)} names no GPU of this node: {node_gpus_line(gpus)}"
            )
        chosen.update(found)
    return tuple(sorted(chosen))


__all__ = ["node_gpus_line", "parse_gpus", "resolve_gpus"]
