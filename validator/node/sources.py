"""The three places facts come from: this host, a capture, a scenario (and their burn-ins)."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

from validator.model import (
    DEFAULT_XID_WINDOW_HOURS,
    BurnResult,
    GpuStatus,
    Measured,
    NodeFacts,
    Unavailable,
    XidEvent,
)
from validator.node import collect
from validator.node.nvml import read_nvml
from validator.node.parsers.kernel_log import parse_xid_events
from validator.node.scenario import Scenario, load_scenario
from validator.node.system import LiveSystem, System

if TYPE_CHECKING:
    # The burn-in and the capture System load only when used: the agent starts
    # on every host of a fleet run, and most runs need neither.
    from validator.node.burnin.config import BurnConfig
    from validator.node.burnin.devices import Target
    from validator.node.burnin.run import ProgressSink
    from validator.node.burnin.sampler import Sampler


def _reading(lib: Any | None) -> collect.DriverReading:  # noqa: ANN401 - pynvml or a fake
    nvml = read_nvml(lib)
    return collect.DriverReading(
        status=nvml.status,
        detail=nvml.detail,
        driver_version=nvml.driver_version,
        cuda_driver_version=nvml.cuda_driver_version,
        gpus=nvml.gpus,
    )


def _burnable(facts: NodeFacts) -> list[Target]:
    from validator.node.burnin.devices import Target

    return [
        Target(
            index=gpu.index,
            uuid=gpu.uuid,
            bus_id=gpu.pci_bus_id if isinstance(gpu.pci_bus_id, str) else None,
            power_limit_w=gpu.power_limit_enforced_w
            if isinstance(gpu.power_limit_enforced_w, float)
            else None,
        )
        for gpu in facts.gpus
        if gpu.status is GpuStatus.OK
    ]


def _not_started(config: BurnConfig, backend: str, why: str) -> BurnResult:
    return BurnResult(
        backend=backend,
        dtype=config.dtype,
        matrix_size=config.matrix_size or 0,
        duration_s=config.duration_s,
        elapsed_s=0.0,
        memory_fraction=config.memory_fraction,
        started_at="",
        sampler="none",
        error=why,
    )


def _live_sampler(facts: NodeFacts, config: BurnConfig) -> Sampler:
    from validator.node.burnin.nvml_sampler import NvmlSampler

    return NvmlSampler([target.index for target in _burnable(facts)], config.sample_interval)


def burn_live(
    facts: NodeFacts, system: System, config: BurnConfig, progress: ProgressSink | None = None
) -> BurnResult:
    """Burn this host's GPUs on a real backend, sampling them through NVML."""
    from validator.node.burnin.backend import BackendUnavailable, select_backend
    from validator.node.burnin.devices import prepare_cuda_environment
    from validator.node.burnin.run import run_burn

    gpus = _burnable(facts)
    if not gpus:
        return _not_started(
            config, config.backend or "auto", "no GPU answered NVML: nothing to burn"
        )
    # Before cudart or torch initialise CUDA: they read the order once.
    environment = prepare_cuda_environment()
    try:
        backend = select_backend(config.backend, config.dtype)
    except BackendUnavailable as exc:
        return _not_started(config, config.backend or "auto", f"no burn backend can run: {exc}")

    def xid_probe() -> Measured[tuple[XidEvent, ...]]:
        return collect.kernel_log_facts(system, None).events

    return run_burn(
        config,
        backend,
        gpus,
        _live_sampler(facts, config),
        xid_probe,
        environment=environment,
        progress=progress,
    )


