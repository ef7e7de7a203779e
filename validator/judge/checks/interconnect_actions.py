"""What fixes a low bandwidth figure: one answer for certify, the fleet and drift.

``interconnect.*`` (certify), ``fleet.interconnect`` and ``drift.interconnect`` each find
a figure low against something else (a floor, the fleet's median, the certificate), but
the figure's cause is the same whatever it was held against, so they ask here:

* H2D and D2H are the GPU's PCIe path (riser, cable, slot); HBM is the chip.
* A pair first the fabric manager where a GPU has not completed its NVSwitch
  registration, else its NVLinks as the nvlink checks repair them on the SKU
  (:func:`validator.judge.checks.nvlink.link_repair`).
* A slow all-reduce the fabric manager as a pair, else what the same node's peer copies
  say (:class:`PeerCopies`): pairs that failed explain it (their links); every pair at
  speed on an NVSwitch SKU leaves the NVSwitch fabric on the baseboard; pairs not judged
  leave the links or the fabric, and the links are what the SKU repairs first.

The module lives beside the checks and imports none of the check families but nvlink, so
``interconnect``, ``fleet`` and ``drift`` may all import it without a cycle.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Sequence

from validator.judge.catalog import Sku
from validator.judge.checks.nvlink import link_repair
from validator.model import Action, Finding, GpuFacts, Severity

PCIE_SOURCE = "gpuready: a slow host copy is the GPU's PCIe path: its riser, cable or slot"
HBM_SOURCE = "gpuready: a copy within the GPU's own memory is the chip: no field repair"
FABRIC_SOURCE = "gpuready: a GPU's NVSwitch fabric registration is not completed"
BASEBOARD_SOURCE = (
    "gpuready: all-reduce slow while every GPU pair copies at speed: the NVSwitch fabric "
    "on the baseboard"
)


class PeerCopies(enum.Enum):
    """What a node's peer copies said, which tells why its all-reduce is slow."""

    FAILED = "failed"  # a pair was slow, or lost its peer access
    AT_SPEED = "at speed"  # the pairs were judged and every one copies at speed
    NOT_JUDGED = "not judged"  # not measured, busy, or nothing to hold them against


def peer_copies(findings: Iterable[Finding], p2p_check: str, access_check: str) -> PeerCopies:
    """What the pair findings among ``findings`` say: a FAIL of either check, a PASS of P2P.

    Args:
        findings: a node's findings (others than the two checks are ignored).
        p2p_check: the check judging the pairs' bandwidth (``interconnect.p2p``).
        access_check: the check judging their peer access (``interconnect.peer_access``);
            the same id as ``p2p_check`` where one check says both (``drift.interconnect``).

    Returns:
        FAILED when one failed, else AT_SPEED when the bandwidth check passed, else
        NOT_JUDGED.
    """
    pairs = [finding for finding in findings if finding.check in (p2p_check, access_check)]
    if any(finding.severity is Severity.FAIL for finding in pairs):
        return PeerCopies.FAILED
    if any(f.check == p2p_check and f.severity is Severity.PASS for f in pairs):
        return PeerCopies.AT_SPEED
    return PeerCopies.NOT_JUDGED


def fabric_unfinished(
    gpus: Sequence[GpuFacts], indexes: Collection[int] | None = None
) -> list[tuple[int, str]]:
    """(GPU, state) for each GPU whose NVSwitch fabric registration is not completed.

    Args:
        gpus: the node's GPUs.
        indexes: only these NVML indices (a pair's two ends); every GPU when None.
    """
    return [
        (gpu.index, gpu.fabric_state)
        for gpu in gpus
        if (indexes is None or gpu.index in indexes)
        and isinstance(gpu.fabric_state, str)
        and gpu.fabric_state.lower() != "completed"
    ]


def all_reduce_action(
    sku: Sku | None, gpus: Sequence[GpuFacts], peers: PeerCopies
) -> tuple[Action, str]:
    """What fixes a slow all-reduce, and why, given what the same node's pairs said."""
    if fabric_unfinished(gpus):
        return Action.FIX_SOFTWARE, FABRIC_SOURCE
    if peers is PeerCopies.AT_SPEED and sku is not None and sku.nvswitch:
        return Action.DRAIN_RMA, BASEBOARD_SOURCE
    return link_repair(sku)


def figure_action(
    figure: str,
    sku: Sku | None,
    gpus: Sequence[GpuFacts] = (),
    peers: PeerCopies = PeerCopies.NOT_JUDGED,
) -> tuple[Action, str]:
    """What fixes a low figure (``h2d``, ``d2h``, ``hbm``, ``p2p``, ``all_reduce``), and why.

    Args:
        figure: which figure is low.
        sku: the node's catalog row (None: unknown SKU, the milder repair).
        gpus: the GPUs the figure involves (a pair's two, the node's for the all-reduce).
        peers: for ``all_reduce`` only, what the same node's pairs said; the default
            does not blame the baseboard without the pairs seen at speed.
    """
    if figure in ("h2d", "d2h"):
        return Action.RESEAT_CABLE_RISER, PCIE_SOURCE
    if figure == "hbm":
        return Action.DRAIN_RMA, HBM_SOURCE
    if figure == "all_reduce":
        return all_reduce_action(sku, gpus, peers)
    if fabric_unfinished(gpus):
        return Action.FIX_SOFTWARE, FABRIC_SOURCE
    return link_repair(sku)


__all__ = [
    "BASEBOARD_SOURCE",
    "FABRIC_SOURCE",
    "HBM_SOURCE",
    "PCIE_SOURCE",
    "PeerCopies",
    "all_reduce_action",
    "fabric_unfinished",
    "figure_action",
    "peer_copies",
]
