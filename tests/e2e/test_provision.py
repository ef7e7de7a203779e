"""Provisioning end to end: playbooks/site.yml against Debian 12 test hosts.

Each test gets its own pool of test hosts (network namespaces with sshd, see
tests/hosts/README.md) whose root filesystem also has python3-apt, kmod and
pciutils, and the stub CUDA repository (tests/provision/stubrepo.py) served over
HTTP on the pool's bridge address, the only network the hosts have. The hosts'
Debian sources are emptied: they cannot reach a Debian mirror, so everything the
roles install must come from the stub repository, as on an air-gapped site with
only a CUDA mirror.

The hosts have no systemd, no GPU and share this machine's kernel, so the
inventory turns off what the contract makes switchable: the GPU presence
requirement, reboots, service management, the initramfs rebuild (and the GPU
runtime verification that needs nvidia-smi).

How provisioning is driven is one function, :func:`provision`: through the real
``gpuready provision ... --json`` CLI in a subprocess when that command exists,
else ``ansible-playbook`` directly; ``GPUREADY_PROVISION_VIA=cli|playbook``
forces one.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.testhosts import PACKAGES, HostsUnavailable, TestHost, TestHostPool, ensure_rootfs
from tests.provision.stubrepo import (
    FAIL_INSTALL_MARKER,
    KEYRING_PATH,
    NVCC_VERSION,
    NVIDIA_URL,
    RepoServer,
    StubRepo,
    StubRepoUnavailable,
    build_repo,
    serve_repo,
)

pytestmark = pytest.mark.hosts

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = REPO_ROOT / "playbooks" / "site.yml"
GROUP_VARS = REPO_ROOT / "inventory" / "group_vars" / "all.yml"
# python3-apt for the apt module (it would otherwise try to fetch it), kmod and
# pciutils for the driver role's probes.
PROVISION_PACKAGES = (*PACKAGES, "python3-apt", "kmod", "pciutils")
SOURCES_LIST = "/etc/apt/sources.list.d/gpuready-cuda.list"
# The contract's switches for hosts without systemd, GPUs or their own kernel.
# Python booleans: the INI inventory writes them as False/True, which Ansible reads
# as booleans (a lower-case "false" would stay a non-empty, truthy string).
TEST_SWITCHES: Mapping[str, object] = {
    "gpu_preflight_require_gpus": False,
    "nvidia_driver_skip_reboot": True,
    "nvidia_driver_manage_services": False,
    "nvidia_driver_rebuild_initramfs": False,
    "gpu_verify_driver_runtime": False,
}
PINNED = {
    "nvidia-driver-550-open": "550.90.07-1",
    "nvidia-kernel-open-dkms": "550.90.07-1",
    "cuda-toolkit-12-4": "12.4.1-1",
    "cuda-nvcc-12-4": f"{NVCC_VERSION}-1",
    "cudnn9-cuda-12": "9.1.0.70-1",
    "libcudnn9-cuda-12": "9.1.0.70-1",
    "libcudnn9-dev-cuda-12": "9.1.0.70-1",
}
# Packages that must be on hold (dpkg_selections) after provisioning.
HELD = ("nvidia-driver-550-open", "libcudnn9-cuda-12")
_RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)"
    r"\s+skipped=(\d+)\s+rescued=(\d+)\s+ignored=(\d+)",
    re.M,
)


def _unavailable(reason: str) -> None:
    # CI sets this so a machine that lost its hosts fails loudly instead of skipping.
    if os.environ.get("GPUREADY_REQUIRE_HOSTS") == "1":
        pytest.fail(f"GPUREADY_REQUIRE_HOSTS=1 but {reason}")
    pytest.skip(reason)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def provision_rootfs(test_rootfs: Path) -> Path:
    """The test hosts' root filesystem with the provisioning packages (cached)."""
    del test_rootfs  # its checks (root, tools, GPUREADY_SKIP_HOSTS) come first
    try:
        return ensure_rootfs(PROVISION_PACKAGES)
    except HostsUnavailable as exc:
        _unavailable(f"no provisioning root filesystem: {exc}")
        raise


@pytest.fixture(scope="session")
def stub_repo() -> StubRepo:
    """The stub CUDA repository (built once, cached by content)."""
    try:
        return build_repo()
    except StubRepoUnavailable as exc:
        _unavailable(str(exc))
        raise


