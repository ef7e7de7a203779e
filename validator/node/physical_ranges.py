"""Physical plausibility of every value a node reports: one table of ranges, one pass.

A reading no GPU can physically give (``GPU Current Temp : -273 C``, a NaN power draw,
an uptime of 1e12 seconds) is not a measurement. :func:`plausible_facts` turns each one
into ``Unavailable(Reason.ERROR, "implausible value <v> for <field>, outside <range>")``,
in the words the CSV telemetry parser uses, so the judge sees "not measured" and can never
pass it. NaN and infinity are never plausible.

The facts reader (:func:`validator.node.system_facts.system_facts`) applies it to every source
(live NVML, a captured bundle, a simulated scenario); the burn-in's telemetry and
counters, gathered after the collector ran, go through :func:`plausible_burn`.

Ranges are declared once, by field name, in :data:`RANGES`: a name means the same
quantity wherever it appears (``temperature_gpu_c`` in :class:`GpuFacts` and in
:class:`TelemetrySample`; ``ecc_volatile_corrected`` in :class:`GpuFacts` and in
:class:`ErrorCounters`). They are wide on purpose: they reject what cannot be, never
what is merely unusual, which the checks judge. Where a bound differs from a round
guess, real captured outputs (public repositories' test data) set it:

* current clocks may be 0: an idle A10, A40 and RTX A6000 report ``SM : 0 MHz``;
* memory clocks reach 20000 MHz, as in the CSV telemetry parser: GDDR boards report
  effective clocks far above 10000 (an RTX 5090's maximum memory clock is 14001 MHz);
* SM clocks stop at 5000 MHz, as in that parser (the highest captured maximum is 3165);
* an NVLink runs above 0 and at most 1000 GB/s per direction (captured: 25 on A100,
  26.562 on H100, 53.125 on GB200); a link that is down has no speed, not 0.

Words are declared the same way, in :data:`CHOICES` (the recovery action NVML gives is
one of :data:`~validator.model.RECOVERY_ACTIONS`), and the records inside a GPU's facts
(each NVLink's state and error counters) go through the same table.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from validator.model import (
    IMPLAUSIBLE,
    RECOVERY_ACTIONS,
    BurnResult,
    ErrorCounters,
    GpuBurn,
    GpuFacts,
    Measured,
    NodeFacts,
    NvLinkErrorCounts,
    NvLinkState,
    Reason,
    TelemetrySample,
    Unavailable,
)

R = TypeVar("R")
# The records whose numbers the table covers.
D = TypeVar("D", GpuFacts, TelemetrySample, ErrorCounters, NvLinkState, NvLinkErrorCounts)

# Counters are exact integers in JSON readers that hold numbers as doubles only below 2**53.
COUNTER_LIMIT = 2**53 - 1
# About twenty years of seconds since boot: no host runs longer without a reboot.
UPTIME_LIMIT_S = 20 * 365.25 * 24 * 3600


@dataclass(frozen=True)
class Range:
    """The values one field can physically hold, both ends included."""

    low: float
    high: float
    unit: str
    above: bool = False  # the low end itself is excluded (a speed above 0)

    def holds(self, value: float) -> bool:
        """True for a finite value within the range."""
        if not math.isfinite(value) or value > self.high:
            return False
        return value > self.low if self.above else value >= self.low

    def __str__(self) -> str:
        low = f"above {_number(self.low)}, up to " if self.above else f"{_number(self.low)}.."
        return f"{low}{_number(self.high)} {self.unit}".rstrip()


def _number(value: float) -> str:
    """A bound as a person reads it: 631152000, not 6.31152e+08."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


