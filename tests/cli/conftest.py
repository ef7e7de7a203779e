"""Fixtures the CLI tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from validator.cli import settings


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A private /etc file and user config home; no GPUREADY_* setting from the caller."""
    system = tmp_path / "etc" / "gpuready" / "config.yaml"
    user = tmp_path / "home-config" / "gpuready" / "config.yaml"
    system.parent.mkdir(parents=True)
    user.parent.mkdir(parents=True)
    monkeypatch.setattr(settings, "SYSTEM_CONFIG", system)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home-config"))
    for setting in settings.SETTINGS:
        monkeypatch.delenv(setting.env, raising=False)
    for older in ("GPUREADY_SLURM_SPOOL", "GPUREADY_LOG_FILE", "NO_COLOR"):
        monkeypatch.delenv(older, raising=False)
    return {"system": system, "user": user, "root": tmp_path}