@pytest.fixture
def pool(provision_rootfs: Path) -> Iterator[TestHostPool]:
    """An empty pool of provisioning hosts for this test."""
    del provision_rootfs
    with TestHostPool(packages=PROVISION_PACKAGES, name_prefix="gpu") as hosts:
        yield hosts


@dataclass
class Site:
    """Hosts, their inventory and the repository server of one test."""

    pool: TestHostPool
    hosts: list[TestHost]
    repo: StubRepo
    server: RepoServer
    inventory: Path
    known_hosts: Path
    state: Path

    @property
    def url(self) -> str:
        """The stub repository's URL, as the hosts reach it."""
        return self.server.url

    def set_pin(self, key: str, value: str) -> None:
        """Change one pinned version in the inventory's group_vars/all.yml."""
        path = self.inventory.parent / "group_vars" / "all.yml"
        text, count = re.subn(
            rf"^{re.escape(key)}:.*$", f'{key}: "{value}"', path.read_text(), flags=re.M
        )
        assert count == 1, f"{key} is not in {path}"
        path.write_text(text)


@pytest.fixture
def make_site(pool: TestHostPool, stub_repo: StubRepo, tmp_path: Path) -> Iterator[Any]:
    """``make_site(count, scenario=...)``: start hosts and serve the repository to them."""
    stack: list[RepoServer] = []

    def make(count: int, scenario: str = "healthy-8x-h100-sxm") -> Site:
        if not SITE.is_file():
            _unavailable(f"{SITE.relative_to(REPO_ROOT)} does not exist yet")
        hosts = pool.start([scenario] * count)
        for host in hosts:
            # The hosts cannot reach a Debian mirror; apt must not try.
            (host.root / "etc/apt/sources.list").write_text("")
        bridge = str(pool.network.network_address + 1)
        server = RepoServer(stub_repo.path, bridge).__enter__()
        stack.append(server)
        known_hosts = pool.known_hosts(tmp_path / "known_hosts")
        ssh_args = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
        inventory_dir = tmp_path / "inventory"
        (inventory_dir / "group_vars").mkdir(parents=True)
        # The pins in one place: the repository's own group_vars, copied.
        shutil.copy(GROUP_VARS, inventory_dir / "group_vars" / "all.yml")
        inventory = pool.write_inventory(
            inventory_dir / "hosts.ini",
            extra_vars={**TEST_SWITCHES, "ansible_ssh_common_args": f'"{ssh_args}"'},
        )
        return Site(pool, hosts, stub_repo, server, inventory, known_hosts, tmp_path / "state")

    yield make
    for server in stack:
        server.__exit__(None, None, None)


# ---------------------------------------------------------------- driving provisioning


@dataclass
class Outcome:
    """One provisioning run: exit code, recap per host, wall time, what it printed."""

    rc: int
    recap: dict[str, dict[str, int]]
    wall_s: float
    output: str
    messages: dict[str, str]

    def changed(self) -> dict[str, int]:
        """Changed task count per host."""
        return {host: counts["changed"] for host, counts in self.recap.items()}

    def failed_hosts(self) -> set[str]:
        """Hosts with a failed task or unreachable."""
        return {h for h, c in self.recap.items() if c["failed"] or c["unreachable"]}


