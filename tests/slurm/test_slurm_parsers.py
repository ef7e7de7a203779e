"""Slurm's outputs from the four-node test cluster (tests/fixtures/slurm/SOURCES.md), parsed.

tests/slurm/test_slurm_nodes.py and test_slurm_jobs.py read the one-node recordings
(``single-*``); these are the multi-node cluster's, where one snapshot holds an
allocated, a drained, a down and an idle node at once.

Every file here is Slurm 22.05.8's own output (SOURCES.md says how each was made);
the commands run against a fake runner that answers with those recordings, so what is
tested is our reading of Slurm, not Slurm.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from validator.error_tree import BadInputError
from validator.slurm import CommandResult, SlurmError
from validator.slurm.hostlist import expand_hostlist
from validator.slurm.jobs import (
    cancel,
    job_states,
    parse_sbatch,
    parse_show_job,
    parse_squeue_json,
    submit,
)
from validator.slurm.nodes import list_nodes, parse_sinfo_json, parse_sinfo_text

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm"


def recorded(name: str) -> str:
    return (FIXTURES / name).read_text()


class FakeSlurm:
    """Answers argument lists from a table of (prefix -> result); records every call."""

    def __init__(self, answers: dict[tuple[str, ...], CommandResult]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        for prefix, result in sorted(self.answers.items(), key=lambda item: -len(item[0])):
            if tuple(argv[: len(prefix)]) == prefix:
                return result
        return CommandResult(1, "", f"unexpected command {list(argv)}")


@pytest.mark.parametrize("form", ["json", "text"])
def test_node_states_both_forms_agree(form: str) -> None:
    parse = parse_sinfo_json if form == "json" else parse_sinfo_text
    name = "sinfo-json-down.json" if form == "json" else "sinfo-nodes-down.txt"
    nodes = {node.name: node for node in parse(recorded(name))}
    assert set(nodes) == {"node01", "node02", "node03", "node04"}
    assert nodes["node01"].state == "ALLOCATED"
    assert nodes["node01"].usable  # busy, not broken: a job waits for it
    assert nodes["node02"].drained
    assert not nodes["node02"].usable
    assert nodes["node02"].reason == "gpuready: xid 79 fell off the bus"
    assert nodes["node03"].state == "DOWN"
    assert "NOT_RESPONDING" in nodes["node03"].flags
    assert nodes["node03"].words == "DOWN+NOT_RESPONDING (reason: Not responding)"
    assert not nodes["node03"].usable
    assert nodes["node04"].usable
    assert nodes["node04"].reason is None


def test_draining_is_a_drain_under_jobs() -> None:
    json_nodes = {n.name: n for n in parse_sinfo_json(recorded("sinfo-json-draining.json"))}
    text_nodes = {n.name: n for n in parse_sinfo_text(recorded("sinfo-nodes-draining.txt"))}
    for nodes in (json_nodes, text_nodes):
        assert nodes["node01"].drained
        assert nodes["node01"].state == "ALLOCATED"
        assert nodes["node01"].reason == "gpuready: test"


def test_slurm_23_lists_states() -> None:
    # The shape 23.02 and later print; the values as 22.05 recorded them.
    text = (
        '{"nodes": [{"name": "gpu1", "state": ["IDLE", "DRAIN"], "reason": "gpuready: x",'
        ' "partitions": ["gpu"]}, {"name": "gpu2", "state": ["DOWN", "NOT_RESPONDING"],'
        ' "reason": "Not responding", "partitions": ["gpu"]}]}'
    )
    nodes = {node.name: node for node in parse_sinfo_json(text)}
    assert nodes["gpu1"].state == "IDLE"
    assert nodes["gpu1"].drained
    assert nodes["gpu2"].words == "DOWN+NOT_RESPONDING (reason: Not responding)"


def test_list_nodes_falls_back_to_text_where_json_is_unknown() -> None:
    slurm = FakeSlurm(
        {
            ("sinfo", "--json"): CommandResult(1, "", "sinfo: unrecognized option '--json'"),
            ("sinfo", "-h"): CommandResult(0, recorded("sinfo-nodes-drained.txt")),
        }
    )
    nodes = list_nodes(slurm, names=["node02", "node04"])
    assert [node.name for node in nodes] == ["node02", "node04"]
    assert nodes[0].drained
    assert slurm.calls[1][:3] == ["sinfo", "-h", "-N"]


def test_list_nodes_names_a_failing_sinfo() -> None:
    slurm = FakeSlurm(
        {("sinfo",): CommandResult(1, "", "sinfo: error: Unable to contact slurm controller")}
    )
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        list_nodes(slurm)


def test_squeue_json_keeps_each_jobs_state_and_reason() -> None:
    jobs = {
        job.job_id: job for job in parse_squeue_json(recorded("squeue-json-pending-running.json"))
    }
    assert jobs["1"].state == "RUNNING"
    assert not jobs["1"].finished
    assert jobs["1"].nodes == ("node01",)
    assert jobs["2"].words == "PENDING (Resources)"
    assert jobs["3"].reason == "ReqNodeNotAvail"


@pytest.mark.parametrize(
    ("name", "state", "reason", "finished"),
    [
        ("scontrol-show-job-pending-resources.txt", "PENDING", "Resources", False),
        ("scontrol-show-job-running.txt", "RUNNING", None, False),
        ("scontrol-show-job-completed.txt", "COMPLETED", None, True),
        ("scontrol-show-job-cancelled.txt", "CANCELLED", None, True),
        ("scontrol-show-job-timeout.txt", "TIMEOUT", None, True),
        ("scontrol-show-job-failed.txt", "FAILED", "NonZeroExitCode", True),
        ("scontrol-show-job-node-fail.txt", "NODE_FAIL", "NodeDown", True),
    ],
)
def test_show_job(name: str, state: str, reason: str | None, finished: bool) -> None:
    job = parse_show_job(recorded(name))
    assert job is not None
    assert job.state == state
    assert job.finished is finished
    if reason is not None:
        assert job.reason == reason


def test_show_job_reason_with_nodes_and_an_unknown_job() -> None:
    job = parse_show_job(recorded("scontrol-show-job-pending-reqnodenotavail.txt"))
    assert job is not None
    assert job.reason == "ReqNodeNotAvail,_UnavailableNodes:node02"
    assert parse_show_job(recorded("scontrol-show-job-unknown.stderr.txt")) is None


def test_job_states_asks_scontrol_for_what_squeue_no_longer_lists() -> None:
    slurm = FakeSlurm(
        {
            ("squeue", "--json"): CommandResult(0, recorded("squeue-json-pending-running.json")),
            ("scontrol", "-o", "show", "job", "7"): CommandResult(
                0, recorded("scontrol-show-job-node-fail.txt")
            ),
            ("scontrol", "-o", "show", "job", "9"): CommandResult(
                1, "", recorded("scontrol-show-job-unknown.stderr.txt")
            ),
            ("sacct",): CommandResult(1, "", recorded("sacct-no-accounting.stderr.txt")),
        }
    )
    states = job_states(["1", "7", "9"], slurm)
    assert states["1"].state == "RUNNING"
    assert states["7"].state == "NODE_FAIL"
    assert states["9"].state == "UNKNOWN"
    assert states["9"].finished  # no result can come from it: never a pass
    assert "no longer knows job 9" in (states["9"].reason or "")


def test_sbatch_and_its_refusal() -> None:
    assert parse_sbatch(recorded("sbatch-parsable.txt")) == "1"
    assert parse_sbatch("123;gpuready\n") == "123"
    with pytest.raises(SlurmError, match="printed no job id"):
        parse_sbatch("")
    refused = FakeSlurm(
        {("sbatch",): CommandResult(1, "", "sbatch: error: invalid partition specified: nope")}
    )
    with pytest.raises(SlurmError, match="invalid partition specified: nope; check --partition"):
        submit("/spool/job.sh", ["--partition=nope"], refused, args=["node01"])
    assert refused.calls[0] == [
        "sbatch", "--parsable", "--partition=nope", "/spool/job.sh", "node01",
    ]  # fmt: skip


def test_hostlists_are_expanded_by_slurm() -> None:
    slurm = FakeSlurm(
        {
            ("scontrol", "show", "hostnames"): CommandResult(
                0, recorded("scontrol-show-hostnames.txt")
            )
        }
    )
    assert expand_hostlist("node[01-03],other", slurm) == ["node01", "node02", "node03", "other"]
    assert slurm.calls == [["scontrol", "show", "hostnames", "node[01-03],other"]]
    with pytest.raises(BadInputError, match="empty Slurm host-list"):
        expand_hostlist("  ", slurm)
    bad = FakeSlurm({("scontrol",): CommandResult(1, "", "scontrol: error: Invalid hostlist")})
    with pytest.raises(BadInputError, match="cannot expand the host-list"):
        expand_hostlist("node[01-", bad)


def test_cancel_tolerates_jobs_already_gone() -> None:
    gone = FakeSlurm(
        {
            ("scancel",): CommandResult(
                1, "", "scancel: error: Kill job error on job id 5: Invalid job id specified"
            )
        }
    )
    cancel(["5"], gone)
    refused = FakeSlurm(
        {("scancel",): CommandResult(1, "", "scancel: error: Access/permission denied")}
    )
    with pytest.raises(SlurmError, match="permission denied"):
        cancel(["5"], refused)


def test_the_drain_reader_takes_scontrols_one_line_form_too() -> None:
    from validator.slurm import parse_show_node

    node = parse_show_node(recorded("scontrol-show-node-drained.txt"), "node02")
    assert node.state == "IDLE+DRAIN"
    assert node.reason == "gpuready: xid 79 fell off the bus"  # "[root@...]" taken off
    assert node.ours
    idle = parse_show_node(recorded("scontrol-show-node-idle.txt"), "node01")
    assert idle.reason is None
    assert not idle.drained
