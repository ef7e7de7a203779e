"""The NVML adapter read through the scenario-driven fake NVML (and once through real pynvml)."""

from __future__ import annotations

import ctypes
import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from validator.model import (
    GpuFacts,
    GpuProcess,
    GpuStatus,
    NvLinkErrorCounts,
    NvLinkState,
    NvmlStatus,
    Reason,
    Unavailable,
)
from validator.node.nvml import (
    LIBRARY_NOT_FOUND_DETAIL,
    PYNVML_MISSING_DETAIL,
    cuda_version_text,
    normalise_bus_id,
    query,
    read_nvml,
)
from validator.node.sim.fake_nvml import MIB, FakeNvml, merge_gpu
from validator.node.sim.scenario import builtin_names, load_scenario

# Scenario keys that are not GpuFacts fields.
_NOT_FACTS = {"lost", "pci_device_id"}


def _expected(gpu: dict[str, Any], key: str) -> Any:
    """What the adapter should report for one scenario GPU field."""
    value = gpu[key]
    if value == "not_supported":
        return Reason.NOT_SUPPORTED
    if key == "nvlinks":
        return _expected_links(value)
    if key == "nvlink_errors":
        return _expected_link_errors(value, len(_expected_links(gpu["nvlinks"])))
    converters: dict[str, Callable[[Any], Any]] = {
        "clock_event_reasons": tuple,
        "pci_bus_id": str.upper,
        # NVML gives pids and memory; the names are the host's (/proc/PID/comm), read later.
        "compute_processes": lambda listed: tuple(
            GpuProcess(p["pid"], used_memory_mib=p["used_memory_mib"]) for p in listed
        ),
    }
    if key in converters:
        return converters[key](value)
    if key.endswith(("_c", "_w")) and not isinstance(value, (bool, str)):
        return float(value)
    return value


def _expected_links(value: Any) -> tuple[NvLinkState, ...]:
    """The links a scenario's ``nvlinks`` gives: up or down, each active one at its speed."""
    spec = value if isinstance(value, dict) else {"links": value}
    links = spec["links"]
    states = [True] * links if isinstance(links, int) else links
    speeds = spec.get("speed_gb_s", "not_supported")
    out = []
    for link, up in enumerate(states):
        speed = speeds[link] if isinstance(speeds, list) else speeds
        if not up:
            # a link that is down is not asked its speed
            speed = Unavailable(Reason.NOT_MEASURED, "the link is not active: it has no speed")
        elif speed == "not_supported":
            speed = Unavailable(Reason.NOT_SUPPORTED, "NVLINK_SPEED_MBPS_COMMON")
        else:
            speed = float(speed)
        out.append(NvLinkState(link=link, active=up, speed_gb_s=speed))
    return tuple(out)


def _expected_link_errors(value: Any, links: int) -> tuple[NvLinkErrorCounts, ...]:
    """The counters a scenario's ``nvlink_errors`` gives every link."""
    names = ("crc_flit", "crc_data", "replay", "recovery")
    if isinstance(value, dict):
        counts = {name: value[name] for name in names}
        return tuple(NvLinkErrorCounts(link=link, **counts) for link in range(links))
    by_link = {entry["link"]: entry for entry in value}
    return tuple(
        NvLinkErrorCounts(link=link, **{n: by_link.get(link, {}).get(n, 0) for n in names})
        for link in range(links)
    )


def _scenario_gpus(nvml: dict[str, Any]) -> list[dict[str, Any]]:
    fake = FakeNvml(nvml)
    return [dict(gpu) for gpu in fake._gpus]  # the fake's resolved per-GPU data


