"""Faults during a run: the result of a run is never lost (issue 12).

- the history database locked by another process during a burn: the reports are
  written, the run waits in a pending file, the next run imports it;
- the report folder going read-only in the middle of a fleet run: history keeps
  every host, no temporary file is left, one line names the file, exit 3;
- kill -9 at random points of a fleet run: the next run leaves no temporary file,
  history shows every run (the killed ones interrupted) and every host the run
  said had arrived.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.store.test_never_lost import leftovers, write_locked
from validator.cli.main import main
from validator.error_tree import ExitCode
from validator.report.partial import host_result_path
from validator.store import Store, pending_dir

SCENARIO = "healthy-8x-h100-sxm"
GPUREADY = [sys.executable, "-m", "validator.cli.main"]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def history_json(capsys: pytest.CaptureFixture[str], db: Path) -> list[dict[str, object]]:
    code, out, err = run_cli(capsys, "history", "--db", str(db), "--json", "--limit", "1000")
    assert code == 0, err
    rows = json.loads(out)
    assert isinstance(rows, list)
    return rows


def fleet(tmp_path: Path, hosts: int) -> tuple[Path, Path]:
    """An inventory of simulated hosts (local transport) and a policy needing no burn."""
    inventory = tmp_path / "hosts.ini"
    lines = ["[gpu]", *(f"gpu{i:02d} gpuready_simulate={SCENARIO}" for i in range(1, hosts + 1))]
    inventory.write_text("\n".join(lines) + "\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text("require_burn: false\n")
    return inventory, policy


def wait_for_running_run(db: Path, timeout_s: float = 60.0) -> int:
    """The id of the first run the database shows running (polled, read-only)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if db.exists():
            with (
                contextlib.suppress(sqlite3.Error),
                contextlib.closing(
                    sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
                ) as connection,
            ):
                found = connection.execute(
                    "SELECT id FROM runs WHERE status = 'running' ORDER BY id LIMIT 1"
                ).fetchone()
                if found is not None:
                    return int(found[0])
        time.sleep(0.02)
    raise AssertionError(f"no run started in {db} within {timeout_s:g} s")


# ---------------------------------------------------------------- (1) a locked store


@pytest.mark.parametrize("locked", ["before the run starts", "during the burn"])
def test_a_store_locked_during_a_burn_keeps_the_run_and_the_next_run_imports_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], locked: str
) -> None:
    db, out = tmp_path / "history.db", tmp_path / "reports"
    Store.open(db).close()
    argv = [
        *GPUREADY, "certify", "--simulate", SCENARIO, "--burn", "3s",
        "--db", str(db), "--report-dir", str(out),
    ]  # fmt: skip
    env = {**os.environ, "GPUREADY_DB_RETRY_S": "0.5"}
    with contextlib.ExitStack() as lock:
        if locked == "before the run starts":
            lock.enter_context(write_locked(db))
        began = time.monotonic()
        certify = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        if locked == "during the burn":
            wait_for_running_run(db)
            lock.enter_context(write_locked(db))
        stdout, stderr = certify.communicate(timeout=180)
        seconds = time.monotonic() - began
        # still locked: the run's own view of it is all there is
        assert certify.returncode == ExitCode.OK, stderr  # the verdict's: nothing was lost
        assert seconds < 60, "the retry budget was not respected"
        assert "h100-node-01" in stdout  # the terminal report
        report = json.loads((out / "report.json").read_text())
        assert [node["verdict"] for node in report["nodes"]] == ["CERTIFIED"]
        assert len(list((out / "certificates").iterdir())) == 1
        (pending,) = pending_dir(db).iterdir()
        warning = next(line for line in stderr.splitlines() if "warning" in line)
        assert warning.startswith(f"gpuready: warning: history database {db} could not be written")
        assert "database is locked" in warning
        assert str(pending) in warning
        assert "internal error" not in stderr

    code, _, err = run_cli(capsys, "history", "--db", str(db))
    assert code == 0
    assert f"1 run waits in {pending_dir(db)}" in err

    code, _, err = run_cli(
        capsys, "certify", "--simulate", SCENARIO, "--burn", "0", "--db", str(db)
    )
    assert code == ExitCode.NOT_CERTIFIED  # no burn this time
    assert f"gpuready: imported 1 pending run into history database {db}" in err
    assert not pending_dir(db).exists()
    rows = history_json(capsys, db)
    assert [(r["kind"], r["status"], r["verdict"]) for r in rows] == [
        ("certify", "complete", "NOT_CERTIFIED"),  # the next run
        ("certify", "complete", "CERTIFIED"),  # the locked one, imported whole
    ]
    with Store.open(db, readonly=True) as store:
        assert store.latest_certificate("h100-node-01") is not None


# ---------------------------------------------------------------- (2) a folder gone read-only


