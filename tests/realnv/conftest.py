"""Fixtures of the real-NVIDIA-software lane: the unpacked packages, and gpuready run on them.

The packages are fetched once per machine (tests/realnv/software.py). Where they cannot be
fetched (no route to the package registries) the lane is skipped, except in CI, where
``.ci/test`` sets ``GPUREADY_REQUIRE_REAL_NVIDIA=1`` and a failed fetch fails the lane.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from tests.node.sysfs_tree import H100, make_proc, make_sysfs
from tests.realnv.software import (
    DebianCuda,
    DebianNvidia,
    PypiCuda,
    SoftwareUnavailable,
    debian_cuda,
    debian_nvidia,
    pypi_cuda,
)

REQUIRED = os.environ.get("GPUREADY_REQUIRE_REAL_NVIDIA") == "1"
REPO = Path(__file__).resolve().parent.parent.parent
T = TypeVar("T")


def _fetched(fetch: Callable[[], T]) -> T:
    try:
        return fetch()
    except (SoftwareUnavailable, OSError) as exc:  # OSError: the cache is not ours to write
        if REQUIRED:
            pytest.fail(f"the real NVIDIA software could not be fetched: {exc}")
        pytest.skip(f"the real NVIDIA software is not here: {exc}")


@pytest.fixture(scope="session")
def debian_driver() -> DebianNvidia:
    """Debian 12's libnvidia-ml1, nvidia-smi and libcuda1 (535.261.03)."""
    return _fetched(debian_nvidia)


@pytest.fixture(scope="session")
def debian_cuda11() -> DebianCuda:
    """Debian 12's CUDA 11.8 runtime, cuBLAS and headers."""
    return _fetched(debian_cuda)


@pytest.fixture(scope="session")
def pypi() -> PypiCuda:
    """PyPI's CUDA 12 runtime, cuBLAS, NCCL, cuDNN, NVML header and CUDA 13's nvcc."""
    return _fetched(pypi_cuda)


@dataclass(frozen=True)
class Ran:
    """A command's exit status and output."""

    code: int
    out: str
    err: str


@dataclass(frozen=True)
class RealHost:
    """This machine as a GPU host whose NVIDIA software is installed but has no device.

    What a node looks like after ``gpuready provision`` and before its reboot, or a node
    whose GPUs are gone: the real libraries and nvidia-smi, and no kernel module.
    """

    driver: DebianNvidia
    site: Path | None  # PyPI's CUDA wheels, as pip installs them; None: not installed
    bin_dir: Path  # on PATH first: nvidia-smi as Debian installs it (/usr/bin/nvidia-smi)
    # What certify's first step reads (validator.node.live.pci_bus): a sysfs with two H100s
    # on the bus, and a /proc with or without the module's version file. Without GPUs on
    # the bus (this machine's own) certify stops at one line before the libraries are used.
    sysfs: Path
    proc: Path

    def env(self) -> dict[str, str]:
        """The environment a command runs in: the driver's libraries found as ld.so would."""
        env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(self.driver.lib_dir),
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        if self.site is not None:
            env["PYTHONPATH"] = str(self.site)
        return env

    def gpuready(self, *argv: str, timeout: float = 300.0) -> Ran:
        """``gpuready ARGV`` as a process on this host, its PCI bus and /proc this host's."""
        code = (
            "import sys\nfrom validator.node.live import pci_bus\n"
            f"pci_bus.SYSFS_ROOT = {str(self.sysfs)!r}\npci_bus.PROC_ROOT = {str(self.proc)!r}\n"
            "from validator.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
        )
        return self.run([sys.executable, "-c", code, *argv], timeout=timeout)

    def run(self, argv: Sequence[str], timeout: float = 300.0) -> Ran:
        """Any command, in this host's environment, from the repository's root."""
        done = subprocess.run(
            list(argv),
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Ran(done.returncode, done.stdout, done.stderr)


def _host(
    driver: DebianNvidia, site: Path | None, tmp: Path, *, module_loaded: bool = True
) -> RealHost:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "nvidia-smi"
    if not link.exists():
        link.symlink_to(driver.nvidia_smi)
    sysfs = make_sysfs(tmp / "host", {"0000:18:00.0": H100, "0000:2a:00.0": H100}, "nvidia")
    proc = make_proc(tmp / "host", nvidia_loaded=module_loaded)
    return RealHost(driver, site, bin_dir, sysfs, proc)


@pytest.fixture
def real_host(debian_driver: DebianNvidia, pypi: PypiCuda, tmp_path: Path) -> RealHost:
    """The driver's libraries and nvidia-smi, and PyPI's CUDA wheels installed."""
    return _host(debian_driver, pypi.site, tmp_path)


@pytest.fixture
def bare_driver_host(debian_driver: DebianNvidia, tmp_path: Path) -> RealHost:
    """The driver's libraries and nvidia-smi only.

    /proc shows the module (a node whose device files are gone, or whose module does
    not match its libraries), so certify goes on to the real NVML, which cannot reach it.
    """
    return _host(debian_driver, None, tmp_path)


@pytest.fixture
def unloaded_driver_host(debian_driver: DebianNvidia, tmp_path: Path) -> RealHost:
    """The driver's libraries and nvidia-smi, GPUs on the bus, and no module loaded."""
    return _host(debian_driver, None, tmp_path, module_loaded=False)
