"""The burn-in machinery on the CPU: workers, windows, fault detection, wedged and failing GPUs."""

from __future__ import annotations

import threading
import time

import pytest

from tests.collecting import collect_simulated
from validator.error_tree import BadInputError
from validator.model import BurnStatus, ErrorCounters, GpuFacts, Unavailable
from validator.node.burnin.backend import (
    BackendUnavailable,
    BatchTiming,
    CheckResult,
    SetupResult,
)
from validator.node.burnin.backend_choice import select_backend
from validator.node.burnin.burn_config import BurnConfig, Injection, parse_duration
from validator.node.burnin.devices import Target
from validator.node.burnin.numpy_backend import NumpyBackend
from validator.node.burnin.run import run_burn
from validator.node.burnin.sampler import NoSampler, SimulatedLoad, SimulatedSampler
from validator.node.sim.simulated_burn import check_burn_section, simulated_burn

GPUS = [Target(i, f"GPU-{i}", f"00000000:{0x19 + i:02X}:00.0") for i in range(4)]


def quick(**kwargs: object) -> BurnConfig:
    settings: dict[str, object] = {"duration_s": 0.6, "matrix_size": 64, "grace_s": 2.0}
    settings.update(kwargs)
    return BurnConfig(**settings)  # type: ignore[arg-type]


def test_every_gpu_completes_with_equal_digests_and_no_errors() -> None:
    result = run_burn(quick(), NumpyBackend(), GPUS, NoSampler())
    assert [g.status for g in result.gpus] == [BurnStatus.COMPLETED] * 4
    assert all(g.iterations > 0 for g in result.gpus)
    assert {g.mismatched_elements + g.nonfinite_elements for g in result.gpus} == {0}
    assert len({g.digest for g in result.gpus}) == 1
    assert all(g.reference_ok is True for g in result.gpus)
    assert all(isinstance(g.tflops, float) and g.tflops > 0 for g in result.gpus)
    assert result.matrix_size == 64
    assert 0.6 <= result.elapsed_s < 3.0


@pytest.mark.parametrize(
    ("kind", "field"), [("flip", "mismatched_elements"), ("nan", "nonfinite_elements")]
)
def test_injected_fault_is_found_on_that_gpu_only(kind: str, field: str) -> None:
    config = quick(inject=Injection(gpu=2, iteration=1, kind=kind))
    result = run_burn(config, NumpyBackend(), GPUS, NoSampler())
    spoiled = {g.index: getattr(g, field) for g in result.gpus}
    assert spoiled[2] == 1
    assert [spoiled[i] for i in (0, 1, 3)] == [0, 0, 0]
    assert result.gpus[2].mismatched_iterations == 1


def test_simulated_speed_is_booked_at_the_scenario_rate() -> None:
    backend = NumpyBackend(simulated_tflops={0: 700.0, 1: 350.0})
    result = run_burn(quick(duration_s=1.0), backend, GPUS[:2], NoSampler())
    assert result.gpus[0].tflops == pytest.approx(700.0)
    assert result.gpus[1].tflops == pytest.approx(350.0)


class _Worker:
    """A stand-in worker: healthy, failing in setup, or wedged in run_batch."""

    def __init__(self, behaviour: str, release: threading.Event) -> None:
        self.behaviour = behaviour
        self.release = release
        self.closed = False

    def setup(self) -> SetupResult:
        if self.behaviour == "setup-error":
            raise RuntimeError("cudaMalloc: out of memory")
        return SetupResult(64, 2, True, 0.0, "abc", True)

    def run_batch(self) -> BatchTiming:
        if self.behaviour == "wedged":
            self.release.wait(30)
        time.sleep(0.01)
        return BatchTiming(products=2, compute_s=0.01)

    def check_batch(self) -> CheckResult:
        return CheckResult(0, 0)

    def inject(self, kind: str) -> None:
        raise AssertionError(kind)

    def close(self) -> None:
        self.closed = True


class _Backend:
    name = "fake"
    dtypes = frozenset({"bf16"})

    def __init__(self, behaviours: dict[int, str]) -> None:
        self.behaviours = behaviours
        self.release = threading.Event()

    def device_count(self) -> int:
        return 4

    def device_bus_ids(self) -> list[str]:
        return [str(gpu.bus_id) for gpu in GPUS]

    def worker(self, device: int, config: BurnConfig) -> _Worker:
        del config
        if self.behaviours.get(device) == "no-worker":
            raise RuntimeError("device busy")
        return _Worker(self.behaviours.get(device, "ok"), self.release)


def test_wedged_failing_and_missing_workers_do_not_hold_up_the_others() -> None:
    backend = _Backend({1: "wedged", 2: "setup-error", 3: "no-worker"})
    started = time.monotonic()
    try:
        result = run_burn(quick(duration_s=0.3, grace_s=0.5), backend, GPUS, NoSampler())
    finally:
        backend.release.set()
    assert time.monotonic() - started < 5
    statuses = {g.index: g.status for g in result.gpus}
    assert statuses == {
        0: BurnStatus.COMPLETED,
        1: BurnStatus.TIMEOUT,
        2: BurnStatus.ERROR,
        3: BurnStatus.NOT_RUN,
    }
    assert "out of memory" in result.gpus[2].detail
    assert "device busy" in result.gpus[3].detail
    assert isinstance(result.gpus[2].tflops, Unavailable)
    assert isinstance(result.gpus[0].tflops, float)


