"""The JSON an agent printed is kept as its facts' packed encoding (issue 16).

The controller decodes every host's facts, then used to encode them again for the
history store and the host files. The agent prints them as the store keeps them,
so the transports keep that text instead: these check that the text is the same
one encoding would give, and that what each transport keeps decodes to its facts.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from validator import packed
from validator.model import HostSpec, NodeFacts, from_dict, to_dict
from validator.node import agent
from validator.node.sources import collect_simulated
from validator.remote import slurm_fanout, ssh
from validator.remote.slurm_spool import NodeOutput

SCENARIOS = ("healthy-8x-h100-sxm", "gpu-fallen-off-bus", "nvswitch-sxid-fatal", "no-gpu-driver")


def _printed(scenario: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        agent._print(collect_simulated(scenario))
    return out.getvalue().rstrip("\n")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_agent_prints_its_facts_as_the_store_encodes_them(scenario: str) -> None:
    text = _printed(scenario)
    assert text == packed.encode(to_dict(from_dict(NodeFacts, json.loads(text))))


def _no_encoding(monkeypatch: pytest.MonkeyPatch) -> list[NodeFacts]:
    encoded: list[NodeFacts] = []

    def refuse(facts: NodeFacts) -> str:
        encoded.append(facts)
        return packed.encode(to_dict(facts))

    monkeypatch.setattr(packed._FACTS, "_text_of", refuse)
    return encoded


def test_the_ssh_transport_keeps_the_agents_text(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = _no_encoding(monkeypatch)
    text = _printed("row-remap-pending")
    run = ssh._Run(status=0, stdout=(text + "\n").encode(), stderr=b"")
    facts = ssh.SshTransport._facts(HostSpec(name="gpu-a", address="10.0.0.1"), run, 60.0)
    assert packed.unpack(packed.packed_facts(facts)) == text  # the line's end left out
    assert encoded == []  # taken as printed, not encoded again
    assert from_dict(NodeFacts, json.loads(packed.unpack(packed.packed_facts(facts)))) == facts


def test_the_slurm_collector_keeps_the_agents_text(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = _no_encoding(monkeypatch)
    text = _printed("healthy-8x-h100-sxm")
    outcome = slurm_fanout.agent_outcome(NodeOutput("gpu-b", 0, text.encode(), ""))
    assert outcome.facts is not None
    assert packed.unpack(packed.packed_facts(outcome.facts)) == text
    assert encoded == []


def test_facts_not_from_an_agent_are_still_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = _no_encoding(monkeypatch)
    facts = collect_simulated("healthy-8x-h100-sxm")
    packed.packed_facts(facts)
    assert encoded == [facts]


def test_text_the_model_refuses_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[str] = []
    monkeypatch.setattr(packed, "pack", lambda text: kept.append(text) or b"")
    data = json.loads(_printed("healthy-8x-h100-sxm"))
    data["gpus"][0]["power_draw_w"] = float("nan")
    outcome = slurm_fanout.agent_outcome(NodeOutput("gpu-c", 0, json.dumps(data).encode(), ""))
    assert outcome.facts is None
    assert "do not fit the model" in (outcome.error or "")
    assert kept == []
