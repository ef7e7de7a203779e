"""The three places facts come from: this host, a capture, a scenario (and their burn-ins)."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

from validator.model import (
    DEFAULT_XID_WINDOW_HOURS,
    BurnResult,
    DcgmDiag,
    GpuStatus,
    Interconnect,
    Measured,
    NodeFacts,
    Reason,
    Unavailable,
    XidEvent,
)
from validator.node import collect, stop_request
from validator.node.nvml import read_nvml
from validator.node.parsers.kernel_log import parse_xid_events
from validator.node.sim.scenario import Scenario, load_scenario
from validator.node.system import LiveSystem, System

if TYPE_CHECKING:
    # The burn-in and the capture System load only when used: the agent starts
    # on every host of a fleet run, and most runs need neither.
    from validator.node.bandwidth.bandwidth_config import InterconnectConfig
    from validator.node.burnin.backend import (
        Backend,
        BatchTiming,
        CheckResult,
        GpuWorker,
        SetupResult,
    )
    from validator.node.burnin.burn_config import BurnConfig
    from validator.node.burnin.burn_progress import ProgressSink
    from validator.node.burnin.devices import Target
    from validator.node.burnin.sampler import Sampler
    from validator.node.capture.capture_replay import CaptureSystem

# A mode that measures nothing: the agent run by hand, and drift unless asked.
INTERCONNECT_OFF = "off"
# What a collector measures unless told: what certify measures under the default policy
# (the agent's own --interconnect defaults to off; the controller always says).
INTERCONNECT_AUTO = "auto"


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
    """Burn this host's GPUs on a real backend, sampling them through NVML.

    Raises:
        BadInputError: a ``--burn-inject`` on a GPU the node lacks, or a
            ``--burn-matrix-size`` that cannot fit (checked before anything runs).
    """
    from validator.node.burnin.backend import BackendUnavailable
    from validator.node.burnin.backend_choice import select_backend
    from validator.node.burnin.devices import prepare_cuda_environment
    from validator.node.burnin.run import run_burn

    gpus = _burnable(facts)
    if not gpus:
        return _not_started(
            config, config.backend or "auto", "no GPU answered NVML: nothing to burn"
        )
    on_cpu = config.backend == "numpy"
    _check_request(facts, config, gpu_memory=not on_cpu, host_memory=on_cpu)
    # Before cudart or torch initialise CUDA: they read the order once.
    environment = prepare_cuda_environment()
    try:
        backend = select_backend(config.backend, config.dtype)
    except BackendUnavailable as exc:
        return _not_started(config, config.backend or "auto", f"no burn backend can run: {exc}")

    def xid_probe() -> Measured[tuple[XidEvent, ...]]:
        return collect.kernel_log_facts(system, None).events

    watched = _InjectionWatch(backend)
    result = run_burn(
        config,
        watched if config.inject else backend,
        gpus,
        _live_sampler(facts, config),
        xid_probe,
        environment=environment,
        progress=progress,
    )
    return _injection_missed(result, config, watched)


def burn_simulated(
    facts: NodeFacts,
    scenario: Scenario,
    config: BurnConfig,
    progress: ProgressSink | None = None,
) -> BurnResult:
    """Burn a simulated node: real products on the CPU, the scenario's speed and telemetry.

    Raises:
        BadInputError: as :func:`burn_live`; the matrices must fit both the simulated
            GPUs' memory and this host's, where the products really run.
    """
    from validator.node.burnin.backend import BackendUnavailable
    from validator.node.burnin.backend_choice import select_backend
    from validator.node.burnin.run import run_burn
    from validator.node.sim.simulated_burn import simulated_burn

    gpus = _burnable(facts)
    if not gpus:
        return _not_started(config, "numpy", "no GPU answered NVML: nothing to burn")
    _check_request(facts, config, gpu_memory=True, host_memory=True)
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
    watched = _InjectionWatch(backend)
    result = run_burn(
        config,
        watched if config.inject else backend,
        gpus,
        plan.sampler,
        kernel_log,
        simulated=True,
        environment=plan.environment,
        progress=progress,
    )
    return _injection_missed(result, config, watched)


def _check_request(
    facts: NodeFacts, config: BurnConfig, *, gpu_memory: bool, host_memory: bool
) -> None:
    """Refuse, before the burn, what it could never honour on this node.

    ``gpu_memory``: the matrices must fit each GPU's memory; ``host_memory``: one set
    per GPU must fit this host's memory (the numpy stand-in multiplies on the CPU).
    """
    from validator.node.burnin.burn_config import check_injection_target, check_matrix_fits

    check_injection_target(config.inject, [gpu.index for gpu in facts.gpus])
    if gpu_memory:
        for gpu in facts.gpus:
            total = gpu.memory_total_mib
            if gpu.status is GpuStatus.OK and isinstance(total, int):
                check_matrix_fits(config, total * 2**20, f"GPU {gpu.index}'s {total} MiB")
    host = _host_memory_bytes() if host_memory else None
    if host is not None:
        from validator.node.burnin.numpy_backend import CPU_RESULT_BUFFERS

        check_matrix_fits(
            config,
            host,
            f"this host's {host / 2**30:.0f} GiB, where the products run on the CPU",
            matrices=3 + CPU_RESULT_BUFFERS,  # A, B, the first product and the results
            element_bytes=4,  # the stand-in multiplies in float32 whatever the dtype
            sharers=len(_burnable(facts)),
        )


def _host_memory_bytes() -> float | None:
    """This host's physical memory; None where the system does not say."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


