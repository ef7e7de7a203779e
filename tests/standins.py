"""The stand-ins for perftest and nccl-tests (tests/fixtures/standins), put on PATH for a test."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

STANDINS = Path(__file__).resolve().parent / "fixtures" / "standins"
# What a surrounding shell, job or MPI launch could set that the stand-ins or the runners read.
_CLEARED = ("GPUREADY_STANDIN_", "GPUREADY_STEP_", "SLURM_", "OMPI_", "PMIX_", "PMI_")


def put_standins_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-ins first on PATH (then this Python's folder), and no outer setting they read."""
    for name in list(os.environ):
        if name.startswith(_CLEARED):
            monkeypatch.delenv(name)
    python_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv(
        "PATH", f"{STANDINS}{os.pathsep}{python_dir}{os.pathsep}{os.environ['PATH']}"
    )
