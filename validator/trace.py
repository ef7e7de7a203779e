"""The burn-in's telemetry trace, and the one rule for which of its samples were under load.

A burn's trace is longer than its load: the sampler starts before the workers
(its first sample is an idle GPU: 345 MHz and ~70 W on an H100), set-up and
warm-up ramp the GPU up, a host-side pause can open an idle gap, and the last
samples may land after the last batch ended. A judgement made "under load"
(power reached, clocks held, throttle reasons, peak temperature) that read
those samples would fail every healthy GPU, so every such judgement reads
:func:`under_load` and nothing else.

A sample is under load when all of these hold:

1. it lies in the GPU's load window, from the first batch begun after warm-up
   to the end of the last batch (``GpuBurn.load_start_s`` / ``load_end_s``,
   on the trace's clock); a trace without a known window has no load samples;
2. its utilisation, where measured, is at least ``LOAD_UTILIZATION_MIN_PCT``;
3. NVML does not call the GPU idle (``gpu_idle`` among its clock-event reasons).

Where a single sample should not decide (a clock dip while the power
controller settles), a low percentile of the load samples is used instead of
the minimum: :func:`percentile` with ``LOW_PERCENTILE``. Fewer than
``MIN_LOAD_SAMPLES`` load samples is too little to judge: unknown, never a pass.

Standard library and the model only, so any room may read a trace through it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Callable

from validator.model import GpuBurn, KeptPerObject, TelemetrySample, Unavailable

LOAD_UTILIZATION_MIN_PCT = 90
LOW_PERCENTILE = 5.0  # instead of the minimum where one sample should not decide
MIN_LOAD_SAMPLES = 3


def is_under_load(sample: TelemetrySample, start: float, end: float) -> bool:
    """Whether one sample counts as taken under load, by the rule above."""
    if not start <= sample.t_s <= end:
        return False
    utilization = sample.utilization_pct
    if isinstance(utilization, int) and utilization < LOAD_UTILIZATION_MIN_PCT:
        return False
    reasons = sample.clock_event_reasons
    return not (isinstance(reasons, tuple) and "gpu_idle" in reasons)


def under_load(burn: GpuBurn) -> tuple[TelemetrySample, ...]:
    """The samples of ``burn``'s trace that were taken under load (empty without a window).

    Kept per burn object while it lives: judging a GPU reads its load samples in nine
    checks and its reports again, and filtering a default burn's 300 samples each time
    was a fifth of what judging a node cost.
    """
    loaded = _LOADED.get(burn)
    if loaded is None:
        loaded = _filter_under_load(burn)
        _LOADED.keep(burn, loaded)
    return loaded


_LOADED: KeptPerObject[GpuBurn, tuple[TelemetrySample, ...]] = KeptPerObject()


def _filter_under_load(burn: GpuBurn) -> tuple[TelemetrySample, ...]:
    start, end = burn.load_start_s, burn.load_end_s
    if isinstance(start, Unavailable) or isinstance(end, Unavailable) or end < start:
        return ()
    return tuple(sample for sample in burn.samples if is_under_load(sample, start, end))


def numbers(
    samples: Sequence[TelemetrySample], read: Callable[[TelemetrySample], object]
) -> list[float]:
    """The measured, finite values of one reading over ``samples``."""
    values = []
    for sample in samples:
        value = read(sample)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
            if math.isfinite(number):
                values.append(number)
    return values


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * min(100.0, max(0.0, q)) / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def describe_window(burn: GpuBurn) -> str:
    """The load window in words, for findings: "12.0-298.4 s, 280 of 301 samples"."""
    start, end = burn.load_start_s, burn.load_end_s
    if isinstance(start, Unavailable) or isinstance(end, Unavailable):
        return f"no load window, {len(burn.samples)} samples"
    return f"{start:.1f}-{end:.1f} s, {len(under_load(burn))} of {len(burn.samples)} samples"


__all__ = [
    "LOAD_UTILIZATION_MIN_PCT",
    "LOW_PERCENTILE",
    "MIN_LOAD_SAMPLES",
    "describe_window",
    "is_under_load",
    "numbers",
    "percentile",
    "under_load",
]
