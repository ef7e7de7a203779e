"""Verdicts that hold on real hardware: the defects a realistic simulation exposes.

Each test here fails on the burn-in as it was before the load rule, the GPU
identity, the fp8 fixes and the deadline over the reads after the burn.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import threading
import time
import types
import weakref
from pathlib import Path
from typing import Any

import pytest

from tests.collecting import collect_simulated
from validator.judge import judge_node
from validator.judge.policy import Policy
from validator.model import (
    BurnStatus,
    GpuBurn,
    NodeResult,
    Reason,
    Severity,
    TelemetrySample,
    Unavailable,
    Verdict,
)
from validator.node.burnin import backend_choice as backend_module
from validator.node.burnin import torch_backend
from validator.node.burnin.backend import BackendUnavailable, BatchTiming
from validator.node.burnin.backend_choice import select_backend
from validator.node.burnin.burn_config import BurnConfig
from validator.node.burnin.devices import (
    CudaEnvironment,
    SimulatedCuda,
    SimulatedDevice,
    Target,
    match_devices,
    prepare_cuda_environment,
)
from validator.node.burnin.numpy_backend import NumpyBackend, SimulatedBoard
from validator.node.burnin.run import run_burn
from validator.node.burnin.sampler import NoSampler
from validator.node.sim.scenario import builtin_names
from validator.trace import percentile, under_load

FIXTURES = Path(__file__).parent.parent / "fixtures" / "telemetry"
BUS = [f"00000000:{bus:02X}:00.0" for bus in (0x19, 0x3B, 0x4C, 0x5D, 0x9B, 0xBB, 0xCB, 0xDB)]
FAIL, UNKNOWN, PASS = Severity.FAIL, Severity.UNKNOWN, Severity.PASS


def judged(name: str, duration_s: float = 2.0, **config: Any) -> NodeResult:
    # As certify collects under the default policy: the interconnect where NVLink joins the GPUs.
    facts = collect_simulated(
        name, burn=BurnConfig(duration_s=duration_s, **config), interconnect="auto"
    )
    return judge_node(facts, Policy())


def failing(result: NodeResult) -> set[tuple[str, int | None, str]]:
    return {
        (f.check, f.gpu_index, f.severity.value)
        for f in result.findings
        if f.required and f.severity in (FAIL, UNKNOWN)
    }


def scenario_file(tmp_path: Path, name: str, burn: dict[str, Any], base: str) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"extends": base, "burn": burn}))
    return str(path)


# --- the load rule ---------------------------------------------------------------------------


def sample(t: float, util: int, clock: int, power: float = 690.0) -> TelemetrySample:
    return TelemetrySample(
        t_s=t,
        power_w=power,
        temperature_gpu_c=60.0,
        sm_clock_mhz=clock,
        utilization_pct=util,
        clock_event_reasons=("gpu_idle",) if util == 0 else ("sw_power_cap",),
    )


def test_under_load_keeps_only_the_window_busy_samples() -> None:
    trace = (
        sample(0.0, 0, 345, 70.0),  # the sampler's first, idle sample
        sample(1.0, 100, 1500),  # during warm-up: outside the window
        sample(2.0, 100, 1830),
        sample(3.0, 40, 1980),  # a host-side pause: an idle gap
        sample(4.0, 100, 1815),
        sample(5.0, 100, 1845),
        sample(6.0, 0, 345, 80.0),  # the tail after the last batch
    )
    gpu = GpuBurn(index=0, status=BurnStatus.COMPLETED, samples=trace, load_start_s=1.5,
                  load_end_s=5.5)  # fmt: skip
    assert [s.t_s for s in under_load(gpu)] == [2.0, 4.0, 5.0]
    assert under_load(dataclasses.replace(gpu, load_start_s=Unavailable(Reason.NOT_MEASURED))) == ()


def test_a_burns_load_samples_are_filtered_once_while_it_lives() -> None:
    trace = tuple(sample(float(t), 100, 1830) for t in range(10))
    gpu = GpuBurn(index=0, status=BurnStatus.COMPLETED, samples=trace, load_start_s=2.0,
                  load_end_s=7.0)  # fmt: skip
    first = under_load(gpu)
    assert under_load(gpu) is first  # the checks and the reports share one filtering
    # An equal copy is another object: filtered on its own, to the same samples.
    twin = dataclasses.replace(gpu)
    assert under_load(twin) == first
    assert under_load(twin) is not first
    narrower = dataclasses.replace(gpu, load_end_s=4.0)
    assert [s.t_s for s in under_load(narrower)] == [2.0, 3.0, 4.0]
    del gpu, twin, narrower
    gc.collect()
    # Whatever takes a dead burn's place (its id too) is filtered on its own samples.
    for start in (0.0, 5.0, 8.0):
        fresh = GpuBurn(index=0, status=BurnStatus.COMPLETED, samples=trace, load_start_s=start,
                        load_end_s=9.0)  # fmt: skip
        assert [s.t_s for s in under_load(fresh)] == [float(t) for t in range(int(start), 10)]
        del fresh


def test_a_low_percentile_is_not_the_minimum() -> None:
    values = [1830.0] * 39 + [900.0]  # one sample while the power controller settled
    assert percentile(values, 5.0) == 1830.0
    assert percentile(values, 0.0) == 900.0
    assert percentile([], 5.0) is None
    assert percentile([1.0, 3.0], 50.0) == 2.0


@pytest.mark.parametrize("name", ["healthy-8x-h100-sxm", "healthy-8x-a100-80gb"])
def test_healthy_built_ins_burn_on_a_realistic_trace_and_certify(name: str) -> None:
    result = judged(name)
    assert result.verdict is Verdict.CERTIFIED, failing(result)
    burn = result.facts.burn
    assert burn is not None
    for gpu in burn.gpus:
        first = gpu.samples[0]
        assert first.t_s == 0.0
        assert first.utilization_pct == 0
        loaded = under_load(gpu)
        assert len(loaded) >= 10
        assert len({s.sm_clock_mhz for s in loaded}) > 1  # clocks jitter at the power limit
        assert len({s.power_w for s in loaded}) > 1
        assert gpu.samples[-1].utilization_pct == 0  # the idle tail


def test_the_h100_built_in_replays_a_recorded_gemm_at_the_power_cap() -> None:
    result = judged("healthy-8x-h100-sxm")
    burn = result.facts.burn
    assert burn is not None
    powers = {s.power_w for g in burn.gpus for s in under_load(g)}
    # lines 82-105 of the recorded H800 log: 691-703 W at the 700 W limit
    assert powers <= {p for p in powers if 530.0 <= float(str(p)) <= 702.81}
    assert max(float(str(p)) for p in powers) == 702.81


FAULTS = {
    # GPUDirect RDMA readiness (issue 34).
    "acs-enabled": {("gpudirect.acs", None, "FAIL")},
    "gpu-nic-across-socket": {("gpudirect.nic_affinity", gpu, "FAIL") for gpu in (4, 5, 6, 7)},
    "peermem-missing": {("gpudirect.peermem", None, "FAIL")},
    "cudnn-missing": {("versions.cudnn", None, "FAIL")},
    "ib-cable-polling": {("network.ports", None, "FAIL"), ("network.port_state", None, "FAIL")},
    "ib-port-200g": {("network.ports", None, "FAIL"), ("network.rate", None, "FAIL")},
    "ib-port-down": {("network.ports", None, "FAIL"), ("network.port_state", None, "FAIL")},
    "gpu-fallen-off-bus": {
        ("errors.kernel_faults", None, "FAIL"),
        ("errors.xid", None, "FAIL"),
        ("inventory.gpu_status", 6, "FAIL"),
    },
    "gpu-needs-reset": {("state.recovery_action", 5, "FAIL")},
    # The CDI spec predates GPU 7 (generated while it was off the bus): the spec's fault only.
    "cdi-spec-stale": {("container.cdi", 7, "FAIL")},
    "mixed-hbm-40gb-in-80gb-node": {
        ("inventory.model", None, "FAIL"),
        ("memory.capacity", 5, "FAIL"),
        ("interconnect.hbm", 5, "FAIL"),
    },
    "one-gpu-power-capped": {
        ("burn.speed", 3, "FAIL"),
        ("burn.speed_relative", 3, "FAIL"),
        ("power.limit", 3, "FAIL"),
    },
    "one-gpu-thermal-throttling": {
        (check, 4, "FAIL")
        for check in (
            "burn.clocks",
            "burn.speed",
            "burn.speed_relative",
            "burn.thermal",
            "burn.throttle",
            "thermal.throttle",
        )
    },
    "nvlink-crc-errors-growing": {("nvlink.errors", 4, "FAIL")},
    "nvswitch-sxid-fatal": {("errors.sxid", None, "FAIL")},
    "nvme-smart-failing": {("host.nvme_smart", None, "FAIL")},
    "pcie-riser-replays": {
        ("pcie.replays", 2, "FAIL"),
        ("pcie.width", 2, "FAIL"),
        ("interconnect.h2d", 2, "FAIL"),
        ("interconnect.d2h", 2, "FAIL"),
    },
    "pcie-riser-x8-h2d-half": {
        ("interconnect.d2h", 1, "FAIL"),
        ("interconnect.h2d", 1, "FAIL"),
        ("pcie.width", 1, "FAIL"),
    },
    "nvlink-down-slow-peers": {
        ("interconnect.all_reduce", None, "FAIL"),
        ("interconnect.p2p", 6, "FAIL"),
        ("nvlink.links", 6, "FAIL"),
    },
    "nvswitch-degraded-all-reduce-low": {("interconnect.all_reduce", None, "FAIL")},
    "hbm-slow-one-gpu": {("interconnect.hbm", 3, "FAIL")},
    "rm-init-adapter-failed": {
        ("errors.kernel_faults", None, "FAIL"),
        ("inventory.gpu_count", None, "FAIL"),
    },
    "row-remap-pending": {
        ("errors.ecc_uncorrected_volatile", 2, "FAIL"),
        ("errors.row_remap", 2, "FAIL"),
        ("errors.xid", 2, "FAIL"),
    },
}
# Built-ins whose fault shows only when the policy asks for it, with that policy.
POLICY_FAULTS = {
    "dcgm-memtest-failure": (
        Policy(dcgm_level=3),
        {("dcgm.memory", 3, "FAIL"), ("dcgm.memtest", 3, "FAIL")},
    ),
}
# What the operator is told to do about each fault of the issue-13 built-ins.
FAULT_ACTIONS = {
    "ib-cable-polling": {"network.port_state": "reseat_or_replace_cable_or_riser"},
    "ib-port-200g": {"network.rate": "reseat_or_replace_cable_or_riser"},
    "dcgm-memtest-failure": {"dcgm.memory": "drain_and_rma", "dcgm.memtest": "drain_and_rma"},
    "gpu-fallen-off-bus": {"errors.kernel_faults": "reboot", "errors.xid": "reboot"},
    "gpu-needs-reset": {"state.recovery_action": "reset_gpu"},
    "cdi-spec-stale": {"container.cdi": "fix_software_stack"},  # regenerate the spec
    "nvlink-crc-errors-growing": {"nvlink.errors": "drain_and_rma"},  # SXM: no cable to reseat
    "nvswitch-sxid-fatal": {"errors.sxid": "reset_gpu"},
    "nvme-smart-failing": {"host.nvme_smart": "drain_and_rma"},
    "pcie-riser-replays": {
        "pcie.replays": "reseat_or_replace_cable_or_riser",
        "pcie.width": "reseat_or_replace_cable_or_riser",
    },
    "rm-init-adapter-failed": {"errors.kernel_faults": "reboot"},
    "acs-enabled": {"gpudirect.acs": "fix_bios_setting"},
    "gpu-nic-across-socket": {"gpudirect.nic_affinity": "reseat_or_replace_cable_or_riser"},
    "peermem-missing": {"gpudirect.peermem": "fix_software_stack"},
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_built_ins_fail_for_their_fault_only(name: str) -> None:
    assert failing(judged(name)) == FAULTS[name]


@pytest.mark.parametrize("name", sorted(POLICY_FAULTS))
def test_policy_fault_built_ins_fail_for_their_fault_only(name: str) -> None:
    policy, expected = POLICY_FAULTS[name]
    facts = collect_simulated(name, burn=BurnConfig(duration_s=2.0), dcgm_level=policy.dcgm_level)
    assert failing(judge_node(facts, policy)) == expected
    # without the policy asking, the same node certifies: DCGM is not run
    assert failing(judged(name)) == set()


@pytest.mark.parametrize("name", sorted(FAULT_ACTIONS))
def test_each_fault_says_what_to_do(name: str) -> None:
    policy = POLICY_FAULTS[name][0] if name in POLICY_FAULTS else Policy()
    facts = collect_simulated(name, burn=BurnConfig(duration_s=2.0), dcgm_level=policy.dcgm_level)
    result = judge_node(facts, policy)
    told = {
        f.check: f.action.value
        for f in result.findings
        if f.severity is FAIL and f.check in FAULT_ACTIONS[name]
    }
    assert told == FAULT_ACTIONS[name]


def test_every_built_in_with_gpus_is_covered() -> None:
    covered = {*FAULTS, *POLICY_FAULTS, "healthy-8x-h100-sxm", "healthy-8x-a100-80gb"}
    # driver-mismatch, no-gpu-driver, nvcc-off-pin and busy-gpu-8x-h100-sxm (not burned:
    # tests/cli/test_cli_busy_gpus.py) are judged by tests of their own
    own = {"driver-mismatch", "no-gpu-driver", "nvcc-off-pin", "busy-gpu-8x-h100-sxm"}
    assert set(builtin_names()) - covered == own


# --- replayed real telemetry -----------------------------------------------------------------


def test_a_real_healthy_log_replayed_certifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from validator.cli.main import main

    log = FIXTURES / "h800-sxm-gemm-idle-load-at-power-cap-idle.csv"
    path = scenario_file(tmp_path, "h800", {"telemetry_csv": str(log)}, "healthy-8x-h100-sxm")
    argv = ["certify", "--simulate", path, "--burn", "20s", "--json", "--db", str(tmp_path / "h")]
    code = main(argv)
    node = json.loads(capsys.readouterr().out)["nodes"][0]
    assert node["verdict"] == "CERTIFIED", [f for f in node["findings"] if f["severity"] != "PASS"]
    assert code == 0
    # the recorded load: 691-703 W at the cap, sw_power_cap active
    power = [f for f in node["findings"] if f["check"] == "burn.power"]
    assert all("of its 700 W limit" in f["message"] for f in power)


def test_a_real_thermal_slowdown_log_fails_the_throttle_check(tmp_path: Path) -> None:
    path = tmp_path / "thermal.json"
    path.write_text(
        json.dumps(
            {
                "extends": "healthy-8x-a100-80gb",
                "burn": {"telemetry_csv": "a100-80gb-8x-gpt-training-sw-thermal-slowdown.csv"},
            }
        )
    )
    (tmp_path / "a100-80gb-8x-gpt-training-sw-thermal-slowdown.csv").write_bytes(
        (FIXTURES / "a100-80gb-8x-gpt-training-sw-thermal-slowdown.csv").read_bytes()
    )
    result = judged(str(path), duration_s=20.0)
    throttled = [f for f in result.findings if f.check == "burn.throttle"]
    assert {f.gpu_index for f in throttled if f.severity is FAIL} == set(range(8))
    assert all("sw_thermal_slowdown" in f.message for f in throttled)


def test_a_bad_telemetry_log_is_bad_input(tmp_path: Path) -> None:
    from validator.error_tree import ScenarioError

    (tmp_path / "bad.csv").write_text("this is not a log\n")
    path = scenario_file(tmp_path, "bad", {"telemetry_csv": "bad.csv"}, "healthy-8x-h100-sxm")
    with pytest.raises(ScenarioError, match=r"burn\.telemetry_csv \S*/bad\.csv: no header"):
        collect_simulated(path)
    missing = scenario_file(tmp_path, "gone", {"telemetry_csv": "gone.csv"}, "healthy-8x-h100-sxm")
    with pytest.raises(ScenarioError, match="cannot be read"):
        collect_simulated(missing)


# --- one GPU identity across NVML and CUDA -----------------------------------------------------


def targets(count: int = 4) -> list[Target]:
    return [Target(i, f"GPU-{i}", BUS[i]) for i in range(count)]


def test_cuda_devices_are_matched_to_nvml_gpus_by_bus_id() -> None:
    # As CUDA numbers them fastest first: the boards in another order than NVML's.
    matching = match_devices(targets(), [BUS[2], BUS[0], "0000:5d:00.0", BUS[1]],
                             CudaEnvironment(None, None))  # fmt: skip
    assert matching.devices == {0: 1, 1: 3, 2: 0, 3: 2}
    assert matching.method == "pci_bus_id"


def test_a_gpu_cuda_cannot_see_is_named_never_shifted() -> None:
    matching = match_devices(targets(), [BUS[0], BUS[1], BUS[3]], CudaEnvironment(None, None))
    assert matching.devices == {0: 0, 1: 1, 3: 2}
    assert matching.unseen == {2: f"CUDA cannot see GPU 2 ({BUS[2]}), though NVML lists it"}
    hidden = match_devices(targets(), [BUS[0]], CudaEnvironment("0", None))
    assert hidden.unseen[1] == f"GPU 1 ({BUS[1]}) is hidden from CUDA by CUDA_VISIBLE_DEVICES=0"


def test_without_bus_ids_only_an_unambiguous_node_is_matched_in_pci_order() -> None:
    assert match_devices(targets(), [""] * 4, CudaEnvironment(None, None)).method == "pci_order"
    refused = match_devices(targets(), [""] * 3, CudaEnvironment(None, None))
    assert refused.devices == {}
    assert set(refused.unseen) == {0, 1, 2, 3}
    restricted = match_devices(targets(), [""] * 4, CudaEnvironment("0,1,2,3", None))
    assert restricted.devices == {}


def test_the_burn_sets_pci_order_and_remembers_what_the_environment_had() -> None:
    env = {"CUDA_DEVICE_ORDER": "FASTEST_FIRST", "CUDA_VISIBLE_DEVICES": "1,0"}
    before = prepare_cuda_environment(env)
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["CUDA_VISIBLE_DEVICES"] == "1,0"
    assert before == CudaEnvironment(visible_devices="1,0", device_order="FASTEST_FIRST")


def test_each_gpu_is_burned_on_its_own_board() -> None:
    # CUDA device 0 is NVML's GPU 2, the slow one: its figures must land on GPU 2.
    boards = [SimulatedBoard(BUS[2], 300.0), SimulatedBoard(BUS[0], 700.0),
              SimulatedBoard(BUS[3], 700.0), SimulatedBoard(BUS[1], 700.0)]  # fmt: skip
    config = BurnConfig(duration_s=0.6, matrix_size=64, grace_s=2.0)
    result = run_burn(config, NumpyBackend(boards=boards), targets(), NoSampler(), simulated=True)
    by_index = {gpu.index: gpu for gpu in result.gpus}
    assert by_index[2].tflops == pytest.approx(300.0)
    assert by_index[2].cuda_device == 0
    assert [by_index[i].tflops for i in (0, 1, 3)] == [pytest.approx(700.0)] * 3
    assert by_index[0].pci_bus_id == BUS[0]
    assert result.device_mapping == "pci_bus_id"


def test_the_simulated_runtime_enumerates_as_cuda_does() -> None:
    devices = [SimulatedDevice(i, BUS[i], f"GPU-{i}aaaa") for i in range(4)]
    runtime = SimulatedCuda(devices, fastest_first=[3, 1, 2, 0], hidden=[2])
    assert [d.nvml_index for d in runtime.enumerate(None)] == [3, 1, 0]
    assert [d.nvml_index for d in runtime.enumerate("PCI_BUS_ID")] == [0, 1, 3]
    runtime.visible_devices = "2,GPU-1,7,0"  # stops at the first entry it cannot resolve
    assert [d.nvml_index for d in runtime.enumerate("PCI_BUS_ID")] == [3, 1]


def test_a_gpu_cuda_cannot_initialise_fails_by_name(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, "hidden", {"cuda": {"hidden": [6]}}, "healthy-8x-h100-sxm")
    result = judged(path)
    status = [f for f in result.findings if f.check == "burn.status"]
    assert [(f.gpu_index, f.severity) for f in status] == [(6, FAIL)]
    facts_bus = result.facts.gpus[6].pci_bus_id
    assert f"CUDA cannot see GPU 6 ({facts_bus})" in status[0].message
    assert result.verdict is Verdict.NOT_CERTIFIED
    others = {
        f.gpu_index for f in result.findings if f.check == "burn.speed" and f.severity is PASS
    }
    assert others == {0, 1, 2, 3, 4, 5, 7}


def test_cuda_visible_devices_is_honoured_and_said(tmp_path: Path) -> None:
    path = scenario_file(
        tmp_path, "visible", {"cuda": {"visible_devices": "0,1,2,3"}}, "healthy-8x-h100-sxm"
    )
    result = judged(path)
    burn = result.facts.burn
    assert burn is not None
    assert burn.cuda_visible_devices == "0,1,2,3"
    unseen = {g.index for g in burn.gpus if g.status is BurnStatus.UNSEEN}
    assert unseen == {4, 5, 6, 7}
    status = {(f.gpu_index, f.severity) for f in result.findings if f.check == "burn.status"}
    assert status == {(i, UNKNOWN) for i in range(4, 8)}
    run = next(f for f in result.findings if f.check == "burn.run")
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in run.message
    # Half the node unburned: not certified, and nothing failed.
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert not [f for f in result.findings if f.severity is FAIL]


# --- fp8 ------------------------------------------------------------------------------------


class _Named:
    def __init__(self, name: str, dtypes: frozenset[str]) -> None:
        self.name = name
        self.dtypes = dtypes


def test_fp8_picks_a_backend_that_can_burn_it(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = {"cublas": _Named("cublas", frozenset({"bf16"})), "torch": _Named("torch",
              frozenset({"bf16", "fp8"}))}  # fmt: skip
    monkeypatch.setattr(backend_module, "_load", lambda name: loaded[name])
    assert select_backend(None, "fp8").name == "torch"
    assert select_backend(None, "bf16").name == "cublas"


def test_fp8_without_a_capable_backend_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def load(name: str) -> _Named:
        if name == "torch":
            raise BackendUnavailable("torch is not installed")
        return _Named(name, frozenset({"bf16", "fp16"}))

    monkeypatch.setattr(backend_module, "_load", load)
    with pytest.raises(BackendUnavailable) as caught:
        select_backend(None, "fp8")
    assert str(caught.value) == (
        "cublas cannot burn fp8 (it runs bf16, fp16); torch: torch is not installed"
    )


class _Tensor:
    """A result buffer: its memory returns to the pool when the last reference goes."""


class _Pool:
    """Device memory that holds ``capacity`` result buffers, as the caching allocator would."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.live = 0
        self.peak = 0

    def allocate(self) -> object:
        if self.live >= self.capacity:
            raise RuntimeError("CUDA out of memory")
        self.live += 1
        self.peak = max(self.peak, self.live)
        tensor = _Tensor()
        weakref.finalize(tensor, self._free)
        return tensor

    def _free(self) -> None:
        self.live -= 1


