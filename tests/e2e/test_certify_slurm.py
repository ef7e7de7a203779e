"""``gpuready certify --slurm`` on a real Slurm cluster: slurmctld here, a slurmd in each test host.

The jobs are real: sbatch runs job.sh on the first node, sbcast delivers the agent to each
node's /tmp, srun runs it there with the host's own python3 against the host's scenario,
and the results come back through the shared spool (tests/hosts/slurmcluster.py binds
one directory into every host at the same path, as an NFS home would be).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
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
SCENARIOS = [
    "healthy-8x-h100-sxm",
    "one-gpu-thermal-throttling",
    "healthy-8x-h100-sxm",
    "healthy-8x-h100-sxm",
]
BURN = "2s"


@pytest.fixture
def cluster(
    slurm_cluster: Callable[..., SlurmCluster], monkeypatch: pytest.MonkeyPatch
) -> SlurmCluster:
    """Four nodes, the second throttling; Slurm's client commands pointed at this cluster."""
    made = slurm_cluster(n_hosts=4, scenarios=SCENARIOS)
    for name, value in made.env.items():
        monkeypatch.setenv(name, value)
    return made


def _inventory(cluster: SlurmCluster, tmp_path: Path) -> Path:
    return cluster.pool.write_inventory(tmp_path / "inventory.ini")


def _verdicts(document: dict) -> dict[str, str]:
    return {node["hostname"]: node["verdict"] for node in document["nodes"]}


def _node(document: dict, name: str) -> dict:
    (node,) = [n for n in document["nodes"] if n["hostname"] == name]
    return node


def _slurm_cli(
    capsys: pytest.CaptureFixture[str], cluster: SlurmCluster, tmp_path: Path, *extra: str
) -> tuple[int, dict, str]:
    code = main(
        [
            "certify", "--slurm", "--partition", "gpu", "-i", str(_inventory(cluster, tmp_path)),
            "--spool", str(cluster.shared_dir), "--poll", "0.3", "--burn", BURN,
            "--db", str(tmp_path / "history.db"), "--json", "--json-form", "full", *extra,
        ]
    )  # fmt: skip
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else {}, err


def _jobs_left(cluster: SlurmCluster) -> list[str]:
    listed = cluster.run(["squeue", "-h", "-o", "%i %T"]).stdout.split("\n")
    return [line for line in listed if line.strip()]


