"""The live NVML sampler, driven by the fake NVML of a scenario."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from validator.model import Reason, Unavailable
from validator.node.burnin.nvml_sampler import NvmlSampler
from validator.node.sim.scenario import load_scenario


def session_for(scenario: str):
    fake = load_scenario(scenario).nvml()

    @contextlib.contextmanager
    def session() -> Iterator[object]:
        fake.nvmlInit()
        try:
            yield fake
        finally:
            fake.nvmlShutdown()

    return session, fake


def test_samples_every_gpu_each_interval_and_reads_counters() -> None:
    session, fake = session_for("row-remap-pending")
    sampler = NvmlSampler([0, 2], interval_s=0.05, session=session)
    before = sampler.counters(2)
    sampler.start()
    time.sleep(0.3)
    traces = sampler.stop()
    after = sampler.counters(2)
    sampler.close()
    assert set(traces) == {0, 2}
    assert len(traces[0]) >= 3
    first = traces[0][0]
    assert isinstance(first.power_w, float)
    assert first.power_w > 0
    assert isinstance(first.temperature_gpu_c, float)
    assert isinstance(first.sm_clock_mhz, int)
    assert isinstance(first.clock_event_reasons, tuple)
    times = [s.t_s for s in traces[0]]
    assert times == sorted(times)
    assert before.remap_pending is True
    assert after.remap_pending is True
    assert fake.shutdown_calls == 1


def test_lost_gpu_samples_say_so() -> None:
    session, _ = session_for("gpu-fallen-off-bus")
    sampler = NvmlSampler([6], interval_s=0.05, session=session)
    sampler.start()
    time.sleep(0.1)
    trace = sampler.stop()[6]
    sampler.close()
    assert trace
    assert isinstance(trace[0].power_w, Unavailable)
    assert trace[0].power_w.reason is Reason.GPU_LOST


def test_no_nvml_means_empty_traces_and_unmeasured_counters() -> None:
    @contextlib.contextmanager
    def broken() -> Iterator[object]:
        raise RuntimeError("libnvidia-ml.so.1 not found")
        yield  # pragma: no cover

    sampler = NvmlSampler([0, 1], interval_s=0.05, session=broken)
    sampler.start()
    assert sampler.stop() == {0: (), 1: ()}
    counters = sampler.counters(0)
    assert isinstance(counters.ecc_volatile_corrected, Unavailable)
    assert "libnvidia-ml" in counters.ecc_volatile_corrected.detail
    sampler.close()


@pytest.mark.parametrize(
    ("kind", "field"), [("flip", "mismatched_elements"), ("nan", "nonfinite_elements")]
)
def test_injected_fault_fails_that_gpu_only_end_to_end(
    capsys: pytest.CaptureFixture[str], kind: str, field: str
) -> None:
    import json

    from validator.cli.main import main

    code = main(
        [
            "certify",
            "--simulate",
            "healthy-8x-h100-sxm",
            "--burn",
            "1s",
            "--burn-inject",
            f"{kind}:3:1",
            "--json",
        ]
    )
    document = json.loads(capsys.readouterr().out)
    node = document["nodes"][0]
    assert code == 1
    assert node["verdict"] == "NOT_CERTIFIED"
    failed = {(f["check"], f["gpu_index"]) for f in node["findings"] if f["severity"] == "FAIL"}
    assert failed == {("burn.correctness", 3)}
    counts = {g["index"]: g[field] for g in node["facts"]["burn"]["gpus"]}
    assert counts[3] == 1
    assert all(counts[i] == 0 for i in counts if i != 3)
