"""The three places facts come from: this host, a capture, a scenario."""

from __future__ import annotations

import os
from typing import Any

from validator.model import NodeFacts
from validator.node import collect
from validator.node.capture import collect_capture
from validator.node.nvml import read_nvml
from validator.node.scenario import load_scenario
from validator.node.system import LiveSystem, System


def _reading(lib: Any | None) -> collect.DriverReading:  # noqa: ANN401 - pynvml or a fake
    nvml = read_nvml(lib)
    return collect.DriverReading(
        status=nvml.status,
        detail=nvml.detail,
        driver_version=nvml.driver_version,
        cuda_driver_version=nvml.cuda_driver_version,
        gpus=nvml.gpus,
    )


def collect_live(window_hours: float | None = 24.0, system: System | None = None) -> NodeFacts:
    """Facts of the machine this process runs on, through NVML and local commands."""
    return collect.collect(
        system or LiveSystem(), _reading(None), source="live", window_hours=window_hours
    )


def collect_simulated(name_or_path: str, window_hours: float | None = 24.0) -> NodeFacts:
    """Facts of a simulated node: the real collector over a scenario's fake NVML and host.

    Raises:
        ScenarioError: unknown scenario or a bad scenario file.
    """
    scenario = load_scenario(name_or_path)
    return collect.collect(
        scenario.system(),
        _reading(scenario.nvml()),
        source="simulate",
        source_detail=scenario.name,
        window_hours=window_hours,
    )


def collect_from(
    *,
    simulate: str | None = None,
    capture: str | os.PathLike[str] | None = None,
    window_hours: float | None = 24.0,
) -> NodeFacts:
    """Facts from whichever source was asked for; this host when neither."""
    if simulate is not None:
        return collect_simulated(simulate, window_hours)
    if capture is not None:
        return collect_capture(capture, window_hours)
    return collect_live(window_hours)
