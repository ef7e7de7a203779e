"""Every row of the README's ``drift --nhc`` exit-code table, run as slurmd runs it.

NHC, a Prolog and every HealthCheckProgram wrapper read any status but 0 as a failed
check, so only a node that matches its certificate exits 0. Each case runs
``gpuready drift --nhc`` through the CLI against a real SQLite history.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.cli.test_signals import signalled, start
from validator.cli.main import main

HEALTHY = "healthy-8x-h100-sxm"
CAPPED = "one-gpu-power-capped"  # the same host name, h100-node-01


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def nhc(capsys: pytest.CaptureFixture[str], db: Path, scenario: str) -> tuple[int, str, str]:
    return run(capsys, "drift", "--simulate", scenario, "--db", str(db), "--nhc")


def certify(capsys: pytest.CaptureFixture[str], db: Path, scenario: str) -> int:
    code, _, _ = run(capsys, "certify", "--simulate", scenario, "--db", str(db), "--burn", "2s")
    return code


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "history.db"


def test_0_the_node_matches_its_certificate(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert certify(capsys, db, HEALTHY) == 0
    code, out, _ = nhc(capsys, db, HEALTHY)
    assert (code, out.startswith("gpuready: ok: no drift since the certificate of ")) == (0, True)


def test_1_drift(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert certify(capsys, db, HEALTHY) == 0
    code, out, _ = nhc(capsys, db, CAPPED)
    assert code == 1
    assert re.fullmatch(r"gpuready: drift since the certificate of .*power_limit \(GPU 3\)\n", out)


def test_1_never_certified(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = nhc(capsys, db, HEALTHY)
    assert (code, out) == (1, "gpuready: never certified: run gpuready certify first\n")


def test_1_its_certification_failed(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert certify(capsys, db, CAPPED) == 1
    code, out, _ = nhc(capsys, db, CAPPED)
    assert code == 1
    assert out.startswith("gpuready: not certified: run 1 (")


def test_1_its_certificate_was_revoked(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert certify(capsys, db, HEALTHY) == 0
    assert certify(capsys, db, CAPPED) == 1
    code, out, _ = nhc(capsys, db, HEALTHY)
    assert code == 1
    assert out.startswith("gpuready: last certification on ")
    assert "power.limit (GPU 3)" in out


def test_2_bad_input(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "drift", "--simulate", HEALTHY, "--db", str(db), "--nhc", "--json")
    assert (code, out) == (2, "")
    assert "--json and --nhc both print on stdout: choose one" in err
    not_ours = db.with_name("notes.txt")
    not_ours.write_text("not a database\n")
    code, out, err = nhc(capsys, not_ours, HEALTHY)
    assert (code, out) == (2, "")
    assert "is not a gpuready history database" in err


def test_3_the_check_could_not_finish(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno
    import os

    assert certify(capsys, db, HEALTHY) == 0
    prom = tmp_path / "gpuready.prom"

    def full(src: object, dst: object, **relative: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    monkeypatch.setattr(os, "rename", full)
    code, out, err = run(
        capsys, "drift", "--simulate", HEALTHY, "--db", str(db), "--nhc", "--prom-file", str(prom)
    )
    monkeypatch.undo()
    assert (code, out) == (3, "")
    assert err.startswith(f"gpuready: error: cannot write the Prometheus file {prom}")


def test_70_a_bug(
    db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import validator.service.drift_service as service

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(service, "drift_node", broken)
    code, out, err = nhc(capsys, db, HEALTHY)
    assert (code, out) == (70, "")
    assert "Traceback" not in err


def test_130_interrupted(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert certify(capsys, db, HEALTHY) == 0
    child = start(["drift", "--simulate", HEALTHY, "--burn", "120s", "--nhc", "--db", str(db)])
    _, out, err = signalled(child, signal.SIGINT, settle_s=2.0)
    assert child.returncode == 130, err
    assert out.startswith("gpuready:")
