"""The stage across nodes through a real Slurm cluster (validator.slurm.cross_node_srun).

slurmctld runs here and a slurmd in each test host (tests/hosts/slurmcluster.py). The
stand-ins of ib_write_bw, ib_write_lat, all_reduce_perf and alltoall_perf
(tests/fixtures/standins) are put on PATH inside every host (/usr/local/bin), with the
real recordings they print; a JSON map in the cluster's shared directory (bound into
every host at the same path) says which pair or node is slow, dead or hangs. The jobs,
the steps, the cancels, the planner, the parsers and the judge are the real ones.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.hosts.slurmcluster import SlurmCluster
from validator.model import Finding, GpuFacts, NodeFacts, NodeResult, NvmlStatus, Severity, Verdict
from validator.remote.cross_node_runner import CrossNodePlan, plan_from_mapping
from validator.service.cross_node_service import StageOptions, run_cross_node_stage
from validator.slurm.cross_node_srun import SlurmRunner, SrunOptions

pytestmark = [pytest.mark.hosts, pytest.mark.slurm]

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
STANDINS = FIXTURES / "standins"
IN_HOST = "/usr/local/share/gpuready-standins"


def _install_standins(cluster: SlurmCluster) -> None:
    """The stand-ins on PATH inside each host, their recordings beside them."""
    for host in cluster.live_hosts:
        bin_dir = host.root / "usr/local/bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        for item in STANDINS.iterdir():
            if item.is_file() and item.suffix in ("", ".py"):
                shutil.copy2(item, bin_dir / item.name)
        share = host.root / IN_HOST.lstrip("/")
        for folder in ("perftest", "nccl-tests-multinode"):
            if not (share / folder).is_dir():
                shutil.copytree(FIXTURES / folder, share / folder)


def standin_cluster(
    slurm_cluster: Callable[..., SlurmCluster], monkeypatch: pytest.MonkeyPatch
) -> SlurmCluster:
    """The session's four nodes with the stand-ins; Slurm's client commands pointed at it."""
    made = slurm_cluster(n_hosts=4)
    for name, value in made.env.items():
        monkeypatch.setenv(name, value)
    for name in list(os.environ):
        if name.startswith(("GPUREADY_STANDIN_", "GPUREADY_STEP_", "SLURM_JOB", "SLURM_STEP")):
            monkeypatch.delenv(name)
    _install_standins(made)
    return made


@pytest.fixture
def cluster(
    slurm_cluster: Callable[..., SlurmCluster], monkeypatch: pytest.MonkeyPatch
) -> SlurmCluster:
    """Four nodes with the stand-ins; Slurm's client commands pointed at the cluster."""
    return standin_cluster(slurm_cluster, monkeypatch)


def fabric_map(cluster: SlurmCluster, **table: Mapping[str, str]) -> Path:
    path = cluster.shared_dir / "fabric-map.json"
    path.write_text(json.dumps({"default": "healthy", **table}))
    return path


def options(table: Path, **extra: object) -> SrunOptions:
    env = {
        "GPUREADY_STANDIN_MAP": str(table),
        "GPUREADY_STANDIN_FIXTURES": IN_HOST,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        **extra.pop("env", {}),  # type: ignore[dict-item]
    }
    settings: dict[str, object] = {
        "partition": "gpu",
        "allocation_wait_s": 5.0,  # an idle node's job starts in about a second
        "mpi": "pmi2",  # the test hosts have Slurm's PMIx plugin but not the PMIx library
        "probe_listening": False,
        **extra,
    }
    return SrunOptions(env=env, **settings)  # type: ignore[arg-type]


def plan(cluster: SlurmCluster, **extra: object) -> CrossNodePlan:
    settings: dict[str, object] = {
        "duration_s": 1,
        "latency": False,
        "listen_wait_s": 5.0,
        "step_margin_s": 4.0,
        "gpus_per_node": 2,  # ranks a node: few, to keep it cheap (the nodes have 8 CPUs)
        "collectives": ("all_reduce",),
        "nccl_timeout_s": 20.0,
        **extra,
    }
    hosts = {name: {"hcas": ["mlx5_0"]} for name in cluster.node_names}
    return plan_from_mapping(hosts, **settings)


