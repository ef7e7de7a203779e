"""The interconnect measurement wired through the agent, the controller and the CLI.

The measurements themselves (live, simulated, recorded) are stubbed here where a test
needs to see how they are called; the end-to-end test uses the real simulation when
its module is there.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

from tests.collecting import collect_capture, collect_simulated
from tests.remote.test_deadline import write_inventory
from validator.cli.main import main
from validator.error_tree import BadInputError
from validator.judge.policy import Policy
from validator.model import (
    GpuFacts,
    HostSpec,
    Interconnect,
    NodeFacts,
    NvLinkState,
    Reason,
    TransportName,
    Unavailable,
    from_dict,
)
from validator.node import agent
from validator.node import collect as collector
from validator.node.bandwidth import wanted
from validator.node.bandwidth.bandwidth_config import ALLOWANCE_S, InterconnectConfig
from validator.node.burnin.burn_config import BurnConfig
from validator.node.collect import CollectRequest, FactSource, collect
from validator.node.live.live_source import LiveSource
from validator.node.sim.simulated_source import SimulatedSource
from validator.remote.local import LocalTransport
from validator.remote.transport import AgentRequest
from validator.service.collect_and_judge import (
    DEADLINE_MARGIN_S,
    FleetRequest,
    Reach,
    agent_request,
    certify_fleet,
    effective_policy,
    host_deadline,
    interconnect_mode,
)
from validator.service.drift_service import interconnect_modes

SCENARIO = "healthy-8x-h100-sxm"  # eight GPUs, every NVLink active
NO_TIME = (
    "no time left for the interconnect measurement within the deadline: give a longer --deadline"
)
BAD_MODE = (
    "gpuready-agent: error: --interconnect must be auto, on or off, got 'sometimes'; give "
    "auto (measure on two or more GPUs unless every NVLink is known down), on (always) "
    "or off (never)\n"
)

SIMULATED = "validator.node.sim.simulated_bandwidth"


def stub(monkeypatch: pytest.MonkeyPatch, module_name: str, name: str, value: object) -> None:
    """``module_name.name`` replaced; the module made up when its helper has not built it yet."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        module = types.ModuleType(module_name)
        monkeypatch.setitem(sys.modules, module_name, module)
    monkeypatch.setattr(module, name, value, raising=False)


def measured(source: str = "simulate") -> Interconnect:
    return Interconnect(source=source, simulated=source == "simulate", elapsed_s=1.5)


class Calls:
    """Records each call of a stubbed measurement, and gives a fixed Interconnect."""

    def __init__(self, source: str = "simulate") -> None:
        self.seen: list[tuple[Any, ...]] = []
        self.result = measured(source)

    def __call__(self, *args: Any) -> Interconnect:
        self.seen.append(args)
        return self.result


@pytest.fixture
def simulated(monkeypatch: pytest.MonkeyPatch) -> Calls:
    calls = Calls()
    stub(monkeypatch, SIMULATED, "simulated_interconnect", calls)
    return calls


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> Calls:
    calls = Calls("cuda")
    stub(monkeypatch, "validator.node.bandwidth.live", "measure_live", calls)
    return calls


def node(*gpus: GpuFacts) -> NodeFacts:
    return NodeFacts(hostname="n", source="simulate", gpus=gpus)


def linked(index: int, *active: bool) -> GpuFacts:
    return GpuFacts(
        index=index, nvlinks=tuple(NvLinkState(link, up) for link, up in enumerate(active))
    )


# -- the mode rule ------------------------------------------------------------------------


def test_on_measures_any_node_and_off_none() -> None:
    single = node(GpuFacts(index=0))
    assert wanted(single, "on")
    assert wanted(node(), "on")
    assert not wanted(collect_simulated(SCENARIO), "off")


def test_auto_wants_two_gpus_unless_every_nvlink_is_known_down() -> None:
    assert wanted(collect_simulated(SCENARIO), "auto")
    assert wanted(node(linked(0, False, True), linked(1, False, False)), "auto")
    # One GPU: no peer and no all-reduce to measure, whatever its links say.
    assert not wanted(node(linked(0, True, True)), "auto")
    # PCIe only: links present but down, or none (NVML: not supported, no NVLink).
    assert not wanted(node(linked(0, False), linked(1, False)), "auto")
    none = GpuFacts(index=0, nvlinks=Unavailable(Reason.NOT_SUPPORTED, "no NVLink on this GPU"))
    assert not wanted(node(none, dataclasses.replace(none, index=1)), "auto")
    assert not wanted(node(none, linked(1, False)), "auto")
    assert not wanted(collect_simulated("no-gpu-driver"), "auto")