@functools.cache
def cli_has_provision() -> bool:
    """Whether ``gpuready provision`` exists in this checkout yet."""
    proc = subprocess.run(
        [sys.executable, "-m", "validator.cli.main", "provision", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )
    return proc.returncode == 0 and "--mirror" in proc.stdout


def provision_via() -> str:
    """``cli`` or ``playbook``: how :func:`provision` runs (see the module docstring)."""
    forced = os.environ.get("GPUREADY_PROVISION_VIA")
    if forced in ("cli", "playbook"):
        return forced
    return "cli" if cli_has_provision() else "playbook"


def provision(site: Site, *extra: str, check: bool = False) -> Outcome:
    """Provision every host of ``site`` against the stub repository.

    Args:
        site: the hosts and their inventory.
        extra: more arguments (``-e KEY=VALUE``, ``--limit``...).
        check: run in check mode.
    """
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "XDG_STATE_HOME": str(site.state)}
    if provision_via() == "cli":
        argv = [sys.executable, "-m", "validator.cli.main", "provision"]
        argv += ["-i", str(site.inventory), "--mirror", site.url, "--json"]
    else:
        argv = ["ansible-playbook", "-i", str(site.inventory), str(SITE)]
        argv += ["-e", f"cuda_repository_url={site.url}"]
    argv += [*(["--check"] if check else []), *extra]
    started = time.monotonic()
    proc = subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=900, check=False
    )
    wall = time.monotonic() - started
    output = proc.stdout + proc.stderr
    recap: dict[str, dict[str, int]] = {}
    messages: dict[str, str] = {}
    if provision_via() == "cli":
        try:
            document = json.loads(proc.stdout)
        except ValueError:
            document = {"hosts": []}
        for entry in document.get("hosts", []):
            recap[entry["host"]] = {
                k: int(entry[k]) for k in ("ok", "changed", "failed", "unreachable")
            }
            messages[entry["host"]] = str(entry.get("message", ""))
    else:
        for match in _RECAP.finditer(proc.stdout):
            ok, changed, unreachable, failed = (int(match.group(i)) for i in range(2, 6))
            recap[match.group(1)] = {
                "ok": ok,
                "changed": changed,
                "failed": failed,
                "unreachable": unreachable,
            }
        for match in re.finditer(r"^fatal: \[(\S+)\]: FAILED! => (.*)$", proc.stdout, re.M):
            messages.setdefault(match.group(1), match.group(2))
    return Outcome(proc.returncode, recap, wall, output, messages)


# ---------------------------------------------------------------- host inspection


def installed(host: TestHost, names: Mapping[str, str] | tuple[str, ...]) -> dict[str, str]:
    """name -> installed version ("" when not installed) on ``host``."""
    rc, out, _ = host.run(
        "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' "
        + " ".join(names)
        + " 2>/dev/null"
    )
    del rc  # dpkg-query exits 1 when some name is unknown; the lines still say which
    found = dict.fromkeys(names, "")
    for line in out.splitlines():
        parts = line.split()
        # Status-Abbrev is desired state, then status: "ii" installed, "hi" installed
        # and held (what provisioning leaves), "rc"/"un" not installed.
        if len(parts) >= 3 and len(parts[2]) >= 2 and parts[2][1] == "i":
            found[parts[0]] = parts[1]
    return found


def held(host: TestHost) -> set[str]:
    """Packages whose dpkg selection is hold."""
    _, out, _ = host.run("dpkg --get-selections")
    return {line.split()[0] for line in out.splitlines() if line.split()[1:] == ["hold"]}


def read(host: TestHost, path: str) -> str:
    """A file on the host (links resolved there); "" when absent."""
    rc, out, _ = host.run(f"cat {path} 2>/dev/null")
    return out if rc == 0 else ""


def describe(outcome: Outcome) -> str:
    return f"rc={outcome.rc} recap={outcome.recap}\n{outcome.output[-6000:]}"


# ---------------------------------------------------------------- the stub packages alone


def test_stub_packages_install_with_apt_on_a_test_host(
    pool: TestHostPool, stub_repo: StubRepo
) -> None:
    """The repository itself, without the roles: signed-by, pins, alternatives, nvcc."""
    (host,) = pool.start(["healthy-8x-h100-sxm"])
    (host.root / "etc/apt/sources.list").write_text("")
    keyring = host.root / KEYRING_PATH.lstrip("/")
    keyring.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(stub_repo.keyring, keyring)
    with serve_repo(stub_repo, str(pool.network.network_address + 1)) as server:
        (host.root / SOURCES_LIST.lstrip("/")).write_text(
            f"deb [signed-by={KEYRING_PATH}] {server.url} /\n"
        )
        rc, out, err = host.run("apt-get update", timeout=120)
        assert rc == 0, out + err
        pins = " ".join(f"{name}={version}" for name, version in PINNED.items())
        rc, out, err = host.run(
            f"DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {pins}",
            timeout=300,
        )
        assert rc == 0, out + err
        assert server.fetched("InRelease") == [host.address]
    assert installed(host, PINNED) == PINNED
    rc, out, _ = host.run("/usr/local/cuda/bin/nvcc --version")
    assert rc == 0
    assert f"V{NVCC_VERSION}" in out
    _, link, _ = host.run("readlink -f /usr/include/cudnn_version.h")
    assert link.strip() == "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h"
    assert "#define CUDNN_MINOR 1" in read(host, "/usr/include/cudnn_version.h")


