"""How many GPUs each Slurm node declares as GRES, from ``scontrol show node``.

A cluster that fences GPU devices (``ConstrainDevices=yes`` in cgroup.conf) gives a job
only the GPUs it asked for (``--gres=gpu:N``): a job that asks none runs with none, and
NCCL then finds no GPU. A cluster whose nodes declare no GPU GRES refuses such a request.
So the stage asks for GPUs exactly where the nodes declare them.

Both forms of ``scontrol show node`` are read: ``-o`` (one line a node) and the
multi-line form. ``Gres=`` holds comma-separated ``name[:type][:count][(S:sockets)]``
entries (``gpu:8``, ``gpu:a40:1(S:0,2,4)``, ``gpu:4,mps:400``), or ``(null)``.
"""

from __future__ import annotations

import re

from validator import limits

_RECORD = re.compile(r"(?:^|\s)NodeName=(\S+)")
_GRES = re.compile(r"(?:^|\s)Gres=(\S*)")


def _entries(gres: str) -> list[str]:
    """The entries of a Gres value, split at commas outside parentheses."""
    entries: list[str] = []
    current: list[str] = []
    depth = 0
    for char in gres:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            entries.append("".join(current))
            current = []
        else:
            current.append(char)
    entries.append("".join(current))
    return [entry for entry in entries if entry]


def gres_gpus(gres: str) -> int:
    """The GPUs a ``Gres=`` value declares (0 for none, ``(null)`` or other GRES only)."""
    total = 0
    for entry in _entries(gres.strip()):
        parts = entry.split("(", 1)[0].split(":")
        if parts[0] != "gpu":
            continue
        count = parts[-1] if len(parts) > 1 else "1"
        total += int(count) if count.isdigit() else 1  # gpu:h100 alone: one of that type
    return total


def parse_node_gpus(text: str) -> dict[str, int]:
    """Node name -> GPUs its GRES declares, for every node record in ``text``."""
    text = text[: limits.TOOL_OUTPUT_BYTES]
    starts = list(_RECORD.finditer(text))
    found: dict[str, int] = {}
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        gres = _GRES.search(text, match.end(), end)
        found[match.group(1)] = gres_gpus(gres.group(1)) if gres else 0
    return found


__all__ = ["gres_gpus", "parse_node_gpus"]
