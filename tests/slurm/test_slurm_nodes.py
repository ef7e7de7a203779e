"""Slurm's nodes from sinfo: every recorded state, in both JSON shapes and the text form.

The single-node recordings (Slurm 22.05.8, one node n1 in partitions debug and gpu)
walk the node through idle, mixed, allocated, draining, drained, maintenance, fail, not
responding, down and down+drained; each is read from ``sinfo --json`` and from the text
fallback, which must agree. Newer Slurm's JSON is read from public real outputs: 23.02's
``sinfo -N --json`` (state a list, one record per node and partition) and 25.11's
``scontrol show node --json``.
"""

from __future__ import annotations

import json

import pytest

from tests.slurm.test_slurm_commands import FIXTURES, FakeSlurm, recorded, recorded_argv
from validator.slurm import CommandResult, SlurmError
from validator.slurm.nodes import (
    SlurmNode,
    json_unsupported,
    list_nodes,
    parse_sinfo_json,
    parse_sinfo_text,
)

REASON = "gpuready: drift since the certificate"
# name: (words, usable, drained), as both forms read the recording.
STATES = {
    "idle": ("IDLE", True, False),
    "mixed": ("MIXED", True, False),
    "allocated": ("ALLOCATED", True, False),
    "draining": (f"ALLOCATED+DRAIN (reason: {REASON})", False, True),
    "drained": (f"IDLE+DRAIN (reason: {REASON})", False, True),
    "maint-active": ("IDLE+MAINTENANCE", True, False),
    "fail": ("IDLE+FAIL (reason: gpuready: failing)", False, False),
    "not-responding": ("MIXED+NOT_RESPONDING", False, False),
    "down": ("DOWN+NOT_RESPONDING (reason: Not responding)", False, False),
}
JSON = "sinfo --json"
TEXT = "sinfo -h -N -o %N|%T|%E|%P"


def one(nodes: list[SlurmNode]) -> SlurmNode:
    assert len(nodes) == 1, nodes
    return nodes[0]


@pytest.mark.parametrize("name", sorted(STATES))
def test_each_recorded_state_from_json(name: str) -> None:
    words, usable, drained = STATES[name]
    answer = recorded(f"sinfo-{name}")
    assert recorded_argv(f"sinfo-{name}") == ["sinfo", "--json"]
    node = one(parse_sinfo_json(answer.stdout))
    # The maintenance reservation's node also has RESERVED in JSON (not in %T).
    assert node.words == (words + "+RESERVED" if name == "maint-active" else words)
    assert (node.name, node.partitions) == ("n1", ("debug", "gpu"))
    assert (node.usable, node.drained) == (usable, drained)


@pytest.mark.parametrize("name", sorted(STATES))
def test_each_recorded_state_from_text(name: str) -> None:
    words, usable, drained = STATES[name]
    assert " ".join(recorded_argv(f"sinfo-{name}-text")) == TEXT
    node = one(parse_sinfo_text(recorded(f"sinfo-{name}-text").stdout))
    assert node.words == words
    assert (node.name, node.partitions) == ("n1", ("debug", "gpu"))
    assert (node.usable, node.drained) == (usable, drained)


def test_what_t_prints_for_each_state() -> None:
    printed = {name: recorded(f"sinfo-{name}-text").stdout.split("|")[1] for name in STATES}
    assert printed == {
        "idle": "idle",
        "mixed": "mixed",
        "allocated": "allocated",
        "draining": "draining",
        "drained": "drained",
        "maint-active": "maint",
        "fail": "fail",
        "not-responding": "mixed*",
        "down": "down*",
    }


def test_a_down_node_drained_too() -> None:
    from_json = one(parse_sinfo_json(recorded("sinfo-down-drained").stdout))
    assert from_json.words == "DOWN+DRAIN+NOT_RESPONDING (reason: gpuready: down and drained)"
    # %T says "drained*": the text form cannot tell it was down; unusable either way.
    text = recorded("sinfo-down-drained-text").stdout
    assert text.startswith("n1|drained*|gpuready: down and drained|debug*\n")
    from_text = one(parse_sinfo_text(text))
    assert from_text.words == "IDLE+DRAIN+NOT_RESPONDING (reason: gpuready: down and drained)"
    assert not from_json.usable
    assert not from_text.usable
    assert from_json.drained
    assert from_text.drained


