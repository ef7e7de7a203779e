"""What a burn-in backend offers: one worker per GPU, each doing the same few things.

Which backend runs is chosen in :mod:`validator.node.burnin.backend_choice`, which imports
the backends; they import this module, never it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from validator.node.burnin.burn_config import BurnConfig


class BackendUnavailable(Exception):
    """This backend cannot run here (library missing, no device); the message says why."""


@dataclass(frozen=True)
class SetupResult:
    """What a worker knows after allocating and computing its first product."""

    matrix_size: int
    result_buffers: int  # products kept in memory and compared each batch
    reference_ok: bool  # a small tile of the first product matched fp64 on the CPU
    reference_max_error: float  # largest relative error in that tile
    digest: str  # of the first product, equal across healthy GPUs
    deterministic: bool  # results are compared bitwise (else within tolerance)
    tolerance: float = 0.0


@dataclass(frozen=True)
class BatchTiming:
    """One batch: how many products, and the seconds of compute they took."""

    products: int
    compute_s: float


@dataclass(frozen=True)
class CheckResult:
    """A batch's results compared with the first product."""

    mismatched_elements: int
    nonfinite_elements: int


class GpuWorker(Protocol):
    """One GPU's share of the burn. Every call blocks until the device is done."""

    def setup(self) -> SetupResult:
        """Allocate inputs and result buffers, compute and check the first product."""
        ...

    def run_batch(self) -> BatchTiming:
        """Recompute every result buffer once."""
        ...

    def check_batch(self) -> CheckResult:
        """Compare every result buffer with the first product; count NaN and Inf."""
        ...

    def inject(self, kind: str) -> None:
        """Test hook: spoil one element of one result buffer ("flip" or "nan")."""
        ...

    def close(self) -> None:
        """Free what setup allocated."""
        ...


class Backend(Protocol):
    """A way to run matrix products on the node's GPUs."""

    name: str
    dtypes: frozenset[str]  # the burn dtypes this backend can run

    def device_count(self) -> int:
        """How many devices this backend sees."""
        ...

    def device_bus_ids(self) -> list[str]:
        """Each device's PCI bus id by device number ("" where it cannot be read)."""
        ...

    def worker(self, device: int, config: BurnConfig) -> GpuWorker:
        """A worker for one device (a backend device number, not an NVML index)."""
        ...


def flops_per_product(matrix_size: int) -> float:
    """Floating-point operations of one square product: 2 * m * n * k."""
    return 2.0 * float(matrix_size) ** 3