_TEMPERATURE_NOW = Range(-40.0, 150.0, "C")  # a die or HBM reading now
_THRESHOLD = Range(0.0, 200.0, "C")  # a slowdown, shutdown or max-operating point
# T.Limit (a threshold) less a current temperature; and a threshold's offset to T.Limit,
# which real boards give as -8..0 C.
_TLIMIT_MARGIN = Range(
    _THRESHOLD.low - _TEMPERATURE_NOW.high, _THRESHOLD.high - _TEMPERATURE_NOW.low, "C"
)
_TLIMIT_OFFSET = Range(-50.0, 50.0, "C")
_POWER_DRAW = Range(0.0, 3000.0, "W")
_POWER_LIMIT = Range(1.0, 3000.0, "W")
_MEMORY_TOTAL = Range(1.0, 1_048_576.0, "MiB")
_MEMORY_USED = Range(0.0, 1_048_576.0, "MiB")
_COUNTER = Range(0.0, float(COUNTER_LIMIT), "")  # 2**53 - 1 is exact as a float
_SM_CLOCK_NOW = Range(0.0, 5000.0, "MHz")
_SM_CLOCK = Range(1.0, 5000.0, "MHz")
_MEM_CLOCK_NOW = Range(0.0, 20000.0, "MHz")
_MEM_CLOCK = Range(1.0, 20000.0, "MHz")
_PCIE_GEN = Range(1.0, 7.0, "")
_PCIE_WIDTH = Range(1.0, 32.0, "lanes")
_NVLINK_SPEED = Range(0.0, 1000.0, "GB/s", above=True)

# The one table: every measured number a node reports, by field name.
RANGES: Mapping[str, Range] = {
    "memory_total_mib": _MEMORY_TOTAL,
    "memory_used_mib": _MEMORY_USED,  # and no more than memory_total_mib
    "ecc_volatile_corrected": _COUNTER,
    "ecc_volatile_uncorrected": _COUNTER,
    "ecc_aggregate_corrected": _COUNTER,
    "ecc_aggregate_uncorrected": _COUNTER,
    "retired_pages_sbe": _COUNTER,
    "retired_pages_dbe": _COUNTER,
    "remapped_rows_correctable": _COUNTER,
    "remapped_rows_uncorrectable": _COUNTER,
    "temperature_gpu_c": _TEMPERATURE_NOW,
    "temperature_memory_c": _TEMPERATURE_NOW,
    "temp_shutdown_c": _THRESHOLD,
    "temp_slowdown_c": _THRESHOLD,
    "temp_max_operating_c": _THRESHOLD,
    "temp_memory_max_c": _THRESHOLD,
    "tlimit_margin_c": _TLIMIT_MARGIN,
    "tlimit_shutdown_c": _TLIMIT_OFFSET,
    "tlimit_slowdown_c": _TLIMIT_OFFSET,
    "tlimit_max_operating_c": _TLIMIT_OFFSET,
    "power_draw_w": _POWER_DRAW,
    "power_w": _POWER_DRAW,  # a telemetry sample's draw
    "power_limit_enforced_w": _POWER_LIMIT,
    "power_limit_default_w": _POWER_LIMIT,
    "power_limit_min_w": _POWER_LIMIT,
    "power_limit_max_w": _POWER_LIMIT,
    "sm_clock_mhz": _SM_CLOCK_NOW,
    "mem_clock_mhz": _MEM_CLOCK_NOW,
    "sm_clock_max_mhz": _SM_CLOCK,
    "mem_clock_max_mhz": _MEM_CLOCK,
    "sm_clock_app_mhz": _SM_CLOCK,
    "mem_clock_app_mhz": _MEM_CLOCK,
    "pcie_gen_current": _PCIE_GEN,
    "pcie_gen_max": _PCIE_GEN,
    "pcie_width_current": _PCIE_WIDTH,
    "pcie_width_max": _PCIE_WIDTH,
    "pcie_replay_count": _COUNTER,
    "speed_gb_s": _NVLINK_SPEED,  # NvLinkState: per direction, as nvidia-smi nvlink -s
    "crc_flit": _COUNTER,  # NvLinkErrorCounts
    "crc_data": _COUNTER,
    "replay": _COUNTER,
    "recovery": _COUNTER,
    "utilization_pct": Range(0.0, 100.0, "%"),
    "uptime_s": Range(0.0, UPTIME_LIMIT_S, "s"),
}

# Every measured word a node reports that has a closed list of values, by field name.
CHOICES: Mapping[str, tuple[str, ...]] = {
    "recovery_action": RECOVERY_ACTIONS,
}


def implausible(field: str, value: object, why: str) -> Unavailable:
    """The fact for a value that cannot be: named, with why it cannot."""
    return Unavailable(Reason.ERROR, f"{IMPLAUSIBLE} {value!r} for {field}, {why}")


def plausible(field: str, value: Measured[R]) -> Measured[R]:
    """``value`` if its field's range holds it (or it is no number); else why not.

    Args:
        field: the field's name, a key of :data:`RANGES`.
        value: the reading, or why there is none.

    Raises:
        KeyError: ``field`` has no range (a bug: every measured number needs one).
    """
    bounds = RANGES[field]
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return value
    if bounds.holds(float(value)):
        return value
    return implausible(field, value, f"outside {bounds}")


