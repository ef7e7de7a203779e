"""Everything measured about one node: its GPUs, tools, kernel log, burn-in and more.

Also where the facts came from (their provenance) and where the node's own sources
contradict each other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional, Tuple

from validator.model.bandwidth_facts import Interconnect
from validator.model.burn_facts import BurnResult
from validator.model.container_facts import ContainerFacts
from validator.model.dcgm_facts import DcgmDiag
from validator.model.gpu_facts import GpuFacts
from validator.model.gpudirect_facts import GpudirectFacts
from validator.model.host_facts import HostFacts
from validator.model.kernel_log_facts import KernelLogFacts
from validator.model.measured import NOT_MEASURED, SCHEMA_VERSION, Measured
from validator.model.network_facts import NetworkFacts


class NvmlStatus(str, enum.Enum):
    """How far we got talking to the driver through NVML (or its captured stand-in)."""

    OK = "ok"
    LIBRARY_NOT_FOUND = "library_not_found"  # libnvidia-ml.so.1 absent: no user-space driver
    DRIVER_NOT_LOADED = "driver_not_loaded"  # library present, kernel module not loaded
    DRIVER_MISMATCH = "driver_mismatch"  # "Driver/library version mismatch"
    NO_PERMISSION = "no_permission"
    NO_DEVICES = "no_devices"  # driver answered, no GPU found
    ERROR = "error"
    NOT_MEASURED = "not_measured"  # e.g. a capture without nvidia-smi output


@dataclass(frozen=True)
class ToolFacts:
    """The user-space pieces an operator pins: nvidia-smi, nvcc, cuDNN."""

    nvidia_smi_driver_version: Measured[str] = NOT_MEASURED
    nvidia_smi_cuda_version: Measured[str] = NOT_MEASURED
    nvidia_smi_error: Optional[str] = None  # what nvidia-smi printed instead of a table
    nvcc_version: Measured[str] = NOT_MEASURED  # release.patch, e.g. 12.4.131
    nvcc_path: Optional[str] = None
    cudnn_version: Measured[str] = NOT_MEASURED  # 9.6.0
    cudnn_source: Optional[str] = None  # header path, library path or package
    cudnn_cuda_major: Measured[int] = NOT_MEASURED  # CUDA major cuDNN was built for


@dataclass(frozen=True)
class SourceConflict:
    """Two of a node's sources disagree about one thing, or one source is cut short.

    A captured bundle holds several views of the same GPUs (``nvidia-smi -q``,
    ``-q -x``, the banner, ``lspci``); facts read from views that contradict each
    other are not facts. The judge makes each conflict a required finding.
    """

    what: str  # driver_version | gpu_count | gpu_name | pci_bus_id | truncated | ...
    detail: str  # one sentence: which files say what
    sources: Tuple[str, ...] = ()  # the files (or sources) involved
    proves_fault: bool = False  # the files prove a fault (FAIL), not just disagree (UNKNOWN)


@dataclass(frozen=True)
class NodeFacts:
    """Everything measured about one node, from one source."""

    hostname: str
    source: str  # live | capture | simulate
    source_detail: str = ""  # capture directory or scenario name
    collected_at: str = ""  # ISO 8601 UTC
    schema_version: int = SCHEMA_VERSION
    os_name: Measured[str] = NOT_MEASURED
    kernel: Measured[str] = NOT_MEASURED
    nvml_status: NvmlStatus = NvmlStatus.NOT_MEASURED
    nvml_detail: str = ""
    driver_version: Measured[str] = NOT_MEASURED  # user-space driver (NVML / nvidia-smi)
    cuda_driver_version: Measured[str] = NOT_MEASURED  # CUDA version the driver supports, "12.4"
    kernel_module_version: Measured[str] = NOT_MEASURED  # /proc/driver/nvidia/version
    pci_gpu_count: Measured[int] = NOT_MEASURED  # NVIDIA display/3D controllers on the PCI bus
    pci_nvswitch_count: Measured[int] = NOT_MEASURED
    gpus: Tuple[GpuFacts, ...] = ()
    tools: ToolFacts = field(default_factory=ToolFacts)
    kernel_log: KernelLogFacts = field(
        default_factory=lambda: KernelLogFacts(source="none", window_hours=None)
    )
    burn: Optional[BurnResult] = None  # None: no burn-in was asked for
    dcgm: Optional[DcgmDiag] = None  # None: no DCGM diagnostic asked for or recorded
    interconnect: Optional[Interconnect] = None  # None: not asked for and not recorded
    # Where the node's sources contradict each other (a captured bundle's files).
    source_conflicts: Tuple[SourceConflict, ...] = ()
    # Slurm jobs other than this run's own with processes on this node (``scontrol
    # listpids``): their GPUs are not burned. Not measured where Slurm is absent.
    slurm_jobs: Measured[Tuple[str, ...]] = NOT_MEASURED
    allow_busy: bool = False  # --allow-busy: GPUs with work of others were burned anyway
    # --gpus: the indexes of the GPUs certified, the others read for the node's identity
    # only; None: every GPU.
    chosen_gpus: Optional[Tuple[int, ...]] = None
    # The HCAs (InfiniBand, RoCE): the collector always sets it; None only in facts from
    # an older agent or built by hand, which are then not judged for the network.
    network: Optional[NetworkFacts] = None
    # GPUDirect RDMA readiness; None: not collected (an older agent's or hand-built facts).
    gpudirect: Optional[GpudirectFacts] = None
    # The host around the GPUs (validator.node.host_probe); None: not collected (an older
    # agent's facts, hand-built ones): no host finding then.
    host: Optional[HostFacts] = None
    # The container runtime (validator.model.container_facts); None: not collected (an
    # older agent's facts, hand-built ones): no container finding then.
    container: Optional[ContainerFacts] = None


# Where a node's facts came from: its own GPUs (live), a recorded bundle (capture) or a
# scenario (simulate). Certificates, history rows and reports carry it, so a simulated
# node's verdict is never taken for a real host's.
PROVENANCES: Tuple[str, ...] = ("live", "capture", "simulate")
# A source outside PROVENANCES (a forged or damaged agent's): never read as one of them.
UNKNOWN_PROVENANCE = "unknown"


def provenance_of(facts: NodeFacts) -> str:
    """``live``, ``capture`` or ``simulate``; ``unknown`` for any other source a node reported."""
    return facts.source if facts.source in PROVENANCES else UNKNOWN_PROVENANCE
