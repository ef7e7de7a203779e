"""What joins a node's GPUs: copy bandwidth per GPU, the peer matrix, NCCL all-reduce.

This package's own module holds only what every caller needs before anything is
measured: whether a node's interconnect is to be measured at all (:func:`wanted`) and
the check of an ``--interconnect`` mode. The measurements themselves (live, simulated,
recorded) load only when used.
"""

from __future__ import annotations

from validator.errors import BadInputError
from validator.model import NodeFacts, Unavailable
from validator.node.bandwidth.config import MODES


def check_mode(mode: str) -> str:
    """``mode`` itself when it is one of :data:`MODES`.

    Raises:
        BadInputError: any other value, in one line naming the ones there are.
    """
    if mode not in MODES:
        raise BadInputError(
            f"--interconnect must be auto, on or off, got {mode!r}; give auto (measure "
            "where two or more GPUs have an active NVLink), on (always) or off (never)"
        )
    return mode


def has_active_nvlink(facts: NodeFacts) -> bool:
    """Whether any GPU of the node reports an active NVLink."""
    for gpu in facts.gpus:
        links = gpu.nvlinks
        if not isinstance(links, Unavailable) and any(link.active for link in links):
            return True
    return False


def wanted(facts: NodeFacts, mode: str) -> bool:
    """Whether the node's interconnect is to be measured under ``mode``.

    ``on``: always; ``off``: never; ``auto``: where there is something between GPUs to
    measure that a PCIe-only node lacks, i.e. two or more GPUs and one with an active
    NVLink (the policy's default, ``interconnect: null``, judges it only there too).

    Raises:
        BadInputError: a mode that is none of :data:`MODES`.
    """
    check_mode(mode)
    if mode == "on":
        return True
    if mode == "off":
        return False
    return len(facts.gpus) >= 2 and has_active_nvlink(facts)


__all__ = ["check_mode", "has_active_nvlink", "wanted"]
