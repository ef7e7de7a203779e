"""The batch script and the node step a Slurm submission runs, run for real by bash.

``srun`` and ``sbcast`` are stand-ins on PATH that do locally what Slurm does on a
node (run the command with SLURMD_NODENAME set; copy the file), so what is tested is
the scripts' own logic: each node's output lands whole in the spool with its exit
status last, a failing agent's stderr is kept, a failed delivery is told per node,
and paths with spaces stay one argument. The real Slurm runs them in tests/e2e.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from validator.slurm.batch_script import (
    STEP_SCRIPT,
    AgentDelivery,
    batch_script,
)
from validator.slurm.submission_spool import OUT_DIR, STEP_FILE

FAKE_SRUN = """#!/bin/sh
# Runs the command after srun's options, as the named node.
node=
while [ $# -gt 0 ]; do
    case "$1" in
        --nodelist=*) node=${1#--nodelist=} ;;
        --*) ;;
        *) break ;;
    esac
    shift
done
echo "$node" >>"$SRUN_LOG"
SLURMD_NODENAME=$node exec "$@"
"""

FAKE_SBCAST_OK = """#!/bin/sh
[ "$1" = --force ] && shift
cp "$1" "$2"
"""

FAKE_SBCAST_FAILS = """#!/bin/sh
echo "sbcast: error: Can't open source file: Permission denied" >&2
exit 1
"""

# The agent stand-in: prints JSON naming the node it ran on and its arguments, or fails.
AGENT = """import json, os, sys
if "--fail" in sys.argv:
    sys.stderr.write("gpuready-agent: error: NVML said no\\n")
    sys.exit(3)
print(json.dumps({"node": os.environ.get("SLURMD_NODENAME"), "argv": sys.argv[1:]}))
"""


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    directory = tmp_path / "spool with space" / "gpuready-x"
    (directory / OUT_DIR).mkdir(parents=True)
    _executable(directory / STEP_FILE, STEP_SCRIPT)
    (directory / "agent.pyz").write_text(AGENT)
    return directory


def _run_job(
    tmp_path: Path, spool: Path, script: str, nodes: list[str], sbcast: str = FAKE_SBCAST_OK
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    _executable(bin_dir / "srun", FAKE_SRUN)
    _executable(bin_dir / "sbcast", sbcast)
    job = _executable(spool / "job.sh", script)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SRUN_LOG": str(tmp_path / "srun.log"),
    }
    return subprocess.run(
        ["bash", str(job), *nodes], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_each_node_gets_its_own_arguments_and_its_output_lands_whole(
    tmp_path: Path, spool: Path
) -> None:
    delivered = tmp_path / "node local" / "agent.pyz"
    delivered.parent.mkdir()
    common = [sys.executable, str(delivered), "--xid-window-hours", "72"]
    commands = {
        "gpu001": common,
        "gpu002": [*common, "--simulate", "/etc/gpuready/scenario file.json"],
    }
    script = batch_script(str(spool), AgentDelivery(str(delivered), sbcast=True), commands, common)
    done = _run_job(tmp_path, spool, script, ["gpu001", "gpu002"])
    assert done.returncode == 0, done.stderr
    out = spool / OUT_DIR
    first = json.loads((out / "gpu001.stdout").read_text())
    second = json.loads((out / "gpu002.stdout").read_text())
    assert first == {"node": "gpu001", "argv": ["--xid-window-hours", "72"]}
    assert second["argv"][-2:] == ["--simulate", "/etc/gpuready/scenario file.json"]
    assert (out / "gpu001.rc").read_text() == "0\n"
    assert (out / "gpu002.rc").read_text() == "0\n"
    assert not list(out.glob("*.tmp"))  # every file renamed into place
    assert sorted((tmp_path / "srun.log").read_text().split()) == ["gpu001", "gpu002"]


def test_a_failing_agent_leaves_its_status_and_stderr(tmp_path: Path, spool: Path) -> None:
    agent = spool / "agent.pyz"
    commands = {"gpu001": [sys.executable, str(agent), "--fail"]}
    script = batch_script(str(spool), AgentDelivery(str(agent), sbcast=False), commands)
    assert "sbcast" not in script  # a shared path is not copied
    done = _run_job(tmp_path, spool, script, ["gpu001"])
    assert done.returncode == 0, done.stderr
    out = spool / OUT_DIR
    assert (out / "gpu001.rc").read_text() == "3\n"
    assert "NVML said no" in (out / "gpu001.stderr").read_text()


def test_a_failed_delivery_runs_the_spools_copy(tmp_path: Path, spool: Path) -> None:
    node_path = str(tmp_path / "never-delivered.pyz")
    commands = {name: [sys.executable, node_path] for name in ("gpu001", "gpu002")}
    script = batch_script(
        str(spool), AgentDelivery(node_path, sbcast=True), commands, commands["gpu001"]
    )
    done = _run_job(tmp_path, spool, script, ["gpu001", "gpu002"], sbcast=FAKE_SBCAST_FAILS)
    assert done.returncode == 0, done.stderr
    assert "Permission denied" in done.stderr  # told in the job's own output
    out = spool / OUT_DIR
    for node in ("gpu001", "gpu002"):
        assert (out / f"{node}.rc").read_text() == "0\n"
        assert json.loads((out / f"{node}.stdout").read_text())["node"] == node


def test_a_node_the_job_was_not_asked_about_is_refused(tmp_path: Path, spool: Path) -> None:
    agent = spool / "agent.pyz"
    commands = {"gpu001": [sys.executable, str(agent)]}
    script = batch_script(str(spool), AgentDelivery(str(agent), sbcast=False), commands)
    done = _run_job(tmp_path, spool, script, ["gpu001", "gpu009"])
    assert done.returncode == 0, done.stderr
    assert (spool / OUT_DIR / "gpu001.rc").read_text() == "0\n"
    assert (spool / OUT_DIR / "gpu009.rc").read_text() == "2\n"
    assert "not asked to certify gpu009" in (spool / OUT_DIR / "gpu009.stderr").read_text()


def test_the_scripts_parse_as_bash_and_sh(tmp_path: Path, spool: Path) -> None:
    commands = {"a": ["python3", "/tmp/x.pyz", "--simulate", "it's; rm -rf /"]}
    script = batch_script(str(spool), AgentDelivery("/tmp/x.pyz", sbcast=True), commands)
    job = tmp_path / "job.sh"
    job.write_text(script)
    assert subprocess.run(["bash", "-n", str(job)], check=False).returncode == 0
    step = tmp_path / "step.sh"
    step.write_text(STEP_SCRIPT)
    assert subprocess.run(["sh", "-n", str(step)], check=False).returncode == 0
    # The hostile argument is one quoted word, never code.
    assert "'it'\"'\"'s; rm -rf /'" in script
