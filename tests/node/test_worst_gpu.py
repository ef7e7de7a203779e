"""A burn's worst GPU: which GPU it names, how often it is said, and the line a node prints."""

from __future__ import annotations

import pytest

from validator.model import TelemetrySample
from validator.node.burnin.burn_progress import BurnProgress, GpuProgress
from validator.node.burnin.worst_gpu import (
    PROGRESS_LINE_MOST,
    PROGRESS_PREFIX,
    WorstGpu,
    every,
    progress_line,
    read_progress_line,
    worst_gpu,
)


def _gpu(
    index: int, tflops: float | None, state: str = "running", temp: float | None = 60.0
) -> GpuProgress:
    sample = (
        None if temp is None else TelemetrySample(t_s=1.0, power_w=650.0, temperature_gpu_c=temp)
    )
    return GpuProgress(index=index, state=state, tflops=tflops, power_limit_w=700.0, sample=sample)


def _burn(*gpus: GpuProgress, elapsed: float = 40.0) -> BurnProgress:
    return BurnProgress(elapsed_s=elapsed, duration_s=300.0, gpus=gpus)


def test_the_slowest_gpu_is_the_worst_with_its_figures_and_the_time_left() -> None:
    worst = worst_gpu(_burn(_gpu(0, 780.0), _gpu(1, 612.4, temp=71.0), _gpu(2, 790.0)))

    assert worst == WorstGpu(index=1, tflops=612.4, temperature_c=71.0, power_w=650.0, left_s=260.0)
    assert worst.words() == "worst GPU 1: 612 TFLOPS, 71 C, 650 W"


def test_a_failed_gpu_is_worse_than_any_slow_one() -> None:
    worst = worst_gpu(_burn(_gpu(0, 10.0), _gpu(5, None, state="failed"), _gpu(6, 700.0)))

    assert worst is not None
    assert (worst.index, worst.failed) == (5, True)
    assert worst.words() == "GPU 5 failed"


def test_before_any_timing_the_hottest_gpu_is_shown_and_before_any_sample_none() -> None:
    hottest = worst_gpu(_burn(_gpu(0, None, temp=40.0), _gpu(1, None, temp=55.0)))
    assert hottest is not None
    assert (hottest.index, hottest.tflops) == (1, None)

    assert worst_gpu(_burn(_gpu(0, None, state="setup", temp=None))) is None


def test_the_sink_says_it_every_few_seconds_but_a_new_failure_at_once() -> None:
    now = [0.0]
    said: list[WorstGpu] = []
    sink = every(said.append, seconds=2.0, clock=lambda: now[0])

    for tick in range(6):  # a tick a second, as the burn reports
        now[0] = float(tick)
        sink(_burn(_gpu(0, 700.0 - tick), _gpu(1, 800.0)))
    assert [worst.tflops for worst in said] == [700.0, 698.0, 696.0]

    now[0] = 6.5  # half a second after the last line: a failure is not held back
    sink(_burn(_gpu(0, None, state="failed"), _gpu(1, 800.0)))
    assert said[-1].failed
    assert len(said) == 4


def test_a_progress_line_reads_back_as_it_was_said() -> None:
    worst = WorstGpu(index=3, tflops=612.4, temperature_c=71.0, power_w=690.0, left_s=12.5)

    line = progress_line(worst)

    assert line.startswith(PROGRESS_PREFIX)
    assert "\n" not in line
    assert read_progress_line(line) == worst


@pytest.mark.parametrize(
    "line",
    [
        "gpuready-progress not json",
        'gpuready-progress {"gpu": -1}',
        'gpuready-progress {"gpu": true}',
        'gpuready-progress {"gpu": "3\\u001b[31m"}',
        'gpuready-progress {"gpu": 3, "tflops": 1e9}',  # beyond any GPU
        'gpuready-progress {"gpu": 3, "tflops": NaN}',
        'gpuready-progress {"gpu": 3, "temp_c": 900}',
        'gpuready-progress {"gpu": 3, "power_w": -5}',
        'gpuready-progress {"gpu": 3, "failed": "yes"}',
        'gpuready-progress {"gpu": 3, "host": "x"}',  # no text of the node's is taken
        "gpuready-progress [3]",
        'gpuready-progress {"gpu": 3' + " " * PROGRESS_LINE_MOST + "}",  # valid, too long
        'progress {"gpu": 3}',
    ],
)
def test_a_line_that_is_not_believable_is_dropped(line: str) -> None:
    assert read_progress_line(line) is None
