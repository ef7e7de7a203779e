"""What a burn-in backend offers: one worker per GPU, each doing the same few things."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from validator.node.burnin.config import BurnConfig

if TYPE_CHECKING:
    from validator.node.burnin.numpy_backend import SimulatedBoards


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


def select_backend(
    name: str | None, dtype: str, *, simulated: SimulatedBoards | None = None
) -> Backend:
    """The named backend, or the best GPU backend that loads and can burn ``dtype``.

    Without a name: cublas, then torch (cublas cannot burn fp8, torch can).
    The numpy backend measures the CPU, so it is used only when asked for by
    name, or for a simulated node (whose boards it stands in for).

    Raises:
        BackendUnavailable: the named backend (or every backend) cannot run here.
    """
    from validator.node.burnin import numpy_backend

    if simulated is not None:
        if name not in (None, "numpy"):
            raise BackendUnavailable(
                f"a simulated node can only burn with the numpy backend, not {name}"
            )
        return numpy_backend.NumpyBackend(boards=simulated)
    order = [name] if name else ["cublas", "torch"]
    reasons = []
    for candidate in order:
        try:
            backend = _load(candidate)
        except BackendUnavailable as exc:
            reasons.append(f"{candidate}: {exc}")
            continue
        if dtype in backend.dtypes:
            return backend
        reasons.append(
            f"{candidate} cannot burn {dtype} (it runs {', '.join(sorted(backend.dtypes))})"
        )
    raise BackendUnavailable("; ".join(reasons))


def _load(name: str) -> Backend:
    if name == "numpy":
        from validator.node.burnin.numpy_backend import NumpyBackend

        return NumpyBackend()
    if name == "torch":
        from validator.node.burnin.torch_backend import TorchBackend

        return TorchBackend()
    if name == "cublas":
        from validator.node.burnin.cublas import CublasBackend

        return CublasBackend()
    raise BackendUnavailable(f"unknown backend {name!r}: use cublas, torch or numpy")
