"""The Slurm spool lives under XDG state; a submission left in ~/.gpuready/slurm is still found."""

from __future__ import annotations

from pathlib import Path

import pytest

from validator.cli.main import main
from validator.error_tree import ExitCode
from validator.slurm.submission_spool import (
    Submission,
    default_spool,
    earlier_spool,
    new_submission,
    save,
    spool_holding,
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for name in ("GPUREADY_SPOOL", "GPUREADY_SLURM_SPOOL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


def submitted(spool: Path, job: str) -> Path:
    directory = new_submission(spool)
    save(Submission(directory, nodes=("n1",), jobs={"n1": job}, created_at="2026-01-01T00:00Z"))
    return directory


def test_the_default_spool_is_under_xdg_state(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_spool() == home / "state" / "gpuready" / "spool"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # invalid per XDG: ignored
    assert default_spool() == home / ".local" / "state" / "gpuready" / "spool"
    assert earlier_spool() == home / ".gpuready" / "slurm"


def test_only_a_submission_missing_from_the_default_is_looked_for_in_the_earlier(
    home: Path,
) -> None:
    submitted(earlier_spool(), "4711")
    where, notice = spool_holding(default_spool(), "4711")
    assert where == earlier_spool()
    assert notice is not None
    assert "earlier spool" in notice
    assert str(default_spool()) in notice
    submitted(default_spool(), "4711")  # the same id in the new spool: that one stands
    assert spool_holding(default_spool(), "4711") == (default_spool(), None)
    other = home / "shared"
    assert spool_holding(other, "4711") == (other, None)  # a spool given is the one read
    assert spool_holding(default_spool(), "../x") == (default_spool(), None)


def test_collect_reads_a_submission_from_before_the_move(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = submitted(earlier_spool(), "4711")
    (directory / "out" / "n1.rc").write_text("3\n")
    (directory / "out" / "n1.stderr").write_text("gpuready-agent: error: no usable NVIDIA driver\n")
    code = main(["slurm", "collect", "4711"])
    _, err = capsys.readouterr()
    assert code == ExitCode.COULD_NOT_RUN
    assert err.count("is in the earlier spool") == 1
    assert "no gpuready submission" not in err


def test_collect_reads_the_spool_a_setting_names(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``slurm collect``, a group's subcommand, takes the spool setting as certify does."""
    spool = home / "shared" / "spool"
    directory = submitted(spool, "4712")
    (directory / "out" / "n1.rc").write_text("3\n")
    monkeypatch.setenv("GPUREADY_SPOOL", str(spool))
    code = main(["slurm", "collect", "4712"])
    _, err = capsys.readouterr()
    assert code == ExitCode.COULD_NOT_RUN
    assert "no gpuready submission" not in err
    monkeypatch.delenv("GPUREADY_SPOOL")
    assert main(["slurm", "collect", "4712"]) == ExitCode.BAD_INPUT
    assert "no gpuready submission 4712" in capsys.readouterr().err
