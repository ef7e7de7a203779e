"""Provisioning end to end: playbooks/site.yml against Debian- and Ubuntu-shaped test hosts.

Every test runs once per *shape* (:data:`SHAPES`): Debian 12 at branch 550, Ubuntu
24.04 at branch 550 (branch in the package names) and at branch 590 (branch-free
names, chosen by ``nvidia-driver-pinning-*``). Each test gets its own pool of test
hosts (network namespaces with sshd, see tests/hosts/README.md; an Ubuntu-shaped
host is the Debian root with Ubuntu's release files, so Ansible's facts say Ubuntu
24.04) whose root filesystem also has python3-apt, kmod and pciutils, and the
shape's stub CUDA repository (tests/provision/stubrepo.py, names and versions from
nvidia-packages.md) served over HTTP on the pool's bridge address, the only network
the hosts have. The hosts cannot reach a distribution mirror: a Debian host's
sources are emptied; an Ubuntu host's sources.list names a stub of Canonical's
archive offering the same 550 package names at other versions, so the roles' pins
must pick the CUDA repository's. Everything else the roles install comes from the
stub CUDA repository, as on an air-gapped site with only a CUDA mirror.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.testhosts import (
    PACKAGES,
    HostsUnavailable,
    TestHost,
    TestHostPool,
    ensure_rootfs,
)
from tests.provision.stubrepo import (
    FAIL_INSTALL_MARKER,
    FAIL_TOOLKIT_MARKER,
    KEYRING_PATH,
    NVCC_VERSION,
    RepoServer,
    StubRepo,
    StubRepoUnavailable,
    build_archive,
    build_repo,
    stub_packages,
)
from tests.provision.stubrepo import (
    SHAPES as REPO_SHAPES,
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
# The roles write this when the loaded module is not the pinned one and reboots are off.
REBOOT_MARKER = "/var/lib/gpuready/reboot-required"
# What every shape installs besides the driver (§4 of nvidia-packages.md: one name and
# format across the deb repositories).
TOOLKIT_PINNED = {
    "cuda-toolkit-12-4": "12.4.1-1",
    "cuda-nvcc-12-4": f"{NVCC_VERSION}-1",
    "cudnn9-cuda-12": "9.1.0.70-1",
    "libcudnn9-cuda-12": "9.1.0.70-1",
    "libcudnn9-dev-cuda-12": "9.1.0.70-1",
}
# Packages that must be on hold (dpkg_selections) after provisioning, besides the driver's.
HELD = ("libcudnn9-cuda-12",)


@dataclass(frozen=True)
class Shape:
    """One distribution shape of the end-to-end tests and what its pins must install.

    The package names are nvidia-packages.md's, for packages every driver install of
    the shape has (the full and the compute-only sets alike): the DKMS module and
    the CUDA/NVML user-space library.

    Attributes:
        id: the test id.
        host: the test hosts' shape (tests.hosts.testhosts.SHAPES).
        repo: the stub repository's shape (tests.provision.stubrepo.SHAPES).
        branch: gpuready_driver_branch.
        driver: gpuready_driver_version at first.
        raised: a newer version of the same branch, for the pin raise.
        revision: the driver packages' Debian revision (§0).
        kernel_module: the DKMS module package.
        compute: the compute library package.
        fabricmanager: the Fabric Manager package (never on hosts without NVSwitch).
        pinning: whether one of :meth:`pinning_packages` must be installed (590 and newer).
    """

    id: str
    host: str
    repo: str
    branch: str
    driver: str
    raised: str
    revision: str
    kernel_module: str
    compute: str
    fabricmanager: str
    pinning: bool = False

    def deb(self, version: str) -> str:
        """The driver packages' full version."""
        return f"{version}-{self.revision}"

    def driver_packages(self, version: str | None = None) -> dict[str, str]:
        """name -> full version of the driver packages the pin must install."""
        deb = self.deb(version or self.driver)
        return {self.kernel_module: deb, self.compute: deb}

    def pinning_packages(self, version: str | None = None) -> tuple[str, ...]:
        """The branch and the exact-version pinning packages (§2a: one, before the driver)."""
        return (
            f"nvidia-driver-pinning-{self.branch}",
            f"nvidia-driver-pinning-{version or self.driver}",
        )

    def pinned(self, version: str | None = None) -> dict[str, str]:
        """Every package the pins must install, name -> full version."""
        return {**self.driver_packages(version), **TOOLKIT_PINNED}

    def held(self) -> set[str]:
        """The packages that must be on hold."""
        return {self.kernel_module, self.compute, *HELD}


