"""Stop signals end a run as Ctrl-C does: judged, written and recorded, well within KillWait.

kill, timeout, systemctl stop and Slurm's scancel send SIGTERM (and SIGKILL KillWait
seconds later, 30 by default); a closed terminal sends SIGHUP. Each test runs gpuready
in a child process, signals it mid-run, and reads what it left: its exit code, its
reports and its history. A second signal ends it at once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.hostile.test_faults import fleet
from validator.cli.main import main
from validator.error_tree import ExitCode
from validator.store import Store

SCENARIO = "healthy-8x-h100-sxm"
KILL_WAIT_S = 30.0  # Slurm's default KillWait: SIGKILL follows SIGTERM this much later
REPO = Path(__file__).resolve().parent.parent.parent
GPUREADY = [sys.executable, "-m", "validator.cli.main"]


# The child says on stderr when its burn begins (the drift run starts in history after it).
BURNING = "gpuready-test: burning"
_MARK_BURN = f"""
import sys
from validator.node.burnin import run as _burn
_real_burn = _burn.run_burn
def _marked(*args, **kwargs):
    print({BURNING!r}, file=sys.stderr, flush=True)
    return _real_burn(*args, **kwargs)
_burn.run_burn = _marked
"""


def start(
    argv: list[str], prelude: str = "", *, ignored: int | None = None
) -> subprocess.Popen[str]:
    """gpuready in a child process; ``prelude`` runs first (to slow or fault a step)."""
    code = _MARK_BURN + textwrap.dedent(prelude)
    code += "\nfrom validator.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as nohup leaves SIGHUP: ignored by the parent, so ignored in the child
        preexec_fn=None if ignored is None else lambda: _ignore(ignored),  # noqa: PLW1509
    )


def _ignore(number: int) -> None:
    signal.signal(number, signal.SIG_IGN)


def signalled(
    child: subprocess.Popen[str], number: int, *, settle_s: float = 1.0
) -> tuple[float, str, str]:
    """Signal ``child`` once it burns (its run in history); seconds to its exit, its output."""
    try:
        before = wait_for_burn(child)
        time.sleep(settle_s)  # into the burn, past the first progress tick
        assert child.poll() is None, child.communicate()
        child.send_signal(number)
        sent = time.monotonic()
        out, err = child.communicate(timeout=KILL_WAIT_S * 2)
        return time.monotonic() - sent, out, before + err
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def wait_for_burn(child: subprocess.Popen[str]) -> str:
    """What the child printed on stderr up to its burn's start."""
    assert child.stderr is not None
    seen = []
    for line in child.stderr:
        seen.append(line)
        if line.startswith(BURNING):
            return "".join(seen)
    raise AssertionError(f"the child never burned: {''.join(seen)}")


def rows_of(db: Path) -> list[tuple[str, str, str | None, str | None]]:
    """(kind, status, hostname, verdict) of every history row."""
    with Store.open(db, readonly=True) as store:
        return [(r.kind, r.status, r.hostname, r.verdict) for r in store.history(limit=1000)]


