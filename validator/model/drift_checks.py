"""A drift result's checks and state, which the drift command and the renderers read."""

from __future__ import annotations

import enum
import typing
from typing import Tuple

from validator.model.findings import Finding, Severity, Verdict
from validator.model.results import NodeResult


class DriftCheck(str, enum.Enum):
    """One drift check (a finding's ``check``), in report order."""

    BASELINE = "drift.baseline"  # no certificate: never certified (UNKNOWN, not drift)
    CERTIFICATE = "drift.certificate"  # a certificate that failed its check: not trusted (FAIL)
    DRIVER = "drift.driver"
    CUDA = "drift.cuda"
    KERNEL_MODULE = "drift.kernel_module"
    NVCC = "drift.nvcc"
    CUDNN = "drift.cudnn"
    GPU_ADDED = "drift.gpu_added"
    GPU_REMOVED = "drift.gpu_removed"
    GPU_SWAPPED = "drift.gpu_swapped"
    VBIOS = "drift.vbios"
    POWER_LIMIT = "drift.power_limit"
    PCIE_GEN = "drift.pcie_gen"
    PCIE_WIDTH = "drift.pcie_width"
    ECC = "drift.ecc"
    ROW_REMAP = "drift.row_remap"
    RETIRED_PAGES = "drift.retired_pages"
    PERSISTENCE = "drift.persistence"
    XID = "drift.xid"
    NVLINK = "drift.nvlink"  # a link down or slower than certified
    NVLINK_ERRORS = "drift.nvlink_errors"  # link error counters grew since certification
    PCIE_REPLAY = "drift.pcie_replay"  # PCIe replays grew since certification
    RECOVERY_ACTION = "drift.recovery_action"  # the driver now asks for a reset or reboot
    DCGM = "drift.dcgm"  # a DCGM test that passed at certification no longer does
    INTERCONNECT = "drift.interconnect"  # a copy, peer or all-reduce bandwidth fell
    BURN = "drift.burn"
    NETWORK = "drift.network"  # an HCA port down or slower than certified
    NETWORK_FIRMWARE = "drift.network_firmware"  # an HCA's firmware changed
    NETWORK_ERRORS = "drift.network_errors"  # HCA port error counters grew
    # GPUDirect RDMA readiness: peermem gone, ACS turned on, a GPU's nearest NIC changed.
    GPUDIRECT = "drift.gpudirect"
    HOST = "drift.host"  # the host's CPUs, memory, a drive's health, a service, a version
    # The container runtime: the toolkit's version, the CDI spec's GPUs, the runtimes' config.
    CONTAINER_TOOLKIT = "drift.container_toolkit"
    CONTAINER_CDI = "drift.container_cdi"
    CONTAINER_RUNTIME = "drift.container_runtime"
    # A certificate of some GPUs only (--gpus): the others are not vouched for (WARN).
    SCOPE = "drift.scope"

    def __str__(self) -> str:
        return self.value


# Every drift check, in report order; the Prometheus file lists each (0 when clean).
DRIFT_CHECKS: Tuple[str, ...] = tuple(check.value for check in DriftCheck)


class DriftState(str, enum.Enum):
    """A node's drift state, as the Prometheus file and the terminal name it."""

    OK = "ok"  # as certified
    DRIFT = "drift"  # something moved, or the certificate is not trusted (drift.certificate)
    UNKNOWN = "unknown"  # could not be shown unchanged
    NEVER_CERTIFIED = "never_certified"  # no certificate to compare with, never tried
    NOT_CERTIFIED = "not_certified"  # no certificate: its last certification did not certify it


# The baseline finding's ``observed`` where a certification was tried and did not certify
# the node (validator.drift.drift_verdict), so the state never reads "never certified".
CERTIFICATION_FAILED = "no certificate: its last certification did not certify it"


def drift_findings(findings: typing.Iterable[Finding]) -> list[Finding]:
    """The findings that are drift (FAIL)."""
    return [finding for finding in findings if finding.severity is Severity.FAIL]


def never_certified(result: NodeResult) -> bool:
    """True for a drift result of a node without a certificate (its baseline finding)."""
    return any(f.check == DriftCheck.BASELINE for f in result.findings)


def drift_state(result: NodeResult) -> DriftState:
    """The node's drift state, from its drift result."""
    if result.verdict is Verdict.CERTIFIED:
        return DriftState.OK
    if result.verdict is Verdict.NOT_CERTIFIED:
        return DriftState.DRIFT
    baseline = [f for f in result.findings if f.check == DriftCheck.BASELINE]
    if not baseline:
        return DriftState.UNKNOWN
    if baseline[0].observed == CERTIFICATION_FAILED:
        return DriftState.NOT_CERTIFIED
    return DriftState.NEVER_CERTIFIED
