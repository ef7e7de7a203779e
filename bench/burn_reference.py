"""Reference bf16 matmul throughput with plain torch.matmul, one process per GPU in turn.

The yardstick for the burn backends: the same size (8192) and precision, timed
the same way (CUDA events over windows of back-to-back products, best window
kept). Prints JSON: {"size", "dtype", "seconds_per_gpu", "gpus": [{"index", "name",
"tflops", "windows"}]}.

    python bench/burn_reference.py [--size 8192] [--seconds 15] [--window 1.0]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from typing import Any


def measure(t: Any, index: int, size: int, seconds: float, window: float) -> dict[str, Any]:  # noqa: ANN401
    """Best-window TFLOPS of bf16 ``torch.matmul`` on GPU ``index`` (``t`` is the torch module)."""
    device = t.device(f"cuda:{index}")
    t.cuda.set_device(device)
    generator = t.Generator(device="cpu").manual_seed(10)
    a = (t.rand(size, size, generator=generator) * 2 - 1).to(t.bfloat16).to(device)
    b = (t.rand(size, size, generator=generator) * 2 - 1).to(t.bfloat16).to(device)
    out = t.empty(size, size, dtype=t.bfloat16, device=device)
    flops = 2.0 * size**3
    for _ in range(20):  # warm-up: clocks up, cuBLAS heuristics chosen
        t.matmul(a, b, out=out)
    t.cuda.synchronize(device)
    windows = []
    deadline = time.monotonic() + seconds
    per_window = 50
    while time.monotonic() < deadline:
        start = t.cuda.Event(enable_timing=True)
        end = t.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_window):
            t.matmul(a, b, out=out)
        end.record()
        end.synchronize()
        elapsed = start.elapsed_time(end) / 1000.0
        windows.append(per_window * flops / elapsed / 1e12)
        # size the next window to about `window` seconds
        per_window = max(10, int(per_window * window / max(elapsed, 1e-6)))
    name = t.cuda.get_device_name(device)
    del a, b, out
    t.cuda.empty_cache()
    return {
        "index": index,
        "name": name,
        "tflops": round(max(windows), 1) if windows else None,
        "windows": [round(w, 1) for w in windows],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--seconds", type=float, default=15.0, help="per GPU")
    parser.add_argument("--window", type=float, default=1.0)
    args = parser.parse_args()
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        print(json.dumps({"error": "torch is not installed"}))
        return 3
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return 3
    gpus = [
        measure(torch, index, args.size, args.seconds, args.window)
        for index in range(torch.cuda.device_count())
    ]
    print(
        json.dumps(
            {"size": args.size, "dtype": "bf16", "seconds_per_gpu": args.seconds, "gpus": gpus},
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
