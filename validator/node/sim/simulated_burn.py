"""A simulated node's burn-in: real NumPy products, a scenario's speed and telemetry.

A scenario's optional ``burn`` section describes how its GPUs behave under
load; anything it leaves out follows from the GPU's facts::

    "burn": {
      "tflops": 720.0,            # achieved dense TFLOPS per GPU (default: the CPU's own rate)
      "power_fraction": 0.96,     # of the enforced power limit, once ramped up
      "temp_peak_c": 72,          # GPU temperature reached by the end
      "memory_temp_peak_c": 80,   # null: the GPU reports none
      "sm_clock_mhz": 1980,       # under load, before jitter (default: the GPU's max SM clock)
      "idle_sm_clock_mhz": 345,   # the first sample's and the idle tail's
      "mem_clock_mhz": 2619,
      "reasons": [],              # clock-event reasons active under load
      "telemetry_csv": "PATH",    # replay a real nvidia-smi CSV log instead: relative to the
                                  # scenario file, or builtin:traces/NAME for a shipped one
      "wedged": false,            # the GPU's kernels never return
      "counters_hang": false,     # reading its error counters after the burn never returns
      "xids": ["NVRM: Xid (PCI:0000:19:00): 48, ..."],  # kernel-log lines during the burn
      "counters_after": {"ecc_volatile_uncorrected": 1}, # counters that changed during the burn
      "counters_growth": {"pcie_replay_count": 412,      # counts added during the burn
                          "nvlink_errors": [{"link": 7, "crc_flit": 4180}]},
      "cuda": {                   # how the node's CUDA runtime numbers its GPUs
        "fastest_first": [3, 2, 1, 0],   # NVML indices, without CUDA_DEVICE_ORDER=PCI_BUS_ID
        "hidden": [6],                   # GPUs CUDA cannot initialise though NVML lists them
        "visible_devices": "0,1"         # the environment's CUDA_VISIBLE_DEVICES
      },
      "gpu_overrides": {"4": {"temp_peak_c": 88, "reasons": ["hw_thermal_slowdown"]}}
    }

Without ``telemetry_csv`` the trace is synthesised on the shape of real recorded
runs (validator.node.burnin.sampler.SimulatedLoad); with it, the recorded log is
replayed per GPU by index (a log of fewer GPUs repeats them), stretched or
compressed to the burn's length, except on a GPU whose ``gpu_overrides`` entry
sets a telemetry figure (``TELEMETRY_KEYS``): that GPU's trace is synthesised
from its figures, so a scenario can put one faulty GPU in a recorded node.

``counters_after`` sets a counter's value after the burn; ``counters_growth`` adds
to its value before the burn (after ``counters_after``, where both name a counter).
Both take ``nvlink_errors`` in the forms of :mod:`validator.node.sim.fake_nvml`: one
object for every link, or a list naming the links that change (links left out keep
their counts). A counter the GPU does not report (not supported before the burn)
cannot change: it stays not supported after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from validator.model import (
    ErrorCounters,
    GpuFacts,
    GpuStatus,
    Measured,
    NodeFacts,
    NvLinkErrorCounts,
    TelemetrySample,
    Unavailable,
)
from validator.node.burnin.devices import (
    CudaEnvironment,
    SimulatedCuda,
    SimulatedDevice,
    prepare_cuda_environment,
)
from validator.node.burnin.numpy_backend import SimulatedBoard
from validator.node.burnin.sampler import (
    LoadModel,
    RecordedLoad,
    SimulatedLoad,
    SimulatedSampler,
    counters_from_facts,
)

BURN_KEYS = frozenset(
    {
        "tflops",
        "power_fraction",
        "temp_peak_c",
        "memory_temp_peak_c",
        "sm_clock_mhz",
        "idle_sm_clock_mhz",
        "mem_clock_mhz",
        "reasons",
        "utilization_pct",
        "counters_after",
        "counters_growth",
        "telemetry_csv",
        "wedged",
        "counters_hang",
        "xids",
        "cuda",
        "gpu_overrides",
    }
)
GPU_KEYS = BURN_KEYS - {"xids", "gpu_overrides", "cuda", "telemetry_csv"}
# A GPU whose override sets any of these gets a synthesised trace, not the recorded one.
TELEMETRY_KEYS = frozenset(
    {
        "power_fraction",
        "temp_peak_c",
        "memory_temp_peak_c",
        "sm_clock_mhz",
        "idle_sm_clock_mhz",
        "mem_clock_mhz",
        "reasons",
        "utilization_pct",
    }
)
CUDA_KEYS = frozenset({"fastest_first", "hidden", "visible_devices"})
COUNTER_KEYS = frozenset(field.name for field in dataclasses.fields(ErrorCounters))
FLAG_COUNTERS = frozenset({"remap_pending", "retired_pages_pending"})


@dataclass(frozen=True)
class SimulatedBurn:
    """Everything a simulated burn needs beside the backend."""

    tflops: dict[int, float]  # by NVML index
    sampler: SimulatedSampler
    xid_lines: tuple[str, ...]
    boards: tuple[SimulatedBoard, ...]  # by CUDA device number, as the runtime enumerates
    environment: CudaEnvironment


def _number(facts_value: object, default: float) -> float:
    return default if isinstance(facts_value, Unavailable) else float(str(facts_value))


Combine = Callable[[Any, Any], Any]


def _set(before: object, value: object) -> object:
    """A counter after the burn as the scenario sets it."""
    del before  # replaced whatever it was
    return value


def _grow(before: object, amount: object) -> object:
    """A counter after the burn grown by ``amount``; one not reported stays not reported."""
    if isinstance(before, (Unavailable, bool)):
        return before
    return int(str(before)) + int(str(amount))


def _link_counts(
    before: Measured[tuple[NvLinkErrorCounts, ...]], spec: object, combine: Combine
) -> Measured[tuple[NvLinkErrorCounts, ...]]:
    """Each link's counters changed as ``spec`` says (one object for all, or a list by link)."""
    if isinstance(before, Unavailable):
        return before
    every = dict(spec) if isinstance(spec, Mapping) else None
    entries = spec if isinstance(spec, list) else []
    by_link = {int(entry["link"]): dict(entry) for entry in entries}
    out = []
    for counts in before:
        given = every if every is not None else by_link.get(counts.link, {})
        changes = {
            name: combine(getattr(counts, name), value)
            for name, value in given.items()
            if name != "link"
        }
        out.append(dataclasses.replace(counts, **changes))
    return tuple(out)