class _InjectionWatch:
    """A backend whose workers note whether the fault injection was applied.

    It also counts each device's batches, to say how far a burn that missed it got.
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.name = backend.name
        self.dtypes = backend.dtypes
        self.applied = False
        self.batches: dict[int, int] = {}  # backend device -> batches run

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - the backend's own attributes
        return getattr(self._backend, name)  # stand_in, and whatever a backend adds

    def device_count(self) -> int:
        """As the backend says."""
        return self._backend.device_count()

    def device_bus_ids(self) -> list[str]:
        """As the backend says."""
        return self._backend.device_bus_ids()

    def worker(self, device: int, config: BurnConfig) -> GpuWorker:
        """The backend's worker, watched."""
        return _WatchedWorker(self._backend.worker(device, config), self, device)


class _WatchedWorker:
    """One worker of an :class:`_InjectionWatch`: counts batches, notes the injection."""

    def __init__(self, worker: GpuWorker, watch: _InjectionWatch, device: int) -> None:
        self._worker = worker
        self._watch = watch
        self._device = device

    def setup(self) -> SetupResult:
        """As the worker does."""
        return self._worker.setup()

    def run_batch(self) -> BatchTiming:
        """As the worker does, counted."""
        timing = self._worker.run_batch()
        self._watch.batches[self._device] = self._watch.batches.get(self._device, 0) + 1
        return timing

    def check_batch(self) -> CheckResult:
        """As the worker does."""
        return self._worker.check_batch()

    def inject(self, kind: str) -> None:
        """As the worker does, noted."""
        self._worker.inject(kind)
        self._watch.applied = True

    def close(self) -> None:
        """As the worker does."""
        self._worker.close()


