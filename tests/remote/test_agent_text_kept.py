"""The JSON an agent printed is kept as its facts' packed encoding (issue 16).

The controller decodes every host's facts, then used to encode them again for the
history store and the host files. The agent prints them as the store keeps them,
so the transports keep that text instead: these check that the text is the same
one encoding would give, and that what each transport keeps decodes to its facts.
"""

from __future__ import annotations

import base64
import io
import json
from contextlib import redirect_stdout

import pytest

from tests.collecting import collect_simulated
from validator import codec, packed
from validator.model import HostSpec, NodeFacts, SchemaError, from_dict, to_dict
from validator.node import agent
from validator.remote import ssh
from validator.slurm import job_fanout
from validator.slurm.submission_spool import NodeOutput

SCENARIOS = ("healthy-8x-h100-sxm", "gpu-fallen-off-bus", "nvswitch-sxid-fatal", "no-gpu-driver")


def _printed(scenario: str, *, packed_output: bool = False) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        agent._print(collect_simulated(scenario), packed_output)
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
    assert codec.unpack(packed.packed_facts(facts)) == text  # the line's end left out
    assert encoded == []  # taken as printed, not encoded again
    assert from_dict(NodeFacts, json.loads(codec.unpack(packed.packed_facts(facts)))) == facts


def test_the_slurm_collector_keeps_the_agents_text(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = _no_encoding(monkeypatch)
    text = _printed("healthy-8x-h100-sxm")
    outcome = job_fanout.agent_outcome(NodeOutput("gpu-b", 0, text.encode(), ""))
    assert outcome.facts is not None
    assert codec.unpack(packed.packed_facts(outcome.facts)) == text
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
    outcome = job_fanout.agent_outcome(NodeOutput("gpu-c", 0, json.dumps(data).encode(), ""))
    assert outcome.facts is None
    assert "do not fit the model" in (outcome.error or "")
    assert kept == []


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_packed_the_agent_prints_one_base64_line_of_the_same_text(scenario: str) -> None:
    line = _printed(scenario, packed_output=True)
    assert "\n" not in line
    assert codec.unpack(base64.b64decode(line, validate=True)) == _printed(scenario)


def test_packed_facts_are_kept_as_they_came(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's bytes are the agent's: nothing is encoded or packed again for the host."""
    encoded = _no_encoding(monkeypatch)
    packs: list[str] = []
    monkeypatch.setattr(packed, "pack", lambda text, **_: packs.append(text) or b"")
    line = _printed("row-remap-pending", packed_output=True)
    run = ssh._Run(status=0, stdout=(line + "\n").encode(), stderr=b"")
    facts = ssh.SshTransport._facts(HostSpec(name="gpu-a", address="10.0.0.1"), run, 60.0)
    assert packed.packed_facts(facts) == base64.b64decode(line)
    assert facts == collect_simulated("row-remap-pending")
    assert (encoded, packs) == ([], [])


@pytest.mark.parametrize(
    ("output", "why"),
    [
        (base64.b64encode(b"\xfd7zXZ\x00 cut short").decode(), "packed facts that do not unpack"),
        (base64.b64encode(codec.pack('{"gpus": [')).decode(), "printed no valid JSON"),
        ("not json, not base64!", "printed no valid JSON: Expecting value"),
        ("", "printed no valid JSON: Expecting value"),
        # Not ASCII, and base64's own alphabet without a packed header: read as JSON.
        ("Fehler: \u00fc", "printed no valid JSON: Expecting value"),
        ("\ufeff{}", "printed no valid JSON: Unexpected UTF-8 BOM"),
        ("Segmentation", "printed no valid JSON: Expecting value"),
        ("[" * 100_000, "printed no valid JSON: JSON nested too deeply"),
    ],
)
def test_packed_output_that_does_not_unpack_is_one_line(output: str, why: str) -> None:
    run = ssh._Run(status=0, stdout=output.encode(), stderr=b"")
    with pytest.raises(ssh._Failed) as failed:
        ssh.SshTransport._facts(HostSpec(name="gpu-a", address="10.0.0.1"), run, 60.0)
    assert why in failed.value.message
    assert "\n" not in failed.value.message


def test_the_slurm_collector_and_ansible_take_packed_facts_too() -> None:
    from validator.remote import ansible_transport

    line = _printed("healthy-8x-h100-sxm", packed_output=True)
    outcome = job_fanout.agent_outcome(NodeOutput("gpu-b", 0, line.encode(), ""))
    assert outcome.facts == collect_simulated("healthy-8x-h100-sxm")
    parsed = ansible_transport._parse("gpu-c", {"stdout": line, "stderr": ""})
    assert parsed.facts == outcome.facts


def test_packed_facts_past_the_bound_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    line = _printed("healthy-8x-h100-sxm", packed_output=True)
    monkeypatch.setattr(packed, "AGENT_FACTS_LIMIT", 1000)
    run = ssh._Run(status=0, stdout=line.encode(), stderr=b"")
    with pytest.raises(ssh._Failed, match="packed facts that do not unpack: unpacks to more than"):
        ssh.SshTransport._facts(HostSpec(name="gpu-a", address="10.0.0.1"), run, 60.0)


def test_json_with_white_space_around_it_is_kept_as_one_line() -> None:
    text = _printed("healthy-8x-h100-sxm")
    facts = packed.agent_facts(f"  \n{text}\n\n")
    assert codec.unpack(packed.packed_facts(facts)) == text
    padded = base64.b64encode(codec.pack(f"\n {text} \n")).decode()
    facts = packed.agent_facts(padded)
    assert codec.unpack(packed.packed_facts(facts)) == text  # packed again, without them


def test_null_is_json_that_does_not_fit() -> None:
    with pytest.raises(SchemaError):
        packed.agent_facts("null")
