"""Planted links (issue 30, "Turned against root"): gpuready runs as root and never follows one.

Whoever can write to the report folder, the database's folder or the state folder
can plant a symbolic link (or a FIFO, or a folder) where gpuready writes, renames or
removes. Each case plants one and runs the command as an operator would: the run
must refuse it with one line naming it and exit 2, and nothing outside the folder
may be written, truncated or removed.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.test_faults import run_cli
from tests.store.test_never_lost import write_locked
from validator import files
from validator.error_tree import ExitCode, UnsafePathError
from validator.report.rma import rma_file_name
from validator.store import Store, pending_dir, run_lock_path

SCENARIO = "healthy-8x-h100-sxm"
HOST = "h100-node-01"  # the simulated node's name
ROOTS_FILE = "root's own file: never to be overwritten\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder the run must never touch, with one file of root's in it."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "shadow").write_text(ROOTS_FILE)
    return folder


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text("require_burn: false\n")
    return path


def untouched(folder: Path, extra: frozenset[str] = frozenset()) -> None:
    """Only ``shadow`` (and the files the case put there) is in ``folder``, unchanged."""
    assert sorted(p.name for p in folder.iterdir()) == sorted({"shadow", *extra})
    assert (folder / "shadow").read_text() == ROOTS_FILE


def refused(code: int, err: str, named: Path) -> None:
    """Exit 2 and one line naming the planted path."""
    assert code == ExitCode.BAD_INPUT, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(named) in lines[0], err
    assert "Traceback" not in err


def certify(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, policy: Path, *extra: str
) -> tuple[int, str, str]:
    return run_cli(
        capsys,
        "certify",
        "--simulate",
        SCENARIO,
        "--burn",
        "0",
        "--policy",
        str(policy),
        "--db",
        str(tmp_path / "history.db"),
        "--report-dir",
        str(tmp_path / "rep"),
        *extra,
    )


# ---------------------------------------------------------------- the store's folder


def test_a_run_lock_planted_as_a_link_is_refused_and_its_target_kept(
    tmp_path: Path, outside: Path, policy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "history.db"
    lock = run_lock_path(db, 1)  # a new database's first run: predictable
    lock.symlink_to(outside / "shadow")
    code, _out, err = certify(capsys, tmp_path, policy)
    refused(code, err, lock)
    untouched(outside)


def test_a_run_lock_left_by_someone_else_is_not_truncated(tmp_path: Path) -> None:
    # A regular file already there (a hard link to root's file, say) is locked, not rewritten.
    db = tmp_path / "history.db"
    run_lock_path(db, 1).write_text(ROOTS_FILE)
    with Store.open(db) as store:
        run = store.start_run("certify", 1, "digest")
        assert run == 1
        assert run_lock_path(db, 1).read_text() == ROOTS_FILE
        store.finish_run(run)


def test_a_fifo_planted_as_a_run_lock_is_refused(
    tmp_path: Path, policy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = run_lock_path(tmp_path / "history.db", 1)
    os.mkfifo(lock)
    code, _out, err = certify(capsys, tmp_path, policy)
    refused(code, err, lock)


def test_the_database_itself_planted_as_a_link_is_refused(
    tmp_path: Path, outside: Path, policy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An empty file is what SQLite would make a new database of: root's empty config, say.
    (outside / "empty.conf").write_bytes(b"")
    (tmp_path / "history.db").symlink_to(outside / "empty.conf")
    code, _out, err = certify(capsys, tmp_path, policy)
    refused(code, err, tmp_path / "history.db")
    untouched(outside, frozenset({"empty.conf"}))
    assert (outside / "empty.conf").read_bytes() == b""


def test_a_wal_file_planted_as_a_link_is_refused(
    tmp_path: Path, outside: Path, policy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Store.open(tmp_path / "history.db").close()
    wal = tmp_path / "history.db-wal"
    wal.symlink_to(outside / "shadow")
    code, _out, err = certify(capsys, tmp_path, policy)
    refused(code, err, wal)
    untouched(outside)


def test_the_pending_spool_planted_as_a_link_is_refused(
    tmp_path: Path,
    outside: Path,
    policy: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = tmp_path / "history.db"
    spool = pending_dir(db)
    monkeypatch.setenv("GPUREADY_DB_RETRY_S", "0.2")
    with write_locked(db):  # the run is spooled: written into <db>.pending/
        spool.symlink_to(outside, target_is_directory=True)
        code, _out, err = certify(capsys, tmp_path, policy)
    refused(code, err, spool)
    untouched(outside)


def test_a_pending_file_planted_as_a_link_is_left_alone(tmp_path: Path, outside: Path) -> None:
    db = tmp_path / "history.db"
    Store.open(db).close()
    pending_dir(db).mkdir()
    (pending_dir(db) / "run-1.json").symlink_to(outside / "shadow")
    with Store.open(db) as store:
        assert store.pending_files() == []
        assert store.import_pending() == []
    untouched(outside)


# ---------------------------------------------------------------- the report folder


@pytest.mark.parametrize("folder", ["certificates", "hosts"])
def test_a_report_sub_folder_planted_as_a_link_is_refused(
    tmp_path: Path,
    outside: Path,
    policy: Path,
    capsys: pytest.CaptureFixture[str],
    folder: str,
) -> None:
    rep = tmp_path / "rep"
    rep.mkdir()
    (rep / folder).symlink_to(outside, target_is_directory=True)
    code, _out, err = certify(capsys, tmp_path, policy, "--json-form", "summary")
    refused(code, err, rep / folder)
    untouched(outside)


def test_the_stale_rma_clean_up_never_deletes_through_a_planted_link(
    tmp_path: Path, outside: Path, policy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A file named like an RMA file of this host: the clean-up's target, were it followed.
    bait = rma_file_name(HOST, 0, "1650000000001")
    (outside / bait).write_text(ROOTS_FILE)
    rep = tmp_path / "rep"
    rep.mkdir()
    (rep / "rma").symlink_to(outside, target_is_directory=True)
    code, _out, err = certify(capsys, tmp_path, policy)
    refused(code, err, rep / "rma")
    untouched(outside, frozenset({bait}))
    assert (outside / bait).read_text() == ROOTS_FILE


def test_a_stale_rma_file_planted_as_a_link_is_refused_not_removed(
    tmp_path: Path, outside: Path, policy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rma = tmp_path / "rep" / "rma"
    rma.mkdir(parents=True)
    planted = rma / rma_file_name(HOST, 0, "1650000000001")
    planted.symlink_to(outside / "shadow")
    code, _out, err = certify(capsys, tmp_path, policy)
    refused(code, err, planted)
    assert planted.is_symlink()
    untouched(outside)


@pytest.mark.parametrize("name", ["report.json", "report.html", "junit.xml"])
def test_a_report_file_planted_as_a_link_is_refused(
    tmp_path: Path,
    outside: Path,
    policy: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
) -> None:
    rep = tmp_path / "rep"
    rep.mkdir()
    (rep / name).symlink_to(outside / "shadow")
    code, _out, err = certify(capsys, tmp_path, policy)
    refused(code, err, rep / name)
    assert (rep / name).is_symlink()
    untouched(outside)


def test_a_fifo_planted_as_a_report_file_is_refused(
    tmp_path: Path, policy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rep = tmp_path / "rep"
    rep.mkdir()
    os.mkfifo(rep / "report.json")
    code, _out, err = certify(capsys, tmp_path, policy)
    refused(code, err, rep / "report.json")


def test_a_folder_where_the_certificate_file_belongs_is_refused(
    tmp_path: Path, policy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "rep" / "certificates" / f"{HOST}.json"
    where.mkdir(parents=True)
    code, _out, err = certify(capsys, tmp_path, policy)
    refused(code, err, where)


def test_the_report_folder_itself_planted_as_a_link_is_refused(
    tmp_path: Path, outside: Path, policy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "rep").symlink_to(outside, target_is_directory=True)
    code, _out, err = certify(capsys, tmp_path, policy)
    refused(code, err, tmp_path / "rep")
    untouched(outside)


# ---------------------------------------------------------------- other files


def test_a_prometheus_file_planted_as_a_link_is_refused(
    tmp_path: Path, outside: Path, policy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = certify(capsys, tmp_path, policy)
    assert code == 0, err
    prom = tmp_path / "gpuready.prom"
    prom.symlink_to(outside / "shadow")
    code, _out, err = run_cli(
        capsys,
        "drift",
        "--simulate",
        SCENARIO,
        "--db",
        str(tmp_path / "history.db"),
        "--prom-file",
        str(prom),
    )
    refused(code, err, prom)
    assert prom.is_symlink()
    untouched(outside)


def test_the_folders_the_operator_named_may_be_links(
    tmp_path: Path, policy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # /var/lib/gpuready or the textfile folder linked to shared storage is the operator's
    # choice: their folders are taken as named; only what gpuready makes in them is never
    # reached through a link (the cases above).
    shared = tmp_path / "shared"
    (shared / "state").mkdir(parents=True)
    (shared / "textfiles").mkdir()
    (tmp_path / "state").symlink_to(shared / "state")
    (tmp_path / "textfiles").symlink_to(shared / "textfiles")
    db = tmp_path / "state" / "history.db"
    code, _out, err = run_cli(
        capsys, "certify", "--simulate", SCENARIO, "--burn", "0", "--policy", str(policy),
        "--db", str(db),
    )
    assert code == 0, err
    code, _out, err = run_cli(
        capsys, "drift", "--simulate", SCENARIO, "--db", str(db),
        "--prom-file", str(tmp_path / "textfiles" / "gpuready.prom"),
    )
    assert code == 0, err
    assert (shared / "state" / "history.db").is_file()
    assert (shared / "textfiles" / "gpuready.prom").is_file()
    assert "gpuready" in (shared / "textfiles" / "gpuready.prom").read_text()


@pytest.mark.parametrize("folder", ["runs", "runner"])
def test_a_provision_state_folder_planted_as_a_link_is_refused(
    tmp_path: Path, outside: Path, folder: str
) -> None:
    from validator.service.provision_service import ProvisionRequest, _state_dirs

    state = tmp_path / "state"
    state.mkdir()
    (state / folder).symlink_to(outside, target_is_directory=True)
    request = ProvisionRequest(inventories=(), state_dir=str(state))
    with pytest.raises(UnsafePathError, match=rf"{state / folder} is a symbolic link"):
        _state_dirs(request)
    untouched(outside)


# ---------------------------------------------------------------- the writer itself


def test_a_link_planted_in_the_temporary_name_s_place_is_not_written_through(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The attacker guessed the writer's first temporary name (host, pid and random part).
    names: Iterator[str] = iter(["00000000", "11111111"])
    monkeypatch.setattr(files.secrets, "token_hex", lambda _n: next(names))
    planted = tmp_path / f".report.json.{files.host_tag()}-{os.getpid()}-00000000.tmp"
    planted.symlink_to(outside / "shadow")
    files.write_atomic(tmp_path / "report.json", "{}\n")
    assert (tmp_path / "report.json").read_text() == "{}\n"
    assert planted.is_symlink()
    untouched(outside)


def test_a_link_in_a_folder_of_ours_is_refused_by_name(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "hosts").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePathError, match=r"rep/hosts is a symbolic link \(to .*outside\)"):
        files.write_atomic(tmp_path / "rep" / "hosts" / "a.json", "{}", start=tmp_path / "rep")
    untouched(outside)


def test_the_store_s_refusal_leaves_the_linked_database_unopened(
    tmp_path: Path, outside: Path
) -> None:
    real = outside / "other.db"
    sqlite3.connect(real).close()
    (tmp_path / "history.db").symlink_to(real)
    with pytest.raises(UnsafePathError):
        Store.open(tmp_path / "history.db")
    assert real.read_bytes() == b""


def _race(monkeypatch: pytest.MonkeyPatch, db: Path, victim: Path, *, put_back: bool) -> None:
    """Plant a link to ``victim`` as ``db`` once the link check has passed, just before
    SQLite opens it, as a racing attacker would; ``put_back``: the real file again after."""
    real_connect = sqlite3.connect
    hidden = db.with_name("hidden-real.db")

    def connect_raced(*args: object, **kwargs: object) -> sqlite3.Connection:
        os.rename(db, hidden)
        db.symlink_to(victim)
        try:
            return real_connect(*args, **kwargs)  # type: ignore[call-overload]
        finally:
            if put_back:
                db.unlink()
                os.rename(hidden, db)

    monkeypatch.setattr(sqlite3, "connect", connect_raced)


@pytest.mark.parametrize("put_back", [False, True], ids=["link-left", "link-taken-away"])
def test_a_database_swapped_for_a_link_while_sqlite_opens_it_is_refused(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch, put_back: bool
) -> None:
    db = tmp_path / "history.db"
    Store.open(db).close()  # a real history, made before the race
    victim = outside / "other.db"
    sqlite3.connect(victim).close()
    _race(monkeypatch, db, victim, put_back=put_back)
    with pytest.raises(UnsafePathError, match=r"history\.db") as caught:
        Store.open(db)
    assert "\n" not in str(caught.value)
    assert victim.read_bytes() == b""  # never written through the link


# ---------------------------------------------------------------- capture


def test_a_capture_file_planted_as_a_link_is_refused(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "hostname.txt").symlink_to(outside / "shadow")
    code, _out, err = run_cli(capsys, "capture", "--simulate", SCENARIO, str(bundle))
    refused(code, err, bundle / "hostname.txt")
    untouched(outside)


def test_a_capture_folder_planted_as_a_link_is_refused(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bundle").symlink_to(outside, target_is_directory=True)
    code, _out, err = run_cli(capsys, "capture", "--simulate", SCENARIO, str(tmp_path / "bundle"))
    refused(code, err, tmp_path / "bundle")
    untouched(outside)
