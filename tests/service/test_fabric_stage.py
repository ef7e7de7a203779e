"""certify's stage across nodes, its parts: the kinds asked, the fabric, the runner per reach."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from validator.error_tree import BadInputError
from validator.judge.catalog import load_catalog
from validator.model import HostSpec, NodeFacts, NodeResult, TransportName, Verdict
from validator.remote.cross_node_runner import StepRunner
from validator.remote.cross_node_ssh import SshLauncher
from validator.remote.ssh import SshTransport
from validator.service.fabric_stage import (
    check_reach,
    fabric_for,
    parse_kinds,
    recounted,
    run_fabric_stage,
    stage_runner,
)
from validator.slurm.cross_node_srun import SlurmRunner
from validator.slurm.job_fanout import SlurmOptions


def _node(name: str, sku: str | None, verdict: Verdict = Verdict.CERTIFIED) -> NodeResult:
    return NodeResult(name, verdict, NodeFacts(name, source="simulate"), (), sku=sku)


def test_kinds_in_the_stage_order_and_checked() -> None:
    assert parse_kinds("nccl, rdma") == ("rdma", "nccl")
    assert parse_kinds("rdma") == ("rdma",)
    for bad in ("", " , ", "rdma,ping", "RDMA"):
        with pytest.raises(BadInputError, match="rdma and/or nccl"):
            parse_kinds(bad)


def test_fabric_from_the_certified_nodes_sku() -> None:
    catalog = load_catalog()
    assert fabric_for([_node("a", "h100-sxm"), _node("b", "h200-sxm")], catalog) == "ndr-400-ib"
    assert fabric_for([_node("a", "a100-sxm4-80gb")], catalog) == "hdr-200-ib"
    # A node not certified does not vote; two fabrics, or a row with none, decide nothing.
    failed = _node("c", "a100-sxm4-80gb", Verdict.NOT_CERTIFIED)
    assert fabric_for([_node("a", "h100-sxm"), failed], catalog) == "ndr-400-ib"
    assert fabric_for([_node("a", "h100-sxm"), _node("b", "a100-sxm4-80gb")], catalog) is None
    assert fabric_for([_node("a", "t4")], catalog) is None
    assert fabric_for([_node("a", None)], catalog) is None


def test_no_fabric_stage_not_run_nodes_stand() -> None:
    results = [_node("a", "t4"), _node("b", "t4")]

    def no_runner() -> object:
        raise AssertionError("no runner is opened when the stage does not run")

    judged, stage = run_fabric_stage(
        results,
        [],
        no_runner,  # type: ignore[arg-type]
        ("rdma",),
        None,
        catalog=load_catalog(),
    )
    assert judged == tuple(results)
    (outcome,) = stage.outcomes
    assert outcome.skipped.startswith("no fabric")
    assert outcome.unresolved[0].hosts == ("a", "b")


def test_counts_follow_the_stage() -> None:
    from validator.model import FleetSummary

    summary = FleetSummary(hosts=3, certified=3, not_certified=0, unknown=0)
    after = [
        _node("a", None),
        _node("b", None, Verdict.NOT_CERTIFIED),
        _node("c", None, Verdict.UNKNOWN),
    ]
    assert dataclasses.astuple(recounted(summary, after))[:4] == (3, 1, 1, 1)  # type: ignore[arg-type]
    assert recounted(None, after) is None


def _hosts(*transports: str) -> list[HostSpec]:
    return [
        HostSpec(f"h{i}", f"h{i}", vars={"gpuready_transport": t} if t else {})
        for i, t in enumerate(transports)
    ]


def test_reach_checked_before_anything_runs() -> None:
    check_reach(None, TransportName.SSH, _hosts("", ""))  # SSH
    check_reach(None, TransportName.LOCAL, _hosts("", "local"))  # all local
    check_reach(SlurmOptions(spool="/tmp"), TransportName.SSH, _hosts("ansible"))  # Slurm
    for hosts, default in (
        (_hosts("local", ""), TransportName.SSH),
        (_hosts(""), TransportName.ANSIBLE),
    ):
        with pytest.raises(BadInputError, match="--cross-node reaches the hosts"):
            check_reach(None, default, hosts)


def test_runner_per_reach(tmp_path: Path) -> None:
    made: list[SshTransport] = []

    def ssh() -> SshTransport:
        made.append(SshTransport(known_hosts=tmp_path / "known_hosts"))
        return made[-1]

    with stage_runner(
        SlurmOptions(spool=str(tmp_path), partition="gpu"), TransportName.SSH, _hosts(""), ssh
    ) as runner:
        assert isinstance(runner, SlurmRunner)
        assert runner.options.partition == "gpu"
    with stage_runner(None, TransportName.LOCAL, _hosts("", ""), ssh) as runner:
        assert isinstance(runner, StepRunner)
        assert not made
    with stage_runner(None, TransportName.SSH, _hosts("", ""), ssh) as runner:
        assert isinstance(runner, StepRunner)
        assert isinstance(runner.launcher, SshLauncher)
    assert len(made) == 1


def test_slurm_mpi_type_is_slurms_own_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # srun reads SLURM_MPI_TYPE as --mpi; the stage's explicit --mpi would override it.
    options = SlurmOptions(spool=str(tmp_path), partition="gpu")
    monkeypatch.delenv("SLURM_MPI_TYPE", raising=False)
    with stage_runner(options, TransportName.SSH, _hosts(""), SshTransport) as runner:
        assert isinstance(runner, SlurmRunner)
        assert runner.options.mpi == "pmix"
    monkeypatch.setenv("SLURM_MPI_TYPE", "pmi2")
    with stage_runner(options, TransportName.SSH, _hosts(""), SshTransport) as runner:
        assert isinstance(runner, SlurmRunner)
        assert runner.options.mpi == "pmi2"
    # "none", which some sites export, would make every rank a world of one: not taken.
    monkeypatch.setenv("SLURM_MPI_TYPE", "none")
    with stage_runner(options, TransportName.SSH, _hosts(""), SshTransport) as runner:
        assert isinstance(runner, SlurmRunner)
        assert runner.options.mpi == "pmix"


def test_a_local_step_is_told_its_host_and_group() -> None:
    with stage_runner(None, TransportName.LOCAL, _hosts("", ""), SshTransport) as runner:
        assert isinstance(runner, StepRunner)
        env_for = runner.launcher.env_for  # type: ignore[attr-defined]
        assert env_for(("n1",)) == {"GPUREADY_STEP_HOST": "n1", "GPUREADY_STEP_GROUP": "n1"}
        assert env_for(("n3", "n1", "n2")) == {
            "GPUREADY_STEP_HOST": "n3",
            "GPUREADY_STEP_GROUP": "n3,n1,n2",
        }
