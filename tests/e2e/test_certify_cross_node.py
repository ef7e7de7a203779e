"""``gpuready certify ... --cross-node rdma,nccl`` as an operator types it, on real hosts.

The session's Slurm cluster (tests/hosts/slurmcluster.py: four test hosts, each with its
own sshd and slurmd) serves both reaches: over SSH (``certify -i``, NCCL through the
mpirun ``GPUREADY_MPIRUN`` names) and through Slurm (``certify --slurm``). The per-node
stage is the simulated one the fleet tests use (each host's scenario file); the stage
across nodes runs the stand-ins of ib_write_bw, ib_write_lat, all_reduce_perf and
alltoall_perf (tests/fixtures/standins) inside the hosts, which print real recordings
chosen by a map of healthy and slow hosts. The CLI, the runners, the planner, the bisection,
the judge, the report and the certificates are the real ones.

Each run holds a healthy fabric and node03 slow, named by the bisection (RDMA pairs, and
the NCCL group halved). Through Slurm every perftest and nccl-tests run is an srun step in
its test's job (8 HCAs a node, both ways, then ib_write_lat): the test nodes have 8 CPUs, a
rank for each of the 8 simulated GPUs (srun refuses more tasks than CPUs), and lack the
PMIx library, so the run names PMI-2 in Slurm's own ``SLURM_MPI_TYPE``, as an operator of
such a cluster would.

Steps reach the stand-ins with only the environment the runner gives them (sshd passes
no other), so each host gets small wrappers in /usr/local/sbin (first on root's PATH over
SSH, and on this machine's PATH that srun exports) that name the map and the recordings
unless the step's environment already does; they are removed again after the test.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_cross_node_slurm import IN_HOST, standin_cluster
from tests.hosts.slurmcluster import SlurmCluster
from validator.cli.main import main
from validator.error_tree import ExitCode

pytestmark = [pytest.mark.hosts, pytest.mark.slurm]

PROGRAMS = ("ib_write_bw", "ib_write_lat", "all_reduce_perf", "alltoall_perf")
WRAPPERS = "usr/local/sbin"
MPIRUN = "/usr/local/bin/mpirun-for-tests"  # one of the stand-ins, installed with them
SLOW = "node03"
MAP = f"{IN_HOST}/fabric-map.json"  # in each host's own tree


def _wrapper(program: str) -> str:
    return (
        "#!/bin/sh\n"
        f'export GPUREADY_STANDIN_MAP="${{GPUREADY_STANDIN_MAP:-{MAP}}}"\n'
        f'export GPUREADY_STANDIN_FIXTURES="${{GPUREADY_STANDIN_FIXTURES:-{IN_HOST}}}"\n'
        f'exec /usr/local/bin/{program} "$@"\n'
    )


@pytest.fixture
def cluster(
    slurm_cluster: Callable[..., SlurmCluster], monkeypatch: pytest.MonkeyPatch
) -> Iterator[SlurmCluster]:
    """The session's four nodes, healthy alone, a healthy fabric; the wrappers in place."""
    made = standin_cluster(slurm_cluster, monkeypatch)
    written: list[Path] = []
    for host in made.live_hosts:
        written.append(host.root / MAP.lstrip("/"))
        written[-1].write_text(json.dumps({"default": "healthy"}))
        folder = host.root / WRAPPERS
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in {name: _wrapper(name) for name in PROGRAMS}.items():
            path = folder / name
            path.write_text(text)
            path.chmod(0o755)
            written.append(path)
    yield made
    for path in written:
        path.unlink(missing_ok=True)


def _mark_slow(cluster: SlurmCluster, name: str) -> None:
    # A client names its peer by the address it was given (the inventory's): both ways.
    (slow,) = [host for host in cluster.live_hosts if host.name == name]
    table = {"default": "healthy", "hosts": {name: "slow-link", slow.address: "slow-link"}}
    for host in cluster.live_hosts:
        (host.root / MAP.lstrip("/")).write_text(json.dumps(table))


