"""Telemetry during the burn: power, temperatures, clocks, throttle reasons, error counters."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import threading
import time
from collections.abc import Mapping
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

    def latest(self) -> dict[int, TelemetrySample]:
        """The most recent sample of each GPU, for a live display (may be empty)."""
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

    def latest(self) -> dict[int, TelemetrySample]:
        """No samples."""
        return {}

    def stop(self) -> dict[int, tuple[TelemetrySample, ...]]:
        """No samples."""
        return {}

    def close(self) -> None:
        """Nothing held."""


def counters_from_facts(gpu: GpuFacts) -> ErrorCounters:
    """The counters a GPU's facts already hold."""
    return counters_of(gpu)


class LoadModel(Protocol):
    """How one simulated GPU's telemetry runs over a burn, and its counters after it."""

    @property
    def counters_after(self) -> ErrorCounters | None:
        """The counters after the burn; None: unchanged."""
        ...

    @property
    def counters_hang(self) -> bool:
        """Reading the counters after the burn never returns."""
        ...

    def sample(self, index: int, t: float, elapsed: float) -> TelemetrySample:
        """The reading at ``t`` seconds of a burn that lasts ``elapsed`` seconds."""
        ...


# The shape of a healthy GPU's trace, as recorded by nvidia-smi on real nodes (see
# tests/fixtures/telemetry/SOURCES.md): an idle first sample (util 0, idle clocks, a
# tenth of the power limit), a ramp of about two seconds, then power at the limit with a
# few per cent of jitter and the SM clock wandering some 50 MHz under the power
# controller, and an idle tail once the last batch ended.
RAMP_S = 2.0
IDLE_POWER_FRACTION = 0.1
POWER_JITTER = 0.02
CLOCK_JITTER_MHZ = 45
TAIL_S = 1.0


@dataclass(frozen=True)
class SimulatedLoad:
    """How one simulated GPU behaves under load: a realistic trace from a few figures."""

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
    idle_sm_clock_mhz: int = 345  # H100/H200 idle; A100 idles at 210
    idle_mem_clock_mhz: int | None = None  # None: the loaded memory clock (HBM idles at it)
    counters_hang: bool = False

    def sample(self, index: int, t: float, elapsed: float) -> TelemetrySample:
        """Idle at zero, a ramp, jitter at the limit, an idle tail after the load ended."""
        jitter = _jitter(index, t)
        # Temperature approaches its peak by the end, however short the burn.
        fraction = t / elapsed if elapsed > 0 else 1.0
        heat = 1.0 - math.exp(-5.0 * fraction)
        ramp = min(1.0, t / min(RAMP_S, max(elapsed, 1e-9) / 10.0))
        tail = t > elapsed - min(TAIL_S, elapsed / 20.0) and t > 0
        idle = t <= 0.0 or tail
        idle_power = self.power_limit_w * IDLE_POWER_FRACTION
        load_power = self.power_limit_w * self.power_fraction * (1.0 + POWER_JITTER * jitter)
        power = idle_power if idle else idle_power + (load_power - idle_power) * ramp
        clock = self.idle_sm_clock_mhz
        if not idle:
            loaded = self.sm_clock_mhz - abs(round(CLOCK_JITTER_MHZ * jitter / 15.0)) * 15
            clock = round(self.idle_sm_clock_mhz + (loaded - self.idle_sm_clock_mhz) * ramp)
        memory_temp: Measured[float] = _NO_MEMORY_TEMP
        if self.memory_temp_peak_c is not None:
            memory_temp = round(
                self.temp_start_c + (self.memory_temp_peak_c - self.temp_start_c) * heat, 1
            )
        reasons: tuple[str, ...] = ("gpu_idle",) if idle else self.reasons
        return TelemetrySample(
            t_s=round(t, 3),
            power_w=round(power, 1),
            temperature_gpu_c=round(
                self.temp_start_c + (self.temp_peak_c - self.temp_start_c) * heat, 1
            ),
            temperature_memory_c=memory_temp,
            sm_clock_mhz=int(clock),
            mem_clock_mhz=self.mem_clock_mhz
            if not idle or self.idle_mem_clock_mhz is None
            else self.idle_mem_clock_mhz,
            utilization_pct=0 if idle else round(self.utilization_pct * ramp),
            clock_event_reasons=reasons,
        )


