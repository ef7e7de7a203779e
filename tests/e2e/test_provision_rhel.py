"""RHEL-shaped test hosts: dnf module streams, versionlock and rpm over SSH, then site.yml.

The hosts are Debian test hosts (tests/hosts) whose root filesystem also has
Debian's rpm, dnf, python3-dnf and dnf-plugins-core, shaped as Rocky 9 after
start (:func:`tests.provision.stubrpm.shape_rhel_host`: os-release, release
files, dnf.conf, an rpm database), and the stub dnf repository of
tests/provision/stubrpm.py (NVIDIA's real RPM names, epoch 3, the
``nvidia-driver`` module streams) served on the pool's bridge address.

One pool serves the whole module (cold rootfs build once, then 0.1 s per host):
each test takes hosts of its own from it, so no test depends on another's state.
Everything is driven through Ansible over SSH, as the roles do it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_provision import TEST_SWITCHES, Outcome, provision_via
from tests.e2e.test_provision import provision as provision_site
from tests.hosts.testhosts import PACKAGES, HostsUnavailable, TestHost, TestHostPool, ensure_rootfs
from tests.provision.stubrepo import RepoServer
from tests.provision.stubrpm import (
    CUDA_DIR,
    CUDNN_VERSIONS,
    DRIVER_VERSIONS,
    RHEL_HOST_PACKAGES,
    StubRpmRepo,
    StubRpmUnavailable,
    build_rpm_repo,
    repo_file,
    shape_rhel_host,
)

pytestmark = pytest.mark.hosts

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = REPO_ROOT / "playbooks" / "site.yml"
GROUP_VARS = REPO_ROOT / "inventory" / "group_vars" / "all.yml"
# The test hosts' packages plus what makes them RHEL-shaped (a second cached rootfs).
RHEL_PACKAGES = (*PACKAGES, *RHEL_HOST_PACKAGES)
# For the direct dnf tests only: site.yml writes its own .repo file.
STUB_REPO_FILE = "/etc/yum.repos.d/gpuready-stub-cuda.repo"
OLD_550, NEW_550 = DRIVER_VERSIONS["550"]
NEW_580 = DRIVER_VERSIONS["580"][1]
HOST_COUNT = 6  # 4 for the dnf tests, 2 for site.yml (1 provisioned, 1 check mode)
_RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M
)


def _unavailable(reason: str) -> None:
    # CI sets this so a machine that lost its hosts fails loudly instead of skipping.
    if os.environ.get("GPUREADY_REQUIRE_HOSTS") == "1":
        pytest.fail(f"GPUREADY_REQUIRE_HOSTS=1 but {reason}")
    pytest.skip(reason)


# ---------------------------------------------------------------- fixtures


@dataclass
class RhelSite:
    """The module's RHEL-shaped hosts, their inventory and the repository server."""

    pool: TestHostPool
    hosts: list[TestHost]
    repo: StubRpmRepo
    server: RepoServer
    inventory: Path
    state: Path
    free: list[TestHost]

    @property
    def url(self) -> str:
        """The stub CUDA repository's URL, as the hosts reach it."""
        return f"{self.server.url}/{CUDA_DIR}"

    def take(self, count: int) -> list[TestHost]:
        """Hosts no other test has used."""
        if len(self.free) < count:
            raise AssertionError(f"the module pool has {len(self.free)} hosts left, {count} asked")
        taken, self.free[:] = self.free[:count], self.free[count:]
        return taken


@pytest.fixture(scope="module")
def rhel_site(test_rootfs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RhelSite]:
    """Six Rocky-9-shaped hosts and the stub dnf repository, shared by this module."""
    del test_rootfs  # its checks (root, tools, GPUREADY_SKIP_HOSTS) come first
    try:
        ensure_rootfs(RHEL_PACKAGES)
    except HostsUnavailable as exc:
        _unavailable(f"no RHEL-shaped root filesystem: {exc}")
    try:
        repo = build_rpm_repo()
    except StubRpmUnavailable as exc:
        _unavailable(str(exc))
        raise
    tmp = tmp_path_factory.mktemp("rhel")
    with TestHostPool(packages=RHEL_PACKAGES, name_prefix="el") as pool:
        hosts = pool.start(["healthy-8x-h100-sxm"] * HOST_COUNT)
        with RepoServer(repo.path, str(pool.network.network_address + 1)) as server:
            for host in hosts:
                shape_rhel_host(host, repo, server.url)
            known_hosts = pool.known_hosts(tmp / "known_hosts")
            ssh_args = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
            inventory_dir = tmp / "inventory"
            (inventory_dir / "group_vars").mkdir(parents=True)
            # The pins in one place: the repository's own group_vars, copied.
            shutil.copy(GROUP_VARS, inventory_dir / "group_vars" / "all.yml")
            inventory = pool.write_inventory(
                inventory_dir / "hosts.ini",
                extra_vars={**TEST_SWITCHES, "ansible_ssh_common_args": f'"{ssh_args}"'},
            )
            yield RhelSite(pool, hosts, repo, server, inventory, tmp / "state", list(hosts))