@pytest.mark.parametrize(
    ("number", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGTERM", "SIGHUP"]
)
def test_a_stop_signal_during_a_burn_keeps_reports_and_history_within_kill_wait(
    tmp_path: Path, number: int, code: int
) -> None:
    db, out = tmp_path / "history.db", tmp_path / "reports"
    child = start(
        ["certify", "--simulate", SCENARIO, "--burn", "120s", "--db", str(db),
         "--report-dir", str(out)]
    )  # fmt: skip
    seconds, stdout, err = signalled(child, number)
    assert child.returncode == code, err
    assert seconds < KILL_WAIT_S / 2, f"took {seconds:.1f} s after the signal"
    assert "internal error" not in err
    assert "h100-node-01" in stdout  # the terminal report
    report = json.loads((out / "report.json").read_text())
    (node,) = report["nodes"]
    assert node["facts"]["burn"]["interrupted"] is True
    assert node["facts"]["burn"]["elapsed_s"] < 60  # stopped, not run out
    # minutes of copies and all-reduce would outlast KillWait: not started after a stop
    assert node["facts"]["interconnect"]["error"].startswith("not started: the run was")
    assert rows_of(db) == [("certify", "interrupted", "h100-node-01", node["verdict"])]


def test_a_second_signal_ends_the_run_at_once(tmp_path: Path) -> None:
    db, out = tmp_path / "history.db", tmp_path / "reports"
    # The reports take a minute to write: only a second signal can end the run sooner.
    slow_reports = """
        import time
        from validator.service import certify_service as service
        real = service._write_outputs
        def slow(*args, **kwargs):
            print("gpuready-test: writing", file=__import__("sys").stderr, flush=True)
            time.sleep(60)
            return real(*args, **kwargs)
        service._write_outputs = slow
    """
    child = start(
        ["certify", "--simulate", SCENARIO, "--burn", "120s", "--db", str(db),
         "--report-dir", str(out)],
        slow_reports,
    )  # fmt: skip
    try:
        wait_for_burn(child)
        time.sleep(1.0)
        child.send_signal(signal.SIGTERM)
        assert child.stderr is not None
        writing = False
        for line in child.stderr:  # the first signal ended the burn: the reports are begun
            if line.startswith("gpuready-test: writing"):
                writing = True
                break
        assert writing, "the first signal did not end the burn and go on to the reports"
        child.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        child.wait(timeout=KILL_WAIT_S)
        assert time.monotonic() - sent < 5
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()
    assert child.returncode == -signal.SIGTERM  # died of it, as without a handler


def test_a_stop_signal_during_a_fleet_run_reports_and_records_every_host(tmp_path: Path) -> None:
    inventory, policy = fleet(tmp_path, 3)
    db, out = tmp_path / "history.db", tmp_path / "reports"
    child = start(
        ["certify", "-i", str(inventory), "--transport", "local", "--burn", "120s",
         "--policy", str(policy), "--db", str(db), "--report-dir", str(out)]
    )  # fmt: skip
    seconds, _, err = signalled(child, signal.SIGTERM, settle_s=2.0)
    assert child.returncode == 143, err
    assert seconds < KILL_WAIT_S / 2, f"took {seconds:.1f} s after the signal"
    report = json.loads((out / "report.json").read_text())
    assert report["fleet"]["interrupted"] is True
    assert sorted(node["hostname"] for node in report["nodes"]) == ["gpu01", "gpu02", "gpu03"]
    rows = rows_of(db)
    assert sorted(row[2] or "" for row in rows) == ["gpu01", "gpu02", "gpu03"]
    assert {row[1] for row in rows} == {"interrupted"}


def test_a_stop_signal_during_a_drift_burn_records_the_drift_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "history.db"
    assert main(["certify", "--simulate", SCENARIO, "--burn", "2s", "--db", str(db)]) == 0
    capsys.readouterr()
    child = start(["drift", "--simulate", SCENARIO, "--burn", "120s", "--nhc", "--db", str(db)])
    # the certify run is complete: wait for the drift's own
    seconds, stdout, err = signalled(child, signal.SIGTERM, settle_s=2.0)
    assert child.returncode == 143, err
    assert seconds < KILL_WAIT_S / 2
    assert stdout.startswith("gpuready:")
    kinds = {(row[0], row[1]) for row in rows_of(db)}
    assert kinds == {("certify", "complete"), ("drift", "interrupted")}


@pytest.mark.parametrize("where", ["report write", "store commit"])
def test_a_signal_after_the_measuring_lets_the_run_finish_and_record(
    tmp_path: Path, where: str
) -> None:
    db, out = tmp_path / "history.db", tmp_path / "reports"
    target = (
        ("validator.service.certify_service", "_write_outputs")
        if where == "report write"
        else ("validator.store", "Store.record_results")
    )
    module, name = target
    owner, _, attribute = name.rpartition(".")
    prelude = f"""
        import os, signal, importlib
        holder = importlib.import_module({module!r})
        holder = getattr(holder, {owner!r}) if {owner!r} else holder
        real = getattr(holder, {attribute!r})
        def signalled(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)
            return real(*args, **kwargs)
        setattr(holder, {attribute!r}, signalled)
    """
    child = start(
        ["certify", "--simulate", SCENARIO, "--burn", "2s", "--db", str(db),
         "--report-dir", str(out)],
        prelude,
    )  # fmt: skip
    stdout, err = child.communicate(timeout=180)
    assert child.returncode == ExitCode.OK, err  # the run was complete: its verdict's code
    assert "SIGTERM came after the measuring had ended" in err
    assert "h100-node-01" in stdout
    assert json.loads((out / "report.json").read_text())["nodes"][0]["verdict"] == "CERTIFIED"
    assert len(list((out / "certificates").iterdir())) == 1
    assert rows_of(db) == [("certify", "complete", "h100-node-01", "CERTIFIED")]


def test_a_signal_the_caller_ignored_stays_ignored(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    child = start(
        ["certify", "--simulate", SCENARIO, "--burn", "4s", "--db", str(db)],
        ignored=signal.SIGHUP,
    )
    _, _, err = signalled(child, signal.SIGHUP)
    assert child.returncode == ExitCode.OK, err  # the burn ran its course
    assert rows_of(db) == [("certify", "complete", "h100-node-01", "CERTIFIED")]


def test_a_stop_signal_to_a_slurm_collected_fleet_cancels_its_job_and_reports_every_node(
    tmp_path: Path,
) -> None:
    db, out, spool = tmp_path / "history.db", tmp_path / "reports", tmp_path / "spool"
    spool.mkdir()
    cancelled = tmp_path / "scancel.log"
    # Slurm's commands answered as a cluster whose job runs on and on (the text forms, as
    # recorded on the test cluster); the job's nodes never write a result.
    fake_slurm = f"""
        import functools, os, sys
        import validator.slurm.plan_and_reach as operations
        from validator.slurm import job_fanout
        from validator.slurm.commands import CommandResult
        def slurm(argv):
            argv = list(argv)
            if "--json" in argv:
                return CommandResult(1, "", argv[0] + ": unrecognized option '--json'\\n")
            if argv[0] == "sinfo":
                return CommandResult(0, "node01|idle|none|gpu*\\nnode02|idle|none|gpu*\\n")
            if argv[0] == "sbatch":
                print({BURNING!r}, file=sys.stderr, flush=True)  # the job is in
                return CommandResult(0, "1000\\n")
            if argv[0] == "squeue":  # listed cancelled once scancel was called, as Slurm does
                state = "CANCELLED" if os.path.exists({str(cancelled)!r}) else "RUNNING"
                return CommandResult(0, f"1000|{{state}}|None|node01,node02|gpuready-certify\\n")
            if argv[0] == "scancel":
                with open({str(cancelled)!r}, "a") as log:
                    log.write(" ".join(argv) + "\\n")
                return CommandResult(0)
            return CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\\n")
        operations.target_nodes = functools.partial(job_fanout.target_nodes, runner=slurm)
        operations.submit_run = functools.partial(job_fanout.submit_run, runner=slurm)
        operations.follow = functools.partial(job_fanout.follow, runner=slurm)
    """
    child = start(
        ["certify", "--slurm", "--partition", "gpu", "--spool", str(spool), "--poll", "0.2",
         "--burn", "60s", "--db", str(db), "--report-dir", str(out)],
        fake_slurm,
    )  # fmt: skip
    seconds, _, err = signalled(child, signal.SIGTERM)
    assert child.returncode == 143, err
    assert seconds < KILL_WAIT_S / 2
    assert cancelled.read_text().split() == ["scancel", "1000"]  # the job goes with the run
    report = json.loads((out / "report.json").read_text())
    nodes = {node["hostname"]: node for node in report["nodes"]}
    assert sorted(nodes) == ["node01", "node02"]
    assert {node["verdict"] for node in nodes.values()} == {"UNKNOWN"}
    assert all("interrupted" in node["findings"][0]["message"] for node in nodes.values())
    rows = rows_of(db)
    assert sorted((row[1], row[2]) for row in rows) == [
        ("interrupted", "node01"),
        ("interrupted", "node02"),
    ]