def _changed(counters: ErrorCounters, spec: Mapping[str, Any], combine: Combine) -> ErrorCounters:
    changes = {
        name: combine(getattr(counters, name), value)
        for name, value in spec.items()
        if name != "nvlink_errors"
    }
    if "nvlink_errors" in spec:
        changes["nvlink_errors"] = _link_counts(
            counters.nvlink_errors, spec["nvlink_errors"], combine
        )
    return dataclasses.replace(counters, **changes)


def _counters_after(gpu: GpuFacts, spec: Mapping[str, Any]) -> ErrorCounters | None:
    if "counters_after" not in spec and "counters_growth" not in spec:
        return None
    after = counters_from_facts(gpu)
    after = _changed(after, dict(spec.get("counters_after", {})), _set)
    return _changed(after, dict(spec.get("counters_growth", {})), _grow)


def _load(
    gpu: GpuFacts, spec: Mapping[str, Any], recorded: tuple[TelemetrySample, ...] | None
) -> LoadModel:
    counters_after = _counters_after(gpu, spec)
    hang = bool(spec.get("counters_hang", False))
    if recorded:
        return RecordedLoad(series=recorded, counters_after=counters_after, counters_hang=hang)
    limit = _number(gpu.power_limit_enforced_w, 700.0)
    start = _number(gpu.temperature_gpu_c, 35.0)
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
        idle_sm_clock_mhz=int(spec.get("idle_sm_clock_mhz", 345)),
        counters_hang=hang,
    )


def _recorded_for(
    index: int, recorded: Mapping[int, tuple[TelemetrySample, ...]] | None
) -> tuple[TelemetrySample, ...] | None:
    if not recorded:
        return None
    keys = sorted(recorded)
    return recorded[keys[index % len(keys)]] if index not in recorded else recorded[index]


