"""Debian 12's own NVIDIA driver as its archive offers it: every package a host installs.

What the nvidia_driver role asks apt for with ``gpuready_driver_source: distribution``
(Debian's ``nvidia-kernel-dkms``, ``nvidia-smi``, ``libcuda1``, ``libnvidia-ml1`` at
535.261.03, ``nvidia-persistenced``, ``dkms`` and Debian's kernel headers) is resolved by
apt against the test hosts' own dpkg status, with the tests' own apt configuration (the
machine's sources name only ``main``; these are in ``contrib``, ``non-free`` and
``non-free-firmware``), and every package of that closure is downloaded once into the cache
(``GPUREADY_REALNV_CACHE``). The test serves them to its hosts as their archive; nothing
here is built or stubbed.

The kernel headers are whatever Debian 12's current point release has: the closure is
resolved again when a download of it no longer exists. Debian's ``ccache`` comes with it,
and its cache folder lives beside the downloads (:func:`compiler_cache_dir`).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.realnv.software import (
    CACHE_DIR,
    DEBIAN_DRIVER,
    DEBIAN_MIRROR,
    DEBIAN_SUITE,
    KEYRING,
    SoftwareUnavailable,
    _apt_options,
    _locked,
    _run,
)

DRIVER_VERSION = DEBIAN_DRIVER["libnvidia-ml1"]  # 535.261.03-1
# The role's compute set for the proprietary flavour (vars/Debian-distribution.yml), its
# unversioned persistence daemon, and what it installs first: dkms and the headers meta.
WANTED = (
    f"nvidia-kernel-dkms={DRIVER_VERSION}",
    f"nvidia-smi={DRIVER_VERSION}",
    f"libcuda1={DRIVER_VERSION}",
    f"libnvidia-ml1={DRIVER_VERSION}",
    "nvidia-persistenced",
    "dkms",
    "linux-headers-amd64",
)
# Not the role's: the test host has it before provisioning, so that the real DKMS build's
# compiler runs through Debian's ccache (tests/e2e/test_provision_debian_driver.py).
COMPILER_CACHE = "ccache"
COMPONENTS = "main contrib non-free non-free-firmware"
_INST = re.compile(r"^Inst (\S+) (?:\[\S+\] )?\((\S+) ")
_KERNEL_HEADERS = re.compile(r"^linux-headers-(\d+\.\d+\.\d+-\d+-amd64)$")


@dataclass(frozen=True)
class DriverArchive:
    """The downloaded closure.

    Attributes:
        debs: every .deb a bare test host needs for the role's install.
        kernel: the release of Debian's kernel whose headers are among them
            (``6.1.0-50-amd64``): the kernel DKMS builds the module for.
        kernel_version: that kernel's package version (``6.1.176-1``).
    """

    debs: tuple[Path, ...]
    kernel: str
    kernel_version: str


def _state(cache: Path) -> Path:
    state = cache / "apt-archive"
    for folder in ("lists/partial", "cache", "debs/partial"):
        (state / folder).mkdir(parents=True, exist_ok=True)
    (state / "sources.list").write_text(
        f"deb [signed-by={KEYRING}] {DEBIAN_MIRROR} {DEBIAN_SUITE} {COMPONENTS}\n",
        encoding="utf-8",
    )
    return state


def _resolve(state: Path, status: Path) -> dict[str, str]:
    """name -> version of every package apt would install on a host with ``status``."""
    _run(["apt-get", *_apt_options(state), "update"], "apt-get update (Debian's archive)", 600)
    options = [*_apt_options(state), f"-oDir::State::status={status}"]
    try:
        done = subprocess.run(
            ["apt-get", *options, "-s", "--no-install-recommends", "install", *WANTED,
             COMPILER_CACHE],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SoftwareUnavailable(f"apt-get -s install: {exc}") from None
    if done.returncode != 0:
        raise SoftwareUnavailable(f"apt-get -s install {' '.join(WANTED)}: {done.stderr.strip()}")
    closure = {}
    for line in done.stdout.splitlines():
        match = _INST.match(line)
        if match:
            closure[match.group(1)] = match.group(2)
    return closure


def _downloaded(debs: Path, name: str, version: str) -> Path | None:
    # apt-get download escapes an epoch's ':' and names the architecture (amd64 or all).
    found = sorted(debs.glob(f"{name}_{version.replace(':', '%3a')}_*.deb"))
    return found[0] if found else None


def driver_archive(status: Path, cache: Path = CACHE_DIR) -> DriverArchive:
    """Debian's driver and everything it needs on a host whose dpkg status is ``status``.

    Raises:
        SoftwareUnavailable: the archive could not be reached, or offers no such closure.
    """
    wanted = json.dumps([*WANTED, COMPILER_CACHE]).encode()
    key = hashlib.sha256(status.read_bytes() + wanted).hexdigest()[:12]
    with _locked(cache):
        state = _state(cache)
        debs = state / "debs"
        record = state / f"closure-{key}.json"
        closure: dict[str, str] = {}
        if record.is_file():
            closure = json.loads(record.read_text(encoding="utf-8"))
        if not closure or any(_downloaded(debs, n, v) is None for n, v in closure.items()):
            closure = _resolve(state, status)
            missing = [f"{n}={v}" for n, v in closure.items() if _downloaded(debs, n, v) is None]
            if missing:
                try:
                    done = subprocess.run(
                        ["apt-get", *_apt_options(state), "download", *missing],
                        cwd=debs, capture_output=True, text=True, timeout=1800, check=False,
                    )  # fmt: skip
                except (OSError, subprocess.TimeoutExpired) as exc:
                    raise SoftwareUnavailable(f"apt-get download: {exc}") from None
                if done.returncode != 0:
                    raise SoftwareUnavailable(f"apt-get download: {done.stderr.strip()}")
            record.write_text(json.dumps(closure, indent=1, sort_keys=True), encoding="utf-8")
    paths = {name: _downloaded(debs, name, version) for name, version in closure.items()}
    absent = sorted(name for name, path in paths.items() if path is None)
    if absent:
        raise SoftwareUnavailable(f"apt-get download gave no .deb for {', '.join(absent)}")
    kernels = [(m.group(1), closure[n]) for n in closure if (m := _KERNEL_HEADERS.match(n))]
    if len(kernels) != 1:
        raise SoftwareUnavailable(f"expected one Debian kernel's headers, got {kernels}")
    ((kernel, version),) = kernels
    return DriverArchive(tuple(p for p in paths.values() if p is not None), kernel, version)


def compiler_cache_dir(cache: Path = CACHE_DIR) -> Path:
    """Where the test hosts' ccache keeps its objects between runs (made when missing)."""
    folder = cache / "ccache"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