def _with_stub_repo(site: RhelSite, hosts: Sequence[TestHost]) -> None:
    for host in hosts:
        (host.root / STUB_REPO_FILE.lstrip("/")).write_text(repo_file(site.url))


# ---------------------------------------------------------------- Ansible over SSH


@dataclass
class Result:
    """One ad-hoc module run on one host."""

    ok: bool
    changed: bool
    data: dict[str, Any]


def ansible(
    site: RhelSite, hosts: Sequence[TestHost], module: str, args: str = ""
) -> dict[str, Result]:
    """Run one Ansible module ad hoc over SSH; host name -> result.

    The results come from ansible-core's ``tree`` callback (one JSON file per host).
    """
    tree = Path(tempfile.mkdtemp(prefix="ansible-tree-", dir=site.state.parent))
    env = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.tree",
        "ANSIBLE_CALLBACK_TREE_DIR": str(tree),
        "XDG_STATE_HOME": str(site.state),
    }
    argv = ["ansible", "all", "-i", str(site.inventory), "--limit", ",".join(h.name for h in hosts)]
    argv += ["-m", module, *(["-a", args] if args else [])]
    proc = subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=300, check=False
    )
    results: dict[str, Result] = {}
    for host in hosts:
        try:
            data = json.loads((tree / host.name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise AssertionError(
                f"ansible left no result for {host.name} (rc {proc.returncode}):\n"
                f"{proc.stdout}\n{proc.stderr}"
            ) from exc
        # The tree callback's file may lack "failed" for a command's non-zero exit.
        ok = not data.get("failed") and not data.get("unreachable") and data.get("rc", 0) == 0
        results[host.name] = Result(ok, bool(data.get("changed")), data)
    shutil.rmtree(tree, ignore_errors=True)
    return results


def command(site: RhelSite, host: TestHost, argv: str) -> Result:
    """``ansible -m command`` on one host."""
    return ansible(site, [host], "ansible.builtin.command", argv)[host.name]


def rpm_evr(site: RhelSite, host: TestHost, name: str) -> str:
    """``epoch:version-release`` of an installed package, through ``rpm -q`` over SSH."""
    result = command(site, host, f"rpm -q --qf %{{EPOCH}}:%{{VERSION}}-%{{RELEASE}} {name}")
    return str(result.data.get("stdout", "")) if result.ok else ""


# ---------------------------------------------------------------- the host shape and dnf


def test_ansible_facts_read_rocky_9_redhat_dnf(rhel_site: RhelSite) -> None:
    (host,) = rhel_site.take(1)
    result = ansible(rhel_site, [host], "ansible.builtin.setup", "gather_subset=min")[host.name]
    assert result.ok, result.data
    facts = result.data["ansible_facts"]
    assert facts["ansible_distribution"] == "Rocky"
    assert facts["ansible_distribution_major_version"] == "9"
    assert facts["ansible_distribution_version"] == "9.4"
    assert facts["ansible_os_family"] == "RedHat"
    assert facts["ansible_pkg_mgr"] == "dnf"


def test_module_stream_install_gets_that_branch_with_epoch_3(rhel_site: RhelSite) -> None:
    (host,) = rhel_site.take(1)
    _with_stub_repo(rhel_site, [host])
    enable = command(rhel_site, host, "dnf -y module enable nvidia-driver:550-open")
    assert enable.ok, enable.data
    # Ansible's dnf module (python3-dnf on the host), the newest of the enabled stream.
    install = ansible(rhel_site, [host], "ansible.builtin.dnf", "name=nvidia-driver state=present")
    assert install[host.name].ok, install[host.name].data
    assert install[host.name].changed, install[host.name].data
    assert rpm_evr(rhel_site, host, "nvidia-driver") == f"3:{NEW_550}-1.el9"
    # Its dependencies at the same EVR: the kmod of the stream's flavour, not the other.
    assert rpm_evr(rhel_site, host, "kmod-nvidia-open-dkms") == f"3:{NEW_550}-1.el9"
    assert rpm_evr(rhel_site, host, "kmod-nvidia-latest-dkms") == ""
    listed = command(rhel_site, host, "dnf -q module list --enabled nvidia-driver")
    assert re.search(r"^nvidia-driver\s+550-open \[e\]", listed.data["stdout"], re.M), listed.data
    # Installed again: nothing to do.
    again = ansible(rhel_site, [host], "ansible.builtin.dnf", "name=nvidia-driver state=present")
    assert again[host.name].ok, again[host.name].data
    assert not again[host.name].changed, again[host.name].data


def test_switch_to_another_stream_moves_the_branch(rhel_site: RhelSite) -> None:
    (host,) = rhel_site.take(1)
    _with_stub_repo(rhel_site, [host])
    for step in ("dnf -y module enable nvidia-driver:550-open", "dnf -y install nvidia-driver"):
        assert command(rhel_site, host, step).ok, step
    assert rpm_evr(rhel_site, host, "nvidia-driver") == f"3:{NEW_550}-1.el9"
    # Without --allowerasing or a reset, an enabled stream blocks the change (§6 #12).
    blocked = command(rhel_site, host, "dnf -y module enable nvidia-driver:580-open")
    assert not blocked.ok, blocked.data
    switched = command(
        rhel_site, host, "dnf -y module switch-to nvidia-driver:580-open --allowerasing"
    )
    assert switched.ok, switched.data
    for name in ("nvidia-driver", "kmod-nvidia-open-dkms", "nvidia-kmod-common"):
        assert rpm_evr(rhel_site, host, name) == f"3:{NEW_580}-1.el9", name


def test_versionlock_holds_the_installed_version(rhel_site: RhelSite) -> None:
    (host,) = rhel_site.take(1)
    _with_stub_repo(rhel_site, [host])
    assert command(rhel_site, host, "dnf -y module enable nvidia-driver:550-open").ok
    pinned = ansible(
        rhel_site, [host], "ansible.builtin.dnf", f"name=nvidia-driver-{OLD_550} state=present"
    )
    assert pinned[host.name].ok, pinned[host.name].data
    assert rpm_evr(rhel_site, host, "nvidia-driver") == f"3:{OLD_550}-1.el9"
    lock = command(rhel_site, host, "dnf versionlock add nvidia-driver")
    assert lock.ok, lock.data
    assert "Adding versionlock on" in lock.data["stdout"], lock.data
    listed = command(rhel_site, host, "dnf -q versionlock list")
    assert f"nvidia-driver-3:{OLD_550}-1.el9.*" in listed.data["stdout_lines"], listed.data
    # The newer version of the same stream is there, and the lock hides it.
    newer = ansible(
        rhel_site, [host], "ansible.builtin.dnf", f"name=nvidia-driver-{NEW_550} state=present"
    )
    assert not newer[host.name].ok, newer[host.name].data
    latest = ansible(rhel_site, [host], "ansible.builtin.dnf", "name=nvidia-driver state=latest")
    assert latest[host.name].ok, latest[host.name].data
    assert not latest[host.name].changed, latest[host.name].data
    assert rpm_evr(rhel_site, host, "nvidia-driver") == f"3:{OLD_550}-1.el9"
    # Released, the same request upgrades.
    assert command(rhel_site, host, "dnf versionlock delete nvidia-driver").ok
    freed = ansible(
        rhel_site, [host], "ansible.builtin.dnf", f"name=nvidia-driver-{NEW_550} state=present"
    )
    assert freed[host.name].ok, freed[host.name].data
    assert freed[host.name].changed, freed[host.name].data
    assert rpm_evr(rhel_site, host, "nvidia-driver") == f"3:{NEW_550}-1.el9"


# ---------------------------------------------------------------- site.yml end to end

# The pinned set on a RHEL host (inventory/group_vars/all.yml pins 550.90.07; the cuDNN
# pin is raised to a version the stub rpm repository has).
CUDNN_PIN = ".".join(CUDNN_VERSIONS[0].split(".")[:3])
# nvidia-packages.md §2d: the compute-only set on RHEL (no nvidia-driver desktop package).
EXPECTED = {
    "nvidia-driver-cuda": f"3:{OLD_550}-1.el9",
    "nvidia-driver-cuda-libs": f"3:{OLD_550}-1.el9",
    "libnvidia-ml": f"3:{OLD_550}-1.el9",
    "nvidia-persistenced": f"3:{OLD_550}-1.el9",
    "nvidia-kmod-common": f"3:{OLD_550}-1.el9",
    "kmod-nvidia-open-dkms": f"3:{OLD_550}-1.el9",
    "cuda-toolkit-12-4": "(none):12.4.1-1",
    "libcudnn9-cuda-12": f"(none):{CUDNN_VERSIONS[0]}-1",
}


def provision(site: RhelSite, hosts: Sequence[TestHost], *, check: bool = False) -> Outcome:
    """site.yml on ``hosts`` against the stub rpm repository, as test_provision.py runs it."""
    limit = ",".join(h.name for h in hosts)
    return provision_site(site, "--limit", limit, check=check)  # type: ignore[arg-type]


def _describe(outcome: Outcome) -> str:
    head = f"rc={outcome.rc} recap={outcome.recap} messages={outcome.messages}"
    return f"{head}\n{outcome.output[-8000:]}"


def _set_pin(site: RhelSite, key: str, value: str) -> None:
    path = site.inventory.parent / "group_vars" / "all.yml"
    text, count = re.subn(
        rf"^{re.escape(key)}:.*$", f'{key}: "{value}"', path.read_text(), flags=re.M
    )
    assert count == 1, f"{key} is not in {path}"
    path.write_text(text)


def installed_evrs(host: TestHost, names: Mapping[str, str] | Sequence[str]) -> dict[str, str]:
    """name -> ``epoch:version-release`` ("" when not installed), read on the host."""
    found = {}
    for name in names:
        rc, out, _ = host.run(f"rpm -q --qf '%{{EPOCH}}:%{{VERSION}}-%{{RELEASE}}' {name}")
        found[name] = out.strip() if rc == 0 else ""
    return found


def test_site_yml_installs_locks_and_converges_on_rhel_hosts(rhel_site: RhelSite) -> None:
    if not SITE.is_file():
        _unavailable(f"{SITE.relative_to(REPO_ROOT)} does not exist yet")
    hosts = rhel_site.take(1)
    checked = rhel_site.take(1)
    _set_pin(rhel_site, "gpuready_cudnn_version", CUDNN_PIN)

    # Check mode first, on a host of its own: it must change nothing there.
    dry = provision(rhel_site, checked, check=True)
    assert dry.rc == 0, _describe(dry)
    (host,) = checked
    assert installed_evrs(host, EXPECTED) == dict.fromkeys(EXPECTED, ""), host.name
    assert not (host.root / "etc/yum.repos.d/gpuready-cuda.repo").exists()
    assert host.run("dnf -q versionlock list")[1].strip() == ""

    first = provision(rhel_site, hosts)
    assert first.rc == 0, _describe(first)
    for host in hosts:
        assert installed_evrs(host, EXPECTED) == EXPECTED, host.name
        _, locks, _ = host.run("dnf -q versionlock list")
        for name in ("nvidia-driver-cuda", "kmod-nvidia-open-dkms"):
            assert f"{name}-3:{OLD_550}-1.el9.*" in locks.split(), (host.name, locks)
        _, streams, _ = host.run("dnf -q module list --enabled nvidia-driver")
        assert re.search(r"^nvidia-driver\s+550-open \[e\]", streams, re.M), (host.name, streams)

    second = provision(rhel_site, hosts)
    assert second.rc == 0, _describe(second)
    assert second.changed() == dict.fromkeys((h.name for h in hosts), 0), _describe(second)
    print(
        f"\nRHEL provision ({provision_via()}, {len(hosts)} hosts): first {first.wall_s:.1f} s, "
        f"second {second.wall_s:.1f} s"
    )

    # A raised pin upgrades through the version locks and locks the new version.
    _set_pin(rhel_site, "gpuready_driver_version", NEW_550)
    raised = provision(rhel_site, hosts)
    assert raised.rc == 0, _describe(raised)
    want = {
        name: evr.replace(OLD_550, NEW_550) if evr.startswith("3:") else evr
        for name, evr in EXPECTED.items()
    }
    for host in hosts:
        assert installed_evrs(host, want) == want, host.name
        _, locks, _ = host.run("dnf -q versionlock list")
        assert f"nvidia-driver-cuda-3:{NEW_550}-1.el9.*" in locks.split(), (host.name, locks)
        assert f"nvidia-driver-cuda-3:{OLD_550}-1.el9.*" not in locks.split(), (host.name, locks)