def plausible_word(field: str, value: Measured[R]) -> Measured[R]:
    """``value`` if it is one of its field's words (or no word at all); else why not.

    Raises:
        KeyError: ``field`` has no list of words in :data:`CHOICES`.
    """
    words = CHOICES[field]
    if not isinstance(value, str) or value in words:
        return value
    return implausible(field, value, f"not one of {', '.join(words)}")


def _plausible_record(record: D) -> D:
    """A dataclass with each of its numbers and words that has a range checked against it."""
    changes: dict[str, Any] = {}
    for item in dataclasses.fields(record):
        if item.name in RANGES:
            checker = plausible
        elif item.name in CHOICES:
            checker = plausible_word
        else:
            continue
        value = getattr(record, item.name)
        checked = checker(item.name, value)
        if checked is not value:
            changes[item.name] = checked
    return dataclasses.replace(record, **changes) if changes else record


_LinkRecord = TypeVar("_LinkRecord", NvLinkState, NvLinkErrorCounts)


def _plausible_links(links: Measured[tuple[_LinkRecord, ...]]) -> Measured[tuple[_LinkRecord, ...]]:
    """Each link's record checked; the same tuple when nothing in it changed."""
    if isinstance(links, Unavailable):
        return links
    checked = tuple(_plausible_record(link) for link in links)
    return links if all(a is b for a, b in zip(checked, links)) else checked


def _plausible_nested(record: D) -> D:
    """The per-link records inside GPU facts or error counters, checked."""
    changes: dict[str, Any] = {}
    for name in ("nvlinks", "nvlink_errors"):
        value = getattr(record, name, None)
        if value is None:
            continue
        checked = _plausible_links(value)
        if checked is not value:
            changes[name] = checked
    return dataclasses.replace(record, **changes) if changes else record


def plausible_gpu(gpu: GpuFacts) -> GpuFacts:
    """One GPU's facts, every implausible reading replaced by why it is not one."""
    checked = _plausible_nested(_plausible_record(gpu))
    used, total = checked.memory_used_mib, checked.memory_total_mib
    if isinstance(used, int) and isinstance(total, int) and used > total:
        # The total is what the capacity check compares with the catalog; the used
        # figure is the one that cannot be.
        used_fact = implausible("memory_used_mib", used, f"more than memory_total_mib {total}")
        checked = dataclasses.replace(checked, memory_used_mib=used_fact)
    return checked


def plausible_sample(sample: TelemetrySample) -> TelemetrySample:
    """One telemetry tick, every implausible reading replaced by why it is not one."""
    return _plausible_record(sample)


def plausible_counters(counters: ErrorCounters) -> ErrorCounters:
    """Error counters, every implausible count replaced by why it is not one."""
    return _plausible_nested(_plausible_record(counters))


def _plausible_gpu_burn(gpu: GpuBurn) -> GpuBurn:
    return dataclasses.replace(
        gpu,
        samples=tuple(plausible_sample(sample) for sample in gpu.samples),
        counters_before=plausible_counters(gpu.counters_before),
        counters_after=plausible_counters(gpu.counters_after),
    )


def plausible_burn(burn: BurnResult) -> BurnResult:
    """A burn-in with its telemetry and counters checked: what the sampler read on the host.

    A NaN temperature in one tick becomes "not measured" for that tick, so the
    judge reads no number from it.
    """
    return dataclasses.replace(burn, gpus=tuple(_plausible_gpu_burn(gpu) for gpu in burn.gpus))


def plausible_facts(facts: NodeFacts) -> NodeFacts:
    """A node's facts with every implausible reading replaced by why it is not one.

    Covers every GPU's facts and, where one is attached, the burn-in's telemetry and
    counters. Nothing else changes.
    """
    burn = plausible_burn(facts.burn) if facts.burn is not None else None
    return dataclasses.replace(
        facts, gpus=tuple(plausible_gpu(gpu) for gpu in facts.gpus), burn=burn
    )


def plausible_uptime(uptime_s: float) -> Measured[float]:
    """Seconds since boot, if a host can have been up that long; else why not."""
    return plausible("uptime_s", uptime_s)
