"""Nothing measured is lost: atomic files, a locked or failing store, dead runs, host file names.

The faults the issue demands end to end (a locked store during a burn, a report
folder going read-only during a fleet run, kill -9) are in tests/hostile/test_faults.py;
here each piece is pinned on its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.judge.test_judge_healthy import healthy_node, judge
from validator import files
from validator.certificate import issue_certificate
from validator.cli.main import main
from validator.error_tree import ExitCode
from validator.files import remove_stale_temporaries, temporary_path, write_atomic
from validator.model import NodeResult, Verdict
from validator.report.partial import certificate_path, host_file_stem, host_result_path
from validator.service.certify_service import CertifyRequest, run_certify
from validator.store import (
    NotStoredError,
    Store,
    StoreError,
    pending_dir,
    pending_runs,
    retry_budget,
)

SCENARIO = "healthy-8x-h100-sxm"
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def certified(hostname: str = "gpu-node-01") -> NodeResult:
    result = dataclasses.replace(judge(healthy_node()), hostname=hostname)
    assert result.verdict is Verdict.CERTIFIED
    return result


def leftovers(directory: Path) -> list[Path]:
    """Temporary and backup files anywhere under ``directory``."""
    return sorted(p for p in directory.rglob("*") if p.name.endswith((".tmp", ".bak")))


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@contextlib.contextmanager
def write_locked(db: Path) -> Iterator[None]:
    """Another process holds the database's write lock (an open BEGIN IMMEDIATE)."""
    Store.open(db).close()  # a history database, as a run would find it
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "db.execute('BEGIN IMMEDIATE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)


# ---------------------------------------------------------------- atomic files


def _fail_write(monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, data: object) -> int:
        raise ENOSPC

    monkeypatch.setattr(os, "write", full)


def _fail_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)


