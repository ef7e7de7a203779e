"""The Slurm runner of the stage across nodes without a cluster: what it asks Slurm, and when.

A fake runner records every command and answers sbatch with job ids; sinfo's and
squeue's answers are given as the parsed states. The real cluster runs in
tests/e2e/test_cross_node_slurm.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from validator.remote.cross_node_runner import (
    CrossNodePlan,
    HostPlan,
    LaunchError,
    plan_from_mapping,
)
from validator.slurm import cross_node_srun
from validator.slurm.commands import CommandResult
from validator.slurm.cross_node_srun import (
    SlurmRunner,
    SrunOptions,
    export_option,
    minutes,
    node_name,
    srun_environment,
)
from validator.slurm.jobs import JobState
from validator.slurm.nodes import SlurmNode


class FakeSlurm:
    """Answers sbatch with 101, 102, ...; records every command."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []
        self.next_job = 101
        self.show_node = ""  # scontrol show node's answer

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.commands.append(list(argv))
        if argv[0] == "sbatch":
            self.next_job += 1
            return CommandResult(0, f"{self.next_job - 1}\n")
        if argv[:2] == ["scontrol", "-o"] or argv[:2] == ["scontrol", "show"]:
            return CommandResult(0, self.show_node)
        return CommandResult(0)

    def submitted(self) -> list[list[str]]:
        return [c for c in self.commands if c[0] == "sbatch"]

    def cancelled(self) -> list[str]:
        return [job for c in self.commands if c[0] == "scancel" for job in c[1:]]


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    fake = FakeSlurm()
    nodes = [SlurmNode(f"n{i}", "IDLE") for i in (1, 2, 3)] + [
        SlurmNode("n4", "DOWN", ("NOT_RESPONDING",), "Not responding")
    ]
    monkeypatch.setattr(
        cross_node_srun, "list_nodes", lambda runner, names: [n for n in nodes if n.name in names]
    )

    def states(ids: Sequence[str], runner: object) -> dict[str, JobState]:
        gone = set(fake.cancelled())
        return {job: JobState(job, "CANCELLED" if job in gone else "RUNNING") for job in ids}

    monkeypatch.setattr(cross_node_srun, "job_states", states)
    return fake


def plan():  # type: ignore[no-untyped-def]
    hosts = {f"n{i}": {"hcas": ["mlx5_0"]} for i in (1, 2, 3, 4)}
    return plan_from_mapping(hosts, duration_s=1, latency=False)