def test_the_same_verdicts_as_over_ssh(
    cluster: SlurmCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = _inventory(cluster, tmp_path)
    known_hosts = cluster.pool.known_hosts(tmp_path / "known_hosts")
    code = main(
        ["certify", "-i", str(inventory), "--known-hosts", str(known_hosts), "--burn", BURN,
         "--db", str(tmp_path / "ssh.db"), "--json"]
    )  # fmt: skip
    over_ssh = json.loads(capsys.readouterr().out)
    assert code == ExitCode.NOT_CERTIFIED

    code, through_slurm, err = _slurm_cli(capsys, cluster, tmp_path)
    assert code == ExitCode.NOT_CERTIFIED, err
    assert _verdicts(through_slurm) == _verdicts(over_ssh)
    assert _verdicts(through_slurm) == {
        "node01": "CERTIFIED",
        "node02": "NOT_CERTIFIED",
        "node03": "CERTIFIED",
        "node04": "CERTIFIED",
    }
    throttled = {f["check"] for f in _node(through_slurm, "node02")["findings"]}
    assert "burn.throttle" in throttled
    assert {n["transport"] for n in through_slurm["nodes"]} == {"slurm"}
    # Each node ran its own agent on its own host: the facts name it.
    assert {n["facts"]["hostname"] for n in through_slurm["nodes"]} == set(cluster.node_names)
    assert not _jobs_left(cluster)


def test_a_node_down_in_slurm_is_unknown_with_slurms_reason(
    cluster: SlurmCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.stop_slurmd("node03")
    cluster.wait_state("node03", lambda state: "NOT_RESPONDING" in state.flags, timeout=40)
    code, document, err = _slurm_cli(capsys, cluster, tmp_path)
    assert code == ExitCode.NOT_CERTIFIED, err  # node02 still fails
    down = _node(document, "node03")
    assert down["verdict"] == "UNKNOWN"
    message = down["findings"][0]["message"]
    assert "NOT_RESPONDING" in message
    assert "Slurm will not run it" in message
    assert _verdicts(document)["node01"] == "CERTIFIED"


def test_a_node_whose_slurmd_dies_mid_run_is_unknown_and_the_others_finish(
    cluster: SlurmCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import threading

    outcome: dict[str, object] = {}

    def certify() -> None:
        outcome["result"] = _slurm_cli(capsys, cluster, tmp_path, "--burn", "20s")

    worker = threading.Thread(target=certify)
    worker.start()
    # Once node04's agent runs (its job step is on the node), its slurmd and steps die.
    until = time.monotonic() + 60
    while time.monotonic() < until:
        running = cluster.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"]).stdout.split()
        if running and list((cluster.shared_dir).glob("*/out/*.stderr")):
            break
        time.sleep(0.3)
    else:
        pytest.fail("the certification job never ran")
    time.sleep(2.0)
    cluster.stop_slurmd("node04")
    worker.join(timeout=240)
    assert not worker.is_alive()
    _, document, err = outcome["result"]  # type: ignore[misc]
    verdicts = _verdicts(document)
    assert verdicts["node04"] == "UNKNOWN", err
    assert verdicts["node01"] == "CERTIFIED"
    assert verdicts["node03"] == "CERTIFIED"
    message = _node(document, "node04")["findings"][0]["message"]
    # Its steps die with its slurmd: the job ends with no result from it, or, when the
    # agent's own exit status lands first, that says the agent was killed.
    assert "without a result from node04" in message or "node04: Killed" in message, message


def test_a_failing_node_is_drained_and_resumed_after_a_passing_run(
    cluster: SlurmCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document, err = _slurm_cli(capsys, cluster, tmp_path, "--slurm-drain")
    assert code == ExitCode.NOT_CERTIFIED, err
    drained = cluster.node("node02")
    assert "DRAIN" in drained.flags or "DRAIN" in drained.state
    assert drained.reason is not None
    assert drained.reason.startswith("gpuready: not certified: ")
    assert "burn.throttle" in drained.reason
    assert "node02: drained" in err
    assert not cluster.node("node01").reason

    cluster.set_scenario("node02", "healthy-8x-h100-sxm")
    # Without --slurm-drain a node gpuready drained is not run, and says how to re-test it.
    code, document, err = _slurm_cli(capsys, cluster, tmp_path)
    assert _node(document, "node02")["verdict"] == "UNKNOWN"
    assert "--slurm-drain" in _node(document, "node02")["findings"][0]["message"]

    code, document, err = _slurm_cli(capsys, cluster, tmp_path, "--slurm-drain")
    assert code == ExitCode.OK, err
    assert _verdicts(document)["node02"] == "CERTIFIED"
    resumed = cluster.node("node02")
    assert resumed.matches("IDLE!"), resumed
    assert "node02: resumed" in err
    # The quarantine reservation is gone again.
    shown = cluster.run(["scontrol", "show", "reservation"], check=False)
    assert "gpuready-quarantine" not in shown.stdout


def test_ctrl_c_cancels_the_job_and_still_writes_the_report(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    report_dir = tmp_path / "reports"
    env = {**os.environ, **cluster.env}
    process = subprocess.Popen(
        [
            sys.executable, "-c", "import sys; from validator.cli.main import main; "
            "sys.exit(main())", "certify", "--slurm", "--partition", "gpu",
            "-i", str(_inventory(cluster, tmp_path)), "--spool", str(cluster.shared_dir),
            "--poll", "0.3", "--burn", "60s", "--db", str(tmp_path / "history.db"),
            "--report-dir", str(report_dir),
        ],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        until = time.monotonic() + 60
        while time.monotonic() < until and not _running(cluster):
            time.sleep(0.3)
        assert _running(cluster), "the certification job never ran"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == ExitCode.INTERRUPTED, err
    assert not _jobs_left(cluster) or all(
        line.split()[1] in ("CANCELLED", "COMPLETED") for line in _jobs_left(cluster)
    )
    running = cluster.run(["squeue", "-h", "-t", "PENDING,RUNNING", "-o", "%i"]).stdout
    assert running.strip() == ""
    document = json.loads((report_dir / "report.json").read_text())
    assert set(_verdicts(document).values()) == {"UNKNOWN"}
    assert "interrupted" in document["nodes"][0]["findings"][0]["message"]


def _running(cluster: SlurmCluster) -> bool:
    return bool(cluster.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"]).stdout.split())


def test_a_campaign_submitted_without_waiting_is_collected_later(
    cluster: SlurmCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _slurm_cli(capsys, cluster, tmp_path, "--campaign", "--no-wait")
    assert code == ExitCode.OK, err
    assert "submitted 4 node(s) as job(s)" in err
    job = err.split("gpuready slurm collect ")[1].split()[0]
    jobs = [line.split()[0] for line in _jobs_left(cluster)]
    assert len(jobs) == 4  # one job per node
    code = main(
        ["slurm", "collect", job, "--spool", str(cluster.shared_dir), "--wait", "--poll", "0.3",
         "--db", str(tmp_path / "history.db"), "--json", "--json-form", "full"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == ExitCode.NOT_CERTIFIED, err
    document = json.loads(out)
    # A fleet's --json is the summary unless asked: --json-form full holds every finding.
    assert "form" not in document
    assert any(f["severity"] == "PASS" for n in document["nodes"] for f in n["findings"])
    assert _verdicts(document) == {
        "node01": "CERTIFIED",
        "node02": "NOT_CERTIFIED",
        "node03": "CERTIFIED",
        "node04": "CERTIFIED",
    }