def _fp8_torch(pool: _Pool) -> Any:
    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            del enable_timing

        def record(self) -> None: ...

        def synchronize(self) -> None: ...

        def elapsed_time(self, other: object) -> float:
            del other
            return 1.0

    cuda = types.SimpleNamespace(set_device=lambda device: None, Event=Event)
    return types.SimpleNamespace(
        cuda=cuda,
        bfloat16="bf16",
        _scaled_mm=lambda *args, **kwargs: pool.allocate(),
    )


def test_fp8_batches_fit_where_the_buffers_fill_the_memory() -> None:
    count = 6  # buffers sized to fill the memory, less one product in flight
    pool = _Pool(capacity=count + 1)
    worker = torch_backend.TorchWorker(_fp8_torch(pool), 0, BurnConfig(dtype="fp8"))
    worker._results = [pool.allocate() for _ in range(count)]
    for _ in range(3):
        timing = worker.run_batch()
        assert timing == BatchTiming(products=count, compute_s=0.001)
    assert pool.peak <= count + 1
    assert pool.live == count


# --- a wedged GPU never hangs the burn --------------------------------------------------------


def test_a_wedged_worker_and_a_blocking_counter_read_end_as_findings(tmp_path: Path) -> None:
    burn = {"gpu_overrides": {"3": {"wedged": True}, "5": {"counters_hang": True}}}
    path = scenario_file(tmp_path, "wedged", burn, "healthy-8x-h100-sxm")
    duration, grace = 2.0, 2.0
    done: list[NodeResult] = []
    started = time.monotonic()
    thread = threading.Thread(
        target=lambda: done.append(judged(path, duration_s=duration, grace_s=grace)), daemon=True
    )
    thread.start()
    thread.join(timeout=duration + grace + 20)
    assert done, "the burn hung past its deadline"
    elapsed = time.monotonic() - started
    assert elapsed < duration + grace + 5, elapsed
    result = done[0]
    wedged = [f for f in result.findings if f.check == "burn.status"]
    assert [(f.gpu_index, f.severity) for f in wedged] == [(3, FAIL)]
    assert "wedged" in wedged[0].message
    counters = {f.gpu_index: f for f in result.findings if f.check == "burn.errors"}
    assert counters[5].severity is FAIL
    assert "did not return within the burn's deadline" in counters[5].message
    assert counters[0].severity is PASS


