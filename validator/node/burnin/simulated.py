"""A simulated node's burn-in: real NumPy products, a scenario's speed and telemetry.

A scenario's optional ``burn`` section describes how its GPUs behave under
load; anything it leaves out follows from the GPU's facts::

    "burn": {
      "tflops": 720.0,            # achieved dense TFLOPS per GPU (default: the CPU's own rate)
      "power_fraction": 0.96,     # of the enforced power limit, once ramped up
      "temp_peak_c": 72,          # GPU temperature reached by the end
      "memory_temp_peak_c": 80,   # null: the GPU reports none
      "sm_clock_mhz": 1980,       # default: the GPU's max SM clock
      "mem_clock_mhz": 2619,
      "reasons": [],              # clock-event reasons active under load
      "xids": ["NVRM: Xid (PCI:0000:19:00): 48, ..."],  # kernel-log lines during the burn
      "counters_after": {"ecc_volatile_uncorrected": 1}, # counters that changed during the burn
      "gpu_overrides": {"4": {"temp_peak_c": 88, "reasons": ["hw_thermal_slowdown"]}}
    }
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from validator.model import ErrorCounters, GpuFacts, GpuStatus, NodeFacts, Unavailable
from validator.node.burnin.sampler import SimulatedLoad, SimulatedSampler, counters_from_facts

BURN_KEYS = frozenset(
    {
        "tflops",
        "power_fraction",
        "temp_peak_c",
        "memory_temp_peak_c",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "reasons",
        "utilization_pct",
        "counters_after",
        "xids",
        "gpu_overrides",
    }
)
GPU_KEYS = BURN_KEYS - {"xids", "gpu_overrides"}
COUNTER_KEYS = frozenset(field.name for field in dataclasses.fields(ErrorCounters))


@dataclass(frozen=True)
class SimulatedBurn:
    """Everything a simulated burn needs beside the backend."""

    tflops: dict[int, float]
    sampler: SimulatedSampler
    xid_lines: tuple[str, ...]


def _number(facts_value: object, default: float) -> float:
    return default if isinstance(facts_value, Unavailable) else float(str(facts_value))


def _load(gpu: GpuFacts, spec: Mapping[str, Any]) -> SimulatedLoad:
    limit = _number(gpu.power_limit_enforced_w, 700.0)
    start = _number(gpu.temperature_gpu_c, 35.0)
    counters_after = None
    if "counters_after" in spec:
        counters_after = dataclasses.replace(
            counters_from_facts(gpu), **dict(spec["counters_after"])
        )
    memory_peak = spec.get("memory_temp_peak_c", 80.0)
    return SimulatedLoad(
        power_limit_w=limit,
        power_fraction=float(spec.get("power_fraction", 0.96)),
        temp_start_c=start,
        temp_peak_c=float(spec.get("temp_peak_c", max(start, 70.0))),
        memory_temp_peak_c=None if memory_peak is None else float(memory_peak),
        sm_clock_mhz=int(spec.get("sm_clock_mhz", _number(gpu.sm_clock_max_mhz, 1980.0))),
        mem_clock_mhz=int(spec.get("mem_clock_mhz", _number(gpu.mem_clock_max_mhz, 2619.0))),
        utilization_pct=int(spec.get("utilization_pct", 100)),
        reasons=tuple(spec.get("reasons", ())),
        counters_after=counters_after,
    )


def simulated_burn(facts: NodeFacts, burn: Mapping[str, Any], interval_s: float) -> SimulatedBurn:
    """The speed, telemetry and kernel-log lines a scenario gives its GPUs under load."""
    overrides = burn.get("gpu_overrides", {})
    loads: dict[int, SimulatedLoad] = {}
    tflops: dict[int, float] = {}
    for gpu in facts.gpus:
        if gpu.status is not GpuStatus.OK:
            continue
        spec = {
            **{k: v for k, v in burn.items() if k in GPU_KEYS},
            **overrides.get(str(gpu.index), {}),
        }
        loads[gpu.index] = _load(gpu, spec)
        if "tflops" in spec:
            tflops[gpu.index] = float(spec["tflops"])
    before = {gpu.index: counters_from_facts(gpu) for gpu in facts.gpus}
    return SimulatedBurn(
        tflops=tflops,
        sampler=SimulatedSampler(loads, before, interval_s=interval_s),
        xid_lines=tuple(burn.get("xids", ())),
    )


def check_burn_section(burn: object, where: str) -> list[str]:
    """Problems with a scenario's ``burn`` section, each naming the key (empty: fine)."""
    if not isinstance(burn, Mapping):
        return [f"{where}: expected an object"]
    problems = [f"{where}: unknown key {key!r}" for key in burn if key not in BURN_KEYS]
    for index, spec in dict(burn.get("gpu_overrides", {})).items():
        if not str(index).isdigit() or not isinstance(spec, Mapping):
            problems.append(f"{where}.gpu_overrides: {index!r} must be a GPU index with an object")
            continue
        problems += [
            f"{where}.gpu_overrides.{index}: unknown key {key!r}"
            for key in spec
            if key not in GPU_KEYS
        ]
    for key in dict(burn.get("counters_after", {})):
        if key not in COUNTER_KEYS:
            problems.append(f"{where}.counters_after: unknown counter {key!r}")
    return problems