def _fail_close(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.close

    def delayed_error(fd: int) -> None:  # NFS reports a failed write at close
        real(fd)
        raise ENOSPC

    monkeypatch.setattr(os, "close", delayed_error)


def _fail_replace(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(src: object, dst: object, **relative: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "replace", refused)


def _fail_create(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.open

    def refused(path: str | os.PathLike[str], flags: int, *args: int, **kwargs: int) -> int:
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system")
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused)


@pytest.mark.parametrize(
    "failure", [_fail_write, _fail_fsync, _fail_close, _fail_replace, _fail_create]
)
def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: Callable[[pytest.MonkeyPatch], None]
) -> None:
    target = tmp_path / "certificates" / "gpu01.json"
    target.parent.mkdir()
    write_atomic(target, "old\n")
    with monkeypatch.context() as patch:
        failure(patch)
        with pytest.raises(OSError):  # noqa: PT011 - every kind of failure is an OSError
            write_atomic(target, "new " * 100_000)
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["gpu01.json"]


def test_a_temporary_file_names_its_host_and_process(tmp_path: Path) -> None:
    name = temporary_path(tmp_path / "report.json").name
    assert name.startswith(f".report.json.{files.host_tag()}-{os.getpid()}-")
    assert name.endswith(".tmp")


def _temporary_of_a_killed_writer(directory: Path) -> Path:
    """A child that dies by SIGKILL in the middle of write_atomic (between write and rename)."""
    code = textwrap.dedent(
        """
        import os, signal, sys
        from validator import files
        fd, path = files.create_temporary(sys.argv[1])
        os.write(fd, b"half a report")
        print(path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", code, str(directory / "report.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    return Path(child.stdout.strip())


def test_the_next_writer_removes_temporaries_of_dead_writers_only(tmp_path: Path) -> None:
    dead = _temporary_of_a_killed_writer(tmp_path)
    assert dead.exists()
    mine_fd, mine = files.create_temporary(tmp_path / "junit.xml")  # this (live) process
    os.close(mine_fd)
    foreign = tmp_path / ".report.html.0123abcd-1-00000000.tmp"  # another host's writer
    foreign.write_text("in flight elsewhere")
    # tempfile's name, from before writers named themselves
    old_style = tmp_path / ".report.json.k2j4h5_q.tmp"
    # The user's own hidden files, in a directory --report-dir (or capture) was pointed at.
    users = [tmp_path / name for name in (".bashrc.bak", ".config.tmp", ".notes.2024.tmp")]
    stale_after = time.time() - files.STALE_AFTER_S - 60
    for path in (old_style, *users):
        path.write_text("x")
        os.utime(path, (stale_after, stale_after))
    report = tmp_path / "report.json"
    report.write_text("{}")

    removed = remove_stale_temporaries(tmp_path)

    assert sorted(removed) == sorted([dead, old_style])
    assert mine.exists()
    assert foreign.exists()
    assert all(path.exists() for path in users)
    assert report.read_text() == "{}"


# ---------------------------------------------------------------- host names as file names


@pytest.mark.parametrize(
    ("hostname", "stem"),
    [
        ("gpu-01", "gpu-01"),
        ("gpu01.example.com", "gpu01.example.com"),
        ("gpu@01", "gpu_4001"),
        ("gpu_01", "gpu_5F01"),
        ("GPU_01", "GPU_5F01"),
        (".hidden", "_2Ehidden"),
        ("..", "_2E."),
        ("a/../b", "a_2F.._2Fb"),
        ("rack 3", "rack_203"),
        ("gpü", "gp_C3_BC"),
        ("", "_"),
    ],
)
def test_host_file_names_are_readable_for_plain_names_and_escaped_otherwise(
    tmp_path: Path, hostname: str, stem: str
) -> None:
    assert host_file_stem(hostname) == stem
    assert host_result_path(tmp_path, hostname) == tmp_path / "hosts" / f"{stem}.json"
    assert certificate_path(tmp_path, hostname) == tmp_path / "certificates" / f"{stem}.json"


def test_distinct_host_names_never_share_a_file() -> None:
    names = [
        "gpu@01", "gpu_01", "gpu_4001", "gpu 01", "gpu/01", "gpu:01", "gpu-01", "GPU-01",
        ".gpu01", "_2Egpu01", "gpu01", "", "_", "_5F", "..", ".", "a" * 300, "a" * 299 + "b",
        "é", "e\u0301", "gpu\x00", "gpu\n",
    ]  # fmt: skip
    stems = [host_file_stem(name) for name in names]
    assert len(set(stems)) == len(names)
    assert all(0 < len(stem.encode()) <= 200 for stem in stems)
    assert all(re.fullmatch(r"[A-Za-z0-9._~-]+", stem) for stem in stems)
    assert host_file_stem("gpu@01") == host_file_stem("gpu@01")  # deterministic


def test_a_fleet_with_look_alike_host_names_keeps_each_hosts_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        f"[gpu]\ngpu@01 gpuready_simulate={SCENARIO}\ngpu_01 gpuready_simulate={SCENARIO}\n"
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text("require_burn: false\n")
    out = tmp_path / "out"
    code, _, err = run_cli(
        capsys, "certify", "-i", str(inventory), "--transport", "local", "--burn", "0",
        "--policy", str(policy), "--db", str(tmp_path / "h.db"), "--report-dir", str(out),
    )  # fmt: skip
    assert code == ExitCode.OK, err
    for folder in ("hosts", "certificates"):
        stored = {json.loads(p.read_text())["hostname"] for p in (out / folder).iterdir()}
        assert stored == {"gpu@01", "gpu_01"}, folder


# ---------------------------------------------------------------- the store: spooling


def test_retry_budget_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUREADY_DB_RETRY_S", raising=False)
    assert retry_budget() == 30.0
    monkeypatch.setenv("GPUREADY_DB_RETRY_S", "0.25")
    assert retry_budget() == 0.25
    assert retry_budget(2) == 2.0
    for bad in ("soon", "-1", "nan", "1e9"):
        monkeypatch.setenv("GPUREADY_DB_RETRY_S", bad)
        with pytest.raises(StoreError, match=r"GPUREADY_DB_RETRY_S=.* is not a number of seconds"):
            retry_budget()


def test_a_database_locked_by_another_process_still_opens_at_once(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    Store.open(db).close()
    with write_locked(db):
        began = time.monotonic()
        Store.open(db, retry_s=5).close()
        assert time.monotonic() - began < 3


def test_a_run_started_on_a_locked_store_is_spooled_whole_then_imported(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    good = certified("gpu-a")
    with write_locked(db), Store.open(db, retry_s=0.2) as store:
        began = time.monotonic()
        run = store.start_run("certify", 2, good.policy_digest, ["gpuready", "certify"])
        assert time.monotonic() - began < 5  # the budget, not a minute
        assert run < 0
        store.record_result(run, good, issue_certificate(good))
        store.record_result(run, certified("gpu-b"))
        store.finish_run(run)
        (notice,) = store.take_notices()
    (pending,) = pending_dir(db).iterdir()
    assert str(pending) in notice
    assert "database is locked" in notice
    document = json.loads(pending.read_text())
    assert document["run"]["status"] == "complete"
    assert [r["result"]["hostname"] for r in document["results"]] == ["gpu-a", "gpu-b"]
    assert document["results"][0]["certificate"] is not None

    with Store.open(db) as store:
        (notice,) = store.take_notices()
        assert notice.startswith("imported 1 pending run into history database")
        rows = store.history()
        assert [(r.hostname, r.verdict, r.status) for r in rows] == [
            ("gpu-a", "CERTIFIED", "complete"),
            ("gpu-b", "CERTIFIED", "complete"),
        ]
        assert store.latest_certificate("gpu-a") is not None
    assert not pending_dir(db).exists()


def test_importing_a_pending_file_twice_adds_nothing(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with write_locked(db), Store.open(db, retry_s=0.1) as store:
        run = store.start_run("certify", 1, "p", ["gpuready"])
        store.record_result(run, certified())
        store.finish_run(run)
    (pending,) = pending_dir(db).iterdir()
    copy = tmp_path / "copy.json"
    shutil.copy(pending, copy)
    Store.open(db).close()
    # as if the importer died after its commit, before it removed the file
    pending_dir(db).mkdir()
    shutil.copy(copy, pending_dir(db) / pending.name)
    with Store.open(db) as store:
        assert len(store.history()) == 1
    assert raw_count(db, "runs") == 1
    assert raw_count(db, "results") == 1


def raw_count(db: Path, table: str) -> int:
    with contextlib.closing(sqlite3.connect(db)) as connection:
        return int(connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])  # noqa: S608


def test_a_lock_taken_during_the_run_spools_the_rest_into_the_same_run(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with Store.open(db, retry_s=0.2) as store:
        run = store.start_run("certify", 2, "p")
        store.record_result(run, certified("gpu-a"))
        with write_locked(db):
            store.record_result(run, certified("gpu-b"))
            store.finish_run(run)
        assert len(store.take_notices()) == 1
    with Store.open(db) as store:
        rows = store.history()
    assert [(r.run_id, r.hostname, r.status) for r in rows] == [
        (run, "gpu-a", "complete"),
        (run, "gpu-b", "complete"),
    ]


def test_a_pending_run_of_a_live_process_waits_and_a_dead_ones_is_interrupted(
    tmp_path: Path,
) -> None:
    db = tmp_path / "h.db"
    with write_locked(db), Store.open(db, retry_s=0.1) as store:
        run = store.start_run("certify", 3, "p")
        store.record_result(run, certified("gpu-a"))
        # not finished: this process still runs it
    (pending,) = pending_dir(db).iterdir()
    with Store.open(db) as other:
        assert other.history() == []  # still being written by a live process
    assert pending.exists()
    document = json.loads(pending.read_text())
    document["run"]["pid"] = _dead_pid()
    pending.write_text(json.dumps(document))
    with Store.open(db) as store:
        assert [(r.hostname, r.status) for r in store.history()] == [("gpu-a", "interrupted")]
    assert not pending.exists()


def test_a_pending_run_of_another_host_is_imported_once_abandoned(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with write_locked(db), Store.open(db, retry_s=0.1) as store:
        store.record_result(store.start_run("certify", 1, "p"), certified("gpu-a"))
    (pending,) = pending_dir(db).iterdir()
    document = json.loads(pending.read_text())
    document["run"]["hostname"] = "another-controller"  # its pid means nothing here
    pending.write_text(json.dumps(document))
    Store.open(db).close()
    assert pending.exists()  # it may still be writing
    hour_ago = time.time() - files.STALE_AFTER_S - 60
    os.utime(pending, (hour_ago, hour_ago))
    with Store.open(db) as store:
        assert [(r.hostname, r.status) for r in store.history()] == [("gpu-a", "interrupted")]


def _dead_pid() -> int:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(child.stdout)


def test_a_pending_file_that_is_not_a_run_is_kept_with_a_notice(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    pending_dir(db).mkdir(parents=True)
    broken = pending_dir(db) / "20250101T000000Z-1-1.json"
    broken.write_text('{"format": "gpuready-pending-run", "version": 1, "run": {}, "results": []}')
    with Store.open(db) as store:
        (notice,) = store.take_notices()
    assert notice.startswith(f"warning: cannot import {broken}")
    assert "\n" not in notice
    assert broken.exists()


def test_a_run_that_can_be_stored_nowhere_is_one_line_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "h.db"

    def disk_full(path: object, data: object, **kwargs: object) -> Path:
        raise ENOSPC

    monkeypatch.setattr(pending_runs, "write_atomic", disk_full)
    with write_locked(db), Store.open(db, retry_s=0.1) as store:
        run = store.start_run("certify", 1, "p")
        store.record_result(run, certified())  # kept in memory meanwhile
        with pytest.raises(NotStoredError) as caught:
            store.finish_run(run)
    message = str(caught.value)
    assert "\n" not in message
    assert "database is locked" in message
    assert "No space left on device" in message
    assert caught.value.exit_code == ExitCode.COULD_NOT_RUN


# ---------------------------------------------------------------- the store: dead runs


def test_a_run_whose_process_was_killed_reads_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    code = textwrap.dedent(
        """
        import os, signal, sys
        from validator.store import Store
        store = Store.open(sys.argv[1])
        store.start_run("certify", 4, "p")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    child = subprocess.run([sys.executable, "-c", code, str(db)], check=False, timeout=60)
    assert child.returncode == -signal.SIGKILL
    with Store.open(db) as store:
        live = store.start_run("drift", 1, "p")  # this process lives: its run is incomplete
    with Store.open(db, readonly=True) as store:
        statuses = {row.run_id: row.status for row in store.history()}
    assert statuses == {1: "interrupted", live: "incomplete"}
    with contextlib.closing(sqlite3.connect(db)) as connection:  # marked by the writer's open
        stored = dict(connection.execute("SELECT id, status FROM runs").fetchall())
    assert stored == {1: "interrupted", live: "running"}


# ---------------------------------------------------------------- certify: the order of writes


def _refuse_creating_under(
    monkeypatch: pytest.MonkeyPatch, directory: Path, when: Callable[[str], bool]
) -> None:
    """Creating a file under ``directory`` whose name ``when`` picks fails: the disk is full."""
    real = os.open

    def guarded(path: str | os.PathLike[str], flags: int, *args: int, **kwargs: int) -> int:
        text = os.fspath(path)
        if kwargs.get("dir_fd") is not None:  # a name in a folder held open: its full path
            text = os.path.join(os.readlink(f"/proc/self/fd/{kwargs['dir_fd']}"), text)
        if flags & os.O_CREAT and text.startswith(str(directory)) and when(text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), text)
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)


