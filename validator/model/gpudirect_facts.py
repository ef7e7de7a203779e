"""GPUDirect RDMA readiness: peermem or dma-buf, GPU<->NIC affinity, PCIe ACS and the IOMMU.

What decides whether a NIC can read and write GPU memory directly (and fast): a kernel
path for it (``nvidia_peermem``, or dma-buf on a 5.12+ kernel with NVIDIA's open kernel
module), each GPU near its NIC on the PCIe tree (``nvidia-smi topo -m``), the switches
between them forwarding peer traffic rather than sending it up to the CPU (ACS off on
bare metal), and how the IOMMU treats DMA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from validator.model.measured import NOT_MEASURED, Measured

# dma-buf GPUDirect RDMA needs this kernel (and NVIDIA's open kernel module).
DMABUF_KERNEL: Tuple[int, int] = (5, 12)

# ``nvidia-smi topo -m`` link kinds, nearest first (NCCL ranks paths the same way:
# PIX and PXB stay under a PCIe switch, PHB and NODE cross the host bridge, SYS the
# socket interconnect). SOC is the name older drivers gave SYS.
TOPO_LINKS: Tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class GpuNicLink:
    """One GPU's row of the topology matrix: its nearest NIC and how it reaches it."""

    gpu: str  # the matrix's name, "GPU0"
    index: int  # 0 for "GPU0"
    nearest_nic: Optional[str]  # "mlx5_0" (the NIC legend's name where there is one)
    link: Optional[str]  # one of TOPO_LINKS; None where the row has no NIC column


@dataclass(frozen=True)
class TopoMatrix:
    """What ``nvidia-smi topo -m`` says of the GPUs and NICs."""

    gpus: Tuple[str, ...]  # every GPU column, "GPU0".."GPU7"
    nics: Tuple[str, ...]  # every NIC column by its name ("mlx5_0"; "NIC0" without legend)
    links: Tuple[GpuNicLink, ...]  # one per GPU row read
    missing_rows: Tuple[str, ...] = ()  # GPU columns with no (whole) row: output cut short


@dataclass(frozen=True)
class AcsPort:
    """One PCIe switch port (``lspci -vvv``) above a GPU or NIC, and its ACS control bits."""

    address: str  # "17:01.0" as lspci prints it (with the domain where printed)
    kind: str  # "upstream" or "downstream": a port of a PCIe switch
    below: Tuple[str, ...]  # the GPUs and NICs behind it, by address
    readable: bool  # False: "Capabilities: <access denied>" (lspci not run as root)
    has_acs: bool = False  # the port offers Access Control Services
    src_valid: bool = False
    req_redir: bool = False
    cmplt_redir: bool = False

    @property
    def acs_enabled(self) -> bool:
        """True where a bit that sends peer traffic up the tree (or checks it) is set."""
        return self.src_valid or self.req_redir or self.cmplt_redir


@dataclass(frozen=True)
class IommuFacts:
    """How the IOMMU treats device DMA: off, passthrough or translating."""

    mode: str  # "off" | "passthrough" | "translated" | "mixed"
    group_types: Tuple[str, ...] = ()  # the distinct /sys/kernel/iommu_groups/*/type values
    units: int = 0  # entries of /sys/class/iommu (DMAR units, AMD-Vi)
    cmdline: Tuple[str, ...] = ()  # the iommu arguments of /proc/cmdline


@dataclass(frozen=True)
class GpudirectFacts:
    """Everything GPUDirect RDMA readiness is judged on. Unreadable parts are NOT_MEASURED."""

    rdma_stack: Measured[bool] = NOT_MEASURED  # an ib_core module or /sys/class/infiniband device
    rdma_devices: Tuple[str, ...] = ()  # /sys/class/infiniband entries, "mlx5_0"
    peermem_loaded: Measured[bool] = NOT_MEASURED  # nvidia_peermem in /proc/modules
    open_kernel_module: Measured[bool] = NOT_MEASURED  # NVIDIA's open GPU kernel module
    virtualized: Measured[bool] = NOT_MEASURED  # a hypervisor below this host
    topology: Measured[TopoMatrix] = NOT_MEASURED
    acs_ports: Measured[Tuple[AcsPort, ...]] = NOT_MEASURED
    iommu: Measured[IommuFacts] = NOT_MEASURED


def dmabuf_usable(kernel: Measured[str], open_module: Measured[bool]) -> bool:
    """True on a 5.12+ kernel running NVIDIA's open GPU kernel module."""
    if open_module is not True or not isinstance(kernel, str):
        return False
    parts = kernel.split("-")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= DMABUF_KERNEL
    except (IndexError, ValueError):
        return False


def peermem_path(facts: GpudirectFacts, kernel: Measured[str]) -> Optional[str]:
    """How NICs reach GPU memory: nvidia_peermem, dma-buf, none, no RDMA stack; None: unknown."""
    if facts.rdma_stack is False:
        return "no RDMA stack"
    if facts.peermem_loaded is True:
        return "nvidia_peermem"
    if dmabuf_usable(kernel, facts.open_kernel_module):
        return "dma-buf"
    if facts.rdma_stack is True and facts.peermem_loaded is False:
        return "none"
    return None