def node(name: str) -> NodeResult:
    gpus = tuple(GpuFacts(index=i, name="NVIDIA H100 80GB HBM3") for i in range(8))
    facts = NodeFacts(
        name, source="simulate", nvml_status=NvmlStatus.OK, pci_gpu_count=8, gpus=gpus
    )
    finding = Finding("burn.throughput", Severity.PASS, "x")
    return NodeResult(name, Verdict.CERTIFIED, facts, (finding,), sku="h100-sxm", summary="alone")


def stage(cluster: SlurmCluster, runner: SlurmRunner, kinds: tuple[str, ...], **extra: object):  # type: ignore[no-untyped-def]
    try:
        return run_cross_node_stage(
            [node(name) for name in cluster.node_names],
            runner,
            kinds,
            "ndr-400-ib",
            plan(cluster, **extra),
            deadline=time.monotonic() + 90,
            options=StageOptions(nccl_group=4),
        )
    finally:
        runner.close()


def live_jobs(cluster: SlurmCluster) -> list[str]:
    out = cluster.run(["squeue", "-h", "-o", "%i %T"]).stdout
    return [line for line in out.splitlines() if line.strip()]


def no_job_left(cluster: SlurmCluster, within: float = 10.0) -> None:
    """squeue lists nothing (a cancelled job may be COMPLETING for a moment)."""
    until = time.monotonic() + within
    while live_jobs(cluster) and time.monotonic() < until:
        time.sleep(0.2)
    assert live_jobs(cluster) == []


def test_a_healthy_fabric_pairs_and_a_group_every_node_good(cluster: SlurmCluster) -> None:
    runner = SlurmRunner(options(fabric_map(cluster)))
    judged, ran = stage(cluster, runner, ("rdma", "nccl"))
    assert {r.hostname: r.verdict for r in judged} == dict.fromkeys(
        cluster.node_names, Verdict.CERTIFIED
    )
    rdma, nccl = ran.outcome("rdma"), ran.outcome("nccl")
    assert rdma is not None
    assert nccl is not None
    assert set(rdma.good) == set(nccl.good) == set(cluster.node_names)
    pairs = [t for t in ran.tests if t.kind == "rdma"]
    assert len(pairs) == 2
    assert all(t.figure == pytest.approx(392.34) for t in pairs)
    # Each way, the client was pointed at the other node: its server. The stand-ins are
    # on no PATH here, only in the hosts: a figure means a step ran there.
    for test in pairs:
        assert {record.client.host for record in test.rdma} == set(test.hosts)
        for record in test.rdma:
            assert record.completed
            assert record.command.startswith("ib_write_bw -d mlx5_0")
            assert record.command.endswith(f" {record.server.host}")
    (group,) = [t for t in ran.tests if t.kind == "nccl"]
    assert set(group.hosts) == set(cluster.node_names)
    assert {(r.collective, r.variant) for r in group.nccl} == {
        ("all_reduce", "default"),
        ("all_reduce", "ib_only"),
    }
    assert all(r.completed and r.largest_busbw_gb_s == pytest.approx(469.21) for r in group.nccl)
    # One job per pair (round 1) and one for the group: each cancelled when its round ended.
    assert len(runner.submitted) == 3
    no_job_left(cluster)
    # Its nodes declare no GPU GRES (Gres=(null)): read from scontrol, so no GPUs asked.
    assert runner._gpus == dict.fromkeys(cluster.node_names, 0)


def test_a_slow_node_is_named_by_the_bisection(cluster: SlurmCluster) -> None:
    runner = SlurmRunner(options(fabric_map(cluster, hosts={"node03": "slow-link"})))
    judged, ran = stage(cluster, runner, ("rdma",))
    rdma = ran.outcome("rdma")
    assert rdma is not None
    named = {n for item in (*rdma.slow_nodes, *rdma.slow_links) for n in item.hosts}
    assert "node03" in named
    verdicts = {r.hostname: r.verdict for r in judged}
    assert verdicts["node03"] is Verdict.NOT_CERTIFIED
    assert {verdicts[n] for n in ("node01", "node02", "node04")} == {Verdict.CERTIFIED}
    assert rdma.rounds >= 2  # the slow pair was split and each half met a good peer
    no_job_left(cluster)


