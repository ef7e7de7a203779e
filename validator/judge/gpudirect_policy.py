"""The policy's ``gpudirect:`` key: what GPUDirect RDMA readiness a site requires.

::

    gpudirect:
      required_affinity: pxb    # pix | pxb | node: the farthest a GPU's nearest NIC may be
      acs_allowed: false        # true in a VM, where ACS isolates the guests (NCCL: use ATS)
      require_peermem: true     # where an RDMA stack is present: nvidia_peermem or dma-buf
      required: true            # false: no GPUDirect RDMA here; reported, never blocks

``required_affinity`` follows NCCL's ranking of PCIe paths: PIX and PXB stay under a
PCIe switch; PHB and NODE cross the CPU's host bridge (slower: a WARN under ``pxb``);
SYS crosses the socket interconnect and always fails where NICs exist.
"""

from __future__ import annotations

from dataclasses import dataclass

from validator.fields import Document, Field

AFFINITIES: tuple[str, ...] = ("pix", "pxb", "node")


@dataclass(frozen=True)
class GpudirectPolicy:
    """What a site requires of GPUDirect RDMA readiness (see the module doc)."""

    required_affinity: str = "pxb"
    acs_allowed: bool = False
    require_peermem: bool = True
    required: bool = True  # False: the family is reported and never blocks certification


GPUDIRECT_FIELDS = Document(
    (
        Field("required_affinity", str, choices=AFFINITIES),
        Field("acs_allowed", bool),
        Field("require_peermem", bool),
        Field("required", bool),
    ),
    wanted=(
        "a mapping of gpudirect keys (required_affinity, acs_allowed, require_peermem, required)"
    ),
)

__all__ = ["AFFINITIES", "GPUDIRECT_FIELDS", "GpudirectPolicy"]