@pytest.mark.parametrize("name", builtin_names())
def test_every_scenario_field_reads_back_in_model_units(name: str) -> None:
    scenario = load_scenario(name)
    nvml = scenario.data["nvml"]
    reading = read_nvml(scenario.nvml())
    if nvml.get("init_error"):
        assert reading.status is not NvmlStatus.OK
        assert reading.gpus == ()
        return
    assert reading.status is NvmlStatus.OK
    assert reading.driver_version == nvml["driver_version"]
    assert reading.cuda_driver_version == cuda_version_text(nvml["cuda_driver_version"])
    gpus = _scenario_gpus(nvml)
    assert len(reading.gpus) == len(gpus) == nvml["gpu_count"]
    checked = 0
    for facts, gpu in zip(reading.gpus, gpus):
        if gpu.get("lost") is True:
            assert facts.status is GpuStatus.LOST
            continue
        assert facts.status is GpuStatus.OK, facts.status_detail
        for key in gpu.keys() - _NOT_FACTS:
            got = getattr(facts, key)
            want = _expected(gpu, key)
            if isinstance(want, Reason):
                assert isinstance(got, Unavailable), key
                assert got.reason is want, key
            else:
                assert got == want, (name, facts.index, key)
                assert type(got) is type(want), (name, key)
            checked += 1
    assert checked > 8 * 40


def test_healthy_h100_fills_every_fact_but_the_tlimit_offsets() -> None:
    # The new facts of issue 13 (link speeds and errors, PCIe replays, recovery action) too.
    reading = read_nvml(load_scenario("healthy-8x-h100-sxm").nvml())
    unmeasured = {
        f.name
        for f in dataclasses.fields(GpuFacts)
        if isinstance(getattr(reading.gpus[0], f.name), Unavailable)
        and getattr(reading.gpus[0], f.name).reason is Reason.NOT_MEASURED
    }
    assert unmeasured == {"tlimit_shutdown_c", "tlimit_slowdown_c", "tlimit_max_operating_c"}
    gpu = reading.gpus[0]
    assert gpu.memory_total_mib == 81559
    assert gpu.power_draw_w == 72.4
    assert gpu.power_limit_enforced_w == 700.0
    assert gpu.pci_bus_id == "00000000:19:00.0"
    assert gpu.tlimit_margin_c == 60.0
    assert gpu.temperature_memory_c == 36.0
    assert gpu.compute_mode == "default"
    assert gpu.fabric_state == "completed"
    assert gpu.fabric_status == "success"
    assert len(gpu.nvlinks) == 18  # type: ignore[arg-type]
    assert {link.speed_gb_s for link in gpu.nvlinks} == {26.562}  # type: ignore[union-attr]
    assert gpu.pcie_replay_count == 7
    assert gpu.recovery_action == "none"
    assert len(gpu.nvlink_errors) == 18  # type: ignore[arg-type]
    assert {g.uuid for g in reading.gpus} == {g.uuid for g in reading.gpus if g.uuid}
    assert len({g.uuid for g in reading.gpus}) == 8
    assert len({g.serial for g in reading.gpus}) == 8


def test_conversions_from_nvml_units() -> None:
    fake = FakeNvml(
        {
            "driver_version": "550.90.07",
            "cuda_driver_version": 12020,
            "gpu_count": 1,
            "gpu": {"memory_total_mib": 40960, "memory_used_mib": 7, "power_draw_w": 123.456},
        }
    )
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceGetMemoryInfo(handle).total == 40960 * MIB
    assert fake.nvmlDeviceGetPowerUsage(handle) == 123456
    fake.nvmlShutdown()
    reading = read_nvml(fake)
    assert reading.cuda_driver_version == "12.2"
    assert reading.gpus[0].memory_total_mib == 40960
    assert reading.gpus[0].memory_used_mib == 7
    assert reading.gpus[0].power_draw_w == pytest.approx(123.456)


def test_lost_gpu_is_lost_and_the_others_read_fine() -> None:
    reading = read_nvml(load_scenario("gpu-fallen-off-bus").nvml())
    assert reading.status is NvmlStatus.OK
    lost = reading.gpus[6]
    assert lost.status is GpuStatus.LOST
    assert "GPU is lost" in lost.status_detail
    assert isinstance(lost.memory_total_mib, Unavailable)
    assert lost.memory_total_mib.reason is Reason.GPU_LOST
    others = [g for g in reading.gpus if g.index != 6]
    assert [g.status for g in others] == [GpuStatus.OK] * 7
    assert [g.memory_total_mib for g in others] == [81559] * 7


