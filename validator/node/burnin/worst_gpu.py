"""A running burn's worst GPU, in one short line a fleet's live view can show for its host.

A fleet run hears nothing from a host between "run" and its facts, minutes later. So that
an operator watching 1,000 nodes sees a failing or slow GPU while its burn still runs,
the agent (``--progress-lines``) prints one line on stderr every few seconds naming its
host's worst GPU, and the local transport takes the same from the collector in-process.

The line comes from a node, so the controller reads it as hostile input
(:func:`read_progress_line`): bounded before it is parsed, numbers only (no text of the
node's reaches a terminal through it), each within what a GPU can report; anything else
is dropped, never shown.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Callable

from validator.node.burnin.burn_progress import BurnProgress, GpuProgress, ProgressSink

# What marks the line on the agent's stderr: the controller keeps every other line.
PROGRESS_PREFIX = "gpuready-progress "
PROGRESS_LINE_MOST = 512  # bytes: a longer line is not ours
EVERY_S = 2.0  # the agent prints at most one line this often
# Bounds of what a line may say; beyond them it is not a reading (and not shown).
_INDEX_MOST = 1023
_TFLOPS_MOST = 100_000.0  # far above any GPU's dense peak (B200 FP8: 4,500)
_TEMPERATURE_RANGE = (-40.0, 150.0)  # C
_POWER_MOST = 5_000.0  # W
_SECONDS_MOST = 31 * 86_400.0
_FIELDS = frozenset({"gpu", "failed", "tflops", "temp_c", "power_w", "left_s"})


@dataclass(frozen=True)
class WorstGpu:
    """The GPU that looks worst so far in a host's burn, and the burn's time left.

    ``failed``: its burn failed (first in line); else it is the slowest GPU with a
    timing window (the hottest when none has one yet).
    """

    index: int
    failed: bool = False
    tflops: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    left_s: float = 0.0

    def words(self) -> str:
        """``worst GPU 3: 612 TFLOPS, 71 C, 690 W`` or ``GPU 3 failed``."""
        if self.failed:
            return f"GPU {self.index} failed"
        figures = []
        if self.tflops is not None:
            figures.append(
                f"{self.tflops:.0f} TFLOPS" if self.tflops >= 10 else f"{self.tflops:.3g} TFLOPS"
            )
        if self.temperature_c is not None:
            figures.append(f"{self.temperature_c:.0f} C")
        if self.power_w is not None:
            figures.append(f"{self.power_w:.0f} W")
        return f"worst GPU {self.index}: " + (", ".join(figures) or "no figure yet")


def _finite(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _temperature(gpu: GpuProgress) -> float | None:
    sample = gpu.sample
    return _finite(sample.temperature_gpu_c) if sample is not None else None


def _power(gpu: GpuProgress) -> float | None:
    sample = gpu.sample
    return _finite(sample.power_w) if sample is not None else None


def worst_gpu(progress: BurnProgress) -> WorstGpu | None:
    """The GPU to show for this burn: a failed one, else the slowest, else the hottest.

    None while no GPU has anything to show (all still setting up, no sample yet).
    """
    left = max(0.0, (_finite(progress.duration_s) or 0.0) - (_finite(progress.elapsed_s) or 0.0))
    failed = [gpu for gpu in progress.gpus if gpu.state == "failed"]
    timed = [gpu for gpu in progress.gpus if _finite(gpu.tflops) is not None]
    sampled = [gpu for gpu in progress.gpus if _temperature(gpu) is not None]
    if failed:
        pick = min(failed, key=lambda gpu: gpu.index)
    elif timed:
        pick = min(timed, key=lambda gpu: (_finite(gpu.tflops), gpu.index))
    elif sampled:
        pick = max(sampled, key=lambda gpu: (_temperature(gpu), -gpu.index))
    else:
        return None
    return WorstGpu(
        index=pick.index,
        failed=pick.state == "failed",
        tflops=_finite(pick.tflops),
        temperature_c=_temperature(pick),
        power_w=_power(pick),
        left_s=left,
    )


def every(
    send: Callable[[WorstGpu], None],
    seconds: float = EVERY_S,
    clock: Callable[[], float] = time.monotonic,
) -> ProgressSink:
    """A burn progress sink that sends the worst GPU at most once every ``seconds``.

    The first update with something to show is sent at once; a failed GPU is sent as
    soon as it fails, however recent the last line.
    """
    last: list[float] = []
    failed_sent: set[int] = set()

    def sink(progress: BurnProgress) -> None:
        worst = worst_gpu(progress)
        if worst is None:
            return
        now = clock()
        fresh_failure = worst.failed and worst.index not in failed_sent
        if last and now - last[0] < seconds and not fresh_failure:
            return
        if worst.failed:
            failed_sent.add(worst.index)
        last[:] = [now]
        send(worst)

    return sink


def progress_line(worst: WorstGpu) -> str:
    """The agent's stderr line for ``worst`` (no newline)."""
    fields = {
        "gpu": worst.index,
        "failed": worst.failed,
        "tflops": worst.tflops,
        "temp_c": worst.temperature_c,
        "power_w": worst.power_w,
        "left_s": round(worst.left_s, 1),
    }
    return PROGRESS_PREFIX + json.dumps(fields, separators=(",", ":"))


def _within(value: object, low: float, high: float) -> float | None:
    number = _finite(value)
    if number is None or not low <= number <= high:
        raise ValueError("out of range")
    return number


def _optional(fields: dict[str, object], name: str, low: float, high: float) -> float | None:
    value = fields.get(name)
    return None if value is None else _within(value, low, high)


def read_progress_line(line: str) -> WorstGpu | None:
    """A node's progress line read back, or None when it is not one (or not believable).

    Bounded first: a line longer than :data:`PROGRESS_LINE_MOST` is not parsed.
    """
    if len(line) > PROGRESS_LINE_MOST or not line.startswith(PROGRESS_PREFIX):
        return None
    try:
        fields = json.loads(line[len(PROGRESS_PREFIX) :])
        if not isinstance(fields, dict) or set(fields) - _FIELDS:
            return None
        index = fields.get("gpu")
        failed = fields.get("failed", False)
        if (
            not isinstance(index, int)
            or isinstance(index, bool)
            or not 0 <= index <= _INDEX_MOST
            or not isinstance(failed, bool)
        ):
            return None
        return WorstGpu(
            index=index,
            failed=failed,
            tflops=_optional(fields, "tflops", 0.0, _TFLOPS_MOST),
            temperature_c=_optional(fields, "temp_c", *_TEMPERATURE_RANGE),
            power_w=_optional(fields, "power_w", 0.0, _POWER_MOST),
            left_s=_optional(fields, "left_s", 0.0, _SECONDS_MOST) or 0.0,
        )
    except (ValueError, OverflowError, RecursionError):  # not JSON, or beyond a GPU's figures
        return None


__all__ = [
    "EVERY_S",
    "PROGRESS_LINE_MOST",
    "PROGRESS_PREFIX",
    "WorstGpu",
    "every",
    "progress_line",
    "read_progress_line",
    "worst_gpu",
]