SHAPES = [
    # §2c: Debian names without a branch, `<ver>-1`; §3: FM with the branch below 580.
    Shape("debian12", "debian12", "debian12", "550", "550.90.07", "550.127.05", "1",
          "nvidia-kernel-open-dkms", "libcuda1", "nvidia-fabricmanager-550"),
    # §2a: Ubuntu 550, branch in every name, `-0ubuntu1`.
    Shape("ubuntu2404-550", "ubuntu2404", "ubuntu2404", "550", "550.90.07", "550.163.01",
          "0ubuntu1", "nvidia-dkms-550-open", "libnvidia-compute-550",
          "nvidia-fabricmanager-550"),
    # §2a: Ubuntu >= 590, branch-free names; the pinning package first.
    Shape("ubuntu2404-590", "ubuntu2404", "ubuntu2404", "590", "590.44.01", "590.48.01",
          "0ubuntu1", "nvidia-dkms-open", "libnvidia-compute", "nvidia-fabricmanager",
          pinning=True),
]  # fmt: skip
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


@functools.cache
def _repositories(shape: str) -> tuple[StubRepo, StubRepo | None]:
    return build_repo(shape=shape), build_archive(shape)


@pytest.fixture
def shape(request: pytest.FixtureRequest) -> Shape:
    """The distribution shape this test runs on: Debian 12 unless marked EVERY_SHAPE."""
    chosen: Shape = getattr(request, "param", SHAPES[0])
    return chosen


# What every shape must show (install, hold, converge, check mode, pin raise) runs on
# each; the rest (failures, batches, certify) on Debian 12 alone, which keeps CI short.
EVERY_SHAPE = pytest.mark.parametrize(
    "shape", SHAPES, ids=[shape.id for shape in SHAPES], indirect=True
)


@pytest.fixture
def stub_repo(shape: Shape) -> StubRepo:
    """The shape's stub CUDA repository (built once per shape, cached by content)."""
    try:
        return _repositories(shape.repo)[0]
    except StubRepoUnavailable as exc:
        _unavailable(str(exc))
        raise


@pytest.fixture
def archive_repo(shape: Shape, stub_repo: StubRepo) -> StubRepo | None:
    """The shape's competing distribution archive (Ubuntu: Canonical's), or None."""
    del stub_repo
    return _repositories(shape.repo)[1]


@pytest.fixture
def pool(provision_rootfs: Path, shape: Shape) -> Iterator[TestHostPool]:
    """An empty pool of provisioning hosts of the shape for this test."""
    del provision_rootfs
    with TestHostPool(packages=PROVISION_PACKAGES, shape=shape.host, name_prefix="gpu") as hosts:
        yield hosts


def prepare_host(
    host: TestHost,
    shape: Shape,
    stub_repo: StubRepo,
    archive: tuple[StubRepo, RepoServer] | None,
) -> None:
    """What a real host of the shape has before provisioning: its sources and kernel."""
    if archive is None:
        # The hosts cannot reach a Debian mirror; apt must not try.
        (host.root / "etc/apt/sources.list").write_text("")
    else:
        # Canonical's archive, as every Ubuntu host lists it (here a stub of it).
        repo, server = archive
        keyring = host.root / REPO_SHAPES[shape.repo].archive_keyring.lstrip("/")
        keyring.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(repo.keyring, keyring)
        (host.root / "etc/apt/sources.list").write_text(
            f"deb [signed-by={REPO_SHAPES[shape.repo].archive_keyring}] {server.url} /\n"
        )
    # The running kernel's image and its flavour's meta are installed on a real host.
    meta = "generic" if shape.host.startswith("ubuntu") else "amd64"
    kernel = os.uname().release
    debs = [
        next(stub_repo.path.glob(f"linux-image-{kernel}_*.deb")),
        next(stub_repo.path.glob(f"linux-image-{meta}_*.deb")),
    ]
    for deb in debs:
        shutil.copy(deb, host.root / "tmp" / deb.name)
    rc, out, err = host.run("dpkg -i " + " ".join(f"/tmp/{deb.name}" for deb in debs))
    assert rc == 0, out + err