def test_gpu_lost_mid_read_marks_it_lost_and_stops_asking() -> None:
    data = load_scenario("healthy-8x-h100-sxm").data["nvml"]
    nvml = {**data, "gpu_overrides": {"1": {"memory_total_mib": {"nvml_error": "gpu_is_lost"}}}}
    fake = FakeNvml(nvml)
    reading = read_nvml(fake)
    gpu = reading.gpus[1]
    assert gpu.status is GpuStatus.LOST
    # The PCI info is read before the memory: kept. The UUID comes after: not asked.
    assert gpu.pci_bus_id == read_nvml(FakeNvml(data)).gpus[1].pci_bus_id
    assert isinstance(gpu.pci_bus_id, str)
    assert gpu.uuid == Unavailable(Reason.GPU_LOST, "GPU stopped answering earlier in this read")
    assert isinstance(gpu.power_draw_w, Unavailable)
    assert gpu.power_draw_w.reason is Reason.GPU_LOST
    assert reading.gpus[2].status is GpuStatus.OK
    assert fake.calls.count("nvmlDeviceGetPowerUsage") == 7  # not asked of GPU 1


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ("library_not_found", NvmlStatus.LIBRARY_NOT_FOUND),
        ("driver_not_loaded", NvmlStatus.DRIVER_NOT_LOADED),
        ("lib_rm_version_mismatch", NvmlStatus.DRIVER_MISMATCH),
        ("no_permission", NvmlStatus.NO_PERMISSION),
        ("unknown", NvmlStatus.ERROR),
    ],
)
def test_init_errors_become_statuses(error: str, status: NvmlStatus) -> None:
    fake = FakeNvml({"init_error": error, "gpu_count": 8})
    reading = read_nvml(fake)
    assert reading.status is status
    assert reading.gpus == ()
    # Not measured (NVML never started), and the detail says why.
    assert reading.driver_version == Unavailable(Reason.NOT_MEASURED, reading.detail)
    assert reading.detail
    assert fake.shutdown_calls == 0


def test_builtin_init_failures() -> None:
    mismatch = read_nvml(load_scenario("driver-mismatch").nvml())
    assert mismatch.status is NvmlStatus.DRIVER_MISMATCH
    assert "mismatch" in mismatch.detail
    none = read_nvml(load_scenario("no-gpu-driver").nvml())
    assert none.status is NvmlStatus.LIBRARY_NOT_FOUND
    assert none.detail == LIBRARY_NOT_FOUND_DETAIL


def test_no_devices() -> None:
    fake = FakeNvml({"driver_version": "550.90.07", "cuda_driver_version": 12040, "gpu_count": 0})
    reading = read_nvml(fake)
    assert reading.status is NvmlStatus.NO_DEVICES
    assert reading.driver_version == "550.90.07"
    assert fake.shutdown_calls == 1


def test_shutdown_after_a_good_read() -> None:
    fake = load_scenario("healthy-8x-a100-80gb").nvml()
    read_nvml(fake)
    assert (fake.init_calls, fake.shutdown_calls) == (1, 1)
    assert fake.calls[0] == "nvmlInit"
    assert fake.calls[-1] == "nvmlShutdown"


def _with_override(name: str, index: int, override: dict[str, Any]) -> FakeNvml:
    nvml = dict(load_scenario(name).data["nvml"])
    overrides = dict(nvml.get("gpu_overrides", {}))
    overrides[str(index)] = merge_gpu(overrides.get(str(index), {}), override)
    nvml["gpu_overrides"] = overrides
    return FakeNvml(nvml)


def test_not_supported_field_touches_only_that_field() -> None:
    fake = _with_override("healthy-8x-h100-sxm", 0, {"power_limit_default_w": "not_supported"})
    reading = read_nvml(fake)
    gpu0, gpu1 = reading.gpus[0], reading.gpus[1]
    assert isinstance(gpu0.power_limit_default_w, Unavailable)
    assert gpu0.power_limit_default_w.reason is Reason.NOT_SUPPORTED
    assert gpu0.status is GpuStatus.OK
    assert gpu0.power_limit_enforced_w == 700.0
    assert gpu0.power_limit_min_w == 200.0
    assert gpu1.power_limit_default_w == 700.0


