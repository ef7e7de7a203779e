"""Shared test fixtures."""

from __future__ import annotations

import os
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


@pytest.fixture(autouse=True)
def private_state_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test gets its own state directory: no test writes the user's history database."""
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state
