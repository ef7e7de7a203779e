"""Debian's own NVIDIA driver, provisioned for real on a Debian 12 test host, then certified.

``gpuready_driver_source: distribution`` against the real packages of Debian 12's archive
(tests/realnv/debian_archive.py): nvidia-kernel-dkms, nvidia-smi, libcuda1 and
libnvidia-ml1 535.261.03-1, and everything apt resolves for them on a bare test host
(Debian's dkms, gcc-12 and kernel headers among them), served to the host as its archive.
Their real maintainer scripts run, and DKMS builds the real nvidia-current module against
Debian's real kernel headers (about two minutes on two cores).

The build's compiler, Debian's gcc-12, runs through Debian's ccache (as Debian's kernel
headers provide for with ``DEBIAN_KERNEL_USE_CCACHE``; here gcc-12 is diverted to a script
that hands it to ccache), its objects kept in the real-software cache: the first run on a
machine compiles every file, later ones take the compiler's output for the same input
from it, while DKMS, Kbuild, the linker and modpost run as always.

Two stand-ins, because the test hosts share this machine's kernel, which is not Debian's:
the running kernel's headers package (empty: DKMS leaves a kernel without headers alone,
"It is likely that <release> belongs to a chroot's host") and Debian's kernel image (only
its /boot/vmlinuz-<release>, which makes that kernel the default boot kernel, as after a
kernel update). Reboots: the role's pre-reboot check runs for real, and the host's
``shutdown`` is a script that records the call and refuses, since a test host cannot boot.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_provision import (
    PROVISION_PACKAGES,
    REBOOT_MARKER,
    Site,
    certify,
    describe,
    installed,
    provision,
    read,
    showhold,
    write_site,
)
from tests.hosts.testhosts import HostsUnavailable, TestHost, TestHostPool, ensure_rootfs
from tests.provision.stubpkg import StubFile, StubPackage
from tests.provision.stubrepo import RepoServer, StubRepoUnavailable, build_repo
from tests.realnv.debian_archive import (
    DRIVER_VERSION,
    DriverArchive,
    compiler_cache_dir,
    driver_archive,
)
from tests.realnv.software import SoftwareUnavailable

pytestmark = pytest.mark.hosts

DRIVER = DRIVER_VERSION.split("-", maxsplit=1)[0]  # 535.261.03
MODULE = "nvidia-current"  # DEST_MODULE_NAME in the real dkms.conf of nvidia-kernel-dkms
KEYRING = "/usr/share/keyrings/gpuready-test-debian-archive.gpg"
SHUTDOWN_CALLED = "/var/tmp/shutdown-called"
# The role's compute set (vars/Debian-distribution.yml, proprietary) at the pin.
PINNED = dict.fromkeys(
    ("nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "libnvidia-ml1"), DRIVER_VERSION
)


def _unavailable(reason: str) -> None:
    required = "GPUREADY_REQUIRE_HOSTS", "GPUREADY_REQUIRE_REAL_NVIDIA"
    if any(os.environ.get(name) == "1" for name in required):
        pytest.fail(reason)
    pytest.skip(reason)


def _stand_ins(archive: DriverArchive) -> list[StubPackage]:
    running = os.uname().release
    why = "stand-in: the test hosts run this machine's kernel, not Debian's"
    return [
        StubPackage(
            f"linux-headers-{running}",
            "1.0-1",
            description=f"headers of the running kernel ({why})",
            helper=True,
        ),
        StubPackage(
            f"linux-image-{archive.kernel}",
            archive.kernel_version,
            description=f"Debian's kernel image, its /boot entry only ({why})",
            files={
                f"/boot/vmlinuz-{archive.kernel}": StubFile("stand-in\n"),
                f"/boot/config-{archive.kernel}": StubFile("# stand-in\n"),
            },
            helper=True,
        ),
    ]


@pytest.fixture
def debian_site(tmp_path: Path) -> Iterator[tuple[Site, DriverArchive]]:
    """One Debian 12 host whose archive is Debian's real driver closure, and its inventory."""
    try:
        rootfs = ensure_rootfs(PROVISION_PACKAGES)
    except HostsUnavailable as exc:
        _unavailable(f"no provisioning root filesystem: {exc}")
        raise
    try:
        archive = driver_archive(rootfs / "var/lib/dpkg/status")
        compiler_cache = compiler_cache_dir()
        repo = build_repo(
            packages=_stand_ins(archive), origin="Debian (real packages)", debs=archive.debs
        )
    except (SoftwareUnavailable, StubRepoUnavailable, OSError) as exc:
        _unavailable(f"Debian's driver packages could not be had: {exc}")
        raise
    with TestHostPool(packages=PROVISION_PACKAGES, shape="debian12", name_prefix="deb") as pool:
        # Before the host starts: its sshd, and what Ansible runs through it, see the mount.
        pool.bind(compiler_cache)
        (host,) = pool.start(["healthy-8x-h100-sxm"])
        bridge = str(pool.network.network_address + 1)
        with RepoServer(repo.path, bridge) as server:
            _prepare(host, repo.keyring, repo.path, server.url, archive)
            _compile_through_ccache(host, compiler_cache)
            site = write_site(pool, [host], repo, server, tmp_path, simulate=False)
            site.set_pin("gpuready_driver_version", DRIVER)
            site.set_pin("gpuready_driver_branch", DRIVER.split(".")[0])
            site.set_pin("gpuready_driver_source", "distribution")
            # Debian's own default module (its nvidia-driver depends on nvidia-kernel-dkms).
            site.set_pin("nvidia_driver_flavour", "proprietary")
            # Debian 12's 535 driver runs CUDA 12.2.
            site.set_pin("gpuready_cuda_version", "12.2")
            yield site, archive