def test_no_permission_and_function_not_found_markers() -> None:
    fake = _with_override(
        "healthy-8x-h100-sxm",
        2,
        {
            "serial": {"nvml_error": "no_permission"},
            "vbios_version": {"nvml_error": "function_not_found"},
            "pcie_gen_max": {"nvml_error": "unknown"},
        },
    )
    gpu = read_nvml(fake).gpus[2]
    assert isinstance(gpu.serial, Unavailable)
    assert gpu.serial.reason is Reason.NO_PERMISSION
    assert isinstance(gpu.vbios_version, Unavailable)
    assert gpu.vbios_version.reason is Reason.NOT_SUPPORTED
    assert isinstance(gpu.pcie_gen_max, Unavailable)
    assert gpu.pcie_gen_max.reason is Reason.ERROR
    assert "Unknown Error" in gpu.pcie_gen_max.detail
    assert gpu.status is GpuStatus.OK


def test_memory_temperature_not_supported_through_field_values() -> None:
    fake = _with_override("healthy-8x-h100-sxm", 0, {"temperature_memory_c": "not_supported"})
    gpu = read_nvml(fake).gpus[0]
    assert isinstance(gpu.temperature_memory_c, Unavailable)
    assert gpu.temperature_memory_c.reason is Reason.NOT_SUPPORTED
    assert gpu.temperature_gpu_c == 27.0


def test_nvlink_list_and_absence() -> None:
    fake = _with_override("healthy-8x-h100-sxm", 0, {"nvlinks": [True, False, True]})
    fake_none = _with_override("healthy-8x-h100-sxm", 0, {"nvlinks": "not_supported"})
    links = read_nvml(fake).gpus[0].nvlinks
    assert [(link.link, link.active) for link in links] == [(0, True), (1, False), (2, True)]  # type: ignore[union-attr]
    # A list of flags gives no speeds: not supported where up, not asked where down.
    assert [getattr(link.speed_gb_s, "reason", None) for link in links] == [  # type: ignore[union-attr]
        Reason.NOT_SUPPORTED,
        Reason.NOT_MEASURED,
        Reason.NOT_SUPPORTED,
    ]
    none = read_nvml(fake_none).gpus[0].nvlinks
    assert isinstance(none, Unavailable)
    assert none.reason is Reason.NOT_SUPPORTED


class _NvmlWritingItsStruct(FakeNvml):
    """NVML filling nvmlGpuFabricInfo_t as the C library does: all 28 bytes of it, the three
    bytes of padding after its one-byte state included (NVML need not clear them)."""

    def nvmlDeviceGetGpuFabricInfo(self, device: object, gpuFabricInfo: object) -> int:
        self._gpu("nvmlDeviceGetGpuFabricInfo", device)
        raw = bytes(16) + (0).to_bytes(4, "little") + (7).to_bytes(4, "little")
        raw += bytes([3, 0xAA, 0xAA, 0xAA])  # NVML_GPU_FABRIC_STATE_COMPLETED, then padding
        ctypes.memmove(gpuFabricInfo, raw, len(raw))
        return self.NVML_SUCCESS


def test_the_fabric_state_is_the_one_byte_nvml_h_declares_not_its_padding() -> None:
    nvml = dict(load_scenario("healthy-8x-h100-sxm").data["nvml"])
    gpu = read_nvml(_NvmlWritingItsStruct(nvml)).gpus[0]
    assert gpu.fabric_state == "completed"  # not unknown_2863311363 (0xAAAAAA03)
    assert gpu.fabric_status == "success"


def test_fabric_states_and_error_status() -> None:
    fake = _with_override(
        "healthy-8x-h100-sxm", 0, {"fabric_state": "in_progress", "fabric_status": "not_found"}
    )
    gpu = read_nvml(fake).gpus[0]
    assert gpu.fabric_state == "in_progress"
    assert gpu.fabric_status == "Not Found"
    a100 = read_nvml(load_scenario("healthy-8x-a100-80gb").nvml()).gpus[0]
    assert isinstance(a100.fabric_state, Unavailable)
    assert a100.fabric_state.reason is Reason.NOT_SUPPORTED