def _jitter(index: int, t: float) -> float:
    """A repeatable value in [-1, 1] for one GPU at one moment."""
    digest = hashlib.sha256(f"{index}:{t:.3f}".encode()).digest()
    return int.from_bytes(digest[:4], "little") / 0x7FFFFFFF - 1.0


@dataclass(frozen=True)
class RecordedLoad:
    """A GPU's telemetry replayed from a real recorded log, stretched to the burn's length.

    The recorded shape (idle head, ramp, load, idle tail) is kept: the log's time
    span is mapped onto the burn's, and each simulated sample takes the recorded
    one nearest to the same point of the log.
    """

    series: tuple[TelemetrySample, ...]
    counters_after: ErrorCounters | None = None
    counters_hang: bool = False

    def sample(self, index: int, t: float, elapsed: float) -> TelemetrySample:
        """The recorded reading at the same share of the log as ``t`` is of the burn."""
        del index
        first, last = self.series[0].t_s, self.series[-1].t_s
        at = first + (last - first) * (t / elapsed if elapsed > 0 else 1.0)
        nearest = min(self.series, key=lambda sample: abs(sample.t_s - at))
        return dataclasses.replace(nearest, t_s=round(t, 3))


class SimulatedSampler:
    """A trace from each simulated GPU's load model, over the real elapsed time.

    Args:
        loads: the load model of each GPU.
        counters_before: each GPU's counters before the burn (its facts').
        interval_s: seconds between samples; the first is taken at time zero.
        expected_s: the burn's planned length, to shape the samples a live display asks for.
    """

    name = "simulated"

    def __init__(
        self,
        loads: Mapping[int, LoadModel],
        counters_before: dict[int, ErrorCounters],
        interval_s: float = 1.0,
        expected_s: float = 0.0,
    ) -> None:
        self._loads = dict(loads)
        self._before = counters_before
        self._interval = interval_s
        self._expected = expected_s
        self._started: float | None = None
        self._stopped = False

    def counters(self, index: int) -> ErrorCounters:
        """Before the burn: the facts' counters; after it: the scenario's, if it gives any."""
        load = self._loads.get(index)
        if self._stopped and load is not None:
            if load.counters_hang:
                threading.Event().wait()  # NVML blocked in a wedged driver: never returns
            if load.counters_after is not None:
                return load.counters_after
        return self._before.get(index, ErrorCounters())

    def start(self) -> None:
        """Time zero."""
        self._started = time.monotonic()

    def latest(self) -> dict[int, TelemetrySample]:
        """Each GPU's reading now, on the planned burn's shape."""
        if self._started is None:
            return {}
        now = time.monotonic() - self._started
        span = max(self._expected, now)
        return {index: load.sample(index, now, span) for index, load in self._loads.items()}

    def stop(self) -> dict[int, tuple[TelemetrySample, ...]]:
        """The trace from time zero to now, one sample per interval."""
        elapsed = time.monotonic() - (self._started or time.monotonic())
        self._stopped = True
        ticks = int(elapsed / self._interval)
        times = [tick * self._interval for tick in range(ticks + 1)]
        if elapsed - times[-1] > self._interval / 2:
            times.append(elapsed)
        return {
            index: tuple(load.sample(index, t, elapsed) for t in times)
            for index, load in self._loads.items()
        }

    def close(self) -> None:
        """Nothing held."""


_NO_MEMORY_TEMP = Unavailable(
    Reason.NOT_SUPPORTED, "the simulated GPU reports no memory temperature"
)
