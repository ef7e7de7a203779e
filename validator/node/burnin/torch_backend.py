"""The GPU burn-in through PyTorch, where the host has it: ``torch.matmul`` on each ``cuda:N``.

Same semantics as the numpy reference backend: inputs from a fixed seed (drawn
on the CPU, so every GPU gets the same ones), ``K`` result buffers filling
``memory_fraction`` of the free device memory (at least 2), the first product
kept as the reference, a tile of it checked against fp64 on the CPU, its sha256
digest, and each batch's buffers compared bitwise with it (through integer
views, so a NaN is a mismatch only where the reference has none) with NaN/Inf
counted by ``torch.isfinite``. Comparisons run on the device.

torch is imported lazily: the node agent must load without it. fp8 runs through
``torch._scaled_mm`` (e4m3 inputs, bf16 output, unit scales) when torch has it
and the GPU has compute capability 8.9 or newer; otherwise the worker is refused.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib
import math
import sys
from typing import Any

from validator.node.burnin.backend import (
    BackendUnavailable,
    BatchTiming,
    CheckResult,
    SetupResult,
)
from validator.node.burnin.burn_config import DEFAULT_MATRIX_SIZE, BurnConfig

REFERENCE_TILE = 16
# Relative to the tile's largest magnitude; see cublas.TOLERANCES for the reasoning.
# fp8 products come out in bf16 from e4m3 inputs (rounded before the reference sees them).
TOLERANCES = {"bf16": 2e-2, "fp16": 1e-2, "tf32": 5e-3, "fp32": 1e-4, "fp8": 2e-2}
FP8_MIN_CAPABILITY = (8, 9)  # Ada and Hopper have fp8 tensor cores
_TOP_MANTISSA_BIT = {"bf16": 1 << 6, "fp16": 1 << 9, "fp32": 1 << 22}


def import_torch() -> Any:  # noqa: ANN401 - the torch module
    """The torch module.

    Raises:
        BackendUnavailable: torch is not installed.
    """
    try:
        # Through importlib: torch is optional, and no type stubs are expected for it.
        return importlib.import_module("torch")
    except ImportError:
        raise BackendUnavailable("torch is not installed") from None


def storage_name(dtype: str) -> str:
    """How results are stored: bf16, fp16 or fp32 (tf32 products are fp32; fp8 gives bf16)."""
    return {"bf16": "bf16", "fp16": "fp16", "tf32": "fp32", "fp32": "fp32", "fp8": "bf16"}[dtype]


def buffer_count(free: int, fraction: float, n: int, input_size: int, output_size: int) -> int:
    """Result buffers that fit in ``fraction`` of ``free`` bytes beside A, B and the first product.

    At least 2, so there is always something to compare.
    """
    fixed = 2 * n * n * input_size + n * n * output_size
    return max(2, int((fraction * free - fixed) // (n * n * output_size)))


def fp8_refusal(torch: Any, device: int) -> str | None:  # noqa: ANN401
    """Why fp8 cannot run on ``device`` with this torch, or None when it can."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return "fp8 needs torch._scaled_mm and torch.float8_e4m3fn (torch 2.1 or newer)"
    capability = tuple(torch.cuda.get_device_capability(device))
    if capability < FP8_MIN_CAPABILITY:
        have = ".".join(str(part) for part in capability)
        return f"fp8 needs compute capability 8.9 or newer; GPU {device} has {have}"
    return None


class TorchBackend:
    """PyTorch matrix products on every GPU torch sees.

    Args:
        torch: the torch module (tests pass a stand-in); imported when omitted.

    Raises:
        BackendUnavailable: torch is missing or sees no CUDA device.
    """

    name = "torch"
    dtypes = frozenset({"bf16", "fp16", "tf32", "fp32", "fp8"})

    def __init__(self, torch: Any = None) -> None:  # noqa: ANN401
        self._torch = import_torch() if torch is None else torch
        if not self._torch.cuda.is_available():
            raise BackendUnavailable(
                "torch sees no CUDA device (torch.cuda.is_available() is False: "
                "CPU-only torch build, or no driver)"
            )

    def device_count(self) -> int:
        """Devices torch sees."""
        return int(self._torch.cuda.device_count())

    def device_bus_ids(self) -> list[str]:
        """Each device's PCI bus id from its properties ("" where this torch does not say)."""
        found = []
        for device in range(self.device_count()):
            try:
                props = self._torch.cuda.get_device_properties(device)
                domain, bus, slot = (
                    int(props.pci_domain_id),
                    int(props.pci_bus_id),
                    int(props.pci_device_id),
                )
            except Exception:  # noqa: BLE001 - an older torch, or a device that will not answer
                found.append("")
                continue
            found.append(f"{domain:08X}:{bus:02X}:{slot:02X}.0")
        return found

    def worker(self, device: int, config: BurnConfig) -> TorchWorker:
        """A worker for one device.

        Raises:
            BackendUnavailable: fp8 asked for where it cannot run.
        """
        if config.dtype == "fp8":
            refusal = fp8_refusal(self._torch, device)
            if refusal:
                raise BackendUnavailable(refusal)
        return TorchWorker(self._torch, device, config)