def burn_simulated(
    facts: NodeFacts,
    scenario: Scenario,
    config: BurnConfig,
    progress: ProgressSink | None = None,
) -> BurnResult:
    """Burn a simulated node: real products on the CPU, the scenario's speed and telemetry."""
    from validator.node.burnin.backend import BackendUnavailable, select_backend
    from validator.node.burnin.run import run_burn
    from validator.node.burnin.simulated import simulated_burn

    gpus = _burnable(facts)
    if not gpus:
        return _not_started(config, "numpy", "no GPU answered NVML: nothing to burn")
    plan = simulated_burn(
        facts,
        scenario.data.get("burn", {}),
        config.sample_interval,
        expected_s=config.duration_s,
        recorded=scenario.telemetry(),
    )
    try:
        backend = select_backend(config.backend, config.dtype, simulated=plan.boards)
    except BackendUnavailable as exc:
        return _not_started(config, config.backend or "numpy", str(exc))
    kernel_log = _ScenarioKernelLog(
        facts.kernel_log.events, parse_xid_events("\n".join(plan.xid_lines), window_hours=None)
    )
    return run_burn(
        config,
        backend,
        gpus,
        plan.sampler,
        kernel_log,
        simulated=True,
        environment=plan.environment,
        progress=progress,
    )


class _ScenarioKernelLog:
    """A scenario's Xids: first read, the log as collected; later reads add the burn's lines."""

    def __init__(
        self, before: Measured[tuple[XidEvent, ...]], during: tuple[XidEvent, ...]
    ) -> None:
        self._before = before
        self._during = during
        self._reads = 0

    def __call__(self) -> Measured[tuple[XidEvent, ...]]:
        self._reads += 1
        if self._reads == 1 or isinstance(self._before, Unavailable):
            return self._before
        return self._before + self._during


def collect_live(
    window_hours: float | None = DEFAULT_XID_WINDOW_HOURS,
    system: System | None = None,
    burn: BurnConfig | None = None,
    progress: ProgressSink | None = None,
) -> NodeFacts:
    """Facts of the machine this process runs on, through NVML and local commands."""
    host = system or LiveSystem()
    facts = collect.collect(host, _reading(None), source="live", window_hours=window_hours)
    if burn is not None:
        facts = dataclasses.replace(facts, burn=burn_live(facts, host, burn, progress))
    return facts


def collect_simulated(
    name_or_path: str,
    window_hours: float | None = DEFAULT_XID_WINDOW_HOURS,
    burn: BurnConfig | None = None,
    progress: ProgressSink | None = None,
) -> NodeFacts:
    """Facts of a simulated node: the real collector over a scenario's fake NVML and host.

    Raises:
        ScenarioError: unknown scenario or a bad scenario file.
    """
    scenario = load_scenario(name_or_path)
    facts = collect.collect(
        scenario.system(),
        _reading(scenario.nvml()),
        source="simulate",
        source_detail=scenario.name,
        window_hours=window_hours,
    )
    if burn is not None:
        facts = dataclasses.replace(facts, burn=burn_simulated(facts, scenario, burn, progress))
    return facts


def collect_capture(
    directory: str | os.PathLike[str], window_hours: float | None = DEFAULT_XID_WINDOW_HOURS
) -> NodeFacts:
    """Facts of a captured support bundle: the real collector over the bundle's System.

    NVML's part comes from the bundle's nvidia-smi query (XML, else text, else
    the banner); everything else is collected as on a live host. Without a
    capture time the window cannot be placed: every Xid counts.

    Raises:
        CaptureError: the directory is missing, holds no capture file, or a
            file is broken beyond reading.
    """
    from validator.node.capture import CaptureSystem

    system = CaptureSystem(directory)
    dated = system.captured_at is not None
    facts = collect.collect(
        system,
        system.reading,
        source="capture",
        source_detail=str(system.directory),
        window_hours=window_hours if dated else None,
    )
    return facts if dated else dataclasses.replace(facts, collected_at="")


def collect_from(
    *,
    simulate: str | None = None,
    capture: str | os.PathLike[str] | None = None,
    window_hours: float | None = DEFAULT_XID_WINDOW_HOURS,
    burn: BurnConfig | None = None,
    progress: ProgressSink | None = None,
) -> NodeFacts:
    """Facts from whichever source was asked for; this host when neither.

    A capture holds no burn-in: ``burn`` is ignored for it, and the judge says
    the burn-in was not run.
    """
    if simulate is not None:
        return collect_simulated(simulate, window_hours, burn, progress)
    if capture is not None:
        return collect_capture(capture, window_hours)
    return collect_live(window_hours, burn=burn, progress=progress)


__all__ = ["collect_capture", "collect_from", "collect_live", "collect_simulated"]