def _request(out: Path) -> CertifyRequest:
    return CertifyRequest(simulate=SCENARIO, policy_path=None, burn=None, report_dir=str(out))


@pytest.fixture
def no_burn_policy(tmp_path: Path) -> Path:
    policy = tmp_path / "policy.yaml"
    policy.write_text("require_burn: false\n")
    return policy


def test_reports_that_cannot_be_written_leave_no_certificate_and_history_keeps_the_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_burn_policy: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    _refuse_creating_under(monkeypatch, out, lambda name: ".report.json." in name)
    request = dataclasses.replace(_request(out), policy_path=str(no_burn_policy))
    with Store.open(tmp_path / "h.db") as store:
        outcome = run_certify(request, store)
        assert [(r.verdict, r.status) for r in store.history()] == [("CERTIFIED", "complete")]
        assert store.latest_certificate(outcome.report.nodes[0].hostname) is None
    assert outcome.exit_code == ExitCode.COULD_NOT_RUN
    (problem,) = outcome.problems
    assert problem.startswith(f"cannot write {out / 'report.json'}: No space left on device")
    assert "kept in history" in problem
    assert outcome.certificates == {}
    assert sorted(p.name for p in out.rglob("*")) == []


def test_a_certificate_that_cannot_be_written_is_not_recorded_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_burn_policy: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    _refuse_creating_under(monkeypatch, out / "certificates", lambda name: True)
    request = dataclasses.replace(_request(out), policy_path=str(no_burn_policy))
    with Store.open(tmp_path / "h.db") as store:
        outcome = run_certify(request, store)
        host = outcome.report.nodes[0].hostname
        assert store.latest_certificate(host) is None
        assert store.history()[0].verdict == "CERTIFIED"
    (problem,) = outcome.problems
    assert problem.startswith(f"cannot write the certificate {certificate_path(out, host)}")
    assert {p.name for p in out.iterdir()} == {
        "report.json",
        "report.html",
        "junit.xml",
        "certificates",
    }
    assert list((out / "certificates").iterdir()) == []
    assert outcome.exit_code == ExitCode.COULD_NOT_RUN


