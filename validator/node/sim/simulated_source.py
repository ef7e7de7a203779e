"""A scenario as a source of facts: the real collector over its fake NVML and host.

Its burn-in multiplies real matrices on the CPU at the scenario's speed and telemetry
(validator.node.sim.simulated_burn); its interconnect is the scenario's figures
(validator.node.sim.simulated_bandwidth); its DCGM output is the scenario's
``commands`` entry for ``dcgmi diag -r LEVEL -j`` (a scenario without one has no dcgmi).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from validator.model import BurnResult, Interconnect, Measured, NodeFacts, Unavailable, XidEvent
from validator.node.burnin.burn_request import (
    InjectionWatch,
    burnable,
    check_burn_request,
    injection_missed,
    not_started,
)
from validator.node.nvml import read_nvml
from validator.node.parsers.kernel_log import parse_xid_events
from validator.node.sim.scenario import Scenario, load_scenario
from validator.node.system_facts import system_facts

if TYPE_CHECKING:
    from validator.node.bandwidth.bandwidth_config import InterconnectConfig
    from validator.node.burnin.burn_config import BurnConfig
    from validator.node.burnin.burn_progress import ProgressSink
    from validator.node.collect import CollectRequest
    from validator.node.system import System


class SimulatedSource:
    """A scenario by built-in name or file; read when its facts are first asked for.

    Raises (from its methods):
        ScenarioError: an unknown scenario or a bad scenario file.
    """

    simulated = True
    measures = True

    def __init__(self, name_or_path: str) -> None:
        self._name = name_or_path
        self._scenario: Scenario | None = None
        self._system: System | None = None

    @property
    def scenario(self) -> Scenario:
        """The scenario, loaded once."""
        if self._scenario is None:
            self._scenario = load_scenario(self._name)
        return self._scenario

    def system(self) -> System:
        """The scenario's host, made once: every step reads the same one."""
        if self._system is None:
            self._system = self.scenario.system()
        return self._system

    def first_facts(self, request: CollectRequest) -> NodeFacts:
        """The real collector's facts over the scenario's fake NVML and host."""
        scenario = self.scenario
        return system_facts(
            self.system(),
            read_nvml(scenario.nvml()),
            source="simulate",
            source_detail=scenario.name,
            window_hours=request.window_hours,
        )

    def burn(
        self, facts: NodeFacts, config: BurnConfig, progress: ProgressSink | None
    ) -> BurnResult:
        """Real products on the CPU, the scenario's speed and telemetry.

        Raises:
            BadInputError: as a live burn's; the matrices must fit both the simulated
                GPUs' memory and this host's, where the products really run.
        """
        from validator.node.burnin.backend import BackendUnavailable
        from validator.node.burnin.backend_choice import select_backend
        from validator.node.burnin.run import run_burn
        from validator.node.sim.simulated_burn import simulated_burn

        gpus = burnable(facts)
        if not gpus:
            return not_started(config, "numpy", "no GPU answered NVML: nothing to burn")
        check_burn_request(facts, config, gpu_memory=True, host_memory=True)
        scenario = self.scenario
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
            return not_started(config, config.backend or "numpy", str(exc))
        during = parse_xid_events("\n".join(plan.xid_lines), window_hours=None)
        watched = InjectionWatch(backend)
        result = run_burn(
            config,
            watched if config.inject else backend,
            gpus,
            plan.sampler,
            _ScenarioKernelLog(facts.kernel_log.events, during),
            simulated=True,
            environment=plan.environment,
            progress=progress,
        )
        return injection_missed(result, config, watched)

    def measure_interconnect(
        self, facts: NodeFacts, config: InterconnectConfig, until: float | None
    ) -> Interconnect:
        """The scenario's figures (they take no time: ``until`` does not bind)."""
        from validator.node.sim.simulated_bandwidth import simulated_interconnect

        return simulated_interconnect(facts, self.scenario, config)


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