@dataclass
class Site:
    """Hosts, their inventory and the repository servers of one test."""

    pool: TestHostPool
    hosts: list[TestHost]
    repo: StubRepo
    server: RepoServer
    inventory: Path
    known_hosts: Path
    state: Path
    shape: Shape = field(default_factory=lambda: SHAPES[0])

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


def write_site(
    pool: TestHostPool,
    hosts: list[TestHost],
    repo: StubRepo,
    server: RepoServer,
    tmp_path: Path,
    *,
    shape: Shape = SHAPES[0],
    simulate: bool = True,
) -> Site:
    """The site of ``hosts``: its inventory, with the test switches and known hosts.

    The pins in one place: the repository's own group_vars, copied, which a test then
    sets (:meth:`Site.set_pin`).
    """
    known_hosts = pool.known_hosts(tmp_path / "known_hosts")
    ssh_args = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
    inventory_dir = tmp_path / "inventory"
    (inventory_dir / "group_vars").mkdir(parents=True)
    shutil.copy(GROUP_VARS, inventory_dir / "group_vars" / "all.yml")
    inventory = pool.write_inventory(
        inventory_dir / "hosts.ini",
        extra_vars={**TEST_SWITCHES, "ansible_ssh_common_args": f'"{ssh_args}"'},
        simulate=simulate,
    )
    return Site(pool, hosts, repo, server, inventory, known_hosts, tmp_path / "state", shape)


@pytest.fixture
def make_site(
    pool: TestHostPool,
    shape: Shape,
    stub_repo: StubRepo,
    archive_repo: StubRepo | None,
    tmp_path: Path,
) -> Iterator[Any]:
    """``make_site(count, scenario=...)``: start hosts and serve the repositories to them."""
    stack: list[RepoServer] = []

    def make(count: int, scenario: str = "healthy-8x-h100-sxm") -> Site:
        if not SITE.is_file():
            _unavailable(f"{SITE.relative_to(REPO_ROOT)} does not exist yet")
        hosts = pool.start([scenario] * count)
        bridge = str(pool.network.network_address + 1)
        server = RepoServer(stub_repo.path, bridge).__enter__()
        stack.append(server)
        archive = None
        if archive_repo is not None:
            archive_server = RepoServer(archive_repo.path, bridge).__enter__()
            stack.append(archive_server)
            archive = (archive_repo, archive_server)
        for host in hosts:
            prepare_host(host, shape, stub_repo, archive)
        site = write_site(pool, hosts, stub_repo, server, tmp_path, shape=shape)
        site.set_pin("gpuready_driver_version", shape.driver)
        site.set_pin("gpuready_driver_branch", shape.branch)
        return site

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
    document: dict[str, Any] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

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


def _event_order(artifacts: str) -> list[str]:
    # ansible-runner's job_events, by counter: the host of every task result.
    order: list[tuple[int, str]] = []
    for path in Path(artifacts, "job_events").glob("*.json"):
        with open(path, encoding="utf-8") as handle:
            event = json.load(handle)
        host = event.get("event_data", {}).get("host")
        if host and str(event.get("event", "")).startswith("runner_on_"):
            order.append((int(event["counter"]), str(host)))
    return [host for _, host in sorted(order)]


def provision(site: Site, *extra: str, check: bool = False, batch: int | None = None) -> Outcome:
    """Provision every host of ``site`` against the stub repository.

    Args:
        site: the hosts and their inventory.
        extra: more arguments (``-e KEY=VALUE``, ``--limit``...).
        check: run in check mode.
        batch: roll through the hosts this many at a time (``gpuready provision
            --batch N``; the playbook's ``-e provision_serial=N`` without the CLI).
    """
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "XDG_STATE_HOME": str(site.state)}
    if provision_via() == "cli":
        argv = [sys.executable, "-m", "validator.cli.main", "provision"]
        argv += ["-i", str(site.inventory), "--mirror", site.url, "--json"]
    else:
        argv = ["ansible-playbook", "-i", str(site.inventory), str(SITE)]
        argv += ["-e", f"cuda_repository_url={site.url}"]
    if batch is not None:
        argv += ["--batch", str(batch)] if provision_via() == "cli" else [
            "-e", f"provision_serial={batch}"
        ]  # fmt: skip
    argv += [*(["--check"] if check else []), *extra]
    started = time.monotonic()
    proc = subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=900, check=False
    )
    wall = time.monotonic() - started
    output = proc.stdout + proc.stderr
    recap: dict[str, dict[str, int]] = {}
    messages: dict[str, str] = {}
    document: dict[str, Any] = {}
    order: list[str] = []
    if provision_via() == "cli":
        try:
            document = json.loads(proc.stdout)
        except ValueError:
            document = {"hosts": []}
        if document.get("artifacts_dir"):
            order = _event_order(str(document["artifacts_dir"]))
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
        order = re.findall(r"^(?:ok|changed|skipping|fatal): \[([^\]]+)\]", proc.stdout, re.M)
    return Outcome(proc.returncode, recap, wall, output, messages, document, order)


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