def _injection_missed(result: BurnResult, config: BurnConfig, watch: _InjectionWatch) -> BurnResult:
    """The burn, marked not to be trusted when a requested injection was never applied.

    The hook exists to prove that a spoiled result is found; a burn that ended before
    the requested batch (or never burned that GPU) proves nothing, so the burn is
    judged UNKNOWN (its ``error``) rather than passed.
    """
    injection = config.inject
    if injection is None or watch.applied or result.error or result.interrupted:
        return result
    burned = next((gpu for gpu in result.gpus if gpu.index == injection.gpu), None)
    device = burned.cuda_device if burned is not None else None
    ran = watch.batches.get(device, 0) if isinstance(device, int) else 0
    why = (
        f"GPU {injection.gpu} ran {ran} batch{'es' if ran != 1 else ''} in the "
        f"{config.duration_s:g} s burn"
        if ran
        else f"GPU {injection.gpu} ran no batch"
    )
    return dataclasses.replace(
        result,
        error=(
            f"--burn-inject {injection} was never applied ({why}), so the burn proved "
            "nothing about detection; give an iteration the burn reaches, or a longer --burn"
        ),
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


def with_dcgm(
    facts: NodeFacts, system: System, level: int, timeout_s: float | None = None
) -> NodeFacts:
    """The facts with DCGM's diagnostic of ``level`` run on ``system`` (none for level 0).

    It runs after the burn-in: DCGM's stress tests and the burn would share the GPUs.
    """
    if level <= 0:
        return facts
    stopped = stopped_reason(facts)
    if stopped is not None:
        from validator.node.dcgm_run import not_run

        return dataclasses.replace(facts, dcgm=not_run(level, Reason.NOT_MEASURED, stopped))
    from validator.node.dcgm_run import run_dcgm

    return dataclasses.replace(facts, dcgm=run_dcgm(system, level, timeout_s))


def stopped_reason(facts: NodeFacts) -> str | None:
    """Why nothing more is started after the burn-in: it was stopped; None when it was not.

    A stopped run has seconds left (Slurm's KillWait is 30 s) for its facts to be
    printed, judged and recorded: the interconnect and DCGM would take minutes.
    """
    if stop_request.requested():
        return stop_request.reason()
    if facts.burn is not None and facts.burn.interrupted:
        return "not started: the run was interrupted during the burn-in"
    return None


def with_interconnect(
    facts: NodeFacts,
    system: System,
    scenario: Scenario | None,
    mode: str,
    config: InterconnectConfig,
    until: float | None,
) -> NodeFacts:
    """The facts with the interconnect measured, where ``mode`` wants it for this node.

    It runs after the burn-in (the copies and the all-reduce would share the GPUs with
    it) and before DCGM. Not wanted (:func:`validator.node.bandwidth.wanted`): the
    facts as they are, ``interconnect`` None.

    Args:
        facts: the node's facts so far (its GPUs say what to measure).
        system: the host (unused for now: the live measurement reaches the GPUs through
            CUDA and NCCL, not through the System's commands).
        scenario: the simulated node's scenario; None for this host.
        mode: auto, on or off (validator.node.bandwidth.bandwidth_config.MODES).
        config: sizes, repeats and the idle gate.
        until: on ``time.monotonic()``'s clock, when the live measurement must stop
            starting new copies; None for no limit (a scenario's figures take no time).

    Raises:
        BadInputError: a mode that is not one of MODES.
    """
    from validator.node.bandwidth import wanted

    del system  # the same seam as with_dcgm's, so the collectors call both alike
    if not wanted(facts, mode):
        return facts
    stopped = stopped_reason(facts)
    if stopped is not None:
        simulated = scenario is not None
        return dataclasses.replace(
            facts,
            interconnect=Interconnect(
                source="simulate" if simulated else "cuda", simulated=simulated, error=stopped
            ),
        )
    if scenario is not None:
        from validator.node.sim.simulated_bandwidth import simulated_interconnect

        measured = simulated_interconnect(facts, scenario, config)
    else:
        from validator.node.bandwidth.live import measure_live

        measured = measure_live(facts, config, until)
    return dataclasses.replace(facts, interconnect=measured)


def _check_interconnect_mode(mode: str) -> None:
    """Refuse a bad mode before anything runs, not after the burn-in."""
    from validator.node.bandwidth import check_mode

    check_mode(mode)


def interconnect_config() -> InterconnectConfig:
    """The measurement's one configuration (validator.node.bandwidth.bandwidth_config)."""
    from validator.node.bandwidth.bandwidth_config import InterconnectConfig

    return InterconnectConfig()


def collect_live(
    window_hours: float | None = DEFAULT_XID_WINDOW_HOURS,
    system: System | None = None,
    burn: BurnConfig | None = None,
    progress: ProgressSink | None = None,
    dcgm_level: int = 0,
    dcgm_timeout_s: float | None = None,
    interconnect: str = INTERCONNECT_AUTO,
) -> NodeFacts:
    """Facts of the machine this process runs on, through NVML and local commands.

    After the burn-in, the interconnect is measured as ``interconnect`` (auto, on,
    off) says; then, with ``dcgm_level`` above 0, ``dcgmi diag`` runs.
    """
    _check_interconnect_mode(interconnect)
    host = system or LiveSystem()
    facts = collect.collect(host, _reading(None), source="live", window_hours=window_hours)
    if burn is not None:
        facts = dataclasses.replace(facts, burn=burn_live(facts, host, burn, progress))
    facts = with_interconnect(facts, host, None, interconnect, interconnect_config(), None)
    return with_dcgm(facts, host, dcgm_level, dcgm_timeout_s)


def collect_simulated(
    name_or_path: str,
    window_hours: float | None = DEFAULT_XID_WINDOW_HOURS,
    burn: BurnConfig | None = None,
    progress: ProgressSink | None = None,
    dcgm_level: int = 0,
    dcgm_timeout_s: float | None = None,
    interconnect: str = INTERCONNECT_AUTO,
) -> NodeFacts:
    """Facts of a simulated node: the real collector over a scenario's fake NVML and host.

    The interconnect (``interconnect`` auto or on) has the scenario's figures, after
    the burn-in. DCGM's diagnostic (``dcgm_level`` above 0) is the scenario's
    ``commands`` entry for ``dcgmi diag -r LEVEL -j``; a scenario without one has no dcgmi.

    Raises:
        ScenarioError: unknown scenario or a bad scenario file.
    """
    _check_interconnect_mode(interconnect)
    scenario = load_scenario(name_or_path)
    system = scenario.system()
    facts = collect.collect(
        system,
        _reading(scenario.nvml()),
        source="simulate",
        source_detail=scenario.name,
        window_hours=window_hours,
    )
    if burn is not None:
        facts = dataclasses.replace(facts, burn=burn_simulated(facts, scenario, burn, progress))
    facts = with_interconnect(facts, system, scenario, interconnect, interconnect_config(), None)
    return with_dcgm(facts, system, dcgm_level, dcgm_timeout_s)


def collect_capture(
    directory: str | os.PathLike[str],
    window_hours: float | None = DEFAULT_XID_WINDOW_HOURS,
    dcgm_level: int = 0,
) -> NodeFacts:
    """Facts of a captured support bundle: the real collector over the bundle's System.

    NVML's part comes from the bundle's nvidia-smi query (XML, else text, else
    the banner); everything else is collected as on a live host. Where the
    bundle's files disagree (driver, GPU count, names, bus ids) or a query is
    cut short, the facts carry the conflicts for the judge. Without a
    capture time the window cannot be placed: every Xid counts.

    A bundle's DCGM output (``dcgmi-diag.json``, else ``dcgmi-diag.txt``) is read
    whatever ``dcgm_level`` asks (a recorded FAIL is a FAIL); without one, a
    ``dcgm_level`` above 0 makes the missing output a fact the judge reports. Its
    interconnect measurement (nvbandwidth's output, nccl-tests' all_reduce_perf) is
    read whenever it is there, as DCGM's is: nothing is measured on a bundle.

    Raises:
        CaptureError: the directory is missing, holds no capture file, or a
            file is broken beyond reading.
    """
    from validator.node.capture.capture_replay import CaptureSystem

    system = CaptureSystem(directory)
    dated = system.captured_at is not None
    facts = collect.collect(
        system,
        system.reading,
        source="capture",
        source_detail=str(system.directory),
        window_hours=window_hours if dated else None,
    )
    facts = dataclasses.replace(
        facts, source_conflicts=system.conflicts(), dcgm=_captured_dcgm(system, dcgm_level)
    )
    facts = dataclasses.replace(facts, interconnect=_recorded_interconnect(system, facts))
    return facts if dated else dataclasses.replace(facts, collected_at="")


def _recorded_interconnect(system: CaptureSystem, facts: NodeFacts) -> Interconnect | None:
    """The bundle's interconnect figures; None when it holds no such output."""
    from validator.node.capture.recorded_bandwidth import recorded_interconnect

    return recorded_interconnect(system, facts)


def _captured_dcgm(system: CaptureSystem, dcgm_level: int) -> DcgmDiag | None:
    """The bundle's DCGM diagnostic; None when it has none and no level is asked for."""
    from validator.node.dcgm_run import from_output, parse_output

    recorded = system.dcgm_output()
    if recorded is None:
        if dcgm_level <= 0:
            return None
        return DcgmDiag(
            level=None,
            source="capture",
            results=Unavailable(
                Reason.NOT_MEASURED,
                f"the bundle has no DCGM output (dcgmi-diag.json or dcgmi-diag.txt): capture "
                f"one with `gpuready capture --dcgm-level {dcgm_level} DIR` on the host, or "
                f"save `dcgmi diag -r {dcgm_level} -j` output there as dcgmi-diag.json",
            ),
        )
    name, text = recorded
    # The file passed its parser when the bundle was opened.
    return from_output(parse_output(text, name), system.dcgm_level, name)


def collect_from(
    *,
    simulate: str | None = None,
    capture: str | os.PathLike[str] | None = None,
    window_hours: float | None = DEFAULT_XID_WINDOW_HOURS,
    burn: BurnConfig | None = None,
    progress: ProgressSink | None = None,
    dcgm_level: int = 0,
    dcgm_timeout_s: float | None = None,
    interconnect: str = INTERCONNECT_AUTO,
) -> NodeFacts:
    """Facts from whichever source was asked for; this host when neither.

    A capture holds no burn-in: ``burn`` is ignored for it, and the judge says
    the burn-in was not run. Nor does it run DCGM or measure the interconnect
    (``interconnect`` is ignored): their recorded outputs are read.
    """
    if simulate is not None:
        return collect_simulated(
            simulate, window_hours, burn, progress, dcgm_level, dcgm_timeout_s, interconnect
        )
    if capture is not None:
        return collect_capture(capture, window_hours, dcgm_level)
    return collect_live(
        window_hours,
        burn=burn,
        progress=progress,
        dcgm_level=dcgm_level,
        dcgm_timeout_s=dcgm_timeout_s,
        interconnect=interconnect,
    )


__all__ = [
    "INTERCONNECT_AUTO",
    "INTERCONNECT_OFF",
    "collect_capture",
    "collect_from",
    "collect_live",
    "collect_simulated",
    "interconnect_config",
    "with_dcgm",
    "with_interconnect",
]