@pytest.mark.parametrize("reason", [Reason.ERROR, Reason.NO_PERMISSION, Reason.NOT_MEASURED])
def test_auto_measures_two_or_more_gpus_whose_nvlink_state_cannot_be_read(reason: Reason) -> None:
    # The judge requires the interconnect of an NVLink SKU's node of two or more GPUs
    # whatever NVML said of its links: an unread link state must not skip the measurement.
    unread = GpuFacts(index=0, nvlinks=Unavailable(reason, "nvmlDeviceGetNvLinkState failed"))
    eight = node(*(dataclasses.replace(unread, index=index) for index in range(8)))
    assert wanted(eight, "auto")
    # One GPU unread among GPUs known to have no active link: still measured.
    assert wanted(node(linked(0, False), dataclasses.replace(unread, index=1)), "auto")
    # One GPU: nothing between GPUs to measure, whatever its links say.
    assert not wanted(node(unread), "auto")


def test_a_bad_mode_is_refused() -> None:
    with pytest.raises(BadInputError, match=r"--interconnect must be auto, on or off, got 'yes'"):
        wanted(node(), "yes")


def test_the_policy_gives_the_mode_and_the_command_line_overrides_it(tmp_path: Path) -> None:
    assert interconnect_mode(Policy()) == "auto"
    assert interconnect_mode(dataclasses.replace(Policy(), interconnect=True)) == "on"
    assert interconnect_mode(dataclasses.replace(Policy(), interconnect=False)) == "off"
    never = tmp_path / "never.yaml"
    never.write_text("interconnect: false\n")
    assert interconnect_mode(effective_policy(str(never))) == "off"
    assert interconnect_mode(effective_policy(str(never), interconnect=True)) == "on"
    assert interconnect_mode(effective_policy(None, interconnect=False)) == "off"
    assert effective_policy(None, interconnect=None) == Policy()


def test_drift_measures_only_when_asked() -> None:
    always = dataclasses.replace(Policy(), interconnect=True)
    never = dataclasses.replace(Policy(), interconnect=False)
    assert [interconnect_modes(False)(p) for p in (Policy(), always, never)] == ["off"] * 3
    assert [interconnect_modes(True)(p) for p in (Policy(), always, never)] == [
        "auto",
        "on",
        "auto",
    ]


# -- the agent's flag --------------------------------------------------------------------------


def test_the_agent_measures_nothing_unless_asked(
    capsys: pytest.CaptureFixture[str], simulated: Calls
) -> None:
    assert agent.run(["--simulate", SCENARIO]) == 0
    assert json.loads(capsys.readouterr().out)["interconnect"] is None
    assert simulated.seen == []


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_the_agent_measures_after_the_burn_when_asked(
    mode: str, capsys: pytest.CaptureFixture[str], simulated: Calls
) -> None:
    assert agent.run(["--simulate", SCENARIO, "--interconnect", mode]) == 0
    facts = from_dict(NodeFacts, json.loads(capsys.readouterr().out))
    assert facts.interconnect == simulated.result
    ((seen_facts, scenario, config),) = simulated.seen
    assert len(seen_facts.gpus) == 8
    assert scenario.name == SCENARIO
    assert config == InterconnectConfig()


