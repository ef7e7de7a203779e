"""The local transport: in-process collection, failures as outcomes."""

from __future__ import annotations

from validator.remote.local import LocalTransport, burn_config
from validator.remote.transport import AgentRequest, HostSpec


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


def test_a_bad_burn_setting_is_an_outcome_error() -> None:
    host = HostSpec(name="here", address="here", simulate="healthy-8x-h100-sxm")
    request = AgentRequest(burn_s=5, burn_dtype="int3")

    outcome = LocalTransport().run_agent(host, request, 10.0, Phases())

    assert outcome.facts is None
    assert outcome.error is not None
    assert "int3" in outcome.error


def test_burn_config_follows_the_request() -> None:
    assert burn_config(AgentRequest()) is None
    config = burn_config(AgentRequest(burn_s=30, burn_dtype="fp16", burn_matrix_size=1024))
    assert config is not None
    assert config.duration_s == 30
    assert config.dtype == "fp16"
    assert config.matrix_size == 1024
    assert config.memory_fraction == 0.9
    fraction = burn_config(AgentRequest(burn_s=1, burn_memory_fraction=0.5))
    assert fraction is not None
    assert fraction.memory_fraction == 0.5
