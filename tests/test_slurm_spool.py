"""A Slurm submission's folder: saved, found by token or job id, refused when damaged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from validator.errors import BadInputError
from validator.remote.slurm_fanout import agent_outcome
from validator.remote.slurm_spool import (
    NodeOutput,
    Submission,
    find,
    finished_nodes,
    new_submission,
    read_output,
    save,
)
from validator.remote.transport import Phase


def _saved(tmp_path: Path) -> Submission:
    directory = new_submission(tmp_path)
    submission = Submission(
        directory=directory,
        nodes=("gpu001", "gpu002", "gpu003"),
        jobs={"gpu001": "41", "gpu002": "41"},
        skipped={"gpu003": "Slurm will not run it: DOWN+NOT_RESPONDING"},
        options={"policy_path": None, "hosts": []},
        created_at="2026-12-02T00:00:00Z",
    )
    save(submission)
    return submission


def test_found_by_its_token_and_by_its_job_id(tmp_path: Path) -> None:
    submission = _saved(tmp_path)
    by_token = find(tmp_path, submission.token)
    by_job = find(tmp_path, "41")
    assert by_token == by_job
    assert by_job.nodes == submission.nodes
    assert by_job.jobs == {"gpu001": "41", "gpu002": "41"}
    assert by_job.skipped == submission.skipped
    assert by_job.job_ids == ("41",)


@pytest.mark.parametrize(
    ("name", "said"),
    [("42", "no gpuready submission 42"), ("../etc", "neither a job id nor")],
)
def test_an_unknown_or_odd_name_is_refused(tmp_path: Path, name: str, said: str) -> None:
    _saved(tmp_path)
    with pytest.raises(BadInputError, match=said):
        find(tmp_path, name)


@pytest.mark.parametrize(
    "damage",
    [
        "not json",
        json.dumps({"spool_version": 99, "nodes": []}),
        json.dumps({"spool_version": 1, "nodes": "gpu001"}),
        json.dumps({"spool_version": 1, "nodes": [], "jobs": {"gpu001": 41}}),
    ],
)
def test_a_damaged_request_is_one_line_naming_the_file(tmp_path: Path, damage: str) -> None:
    submission = _saved(tmp_path)
    (submission.directory / "request.json").write_text(damage)
    with pytest.raises(BadInputError, match=r"request\.json") as caught:
        find(tmp_path, "41")
    assert "\n" not in str(caught.value)


def test_a_node_is_done_only_once_its_status_is_there(tmp_path: Path) -> None:
    submission = _saved(tmp_path)
    out = submission.out_dir
    (out / "gpu001.json").write_text("{}")  # output without status: still running
    assert finished_nodes(submission) == set()
    assert read_output(submission, "gpu001").rc is None
    (out / "gpu001.stderr").write_text("warning\n")
    (out / "gpu001.rc").write_text("0\n")
    assert finished_nodes(submission) == {"gpu001"}
    assert read_output(submission, "gpu001") == NodeOutput("gpu001", 0, b"{}", "warning\n")


def test_an_unwritable_spool_is_bad_input(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(BadInputError, match=r"--spool .* cannot be written"):
        new_submission(blocker)


@pytest.mark.parametrize(
    ("output", "phase", "said"),
    [
        (NodeOutput("n1", 3, b"", "x\ngpuready-agent: error: NVML said no\n"), Phase.RUN, "NVML"),
        (NodeOutput("n1", 127, b"", ""), Phase.RUN, "exited with status 127"),
        (NodeOutput("n1", 0, b"{half", ""), Phase.PARSE, "no valid JSON"),
        (NodeOutput("n1", 0, b'{"hostname": 5}', ""), Phase.PARSE, "do not fit the model"),
    ],
)
def test_what_a_node_left_becomes_an_outcome_that_says_why(
    output: NodeOutput, phase: Phase, said: str
) -> None:
    outcome = agent_outcome(output)
    assert outcome.facts is None
    assert outcome.phase is phase
    assert outcome.error is not None
    assert said in outcome.error
