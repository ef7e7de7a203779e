"""CUDA installed from pip: PyPI's real nvidia-cudnn-cu12 and nvidia-cuda-nvcc wheels.

A node whose CUDA comes from pip (a conda-less ML image, an HPC user's venv) keeps cuDNN and
nvcc in site-packages, where the burn-in already finds cuBLAS. The collector reads the real
cudnn_version.h and runs the real nvcc there. This machine's own /usr/local/cuda is hidden
from the collector here, so only pip's layout can be what it finds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.realnv.conftest import RealHost
from tests.realnv.software import PypiCuda
from validator.model import Unavailable
from validator.node import system_facts
from validator.node.burnin import cuda_libs
from validator.node.system import CommandResult, LiveSystem


class _NoSystemToolkit(LiveSystem):
    """This machine, with the toolkit under /usr (and nvcc on PATH) hidden, pip's left."""

    def which(self, name: str) -> str | None:
        return None if name == "nvcc" else super().which(name)

    def glob(self, pattern: str) -> list[str]:
        return [] if pattern.startswith(("/usr/", "/opt/")) else super().glob(pattern)

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        if argv and argv[0] in ("dpkg-query", "rpm"):
            return CommandResult(1, "")  # no cuDNN package: pip's is the only one
        return super().run(argv, timeout_s)


@pytest.fixture
def pip_only(pypi: PypiCuda, monkeypatch: pytest.MonkeyPatch) -> LiveSystem:
    monkeypatch.setattr(cuda_libs, "site_package_dirs", lambda: [str(pypi.site)])
    return _NoSystemToolkit()


def test_cudnn_from_pip_is_found_with_its_version_and_cuda_major(
    pip_only: LiveSystem, pypi: PypiCuda
) -> None:
    version, where, cuda_major = system_facts.cudnn_facts(pip_only)
    assert version == "9.28.0"  # the real wheel's cudnn_version.h: 9, 28, 0
    assert where == str(pypi.site / system_facts.PIP_CUDNN_HEADER)
    assert cuda_major == 12  # nvidia_cudnn_cu12-9.28.0.42.dist-info


def test_nvcc_from_pip_is_found_and_run(pip_only: LiveSystem, pypi: PypiCuda) -> None:
    version, where = system_facts.nvcc_facts(pip_only)
    assert version == "13.5.37"  # the real nvcc: "Cuda compilation tools, release 13.5, V13.5.37"
    assert where == str(pypi.site / "nvidia/cu13/bin/nvcc")


def test_without_pip_or_a_toolkit_both_say_where_they_looked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cuda_libs, "site_package_dirs", list)
    version, _, _ = system_facts.cudnn_facts(_NoSystemToolkit())
    nvcc, _ = system_facts.nvcc_facts(_NoSystemToolkit())
    assert isinstance(version, Unavailable)
    assert "pip nvidia-cudnn" in str(version.detail)
    assert isinstance(nvcc, Unavailable)
    assert "pip's nvidia-cuda-nvcc" in str(nvcc.detail)


def test_certify_reads_cudnn_from_the_same_site_packages_as_the_burns_cublas(
    real_host: RealHost, tmp_path: Path
) -> None:
    if any(LiveSystem().glob(pattern) for pattern in system_facts.CUDNN_HEADERS):
        pytest.skip("this machine has a cuDNN of its own, which is found before pip's")
    ran = real_host.gpuready("certify", "--burn", "0", "--json", "--db", str(tmp_path / "h.db"))
    assert "Traceback" not in ran.err
    (node,) = json.loads(ran.out)["nodes"]
    cudnn = next(f for f in node["findings"] if f["check"] == "versions.cudnn")
    assert "is not installed" not in cudnn["message"]
    assert node["facts"]["tools"]["cudnn_version"] == "9.28.0"
    assert node["facts"]["tools"]["cudnn_source"].endswith(system_facts.PIP_CUDNN_HEADER)