def _prepare(host: TestHost, keyring: Path, repo: Path, url: str, archive: DriverArchive) -> None:
    """What a Debian host has before provisioning: its archive in sources.list, its kernel."""
    target = host.root / KEYRING.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(keyring, target)
    (host.root / "etc/apt/sources.list").write_text(f"deb [signed-by={KEYRING}] {url} /\n")
    image = next(repo.glob(f"linux-image-{archive.kernel}_*.deb"))
    shutil.copy(image, host.root / "tmp" / image.name)
    rc, out, err = host.run(f"dpkg -i /tmp/{image.name}")
    assert rc == 0, out + err
    # ansible.builtin.reboot runs the host's shutdown: record the call and refuse.
    shutdown = host.root / "usr/sbin/shutdown"
    shutdown.write_text(
        f'#!/bin/sh\necho "$@" > {SHUTDOWN_CALLED}\n'
        "echo 'gpuready test host: a test host cannot reboot' >&2\nexit 1\n"
    )
    shutdown.chmod(0o755)


def _compile_through_ccache(host: TestHost, cache: Path) -> None:
    """Debian's ccache in front of gcc-12 for every build on the host, its cache shared.

    gcc-12 arrives with the role's dkms; diverted before that, dpkg installs Debian's
    compiler as gcc-12.real, and gcc-12 is a two-line script that hands it to ccache.
    """
    rc, out, err = host.run(
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ccache"
        " && dpkg-divert --local --rename --divert /usr/bin/gcc-12.real --add /usr/bin/gcc-12",
        timeout=300,
    )
    assert rc == 0, out + err
    compiler = host.root / "usr/bin/gcc-12"
    compiler.write_text('#!/bin/sh\nexec /usr/bin/ccache /usr/bin/gcc-12.real "$@"\n')
    compiler.chmod(0o755)
    # The objects are the same whenever the sources are, whatever the files' times.
    (host.root / "etc/ccache.conf").write_text(
        f"cache_dir = {cache}\nmax_size = 2G\n"
        "sloppiness = include_file_mtime,include_file_ctime,time_macros,locale\n"
    )


def _compiled_through_ccache(host: TestHost) -> int:
    """How many compiler calls the shared cache has seen (hits and misses), from ccache -s."""
    rc, out, err = host.run("ccache --print-stats")
    assert rc == 0, err
    counts = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    return sum(
        int(counts.get(key, "0"))
        for key in ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")
    )