def test_a_maintenance_reservation_not_started_yet_leaves_the_node_idle() -> None:
    assert one(parse_sinfo_json(recorded("sinfo-maint").stdout)).words == "IDLE"
    assert one(parse_sinfo_text(recorded("sinfo-maint-text").stdout)).words == "IDLE"


def test_sinfo_N_json_in_22_05_is_the_same_node_list() -> None:
    assert recorded_argv("sinfo-idle-json-nodes") == ["sinfo", "-N", "--json"]
    assert parse_sinfo_json(recorded("sinfo-idle-json-nodes").stdout) == parse_sinfo_json(
        recorded("sinfo-idle").stdout
    )


def test_22_05_json_has_state_a_word_and_flags_beside_it() -> None:
    entry = json.loads(recorded("sinfo-draining").stdout)["nodes"][0]
    assert (entry["state"], entry["state_flags"]) == ("allocated", ["DRAIN"])


def test_23_02_sinfo_records_one_per_partition_are_one_node() -> None:
    text = (FIXTURES / "single-public-sinfo-23.02.json").read_text(encoding="utf-8")
    records = json.loads(text)["sinfo"]
    assert [r["partition"]["name"] for r in records] == ["hw", "hw-h"]
    assert records[0]["node"]["state"] == ["MIXED"]
    assert parse_sinfo_json(text) == [SlurmNode("cs11", "MIXED", (), None, ("hw", "hw-h"))]


def test_25_11_scontrol_node_json_has_the_state_as_a_list() -> None:
    text = (FIXTURES / "single-public-scontrol-show-node-25.11.json").read_text(encoding="utf-8")
    node = one(parse_sinfo_json(text))
    assert node == SlurmNode("compute-0", "DOWN", ("DYNAMIC_NORM",), "Not responding", ("compute",))
    assert node.words == "DOWN+DYNAMIC_NORM (reason: Not responding)"
    assert not node.usable


def test_a_23_02_drained_node_reads_its_reason_description() -> None:
    # The 23.02 record of the public file, drained as "scontrol update" would.
    data = json.loads((FIXTURES / "single-public-sinfo-23.02.json").read_text(encoding="utf-8"))
    record = data["sinfo"][0]
    record["node"]["state"] = ["IDLE", "DRAIN"]
    record["reason"]["description"] = REASON
    data["sinfo"] = [record]
    node = one(parse_sinfo_json(json.dumps(data)))
    assert node.words == f"IDLE+DRAIN (reason: {REASON})"
    assert node.drained
    assert not node.usable


def test_no_controller_is_an_error_though_sinfo_exits_0() -> None:
    answer = recorded("sinfo-no-controller")
    assert answer.returncode == 0
    assert json.loads(answer.stdout)["nodes"] == []
    with pytest.raises(SlurmError) as caught:
        parse_sinfo_json(answer.stdout)
    assert str(caught.value) == (
        "sinfo --json failed: Unspecified error (is slurmctld up and reachable?)"
    )


@pytest.mark.parametrize("text", ["", "sinfo: error: boom", "[]", '{"meta": {}}'])
def test_json_that_is_not_sinfos_is_an_error(text: str) -> None:
    with pytest.raises(SlurmError, match=r"^sinfo --json gave"):
        parse_sinfo_json(text)


def test_text_rows_without_the_partition_are_read_too() -> None:
    assert parse_sinfo_text("gpu01|down*|Not responding\ngpu02|idle|none\n") == [
        SlurmNode("gpu01", "DOWN", ("NOT_RESPONDING",), "Not responding", ()),
        SlurmNode("gpu02", "IDLE", (), None, ()),
    ]


