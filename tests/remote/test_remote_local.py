"""The local transport: in-process collection, failures as outcomes."""

from __future__ import annotations

import pytest

from validator.error_tree import BadInputError
from validator.model import HostSpec
from validator.node.burnin.burn_config import BurnConfig
from validator.remote.local import LocalTransport
from validator.remote.transport import AgentRequest


class Phases:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def phase(self, host: str, phase: str) -> None:
        self.seen.append((host, phase))


def test_a_scenario_host_gives_its_facts() -> None:
    phases = Phases()
    host = HostSpec(name="here", address="here", simulate="healthy-8x-h100-sxm")

    outcome = LocalTransport().run_agent(host, AgentRequest(), 10.0, phases)

    assert outcome.error is None
    assert outcome.host == "here"
    assert outcome.facts is not None
    assert outcome.facts.source == "simulate"
    assert outcome.facts.source_detail == "healthy-8x-h100-sxm"
    assert len(outcome.facts.gpus) == 8
    assert outcome.phase == "done"
    assert phases.seen == [("here", "run"), ("here", "done")]


def test_a_bad_scenario_is_an_outcome_error_not_an_exception() -> None:
    phases = Phases()
    host = HostSpec(name="here", address="here", simulate="no-such-scenario")

    outcome = LocalTransport().run_agent(host, AgentRequest(), 10.0, phases)

    assert outcome.facts is None
    assert outcome.error is not None
    assert "no-such-scenario" in outcome.error
    assert "\n" not in outcome.error
    assert outcome.phase == "run"
    assert phases.seen[-1] == ("here", "failed")


def test_a_bad_burn_setting_cannot_reach_a_host() -> None:
    # One burn type from the CLI to the agent: a bad setting is refused where it is made.
    with pytest.raises(BadInputError, match="int3"):
        AgentRequest(burn=BurnConfig(duration_s=5, dtype="int3"))


def test_the_burn_travels_to_the_agent_and_back_unchanged() -> None:
    burn = BurnConfig(duration_s=30, dtype="fp16", matrix_size=1024, backend="torch")
    host = HostSpec(name="here", address="here")
    argv = AgentRequest(burn=burn).arguments(host)
    assert BurnConfig.from_argv(argv[argv.index("--burn") :]) == burn
    assert BurnConfig.from_argv([]) is None
    assert AgentRequest().arguments(host) == ["--packed", "--xid-window-hours", "24"]
    assert BurnConfig().memory_fraction == 0.9


def test_the_deadline_travels_to_the_agent_and_is_read_back() -> None:
    from validator.node.agent import _parser

    host = HostSpec(name="here", address="here", simulate="healthy-8x-h100-sxm")
    argv = AgentRequest(burn=BurnConfig(duration_s=30)).arguments(host, 12.5)
    assert argv[-2:] == ["--deadline", "12.500"]
    assert _parser().parse_args(argv).deadline == 12.5
    assert "--deadline" not in AgentRequest().arguments(host)
