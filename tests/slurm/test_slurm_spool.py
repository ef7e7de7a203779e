"""A Slurm submission's folder: saved, found by token or job id, refused when damaged."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from validator.error_tree import BadInputError
from validator.model import HostSpec, NodeFacts, NodeResult
from validator.remote.transport import AgentRequest, Phase
from validator.slurm import CommandResult, SlurmError, job_fanout
from validator.slurm.job_fanout import SlurmOptions, Targets, agent_outcome, submit_run
from validator.slurm.nodes import SlurmNode
from validator.slurm.submission_spool import (
    NodeOutput,
    Submission,
    find,
    finished_nodes,
    new_submission,
    read_output,
    save,
)


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
    (out / "gpu001.stdout").write_text("{}")  # output without status: still running
    assert finished_nodes(submission) == set()
    assert read_output(submission, "gpu001").rc is None
    (out / "gpu001.stderr").write_text("warning\n")
    (out / "gpu001.rc").write_text("0\n")
    assert finished_nodes(submission) == {"gpu001"}
    assert read_output(submission, "gpu001") == NodeOutput("gpu001", 0, b"{}", "warning\n")


def test_an_older_spools_json_output_is_still_read(tmp_path: Path) -> None:
    """Spools written before the agent packed its facts kept them as <node>.json."""
    submission = _saved(tmp_path)
    out = submission.out_dir
    (out / "gpu001.json").write_text('{"older": true}')
    (out / "gpu001.rc").write_text("0\n")
    assert read_output(submission, "gpu001").stdout == b'{"older": true}'
    (out / "gpu001.stdout").write_text("packed")  # a spool has one or the other; ours first
    assert read_output(submission, "gpu001").stdout == b"packed"


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


class _Sbatch:
    """sbatch giving job ids in turn (refusing the ``refuse_at``-th), scancel noting its ids."""

    def __init__(self, refuse_at: int | None = None) -> None:
        self.submitted = 0
        self.refuse_at = refuse_at
        self.cancelled: list[str] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        if argv[0] == "scancel":
            self.cancelled += [a for a in argv[1:] if a.isdigit()]
            return CommandResult(0)
        assert argv[0] == "sbatch"
        if self.submitted == self.refuse_at:
            return CommandResult(1, "", "sbatch: error: QOSMaxSubmitJobPerUserLimit")
        self.submitted += 1
        return CommandResult(0, f"{100 + self.submitted}\n")


def _campaign(tmp_path: Path, count: int) -> tuple[list[HostSpec], Targets, SlurmOptions]:
    names = [f"gpu{i:04d}" for i in range(count)]
    targets = Targets(tuple(SlurmNode(name, "IDLE", (), None, ("gpu",)) for name in names))
    options = SlurmOptions(spool=str(tmp_path), partition="gpu", campaign=True)
    return [HostSpec(name, name) for name in names], targets, options


def test_a_campaign_writes_its_request_once_not_after_every_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saves: list[int] = []

    def counted(submission: Submission, new_jobs: Sequence[str] | None = None) -> None:
        saves.append(len(submission.jobs))
        save(submission, new_jobs)

    monkeypatch.setattr(job_fanout, "save", counted)
    monkeypatch.setattr(job_fanout, "SAVE_EVERY_S", 3600.0)
    hosts, targets, options = _campaign(tmp_path, 300)
    submission = submit_run(hosts, targets, AgentRequest(), 60.0, options, {}, _Sbatch())
    assert saves == [0, 300]  # before any sbatch, and once all are in
    assert len(submission.job_ids) == 300
    # Each node's agent packs its facts: a tenth of the bytes on the shared filesystem.
    job_script = (submission.directory / "job.sh").read_text()
    assert job_script.count("--packed") >= 1
    assert "--xid-window-hours" in job_script
    for job in ("101", "250", "400"):  # every job id is linked to the folder
        assert find(tmp_path, job).jobs == submission.jobs


def test_a_campaign_cut_short_cancels_the_jobs_not_yet_written_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_fanout, "SAVE_EVERY_S", 3600.0)
    hosts, targets, options = _campaign(tmp_path, 50)
    slurm = _Sbatch(refuse_at=30)
    with pytest.raises(SlurmError, match="QOSMaxSubmitJobPerUserLimit"):
        submit_run(hosts, targets, AgentRequest(), 60.0, options, {}, slurm)
    assert sorted(slurm.cancelled, key=int) == [str(101 + i) for i in range(30)]


def _never_judged(host: HostSpec, facts: NodeFacts) -> NodeResult:
    raise AssertionError(f"{host.name} judged, with {facts.hostname}'s facts")


def test_many_live_jobs_are_asked_of_squeue_a_window_at_a_time(tmp_path: Path) -> None:
    submission = _saved(tmp_path)
    run = job_fanout._Follow(
        submission, {}, AgentRequest(), _never_judged, 60.0, job_fanout._Silent(), _Sbatch()
    )
    live = [str(1000 + i) for i in range(1200)]
    per_look = job_fanout.STATES_PER_LOOK
    looks = [job_fanout._asked(run, live, final=False) for _ in range(3)]
    assert all(len(asked) == per_look for asked in looks)
    assert {job for asked in looks for job in asked} == set(live)  # three looks cover all
    assert job_fanout._asked(run, live, final=True) == live
    assert job_fanout._asked(run, live[:10], final=False) == live[:10]


def test_a_packed_agent_run_by_step_sh_is_read_back_as_its_facts(tmp_path: Path) -> None:
    """The real agent, packed, through the step script into the spool, and judged from there."""
    import subprocess
    import sys

    from tests.collecting import collect_simulated
    from validator.slurm.batch_script import STEP_SCRIPT

    submission = _saved(tmp_path)
    step = tmp_path / "step.sh"
    step.write_text(STEP_SCRIPT)
    agent = [sys.executable, "-m", "validator.node.agent", "--simulate", "healthy-8x-h100-sxm"]
    done = subprocess.run(
        ["sh", str(step), str(submission.out_dir), "gpu001", *agent, "--packed"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    output = read_output(submission, "gpu001")
    assert output.rc == 0
    assert output.stdout.count(b"\n") == 1  # one line of base64
    assert not output.stdout.startswith(b"{")
    outcome = agent_outcome(output)
    assert outcome.error is None, outcome.error
    assert outcome.facts is not None
    expected = collect_simulated("healthy-8x-h100-sxm")
    assert (outcome.facts.hostname, outcome.facts.gpus) == (expected.hostname, expected.gpus)


def test_files_planted_in_a_shared_spool_are_read_bounded_never_waited_on(
    tmp_path: Path,
) -> None:
    # The spool is on shared storage: a node (or anyone who can write there) may leave a
    # FIFO where the agent's stdout goes, or a stderr of gigabytes.
    submission = _saved(tmp_path)
    out = submission.out_dir
    os.mkfifo(out / "gpu001.stdout")
    with open(out / "gpu001.stderr", "wb") as stderr:
        stderr.truncate(8 << 30)  # sparse: 8 GiB said, nothing stored
        last = b"\nthe agent's last\n"
        stderr.seek((8 << 30) - len(last))
        stderr.write(last)
    (out / "gpu001.rc").write_text("0\n")
    output = read_output(submission, "gpu001")
    assert output.stdout == b""
    assert output.stderr.endswith("the agent's last\n")
    assert len(output.stderr) <= 64 * 1024
    assert "no valid JSON" in str(agent_outcome(output).error)


def test_an_exit_status_file_of_gigabytes_is_no_status(tmp_path: Path) -> None:
    submission = _saved(tmp_path)
    with open(submission.out_dir / "gpu001.rc", "wb") as rc:
        rc.truncate(4 << 30)
    assert read_output(submission, "gpu001").rc is None


def test_a_request_of_gigabytes_is_refused_unread(tmp_path: Path) -> None:
    submission = _saved(tmp_path)
    with open(submission.directory / "request.json", "wb") as request:
        request.truncate(4 << 30)
    with pytest.raises(BadInputError, match=r"request\.json is 4\.0 GiB, larger than the 16 MiB"):
        find(tmp_path, "41")


def test_more_output_than_any_agent_prints_is_no_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("validator.packed.AGENT_OUTPUT_LIMIT", 1024)
    outcome = agent_outcome(NodeOutput("gpu001", 0, b" " * 1025))
    assert outcome.facts is None
    assert "more than 1.0 KiB of output: no agent prints that much" in str(outcome.error)
