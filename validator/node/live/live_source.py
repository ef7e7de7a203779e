"""This host as a source of facts: NVML through pynvml, commands and files through LiveSystem.

Its burn-in runs on a real backend (cuBLAS through ctypes, torch, or numpy on the CPU),
sampled through NVML; its interconnect is measured through CUDA and NCCL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from validator.model import BurnResult, Interconnect, Measured, NodeFacts, XidEvent
from validator.node import system_facts
from validator.node.burnin.burn_request import (
    InjectionWatch,
    burnable,
    check_burn_request,
    injection_missed,
    not_started,
)
from validator.node.nvml import read_nvml
from validator.node.system import LiveSystem, System

if TYPE_CHECKING:
    from validator.node.bandwidth.bandwidth_config import InterconnectConfig
    from validator.node.burnin.burn_config import BurnConfig
    from validator.node.burnin.burn_progress import ProgressSink
    from validator.node.collect import CollectRequest


class LiveSource:
    """The machine this process runs on (or ``system``, a stand-in for its commands)."""

    simulated = False
    measures = True

    def __init__(self, system: System | None = None) -> None:
        self._system = system or LiveSystem()

    def system(self) -> System:
        """This host's commands and files."""
        return self._system

    def first_facts(self, request: CollectRequest) -> NodeFacts:
        """NVML's reading and what this host's commands and files show."""
        return system_facts.system_facts(
            self._system, read_nvml(None), source="live", window_hours=request.window_hours
        )

    def burn(
        self, facts: NodeFacts, config: BurnConfig, progress: ProgressSink | None
    ) -> BurnResult:
        """Burn this host's GPUs on a real backend, sampling them through NVML.

        Raises:
            BadInputError: a ``--burn-inject`` on a GPU the node lacks, or a
                ``--burn-matrix-size`` that cannot fit (checked before anything runs).
        """
        from validator.node.burnin.backend import BackendUnavailable
        from validator.node.burnin.backend_choice import select_backend
        from validator.node.burnin.devices import prepare_cuda_environment
        from validator.node.burnin.nvml_sampler import NvmlSampler
        from validator.node.burnin.run import run_burn

        gpus = burnable(facts)
        if not gpus:
            why = "no GPU answered NVML: nothing to burn"
            return not_started(config, config.backend or "auto", why)
        on_cpu = config.backend == "numpy"
        check_burn_request(facts, config, gpu_memory=not on_cpu, host_memory=on_cpu)
        # Before cudart or torch initialise CUDA: they read the order once.
        environment = prepare_cuda_environment()
        try:
            backend = select_backend(config.backend, config.dtype)
        except BackendUnavailable as exc:
            why = f"no burn backend can run: {exc}"
            return not_started(config, config.backend or "auto", why)

        def xid_probe() -> Measured[tuple[XidEvent, ...]]:
            return system_facts.kernel_log_facts(self._system, None).events

        watched = InjectionWatch(backend)
        sampler = NvmlSampler([gpu.index for gpu in gpus], config.sample_interval)
        result = run_burn(
            config,
            watched if config.inject else backend,
            gpus,
            sampler,
            xid_probe,
            environment=environment,
            progress=progress,
        )
        return injection_missed(result, config, watched)

    def measure_interconnect(
        self, facts: NodeFacts, config: InterconnectConfig, until: float | None
    ) -> Interconnect:
        """Copies, peers and the all-reduce through CUDA and NCCL, stopping at ``until``."""
        from validator.node.bandwidth.live import measure_live

        return measure_live(facts, config, until)