def test_certify_with_an_unwritable_report_dir_still_prints_the_report_and_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    _refuse_creating_under(monkeypatch, out, lambda name: ".report." in name)
    code, stdout, err = run_cli(
        capsys, "certify", "--simulate", SCENARIO, "--burn", "0", "--json",
        "--db", str(tmp_path / "h.db"), "--report-dir", str(out),
    )  # fmt: skip
    assert code == ExitCode.COULD_NOT_RUN
    assert json.loads(stdout)["nodes"][0]["hostname"]
    errors = [line for line in err.splitlines() if line.startswith("gpuready: error:")]
    assert errors == [
        f"gpuready: error: cannot write {out / 'report.json'}: No space left on device; "
        "choose a writable output directory (or free space) and run again "
        "(the results are kept in history)"
    ]
    assert "internal error" not in err
    assert leftovers(out) == []


# ---------------------------------------------------------------- history --limit


@pytest.mark.parametrize(
    "limit", ["1e20", "0", "-1", "abc", "1000001", "99999999999999999999", "²"]
)
def test_history_limit_must_be_a_bounded_whole_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], limit: str
) -> None:
    db = tmp_path / "h.db"
    Store.open(db).close()
    code, out, err = run_cli(capsys, "history", "--db", str(db), "--limit", limit)
    assert (code, out) == (ExitCode.BAD_INPUT, "")
    assert err.count("\n") == 1
    assert err.startswith("gpuready: error: --limit ")
    assert "give e.g. --limit 50" in err


