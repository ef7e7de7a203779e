"""The CPU stand-in: NumPy matrix products with the same orchestration and checks.

It proves the burn machinery (workers, timing windows, correctness checks,
fault detection) without a GPU. On a simulated node it also stands in for the
GPU's speed: each product is booked at the scenario's TFLOPS instead of the
CPU's, so the figures describe the simulated GPU. Lower precisions are emulated
by rounding the inputs; products are computed in float32.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from validator.node.burnin.backend import (
    BackendUnavailable,
    BatchTiming,
    CheckResult,
    SetupResult,
    flops_per_product,
)
from validator.node.burnin.burn_config import BurnConfig

CPU_MATRIX_SIZE = 256  # big enough to exercise BLAS, small enough for a 2-core CI machine
# A simulated board books its speed from the scenario, so its products only have to exercise
# the checks: at 64 they stay below OpenBLAS's threading threshold, and eight boards on two
# cores each finish a batch in about a millisecond instead of half a second.
SIMULATED_MATRIX_SIZE = 64
CPU_RESULT_BUFFERS = 4  # host memory is not what a burn-in tests
# A simulated board's batches are paced: its speed is booked, so running products back to back
# only burns the host's CPU (8 boards kept ~1.7 cores busy). Two batches per throughput window
# keep every window, warm-up and load edge of today's timing, at about 1% of a core.
PACED_BATCHES_PER_WINDOW = 2
REFERENCE_TILE = 16
REFERENCE_TOLERANCE = 1e-3  # float32 accumulation against float64


def _numpy() -> Any:  # noqa: ANN401 - the numpy module
    # Imported by name: numpy is no dependency of the node agent, only of this
    # optional CPU stand-in (tests, simulated nodes, a forced --burn-backend numpy).
    try:
        return importlib.import_module("numpy")
    except ImportError:
        raise BackendUnavailable("numpy is not installed") from None


@dataclass(frozen=True)
class SimulatedBoard:
    """One board of a simulated node, at the device number its CUDA runtime gives it."""

    bus_id: str
    tflops: float | None = None  # booked speed; None: the CPU's own
    wedged: bool = False  # run_batch never returns, as a hung GPU's kernel


SimulatedBoards = Sequence[SimulatedBoard]


class NumpyBackend:
    """Matrix products on the CPU, one worker per (stand-in) GPU.

    Args:
        simulated_tflops: booked speed by device number (no boards given).
        devices: how many stand-ins, when no boards are given.
        boards: a simulated node's boards by device number: their bus ids,
            speeds and faults.
    """

    name = "numpy"
    dtypes = frozenset({"bf16", "fp16", "tf32", "fp32"})

    def __init__(
        self,
        simulated_tflops: dict[int, float] | None = None,
        devices: int = 1024,
        boards: SimulatedBoards | None = None,
    ) -> None:
        self._np = _numpy()
        self._boards = list(boards) if boards is not None else None
        self._simulated = simulated_tflops
        if self._boards is not None:
            self._simulated = {
                device: board.tflops
                for device, board in enumerate(self._boards)
                if board.tflops is not None
            }
        self._devices = len(self._boards) if self._boards is not None else devices
        # Plain stand-ins are interchangeable: any may stand in for any GPU (see run.py).
        self.stand_in = self._boards is None

    def device_count(self) -> int:
        """Stand-ins for as many GPUs as the node has."""
        return self._devices

    def device_bus_ids(self) -> list[str]:
        """The simulated boards' bus ids; "" for plain stand-ins, which have none."""
        if self._boards is None:
            return [""] * self._devices
        return [board.bus_id for board in self._boards]

    def worker(self, device: int, config: BurnConfig) -> NumpyWorker:
        """A worker for one stand-in GPU."""
        if config.dtype not in self.dtypes:
            raise BackendUnavailable(f"the numpy backend cannot emulate {config.dtype}")
        tflops = None if self._simulated is None else self._simulated.get(device)
        wedged = self._boards is not None and self._boards[device].wedged
        if self._boards is not None and config.matrix_size is None:
            config = dataclasses.replace(config, matrix_size=SIMULATED_MATRIX_SIZE)
        # A stand-in measuring the CPU runs flat out: its speed and duty are what it measures.
        paced = self._boards is not None or tflops is not None
        return NumpyWorker(self._np, device, config, tflops, wedged=wedged, paced=paced)


class NumpyWorker:
    """One stand-in GPU's products and checks.

    ``paced``: each batch is followed by a sleep, so that batches start
    ``config.window / PACED_BATCHES_PER_WINDOW`` apart (never past the burn's
    end): the products and checks still run, few of them, and the CPU stays idle.
    With a ``--burn-inject`` the first ``config.inject.iteration`` batches run back
    to back: pacing must not put the injected batch out of the burn's reach. The
    worker does not know which GPU it stands for (run.py matches them), so every
    worker does so; past that batch they are paced.
    """

    def __init__(
        self,
        np: Any,  # noqa: ANN401 - the numpy module
        device: int,
        config: BurnConfig,
        simulated_tflops: float | None,
        *,
        wedged: bool = False,
        paced: bool = False,
    ) -> None:
        self._np = np
        self._wedged = wedged
        self._pace_s = config.window / PACED_BATCHES_PER_WINDOW if paced else 0.0
        # Paced from this batch on (counted from 1): the injected one, when there is one.
        self._paced_from = config.inject.iteration if config.inject is not None else 1
        self._batches = 0
        self._ends_at = math.inf  # monotonic: the burn's end, as this worker sees it (setup)
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
        # The burn starts just before its workers' setup: pacing never sleeps past this.
        self._ends_at = time.monotonic() + self._config.duration_s
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
        if self._wedged:
            threading.Event().wait()  # a hung kernel: this call never returns
        began = time.monotonic()
        start = time.perf_counter()
        for result in self._results:
            np.matmul(self._a, self._b, out=result)
        elapsed = time.perf_counter() - start
        products = len(self._results)
        if self._simulated_tflops:
            elapsed = products * flops_per_product(self._n) / (self._simulated_tflops * 1e12)
        self._batches += 1
        if self._pace_s and self._batches >= self._paced_from:
            self._pause(began)
        return BatchTiming(products=products, compute_s=elapsed)

    def _pause(self, began: float) -> None:
        """Sleep until the next paced batch is due (``began``: this one's monotonic start)."""
        wait = min(began + self._pace_s, self._ends_at) - time.monotonic()
        if wait > 0:
            time.sleep(wait)

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
