"""The test Slurm cluster itself (tests/hosts/slurmcluster.py): real slurmctld and slurmds.

Every test but the last shares the session's cluster (``slurm_cluster``), reset
between tests; the teardown test makes its own, beside it, on its own pool.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import validator
from tests.hosts.slurmcluster import SLURM_SHAPE, NodeState, SlurmCluster, parse_show_node
from tests.hosts.testhosts import (
    HostsError,
    TestHostPool,
    mounts_under,
    pids_in_netns,
    processes_mentioning,
)

Factory = Callable[..., SlurmCluster]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def _sinfo_node(cluster: SlurmCluster, name: str) -> dict[str, Any]:
    data = json.loads(cluster.run(["sinfo", "--json"]).stdout)
    nodes = {n["name"]: n for n in data["nodes"]}
    assert name in nodes, sorted(nodes)
    node: dict[str, Any] = nodes[name]
    return node


def _state_words(node: dict[str, Any]) -> set[str]:
    # 22.05: "state": "idle", "state_flags": ["DRAIN"]; 23.02+: "state": ["IDLE", "DRAIN"].
    state = node["state"]
    words = {state} if isinstance(state, str) else set(state)
    words |= set(node.get("state_flags") or [])
    return {w.upper() for w in words}


def test_cluster_comes_up_with_four_idle_nodes(slurm_cluster: Factory) -> None:
    cluster = slurm_cluster(n_hosts=4)
    out = cluster.run(["sinfo", "-h", "-N", "-o", "%N|%T|%P"]).stdout.split()
    assert sorted(out) == [f"node0{i}|idle|gpu*" for i in range(1, 5)]
    assert cluster.run(["scontrol", "ping"]).stdout.strip().endswith("is UP")
    assert all(node.matches("IDLE!") for node in cluster.nodes().values())


def test_srun_runs_on_every_host_as_root_with_its_scenario(slurm_cluster: Factory) -> None:
    scenarios = ["healthy-8x-h100-sxm", "no-gpu-driver", "gpu-needs-reset", "driver-mismatch"]
    cluster = slurm_cluster(n_hosts=4, scenarios=scenarios)
    script = (
        "import json, os, socket; d = json.load(open('/etc/gpuready/scenario.json')); "
        "print(socket.gethostname(), os.getuid(), d['name'], d['host']['hostname'])"
    )
    out = cluster.run(["srun", "-N4", "-l", "python3", "-c", script]).stdout
    rows = sorted(line.split(": ", 1)[1].split() for line in out.splitlines())
    names = cluster.node_names
    assert rows == sorted([[n, "0", s, n] for n, s in zip(names, scenarios, strict=True)])
    plain = cluster.run(["srun", "-N4", "hostname"]).stdout.split()
    assert sorted(plain) == names


def test_sbatch_writes_its_output_into_the_shared_dir_and_sbcast_works(
    slurm_cluster: Factory,
) -> None:
    cluster = slurm_cluster(n_hosts=4)
    shared = cluster.shared_dir
    (shared / "payload.txt").write_text("from the controller\n")
    script = shared / "job.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"sbcast --force {shared}/payload.txt /tmp/payload.txt || exit 3\n"
        # Each node's copy is in its own /tmp, not on the shared directory.
        "srun sh -c 'echo $(hostname) $(cat /tmp/payload.txt)' | sort\n"
    )
    job = cluster.run(
        ["sbatch", "--parsable", "-N2", f"--output={shared}/out-%j.txt", str(script)]
    ).stdout.strip()
    assert job.isdigit(), job
    done = cluster.wait_job(job, timeout=60)
    assert (done["JobState"], done["ExitCode"]) == ("COMPLETED", "0:0")
    text = (shared / f"out-{job}.txt").read_text()
    assert text.splitlines() == [
        "node01 from the controller",
        "node02 from the controller",
    ]
    assert not (cluster.host("node03").root / "tmp/payload.txt").exists()
    assert (cluster.host("node02").root / "tmp/payload.txt").read_text() == "from the controller\n"


def test_a_killed_slurmd_goes_down_and_comes_back(slurm_cluster: Factory) -> None:
    cluster = slurm_cluster(n_hosts=4)
    started = time.monotonic()
    cluster.stop_slurmd("node04")
    assert not cluster.slurmd_running("node04")
    dead = cluster.wait_state(
        "node04", lambda n: n.state == "DOWN" or "NOT_RESPONDING" in n.flags, timeout=30
    )
    assert time.monotonic() - started < 30
    assert "NOT_RESPONDING" in dead.flags
    others = cluster.nodes()
    assert all(others[n].matches("IDLE!") for n in ("node01", "node02", "node03"))
    # A job asking for every node now cannot start.
    pending = cluster.run(["srun", "-N4", "--immediate=1", "hostname"], check=False)
    assert pending.returncode != 0
    cluster.start_slurmd("node04")  # ReturnToService=2: back on registration
    assert cluster.wait_state("node04", "IDLE!", timeout=20).reason == ""
    assert sorted(cluster.run(["srun", "-N4", "hostname"]).stdout.split()) == cluster.node_names


def test_a_drain_is_visible_in_sinfo_json(slurm_cluster: Factory) -> None:
    cluster = slurm_cluster(n_hosts=4)
    cluster.run(
        ["scontrol", "update", "nodename=node02", "state=drain", "reason=gpuready: test drain"]
    )
    node = _sinfo_node(cluster, "node02")
    assert {"IDLE", "DRAIN"} <= _state_words(node)
    assert node["reason"] == "gpuready: test drain"
    assert cluster.node("node02").matches("IDLE+DRAIN")
    assert "DRAIN" not in _state_words(_sinfo_node(cluster, "node01"))
    cluster.reset()  # the next test's call would do it too; reset must undo a drain
    assert "DRAIN" not in _state_words(_sinfo_node(cluster, "node02"))


def test_a_job_imports_gpuready_from_the_bound_checkout(slurm_cluster: Factory) -> None:
    checkout = Path(validator.__file__).resolve().parents[1]
    binds = [checkout, Path(sys.base_prefix)]
    if not Path(sys.prefix).is_relative_to(checkout):
        binds.append(Path(sys.prefix))
    cluster = slurm_cluster(n_hosts=2, ro_binds=binds)
    python = Path(sys.prefix) / "bin" / "python"
    out = cluster.run(
        ["srun", "-N2", str(python), "-c", "import validator; print(validator.__file__)"]
    ).stdout.split()
    assert out == [str(checkout / "validator" / "__init__.py")] * 2
    # Read-only: a node cannot write into the checkout.
    rc, _, err = cluster.hosts[0].run(f"touch {checkout}/.slurm-write-probe")
    assert rc != 0
    assert "Read-only" in err


def test_close_leaves_no_process_and_no_mount(slurm_cluster: Factory) -> None:
    slurm_cluster(n_hosts=4)  # the session's cluster runs beside this one (other ports)
    with TestHostPool(shape=SLURM_SHAPE) as pool:
        hosts = pool.start(["healthy-8x-h100-sxm"] * 2)
        cluster = SlurmCluster(pool, ro_binds=[Path(sys.base_prefix)]).start()
        out = cluster.run(["srun", "-N2", "hostname"]).stdout.split()
        assert sorted(out) == ["node01", "node02"]
        slurm_dir = cluster.slurm_dir
        assert processes_mentioning(slurm_dir)
        cluster.close()
        assert processes_mentioning(slurm_dir) == []
        for host in hosts:
            assert mounts_under(host.root / str(slurm_dir).lstrip("/")) == []
            assert mounts_under(host.root / str(sys.base_prefix).lstrip("/")) == []
            # Only sshd is left in the host.
            assert pids_in_netns([host.netns])[host.netns] == [host.process.pid]  # type: ignore[union-attr]
        run_dir = pool.run_dir
    assert mounts_under(run_dir) == []
    assert processes_mentioning(run_dir) == []
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("label", "node", "text", "reason"),
    [
        ("idle", "node01", "IDLE", ""),
        ("allocated", "node01", "ALLOCATED", ""),
        ("drained", "node02", "IDLE+DRAIN", "gpuready: xid 79 fell off the bus [root@"),
        ("draining", "node01", "ALLOCATED+DRAIN", "gpuready: test [root@"),
        ("down", "node03", "DOWN+NOT_RESPONDING", "Not responding [root@"),
    ],
)
def test_node_states_parse_from_recorded_scontrol(
    label: str, node: str, text: str, reason: str
) -> None:
    recorded = (FIXTURES / f"scontrol-show-node-{label}.txt").read_text()
    state = parse_show_node(recorded)[node]
    assert state.text == text
    assert state.reason.startswith(reason)
    assert bool(state.reason) == bool(reason)


def test_node_state_matching() -> None:
    drained = NodeState("n1", "IDLE", frozenset({"DRAIN"}), "why")
    assert drained.matches("idle")
    assert drained.matches("IDLE+DRAIN")
    assert drained.matches("DRAIN")
    assert not drained.matches("IDLE!")
    assert drained.matches("IDLE+DRAIN!")
    assert not drained.matches("DOWN")
    assert drained.matches(lambda n: n.reason == "why")


def test_bind_shares_a_directory_and_refuses_a_symlinked_path(
    test_hosts: TestHostPool, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "from-here.txt").write_text("seen\n")
    host = test_hosts.start(["healthy-8x-h100-sxm"])[0]
    test_hosts.bind(shared)
    later = test_hosts.start(["healthy-8x-h100-sxm"])[0]  # hosts started later get it too
    for h in (host, later):
        assert h.run(f"cat {shared}/from-here.txt") == (0, "seen\n", "")
    assert later.run(f"echo back > {shared}/from-{later.name}.txt")[0] == 0
    assert (shared / f"from-{later.name}.txt").read_text() == "back\n"
    # Debian's /var/run is a link to /run: the mount would land on this machine's /run.
    assert (host.root / "var/run").is_symlink()
    with pytest.raises(HostsError, match="symlink"):
        host.bind("/var/run/netns")
    test_hosts.unbind(shared)
    assert mounts_under(host.root / str(shared).lstrip("/")) == []
    assert host.run(f"ls {shared}")[1] == ""