def showhold(host: TestHost) -> set[str]:
    """What ``apt-mark showhold`` lists."""
    rc, out, err = host.run("apt-mark showhold")
    assert rc == 0, err
    return set(out.split())


def candidate(host: TestHost, name: str) -> str:
    """The candidate version ``apt-cache policy`` shows for ``name``."""
    _, out, _ = host.run(f"apt-cache policy {name}")
    match = re.search(r"^\s*Candidate: (\S+)", out, re.M)
    return match.group(1) if match else ""


def read(host: TestHost, path: str) -> str:
    """A file on the host (links resolved there); "" when absent."""
    rc, out, _ = host.run(f"cat {path} 2>/dev/null")
    return out if rc == 0 else ""


def describe(outcome: Outcome) -> str:
    return f"rc={outcome.rc} recap={outcome.recap}\n{outcome.output[-6000:]}"


# ---------------------------------------------------------------- the stub packages alone


@EVERY_SHAPE
def test_stub_packages_install_with_apt_on_a_test_host(
    make_site: Any, shape: Shape, stub_repo: StubRepo
) -> None:
    """The repository itself, without the roles: signed-by, pins, alternatives, nvcc."""
    site: Site = make_site(1)
    (host,) = site.hosts
    keyring = host.root / KEYRING_PATH.lstrip("/")
    keyring.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(stub_repo.keyring, keyring)
    (host.root / SOURCES_LIST.lstrip("/")).write_text(
        f"deb [signed-by={KEYRING_PATH}] {site.url} /\n"
    )
    rc, out, err = host.run("apt-get update", timeout=120)
    assert rc == 0, out + err
    assert host.address in site.server.fetched("InRelease")
    install = "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends"
    toolkit = [f"{name}={version}" for name, version in TOOLKIT_PINNED.items()]
    if shape.repo == "debian12" or shape.pinning:
        # nvidia-packages.md §2a (>= 590) / §2c: the pinning package first, then names
        # without a version: its preferences file must choose the pinned version.
        rc, out, err = host.run(f"{install} nvidia-driver-pinning-{shape.driver}", timeout=300)
        assert rc == 0, out + err
        pins = " ".join([*shape.driver_packages(), *toolkit])
    else:
        # §2a 535/550: every package `=<ver>-0ubuntu1`; one left unpinned would be taken
        # at its newest and break the `=` dependencies (pitfall 3).
        pins = " ".join([*(f"{n}={v}" for n, v in dependency_closure(shape).items()), *toolkit])
    rc, out, err = host.run(f"{install} {pins}", timeout=300)
    assert rc == 0, out + err
    assert installed(host, shape.pinned()) == shape.pinned()
    rc, out, _ = host.run("/usr/local/cuda/bin/nvcc --version")
    assert rc == 0
    assert f"V{NVCC_VERSION}" in out
    _, link, _ = host.run("readlink -f /usr/include/cudnn_version.h")
    assert link.strip() == "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h"
    assert "#define CUDNN_MINOR 1" in read(host, "/usr/include/cudnn_version.h")


def dependency_closure(shape: Shape) -> dict[str, str]:
    """The driver packages and everything they depend on at ``=`` (name -> version)."""
    by_key = {(p.name, p.version): p for p in stub_packages(shape=shape.repo)}
    todo = list(shape.driver_packages().items())
    found: dict[str, str] = {}
    while todo:
        name, version = todo.pop()
        if name in found:
            continue
        found[name] = version
        for dep in by_key[(name, version)].depends:
            match = re.fullmatch(r"(\S+) \(= (\S+)\)", dep)
            if match:
                todo.append((match.group(1), match.group(2)))
    return found


# ---------------------------------------------------------------- provisioning