@pytest.mark.parametrize("deadline", [[], ["--deadline", "30"]])
def test_the_agent_refuses_a_bad_mode_in_one_line(
    deadline: list[str], capsys: pytest.CaptureFixture[str], simulated: Calls
) -> None:
    assert agent.run(["--simulate", SCENARIO, "--interconnect", "sometimes", *deadline]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", BAD_MODE)
    assert simulated.seen == []


def test_the_collectors_refuse_a_bad_mode_before_the_burn() -> None:
    with pytest.raises(BadInputError, match="--interconnect must be"):
        collect_simulated(SCENARIO, burn=BurnConfig(duration_s=30), interconnect="always")


# -- the request and its argv ------------------------------------------------------------------


def test_the_mode_travels_to_the_agent_and_is_read_back() -> None:
    host = HostSpec(name="gpu1", address="gpu1", simulate=SCENARIO)
    assert "--interconnect" not in AgentRequest().arguments(host)  # off: the agent's default
    args = AgentRequest(interconnect="auto").arguments(host, 300.0)
    assert args[args.index("--interconnect") + 1] == "auto"
    parsed = agent._parser().parse_args(args)
    assert (parsed.interconnect, parsed.deadline, parsed.simulate) == ("auto", 300.0, SCENARIO)
    assert agent._parser().parse_args([]).interconnect == "off"


def test_a_bad_mode_never_leaves_the_controller() -> None:
    with pytest.raises(BadInputError, match="got 'maybe'"):
        AgentRequest(interconnect="maybe")
    with pytest.raises(BadInputError, match="got 'maybe'"):
        AgentRequest(interconnect_by_host=(("a", "maybe"),))


def test_the_request_carries_only_the_hosts_whose_mode_differs() -> None:
    base = Policy()
    own = {
        "a": dataclasses.replace(base, interconnect=False),
        "b": base,
        "c": dataclasses.replace(base, interconnect=True),
    }
    request = agent_request(None, base, own)
    assert request.interconnect == "auto"
    assert request.interconnect_by_host == (("a", "off"), ("c", "on"))
    assert "--interconnect" not in request.arguments(HostSpec(name="a", address="a"))
    assert request.arguments(HostSpec(name="b", address="b"))[-2:] == ["--interconnect", "auto"]
    assert request.arguments(HostSpec(name="c", address="c"))[-2:] == ["--interconnect", "on"]
    assert request.measures_interconnect
    never = dataclasses.replace(base, interconnect=False)
    assert not agent_request(None, never, {"a": never}).measures_interconnect
    # Drift's modes: off for every host unless asked.
    assert agent_request(None, base, own, interconnect_modes(False)).interconnect_by_host == ()


def test_the_host_deadline_grows_by_the_allowance_only_when_measured() -> None:
    assert host_deadline(None, None, Policy()) == DEADLINE_MARGIN_S
    assert host_deadline(None, None, Policy(), True) == ALLOWANCE_S + DEADLINE_MARGIN_S
    burn = BurnConfig(duration_s=60)
    assert host_deadline(None, burn, Policy(), True) == 60 + ALLOWANCE_S + DEADLINE_MARGIN_S
    assert host_deadline(90.0, burn, Policy(), True) == 90.0  # a given deadline binds


# -- the deadline ------------------------------------------------------------------------------


def test_the_interconnect_gets_its_allowance_or_what_is_left() -> None:
    assert collector.interconnect_within(100_000.0) == ALLOWANCE_S
    cut = collector.interconnect_within(60.0)
    assert cut is not None
    assert collector.SHORTEST_INTERCONNECT_S <= cut < 60.0
    assert collector.interconnect_within(collector.SHORTEST_INTERCONNECT_S) is None


def test_the_burn_keeps_room_for_the_interconnect() -> None:
    burn = BurnConfig(duration_s=300)
    # A long deadline: the burn as asked, the allowance kept.
    assert collector.interconnect_reserve(10_000.0) == ALLOWANCE_S
    assert collector.burn_within(burn, 600.0, collector.interconnect_reserve(600.0)) is burn
    # A short one: the burn is cut to end before the room kept for the interconnect.
    reserve = collector.interconnect_reserve(100.0)
    assert reserve >= collector.INTERCONNECT_RESERVE_MIN_S
    fitted = collector.burn_within(burn, 100.0, reserve)
    assert fitted is not None
    assert fitted.duration_s + fitted.grace_s + reserve <= 100.0
    unreserved = collector.burn_within(burn, 100.0)
    assert unreserved is not None
    assert fitted.duration_s < unreserved.duration_s
    # What is kept is enough to start the measurement once the burn has ended.
    assert collector.interconnect_within(reserve) is not None
    # Too short for both: the burn comes first, with at least half of the time.
    assert collector.interconnect_reserve(6.0) == 3.0


class Clock:
    """time.monotonic for the agent, moved on by the stubs as a real run would take."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_interconnect_runs_between_the_burn_and_dcgm_within_the_deadline(
    monkeypatch: pytest.MonkeyPatch, simulated: Calls
) -> None:
    clock = Clock()
    monkeypatch.setattr(collector, "time", clock)
    order: list[tuple[str, float]] = []
    burns: list[BurnConfig] = []

    def burn(source: object, facts: NodeFacts, config: BurnConfig, progress: object) -> Any:
        del source, progress
        burns.append(config)
        clock.now += config.duration_s  # the burn takes what it was given
        order.append(("burn", clock.now))
        return None

    def dcgm(system: object, level: int, timeout_s: float, gpus: object = None) -> Any:
        assert gpus is None  # every GPU: no --gpus
        order.append(("dcgm", clock.now))
        assert clock.now + timeout_s <= until
        return None

    original = simulated.__call__

    def measure(*args: Any) -> Interconnect:
        order.append(("interconnect", clock.now))
        clock.now += 20.0  # a slow measurement: DCGM gets what it leaves
        return original(*args)

    stub(monkeypatch, SIMULATED, "simulated_interconnect", measure)
    monkeypatch.setattr(SimulatedSource, "burn", burn)
    stub(monkeypatch, "validator.node.dcgm_run", "run_dcgm", dcgm)
    until = clock.now + 200.0
    asked = CollectRequest(burn=BurnConfig(duration_s=600), dcgm_level=1, interconnect="on")

    facts = collect(SimulatedSource(SCENARIO), asked, until)

    assert [name for name, _ in order] == ["burn", "interconnect", "dcgm"]
    # Cut to keep the interconnect's room: shorter than the cut without it.
    (fitted,) = burns
    reserve = collector.interconnect_reserve(200.0)
    assert fitted == collector.burn_within(BurnConfig(600), 200.0, reserve)
    assert fitted.duration_s < (collector.burn_within(BurnConfig(600), 200.0) or fitted).duration_s
    assert facts.interconnect == simulated.result


def test_the_live_measurement_is_told_when_to_stop(live: Calls) -> None:
    facts = collect_simulated(SCENARIO)
    until = time.monotonic() + 1000.0

    got = collector._interconnect(LiveSource(), facts, "on", until)

    assert got.interconnect == live.result
    ((seen_facts, config, stop),) = live.seen
    assert seen_facts is facts
    assert config == InterconnectConfig()
    # Its allowance from now, well before the deadline.
    assert stop <= time.monotonic() + ALLOWANCE_S
    assert stop < until


def test_no_time_left_for_the_interconnect_is_a_fact_not_a_silence(simulated: Calls) -> None:
    asked = CollectRequest(interconnect="on")
    facts = collect(SimulatedSource(SCENARIO), asked, time.monotonic() + 0.5)
    assert facts.interconnect == Interconnect(source="simulate", simulated=True, error=NO_TIME)
    assert simulated.seen == []
    live = collector._not_measured(LiveSource(), NO_TIME)
    assert (live.source, live.simulated, live.error) == ("cuda", False, NO_TIME)


def test_not_wanted_within_a_deadline_leaves_it_out(simulated: Calls) -> None:
    until = time.monotonic() + 0.5
    off = CollectRequest(interconnect="off")
    assert collect(SimulatedSource(SCENARIO), off, until).interconnect is None
    auto = CollectRequest(interconnect="auto")
    assert collect(SimulatedSource("no-gpu-driver"), auto, until).interconnect is None
    assert simulated.seen == []


# -- the local transport and the fleet --------------------------------------------------------


def test_the_local_transport_passes_each_hosts_mode(simulated: Calls) -> None:
    request = AgentRequest(interconnect="on", interconnect_by_host=(("quiet", "off"),))
    transport = LocalTransport()

    class Phases:
        def phase(self, host: str, phase: str) -> None:
            del host, phase

    asked = HostSpec(name="asked", address="asked", simulate=SCENARIO)
    quiet = HostSpec(name="quiet", address="quiet", simulate=SCENARIO)
    measured_facts = transport.run_agent(asked, request, 60.0, Phases()).facts
    quiet_facts = transport.run_agent(quiet, request, 60.0, Phases()).facts
    assert measured_facts is not None
    assert quiet_facts is not None
    assert measured_facts.interconnect == simulated.result
    assert quiet_facts.interconnect is None
    assert len(simulated.seen) == 1


@pytest.fixture
def simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real simulated measurement where helper B's module is there, else a stand-in."""
    try:
        importlib.import_module("validator.node.sim.simulated_bandwidth")
    except ModuleNotFoundError:
        stub(monkeypatch, SIMULATED, "simulated_interconnect", Calls())


@pytest.mark.usefixtures("simulation")
def test_a_simulated_fleet_certify_measures_where_each_hosts_policy_says(tmp_path: Path) -> None:
    inventory = write_inventory(
        tmp_path / "hosts.yml",
        {
            "gpu-a": {"gpuready_simulate": SCENARIO},
            "gpu-b": {"gpuready_simulate": SCENARIO, "gpuready_interconnect": "false"},
        },
    )
    request = FleetRequest(Reach(inventories=(str(inventory),), transport=TransportName.LOCAL))

    report = certify_fleet(request)

    nodes = {result.hostname: result for result in report.nodes}
    measured_here = nodes["gpu-a"].facts.interconnect
    assert measured_here is not None
    assert (measured_here.source, measured_here.simulated) == ("simulate", True)
    assert nodes["gpu-b"].facts.interconnect is None
    # --no-interconnect overrides every host's policy.
    quiet = certify_fleet(dataclasses.replace(request, interconnect=False))
    assert [result.facts.interconnect for result in quiet.nodes] == [None, None]


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture
def collected(monkeypatch: pytest.MonkeyPatch) -> list[CollectRequest]:
    """What certify and drift ask the collector for; the facts are the scenario's own."""
    import validator.node.collect

    seen: list[CollectRequest] = []
    real = validator.node.collect.collect

    def collect(source: FactSource, request: CollectRequest, *_: object) -> NodeFacts:
        seen.append(request)
        return real(source)

    monkeypatch.setattr(validator.node.collect, "collect", collect)
    return seen


@pytest.mark.parametrize(
    ("flags", "mode"),
    [([], "auto"), (["--interconnect"], "on"), (["--no-interconnect"], "off")],
)
def test_certify_flags_reach_the_collector(
    flags: list[str],
    mode: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    collected: list[CollectRequest],
) -> None:
    main(["certify", "--simulate", SCENARIO, "--burn", "0", "--json", "--db",
          str(tmp_path / "h.db"), *flags])  # fmt: skip
    capsys.readouterr()
    assert [call.interconnect for call in collected] == [mode]


def test_certify_flag_overrides_the_policy_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], collected: list[CollectRequest]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("interconnect: false\n")
    base = ["certify", "--simulate", SCENARIO, "--burn", "0", "--json", "--policy", str(policy)]
    main([*base, "--db", str(tmp_path / "a.db")])
    main([*base, "--interconnect", "--db", str(tmp_path / "b.db")])
    capsys.readouterr()
    assert [call.interconnect for call in collected] == ["off", "on"]