def test_more_gpus_than_the_backend_sees_are_not_run() -> None:
    result = run_burn(quick(), NumpyBackend(devices=2), GPUS, NoSampler())
    assert [g.status for g in result.gpus] == [
        BurnStatus.COMPLETED,
        BurnStatus.COMPLETED,
        BurnStatus.NOT_RUN,
        BurnStatus.NOT_RUN,
    ]


def test_simulated_sampler_ramps_and_reports_counters_after() -> None:
    after = ErrorCounters(ecc_volatile_uncorrected=3)
    sampler = SimulatedSampler(
        {
            0: SimulatedLoad(
                power_limit_w=700.0,
                temp_peak_c=88.0,
                reasons=("hw_thermal_slowdown",),
                counters_after=after,
            )
        },
        {0: ErrorCounters(ecc_volatile_uncorrected=0)},
        interval_s=0.1,
    )
    assert sampler.counters(0).ecc_volatile_uncorrected == 0
    sampler.start()
    time.sleep(0.35)
    trace = sampler.stop()[0]
    assert len(trace) >= 3
    temps = [s.temperature_gpu_c for s in trace]
    assert temps == sorted(temps)
    assert temps[-1] == pytest.approx(88.0, abs=1.0)
    # Shaped like a real run: idle at time zero, jitter around the limit under load.
    assert trace[0].t_s == 0.0
    assert trace[0].utilization_pct == 0
    assert trace[0].sm_clock_mhz == 345
    assert trace[0].clock_event_reasons == ("gpu_idle",)
    loaded = [s for s in trace if s.utilization_pct == 100]
    assert loaded
    assert loaded[0].clock_event_reasons == ("hw_thermal_slowdown",)
    for sample in loaded:
        assert sample.power_w == pytest.approx(0.96 * 700.0, rel=0.025)
    assert sampler.counters(0).ecc_volatile_uncorrected == 3


def test_simulated_burn_plan_follows_facts_and_overrides() -> None:
    facts = collect_simulated("healthy-8x-h100-sxm")
    plan = simulated_burn(
        facts,
        {"tflops": 700, "gpu_overrides": {"4": {"tflops": 500, "temp_peak_c": 88}}},
        interval_s=1.0,
    )
    assert plan.tflops[0] == 700.0
    assert plan.tflops[4] == 500.0
    assert set(plan.tflops) == set(range(8))


def test_burn_section_problems_name_the_key() -> None:
    assert check_burn_section({"tflops": 1}, "x.burn") == []
    assert check_burn_section({"tflop": 1}, "x.burn") == ["x.burn: unknown key 'tflop'"]
    assert check_burn_section({"gpu_overrides": {"2": {"bogus": 1}}}, "b") == [
        "b.gpu_overrides.2: unknown key 'bogus'"
    ]
    assert check_burn_section({"counters_after": {"ecc": 1}}, "b") == [
        "b.counters_after: unknown counter 'ecc'"
    ]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("1.5h", 5400.0), ("0", 0.0), ("250ms", 0.25)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "-3s", "1d"])
def test_parse_duration_refuses_nonsense(text: str) -> None:
    with pytest.raises(BadInputError, match="not a duration"):
        parse_duration(text)


def test_injection_and_config_validation() -> None:
    assert Injection.parse("nan:3:2") == Injection(gpu=3, iteration=2, kind="nan")
    with pytest.raises(BadInputError, match="KIND:GPU:ITERATION"):
        Injection.parse("zap:3:2")
    with pytest.raises(BadInputError, match="dtype"):
        BurnConfig(dtype="int8")
    with pytest.raises(BadInputError, match="memory fraction"):
        BurnConfig(memory_fraction=1.5)


def test_short_burns_get_short_windows() -> None:
    assert BurnConfig(duration_s=300).window == 1.0
    assert BurnConfig(duration_s=2).window == pytest.approx(0.1)
    assert BurnConfig(duration_s=300).warmup == 10.0
    assert BurnConfig(duration_s=3).warmup == pytest.approx(0.3)


def test_auto_selection_never_picks_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from validator.node.burnin import backend_choice as backend

    def unavailable(name: str) -> object:
        raise BackendUnavailable(f"{name} missing")

    monkeypatch.setattr(backend, "_load", unavailable)
    with pytest.raises(BackendUnavailable) as caught:
        select_backend(None, "bf16")
    assert "numpy" not in str(caught.value)
    assert "cublas missing" in str(caught.value)
    assert "torch missing" in str(caught.value)


def test_numpy_backend_refuses_fp8() -> None:
    with pytest.raises(BackendUnavailable, match="fp8"):
        NumpyBackend().worker(0, BurnConfig(dtype="fp8"))


def test_gpu_facts_unused_import_guard() -> None:
    # GpuFacts is the type the simulated plan reads; keep the plan honest about lost GPUs.
    facts = collect_simulated("gpu-fallen-off-bus")
    plan = simulated_burn(facts, {"tflops": 700}, interval_s=1.0)
    lost = [g.index for g in facts.gpus if isinstance(g, GpuFacts) and g.status.value == "lost"]
    assert lost == [6]
    assert 6 not in plan.tflops
