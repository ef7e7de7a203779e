"""Fan-out speed: `gpuready certify -i` against `ansible -m command` running the same agent.

Starts 64 test hosts on this machine (network namespaces, real sshd; needs
root), then in one run times, with the simulated source and no burn:

- gpuready over SSH on 1, 16 and 64 hosts (after a warm-up run that uploads
  the agent, so every timed run finds it cached, as on a real fleet);
- `ansible -m ansible.builtin.command` running the same cached agent on 16 and
  64 hosts (forks = the host count).

Targets: at 64 hosts gpuready is at least 3x faster than the ad-hoc run, and 64
hosts take under 3x the time of one.

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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.hosts.testhosts import TestHostPool, ensure_rootfs  # noqa: E402
from validator.remote.bundle import build_agent  # noqa: E402

SCENARIO = "healthy-8x-h100-sxm"


def timed(argv: list[str], env: dict[str, str], expect_hosts: int | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if expect_hosts is not None:
        if done.returncode not in (0, 1):
            sys.exit(f"{argv[:4]} failed ({done.returncode}): {done.stderr[-800:]}")
        nodes = json.loads(done.stdout)["nodes"]
        reached = [
            n for n in nodes if n["findings"] and n["findings"][0]["check"] != "transport.reach"
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
        env = dict(
            os.environ,
            ANSIBLE_HOST_KEY_CHECKING="True",
            ANSIBLE_SSH_ARGS=f"-o UserKnownHostsFile={known_hosts}",
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
        ]
        # Warm-up: uploads the agent to every host's cache.
        timed([*ours, "-i", str(inventories[args.hosts])], env, expect_hosts=args.hosts)
        agent = f"/root/.cache/gpuready/{build_agent().filename}"
        results: dict[str, float] = {}
        for size in sizes:
            results[f"gpuready {size}"] = best(
                [
                    timed([*ours, "-i", str(inventories[size])], env, expect_hosts=size)
                    for _ in range(args.repeat)
                ]
            )
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
    n = args.hosts
    speedup = results[f"ansible {n}"] / results[f"gpuready {n}"]
    scaling = results[f"gpuready {n}"] / results["gpuready 1"]
    print(f"ansible/gpuready at {n} hosts: {speedup:.2f}x (target >= 3)")
    print(f"gpuready {n} hosts / 1 host:    {scaling:.2f}x (target < 3)")
    return 0 if speedup >= 3 and scaling < 3 else 1


if __name__ == "__main__":
    sys.exit(main())
