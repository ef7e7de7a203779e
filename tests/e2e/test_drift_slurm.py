"""``gpuready drift --slurm`` on the real test cluster: each node against its certificate.

Certified through Slurm first (the history on this machine holds the certificates),
then checked again through Slurm's jobs; a node whose power limit moved is drift, and
with --slurm-drain it is drained with the gpuready reason while the others stay idle.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hosts.slurmcluster import SlurmCluster
from validator.cli.main import main
from validator.error_tree import ExitCode

pytestmark = [pytest.mark.hosts, pytest.mark.slurm]


def test_drift_through_slurm_finds_the_moved_node_and_drains_it(
    slurm_cluster: Callable[..., SlurmCluster],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = slurm_cluster(n_hosts=3, scenarios=["healthy-8x-h100-sxm"] * 3)
    for name, value in cluster.env.items():
        monkeypatch.setenv(name, value)
    inventory = cluster.pool.write_inventory(tmp_path / "hosts.ini")
    common = [
        "--slurm", "--partition", "gpu", "-i", str(inventory), "--spool",
        str(cluster.shared_dir), "--poll", "0.3", "--db", str(tmp_path / "history.db"), "--json",
    ]  # fmt: skip
    assert main(["certify", *common, "--burn", "2s"]) == ExitCode.OK
    capsys.readouterr()

    assert main(["drift", *common]) == ExitCode.OK
    clean = json.loads(capsys.readouterr().out)
    assert {node["verdict"] for node in clean["nodes"]} == {"CERTIFIED"}

    cluster.set_scenario("node03", "one-gpu-power-capped")
    code = main(["drift", *common, "--slurm-drain"])
    out, err = capsys.readouterr()
    assert code == ExitCode.NOT_CERTIFIED, err
    verdicts = {node["hostname"]: node["verdict"] for node in json.loads(out)["nodes"]}
    assert verdicts == {"node01": "CERTIFIED", "node02": "CERTIFIED", "node03": "NOT_CERTIFIED"}
    drained = cluster.node("node03")
    assert drained.reason is not None
    assert drained.reason.startswith("gpuready:")
    assert cluster.node("node01").matches("IDLE!")
    assert "node03: drained" in err