@pytest.mark.parametrize(("flags", "mode"), [([], "off"), (["--interconnect"], "auto")])
def test_drift_measures_only_with_its_flag(
    flags: list[str],
    mode: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    collected: list[CollectRequest],
) -> None:
    main(["drift", "--simulate", SCENARIO, "--db", str(tmp_path / "h.db"), *flags])
    capsys.readouterr()
    assert [call.interconnect for call in collected] == [mode]


def test_the_flags_are_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("certify", "drift"):
        assert main([command, "--help"]) == 0
        assert "--interconnect / --no-interconnect" in capsys.readouterr().out


# -- a bundle ---------------------------------------------------------------------------------


def test_a_bundles_recorded_measurement_is_read_whatever_the_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[object, NodeFacts]] = []
    recorded = measured("nvbandwidth.txt")

    def read(system: object, facts: NodeFacts) -> Interconnect | None:
        seen.append((system, facts))
        return recorded

    stub(monkeypatch, "validator.node.capture.recorded_bandwidth", "recorded_interconnect", read)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "hostname.txt").write_text("node-7\n")

    facts = collect_capture(bundle)

    assert facts.interconnect == recorded
    ((system, seen_facts),) = seen
    from validator.node.capture.capture_replay import CaptureSystem

    assert isinstance(system, CaptureSystem)
    assert seen_facts.hostname == "node-7"

    def nothing(system: object, facts: NodeFacts) -> None:
        del system, facts

    stub(monkeypatch, "validator.node.capture.recorded_bandwidth", "recorded_interconnect", nothing)
    assert collect_capture(bundle).interconnect is None
