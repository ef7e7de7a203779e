"""What joins a node's GPUs: copy bandwidth per GPU, the peer matrix, NCCL all-reduce.

This package's own module holds only what every caller needs before anything is
measured: whether a node's interconnect is to be measured at all (:func:`wanted`) and
the check of an ``--interconnect`` mode. The measurements themselves (live, simulated,
recorded) load only when used.
"""

from __future__ import annotations

from validator.error_tree import BadInputError
from validator.model import NodeFacts, Reason, Unavailable
from validator.node.bandwidth.bandwidth_config import MODES


def check_mode(mode: str) -> str:
    """``mode`` itself when it is one of :data:`MODES`.

    Raises:
        BadInputError: any other value, in one line naming the ones there are.
    """
    if mode not in MODES:
        raise BadInputError(
            f"--interconnect must be auto, on or off, got {mode!r}; give auto (measure "
            "on two or more GPUs unless every NVLink is known down), on (always) or off (never)"
        )
    return mode


def nvlinks_known_down(facts: NodeFacts) -> bool:
    """Whether every GPU's NVLink state was read and none has an active link.

    A GPU NVML says has no NVLink (not supported) counts as read; one whose state could
    not be read (an error, no permission, not asked) leaves the node unknown.
    """
    for gpu in facts.gpus:
        links = gpu.nvlinks
        if isinstance(links, Unavailable):
            if links.reason is not Reason.NOT_SUPPORTED:
                return False
        elif any(link.active for link in links):
            return False
    return True


def wanted(facts: NodeFacts, mode: str) -> bool:
    """Whether the node's interconnect is to be measured under ``mode``.

    ``on``: always; ``off``: never; ``auto``: two or more GPUs, unless every GPU's NVLink
    state is known and none is active (a PCIe-only node). The judge's default
    (``interconnect: null``) requires it of an NVLink SKU's node of two or more GPUs, so
    a node whose link state NVML cannot read is measured, never skipped.

    Raises:
        BadInputError: a mode that is none of :data:`MODES`.
    """
    check_mode(mode)
    if mode == "on":
        return True
    if mode == "off":
        return False
    return len(facts.gpus) >= 2 and not nvlinks_known_down(facts)


__all__ = ["check_mode", "nvlinks_known_down", "wanted"]