def test_a_node_whose_slurmd_dies_mid_round_is_unreachable(cluster: SlurmCluster) -> None:
    # Each step takes 3 s: node04's slurmd is killed while its pair's job runs.
    runner = SlurmRunner(options(fabric_map(cluster), env={"GPUREADY_STANDIN_DELAY": "3"}))
    killer = threading.Thread(target=_kill_when_running, args=(cluster, "node04"))
    killer.start()
    started = time.monotonic()
    try:
        judged, ran = stage(cluster, runner, ("rdma",), listen_wait_s=8.0)
    finally:
        killer.join(60)
    took = time.monotonic() - started
    assert not cluster.slurmd_running("node04")  # it was killed mid-round
    rdma = ran.outcome("rdma")
    assert rdma is not None
    assert [item.hosts for item in rdma.unreachable] == [("node04",)]
    (gone,) = rdma.unreachable
    assert "node04" in gone.why  # Slurm's words on it (not responding, or its job not run)
    assert took < 45, took  # the steps' limits and the allocation wait, not Slurm's --time
    verdicts = {r.hostname: r.verdict for r in judged}
    assert verdicts["node04"] is not Verdict.CERTIFIED
    assert {verdicts[n] for n in ("node01", "node02", "node03")} == {Verdict.CERTIFIED}


def _kill_when_running(cluster: SlurmCluster, name: str) -> None:
    until = time.monotonic() + 30
    while time.monotonic() < until:
        steps = cluster.run(["squeue", "-h", "-s", "-o", "%i %N"], check=False).stdout
        if any(name in line and ".batch" not in line for line in steps.splitlines()):
            cluster.stop_slurmd(name)
            return
        time.sleep(0.1)


def test_a_hanging_step_is_cancelled_at_its_limit(cluster: SlurmCluster) -> None:
    runner = SlurmRunner(options(fabric_map(cluster, hosts={"node01": "hang"})))
    pairs = [("node01", "node02"), ("node03", "node04")]
    started = time.monotonic()
    try:
        records = runner.rdma_round(pairs, plan(cluster), time.monotonic() + 60)
    finally:
        runner.close()
    took = time.monotonic() - started
    for hung in records[("node01", "node02")]:  # node01 hangs as server and as client
        assert not hung.completed
        assert "within its time limit" in hung.detail
    assert all(fine.completed for fine in records[("node03", "node04")])
    assert took < 30, took  # 1 s + 4 s of margin, then the cancels: not the job's --time
    no_job_left(cluster)


DRIVER = """
import json, sys, time
from validator.service import signals
from tests.e2e.test_cross_node_slurm import node, plan_from_mapping
from validator.service.cross_node_service import run_cross_node_stage
from validator.slurm.cross_node_srun import SlurmRunner, SrunOptions

names, table, fixtures = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
runner = SlurmRunner(SrunOptions(partition="gpu", probe_listening=False, env={
    "GPUREADY_STANDIN_MAP": table, "GPUREADY_STANDIN_FIXTURES": fixtures,
    "PATH": "/usr/local/bin:/usr/bin:/bin"}))
the_plan = plan_from_mapping({n: {"hcas": ["mlx5_0"]} for n in names}, duration_s=60,
                             latency=False, listen_wait_s=120.0, step_margin_s=60.0)
with signals.stop_signals():
    _, ran = run_cross_node_stage([node(n) for n in names], runner, ("rdma",), "ndr-400-ib",
                                  the_plan, deadline=time.monotonic() + 300)
print(json.dumps({"interrupted": ran.interrupted, "jobs": runner.submitted}), flush=True)
"""


def test_sigterm_mid_round_cancels_every_job(cluster: SlurmCluster) -> None:
    table = fabric_map(cluster, default="hang")
    process = subprocess.Popen(
        [sys.executable, "-c", DRIVER, json.dumps(cluster.node_names), str(table), IN_HOST],
        cwd=REPO,
        env={**os.environ, **cluster.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        until = time.monotonic() + 30
        while time.monotonic() < until and not _steps_running(cluster, 2):
            time.sleep(0.2)
        assert _steps_running(cluster, 2), "the round's steps never ran"
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=40)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    said = json.loads(out)
    assert said["interrupted"] is True
    assert len(said["jobs"]) == 2  # both pairs' jobs, each cancelled by its id
    # Cancelled before the controller exited: none left running or pending (one may still
    # be COMPLETING, Slurm ending its processes, as the runner's cancel accepts), and
    # soon none at all.
    assert all(job.endswith(" COMPLETING") for job in live_jobs(cluster)), live_jobs(cluster)
    no_job_left(cluster)


def _steps_running(cluster: SlurmCluster, count: int) -> bool:
    steps = cluster.run(["squeue", "-h", "-s", "-o", "%i"], check=False).stdout.split()
    return len([s for s in steps if ".batch" not in s and "." in s]) >= count
