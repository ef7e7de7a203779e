"""A simulated burn paces its CPU stand-in: the products still run, few of them, the CPU idles."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from validator.cli.main import main
from validator.model import BurnResult, BurnStatus
from validator.node.burnin.burn_config import BurnConfig
from validator.node.burnin.devices import Target
from validator.node.burnin.numpy_backend import PACED_BATCHES_PER_WINDOW, NumpyBackend
from validator.node.burnin.run import run_burn
from validator.node.burnin.sampler import NoSampler

HEALTHY = "healthy-8x-h100-sxm"
BURN_S = 3.0
BENCH = Path(__file__).resolve().parent.parent.parent / "bench" / "burn_pacing.py"


def _bench() -> ModuleType:
    """bench/burn_pacing.py: its burn is the one certify runs, and the one measured there."""
    spec = importlib.util.spec_from_file_location("bench_burn_pacing", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_burn_pacing"] = module
    spec.loader.exec_module(module)
    return module


def burn_scenario(name: str, duration_s: float) -> tuple[BurnResult, float, float]:
    """The scenario's burn as certify runs it: its result, CPU seconds and wall seconds."""
    result: tuple[BurnResult, float, float] = _bench().burn(name, duration_s)
    return result


def test_a_simulated_burn_runs_few_products() -> None:
    """Paced, each board runs one batch per half window, not thousands: the CPU idles.

    The CPU share itself (under 5% of a core) is measured in bench/burn_pacing.py, as
    a ratio against the unpaced burn; here the count that bounds it, which a loaded
    machine can only lower.
    """
    config = BurnConfig(duration_s=BURN_S)
    result, _, wall_s = burn_scenario(HEALTHY, BURN_S)
    assert wall_s >= BURN_S
    pace_s = config.window / PACED_BATCHES_PER_WINDOW
    batches = BURN_S / pace_s + 2  # one at the start, one the burn's end may cut short
    # Still a burn: every board ran real products and checks, booked at the scenario's speed.
    assert [g.status for g in result.gpus] == [BurnStatus.COMPLETED] * 8
    for gpu in result.gpus:
        assert 4 * 10 <= gpu.iterations <= 4 * batches, gpu.iterations  # 4 buffers a batch
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
