"""The facts a node reports and the findings we draw from them.

Also the plain data the rooms share around those: a host as the inventory gives it
and the transports reach it (:class:`HostSpec`), and a drift result's checks and
state (:class:`DriftCheck`, :func:`drift_state`), which the renderers read.

Plain frozen dataclasses, JSON in and out, standard library only: this package is
shipped to GPU hosts with the node agent and must run on Python 3.9.

Facts are what was measured. A value that could not be measured is an
:class:`Unavailable` carrying the reason, never ``None`` and never a guess.

Every name is imported from here (``from validator.model import NodeFacts``); the
modules hold one idea each, and each imports only modules above it here:

- ``measured``: :data:`Measured`, :class:`Unavailable` and its :class:`Reason`, the
  schema version.
- ``gpu_facts``: one GPU's facts (:class:`GpuFacts`), its NVLinks, clock-event reasons.
- ``kernel_log_facts``: Xid events and other GPU faults in the kernel log.
- ``burn_facts``: the burn-in (:class:`BurnResult`), its telemetry and error counters.
- ``dcgm_facts``: a DCGM diagnostic run (:class:`DcgmDiag`).
- ``bandwidth_facts``: copy, peer and all-reduce bandwidths (:class:`Interconnect`).
- ``host_facts``: the host around the GPUs (:class:`HostFacts`): CPUs, memory, NVMe, services.
- ``certified_host``: the host as a certificate holds it (:class:`CertifiedHost`).
- ``network_facts``: the node's HCAs (InfiniBand, RoCE), ports, counters, flaps.
- ``container_facts``: the container runtime: CDI spec, runtimes, a container's GPUs.
- ``node_facts``: one node's facts (:class:`NodeFacts`), their provenance and conflicts.
- ``cross_node_facts``: RDMA pair tests and NCCL group tests between nodes.
- ``cross_node_stage``: the stage across nodes as it ran (:class:`CrossNodeStage`).
- ``busy_facts``: the GPUs a run certifies (``--gpus``) and which of them were busy.
- ``findings``: severities, verdicts, check families, actions, :class:`Finding`.
- ``results``: a node judged (:class:`NodeResult`), the fleet, the :class:`Report`.
- ``drift_checks``: a drift result's checks and state.
- ``host_spec``: a host as the transports reach it (:class:`HostSpec`).
- ``encoding`` and ``decoding``: JSON out (:func:`to_dict`) and in (:func:`from_dict`).
- ``kept_per_object``: a value kept per model object while it lives.
"""

from __future__ import annotations

from validator.model.bandwidth_facts import (
    AllReduce,
    AllReducePoint,
    Bandwidth,
    GpuCopyBandwidth,
    Interconnect,
    PeerBandwidth,
    measured_gb_s,
)
from validator.model.burn_facts import (
    BurnResult,
    BurnStatus,
    ErrorCounters,
    GpuBurn,
    TelemetrySample,
    counters_of,
    counters_unavailable,
)
from validator.model.busy_facts import (
    Busy,
    busy_reasons,
    busy_summary,
    chosen,
    chosen_gpus,
    process_words,
    scope_text,
)
from validator.model.certified_host import (
    CERTIFIED_HOST_FIELDS,
    CertifiedDrive,
    CertifiedHost,
    certified_host,
    host_from_fields,
)
from validator.model.container_facts import (
    CERTIFIED_CONTAINER_FIELD,
    IMAGE_PATTERN,
    CdiSpec,
    CertifiedContainer,
    ContainerFacts,
    ContainerRun,
    RuntimeConfig,
    certified_container,
    configured_runtimes,
)
from validator.model.cross_node_facts import (
    COLLECTIVES,
    IB_ONLY_ENVIRONMENT,
    NCCL_VARIANTS,
    RDMA_TESTS,
    NcclGroupResult,
    RdmaEnd,
    RdmaPairResult,
)
from validator.model.cross_node_stage import (
    KIND_UNITS,
    STAGE_KINDS,
    CrossNodeStage,
    CrossNodeTest,
    KindOutcome,
    Named,
)
from validator.model.dcgm_facts import DcgmDiag, DcgmOutcome, DcgmTestResult
from validator.model.decoding import SchemaError, from_dict
from validator.model.drift_checks import (
    CERTIFICATION_FAILED,
    DRIFT_CHECKS,
    DriftCheck,
    DriftState,
    drift_findings,
    drift_state,
    never_certified,
)
from validator.model.encoding import to_dict
from validator.model.findings import (
    ACTION_WORDS,
    HARDWARE_ACTIONS,
    Action,
    CheckFamily,
    Finding,
    Severity,
    Verdict,
    overall_verdict,
)
from validator.model.gpu_facts import (
    CLOCK_EVENT_REASONS,
    RECOVERY_ACTIONS,
    GpuFacts,
    GpuProcess,
    GpuStatus,
    NvLinkErrorCounts,
    NvLinkState,
    decode_clock_event_reasons,
    unreadable_gpu,
)
from validator.model.gpudirect_facts import (
    TOPO_LINKS,
    AcsPort,
    GpudirectFacts,
    GpuNicLink,
    IommuFacts,
    TopoMatrix,
    dmabuf_usable,
    peermem_path,
)
from validator.model.host_facts import (
    HOST_SERVICES,
    HOST_SYSCTL_NAMES,
    HostFacts,
    KernelSetting,
    MountSpace,
    NvmeDrive,
    ServiceState,
    SmartHealth,
    StackVersion,
)
from validator.model.host_spec import TRANSPORTS, HostSpec, TransportName
from validator.model.kept_per_object import KeptPerObject
from validator.model.kernel_log_facts import (
    DEFAULT_XID_WINDOW_HOURS,
    KERNEL_FAULT_KINDS,
    KernelFault,
    KernelLogFacts,
    XidEvent,
)
from validator.model.measured import (
    IMPLAUSIBLE,
    NOT_MEASURED,
    NOT_SUPPORTED,
    SCHEMA_VERSION,
    Measured,
    Reason,
    Unavailable,
    implausible_reading,
    known,
)
from validator.model.network_facts import (
    FLAP_LINE_CHARS,
    FLAP_LINES,
    IB_ERROR_COUNTERS,
    Hca,
    HcaPort,
    LinkFlap,
    NetworkFacts,
    PortCounter,
)
from validator.model.node_facts import (
    PROVENANCES,
    UNKNOWN_PROVENANCE,
    NodeFacts,
    NvmlStatus,
    SourceConflict,
    ToolFacts,
    provenance_of,
)
from validator.model.results import FleetSummary, NodeResult, Report, SkuFleetStats