def simulated_burn(
    facts: NodeFacts,
    burn: Mapping[str, Any],
    interval_s: float,
    *,
    expected_s: float = 0.0,
    recorded: Mapping[int, tuple[TelemetrySample, ...]] | None = None,
) -> SimulatedBurn:
    """The speed, telemetry, kernel-log lines and CUDA view a scenario gives its GPUs.

    Args:
        facts: the simulated node's facts.
        burn: the scenario's ``burn`` section.
        interval_s: seconds between telemetry samples.
        expected_s: the burn's planned length (for live progress).
        recorded: the ``telemetry_csv`` log's samples by GPU index, when the scenario has one.
    """
    overrides = burn.get("gpu_overrides", {})
    loads: dict[int, LoadModel] = {}
    tflops: dict[int, float] = {}
    wedged: set[int] = set()
    for gpu in facts.gpus:
        if gpu.status is not GpuStatus.OK:
            continue
        override = overrides.get(str(gpu.index), {})
        spec = {**{k: v for k, v in burn.items() if k in GPU_KEYS}, **override}
        replay = None if TELEMETRY_KEYS & set(override) else _recorded_for(gpu.index, recorded)
        loads[gpu.index] = _load(gpu, spec, replay)
        if "tflops" in spec:
            tflops[gpu.index] = float(spec["tflops"])
        if spec.get("wedged"):
            wedged.add(gpu.index)
    before = {gpu.index: counters_from_facts(gpu) for gpu in facts.gpus}
    cuda = dict(burn.get("cuda", {}))
    simulated_env: dict[str, str] = {}
    if cuda.get("visible_devices") is not None:
        simulated_env["CUDA_VISIBLE_DEVICES"] = str(cuda["visible_devices"])
    environment = prepare_cuda_environment(simulated_env)
    runtime = SimulatedCuda(
        [
            SimulatedDevice(
                nvml_index=gpu.index,
                bus_id=gpu.pci_bus_id if isinstance(gpu.pci_bus_id, str) else "",
                uuid=gpu.uuid if isinstance(gpu.uuid, str) else "",
            )
            for gpu in facts.gpus
            if gpu.status is GpuStatus.OK
        ],
        fastest_first=cuda.get("fastest_first"),
        hidden=cuda.get("hidden", ()),
        visible_devices=environment.visible_devices,
    )
    boards = tuple(
        SimulatedBoard(
            bus_id=device.bus_id,
            tflops=tflops.get(device.nvml_index),
            wedged=device.nvml_index in wedged,
        )
        for device in runtime.enumerate(simulated_env.get("CUDA_DEVICE_ORDER"))
    )
    return SimulatedBurn(
        tflops=tflops,
        sampler=SimulatedSampler(loads, before, interval_s=interval_s, expected_s=expected_s),
        xid_lines=tuple(burn.get("xids", ())),
        boards=boards,
        environment=environment,
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
    problems += _counter_problems(burn, where)
    for index, spec in dict(burn.get("gpu_overrides", {})).items():
        if isinstance(spec, Mapping):
            problems += _counter_problems(spec, f"{where}.gpu_overrides.{index}")
    problems += _cuda_problems(burn.get("cuda", {}), f"{where}.cuda")
    csv = burn.get("telemetry_csv")
    if csv is not None and (not isinstance(csv, str) or not csv.strip()):
        problems.append(f"{where}.telemetry_csv: must be the path of an nvidia-smi CSV log")
    return problems


def _counter_problems(spec: Mapping[str, Any], where: str) -> list[str]:
    """Unknown counters in ``counters_after`` / ``counters_growth``, and flags set to grow."""
    problems = []
    for section in ("counters_after", "counters_growth"):
        given = spec.get(section, {})
        for key in dict(given) if isinstance(given, Mapping) else {}:
            if key not in COUNTER_KEYS:
                problems.append(f"{where}.{section}: unknown counter {key!r}")
            elif section == "counters_growth" and key in FLAG_COUNTERS:
                problems.append(
                    f"{where}.counters_growth: {key!r} is a flag and cannot grow; "
                    "set it in counters_after"
                )
    return problems


def _cuda_problems(cuda: object, where: str) -> list[str]:
    if not isinstance(cuda, Mapping):
        return [f"{where}: expected an object"]
    problems = [f"{where}: unknown key {key!r}" for key in cuda if key not in CUDA_KEYS]
    for key in ("fastest_first", "hidden"):
        value = cuda.get(key, [])
        if not isinstance(value, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
        ):
            problems.append(f"{where}.{key}: must be a list of GPU indexes")
    visible = cuda.get("visible_devices")
    if visible is not None and not isinstance(visible, str):
        problems.append(f'{where}.visible_devices: must be text like "0,1" or GPU-<uuid>')
    return problems
