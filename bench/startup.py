"""Start-up cost of `gpuready certify --simulate <8-GPU scenario> --json --burn 0` as a process.

Measured against a bare `python -c pass` in the same run, so the figure is the
tool's own overhead on this machine. Target: under 0.15 s above the interpreter, where it
was before issues 26-31 (issue 32).
Each run records its result in a temporary history store (``--db`` and
``XDG_STATE_HOME`` in a scratch directory), never the user's, and runs from
compiled bytecode, as an installed gpuready does (bench/compiled.py).

    python bench/startup.py [--runs 15] [--scenario healthy-8x-h100-sxm]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compiled import as_installed

TARGET_S = 0.15


def timed(argv: list[str], runs: int, env: dict[str, str] | None = None) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, check=False, env=env)
        times.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            sys.exit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--scenario", default="healthy-8x-h100-sxm")
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory(prefix="gpuready-startup-")
    work = Path(scratch.name)
    # Anything that falls back to the default store lands in the scratch dir, not the user's.
    env = as_installed(dict(os.environ, XDG_STATE_HOME=str(work / "state")))
    bare = [sys.executable, "-c", "pass"]
    tool = [
        sys.executable,
        "-m",
        "validator.cli.main",
        "certify",
        "--simulate",
        args.scenario,
        "--json",
        "--burn",
        "0",
        "--db",
        str(work / "history.db"),
    ]
    with scratch:
        timed(tool, 2, env)  # warm the page cache and bytecode
        base = timed(bare, args.runs, env)
        ours = timed(tool, args.runs, env)
    base_median, ours_median = statistics.median(base), statistics.median(ours)
    overhead = ours_median - base_median
    print(f"python -c pass            median {base_median * 1000:7.1f} ms over {args.runs} runs")
    print(f"gpuready certify --json   median {ours_median * 1000:7.1f} ms over {args.runs} runs")
    print(
        f"overhead                  {overhead * 1000:7.1f} ms (target < {TARGET_S * 1000:.0f} ms)"
    )
    print(f"ratio                     {ours_median / base_median:7.2f}x the bare interpreter")
    return 0 if overhead < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