def test_duty_is_device_time_over_the_load_window() -> None:
    class HalfBusy:
        """A worker whose device computes for half of each batch's wall time."""

        def __init__(self) -> None:
            self.inner = NumpyBackend(devices=1).worker(0, BurnConfig(matrix_size=16))

        def setup(self) -> Any:
            return self.inner.setup()

        def run_batch(self) -> BatchTiming:
            time.sleep(0.02)
            return BatchTiming(products=1, compute_s=0.01)

        def check_batch(self) -> Any:
            return self.inner.check_batch()

        def inject(self, kind: str) -> None:
            del kind

        def close(self) -> None:
            pass

    class Backend:
        name = "half"
        dtypes = frozenset({"bf16"})

        def device_count(self) -> int:
            return 1

        def device_bus_ids(self) -> list[str]:
            return [BUS[0]]

        def worker(self, device: int, config: BurnConfig) -> HalfBusy:
            del device, config
            return HalfBusy()

    result = run_burn(BurnConfig(duration_s=1.0), Backend(), targets(1), NoSampler())
    duty = result.gpus[0].duty
    assert isinstance(duty, float)
    # about a half: under a loaded machine's scheduler a 20 ms sleep runs long, never short
    assert 0.2 < duty < 0.55, duty
    simulated = run_burn(
        BurnConfig(duration_s=0.5, matrix_size=16), NumpyBackend(devices=1), targets(1),
        NoSampler(), simulated=True,
    )  # fmt: skip
    assert isinstance(simulated.gpus[0].duty, Unavailable)


