"""CPU cost of a simulated burn-in: paced (as certify --simulate runs it) against flat out.

A simulated board's speed is booked from its scenario, so its numpy products
only need to run, not to run back to back. This bench runs the healthy 8-GPU
scenario's burn twice in one process, paced and unpaced, and reports the CPU
share of one core each used. Target: the paced burn under 5% of a core.

    python bench/burn_pacing.py [--duration 10] [--scenario healthy-8x-h100-sxm]

Prints one JSON object; exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from validator.model import BurnResult  # noqa: E402
from validator.node.burnin import numpy_backend  # noqa: E402
from validator.node.burnin.backend_choice import select_backend  # noqa: E402
from validator.node.burnin.burn_config import BurnConfig  # noqa: E402
from validator.node.burnin.burn_request import burnable  # noqa: E402
from validator.node.burnin.run import run_burn  # noqa: E402
from validator.node.collect import collect  # noqa: E402
from validator.node.sim.scenario import load_scenario  # noqa: E402
from validator.node.sim.simulated_burn import simulated_burn  # noqa: E402
from validator.node.sim.simulated_source import SimulatedSource  # noqa: E402

TARGET_CORE_SHARE = 0.05


def burn(scenario_name: str, duration_s: float) -> tuple[BurnResult, float, float]:
    """The scenario's burn as certify runs it: its result, CPU seconds and wall seconds.

    Only the burn is timed; collecting the simulated facts is start-up, not burn.
    """
    facts = collect(SimulatedSource(scenario_name))
    scenario = load_scenario(scenario_name)
    config = BurnConfig(duration_s=duration_s)
    plan = simulated_burn(
        facts,
        scenario.data.get("burn", {}),
        config.sample_interval,
        expected_s=duration_s,
        recorded=scenario.telemetry(),
    )
    backend = select_backend(None, config.dtype, simulated=plan.boards)
    gpus = burnable(facts)
    cpu, wall = time.process_time(), time.monotonic()
    result = run_burn(
        config, backend, gpus, plan.sampler, simulated=True, environment=plan.environment
    )
    return result, time.process_time() - cpu, time.monotonic() - wall


def measure(scenario_name: str, duration_s: float) -> dict[str, float | int | str]:
    """Paced and unpaced figures for one burn of ``duration_s`` seconds."""
    paced, paced_cpu, paced_wall = burn(scenario_name, duration_s)
    # Unpaced: the same burn with the pause taken out, as the stand-in ran before pacing.
    with mock.patch.object(numpy_backend.NumpyWorker, "_pause", return_value=None):
        flat, flat_cpu, flat_wall = burn(scenario_name, duration_s)
    return {
        "scenario": scenario_name,
        "duration_s": duration_s,
        "boards": len(paced.gpus),
        "paced_products_per_board": min(g.iterations for g in paced.gpus),
        "unpaced_products_per_board": min(g.iterations for g in flat.gpus),
        "paced_core_share": round(paced_cpu / paced_wall, 4),
        "unpaced_core_share": round(flat_cpu / flat_wall, 4),
        "paced_over_unpaced": round((paced_cpu / paced_wall) / (flat_cpu / flat_wall), 4),
        "target_core_share": TARGET_CORE_SHARE,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="burn seconds (each run)")
    parser.add_argument("--scenario", default="healthy-8x-h100-sxm")
    args = parser.parse_args()
    figures = measure(args.scenario, args.duration)
    print(json.dumps(figures, indent=2))
    return 0 if float(figures["paced_core_share"]) < TARGET_CORE_SHARE else 1


if __name__ == "__main__":
    sys.exit(main())
