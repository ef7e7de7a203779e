"""Issue 13 on the node: NVLink speeds and error counters, PCIe replays, the recovery action.

Read through the NVML adapter from the scenario-driven fake NVML, counted before and after
the (simulated and live-path) burn, validated in scenario files, parsed from the real
``nvidia-smi -q`` / ``-q -x`` captures in ../shared/captures (read in place), and held to
the plausibility table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.collecting import collect_simulated
from tests.conftest import captures_root
from validator.error_tree import ScenarioError
from validator.model import (
    RECOVERY_ACTIONS,
    BurnResult,
    ErrorCounters,
    GpuBurn,
    GpuFacts,
    GpuStatus,
    NodeFacts,
    NvLinkErrorCounts,
    NvLinkState,
    Reason,
    Unavailable,
    implausible_reading,
)
from validator.node import nvml
from validator.node.burnin.burn_config import BurnConfig
from validator.node.burnin.nvml_sampler import NvmlSampler
from validator.node.nvml import read_counters, read_nvml
from validator.node.parsers.smi_common import read_recovery_action
from validator.node.parsers.smi_query import parse_smi_query
from validator.node.parsers.smi_xml import parse_smi_xml
from validator.node.physical_ranges import RANGES, plausible_facts, plausible_gpu
from validator.node.sim.fake_nvml import FakeNvml
from validator.node.sim.scenario import load_scenario

HEALTHY = "healthy-8x-h100-sxm"
NEW_SCENARIOS = ("nvlink-crc-errors-growing", "pcie-riser-replays", "gpu-needs-reset")
COUNTERS = ("crc_flit", "crc_data", "replay", "recovery")


def _fake(override: dict[str, Any], index: int = 0, name: str = HEALTHY) -> FakeNvml:
    """The built-in scenario's fake NVML with one GPU's keys overridden (None: removed)."""
    data = dict(load_scenario(name).data["nvml"])
    overrides = dict(data.get("gpu_overrides", {}))
    overrides[str(index)] = {**overrides.get(str(index), {}), **override}
    data["gpu_overrides"] = overrides
    return FakeNvml(data)


def _gpu(override: dict[str, Any], index: int = 0) -> GpuFacts:
    return read_nvml(_fake(override, index)).gpus[index]


def _reason(value: object) -> Reason | None:
    return value.reason if isinstance(value, Unavailable) else None


def _links(gpu: GpuFacts) -> tuple[NvLinkState, ...]:
    assert isinstance(gpu.nvlinks, tuple), gpu.nvlinks
    return gpu.nvlinks


def _errors(counters: GpuFacts | ErrorCounters) -> tuple[NvLinkErrorCounts, ...]:
    assert isinstance(counters.nvlink_errors, tuple), counters.nvlink_errors
    return counters.nvlink_errors


# ---------------------------------------------------------------- the adapter


def test_healthy_h100_reads_link_speeds_zero_errors_replays_and_no_recovery_action() -> None:
    reading = read_nvml(load_scenario(HEALTHY).nvml())
    for gpu in reading.gpus:
        links = _links(gpu)
        assert [link.link for link in links] == list(range(18))
        assert all(link.active and link.speed_gb_s == 26.562 for link in links)
        errors = _errors(gpu)
        assert [entry.link for entry in errors] == list(range(18))
        assert all(getattr(e, name) == 0 for e in errors for name in COUNTERS)
        assert gpu.recovery_action == "none"
    # As a real idle 8x H100 SXM reports them (gls-H100SXMx8-565.57.01, nvidia-smi -q).
    assert [gpu.pcie_replay_count for gpu in reading.gpus] == [7, 0, 0, 0, 0, 4, 15, 0]


def test_the_a100_links_run_at_25_gb_s() -> None:
    gpu = read_nvml(load_scenario("healthy-8x-a100-80gb").nvml()).gpus[0]
    assert [link.speed_gb_s for link in _links(gpu)] == [25.0] * 12


def test_speed_comes_from_nvml_in_mbps() -> None:
    fake = _fake({})
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    (speed,) = fake.nvmlDeviceGetFieldValues(handle, [(fake.NVML_FI_DEV_NVLINK_GET_SPEED, 3)])
    fake.nvmlShutdown()
    assert speed.nvmlReturn == 0
    assert speed.value.uiVal == 26562  # MBps, NVML's unit; the adapter gives 26.562 GB/s


def test_a_degraded_link_and_a_link_down_keep_their_own_speeds() -> None:
    # Shaped on an H200's nvlink -s with links trained at 1.0 and 1.562 GB/s.
    speeds = [26.562] * 18
    speeds[2], speeds[10] = 1.0, 1.562
    states = [True] * 18
    states[5] = False
    links = _links(_gpu({"nvlinks": {"links": states, "speed_gb_s": speeds}}))
    assert links[2].speed_gb_s == 1.0
    assert links[10].speed_gb_s == 1.562
    assert links[5].active is False
    assert _reason(links[5].speed_gb_s) is Reason.NOT_MEASURED  # down: no speed, never 0
    assert links[0].speed_gb_s == 26.562


def test_a_driver_with_only_the_common_speed_gives_it_to_every_active_link() -> None:
    links = _links(_gpu({"nvlinks": {"links": 12, "speed_gb_s": 25, "speed_source": "common"}}))
    assert [link.speed_gb_s for link in links] == [25.0] * 12


class _ScopelessPynvml(FakeNvml):
    """A pynvml from before scoped field ids: a (field, link) id breaks its ctypes setter."""

    def nvmlDeviceGetFieldValues(
        self, handle: object, fieldIds: Sequence[int | tuple[int, int]]
    ) -> list[Any]:
        if any(isinstance(field, tuple) for field in fieldIds):
            raise TypeError("an integer is required (got type tuple)")
        return super().nvmlDeviceGetFieldValues(handle, fieldIds)


def test_a_pynvml_without_scoped_fields_falls_back_to_the_common_speed() -> None:
    data = dict(load_scenario("healthy-8x-a100-80gb").data["nvml"])
    data["gpu"] = {
        **data["gpu"],
        "nvlinks": {"links": 12, "speed_gb_s": 25, "speed_source": "common"},
    }
    gpu = read_nvml(_ScopelessPynvml(data)).gpus[0]
    assert gpu.status is GpuStatus.OK
    assert [link.speed_gb_s for link in _links(gpu)] == [25.0] * 12


def test_no_speed_from_the_driver_is_not_supported_never_zero() -> None:
    links = _links(_gpu({"nvlinks": 18}))
    assert {_reason(link.speed_gb_s) for link in links} == {Reason.NOT_SUPPORTED}


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ({"nvlink_errors": "not_supported"}, Reason.NOT_SUPPORTED),
        ({"nvlink_errors": None}, Reason.NOT_SUPPORTED),  # the driver offers no counter
        ({"nvlinks": "not_supported"}, Reason.NOT_SUPPORTED),  # no NVLink at all
        ({"nvlink_errors": {"nvml_error": "no_permission"}}, Reason.NO_PERMISSION),
    ],
)
def test_nvlink_errors_not_offered_are_a_reason_never_zeros(
    override: dict[str, Any], reason: Reason
) -> None:
    gpu = _gpu(override)
    if reason is Reason.NO_PERMISSION:
        # Each counter says why, so a permission problem is never read as "no errors".
        assert {_reason(getattr(e, n)) for e in _errors(gpu) for n in COUNTERS} == {reason}
    else:
        assert _reason(gpu.nvlink_errors) is reason
    assert gpu.status is GpuStatus.OK


def test_a_counter_the_driver_lacks_stays_not_supported_beside_the_others() -> None:
    gpu = _gpu({"nvlink_errors": {"crc_flit": 3, "replay": 0, "recovery": 0}})
    for entry in _errors(gpu):
        assert entry.crc_flit == 3
        assert _reason(entry.crc_data) is Reason.NOT_SUPPORTED
        assert (entry.replay, entry.recovery) == (0, 0)


def test_the_list_form_names_the_links_with_errors() -> None:
    errors = _errors(_gpu({"nvlink_errors": [{"link": 7, "crc_flit": 4180, "replay": 12}]}))
    assert errors[7] == NvLinkErrorCounts(link=7, crc_flit=4180, crc_data=0, replay=12, recovery=0)
    assert errors[6] == NvLinkErrorCounts(link=6, crc_flit=0, crc_data=0, replay=0, recovery=0)


def test_a_gpu_lost_while_reading_its_link_counters_is_lost() -> None:
    gpu = _gpu({"nvlink_errors": {"nvml_error": "gpu_is_lost"}})
    assert gpu.status is GpuStatus.LOST
    assert _reason(gpu.nvlink_errors) is Reason.GPU_LOST
    assert _reason(gpu.pcie_replay_count) is Reason.GPU_LOST  # asked after: not asked at all


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("not_supported", Reason.NOT_SUPPORTED),
        (None, Reason.NOT_SUPPORTED),
        ({"nvml_error": "no_permission"}, Reason.NO_PERMISSION),
        ({"nvml_error": "unknown"}, Reason.ERROR),
    ],
)
def test_pcie_replays_not_read_say_why(value: object, reason: Reason) -> None:
    assert _reason(_gpu({"pcie_replay_count": value}).pcie_replay_count) is reason


def test_pcie_replays_read_as_counted() -> None:
    assert _gpu({"pcie_replay_count": 412}).pcie_replay_count == 412


@pytest.mark.parametrize("action", RECOVERY_ACTIONS)
def test_every_recovery_action_reads_back_by_name(action: str) -> None:
    assert _gpu({"recovery_action": action}).recovery_action == action


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, Reason.NOT_SUPPORTED),  # a driver before the field
        ({"nvml_error": "invalid_argument"}, Reason.NOT_SUPPORTED),  # it does not know the id
        ({"nvml_error": "gpu_is_lost"}, Reason.GPU_LOST),
        (8, Reason.ERROR),  # a code newer than NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT (7)
    ],
)
def test_a_recovery_action_not_read_is_never_none(value: object, reason: Reason) -> None:
    gpu = _gpu({"recovery_action": value})
    assert _reason(gpu.recovery_action) is reason
    if value == 8:
        assert "recovery action code 8" in str(gpu.recovery_action)


# ---------------------------------------------------------------- the burn's counters


def test_the_live_burn_reads_the_new_counters_before_and_after() -> None:
    # The live sampler's counters (read before and after the burn) come from read_gpu.
    fake = load_scenario("nvlink-crc-errors-growing").nvml()

    @contextlib.contextmanager
    def session() -> Iterator[object]:
        with nvml.nvml_session(fake) as lib:
            yield lib

    sampler = NvmlSampler([4], session=session)
    try:
        counters = sampler.counters(4)
    finally:
        sampler.close()
    assert counters.pcie_replay_count == 0
    assert _errors(counters)[7].crc_flit == 12
    assert _errors(counters)[7].replay == 12
    assert "nvmlDeviceGetNvLinkErrorCounter" in fake.calls
    assert "nvmlDeviceGetPcieReplayCounter" in fake.calls


def test_read_counters_holds_the_replays() -> None:
    lib = load_scenario("pcie-riser-replays").nvml()
    lib.nvmlInit()
    try:
        counters = read_counters(lib, 2)
    finally:
        lib.nvmlShutdown()
    assert counters.pcie_replay_count == 37
    assert len(_errors(counters)) == 18


@pytest.fixture(scope="module")
def burned() -> dict[str, NodeFacts]:
    return {
        name: collect_simulated(name, burn=BurnConfig(duration_s=1.0))
        for name in (*NEW_SCENARIOS, HEALTHY)
    }


def _gpu_burn(facts: NodeFacts, index: int) -> GpuBurn:
    assert isinstance(facts.burn, BurnResult)
    return next(gpu for gpu in facts.burn.gpus if gpu.index == index)


def test_crc_errors_grow_by_thousands_on_one_link_during_the_burn(
    burned: dict[str, NodeFacts],
) -> None:
    facts = burned["nvlink-crc-errors-growing"]
    gpu = _gpu_burn(facts, 4)
    before, after = _errors(gpu.counters_before), _errors(gpu.counters_after)
    assert (before[7].crc_flit, after[7].crc_flit) == (12, 4192)
    assert (before[7].replay, after[7].replay) == (12, 4192)
    assert before[:7] == after[:7]
    assert before[8:] == after[8:]
    for index in (0, 1, 2, 3, 5, 6, 7):
        other = _gpu_burn(facts, index)
        assert other.counters_before == other.counters_after


def test_pcie_replays_grow_by_hundreds_on_the_riser_gpu(burned: dict[str, NodeFacts]) -> None:
    facts = burned["pcie-riser-replays"]
    gpu = _gpu_burn(facts, 2)
    assert (gpu.counters_before.pcie_replay_count, gpu.counters_after.pcie_replay_count) == (
        37,
        449,
    )
    assert facts.gpus[2].pcie_width_current == 8
    assert facts.gpus[2].pcie_width_max == 16


def test_the_gpu_needing_a_reset_says_so_in_nvml_and_the_kernel_log(
    burned: dict[str, NodeFacts],
) -> None:
    facts = burned["gpu-needs-reset"]
    assert [gpu.recovery_action for gpu in facts.gpus] == ["none"] * 5 + ["gpu_reset"] + [
        "none"
    ] * 2
    assert facts.gpus[5].pci_bus_id == "00000000:BB:00.0"
    events = facts.kernel_log.events
    assert isinstance(events, tuple)
    assert [(e.xid, e.pci_bus_id.lower()) for e in events] == [(154, "0000:bb:00")]
    assert "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)" in (
        events[0].message
    )


def test_the_healthy_burn_adds_no_count(burned: dict[str, NodeFacts]) -> None:
    facts = burned[HEALTHY]
    assert isinstance(facts.burn, BurnResult)
    assert len(facts.burn.gpus) == 8
    for gpu in facts.burn.gpus:
        assert gpu.counters_before == gpu.counters_after
        assert isinstance(gpu.counters_after.pcie_replay_count, int)
        assert len(_errors(gpu.counters_after)) == 18


def _scenario(tmp_path: Path, body: dict[str, Any]) -> str:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({"extends": HEALTHY, **body}))
    return str(path)


def test_a_counter_the_gpu_does_not_report_cannot_grow(tmp_path: Path) -> None:
    path = _scenario(
        tmp_path,
        {
            "nvml": {"gpu_overrides": {"1": {"pcie_replay_count": "not_supported"}}},
            "burn": {"counters_growth": {"pcie_replay_count": 5}},
        },
    )
    facts = collect_simulated(path, burn=BurnConfig(duration_s=0.5))
    assert _reason(_gpu_burn(facts, 1).counters_after.pcie_replay_count) is Reason.NOT_SUPPORTED
    assert _gpu_burn(facts, 0).counters_after.pcie_replay_count == 12  # 7 + 5


def test_counters_after_set_values_and_growth_adds_to_them(tmp_path: Path) -> None:
    path = _scenario(
        tmp_path,
        {
            "burn": {
                "gpu_overrides": {
                    "3": {
                        "counters_after": {"nvlink_errors": {"recovery": 2}},
                        "counters_growth": {"nvlink_errors": [{"link": 0, "recovery": 1}]},
                    }
                }
            }
        },
    )
    facts = collect_simulated(path, burn=BurnConfig(duration_s=0.5))
    after = _errors(_gpu_burn(facts, 3).counters_after)
    assert [entry.recovery for entry in after] == [3] + [2] * 17


# ---------------------------------------------------------------- scenario validation

INVALID = [
    (
        {"nvml": {"gpu": {"recovery_action": "reset"}}},
        "'nvml.gpu.recovery_action' must be one of none, gpu_reset, node_reboot, drain_p2p, "
        "drain_and_reset, recover_imex_domain, bus_reset, system_reboot, got 'reset' (str); "
        "fix the scenario",
    ),
    (
        {"nvml": {"gpu_overrides": {"3": {"nvlink_errors": [{"link": 2, "crc": 5}]}}}},
        "'nvml.gpu_overrides.3.nvlink_errors' has unknown key '[0].crc'; valid keys: link, "
        "crc_flit, crc_data, replay, recovery; fix the scenario",
    ),
    (
        {"nvml": {"gpu": {"nvlink_errors": {"crc_flit": -1}}}},
        "'nvml.gpu.nvlink_errors' crc_flit must be a count from 0 to 1e15 or \"not_supported\", "
        "got -1; fix the scenario",
    ),
    (
        {"nvml": {"gpu": {"nvlink_errors": [{"crc_flit": 1}]}}},
        "'nvml.gpu.nvlink_errors' [0].link must be a link number 0-35, got null; fix the scenario",
    ),
    (
        {"nvml": {"gpu": {"nvlink_errors": [{"link": 1}, {"link": 1}]}}},
        "'nvml.gpu.nvlink_errors' [1].link 1 is given twice; give each link once; fix the scenario",
    ),
    (
        {"nvml": {"gpu": {"nvlink_errors": 5}}},
        "'nvml.gpu.nvlink_errors' must be an object of NVLink error counters for every link, or "
        "a list of at most 36 per-link objects with a 'link', got 5 (int); fix the scenario",
    ),
    (
        {"nvml": {"gpu": {"nvlinks": {"links": 18, "speed": 26.5}}}},
        "'nvml.gpu.nvlinks' has unknown key 'speed' (did you mean 'speed_gb_s'?); valid keys: "
        "links, speed_gb_s, speed_source; fix the scenario",
    ),
    (
        {"nvml": {"gpu": {"nvlinks": {"links": 18, "speed_gb_s": [26.5, 1]}}}},
        "'nvml.gpu.nvlinks' speed_gb_s must be GB/s from 0 to 10000 for every link, a list of 18 "
        "of them, or an NVML error marker, got [26.5, 1]; fix the scenario",
    ),
    (
        {"nvml": {"gpu": {"nvlinks": {"links": 18, "speed_source": "x"}}}},
        "'nvml.gpu.nvlinks' speed_source must be per_link or common, got 'x'; fix the scenario",
    ),
    (
        {"nvml": {"gpu": {"pcie_replay_count": 1.5}}},
        "'nvml.gpu.pcie_replay_count' must be an integer, got 1.5 (float); fix the scenario",
    ),
    (
        {"burn": {"counters_growth": {"remap_pending": True}}},
        "burn.counters_growth: 'remap_pending' is a flag and cannot grow; set it in "
        "counters_after; fix the scenario",
    ),
    (
        {"burn": {"gpu_overrides": {"2": {"counters_growth": {"pcie_replays": 3}}}}},
        "burn.gpu_overrides.2.counters_growth: unknown counter 'pcie_replays'; fix the scenario",
    ),
    (
        {"burn": {"counters_growth": {"pcie_replay_count": -3}}},
        "'burn.counters_growth.pcie_replay_count' must be a whole number >= 0, got -3 (int); "
        "fix the scenario",
    ),
    (
        {"burn": {"counters_growth": {"nvlink_errors": {"crc_flit": "not_supported"}}}},
        "'burn.counters_growth.nvlink_errors' crc_flit must be a count from 0 to 1e15, got "
        "'not_supported'; fix the scenario",
    ),
]


@pytest.mark.parametrize(("body", "message"), INVALID, ids=lambda v: str(v)[:40])
def test_a_bad_new_scenario_key_is_one_line_naming_it(
    tmp_path: Path, body: dict[str, Any], message: str
) -> None:
    path = _scenario(tmp_path, body)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value) == f"scenario file {path}: {message}"
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", NEW_SCENARIOS)
def test_each_new_scenario_loads_and_describes_its_fault(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.name == name
    assert scenario.description.splitlines()[0].startswith("H100 node where")


# ---------------------------------------------------------------- nvidia-smi -q / -q -x


def _files(folder: str, pattern: str) -> list[str]:
    root = captures_root()
    if root is None:
        return ["<captures absent>"]
    return sorted(p.name for p in (root / folder).glob(pattern))


@pytest.mark.parametrize("name", _files("nvidia-smi-q", "*.txt"))
def test_every_query_text_gives_its_replays_and_recovery_action(
    name: str, captures_dir: Path
) -> None:
    text = (captures_dir / "nvidia-smi-q" / name).read_text(encoding="utf-8")
    gpus = parse_smi_query(text).gpus
    replays = re.findall(r"^ {8}Replays Since Reset\s+: (\d+)\s*$", text, re.M)
    assert replays, name  # every capture prints it (drivers 470..610)
    assert [gpu.pcie_replay_count for gpu in gpus] == [int(count) for count in replays]
    actions = re.findall(r"^ {4}GPU Recovery Action\s+: (.*?)\s*$", text, re.M)
    if actions:  # R565 and newer
        assert actions == ["None"] * len(gpus)
        assert [gpu.recovery_action for gpu in gpus] == ["none"] * len(gpus)
    else:
        assert {_reason(gpu.recovery_action) for gpu in gpus} == {Reason.NOT_MEASURED}
    assert {_reason(gpu.nvlinks) for gpu in gpus} == {Reason.NOT_MEASURED}  # -q prints none


@pytest.mark.parametrize("name", _files("nvidia-smi-xml", "*.xml"))
def test_every_query_xml_gives_its_replay_counter(name: str, captures_dir: Path) -> None:
    text = (captures_dir / "nvidia-smi-xml" / name).read_text(encoding="utf-8")
    gpus = parse_smi_xml(text).gpus
    counters = re.findall(r"<replay_counter>\s*(\d+)\s*</replay_counter>", text)
    if counters:
        assert [gpu.pcie_replay_count for gpu in gpus] == [int(count) for count in counters]
    else:
        # telegraf-gtx-1070-ti (an old DTD) and the trimmed rtx-pro-6000 print no counter.
        assert {_reason(gpu.pcie_replay_count) for gpu in gpus} == {Reason.NOT_MEASURED}
    actions = re.findall(r"<gpu_recovery_action>\s*(.*?)\s*</gpu_recovery_action>", text)
    if actions:  # the v12/v13 DTDs of R565 and newer
        assert actions == ["None"] * len(gpus)
        assert [gpu.recovery_action for gpu in gpus] == ["none"] * len(gpus)
    else:  # missing, never "none"
        assert {_reason(gpu.recovery_action) for gpu in gpus} == {Reason.NOT_MEASURED}


def test_a_recovery_action_in_xml_is_read(captures_dir: Path) -> None:
    text = (captures_dir / "nvidia-smi-xml" / "netdata-rtx-pro-6000-driver-580.xml").read_text()
    reset = text.replace(
        "<performance_state>",
        "<gpu_recovery_action>Reset</gpu_recovery_action>\n<performance_state>",
    )
    assert parse_smi_xml(reset).gpus[0].recovery_action == "gpu_reset"


def test_a_recovery_action_in_the_query_text_is_read(captures_dir: Path) -> None:
    name = "nge-linux-h100-80gb-hbm3-590.48.01__q-idle.txt"
    text = (captures_dir / "nvidia-smi-q" / name).read_text()
    reboot = re.sub(r"(GPU Recovery Action\s+: )None", r"\1Reboot", text)
    assert parse_smi_query(reboot).gpus[0].recovery_action == "node_reboot"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("None", "none"),
        ("Reset", "gpu_reset"),
        ("Reboot", "node_reboot"),
        ("Drain P2P", "drain_p2p"),
        ("Drain and Reset", "drain_and_reset"),
        ("GPU Reset Required", "gpu_reset"),  # as Xid 154 lines word it
        ("  Node   Reboot Required ", "node_reboot"),
    ],
)
def test_recovery_action_words(raw: str, expected: str) -> None:
    assert read_recovery_action(raw) == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, Reason.NOT_MEASURED),
        ("N/A", Reason.NOT_SUPPORTED),
        ("[Unknown Error]", Reason.ERROR),
        ("Bus Reset", Reason.ERROR),  # a word of a newer driver: never taken for "none"
    ],
)
def test_recovery_action_not_read(raw: str | None, reason: Reason) -> None:
    assert _reason(read_recovery_action(raw)) is reason


# ---------------------------------------------------------------- plausibility


def _measured_numbers(cls: type) -> set[str]:
    hints = typing.get_type_hints(cls)
    return {
        f.name
        for f in dataclasses.fields(cls)
        if Unavailable in typing.get_args(hints[f.name])
        and {int, float} & set(typing.get_args(hints[f.name]))
    }


@pytest.mark.parametrize("cls", [NvLinkState, NvLinkErrorCounts, GpuFacts, ErrorCounters])
def test_every_new_measured_number_has_a_range(cls: type) -> None:
    numbers = _measured_numbers(cls)
    assert numbers
    assert numbers - set(RANGES) == set()


def _healthy_gpu() -> GpuFacts:
    return read_nvml(load_scenario(HEALTHY).nvml()).gpus[0]


@pytest.mark.parametrize("speed", [0.0, -1.0, 1000.5, float("nan"), float("inf")])
def test_an_impossible_link_speed_is_not_measured(speed: float) -> None:
    gpu = _healthy_gpu()
    links = list(_links(gpu))
    links[3] = dataclasses.replace(links[3], speed_gb_s=speed)
    checked = _links(plausible_gpu(dataclasses.replace(gpu, nvlinks=tuple(links))))
    assert implausible_reading(checked[3].speed_gb_s)
    assert "speed_gb_s" in str(checked[3].speed_gb_s)
    assert checked[2].speed_gb_s == 26.562


@pytest.mark.parametrize("speed", [1.0, 25.0, 26.562, 53.125, 1000.0])
def test_real_link_speeds_are_plausible(speed: float) -> None:
    gpu = _healthy_gpu()
    links = tuple(dataclasses.replace(link, speed_gb_s=speed) for link in _links(gpu))
    assert plausible_gpu(dataclasses.replace(gpu, nvlinks=links)).nvlinks == links


def test_impossible_counters_are_not_measured_in_facts_and_in_the_burn() -> None:
    gpu = _healthy_gpu()
    errors = list(_errors(gpu))
    errors[7] = dataclasses.replace(errors[7], crc_flit=-1, replay=2**60)
    broken = dataclasses.replace(gpu, nvlink_errors=tuple(errors), pcie_replay_count=-5)
    checked = plausible_gpu(broken)
    assert implausible_reading(checked.pcie_replay_count)
    assert implausible_reading(_errors(checked)[7].crc_flit)
    assert implausible_reading(_errors(checked)[7].replay)
    assert _errors(checked)[7].recovery == 0
    facts = collect_simulated(HEALTHY, burn=BurnConfig(duration_s=0.5))
    assert isinstance(facts.burn, BurnResult)
    first = facts.burn.gpus[0]
    bad_after = dataclasses.replace(
        first.counters_after, pcie_replay_count=-1, nvlink_errors=tuple(errors)
    )
    burn = dataclasses.replace(
        facts.burn, gpus=(dataclasses.replace(first, counters_after=bad_after),)
    )
    checked_burn = plausible_facts(dataclasses.replace(facts, burn=burn)).burn
    assert isinstance(checked_burn, BurnResult)
    after = checked_burn.gpus[0].counters_after
    assert implausible_reading(after.pcie_replay_count)
    assert implausible_reading(_errors(after)[7].crc_flit)


def test_a_recovery_action_no_driver_gives_is_not_measured() -> None:
    checked = plausible_gpu(dataclasses.replace(_healthy_gpu(), recovery_action="reset_everything"))
    assert implausible_reading(checked.recovery_action)
    assert "not one of none, gpu_reset" in str(checked.recovery_action)


def test_healthy_facts_pass_plausibility_unchanged() -> None:
    gpu = _healthy_gpu()
    assert plausible_gpu(gpu) is gpu


def test_counters_that_could_not_be_read_are_unread_in_every_field() -> None:
    # A hung or unopened NVML leaves no counter looking read: the new ones included.
    from validator.model import counters_unavailable

    why = Unavailable(Reason.GPU_LOST, "did not return")
    counters = counters_unavailable(why)
    assert {f.name for f in dataclasses.fields(ErrorCounters)} >= {
        "pcie_replay_count",
        "nvlink_errors",
    }
    assert all(getattr(counters, f.name) == why for f in dataclasses.fields(ErrorCounters))