def refuse_steps(runner: SlurmRunner, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """No srun here: a step's start records its host and job, and refuses."""
    started: list[str] = []

    def start(host, argv, env):  # type: ignore[no-untyped-def]
        started.append(f"{host.name}@{runner.launcher._job(host.name)}")
        raise LaunchError("no srun in this test")

    monkeypatch.setattr(runner.launcher, "start", start)
    return started


def test_node_names_and_exports_are_checked_before_they_reach_slurm() -> None:
    assert node_name("gpu-01.rack7") == "gpu-01.rack7"
    for bad in ("gpu[01-02]", "a,b", "-w", "a b", "", "x\n"):
        with pytest.raises(LaunchError):
            node_name(bad)
    assert export_option({"NCCL_P2P_DISABLE": "1"}) == "--export=ALL,NCCL_P2P_DISABLE=1"
    with pytest.raises(LaunchError):
        export_option({"NCCL_IB_HCA": "mlx5_0,mlx5_1"})  # a comma would split Slurm's list
    with pytest.raises(LaunchError):
        export_option({"A=B": "1"})
    assert minutes(0) == "1"
    assert minutes(61) == "2"


def test_each_pair_gets_its_own_exclusive_job_cancelled_by_id_at_the_round_end(
    slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = SlurmRunner(SrunOptions(partition="gpu"), slurm)
    started = refuse_steps(runner, monkeypatch)
    records = runner.rdma_round([("n1", "n2"), ("n3", "n4")], plan(), time.monotonic() + 60)
    (sbatch,) = slurm.submitted()  # n4 is down: its pair is not submitted
    assert "--exclusive" in sbatch
    assert "--nodes=2" in sbatch
    assert "--nodelist=n1,n2" in sbatch
    assert "--partition=gpu" in sbatch
    assert started == ["n1@101", "n2@101"]  # each way's server, in the pair's job
    assert slurm.cancelled() == ["101"]  # by the id sbatch gave, nothing else
    assert not any(
        c[0] == "scancel" and len(c) > 1 and c[1].startswith("-") for c in slurm.commands
    )
    assert len(records[("n3", "n4")]) == 2  # each way
    for down in records[("n3", "n4")]:
        assert not down.completed
        assert "Slurm will not run n4: DOWN+NOT_RESPONDING" in down.detail


def test_an_allocation_that_does_not_start_is_cancelled_and_has_no_result(
    slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        cross_node_srun,
        "job_states",
        lambda ids, runner: {
            job: JobState(job, "CANCELLED" if job in slurm.cancelled() else "PENDING", "Resources")
            for job in ids
        },
    )
    runner = SlurmRunner(SrunOptions(allocation_wait_s=0.3), slurm)
    started = refuse_steps(runner, monkeypatch)
    records = runner.rdma_round([("n1", "n2")], plan(), time.monotonic() + 60)
    assert started == []
    for record in records[("n1", "n2")]:  # each way
        assert "did not start job 101 in time: PENDING (Resources)" in record.detail
    assert "101" in slurm.cancelled()


def test_ctrl_c_mid_round_cancels_the_rounds_jobs_and_goes_on(
    slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = SlurmRunner(SrunOptions(), slurm)

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.steps, "rdma_round", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.rdma_round([("n1", "n2"), ("n3", "n1")][:1], plan(), time.monotonic() + 60)
    assert slurm.cancelled() == ["101"]
    assert runner.submitted == ["101"]


def test_a_surrounding_jobs_slurm_settings_do_not_reach_srun() -> None:
    outer = {
        "SLURM_CONF": "/etc/slurm/x.conf",
        "SLURM_NTASKS": "64",
        "SLURM_JOB_ID": "9",
        "HOME": "/r",
    }
    assert srun_environment(outer) == {"SLURM_CONF": "/etc/slurm/x.conf", "HOME": "/r"}


def test_a_refused_scancel_is_tried_again_at_close(
    slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exclusive job left running holds its nodes until its --time: never forgotten."""
    refused = [True]

    def scancel_refused_once(argv: Sequence[str]) -> CommandResult:
        if argv[0] == "scancel" and refused[0]:
            refused[0] = False
            slurm.commands.append(list(argv))
            return CommandResult(1, "", "scancel: error: Unable to contact slurm controller\n")
        return slurm(argv)

    runner = SlurmRunner(SrunOptions(), scancel_refused_once)
    refuse_steps(runner, monkeypatch)
    runner.rdma_round([("n1", "n2")], plan(), time.monotonic() + 60)
    assert slurm.cancelled() == ["101"]  # refused
    runner.close()
    assert slurm.cancelled() == ["101", "101"]  # tried again, by its id


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def _recorded(name: str, renames: dict[str, str]) -> str:
    """A real recording with its node names made this test's (n1, n2)."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    for old, new in renames.items():
        text = text.replace(old, new)
    return text


GPU8 = _recorded(
    "scontrol-show-node-public-gres-gpu8.txt",
    {"cluster-h100-9-78": "n1", "cluster-h100-9-69": "n2"},
)
NO_GRES = _recorded("scontrol-show-node-idle.txt", {"node01": "n1"}) + _recorded(
    "scontrol-show-node-drained.txt", {"node02": "n2"}
)


def gpu_plan(count: int | None) -> CrossNodePlan:
    hosts = (HostPlan(n, n, ("mlx5_0",), (0,), gpu_count=count) for n in ("n1", "n2"))
    return CrossNodePlan(tuple(hosts), duration_s=1, latency=False)


def _sbatch_gres(slurm: FakeSlurm) -> list[str]:
    (sbatch,) = slurm.submitted()
    return [arg for arg in sbatch if arg.startswith(("--gres", "--gpus"))]


@pytest.mark.parametrize(
    ("show_node", "facts", "extra", "asked"),
    [
        (GPU8, 8, (), ["--gres=gpu:8"]),  # the nodes declare gpu:8: all of them
        (GPU8, 4, (), ["--gres=gpu:4"]),  # the facts' count, where they read fewer
        (GPU8, None, (), ["--gres=gpu:8"]),  # facts silent: what Slurm declares
        (NO_GRES, 8, (), []),  # the test cluster: Gres=(null), nothing asked
        ("", 8, (), []),  # scontrol said nothing: as before
        (GPU8, 8, ("--gres=gpu:2",), ["--gres=gpu:2"]),  # the operator's own, alone
    ],
)
def test_jobs_ask_for_the_nodes_gpus_where_slurm_declares_gpu_gres(
    slurm: FakeSlurm,
    monkeypatch: pytest.MonkeyPatch,
    show_node: str,
    facts: int | None,
    extra: tuple[str, ...],
    asked: list[str],
) -> None:
    slurm.show_node = show_node
    runner = SlurmRunner(SrunOptions(extra_sbatch=extra), slurm)
    refuse_steps(runner, monkeypatch)
    runner.rdma_round([("n1", "n2")], gpu_plan(facts), time.monotonic() + 60)
    assert _sbatch_gres(slurm) == asked
