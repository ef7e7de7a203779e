"""Fan-out speed: `gpuready certify -i` against `ansible -m command` running the same agent.

Starts 64 test hosts on this machine (network namespaces, real sshd; needs
root), then in one run times, with the simulated source and no burn:

- gpuready over SSH on 1, 16 and 64 hosts (after a warm-up run that uploads
  the agent, so every timed run finds it cached, as on a real fleet);
- `ansible -m ansible.builtin.command` running the same cached agent on 16 and
  64 hosts (forks = the host count).

Targets: at 64 hosts gpuready is at least 3x faster than the ad-hoc run, 64
hosts take under 3x the time of one, and the controller spends at most
0.015 CPU-seconds per host (user + system of the certify process, from
os.wait4). Its peak RSS is shown beside it, and beside that the floor: the same
imports, inventory and SSH runs with nothing decoded, judged or stored
(bench/ssh_floor.py), measured the same way, so what certify adds is shown apart
from what any run over paramiko costs here. Every run writes its history into
a temporary store (``--db`` and ``XDG_STATE_HOME`` in the scratch directory),
never the user's, and runs from compiled bytecode, as an installed gpuready does
(bench/compiled.py).

    sudo python bench/fanout.py [--hosts 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(REPO / "bench"))

from compiled import as_installed  # noqa: E402

from tests.hosts.testhosts import TestHostPool, ensure_rootfs  # noqa: E402
from validator.remote.bundle import build_agent  # noqa: E402

SCENARIO = "healthy-8x-h100-sxm"


CPU_PER_HOST_TARGET_S = 0.015


@dataclass(frozen=True)
class Measured:
    """One process: how it ended, what it printed, its wall and CPU time, its peak memory."""

    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float  # user + system
    max_rss_mib: float


def measured(argv: list[str], env: dict[str, str]) -> Measured:
    """Run ``argv``; its own CPU time and peak RSS come from os.wait4, not the whole tree's."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return Measured(
            returncode=child.returncode,
            stdout=out.read().decode("utf-8", "replace"),
            stderr=err.read().decode("utf-8", "replace"),
            wall_s=wall,
            cpu_s=usage.ru_utime + usage.ru_stime,
            max_rss_mib=usage.ru_maxrss / 1024,  # KiB on Linux
        )


# Every timed gpuready run, by its host count.
CONTROLLER: dict[int, list[Measured]] = {}


def timed(argv: list[str], env: dict[str, str], expect_hosts: int | None = None) -> float:
    done = measured(argv, env)
    elapsed = done.wall_s
    if expect_hosts is not None:
        if done.returncode not in (0, 1):
            sys.exit(f"{argv[:4]} failed ({done.returncode}): {done.stderr[-800:]}")
        CONTROLLER.setdefault(expect_hosts, []).append(done)
        nodes = json.loads(done.stdout)["nodes"]
        reached = [
            # The fleet summary lists only non-PASS findings: a reached healthy node has none.
            n
            for n in nodes
            if not any(f["check"] == "transport.reach" for f in n["findings"])
        ]
        if len(nodes) != expect_hosts or len(reached) != expect_hosts:
            sys.exit(
                f"expected {expect_hosts} hosts with facts, got {len(reached)} of {len(nodes)}"
            )
    elif done.returncode != 0:
        sys.exit(
            f"{argv[:4]} failed ({done.returncode}): {done.stdout[-800:]} {done.stderr[-800:]}"
        )
    return elapsed


def floor_cpu(inventory: Path, known_hosts: Path, env: dict[str, str], repeat: int) -> float:
    """The median CPU of bench/ssh_floor.py: certify's imports, the inventory and SSH alone."""
    argv = [sys.executable, str(REPO / "bench" / "ssh_floor.py"), str(inventory), str(known_hosts)]
    runs = [measured(argv, env) for _ in range(repeat)]
    if any(run.returncode != 0 for run in runs):
        sys.exit(f"ssh_floor.py failed: {runs[0].stdout[-200:]} {runs[0].stderr[-800:]}")
    return statistics.median(run.cpu_s for run in runs)