def _dkms(host: TestHost) -> str:
    rc, out, err = host.run("dkms status")
    assert rc == 0, err
    return out.strip()


def test_debians_own_driver_is_built_pinned_held_checked_before_a_reboot_and_certified(
    debian_site: tuple[Site, DriverArchive], capsys: pytest.CaptureFixture[str]
) -> None:
    site, archive = debian_site
    (host,) = site.hosts
    kernel = archive.kernel

    calls = _compiled_through_ccache(host)
    first = provision(site, "--tags", "driver")
    assert first.rc == 0, describe(first)
    # The build's compiler ran, through the cache (hits after the first run on a machine).
    assert _compiled_through_ccache(host) > calls
    assert installed(host, PINNED) == PINNED
    assert set(PINNED) <= showhold(host)
    # The kernel DKMS built for is held with the driver.
    assert {f"linux-headers-{kernel}", f"linux-image-{kernel}"} <= showhold(host)
    # The real DKMS build, installed under the name Debian's package gives it.
    assert _dkms(host) == f"{MODULE}/{DRIVER}, {kernel}, x86_64: installed"
    assert (host.root / f"lib/modules/{kernel}/updates/dkms/{MODULE}.ko").is_file()
    rc, out, _ = host.run(f"modinfo -k {kernel} -F version {MODULE}")
    assert (rc, out.strip()) == (0, DRIVER)
    # Defect 6 of issue 31: the module is not called nvidia on such a host.
    rc, _, err = host.run(f"modinfo -k {kernel} -F version nvidia")
    assert rc == 1, err
    assert "not found" in err, err
    # Our pin, at any Debian revision of the version.
    preferences = read(host, "/etc/apt/preferences.d/gpuready-nvidia-driver")
    assert f"Pin: version {DRIVER}-*\n" in preferences
    # No GPU here: installed packages wait for a reboot, which is skipped and recorded.
    assert "driver packages changed" in read(host, REBOOT_MARKER)

    second = provision(site, "--tags", "driver")
    assert second.rc == 0, describe(second)
    assert second.changed() == {host.name: 0}, describe(second)

    # With reboots allowed: the pre-reboot check reads the real module of the boot kernel,
    # passes, and the role goes on to reboot (which the test host refuses).
    allowed = provision(site, "--tags", "driver", "-e", "nvidia_driver_skip_reboot=false")
    assert allowed.rc != 0, describe(allowed)
    assert "a test host cannot reboot" in allowed.output, describe(allowed)
    assert read(host, SHUTDOWN_CALLED).startswith("-r"), describe(allowed)

    # Without the module the host must not reboot: the check names the module it looked for.
    rc, out, err = host.run(f"dkms remove {MODULE}/{DRIVER} -k {kernel}", timeout=300)
    assert rc == 0, out + err
    host.run(f"rm -f {SHUTDOWN_CALLED}")
    refused = provision(site, "--tags", "driver", "-e", "nvidia_driver_skip_reboot=false")
    assert refused.rc != 0, describe(refused)
    message = " ".join(refused.output.split())
    assert f"the default boot kernel {kernel} has no {MODULE} module, not {DRIVER}" in message
    assert f"dkms autoinstall -k {kernel}" in message
    assert read(host, SHUTDOWN_CALLED) == "", describe(refused)

    # certify on the host reads the real libraries' "driver not loaded" as one finding.
    host.scenario_file().unlink(missing_ok=True)
    code, document = certify(site, capsys)
    (node,) = document["nodes"]
    assert node["facts"]["nvml_status"] == "driver_not_loaded", node["facts"]
    findings = {finding["check"]: finding for finding in node["findings"]}
    driver = findings["inventory.driver"]
    assert "the NVIDIA driver is installed but its kernel module is not loaded" in driver["message"]
    assert driver["action"] == "reboot", driver
    # What the driver could not say is fixed by fixing the driver, not by asking again.
    rerun = [f["check"] for f in node["findings"] if f["action"] == "rerun"]
    assert not [check for check in rerun if check.startswith("versions.")], node["findings"]
    assert node["verdict"] != "CERTIFIED"
    assert code != 0