def test_thermal_throttling_reasons_and_clocks() -> None:
    gpu = read_nvml(load_scenario("one-gpu-thermal-throttling").nvml()).gpus[4]
    assert gpu.temperature_gpu_c == 88.0
    assert gpu.sm_clock_mhz == 1200
    assert gpu.sm_clock_max_mhz == 1980
    assert gpu.clock_event_reasons == ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown")


class _OldDriverNvml(FakeNvml):
    """A driver before R535: only the "throttle reasons" name exists."""

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle)
        raise self.NVMLError(self.NVML_ERROR_FUNCTION_NOT_FOUND)


def test_clock_reasons_fall_back_to_throttle_reasons() -> None:
    data = load_scenario("one-gpu-thermal-throttling").data["nvml"]
    fake = _OldDriverNvml(data)
    gpu = read_nvml(fake).gpus[4]
    assert gpu.clock_event_reasons == ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown")
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in fake.calls


class _BrokenPciNvml(FakeNvml):
    """GPU 1 answers PCI info with something that is not a PCI info struct."""

    def nvmlDeviceGetPciInfo(self, handle: object) -> Any:
        info = super().nvmlDeviceGetPciInfo(handle)
        return object() if getattr(handle, "index", None) == 1 else info


def test_one_bad_gpu_does_not_break_the_others() -> None:
    reading = read_nvml(_BrokenPciNvml(load_scenario("healthy-8x-h100-sxm").data["nvml"]))
    assert reading.gpus[1].status is GpuStatus.ERROR
    assert "unexpected NVML answer" in reading.gpus[1].status_detail
    assert [g.status for g in reading.gpus if g.index != 1] == [GpuStatus.OK] * 7


def test_bytes_are_decoded() -> None:
    fake = load_scenario("healthy-8x-h100-sxm").nvml(bytes_strings=True)
    fake.nvmlInit()
    assert fake.nvmlDeviceGetName(fake.nvmlDeviceGetHandleByIndex(0)) == b"NVIDIA H100 80GB HBM3"
    fake.nvmlShutdown()
    reading = read_nvml(fake)
    assert reading.driver_version == "550.90.07"
    assert reading.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert reading.gpus[0].uuid.startswith("GPU-")  # type: ignore[union-attr]


def test_query_maps_errors() -> None:
    fake = load_scenario("healthy-8x-h100-sxm").nvml()
    missing = query(fake, "nvmlDeviceGetNoSuchThing")
    assert isinstance(missing, Unavailable)
    assert missing.reason is Reason.NOT_SUPPORTED
    uninitialised = query(fake, "nvmlDeviceGetCount")
    assert isinstance(uninitialised, Unavailable)
    assert uninitialised.reason is Reason.ERROR
    assert "Uninitialized" in uninitialised.detail
    fake.nvmlInit()
    assert query(fake, "nvmlDeviceGetCount") == 8
    assert query(fake, "nvmlSystemGetDriverVersion") == "550.90.07"


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("00000000:18:00.0", "00000000:18:00.0"),
        ("0000:9b:00.0", "00000000:9B:00.0"),
        ("9b:00.0", "00000000:9B:00.0"),
        ("00000001:c1:1f.3", "00000001:C1:1F.3"),
    ],
)
def test_normalise_bus_id(raw: str, normal: str) -> None:
    assert normalise_bus_id(raw) == normal


def test_cuda_version_text() -> None:
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(11080) == "11.8"
    assert cuda_version_text(13010) == "13.1"


def test_missing_pynvml_is_library_not_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    reading = read_nvml()
    assert reading.status is NvmlStatus.LIBRARY_NOT_FOUND
    assert reading.detail == PYNVML_MISSING_DETAIL


def test_real_pynvml_without_a_driver_does_not_raise() -> None:
    if Path("/dev/nvidiactl").exists():
        pytest.skip("an NVIDIA driver is present; this test is for machines without one")
    reading = read_nvml()
    assert reading.status in (NvmlStatus.LIBRARY_NOT_FOUND, NvmlStatus.DRIVER_NOT_LOADED)
    assert reading.gpus == ()
    if reading.status is NvmlStatus.LIBRARY_NOT_FOUND:
        assert reading.detail == LIBRARY_NOT_FOUND_DETAIL
