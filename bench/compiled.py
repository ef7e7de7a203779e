"""Benches run the controller from compiled bytecode, as an installed gpuready runs.

pip compiles a package's modules when it installs it, and an editable install
writes their bytecode on its first run; a shell with ``PYTHONDONTWRITEBYTECODE``
set (as on the development machines) compiles ~90 of gpuready's modules from
source in every process instead, ~0.2 CPU-s that no user's run spends. So a bench
compiles the package once (into ``__pycache__``, which git ignores) and runs its
processes without that variable.
"""

from __future__ import annotations

import compileall
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def as_installed(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a process that runs gpuready as installed: the package compiled."""
    compileall.compile_dir(REPO / "validator", quiet=1)
    return {name: value for name, value in env.items() if name != "PYTHONDONTWRITEBYTECODE"}