# ---------------------------------------------------------------- provisioning


def assert_provisioned(site: Site, host: TestHost, driver: str = "550.90.07-1") -> None:
    """Pinned packages installed and held, and the files the roles own in place."""
    want = {**PINNED, "nvidia-driver-550-open": driver, "nvidia-kernel-open-dkms": driver}
    assert installed(host, want) == want, host.name
    assert set(HELD) <= held(host), host.name
    # Only NVSwitch systems get the fabric manager; the test hosts have none.
    assert installed(host, ("nvidia-fabricmanager-550",)) == {"nvidia-fabricmanager-550": ""}
    assert "/usr/local/cuda/bin" in read(host, "/etc/profile.d/cuda.sh")
    rc, out, _ = host.run("sh -lc 'command -v nvcc'")
    assert (rc, out.strip()) == (0, "/usr/local/cuda/bin/nvcc"), host.name
    _, blacklist, _ = host.run("cat /etc/modprobe.d/*.conf")
    assert re.search(r"^blacklist nouveau$", blacklist, re.M), host.name
    _, dropin, _ = host.run("cat /etc/systemd/system/nvidia-persistenced.service.d/*.conf")
    assert "--persistence-mode" in dropin, host.name
    # Our own list with signed-by, and no list of NVIDIA's left to conflict with it.
    assert read(host, SOURCES_LIST) == f"deb [signed-by={KEYRING_PATH}] {site.url} /\n"
    rc, _, _ = host.run(f"grep -rl '{NVIDIA_URL.split('/')[2]}' /etc/apt/sources.list.d")
    assert rc == 1, f"{host.name} still lists NVIDIA's repository"
    keyring = host.root / KEYRING_PATH.lstrip("/")
    assert keyring.read_bytes() == site.repo.keyring.read_bytes(), host.name
    # Unattended upgrades leave the pinned packages alone.
    _, snippets, _ = host.run("cat /etc/apt/apt.conf.d/*")
    assert "Package-Blacklist" in snippets, host.name
    assert "cudnn" in snippets, host.name


def test_provision_installs_pins_and_is_idempotent(make_site: Any) -> None:
    site: Site = make_site(3)
    first = provision(site)
    assert first.rc == 0, describe(first)
    assert set(first.recap) == {h.name for h in site.hosts}
    assert all(count > 0 for count in first.changed().values()), first.recap
    for host in site.hosts:
        assert_provisioned(site, host)
    assert sorted(site.server.fetched("cuda-keyring_1.1-1_all.deb")) == sorted(
        h.address for h in site.hosts
    )
    second = provision(site)
    assert second.rc == 0, describe(second)
    assert second.changed() == {h.name: 0 for h in site.hosts}, describe(second)
    assert not second.failed_hosts()
    print(
        f"\nprovision bench ({provision_via()}, {len(site.hosts)} hosts): "
        f"first {first.wall_s:.1f} s, second {second.wall_s:.1f} s, "
        f"ratio {second.wall_s / first.wall_s:.2f} (target < 0.33)"
    )


def test_check_mode_changes_nothing(make_site: Any) -> None:
    site: Site = make_site(2)
    before = {h.name: held(h) for h in site.hosts}
    outcome = provision(site, check=True)
    assert outcome.rc == 0, describe(outcome)
    assert set(outcome.recap) == {h.name for h in site.hosts}
    for host in site.hosts:
        names = (*PINNED, "cuda-keyring")
        assert installed(host, names) == dict.fromkeys(names, ""), host.name
        assert held(host) == before[host.name]
        assert read(host, SOURCES_LIST) == ""
        assert read(host, "/etc/profile.d/cuda.sh") == ""
        assert not (host.root / KEYRING_PATH.lstrip("/")).exists()


def test_raising_the_driver_pin_upgrades_on_the_next_run(make_site: Any) -> None:
    site: Site = make_site(2)
    first = provision(site)
    assert first.rc == 0, describe(first)
    site.set_pin("gpuready_driver_version", "550.127.05")
    raised = provision(site)
    assert raised.rc == 0, describe(raised)
    assert all(count > 0 for count in raised.changed().values()), raised.recap
    for host in site.hosts:
        # Upgraded despite the hold, and held again at the new version.
        assert_provisioned(site, host, driver="550.127.05-1")