def assert_provisioned(site: Site, host: TestHost, driver: str | None = None) -> None:
    """Pinned packages installed and held, and the files the roles own in place."""
    shape = site.shape
    want = shape.pinned(driver)
    assert installed(host, want) == want, host.name
    assert shape.held() <= held(host), host.name
    assert shape.held() <= showhold(host), host.name
    # The pin is what apt would install next, from the CUDA repository (not the archive).
    assert candidate(host, shape.kernel_module) == shape.deb(driver or shape.driver), host.name
    if shape.pinning:
        # §2a: from 590 the branch or version is locked by a pinning package.
        assert any(installed(host, shape.pinning_packages(driver)).values()), host.name
    # Nothing from the competing archive (Canonical's revisions are -0ubuntu0.<release>.N).
    _, listing, _ = host.run("dpkg-query -W -f '${Package} ${Version}\\n'")
    assert not re.search(r"-0ubuntu0\.", listing), listing
    # Only NVSwitch systems get the fabric manager; the test hosts have none.
    assert installed(host, (shape.fabricmanager,)) == {shape.fabricmanager: ""}
    assert "/usr/local/cuda/bin" in read(host, "/etc/profile.d/cuda.sh")
    rc, out, _ = host.run("sh -lc 'command -v nvcc'")
    assert (rc, out.strip()) == (0, "/usr/local/cuda/bin/nvcc"), host.name
    _, blacklist, _ = host.run("cat /etc/modprobe.d/*.conf")
    assert re.search(r"^blacklist nouveau$", blacklist, re.M), host.name
    _, dropin, _ = host.run("cat /etc/systemd/system/nvidia-persistenced.service.d/*.conf")
    assert "--persistence-mode" in dropin, host.name
    # Our own list with signed-by, and no list of NVIDIA's left to conflict with it.
    assert read(host, SOURCES_LIST) == f"deb [signed-by={KEYRING_PATH}] {site.url} /\n"
    rc, _, _ = host.run("grep -rl 'developer.download.nvidia.com' /etc/apt/sources.list.d")
    assert rc == 1, f"{host.name} still lists NVIDIA's repository"
    keyring = host.root / KEYRING_PATH.lstrip("/")
    assert keyring.read_bytes() == site.repo.keyring.read_bytes(), host.name
    # Unattended upgrades leave the pinned packages alone.
    _, snippets, _ = host.run("cat /etc/apt/apt.conf.d/*")
    assert "Package-Blacklist" in snippets, host.name
    assert "cudnn" in snippets, host.name


@EVERY_SHAPE
def test_check_mode_then_install_then_converged_then_a_pin_raise(
    make_site: Any, shape: Shape
) -> None:
    # One host of each shape, whose names and pins are what differs between them; several
    # hosts at once, each fetching the keyring, are the batch test's.
    site: Site = make_site(1)
    # Ubuntu's 550 shape differs from its 590 one in its names alone (the branch in each):
    # its install, holds and converged rerun show them; check mode and a pin raise, the
    # same steps whatever the names, run on the other two shapes (each run is a minute of CI).
    every_step = shape.id != "ubuntu2404-550"

    # Check mode on bare hosts changes nothing.
    before = {h.name: held(h) for h in site.hosts}
    dry = provision(site, check=True) if every_step else None
    if dry is not None:
        assert dry.rc == 0, describe(dry)
        assert set(dry.recap) == {h.name for h in site.hosts}
    for host in site.hosts:
        names = (*site.shape.pinned(), *site.shape.pinning_packages(), "cuda-keyring")
        assert installed(host, names) == dict.fromkeys(names, ""), host.name
        assert held(host) == before[host.name]
        assert read(host, SOURCES_LIST) == ""
        assert read(host, "/etc/profile.d/cuda.sh") == ""
        assert not (host.root / KEYRING_PATH.lstrip("/")).exists()

    # The pins installed and held.
    first = provision(site)
    assert first.rc == 0, describe(first)
    assert set(first.recap) == {h.name for h in site.hosts}
    assert all(count > 0 for count in first.changed().values()), first.recap
    for host in site.hosts:
        assert_provisioned(site, host)
    assert sorted(site.server.fetched("cuda-keyring_1.1-1_all.deb")) == sorted(
        h.address for h in site.hosts
    )

    # Run again: nothing to do.
    second = provision(site)
    assert second.rc == 0, describe(second)
    assert second.changed() == {h.name: 0 for h in site.hosts}, describe(second)
    assert not second.failed_hosts()
    print(
        f"\nprovision ({provision_via()}, {site.shape.id}, {len(site.hosts)} hosts): "
        f"first {first.wall_s:.1f} s, converged rerun {second.wall_s:.1f} s, "
        f"ratio {second.wall_s / first.wall_s:.2f} (bench/provision.py measures it)"
    )

    if not every_step:
        return
    # A raised pin upgrades despite the holds, and holds again at the new version.
    site.set_pin("gpuready_driver_version", site.shape.raised)
    raised = provision(site)
    assert raised.rc == 0, describe(raised)
    assert all(count > 0 for count in raised.changed().values()), raised.recap
    for host in site.hosts:
        assert_provisioned(site, host, driver=site.shape.raised)