def _certify(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cluster: SlurmCluster, *reach: str
) -> tuple[int, dict[str, Any], Path, str]:
    reports = tmp_path / "reports"
    code = main(
        ["certify", *reach, "-i", str(cluster.pool.write_inventory(tmp_path / "inventory.ini")),
         "--burn", "1s", "--db", str(tmp_path / "history.db"), "--report-dir", str(reports),
         "--cross-node", "rdma,nccl", "--json", "--json-form", "full"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    document: dict[str, Any] = json.loads(out)
    # What --json printed is the report the run wrote.
    assert json.loads((reports / "report.json").read_text())["cross_node"] == document["cross_node"]
    return code, document, reports, err


def _passed_figures(stage: dict[str, Any]) -> dict[str, set[float]]:
    figures: dict[str, set[float]] = {"rdma": set(), "nccl": set()}
    for test in stage["tests"]:
        if test["passed"]:
            figures[test["kind"]].add(round(test["figure"], 3))
    return figures


def _fabric(reports: Path, name: str) -> dict[str, Any] | None:
    found = sorted((reports / "certificates").glob(f"{name}*.json"))
    if not found:
        return None
    (certificate,) = found
    fabric: dict[str, Any] = json.loads(certificate.read_text())["fabric"]
    return fabric


def _slow_node_named(
    code: int, document: dict[str, Any], reports: Path, err: str, cluster: SlurmCluster
) -> None:
    """node03 alone NOT_CERTIFIED, named slow by both kinds' bisection; the rest certified."""
    verdicts = {node["hostname"]: node["verdict"] for node in document["nodes"]}
    good = [name for name in cluster.node_names if name != SLOW]
    assert verdicts == {**dict.fromkeys(good, "CERTIFIED"), SLOW: "NOT_CERTIFIED"}, err
    assert code == ExitCode.NOT_CERTIFIED, err
    stage = document["cross_node"]
    assert stage["fabric"] == "ndr-400-ib"  # from the H100 SXM row's NDR network
    assert sorted(stage["nodes"]) == cluster.node_names
    assert [outcome["kind"] for outcome in stage["outcomes"]] == ["rdma", "nccl"]
    for outcome in stage["outcomes"]:
        kind = outcome["kind"]
        assert not outcome["skipped"], kind
        assert sorted(outcome["good"]) == good, kind
        assert [named["hosts"] for named in outcome["slow_nodes"]] == [[SLOW]], kind
        assert outcome["rounds"] >= 2, kind  # the failed first test was bisected
    assert "140.4" in stage["outcomes"][0]["slow_nodes"][0]["why"]  # the slow recording's
    # The good tests carry the healthy recordings' figures: each ran in its hosts.
    assert _passed_figures(stage) == {"rdma": {392.34}, "nccl": {round(469.21 / 8, 3)}}
    (slow,) = [node for node in document["nodes"] if node["hostname"] == SLOW]
    failed = {f["check"] for f in slow["findings"] if f["severity"] == "FAIL"}
    assert failed == {"fabric.rdma_bandwidth", "fabric.nccl_bandwidth"}
    for name in good:
        fabric = _fabric(reports, name)
        assert fabric is not None, name
        assert (fabric["status"], fabric["fabric"]) == ("certified", "ndr-400-ib"), name
    assert _fabric(reports, SLOW) is None  # not certified: no certificate issued


def test_over_ssh_a_healthy_fabric_and_one_slow_node_named(
    cluster: SlurmCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _mark_slow(cluster, SLOW)
    monkeypatch.setenv("GPUREADY_MPIRUN", MPIRUN)  # NCCL groups through it, on the first host
    known_hosts = cluster.pool.known_hosts(tmp_path / "known_hosts")
    code, document, reports, err = _certify(
        capsys, tmp_path, cluster, "--known-hosts", str(known_hosts)
    )
    assert {node["transport"] for node in document["nodes"]} == {"ssh"}
    _slow_node_named(code, document, reports, err, cluster)


def test_through_slurm_a_healthy_fabric_and_one_slow_node_named(
    cluster: SlurmCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _mark_slow(cluster, SLOW)
    monkeypatch.setenv("SLURM_MPI_TYPE", "pmi2")  # see the module docstring
    code, document, reports, err = _certify(
        capsys, tmp_path, cluster, "--slurm", "--partition", "gpu",
        "--spool", str(cluster.shared_dir), "--poll", "0.3",
    )  # fmt: skip
    assert {node["transport"] for node in document["nodes"]} == {"slurm"}
    _slow_node_named(code, document, reports, err, cluster)
    # Every job of the stage was cancelled at its round's end.
    assert not cluster.run(["squeue", "-h", "-o", "%i %T"]).stdout.strip()
