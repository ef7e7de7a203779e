"""The drift checks' ids: one name each, the Prometheus file's list of them, in report order."""

from __future__ import annotations

import enum


class DriftCheck(str, enum.Enum):
    """One drift check (a finding's ``check``)."""

    BASELINE = "drift.baseline"
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
    BURN = "drift.burn"

    def __str__(self) -> str:
        return self.value


# Every drift check, in report order; the Prometheus file lists each (0 when clean).
DRIFT_CHECKS: tuple[str, ...] = tuple(check.value for check in DriftCheck)

__all__ = ["DRIFT_CHECKS", "DriftCheck"]
