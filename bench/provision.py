"""Converged rerun speed: `gpuready provision` on test hosts, first run against a rerun.

Starts N test hosts of one distribution shape (network namespaces, real sshd, the
stub CUDA repository served on the pool's bridge; needs root), provisions them with
playbooks/site.yml through the same driver as tests/e2e/test_provision.py, then
provisions them again, where nothing is left to change. Prints one JSON line:

    {"hosts": 3, "shape": "debian12", "via": "cli", "first_s": ..., "rerun_s": ...,
     "ratio": ..., "target": 0.25, "rerun_changed": {...}}

Target: the converged rerun takes at most 0.25 of the first run's wall time. Exit 0
when it does, 1 when it does not, 2 when a run failed or a rerun changed something
(then the ratio means nothing). A few minutes per shape.

    sudo python bench/provision.py [--hosts 3] [--shape debian12]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# The end-to-end test's own pieces, so the bench provisions exactly as the test does.
from tests.e2e.test_provision import (  # noqa: E402
    GROUP_VARS,
    PROVISION_PACKAGES,
    SHAPES,
    TEST_SWITCHES,
    Outcome,
    Site,
    _repositories,
    describe,
    prepare_host,
    provision,
    provision_via,
)
from tests.hosts.testhosts import TestHostPool, ensure_rootfs  # noqa: E402
from tests.provision.stubrepo import RepoServer  # noqa: E402

TARGET = 0.25
SCENARIO = "healthy-8x-h100-sxm"


def _failed(name: str, outcome: Outcome) -> None:
    sys.stderr.write(f"{name} run failed:\n{describe(outcome)}\n")
    sys.exit(2)


def main() -> int:
    """Provision, provision again, print the two wall times and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--shape", choices=[shape.id for shape in SHAPES], default=SHAPES[0].id)
    args = parser.parse_args()
    shape = next(s for s in SHAPES if s.id == args.shape)
    ensure_rootfs(PROVISION_PACKAGES)
    repo, archive_repo = _repositories(shape.repo)
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        pool = stack.enter_context(
            TestHostPool(packages=PROVISION_PACKAGES, shape=shape.host, name_prefix="gpu")
        )
        hosts = pool.start([SCENARIO] * args.hosts)
        bridge = str(pool.network.network_address + 1)
        server = stack.enter_context(RepoServer(repo.path, bridge))
        archive = None
        if archive_repo is not None:
            archive = (archive_repo, stack.enter_context(RepoServer(archive_repo.path, bridge)))
        for host in hosts:
            prepare_host(host, shape, repo, archive)
        known_hosts = pool.known_hosts(work / "known_hosts")
        ssh_args = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
        (work / "inventory" / "group_vars").mkdir(parents=True)
        shutil.copy(GROUP_VARS, work / "inventory" / "group_vars" / "all.yml")
        inventory = pool.write_inventory(
            work / "inventory" / "hosts.ini",
            extra_vars={**TEST_SWITCHES, "ansible_ssh_common_args": f'"{ssh_args}"'},
        )
        site = Site(pool, hosts, repo, server, inventory, known_hosts, work / "state", shape)
        site.set_pin("gpuready_driver_version", shape.driver)
        site.set_pin("gpuready_driver_branch", shape.branch)
        first = provision(site)
        if first.rc != 0:
            _failed("first", first)
        rerun = provision(site)
        if rerun.rc != 0 or any(rerun.changed().values()):
            _failed("converged", rerun)
    ratio = rerun.wall_s / first.wall_s
    print(
        json.dumps(
            {
                "hosts": args.hosts,
                "shape": shape.id,
                "via": provision_via(),
                "first_s": round(first.wall_s, 1),
                "rerun_s": round(rerun.wall_s, 1),
                "ratio": round(ratio, 3),
                "target": TARGET,
                "rerun_changed": rerun.changed(),
            }
        )
    )
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
