"""The torch burn-in backend: what it says when it cannot run, its arithmetic, and on a GPU."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from validator.node.burnin import torch_backend
from validator.node.burnin.backend import BackendUnavailable, CheckResult
from validator.node.burnin.backend_choice import select_backend
from validator.node.burnin.burn_config import BurnConfig


def fake_torch(
    *, available: bool = True, capability: tuple[int, int] = (9, 0), scaled_mm: bool = True
) -> Any:
    cuda = types.SimpleNamespace(
        is_available=lambda: available,
        device_count=lambda: 8,
        get_device_capability=lambda device: capability,
    )
    module = types.SimpleNamespace(cuda=cuda)
    if scaled_mm:
        module._scaled_mm = object()
        module.float8_e4m3fn = object()
    return module


def test_missing_torch_is_a_one_line_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(BackendUnavailable) as caught:
        torch_backend.TorchBackend()
    assert str(caught.value) == "torch is not installed"


def test_select_backend_names_torch_in_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(BackendUnavailable, match=r"^torch: torch is not installed$"):
        select_backend("torch", "bf16")


def test_cpu_only_torch_is_refused() -> None:
    with pytest.raises(BackendUnavailable, match=r"is_available\(\) is False"):
        torch_backend.TorchBackend(fake_torch(available=False))


def test_device_count_comes_from_torch() -> None:
    assert torch_backend.TorchBackend(fake_torch()).device_count() == 8


@pytest.mark.parametrize(
    ("torch", "reason"),
    [
        (fake_torch(capability=(8, 0)), "fp8 needs compute capability 8.9 or newer; GPU 3 has 8.0"),
        (fake_torch(scaled_mm=False), "fp8 needs torch._scaled_mm"),
    ],
)
def test_fp8_is_refused_where_it_cannot_run(torch: Any, reason: str) -> None:
    backend = torch_backend.TorchBackend(torch)
    with pytest.raises(BackendUnavailable) as caught:
        backend.worker(3, BurnConfig(dtype="fp8"))
    assert str(caught.value).startswith(reason)


def test_fp8_is_accepted_on_hopper_and_ada() -> None:
    assert torch_backend.fp8_refusal(fake_torch(capability=(9, 0)), 0) is None
    assert torch_backend.fp8_refusal(fake_torch(capability=(8, 9)), 0) is None
    worker = torch_backend.TorchBackend(fake_torch()).worker(0, BurnConfig(dtype="fp8"))
    assert isinstance(worker, torch_backend.TorchWorker)


def test_results_are_stored_in_the_product_precision() -> None:
    assert [torch_backend.storage_name(d) for d in ("bf16", "fp16", "tf32", "fp32", "fp8")] == [
        "bf16",
        "fp16",
        "fp32",
        "fp32",
        "bf16",
    ]


def test_buffer_count_fills_the_share_of_free_memory() -> None:
    n, gib = 8192, 1 << 30
    # bf16: A, B and the first product are 3 x 128 MiB; each buffer 128 MiB
    assert torch_backend.buffer_count(140 * gib, 0.9, n, 2, 2) == int(
        (0.9 * 140 * gib - 3 * n * n * 2) // (n * n * 2)
    )
    assert torch_backend.buffer_count(140 * gib, 0.9, n, 2, 2) == 1005
    assert torch_backend.buffer_count(1 << 20, 0.9, n, 4, 4) == 2


# --- on a real GPU -----------------------------------------------------------------------------


def real_backend() -> torch_backend.TorchBackend:
    try:
        return torch_backend.TorchBackend()
    except BackendUnavailable as exc:
        pytest.skip(f"no torch GPU: {exc}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32", "fp32", "fp8"])
def test_gpu_burn_detects_injected_faults(dtype: str) -> None:
    backend = real_backend()
    try:
        worker = backend.worker(0, BurnConfig(dtype=dtype, matrix_size=2048, memory_fraction=0.05))
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    try:
        setup = worker.setup()
        assert setup.reference_ok, setup.reference_max_error
        assert setup.result_buffers >= 2
        timing = worker.run_batch()
        assert timing.products == setup.result_buffers
        assert timing.compute_s > 0
        assert worker.check_batch() == CheckResult(0, 0)
        worker.inject("flip")
        assert worker.check_batch() == CheckResult(1, 0)
        worker.run_batch()
        worker.inject("nan")
        assert worker.check_batch() == CheckResult(1, 1)
    finally:
        worker.close()