def test_failed_installs_fail_those_hosts_only_and_leave_a_reboot_marked(
    make_site: Any,
) -> None:
    site: Site = make_site(3)
    dkms_broken, toolkit_broken = site.hosts[1], site.hosts[2]
    # The stub DKMS package's postinst fails where this file exists (a failed DKMS build);
    # the CUDA Toolkit's where the other does, after the driver role installed the driver.
    for host, marker in ((dkms_broken, FAIL_INSTALL_MARKER), (toolkit_broken, FAIL_TOOLKIT_MARKER)):
        rc, _, err = host.run(f"touch {marker}")
        assert rc == 0, err
    first = provision(site)
    assert first.rc != 0, describe(first)
    assert first.failed_hosts() == {dkms_broken.name, toolkit_broken.name}, describe(first)
    for host in (dkms_broken, toolkit_broken):
        assert first.recap[host.name]["failed"] >= 1
        assert first.messages.get(host.name), describe(first)
    assert_provisioned(site, site.hosts[0])
    shape = site.shape
    assert installed(toolkit_broken, shape.driver_packages()) == shape.driver_packages()

    # Issue 11: the reboot is decided by state (loaded module != pin), not by "changed in
    # this run"; with reboots off the roles leave REBOOT_MARKER instead, on this run too,
    # which installs no driver on the host whose toolkit failed.
    rc, _, err = toolkit_broken.run(f"rm {FAIL_TOOLKIT_MARKER}")
    assert rc == 0, err
    second = provision(site, "--limit", toolkit_broken.name)
    assert second.rc == 0, describe(second)
    assert_provisioned(site, toolkit_broken)
    assert (toolkit_broken.root / REBOOT_MARKER.lstrip("/")).is_file(), describe(second)


def test_a_batch_of_two_over_three_hosts_provisions_in_two_waves(make_site: Any) -> None:
    site: Site = make_site(3)
    outcome = provision(site, batch=2)
    assert outcome.rc == 0, describe(outcome)
    assert set(outcome.recap) == {h.name for h in site.hosts}
    for host in site.hosts:
        assert_provisioned(site, host)
    # Each host fetched the keyring itself, once.
    assert sorted(site.server.fetched("cuda-keyring_1.1-1_all.deb")) == sorted(
        h.address for h in site.hosts
    )
    # Ansible's own record of who ran when: every task result of the first two hosts
    # comes before any of the third's.
    first_seen = sorted(
        {h: outcome.order.index(h) for h in set(outcome.order)}.items(), key=lambda kv: kv[1]
    )
    assert len(first_seen) == 3, outcome.order[:20]
    wave_one = {host for host, _ in first_seen[:2]}
    last_of_wave_one = max(i for i, h in enumerate(outcome.order) if h in wave_one)
    first_of_wave_two = min(i for i, h in enumerate(outcome.order) if h not in wave_one)
    assert last_of_wave_one < first_of_wave_two, outcome.order
    if outcome.document.get("waves") is not None:
        waves = [set(wave) for wave in outcome.document["waves"]]
        assert waves == [wave_one, {h.name for h in site.hosts} - wave_one], outcome.document


# ---------------------------------------------------------------- certify afterwards

# What validator/node/sim/scenario.py needs for this test (not there yet): a top-level
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
    from validator.node.sim import scenario

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
            "--json-form",  # every node's facts, not the fleet's summary
            "full",
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
    assert scenario_supports_passthrough(), "validator/node/sim/scenario.py lacks 'passthrough'"
    site: Site = make_site(1)
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
