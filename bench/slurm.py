"""Certify through Slurm against the same over SSH: wall time and controller CPU per node.

Starts a real Slurm cluster over 64 test hosts on this machine (tests/hosts: a
slurmd in each network namespace, slurmctld here; needs root), then in one run
certifies 16 and 64 simulated nodes (no burn) both ways:

- ``gpuready certify -i`` over SSH (after a warm-up run that uploads the agent);
- ``gpuready certify --slurm`` (one job, one srun step per node, results through
  the shared spool).

It reports each run's wall time and the controller's CPU per node: the gpuready
process and everything it waited for (ssh handshakes on one side; sbatch, squeue and
sinfo on the other), read from getrusage(RUSAGE_CHILDREN). slurmctld's own CPU is the
scheduler's and is reported apart. Targets: through Slurm the controller spends at
most half the CPU per node it spends over SSH at 64 nodes (Slurm does the reaching),
and 64 nodes through Slurm take under 3x the wall time of 16.

    sudo python bench/slurm.py [--hosts 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.hosts.slurmcluster import SlurmCluster  # noqa: E402
from tests.hosts.testhosts import TestHostPool, host_shape  # noqa: E402

SCENARIO = "healthy-8x-h100-sxm"
GPUREADY = [
    sys.executable,
    "-c",
    "import sys; from validator.cli.main import main; sys.exit(main())",
]


def _process_cpu(pid: int) -> float:
    """CPU seconds a process has used (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(argv: list[str], env: dict[str, str], nodes: int) -> tuple[float, float]:
    """Wall seconds and controller CPU seconds of one certify run that must reach ``nodes``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv[3:6])} failed ({done.returncode}): {done.stderr[-800:]}")
    found = json.loads(done.stdout)["nodes"]
    judged = [n for n in found if n["verdict"] != "UNKNOWN"]
    if len(found) != nodes or len(judged) != nodes:
        sys.exit(f"expected {nodes} judged nodes, got {len(judged)} of {len(found)}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    shape = host_shape("debian12-slurm")
    sizes = sorted({16, args.hosts})
    rows: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as scratch, TestHostPool() as pool:
        work = Path(scratch)
        pool.start([SCENARIO] * args.hosts, shape=shape)
        with SlurmCluster(pool, cpus=2, real_memory=500) as cluster:
            env = {**os.environ, **cluster.env}
            known_hosts = pool.known_hosts(work / "known_hosts")
            inventory = pool.write_inventory(work / "inventory.ini")
            names = cluster.node_names
            ssh = [*GPUREADY, "certify", "--burn", "0", "--json", "--known-hosts", str(known_hosts)]
            slurm = [
                *GPUREADY, "certify", "--slurm", "--burn", "0", "--json", "--poll", "0.5",
                "--spool", str(cluster.shared_dir), "-i", str(inventory),
            ]  # fmt: skip
            db = ["--db", str(work / "history.db")]
            # Warm-up: the agent uploaded to every host's cache (SSH), bytecode compiled.
            timed([*ssh, *db, "-i", str(inventory)], env, args.hosts)
            ctld_before = _process_cpu(cluster._ctld.pid)
            for size in sizes:
                listed = f"--nodelist={','.join(names[:size])}"
                limit = ["--limit", ",".join(names[:size])]
                for label, argv in (
                    (f"ssh {size}", [*ssh, *db, "-i", str(inventory), *limit]),
                    (f"slurm {size}", [*slurm, *db, listed]),
                ):
                    samples = [timed(argv, env, size) for _ in range(args.repeat)]
                    rows[label] = (
                        statistics.median(s[0] for s in samples),
                        statistics.median(s[1] for s in samples),
                    )
            ctld_cpu = _process_cpu(cluster._ctld.pid) - ctld_before
    for label, (wall, cpu) in rows.items():
        size = int(label.split()[1])
        print(
            f"{label:10} wall {wall:6.2f} s   controller CPU {cpu:6.2f} s"
            f" = {1000 * cpu / size:6.1f} ms/node (median of {args.repeat})"
        )
    print(f"slurmctld CPU over the Slurm runs: {ctld_cpu:.2f} s")
    n = args.hosts
    cpu_ratio = rows[f"slurm {n}"][1] / rows[f"ssh {n}"][1]
    scaling = rows[f"slurm {n}"][0] / rows["slurm 16"][0]
    print(f"controller CPU per node, slurm/ssh at {n}: {cpu_ratio:.2f}x (target <= 0.5)")
    print(f"slurm wall {n} nodes / 16 nodes:        {scaling:.2f}x (target < 3)")
    return 0 if cpu_ratio <= 0.5 and scaling < 3 else 1


if __name__ == "__main__":
    sys.exit(main())