__all__ = [
    "ACTION_WORDS",
    "CERTIFICATION_FAILED",
    "CERTIFIED_CONTAINER_FIELD",
    "CERTIFIED_HOST_FIELDS",
    "CLOCK_EVENT_REASONS",
    "COLLECTIVES",
    "DEFAULT_XID_WINDOW_HOURS",
    "DRIFT_CHECKS",
    "FLAP_LINES",
    "FLAP_LINE_CHARS",
    "HARDWARE_ACTIONS",
    "HOST_SERVICES",
    "HOST_SYSCTL_NAMES",
    "IB_ERROR_COUNTERS",
    "IB_ONLY_ENVIRONMENT",
    "IMAGE_PATTERN",
    "IMPLAUSIBLE",
    "KERNEL_FAULT_KINDS",
    "KIND_UNITS",
    "NCCL_VARIANTS",
    "NOT_MEASURED",
    "NOT_SUPPORTED",
    "PROVENANCES",
    "RDMA_TESTS",
    "RECOVERY_ACTIONS",
    "SCHEMA_VERSION",
    "STAGE_KINDS",
    "TOPO_LINKS",
    "TRANSPORTS",
    "UNKNOWN_PROVENANCE",
    "AcsPort",
    "Action",
    "AllReduce",
    "AllReducePoint",
    "Bandwidth",
    "BurnResult",
    "BurnStatus",
    "Busy",
    "CdiSpec",
    "CertifiedContainer",
    "CertifiedDrive",
    "CertifiedHost",
    "CheckFamily",
    "ContainerFacts",
    "ContainerRun",
    "CrossNodeStage",
    "CrossNodeTest",
    "DcgmDiag",
    "DcgmOutcome",
    "DcgmTestResult",
    "DriftCheck",
    "DriftState",
    "ErrorCounters",
    "Finding",
    "FleetSummary",
    "GpuBurn",
    "GpuCopyBandwidth",
    "GpuFacts",
    "GpuNicLink",
    "GpuProcess",
    "GpuStatus",
    "GpudirectFacts",
    "Hca",
    "HcaPort",
    "HostFacts",
    "HostSpec",
    "Interconnect",
    "IommuFacts",
    "KeptPerObject",
    "KernelFault",
    "KernelLogFacts",
    "KernelSetting",
    "KindOutcome",
    "LinkFlap",
    "Measured",
    "MountSpace",
    "Named",
    "NcclGroupResult",
    "NetworkFacts",
    "NodeFacts",
    "NodeResult",
    "NvLinkErrorCounts",
    "NvLinkState",
    "NvmeDrive",
    "NvmlStatus",
    "PeerBandwidth",
    "PortCounter",
    "RdmaEnd",
    "RdmaPairResult",
    "Reason",
    "Report",
    "RuntimeConfig",
    "SchemaError",
    "ServiceState",
    "Severity",
    "SkuFleetStats",
    "SmartHealth",
    "SourceConflict",
    "StackVersion",
    "TelemetrySample",
    "ToolFacts",
    "TopoMatrix",
    "TransportName",
    "Unavailable",
    "Verdict",
    "XidEvent",
    "busy_reasons",
    "busy_summary",
    "certified_container",
    "certified_host",
    "chosen",
    "chosen_gpus",
    "configured_runtimes",
    "counters_of",
    "counters_unavailable",
    "decode_clock_event_reasons",
    "dmabuf_usable",
    "drift_findings",
    "drift_state",
    "from_dict",
    "host_from_fields",
    "implausible_reading",
    "known",
    "measured_gb_s",
    "never_certified",
    "overall_verdict",
    "peermem_path",
    "process_words",
    "provenance_of",
    "scope_text",
    "to_dict",
    "unreadable_gpu",
]
