"""bench/scale.py at a small size: both paths give every node a result, judged as drawn.

The simulation drives the real certify path (fan-out or Slurm collector, judging,
history, reports) against drawn hosts; here 40 of them, delays scaled down, with a
failing and an unreachable share large enough to show at that size.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent.parent / "bench" / "scale.py"
NODES = 40


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_scale", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def scale() -> ModuleType:
    return _load()


@pytest.fixture(scope="module")
def facts(scale: ModuleType) -> Any:
    return scale.produce_facts((scale.HEALTHY, *scale.FAILING))


def _config(scale: ModuleType, path: str) -> Any:
    return scale.Config(
        nodes=NODES,
        path=path,
        failing_share=0.2,
        unreachable_share=0.1,
        slow_share=0.1,
        ssh_cpu_ms=1.0,
        connect_timeout_s=2.0,
        time_scale=0.05,
        poll_s=2.0,  # 0.1 s once scaled
    )


def test_the_drawn_fleet_has_the_shares_asked(scale: ModuleType) -> None:
    draws = scale.draw_fleet(scale.Config(nodes=2000, failing_share=0.2, unreachable_share=0.1))
    unreachable = sum(draw.scenario is None for draw in draws)
    failing = sum(draw.scenario in scale.FAILING for draw in draws)
    assert 140 <= unreachable <= 260  # 200 expected; binomial sd ~13
    assert 330 <= failing <= 470  # 400 expected; sd ~18
    assert draws == scale.draw_fleet(
        scale.Config(nodes=2000, failing_share=0.2, unreachable_share=0.1)
    )


def test_every_failing_scenario_fails_and_the_healthy_one_passes(
    scale: ModuleType, facts: Any
) -> None:
    verdicts = scale.expected_verdicts(facts)
    assert verdicts.pop(scale.HEALTHY) == "CERTIFIED"
    assert set(verdicts.values()) == {"NOT_CERTIFIED"}


def test_the_facts_carry_a_default_burns_samples_over_the_recorded_span(
    scale: ModuleType, facts: Any
) -> None:
    data = json.loads(facts.text_for(scale.HEALTHY, "n1"))
    for gpu in data["burn"]["gpus"]:
        times = [sample["t_s"] for sample in gpu["samples"]]
        assert len(times) == scale.DEFAULT_SAMPLES_PER_GPU
        assert times == sorted(times)
        assert times[-1] <= gpu["load_end_s"] + 1.0  # the recorded span, not 300 s
        powers = [sample["power_w"] for sample in gpu["samples"]]
        assert len(set(powers)) > len(powers) // 2  # not copies: each tick reads anew


def test_stretching_keeps_the_recorded_readings_in_order(scale: ModuleType) -> None:
    recorded = [{"t_s": 0.0, "power_w": 100.0}, {"t_s": 1.0, "power_w": 700.0}]
    data = {"burn": {"gpus": [{"samples": recorded}, {"samples": []}]}}
    scale.stretch_samples(data, 4)
    stretched = data["burn"]["gpus"][0]["samples"]
    assert [s["t_s"] for s in stretched] == [0.0, 0.3333, 0.6667, 1.0]
    assert [round(s["power_w"], -1) for s in stretched] == [100.0, 100.0, 700.0, 700.0]
    assert data["burn"]["gpus"][1]["samples"] == []


@pytest.mark.parametrize("path", ["ssh", "slurm"])
def test_every_node_gets_the_verdict_its_draw_gives(
    scale: ModuleType, facts: Any, path: str
) -> None:
    figures = scale.simulate(_config(scale, path), facts)
    draws = scale.draw_fleet(_config(scale, path))
    assert figures["problems"] == []
    assert figures["results_seen"] >= NODES  # every node's result arrived (and was shown)
    assert sum(figures["verdicts"].values()) == NODES
    assert figures["verdicts"] == figures["expected_verdicts"]
    assert figures["verdicts"].get("UNKNOWN", 0) == sum(draw.scenario is None for draw in draws)
    assert figures["verdicts"].get("NOT_CERTIFIED", 0) == sum(
        draw.scenario in scale.FAILING for draw in draws
    )
    assert figures["store_bytes"] > 0
    files = figures["report_files"]
    assert files["report.json"] > 0
    assert files["report.html"] > 0
    assert files["hosts"] > 0
    assert figures["cpu_ms_per_node"] > 0
    assert figures["time_to_last_result_s"] > 0
    assert figures["time_to_last_result_s"] <= figures["wall_s"]
    if path == "slurm":
        assert figures["slurm_calls"]["sbatch"] == 1  # one job over every node
        assert figures["slurm_calls"]["squeue"] >= 1


def test_the_table_names_each_run(scale: ModuleType) -> None:
    row = {
        "path": "ssh",
        "nodes": 10,
        "wall_s": 1.0,
        "time_to_last_result_s": 0.9,
        "cpu_ms_per_node": 5.0,
        "peak_rss_mb": 100.0,
        "store_kb_per_node": 4.0,
        "report_kb_per_node": 9.0,
        "render_s": 0.1,
        "verdicts": {"CERTIFIED": 9, "UNKNOWN": 1},
    }
    text = scale.table([row, {"path": "slurm", "nodes": 10, "error": "boom"}])
    assert "CERTIFIED=9 UNKNOWN=1" in text
    assert "error: boom" in text