def test_history_limit_at_its_bound_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.db"
    with Store.open(db) as store:
        store.finish_run(store.start_run("certify", 1, "p"))
    code, out, _ = run_cli(capsys, "history", "--db", str(db), "--limit", "1000000", "--json")
    assert code == 0
    assert len(json.loads(out)) == 1


def test_history_says_when_runs_wait_in_a_pending_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.db"
    with write_locked(db), Store.open(db, retry_s=0.1) as store:
        store.finish_run(store.start_run("certify", 1, "p"))
    code, _, err = run_cli(capsys, "history", "--db", str(db))
    assert code == 0
    assert f"1 run waits in {pending_dir(db)}" in err


# ---------------------------------------------------------------- capture


def test_capture_on_a_full_disk_names_the_file_exits_3_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "bundle"
    writes = 0
    real_write = os.write

    def fills_up(fd: int, data: bytes) -> int:
        nonlocal writes
        writes += 1
        if writes > 2:
            raise ENOSPC
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", fills_up)
    code, _, err = run_cli(capsys, "capture", "--simulate", SCENARIO, str(bundle))
    monkeypatch.undo()
    assert code == ExitCode.COULD_NOT_RUN
    assert err.count("\n") == 1
    assert err.startswith(f"gpuready: error: cannot write {bundle}/")
    assert ": No space left on device; free space or choose another folder" in err
    assert f"(the capture in {bundle} is incomplete)" in err
    assert leftovers(bundle) == []
    assert len(list(bundle.iterdir())) == 2  # the two files written before the disk filled


# ---------------------------------------------------------------- bad input records nothing


@pytest.mark.parametrize(
    "args",
    [
        ("--simulate", "no-such-scenario"),
        ("--capture", "{tmp}/no-bundle"),
        ("--simulate", SCENARIO, "--burn", "1s", "--burn-inject", "nan:99:1"),
        ("-i", "{tmp}/missing.ini", "--transport", "local"),
    ],
    ids=["unknown-scenario", "missing-capture", "injection-on-a-missing-gpu", "missing-inventory"],
)
def test_bad_input_leaves_no_database_and_no_report_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    db, out = tmp_path / "state" / "history.db", tmp_path / "reports"
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    code, _, err = run_cli(capsys, "certify", *argv, "--db", str(db), "--report-dir", str(out))
    assert code == ExitCode.BAD_INPUT, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_deferred_store_reads_empty_and_is_made_by_its_first_write(tmp_path: Path) -> None:
    db = tmp_path / "new" / "history.db"
    with Store.open(db, defer_create=True) as store:
        assert store.history() == []
        assert store.latest_certificate("gpu-a") is None
        assert not (tmp_path / "new").exists()
        run = store.start_run("certify", 1, "p")
        store.record_result(run, certified("gpu-a"))
        store.finish_run(run)
    with Store.open(db, readonly=True) as store:
        assert [(r.hostname, r.status) for r in store.history()] == [("gpu-a", "complete")]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="is not a directory"):
        Store.open(blocker / "history.db", defer_create=True)


def test_a_database_refused_by_its_header_is_not_touched_at_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "history.db"
    with Store.open(db) as store:
        store.finish_run(store.start_run("certify", 1, "p"))
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.execute("PRAGMA user_version = 999")
        connection.commit()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert before == ["history.db"]  # the last connection closed: no -wal, no -shm
    code, _, err = run_cli(capsys, "history", "--db", str(db))
    assert code == ExitCode.BAD_INPUT
    assert "was written by a newer gpuready (schema 999" in err
    half = tmp_path / "half.db"
    half.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    code, _, err = run_cli(capsys, "history", "--db", str(half))
    assert code == ExitCode.BAD_INPUT
    assert "is damaged" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["half.db", "history.db"]
