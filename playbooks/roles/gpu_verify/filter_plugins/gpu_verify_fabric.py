"""Pure parser for the Fabric section of ``nvidia-smi -q``, used by gpu_verify's wait.

Ansible loads this file as a role filter plugin; the functions are plain Python so the
tests run them on real recorded ``nvidia-smi -q`` outputs (public repositories' test data).

The section, per GPU (real output, 8x H100 SXM, 565.57.01)::

    GPU 00000000:18:00.0
        ...
        Fabric
            State                             : Completed
            Status                            : Success
"""

from __future__ import annotations

import re
from typing import Callable

_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+)\s*$")
_FIELD = re.compile(r"^([A-Za-z][A-Za-z ]*?)\s*:\s*(.*?)\s*$")
# GPUs without NVLink fabric registration (PCIe cards, and NVSwitch generations before
# Hopper, e.g. HGX A100) print N/A: not supported, not pending.
_NOT_SUPPORTED = {"n/a", "not supported"}
# Registration still running: worth waiting for.
PENDING_STATES = ("In Progress", "Not Started")
COMPLETED = "Completed"
NOT_SUPPORTED = "Not supported"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def gpu_verify_fabric_states(text: str | None) -> list[dict[str, str]]:
    """Each GPU's fabric registration from ``nvidia-smi -q`` output.

    Returns:
        One ``{"gpu": bus id or "?", "state": ..., "status": ...}`` per Fabric section,
        in output order. ``state`` is ``Completed``, ``In Progress``, ``Not Started``,
        ``Not supported`` (N/A) or whatever else the driver printed; ``status`` is
        nvidia-smi's text (``Success``, ``N/A``, an error) or ``""`` when absent.
    """
    states: list[dict[str, str]] = []
    gpu = "?"
    lines = (text or "").splitlines()
    for number, line in enumerate(lines):
        header = _GPU_HEADER.match(line.strip())
        if header and _indent(line) == 0:
            gpu = header.group(1)
            continue
        if line.strip() != "Fabric":
            continue
        depth = _indent(line)
        fields: dict[str, str] = {}
        child_depth: int | None = None
        for child in lines[number + 1 :]:
            if not child.strip():
                continue
            if _indent(child) <= depth:
                break
            child_depth = _indent(child) if child_depth is None else child_depth
            if _indent(child) != child_depth:
                continue  # Health sub-fields
            match = _FIELD.match(child.strip())
            if match:
                fields.setdefault(match.group(1), match.group(2))
        state = fields.get("State", "")
        if state.lower() in _NOT_SUPPORTED:
            state = NOT_SUPPORTED
        states.append({"gpu": gpu, "state": state, "status": fields.get("Status", "")})
    return states


def gpu_verify_fabric_summary(text: str | None) -> dict[str, object]:
    """The verdict the fabric wait needs, from ``nvidia-smi -q`` output.

    Returns:
        ``settled``: no GPU is still registering, so waiting longer changes nothing
        (also true when no Fabric section was printed at all); ``ok``: settled and
        every GPU is ``Completed``/``Success`` or reports no fabric (``Not supported``);
        ``pending`` / ``failed``: the GPUs (bus id and what they report) keeping it
        from settling / from being ok; ``seen``: the distinct ``state/status`` pairs,
        for messages; ``count``: Fabric sections read.
    """
    states = gpu_verify_fabric_states(text)
    pending = [s for s in states if s["state"] in PENDING_STATES or not s["state"]]
    failed = [
        s
        for s in states
        if s not in pending
        and not (s["state"] == COMPLETED and s["status"] == "Success")
        and s["state"] != NOT_SUPPORTED
    ]
    seen = sorted({f"{s['state'] or 'none'}/{s['status'] or 'none'}" for s in states})
    return {
        "settled": not pending,
        "ok": bool(states) and not pending and not failed,
        "pending": [f"{s['gpu']} {s['state'] or 'no state'}" for s in pending],
        "failed": [f"{s['gpu']} {s['state']}/{s['status'] or 'no status'}" for s in failed],
        "seen": seen,
        "count": len(states),
    }


class FilterModule:
    """gpu_verify's filters."""

    def filters(self) -> dict[str, Callable[..., object]]:
        """The filters by name."""
        return {
            "gpu_verify_fabric_states": gpu_verify_fabric_states,
            "gpu_verify_fabric_summary": gpu_verify_fabric_summary,
        }
