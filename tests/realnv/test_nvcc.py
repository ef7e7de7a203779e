"""The real nvcc binaries, and Debian's real /usr/bin/nvcc wrapper without its target.

nvcc 11.8 from Debian 12's nvidia-cuda-toolkit, 13.5 from PyPI: the collector
runs each as it finds it and reads its release. Debian's /usr/bin/nvcc is a two-line
shell script (``exec /usr/lib/nvidia-cuda-toolkit/bin/nvcc "$@"``): without its target it
exits 127, which is an installed, broken nvcc, never "not installed".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.collecting import collect_simulated
from tests.realnv.software import DebianCuda, PypiCuda
from validator.judge.policy import Policy
from validator.judge.verdict import judge_node
from validator.model import Reason, Unavailable
from validator.node import system_facts
from validator.node.system import CommandResult, LiveSystem


class _NvccAt(LiveSystem):
    """This machine, with ``path`` the nvcc on PATH."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def which(self, name: str) -> str | None:
        return str(self.path) if name == "nvcc" else super().which(name)

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        return super().run(argv, timeout_s)


@pytest.mark.parametrize(
    ("where", "release"),
    [("debian", "11.8.89"), ("cu13", "13.5.37")],
)
def test_the_real_nvcc_releases_are_read(
    where: str, release: str, debian_cuda11: DebianCuda, pypi: PypiCuda
) -> None:
    path = debian_cuda11.nvcc if where == "debian" else pypi.part(where) / "bin/nvcc"
    version, found = system_facts.nvcc_facts(_NvccAt(path))
    assert (version, found) == (release, str(path))


def test_debians_nvcc_wrapper_without_its_target_is_broken_not_absent(
    debian_cuda11: DebianCuda,
) -> None:
    version, found = system_facts.nvcc_facts(_NvccAt(debian_cuda11.nvcc_wrapper))
    assert found == str(debian_cuda11.nvcc_wrapper)
    assert isinstance(version, Unavailable)
    assert version.reason is Reason.ERROR  # installed and broken: not NOT_SUPPORTED
    assert "exited 127" in str(version.detail)
    assert "/usr/lib/nvidia-cuda-toolkit/bin/nvcc" in str(version.detail)  # the shell's words
    facts = collect_simulated("healthy-8x-h100-sxm", interconnect="off")
    tools = facts.tools.__class__(**{**facts.tools.__dict__, "nvcc_version": version})
    result = judge_node(facts.__class__(**{**facts.__dict__, "tools": tools}), Policy())
    (finding,) = [f for f in result.findings if f.check == "versions.nvcc"]
    assert "not installed" not in finding.message
    assert "exited 127" in finding.message