# --- found in review: Ctrl-C, a hung sampler, matching, report dir, exit codes ----------------


class _Hanging:
    """A backend whose GPU 0 never returns from its first batch."""

    name = "hang"
    dtypes = frozenset({"bf16"})

    def __init__(self) -> None:
        self.release = threading.Event()

    def device_count(self) -> int:
        return 2

    def device_bus_ids(self) -> list[str]:
        return [BUS[0], BUS[1]]

    def worker(self, device: int, config: BurnConfig) -> Any:
        inner = NumpyBackend(devices=2).worker(device, BurnConfig(matrix_size=16))
        if device == 0:
            release = self.release

            def wedged() -> BatchTiming:
                release.wait(30)
                return BatchTiming(products=1, compute_s=0.01)

            inner.run_batch = wedged  # type: ignore[method-assign]
        return inner


def test_ctrl_c_never_calls_a_wedged_gpu_completed() -> None:
    backend = _Hanging()
    calls: list[float] = []

    def sink(progress: Any) -> None:
        calls.append(progress.elapsed_s)
        if len(calls) == 2:
            raise KeyboardInterrupt

    try:
        result = run_burn(
            BurnConfig(duration_s=30.0, grace_s=2.0, matrix_size=16),
            backend,
            targets(2),
            NoSampler(),
            progress=sink,
        )
    finally:
        backend.release.set()
    statuses = {gpu.index: gpu.status for gpu in result.gpus}
    assert result.interrupted is True
    assert statuses == {0: BurnStatus.INTERRUPTED, 1: BurnStatus.COMPLETED}
    finding = judge_node(
        dataclasses.replace(collect_simulated("healthy-8x-h100-sxm"), burn=result), Policy()
    )
    status = [f for f in finding.findings if f.check == "burn.status" and f.gpu_index == 0]
    assert [f.severity for f in status] == [UNKNOWN]  # cut short, not wedged


