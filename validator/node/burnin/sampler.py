"""Telemetry during the burn: power, temperatures, clocks, throttle reasons, error counters."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol

from validator.model import (
    ErrorCounters,
    GpuFacts,
    Measured,
    Reason,
    TelemetrySample,
    Unavailable,
    counters_of,
)


class Sampler(Protocol):
    """Samples every GPU at a fixed interval while the burn runs."""

    name: str

    def counters(self, index: int) -> ErrorCounters:
        """A GPU's error counters now."""
        ...

    def start(self) -> None:
        """Begin sampling (time zero of the trace)."""
        ...

    def stop(self) -> dict[int, tuple[TelemetrySample, ...]]:
        """End sampling; the trace per GPU index."""
        ...

    def close(self) -> None:
        """Release what the sampler holds (after the last counters are read)."""
        ...


class NoSampler:
    """For hosts where nothing can be sampled: every trace is empty, counters unmeasured."""

    name = "none"

    def counters(self, index: int) -> ErrorCounters:
        """Nothing measured."""
        del index
        return ErrorCounters()

    def start(self) -> None:
        """Nothing to start."""

    def stop(self) -> dict[int, tuple[TelemetrySample, ...]]:
        """No samples."""
        return {}

    def close(self) -> None:
        """Nothing held."""


def counters_from_facts(gpu: GpuFacts) -> ErrorCounters:
    """The counters a GPU's facts already hold."""
    return counters_of(gpu)


@dataclass(frozen=True)
class SimulatedLoad:
    """How one simulated GPU behaves under load."""

    power_limit_w: float
    power_fraction: float = 0.96  # of the enforced limit, once ramped up
    temp_start_c: float = 35.0
    temp_peak_c: float = 70.0
    memory_temp_peak_c: float | None = 78.0
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    utilization_pct: int = 100
    reasons: tuple[str, ...] = ()
    counters_after: ErrorCounters | None = None  # None: unchanged


class SimulatedSampler:
    """A deterministic trace from each simulated GPU's load model, over the real elapsed time."""

    name = "simulated"

    def __init__(
        self,
        loads: dict[int, SimulatedLoad],
        counters_before: dict[int, ErrorCounters],
        interval_s: float = 1.0,
    ) -> None:
        self._loads = loads
        self._before = counters_before
        self._interval = interval_s
        self._started: float | None = None
        self._stopped = False

    def counters(self, index: int) -> ErrorCounters:
        """Before the burn: the facts' counters; after it: the scenario's, if it gives any."""
        load = self._loads.get(index)
        if self._stopped and load is not None and load.counters_after is not None:
            return load.counters_after
        return self._before.get(index, ErrorCounters())

    def start(self) -> None:
        """Time zero."""
        self._started = time.monotonic()

    def stop(self) -> dict[int, tuple[TelemetrySample, ...]]:
        """The trace from time zero to now, one sample per interval (at least one)."""
        elapsed = time.monotonic() - (self._started or time.monotonic())
        self._stopped = True
        ticks = max(1, int(elapsed / self._interval))
        times = [min(elapsed, (tick + 1) * self._interval) for tick in range(ticks)]
        return {
            index: tuple(self._sample(load, t, elapsed) for t in times)
            for index, load in self._loads.items()
        }

    def close(self) -> None:
        """Nothing held."""

    @staticmethod
    def _sample(load: SimulatedLoad, t: float, elapsed: float) -> TelemetrySample:
        # The trace is squeezed into the burn's length, however short: temperature
        # approaches its peak by the end, power plateaus within the first tenth.
        fraction = t / elapsed if elapsed > 0 else 1.0
        heat = 1.0 - math.exp(-5.0 * fraction)
        power = min(1.0, 0.5 + 5.0 * fraction)
        memory_temp: Measured[float] = _NO_MEMORY_TEMP
        if load.memory_temp_peak_c is not None:
            memory_temp = round(
                load.temp_start_c + (load.memory_temp_peak_c - load.temp_start_c) * heat, 1
            )
        return TelemetrySample(
            t_s=round(t, 3),
            power_w=round(load.power_limit_w * load.power_fraction * power, 1),
            temperature_gpu_c=round(
                load.temp_start_c + (load.temp_peak_c - load.temp_start_c) * heat, 1
            ),
            temperature_memory_c=memory_temp,
            sm_clock_mhz=load.sm_clock_mhz,
            mem_clock_mhz=load.mem_clock_mhz,
            utilization_pct=load.utilization_pct,
            clock_event_reasons=load.reasons,
        )


_NO_MEMORY_TEMP = Unavailable(
    Reason.NOT_SUPPORTED, "the simulated GPU reports no memory temperature"
)
