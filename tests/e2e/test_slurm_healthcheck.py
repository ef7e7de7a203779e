"""Slurm as a real client of gpuready: slurmd runs ``gpuready drift --nhc`` as its health check.

The test cluster's slurmd runs the HealthCheckProgram every few seconds on each node,
as a site's NHC setup would; the program is gpuready's drift for that node (this
checkout, bound read-only into the hosts with the Python it runs on), comparing the
node with the certificate ``certify --slurm`` stored in a history on shared storage.
A node whose facts drifted is drained by that health check with the gpuready reason;
a healthy one stays idle.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hosts.slurmcluster import SlurmCluster
from validator.cli.main import main
from validator.error_tree import ExitCode

pytestmark = [pytest.mark.hosts, pytest.mark.slurm]

REPO = Path(__file__).resolve().parents[2]
INTERVAL_S = 5

HEALTH_CHECK = """#!/bin/sh
# The test cluster's HealthCheckProgram: gpuready's drift for this node. slurmd gives
# it no PATH and no SLURM_CONF: every path here is absolute.
exec {python} -c 'import sys; from validator.cli.main import main; sys.exit(main())' \\
    drift --transport local --nhc --slurm-drain --simulate /etc/gpuready/scenario.json \\
    --db {db} >>{log} 2>&1
"""


def _python_roots() -> list[Path]:
    """The interpreter's installation, which the checkout's venv links into."""
    roots = {Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parents[1]}
    return sorted(root for root in roots if len(root.parts) > 3 and root != REPO)


def test_a_drifted_node_is_drained_by_slurms_own_health_check(
    slurm_cluster: Callable[..., SlurmCluster],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = slurm_cluster(
        n_hosts=2,
        scenarios=["healthy-8x-h100-sxm", "healthy-8x-h100-sxm"],
        ro_binds=[REPO, *_python_roots()],
    )
    for name, value in cluster.env.items():
        monkeypatch.setenv(name, value)
    shared = cluster.shared_dir
    history = shared / "history.db"
    code = main(
        ["certify", "--slurm", "--partition", "gpu",
         "-i", str(cluster.pool.write_inventory(tmp_path / "hosts.ini")),
         "--spool", str(shared), "--poll", "0.3", "--burn", "2s", "--db", str(history),
         "--json"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == ExitCode.OK, err
    assert {n["verdict"] for n in json.loads(out)["nodes"]} == {"CERTIFIED"}

    python = REPO / ".venv" / "bin" / "python"
    script = shared / "healthcheck.sh"
    script.write_text(
        HEALTH_CHECK.format(python=python, db=history, log=shared / "healthcheck.log")
    )
    script.chmod(0o755)
    try:
        cluster.reconfigure(
            [
                f"HealthCheckProgram={script}",
                f"HealthCheckInterval={INTERVAL_S}",
                "HealthCheckNodeState=ANY",
            ]
        )
        cluster.set_scenario("node02", "one-gpu-power-capped")
        drained = cluster.wait_state(
            "node02",
            lambda state: bool(state.reason) and "DRAIN" in (*state.flags, state.state),
            timeout=90,
        )
        assert drained.reason is not None
        assert drained.reason.startswith("gpuready:"), drained
        # The healthy node has been checked since, and stays idle without a reason.
        time.sleep(INTERVAL_S + 2)
        healthy = cluster.node("node01")
        assert healthy.matches("IDLE!"), healthy
        assert not healthy.reason
        log = (shared / "healthcheck.log").read_text()
        assert "gpuready: ok" in log  # node01's line: checked, clean
    finally:
        cluster.reconfigure([])