class _StuckSampler(NoSampler):
    """NVML stuck on a wedged GPU: stop() never returns; the counters answer at once."""

    def stop(self) -> dict[int, tuple[TelemetrySample, ...]]:
        threading.Event().wait()
        return {}

    def counters(self, index: int) -> Any:
        from validator.model import ErrorCounters

        time.sleep(0.05)  # some forty NVML calls
        return ErrorCounters(ecc_volatile_uncorrected=0, ecc_volatile_corrected=0)


def test_a_stuck_sampler_does_not_make_every_gpu_look_wedged() -> None:
    config = BurnConfig(duration_s=0.5, grace_s=1.0, matrix_size=16)
    result = run_burn(config, NumpyBackend(devices=2), targets(2), _StuckSampler())
    for gpu in result.gpus:
        assert gpu.counters_after.ecc_volatile_uncorrected == 0, gpu.counters_after


def test_a_gpu_that_cannot_be_matched_safely_is_not_run_not_failed() -> None:
    class Anonymous(NumpyBackend):
        def device_bus_ids(self) -> list[str]:
            return [""] * 3  # an old torch: no PCI ids, and a count that does not fit

    backend = Anonymous(boards=[SimulatedBoard("") for _ in range(3)])
    result = run_burn(BurnConfig(duration_s=0.3, matrix_size=16), backend, targets(4), NoSampler())
    assert {gpu.status for gpu in result.gpus} == {BurnStatus.NOT_RUN}


def test_an_unwritable_report_dir_is_refused_before_the_burn(tmp_path: Path) -> None:
    from validator.error_tree import BadInputError
    from validator.service.certify_service import CertifyRequest, run_certify
    from validator.store import Store

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    request = CertifyRequest(
        simulate="healthy-8x-h100-sxm",
        burn=BurnConfig(duration_s=600.0),
        report_dir=str(blocker / "reports"),
    )
    started = time.monotonic()
    with Store.open(tmp_path / "h.db") as store, pytest.raises(BadInputError, match="report-dir"):
        run_certify(request, store)
    assert time.monotonic() - started < 30  # refused before the 10-minute burn


@pytest.mark.parametrize(
    ("first", "second", "combined"),
    [(0, 0, 0), (0, 1, 1), (1, 3, 1), (0, 3, 1), (3, 3, 3), (130, 0, 130), (1, 130, 130)],
)
def test_provision_and_certify_exit_codes_combine_by_the_rule(
    first: int, second: int, combined: int
) -> None:
    from validator.cli.provision import worse_exit
    from validator.error_tree import ExitCode

    assert worse_exit(ExitCode(first), ExitCode(second)) == ExitCode(combined)
