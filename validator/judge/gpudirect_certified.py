"""A certificate's GPUDirect RDMA summary: what drift compares the node's readiness with.

Optional in every certificate (None: not collected at certification, an older
certificate, or facts without the family): drift then has no baseline for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from validator.fields import Document, Field
from validator.model import NodeFacts, Unavailable, peermem_path


@dataclass(frozen=True)
class CertifiedGpudirect:
    """GPUDirect RDMA readiness as certified; a None part was not measured then."""

    peermem: str | None = None  # nvidia_peermem | dma-buf | none | no RDMA stack
    acs_enabled: bool | None = None  # ACS on at a switch port above a GPU or NIC
    affinity: tuple[str, ...] | None = None  # "GPU0 mlx5_0 PIX", one a GPU row read
    iommu_mode: str | None = None


def certified_gpudirect(facts: NodeFacts) -> CertifiedGpudirect | None:
    """The summary of ``facts``' GPUDirect readiness; None where it was not collected."""
    direct = facts.gpudirect
    if direct is None:
        return None
    ports = direct.acs_ports
    topology = direct.topology
    return CertifiedGpudirect(
        peermem=peermem_path(direct, facts.kernel),
        acs_enabled=None
        if isinstance(ports, Unavailable) or not all(port.readable for port in ports)
        else any(port.acs_enabled for port in ports),
        affinity=None if isinstance(topology, Unavailable) else affinity_lines(facts),
        iommu_mode=None if isinstance(direct.iommu, Unavailable) else direct.iommu.mode,
    )


def affinity_lines(facts: NodeFacts) -> tuple[str, ...] | None:
    """Each GPU row's nearest NIC, "GPU0 mlx5_0 PIX"; None where the matrix was not read."""
    direct = facts.gpudirect
    if direct is None or isinstance(direct.topology, Unavailable):
        return None
    return tuple(
        f"{link.gpu} {link.nearest_nic} {link.link}"
        for link in direct.topology.links
        if link.nearest_nic is not None
    )


CERTIFIED_GPUDIRECT_FIELDS = Document(
    (
        Field("peermem", str, nullable=True),
        Field("acs_enabled", bool, nullable=True),
        Field("affinity", list, nullable=True, item=Field("gpu", str), convert=tuple),
        Field("iommu_mode", str, nullable=True),
    ),
    noun="field",
    wanted="a JSON object",
)

__all__ = [
    "CERTIFIED_GPUDIRECT_FIELDS",
    "CertifiedGpudirect",
    "affinity_lines",
    "certified_gpudirect",
]
