"""Reference matmul throughput with plain torch.matmul, measured the way the burn measures.

The yardstick for the burn backends (bench/gpu_check.sh): the same inputs (seed 10,
uniform in [-1, 1), drawn on the CPU), size and precision as `gpuready certify
--burn`; a warm-up that does not count (the burn's: a tenth of its duration, at most
10 s); then back-to-back products into one preallocated output, timed on the device
with CUDA events in windows of about ``--window`` seconds, for ``--seconds``. Every
GPU asked for runs at the same time, one process each, so that the reference GPUs
are as loaded and as hot as the burn's. The figure to compare with the burn's
(its median window) is ``median_tflops``.

Prints JSON on stdout:

    {"size", "dtype", "warmup_s", "seconds", "window_s", "torch_version", "torch_cuda",
     "device_order", "gpus": [{"index", "name", "pci_bus_id", "windows", "median_tflops",
     "p10_tflops", "p90_tflops", "best_tflops", "tflops" (the median),
     "warmup_products", "elapsed_s", "tflops_windows"} or {"index", "error"}]}

or {"error": "..."} when torch is missing or sees no GPU (exit 3). Exit 1 when a GPU
could not be measured (its entry has "error"), 2 on bad arguments.

    python bench/burn_reference.py [--seconds 54] [--warmup 6] [--size 8192]
        [--dtype bf16] [--device all|N|N,M] [--window 1.0]
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

DTYPES = ("bf16", "fp16", "tf32", "fp32")
SEED = 10  # the burn's default seed (validator/node/burnin/burn_config.py)
EXIT_OK, EXIT_GPU_FAILED, EXIT_NO_TORCH = 0, 1, 3


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation, as validator.trace has it."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * min(100.0, max(0.0, q)) / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def window_stats(windows: Sequence[float]) -> dict[str, float | int | None]:
    """Median, p10, p90 and best of the windows' TFLOPS (None for each when there are none)."""

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 1)

    return {
        "windows": len(windows),
        "median_tflops": rounded(statistics.median(windows)) if windows else None,
        "p10_tflops": rounded(percentile(windows, 10.0)),
        "p90_tflops": rounded(percentile(windows, 90.0)),
        "best_tflops": rounded(max(windows)) if windows else None,
    }


def _dtype(t: Any, name: str) -> Any:  # noqa: ANN401 - torch module and dtype
    if name == "bf16":
        return t.bfloat16
    if name == "fp16":
        return t.float16
    return t.float32  # tf32 and fp32: fp32 storage, the tf32 switch decides the math


def bus_id(t: Any, index: int) -> str:  # noqa: ANN401
    """The device's PCI bus id as NVML writes it ("" where this torch does not say)."""
    try:
        props = t.cuda.get_device_properties(index)
        domain, bus, slot = (
            int(props.pci_domain_id),
            int(props.pci_bus_id),
            int(props.pci_device_id),
        )
        return f"{domain:08X}:{bus:02X}:{slot:02X}.0"
    except Exception:  # noqa: BLE001 - an older torch without the fields
        return ""


def measure(
    t: Any,  # noqa: ANN401 - the torch module
    index: int,
    size: int,
    dtype: str,
    seconds: float,
    warmup: float,
    window: float,
) -> dict[str, Any]:
    """Median-window TFLOPS of ``torch.matmul`` on GPU ``index`` after a warm-up."""
    device = t.device(f"cuda:{index}")
    t.cuda.set_device(device)
    t.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    generator = t.Generator(device="cpu").manual_seed(SEED)
    kind = _dtype(t, dtype)
    a = (t.rand(size, size, generator=generator) * 2 - 1).to(kind).to(device)
    b = (t.rand(size, size, generator=generator) * 2 - 1).to(kind).to(device)
    out = t.empty(size, size, dtype=kind, device=device)
    flops = 2.0 * size**3
    began = time.monotonic()

    # Warm-up: clocks and power up, cuBLAS heuristics chosen; counts for nothing.
    warmup_products = 0
    warm_start = time.monotonic()
    while True:
        for _ in range(10):
            t.matmul(a, b, out=out)
        t.cuda.synchronize(device)
        warmup_products += 10
        if time.monotonic() - warm_start >= warmup and warmup_products >= 20:
            break
    rate = warmup_products / max(time.monotonic() - warm_start, 1e-6)  # products per second

    windows: list[float] = []
    per_window = max(1, int(rate * window))
    deadline = time.monotonic() + seconds
    while True:
        # The last window is cut to the time left, so the windows span about `seconds`;
        # less than half a window left is not measured.
        left = deadline - time.monotonic()
        if left < 0.5 * window:
            break
        products = max(1, int(per_window * min(1.0, left / window)))
        start = t.cuda.Event(enable_timing=True)
        end = t.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(products):
            t.matmul(a, b, out=out)
        end.record()
        end.synchronize()
        elapsed = start.elapsed_time(end) / 1000.0
        if elapsed > 0:
            windows.append(products * flops / elapsed / 1e12)
            per_window = max(1, int(products * window / elapsed))  # the next one ~window s
    name = t.cuda.get_device_name(device)
    del a, b, out
    t.cuda.empty_cache()
    stats = window_stats(windows)
    return {
        "index": index,
        "name": name,
        "pci_bus_id": bus_id(t, index),
        **stats,
        "tflops": stats["median_tflops"],
        "warmup_products": warmup_products,
        "elapsed_s": round(time.monotonic() - began, 2),
        "tflops_windows": [round(w, 1) for w in windows],
    }


