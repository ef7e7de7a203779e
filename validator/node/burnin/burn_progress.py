"""What a running burn reports about once a second: for a live display, and nothing else.

Apart from the burn's runner so that a display imports these few types, not the runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from validator.model import TelemetrySample


@dataclass(frozen=True)
class GpuProgress:
    """One GPU's burn so far, for a live display."""

    index: int
    state: str  # setup | running | done | failed | not run
    tflops: float | None  # the last timing window's rate
    power_limit_w: float | None
    sample: TelemetrySample | None  # the sampler's latest reading


@dataclass(frozen=True)
class BurnProgress:
    """The whole burn so far: sent to the progress sink about once a second."""

    elapsed_s: float
    duration_s: float
    gpus: tuple[GpuProgress, ...]


ProgressSink = Callable[[BurnProgress], None]