def best(samples: list[float]) -> float:
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ensure_rootfs()
    sizes = sorted({1, 16, args.hosts})
    with tempfile.TemporaryDirectory() as scratch, TestHostPool() as pool:
        work = Path(scratch)
        pool.start([SCENARIO] * args.hosts)
        known_hosts = pool.known_hosts(work / "known_hosts")
        inventories = {}
        for size in sizes:
            pool_hosts, pool.hosts = pool.hosts, pool.hosts[:size]
            try:
                inventories[size] = pool.write_inventory(work / f"inventory-{size}.ini")
            finally:
                pool.hosts = pool_hosts
        # Compiled bytecode, as an installed gpuready runs (bench/compiled.py).
        env = as_installed(
            dict(
                os.environ,
                ANSIBLE_HOST_KEY_CHECKING="True",
                ANSIBLE_SSH_ARGS=f"-o UserKnownHostsFile={known_hosts}",
                # Anything that falls back to the default store lands here, not in the user's.
                XDG_STATE_HOME=str(work / "state"),
            )
        )
        ours = [
            sys.executable,
            "-m",
            "validator.cli.main",
            "certify",
            "--burn",
            "0",
            "--json",
            "--known-hosts",
            str(known_hosts),
            "--db",
            str(work / "history.db"),
        ]
        # Warm-up: uploads the agent to every host's cache.
        timed([*ours, "-i", str(inventories[args.hosts])], env, expect_hosts=args.hosts)
        agent = f"/root/.cache/gpuready/{build_agent().filename}"
        CONTROLLER.clear()  # the warm-up's uploads are not what is measured
        results: dict[str, float] = {}
        for size in sizes:
            results[f"gpuready {size}"] = best(
                [
                    timed([*ours, "-i", str(inventories[size])], env, expect_hosts=size)
                    for _ in range(args.repeat)
                ]
            )
        floor = floor_cpu(inventories[args.hosts], known_hosts, env, args.repeat)
        for size in sizes:
            if size == 1:
                continue
            adhoc = [
                "ansible", "all", "-i", str(inventories[size]), "-f", str(size),
                "-m", "ansible.builtin.command",
                "-a", f"/usr/bin/python3 {agent} --simulate /etc/gpuready/scenario.json",
            ]  # fmt: skip
            results[f"ansible {size}"] = best([timed(adhoc, env) for _ in range(args.repeat)])
    for name, seconds in results.items():
        print(f"{name:14} {seconds:7.2f} s (median of {args.repeat})")
    for size, runs in sorted(CONTROLLER.items()):
        cpu = statistics.median(r.cpu_s for r in runs)
        rss = max(r.max_rss_mib for r in runs)
        print(
            f"gpuready {size:<5} controller {cpu:6.2f} CPU-s = {cpu / size:.4f} CPU-s/host, "
            f"peak RSS {rss:6.1f} MiB"
        )
    n = args.hosts
    cpu_per_host = statistics.median(r.cpu_s for r in CONTROLLER[n]) / n
    if n > 16:
        # Start-up (imports, inventory) is paid once per run; this is what each host adds.
        cpu_16 = statistics.median(r.cpu_s for r in CONTROLLER[16])
        marginal = (cpu_per_host * n - cpu_16) / (n - 16)
        print(f"controller CPU each host adds (16 -> {n} hosts): {marginal:.4f} s")
    print(
        f"floor at {n} hosts (imports, inventory, SSH; nothing decoded): {floor:.2f} CPU-s "
        f"= {floor / n:.4f} CPU-s/host"
    )
    print(f"certify's own work beyond the floor: {cpu_per_host - floor / n:.4f} CPU-s/host")
    speedup = results[f"ansible {n}"] / results[f"gpuready {n}"]
    scaling = results[f"gpuready {n}"] / results["gpuready 1"]
    print(f"ansible/gpuready at {n} hosts: {speedup:.2f}x (target >= 3)")
    print(f"gpuready {n} hosts / 1 host:    {scaling:.2f}x (target < 3)")
    print(
        f"controller CPU per host at {n}: {cpu_per_host:.4f} s (target <= {CPU_PER_HOST_TARGET_S})"
    )
    ok = speedup >= 3 and scaling < 3 and cpu_per_host <= CPU_PER_HOST_TARGET_S
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