def parse_devices(text: str, count: int) -> list[int]:
    """``all`` or a comma list of device numbers, each below ``count``.

    Raises:
        ValueError: an entry is not a device number torch has.
    """
    if text.strip() == "all":
        return list(range(count))
    devices = []
    for part in text.split(","):
        if not part.strip().isdigit() or int(part) >= count:
            raise ValueError(f"--device {text!r}: {part!r} is not one of the {count} devices")
        devices.append(int(part))
    return devices


def _child(args: argparse.Namespace, index: int) -> subprocess.Popen[str]:
    argv = [
        sys.executable,
        os.path.abspath(__file__),
        f"--device={index}",
        f"--seconds={args.seconds}",
        f"--warmup={args.warmup}",
        f"--size={args.size}",
        f"--dtype={args.dtype}",
        f"--window={args.window}",
    ]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


def _collect(child: subprocess.Popen[str], index: int, limit: float) -> dict[str, Any]:
    try:
        stdout, _ = child.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return {"index": index, "error": f"no result within {limit:.0f} s"}
    try:
        gpus = json.loads(stdout)["gpus"]
        return dict(gpus[0])
    except (ValueError, KeyError, IndexError, TypeError):
        return {"index": index, "error": f"exit {child.returncode}, output {stdout[-300:]!r}"}


def _run_one(t: Any, args: argparse.Namespace, index: int) -> dict[str, Any]:  # noqa: ANN401
    try:
        return measure(t, index, args.size, args.dtype, args.seconds, args.warmup, args.window)
    except Exception as exc:  # noqa: BLE001 - one GPU's failure is a figure, not a crash
        return {"index": index, "error": f"{type(exc).__name__}: {exc}"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=54.0, help="timed, after the warm-up")
    parser.add_argument("--warmup", type=float, default=6.0, help="seconds that do not count")
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--device", default="all", help="all, N or N,M (CUDA PCI order)")
    parser.add_argument("--window", type=float, default=1.0, help="seconds per window")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.warmup < 0 or args.size < 16 or args.window <= 0:
        parser.error("--seconds and --window must be positive, --warmup >= 0, --size >= 16")
    # Number devices as NVML and the burn do (the burn sets PCI_BUS_ID too).
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    try:
        t = importlib.import_module("torch")
    except ImportError as exc:
        print(json.dumps({"error": f"torch is not installed ({exc})"}))
        return EXIT_NO_TORCH
    if not t.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device", "torch_version": t.__version__}))
        return EXIT_NO_TORCH
    try:
        devices = parse_devices(args.device, int(t.cuda.device_count()))
    except ValueError as exc:
        parser.error(str(exc))
    if len(devices) == 1:
        gpus = [_run_one(t, args, devices[0])]
    else:
        # One process per GPU, all at once: every GPU loaded together, as in the burn.
        children = [(index, _child(args, index)) for index in devices]
        limit = args.warmup + args.seconds + 120.0
        gpus = [_collect(child, index, limit) for index, child in children]
    print(
        json.dumps(
            {
                "size": args.size,
                "dtype": args.dtype,
                "warmup_s": args.warmup,
                "seconds": args.seconds,
                "window_s": args.window,
                "torch_version": str(t.__version__),
                "torch_cuda": str(t.version.cuda),
                "device_order": os.environ.get("CUDA_DEVICE_ORDER"),
                "gpus": gpus,
            },
            indent=2,
        )
    )
    return EXIT_GPU_FAILED if any("error" in gpu for gpu in gpus) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