def test_a_report_dir_gone_read_only_during_a_fleet_run_loses_no_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests run as root, for whom chmod stops nothing: the file system refuses instead,
    # once the first host's file is in place.
    inventory, policy = fleet(tmp_path, 5)
    db, out = tmp_path / "history.db", tmp_path / "reports"
    real_open = os.open

    def read_only_after_the_first_host(
        path: str | os.PathLike[str], flags: int, *args: int, **kwargs: int
    ) -> int:
        text = os.fspath(path)
        if kwargs.get("dir_fd") is not None:  # a name in a folder held open: its full path
            text = os.path.join(os.readlink(f"/proc/self/fd/{kwargs['dir_fd']}"), text)
        first_host_in = (out / "hosts").is_dir() and any((out / "hosts").glob("*.json"))
        if flags & os.O_CREAT and text.startswith(str(out)) and first_host_in:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), text)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_after_the_first_host)
    code, stdout, err = run_cli(
        capsys, "certify", "-i", str(inventory), "--transport", "local", "--burn", "0",
        "--parallel", "1", "--policy", str(policy), "--db", str(db), "--report-dir", str(out),
    )  # fmt: skip
    monkeypatch.undo()

    assert code == ExitCode.COULD_NOT_RUN
    errors = [line for line in err.splitlines() if line.startswith("gpuready:")]
    assert len(errors) == 1, err
    (line,) = errors
    match = re.fullmatch(
        rf"gpuready: error: cannot write {re.escape(str(out))}/hosts/(gpu0\d)\.json: "
        r"Read-only file system; free space or choose a writable --report-dir "
        r"\(the results are kept in history\)",
        line,
    )
    assert match is not None, line
    assert "gpu0" in stdout  # the terminal report still shows every host
    with Store.open(db, readonly=True) as store:
        rows = store.history()
    assert sorted((r.hostname, r.verdict, r.status) for r in rows) == [
        (f"gpu0{i}", "CERTIFIED", "complete") for i in range(1, 6)
    ]
    assert leftovers(out) == []
    (written,) = (out / "hosts").iterdir()  # the one host written before the folder froze
    assert json.loads(written.read_text())["verdict"] == "CERTIFIED"
    assert not (out / "report.json").exists()
    assert not (out / "certificates").exists()  # no certificate without its reports


# ---------------------------------------------------------------- (3) kill -9


KILL_SEED = 20_251_201
_rng = random.Random(KILL_SEED)  # noqa: S311 - reproducible kill points, not secrets
# Seconds after the run appears in history: from the first hosts' arrival to the last reports.
KILL_DELAYS = tuple(round(_rng.uniform(0.0, 1.0), 2) for _ in range(5))


@pytest.mark.parametrize(
    "delay_s",
    KILL_DELAYS,
    ids=[f"seed{KILL_SEED}-kill{n}-at{delay:.2f}s" for n, delay in enumerate(KILL_DELAYS)],
)
def test_kill_9_during_a_fleet_run_loses_nothing_that_was_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], delay_s: float
) -> None:
    inventory, policy = fleet(tmp_path, 8)
    db, out = tmp_path / "history.db", tmp_path / "reports"
    argv = [
        *GPUREADY, "certify", "-i", str(inventory), "--transport", "local", "--burn", "0",
        "--parallel", "1", "--policy", str(policy), "--db", str(db), "--report-dir", str(out),
    ]  # fmt: skip
    certify = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        killed_run = wait_for_running_run(db)
        time.sleep(delay_s)
        certify.send_signal(signal.SIGKILL)
        _, stderr = certify.communicate(timeout=60)
    finally:
        if certify.poll() is None:
            certify.kill()
    # "[3/8] gpu05 CERTIFIED": what the run said had arrived before it died
    arrived = set(re.findall(r"^\[\d+/8\] (gpu\d\d) ", stderr, flags=re.MULTILINE))
    killed = certify.returncode == -signal.SIGKILL

    rows = [r for r in history_json(capsys, db) if r["run_id"] == killed_run]
    assert rows, "the killed run is not in history"
    (status,) = {r["status"] for r in rows}
    in_history = {r["hostname"] for r in rows if r["hostname"] is not None}
    if status == "complete":  # it had finished when the signal came (or it was not killed)
        assert in_history == {f"gpu{i:02d}" for i in range(1, 9)}
        assert (out / "report.json").is_file()
    else:
        assert (status, killed) == ("interrupted", True)
    on_disk = {host for host in arrived if host_result_path(out, host).is_file()}
    assert arrived <= in_history | on_disk
    for temporary in leftovers(out):  # whatever it left mid-write is marked as its own
        assert f"-{certify.pid}-" in temporary.name

    # The next run into the same folder clears what the killed one left half-written.
    code, _, err = run_cli(
        capsys, "certify", "-i", str(inventory), "--transport", "local", "--burn", "0",
        "--limit", "gpu01", "--policy", str(policy), "--db", str(db), "--report-dir", str(out),
    )  # fmt: skip
    assert code == ExitCode.OK, err
    assert leftovers(out) == []
    runs = {r["run_id"]: r["status"] for r in history_json(capsys, db)}
    assert len(runs) == 2
    assert runs[killed_run] == status
    with contextlib.closing(sqlite3.connect(db)) as connection:  # marked so by the next writer
        (stored,) = connection.execute(
            "SELECT status FROM runs WHERE id = ?", (killed_run,)
        ).fetchone()
    assert stored == runs[killed_run]