def test_a_failed_install_fails_that_host_only(make_site: Any) -> None:
    site: Site = make_site(3)
    broken = site.hosts[1]
    # The stub DKMS package's postinst fails where this file exists (a failed DKMS build).
    rc, _, err = broken.run(f"touch {FAIL_INSTALL_MARKER}")
    assert rc == 0, err
    outcome = provision(site)
    assert outcome.rc != 0, describe(outcome)
    assert outcome.failed_hosts() == {broken.name}, describe(outcome)
    assert outcome.recap[broken.name]["failed"] >= 1
    assert outcome.messages.get(broken.name), describe(outcome)
    for host in site.hosts:
        if host is not broken:
            assert_provisioned(site, host)


# ---------------------------------------------------------------- certify afterwards

# What validator/node/scenario.py needs for this test (not there yet): a top-level
# scenario key ``passthrough`` = {"paths": [path prefixes], "commands": [program
# names]}. ScenarioSystem.read_text/glob for a path under one of the prefixes, and
# which/run for a listed program (by basename), are answered by the real host
# (the live System), ahead of the scenario's own files and commands.
PASSTHROUGH = {
    "paths": ["/usr/local/cuda", "/usr/include"],
    "commands": ["nvcc", "dpkg-query"],
}
# Decoys: were the scenario's own answers used, certify would see these instead.
DECOY_NVCC = (
    "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2023 NVIDIA Corporation\n"
    "Built on Tue_Aug_15_22:02:13_PDT_2023\nCuda compilation tools, release 12.2, V12.2.140\n"
    "Build cuda_12.2.r12.2/compiler.33191640_0\n"
)
DECOY_CUDNN = "#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 9\n#define CUDNN_PATCHLEVEL 7\n"


def scenario_supports_passthrough() -> bool:
    from validator.node import scenario

    return "passthrough" in scenario.TOP_KEYS


def certify(site: Site, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    from validator.cli.main import main

    capsys.readouterr()
    code = main(
        [
            "certify",
            "-i",
            str(site.inventory),
            "--known-hosts",
            str(site.known_hosts),
            "--json",
            # A short simulated burn-in: --burn 0 would leave burn.run
            # UNKNOWN, and an unmeasured node is never CERTIFIED.
            "--burn",
            "5s",
        ]
    )
    out, _ = capsys.readouterr()
    return code, json.loads(out)


def test_certify_reads_what_provisioning_installed(
    make_site: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without it the simulated scenario would answer nvcc/cuDNN itself (the decoys).
    assert scenario_supports_passthrough(), "validator/node/scenario.py lacks 'passthrough'"
    site: Site = make_site(2)
    for host in site.hosts:
        host.set_scenario(
            {
                "name": "provisioned-h100",
                "description": "simulated GPUs, real nvcc and cuDNN from the stub packages",
                "extends": "healthy-8x-h100-sxm",
                "host": {"hostname": host.name},
                "commands": {
                    "nvcc --version": {"rc": 0, "stdout": DECOY_NVCC},
                    "dpkg-query *": {"rc": 0, "stdout": "libcudnn8 8.9.7.29-1+cuda12.2\n"},
                },
                "files": {"/usr/include/cudnn_version.h": DECOY_CUDNN},
                "passthrough": PASSTHROUGH,
            }
        )
    outcome = provision(site)
    assert outcome.rc == 0, describe(outcome)
    code, document = certify(site, capsys)
    for node in document["nodes"]:
        # NodeFacts.tools (model.ToolFacts) holds what an operator pins: nvcc, cuDNN.
        facts = node["facts"]["tools"]
        assert facts["nvcc_version"] == NVCC_VERSION, node["hostname"]
        assert facts["nvcc_path"].startswith("/usr/local/cuda"), facts["nvcc_path"]
        assert facts["cudnn_version"] == "9.1.0", node["hostname"]
        assert node["verdict"] == "CERTIFIED", node["findings"]
    assert code == 0
    # The same pins judge them: raise cuDNN's and the installed 9.1.0 no longer passes.
    site.set_pin("gpuready_cudnn_version", "9.2.0")
    code, document = certify(site, capsys)
    assert code != 0
    for node in document["nodes"]:
        failed = {f["check"] for f in node["findings"] if f["severity"] == "FAIL"}
        assert "versions.cudnn" in failed, node["findings"]