class TorchWorker:
    """One GPU's products and checks, all on ``cuda:N``."""

    def __init__(self, torch: Any, device: int, config: BurnConfig) -> None:  # noqa: ANN401
        self._torch = torch
        self._index = device
        self._config = config
        self._n = config.matrix_size or DEFAULT_MATRIX_SIZE
        self._storage = storage_name(config.dtype)
        self._a: Any = None
        self._b: Any = None
        self._scale: Any = None
        self._first: Any = None
        self._results: list[Any] = []
        self._first_nonfinite = 0
        self._checked = False

    def _dtypes(self) -> tuple[Any, Any, Any]:
        """(input dtype, result dtype, integer dtype of the same width)."""
        torch = self._torch
        if self._config.dtype == "fp8":
            return torch.float8_e4m3fn, torch.bfloat16, torch.int16
        if self._storage == "bf16":
            return torch.bfloat16, torch.bfloat16, torch.int16
        if self._storage == "fp16":
            return torch.float16, torch.float16, torch.int16
        return torch.float32, torch.float32, torch.int32

    def _product(self, out: Any = None) -> Any:  # noqa: ANN401
        torch = self._torch
        if self._config.dtype == "fp8":
            result = torch._scaled_mm(
                self._a, self._b, scale_a=self._scale, scale_b=self._scale, out_dtype=torch.bfloat16
            )
            # torch 2.1-2.3 return (result, amax); later versions the result alone.
            return result[0] if isinstance(result, tuple) else result
        if out is None:
            return torch.matmul(self._a, self._b)
        return torch.matmul(self._a, self._b, out=out)

    def setup(self) -> SetupResult:
        """Inputs from the seed, the first product and its checks, then the result buffers."""
        torch, n = self._torch, self._n
        torch.cuda.set_device(self._index)
        device = torch.device(f"cuda:{self._index}")
        # float32 matmuls follow this process-wide switch: tf32 on for tf32, off for fp32.
        torch.backends.cuda.matmul.allow_tf32 = self._config.dtype == "tf32"
        in_dtype, out_dtype, _ = self._dtypes()
        generator = torch.Generator(device="cpu").manual_seed(self._config.seed)
        a_cpu = (torch.rand(n, n, generator=generator) * 2 - 1).to(in_dtype)
        b_cpu = (torch.rand(n, n, generator=generator) * 2 - 1).to(in_dtype)
        self._a = a_cpu.to(device)
        self._b = b_cpu.to(device)
        if self._config.dtype == "fp8":
            # _scaled_mm wants B column-major.
            self._b = self._b.t().contiguous().t()
            self._scale = torch.tensor(1.0, device=device)
        free, _ = torch.cuda.mem_get_info(device)
        out_size = torch.empty((), dtype=out_dtype).element_size()
        in_size = torch.empty((), dtype=in_dtype).element_size()
        count = buffer_count(free, self._config.memory_fraction, n, in_size, out_size)
        self._first = self._product()
        self._results = [torch.empty_like(self._first) for _ in range(count)]
        torch.cuda.synchronize(device)
        tile = min(REFERENCE_TILE, n)
        exact = a_cpu[:tile].double() @ b_cpu[:, :tile].double()
        got = self._first[:tile, :tile].double().cpu()
        scale = max(float(exact.abs().max()), 1e-30)
        difference = float((got - exact).abs().max())
        error = difference / scale if not math.isnan(difference) else math.inf
        host = self._first.contiguous().cpu()
        digest = hashlib.sha256(
            ctypes.string_at(host.data_ptr(), host.numel() * host.element_size())
        ).hexdigest()[:16]
        self._first_nonfinite = int((~torch.isfinite(self._first)).sum().item())
        return SetupResult(
            matrix_size=n,
            result_buffers=count,
            reference_ok=error <= TOLERANCES[self._config.dtype],
            # JSON has no Infinity: a NaN or Inf in the tile is the largest float, and not ok.
            reference_max_error=error if math.isfinite(error) else sys.float_info.max,
            digest=digest,
            deterministic=True,
        )

    def run_batch(self) -> BatchTiming:
        """Every result buffer recomputed once, timed with CUDA events."""
        torch = self._torch
        torch.cuda.set_device(self._index)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        if self._config.dtype == "fp8":
            # _scaled_mm has no out= on every torch: each product is a new tensor. The old
            # one is dropped first, so the caching allocator hands its block to the new one;
            # replacing all K at once would need 2K buffers where K fill the memory.
            for position in range(len(self._results)):
                self._results[position] = None
                self._results[position] = self._product()
        else:
            for result in self._results:
                self._product(out=result)
        end.record()
        end.synchronize()
        return BatchTiming(products=len(self._results), compute_s=start.elapsed_time(end) / 1000.0)

    def check_batch(self) -> CheckResult:
        """Elements differing bitwise from the first product, and NaN/Inf, counted on the device."""
        torch = self._torch
        torch.cuda.set_device(self._index)
        _, _, int_dtype = self._dtypes()
        reference = self._first.view(int_dtype)
        mismatched = [(result.view(int_dtype) != reference).sum() for result in self._results]
        nonfinite = [(~torch.isfinite(result)).sum() for result in self._results]
        extra = 0 if self._checked else self._first_nonfinite
        self._checked = True
        return CheckResult(
            mismatched_elements=int(torch.stack(mismatched).sum().item()),
            nonfinite_elements=int(torch.stack(nonfinite).sum().item()) + extra,
        )

    def inject(self, kind: str) -> None:
        """Spoil one element of the last result buffer (row n/3, column n/5)."""
        torch = self._torch
        torch.cuda.set_device(self._index)
        target = self._results[-1]
        row, col = self._n // 3, self._n // 5
        if kind == "nan":
            target[row, col] = float("nan")
            return
        if float(target[row, col].item()) == 0.0:
            target[row, col] = 1.0
            return
        _, _, int_dtype = self._dtypes()
        bits = target.view(int_dtype)
        bits[row, col] = bits[row, col] ^ _TOP_MANTISSA_BIT[self._storage]
        torch.cuda.synchronize(self._index)

    def close(self) -> None:
        """Drop the tensors and give the memory back to the driver."""
        self._results = []
        self._a = self._b = self._first = self._scale = None
        self._torch.cuda.empty_cache()
