"""A simulated burn paces its CPU stand-in: the products still run, few of them, the CPU idles."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from validator.cli.main import main
from validator.model import BurnResult, BurnStatus
from validator.node.burnin.backend import select_backend
from validator.node.burnin.config import BurnConfig
from validator.node.burnin.devices import Target
from validator.node.burnin.numpy_backend import PACED_BATCHES_PER_WINDOW, NumpyBackend
from validator.node.burnin.run import run_burn
from validator.node.burnin.sampler import NoSampler
from validator.node.burnin.simulated import simulated_burn
from validator.node.scenario import load_scenario
from validator.node.sources import _burnable, collect_simulated

HEALTHY = "healthy-8x-h100-sxm"
BURN_S = 3.0
# Today's target is under 5% of one core; an unpaced stand-in keeps more than a core busy.
MAX_CPU_SHARE = 0.05


def burn_scenario(name: str, duration_s: float) -> tuple[BurnResult, float, float]:
    """The scenario's burn as certify runs it: its result, CPU seconds and wall seconds.

    Only the burn is timed: collecting the simulated facts is start-up, not burn.
    """
    facts = collect_simulated(name)
    scenario = load_scenario(name)
    config = BurnConfig(duration_s=duration_s)
    plan = simulated_burn(
        facts,
        scenario.data.get("burn", {}),
        config.sample_interval,
        expected_s=duration_s,
        recorded=scenario.telemetry(),
    )
    backend = select_backend(None, config.dtype, simulated=plan.boards)
    gpus = _burnable(facts)  # the GPUs certify burns, as it makes them
    cpu, wall = time.process_time(), time.monotonic()
    result = run_burn(
        config, backend, gpus, plan.sampler, simulated=True, environment=plan.environment
    )
    return result, time.process_time() - cpu, time.monotonic() - wall


def test_a_simulated_burn_costs_under_five_percent_of_a_core() -> None:
    result, cpu_s, wall_s = burn_scenario(HEALTHY, BURN_S)
    assert wall_s >= BURN_S
    assert cpu_s / wall_s < MAX_CPU_SHARE, f"{cpu_s:.3f} CPU-s over {wall_s:.2f} s"
    # Still a burn: every board ran real products and checks, booked at the scenario's speed.
    assert [g.status for g in result.gpus] == [BurnStatus.COMPLETED] * 8
    assert all(g.iterations >= 4 * 10 for g in result.gpus)  # 4 buffers, 10 batches or more
    assert {g.tflops for g in result.gpus} == {720.0}
    assert {g.mismatched_elements + g.nonfinite_elements for g in result.gpus} == {0}


def test_pacing_keeps_the_windows_and_the_load_edges() -> None:
    """Two batches per window: about as many windows as the plan has, load edges in place."""
    config = BurnConfig(duration_s=BURN_S)
    result, _, _ = burn_scenario(HEALTHY, BURN_S)
    planned = (BURN_S - config.warmup) / config.window
    for gpu in result.gpus:
        assert len(gpu.tflops_windows) >= planned / 2, gpu.tflops_windows
        assert isinstance(gpu.load_start_s, float)
        assert isinstance(gpu.load_end_s, float)
        assert gpu.load_start_s <= config.warmup + 2 * config.window / PACED_BATCHES_PER_WINDOW
        assert gpu.load_end_s >= BURN_S - config.window
    assert result.elapsed_s < BURN_S + 2.0  # a paced batch never sleeps past the burn's end


def test_a_stand_in_measuring_the_cpu_is_not_paced() -> None:
    """Without a booked speed the products are the measurement: back to back, as before."""
    config = BurnConfig(duration_s=0.6, matrix_size=64, grace_s=2.0)
    targets = [Target(0, "GPU-0", "00000000:19:00.0")]
    measured = run_burn(config, NumpyBackend(), targets, NoSampler())
    booked = run_burn(config, NumpyBackend(simulated_tflops={0: 700.0}), targets, NoSampler())
    # Paced: two batches of four products per 30 ms window, about 80 products in 0.6 s.
    assert booked.gpus[0].iterations <= 4 * PACED_BATCHES_PER_WINDOW * 25
    assert measured.gpus[0].iterations > 2 * booked.gpus[0].iterations
    assert booked.gpus[0].tflops == pytest.approx(700.0)


def test_an_injection_past_the_paced_batches_is_still_applied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Paced, a 3 s burn runs about 40 batches; batch 100 is reached all the same, and found."""
    code = main(
        [
            *("certify", "--simulate", HEALTHY, "--burn", "3s", "--json"),
            *("--burn-inject", "flip:0:100", "--db", str(tmp_path / "h.db")),
        ]
    )
    node = json.loads(capsys.readouterr().out)["nodes"][0]
    assert code == 1
    assert node["verdict"] == "NOT_CERTIFIED"
    assert node["facts"]["burn"]["error"] is None  # applied: not "was never applied"
    failed = {(f["check"], f["gpu_index"]) for f in node["findings"] if f["severity"] == "FAIL"}
    assert ("burn.correctness", 0) in failed, node["findings"]
    unknown = [f["check"] for f in node["findings"] if f["severity"] == "UNKNOWN"]
    assert unknown == []
