"""The CPU stand-in: NumPy matrix products with the same orchestration and checks.

It proves the burn machinery (workers, timing windows, correctness checks,
fault detection) without a GPU. On a simulated node it also stands in for the
GPU's speed: each product is booked at the scenario's TFLOPS instead of the
CPU's, so the figures describe the simulated GPU. Lower precisions are emulated
by rounding the inputs; products are computed in float32.
"""

from __future__ import annotations

import hashlib
import importlib
import time
from typing import Any

from validator.node.burnin.backend import (
    BackendUnavailable,
    BatchTiming,
    CheckResult,
    SetupResult,
    flops_per_product,
)
from validator.node.burnin.config import BurnConfig

CPU_MATRIX_SIZE = 256  # big enough to exercise BLAS, small enough for a 2-core CI machine
CPU_RESULT_BUFFERS = 4  # host memory is not what a burn-in tests
REFERENCE_TILE = 16
REFERENCE_TOLERANCE = 1e-3  # float32 accumulation against float64


def _numpy() -> Any:  # noqa: ANN401 - the numpy module
    # Imported by name: numpy is no dependency of the node agent, only of this
    # optional CPU stand-in (tests, simulated nodes, a forced --burn-backend numpy).
    try:
        return importlib.import_module("numpy")
    except ImportError:
        raise BackendUnavailable("numpy is not installed") from None


class NumpyBackend:
    """Matrix products on the CPU, one worker per (stand-in) GPU."""

    name = "numpy"

    def __init__(
        self, simulated_tflops: dict[int, float] | None = None, devices: int = 1024
    ) -> None:
        self._np = _numpy()
        self._simulated = simulated_tflops
        self._devices = devices

    def device_count(self) -> int:
        """Stand-ins for as many GPUs as the node has."""
        return self._devices

    def worker(self, device: int, config: BurnConfig) -> NumpyWorker:
        """A worker for one stand-in GPU."""
        if config.dtype == "fp8":
            raise BackendUnavailable("the numpy backend cannot emulate fp8")
        tflops = None if self._simulated is None else self._simulated.get(device)
        return NumpyWorker(self._np, device, config, tflops)


class NumpyWorker:
    """One stand-in GPU's products and checks."""

    def __init__(
        self,
        np: Any,  # noqa: ANN401 - the numpy module
        device: int,
        config: BurnConfig,
        simulated_tflops: float | None,
    ) -> None:
        self._np = np
        self._device = device
        self._config = config
        self._simulated_tflops = simulated_tflops
        self._n = config.matrix_size or CPU_MATRIX_SIZE
        self._a: Any = None
        self._b: Any = None
        self._first: Any = None
        self._results: list[Any] = []

    def _round(self, values: Any) -> Any:  # noqa: ANN401
        np = self._np
        if self._config.dtype == "fp16":
            return values.astype(np.float16).astype(np.float32)
        if self._config.dtype == "bf16":
            # bfloat16 keeps the top 16 bits of a float32.
            bits = values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
            return bits.view(np.float32)
        if self._config.dtype == "tf32":
            bits = values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
            return bits.view(np.float32)
        return values.astype(np.float32)

    def setup(self) -> SetupResult:
        """Inputs from a fixed seed (the same on every GPU), the first product, its check."""
        np = self._np
        rng = np.random.default_rng(self._config.seed)
        self._a = self._round(rng.uniform(-1.0, 1.0, (self._n, self._n)))
        self._b = self._round(rng.uniform(-1.0, 1.0, (self._n, self._n)))
        self._first = self._a @ self._b
        self._results = [np.empty_like(self._first) for _ in range(CPU_RESULT_BUFFERS)]
        tile = min(REFERENCE_TILE, self._n)
        exact = self._a[:tile].astype(np.float64) @ self._b[:, :tile].astype(np.float64)
        scale = max(float(np.abs(exact).max()), 1e-30)
        error = float(np.abs(self._first[:tile, :tile] - exact).max()) / scale
        return SetupResult(
            matrix_size=self._n,
            result_buffers=len(self._results),
            reference_ok=error <= REFERENCE_TOLERANCE,
            reference_max_error=error,
            digest=hashlib.sha256(self._first.tobytes()).hexdigest()[:16],
            deterministic=True,
        )

    def run_batch(self) -> BatchTiming:
        """Every result buffer recomputed once."""
        np = self._np
        start = time.perf_counter()
        for result in self._results:
            np.matmul(self._a, self._b, out=result)
        elapsed = time.perf_counter() - start
        products = len(self._results)
        if self._simulated_tflops:
            elapsed = products * flops_per_product(self._n) / (self._simulated_tflops * 1e12)
        return BatchTiming(products=products, compute_s=elapsed)

    def check_batch(self) -> CheckResult:
        """Elements that differ from the first product (bitwise), and non-finite ones."""
        np = self._np
        mismatched = nonfinite = 0
        for result in self._results:
            mismatched += int(
                np.count_nonzero(result.view(np.uint32) != self._first.view(np.uint32))
            )
            nonfinite += int(np.count_nonzero(~np.isfinite(result)))
        return CheckResult(mismatched_elements=mismatched, nonfinite_elements=nonfinite)

    def inject(self, kind: str) -> None:
        """Spoil one element of the last result buffer."""
        np = self._np
        target = self._results[-1]
        row, col = self._n // 3, self._n // 5
        if kind == "nan":
            target[row, col] = np.nan
        else:
            target.view(np.uint32)[row, col] ^= np.uint32(1 << 12)

    def close(self) -> None:
        """Drop the buffers."""
        self._results = []
        self._a = self._b = self._first = None