def test_text_rows_keep_a_reason_with_bars_and_skip_blank_lines() -> None:
    text = "\ngpu01|drained|gpuready: a|b|batch*\ngpu01|drained|gpuready: a|b|long\n"
    assert parse_sinfo_text(text) == [
        SlurmNode("gpu01", "IDLE", ("DRAIN",), "gpuready: a|b", ("batch", "long"))
    ]


@pytest.mark.parametrize(
    ("printed", "words", "usable"),
    [
        # sinfo(1) NODE STATE CODES: suffixes not recorded here (no power saving, no reboot).
        ("idle~", "IDLE+POWERED_DOWN", False),
        ("idle%", "IDLE+POWERING_DOWN", False),
        ("idle#", "IDLE+POWERING_UP", True),
        ("mixed-", "MIXED+PLANNED", True),
        ("allocated+", "ALLOCATED+COMPLETING", True),
        ("idle@", "IDLE+REBOOT_REQUESTED", True),
        ("drained*", "IDLE+DRAIN+NOT_RESPONDING", False),
        ("inval", "INVAL", False),
        ("future", "FUTURE", False),
        ("unknown*", "UNKNOWN+NOT_RESPONDING", False),
    ],
)
def test_text_suffixes_are_flags(printed: str, words: str, usable: bool) -> None:
    node = one(parse_sinfo_text(f"gpu01|{printed}|none|batch\n"))
    assert (node.words, node.usable) == (words, usable)


# ------------------------------------------------------------------ list_nodes


def test_nodes_come_from_sinfo_json_filtered_here() -> None:
    fake = FakeSlurm({JSON: recorded("sinfo-drained")})
    assert [n.name for n in list_nodes(fake)] == ["n1"]
    assert [n.name for n in list_nodes(fake, partition="gpu")] == ["n1"]
    assert list_nodes(fake, partition="other") == []
    assert [n.name for n in list_nodes(fake, names=["n1", "n9"])] == ["n1"]
    assert list_nodes(fake, names=["n9"]) == []
    assert fake.commands() == [JSON] * 5


def test_slurm_without_json_falls_back_to_the_text_form() -> None:
    # getopt's words for an option Slurm does not have (recorded with --jsonx).
    unknown = recorded("sinfo-unknown-option")
    without_json = CommandResult(
        1, "", unknown.stderr.replace("--jsonx", "--json").replace("jsonx", "json")
    )
    fake = FakeSlurm({JSON: without_json, TEXT: recorded("sinfo-down-text")})
    nodes = list_nodes(fake, partition="debug")
    assert [n.words for n in nodes] == ["DOWN+NOT_RESPONDING (reason: Not responding)"]
    assert fake.commands() == [JSON, TEXT]


def test_no_controller_on_the_text_form_is_an_error() -> None:
    fake = FakeSlurm(
        {
            JSON: CommandResult(1, "", "sinfo: unrecognized option '--json'\n"),
            TEXT: recorded("sinfo-no-controller-text"),
        }
    )
    with pytest.raises(SlurmError) as caught:
        list_nodes(fake)
    assert str(caught.value) == (
        "sinfo -h -N failed: slurm_load_partitions: Unable to contact slurm controller "
        "(connect failure)"
    )


def test_a_json_failure_that_is_not_a_missing_option_does_not_fall_back() -> None:
    fake = FakeSlurm({JSON: recorded("sinfo-no-controller-text")})
    with pytest.raises(SlurmError, match=r"^sinfo --json failed: slurm_load_partitions: Unable"):
        list_nodes(fake)
    assert fake.commands() == [JSON]


@pytest.mark.parametrize(
    ("said", "unsupported"),
    [
        ("sinfo: unrecognized option '--json'", True),
        ("squeue: invalid option -- 'json'", True),
        ("sinfo: error: cannot find serializer plugin for application/json", True),
        ("sinfo: error: Unable to find data_parser plugin", True),
        ("slurm_load_partitions: Unable to contact slurm controller (connect failure)", False),
        ("sinfo: unrecognized option '--jsonx'", True),
        ("sinfo: unrecognized option '--foo'", False),
    ],
)
def test_which_failures_mean_no_json(said: str, unsupported: bool) -> None:
    assert json_unsupported(said) is unsupported
