"""Shared test fixtures."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def captures_root() -> Path | None:
    """The shared corpus of real nvidia-smi/nvcc/cuDNN/kernel-log outputs, read in place."""
    env = os.environ.get("GPUREADY_CAPTURES")
    candidate = Path(env) if env else REPO_ROOT.parent / "shared" / "captures"
    return candidate if candidate.is_dir() else None


@pytest.fixture
def captures_dir() -> Path:
    """The captures corpus; the test is skipped where it is absent."""
    root = captures_root()
    if root is None:
        pytest.skip("../shared/captures is not present")
    return root


# The GPUREADY_* variables the test harness itself reads (.ci/test, host and capture
# fixtures): every other one is gpuready's own, and a test never sees the caller's.
HARNESS_VARIABLES = frozenset(
    {
        "GPUREADY_CAPTURES",
        "GPUREADY_PROVISION_VIA",
        "GPUREADY_REALNV_CACHE",
        "GPUREADY_REALNV_MIRROR",
        "GPUREADY_REQUIRE_HOSTS",
        "GPUREADY_REQUIRE_REAL_NVIDIA",
        "GPUREADY_SCREENSHOT_DIR",
        "GPUREADY_SERIAL_TESTS",
        "GPUREADY_SKIP_HOSTS",
        "GPUREADY_STUBREPO_CACHE",
        "GPUREADY_STUBRPM_CACHE",
        "GPUREADY_TEST_CPU_LOG",
        "GPUREADY_TESTHOSTS_CACHE",
        "GPUREADY_TESTHOSTS_MIRROR",
        "GPUREADY_TESTHOSTS_STATE",
        "GPUREADY_TEST_ROLES_DIR",
    }
)


@pytest.fixture(autouse=True)
def private_state_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test gets its own state directory: no test writes the user's history database.

    Nor reads the machine's settings: /etc/gpuready/config.yaml and the user's config
    become private (absent) files, and gpuready's GPUREADY_* variables are unset.
    """
    from validator.cli import settings

    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    config = tmp_path_factory.mktemp("config")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config / "home"))
    monkeypatch.setattr(settings, "SYSTEM_CONFIG", config / "etc" / "gpuready" / "config.yaml")
    for name in list(os.environ):
        if name.startswith("GPUREADY_") and name not in HARNESS_VARIABLES:
            monkeypatch.delenv(name)
    return state


# The files that take longest, run one test at a time (CI's --durations): collected first, so
# that .ci/test's xdist workers (whole files each, --dist loadfile) start them at once and the
# run does not end waiting on one of them alone.
LONGEST_FIRST = (
    "tests/playbooks/test_playbooks.py",
    "tests/playbooks/test_playbook_preflight.py",
    "tests/service/test_provision_runner.py",
    "tests/cli/test_cli_provision.py",
    "tests/playbooks/test_playbook_roles_new.py",
    "tests/e2e/test_certify_slurm.py",
    "tests/node/test_burn_realism.py",
    "tests/playbooks/test_converged_probe.py",
    "tests/playbooks/test_playbook_fabric.py",
    "tests/e2e/test_provision.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the longest files' tests first, each file's in its own order (the rest unmoved)."""
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}

    def key(pair: tuple[int, pytest.Item]) -> tuple[int, int]:
        position, item = pair
        relative = Path(str(item.path)).resolve().relative_to(REPO_ROOT).as_posix()
        return rank.get(relative, len(rank)), position

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


def _cpu_seconds() -> float:
    # This process's CPU and that of the children it has reaped (subprocess.run reaps):
    # what a test cost the machine's two cores, which the parallel runs share.
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With GPUREADY_TEST_CPU_LOG=DIR, append each test's CPU seconds to DIR/<pid>.tsv.

    .ci/test sets it and names the tests that cost the most CPU (wall time under load
    says little about what to cut: every run waits on the others).
    """
    del nextitem
    folder = os.environ.get("GPUREADY_TEST_CPU_LOG")
    before = _cpu_seconds() if folder else 0.0
    yield
    if folder:
        spent = _cpu_seconds() - before
        with open(Path(folder) / f"{os.getpid()}.tsv", "a", encoding="utf-8") as log:
            log.write(f"{spent:.2f}\t{item.nodeid}\n")
