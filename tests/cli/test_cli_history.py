"""``gpuready history`` and ``verify-cert`` end to end: output, exit codes, one-line errors."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.judge.test_judge_healthy import healthy_node, judge, with_gpu
from tests.store.test_store_migration import build_v1
from validator.certificate import certificate_to_json, issue_certificate, sign
from validator.cli.history import history, render_history
from validator.cli.main import cli, main
from validator.cli.verify_cert import verify_cert
from validator.error_tree import ExitCode
from validator.model import NodeResult
from validator.store import Store

# The lead registers the commands in validator/cli/main.py; until then, here.
for command in (history, verify_cert):
    if command.name not in cli.commands:
        cli.add_command(command)

ISSUED = datetime.datetime(2025, 3, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
KEY = b"site-secret-for-tests"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def result(hostname: str, *, capped: bool = False) -> NodeResult:
    facts = healthy_node()
    if capped:
        facts = with_gpu(facts, 6, power_limit_enforced_w=450.0)
    return dataclasses.replace(judge(facts), hostname=hostname)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "history.db"
    with Store.open(path) as store:
        first = store.start_run("certify", 2, "p")
        store.record_result(first, result("gpu07"), issue_certificate(result("gpu07")))
        store.record_result(first, result("gpu08", capped=True))
        store.finish_run(first)
        second = store.start_run("drift", 1, "p")
        store.record_result(second, result("gpu07", capped=True))
    return path


# ---------------------------------------------------------------- history


def test_history_table(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, err = run(capsys, "history", "--db", str(db))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == [
        "RUN",
        "KIND",
        "STARTED",
        "STATUS",
        "HOST",
        "VERDICT",
        "FAILED",
        "SOURCE",
        "CERTIFICATE",
        "SUMMARY",
    ]
    cells = [line.split(maxsplit=9) for line in lines[1:]]
    assert [(c[0], c[1], c[3], c[4], c[5], c[6]) for c in cells] == [
        ("2", "drift", "incomplete", "gpu07", "NOT_CERTIFIED", "1"),
        ("1", "certify", "complete", "gpu07", "CERTIFIED", "0"),
        ("1", "certify", "complete", "gpu08", "NOT_CERTIFIED", "1"),
    ]
    assert cells[1][9] == result("gpu07").summary
    # columns line up: every host starts where the header's HOST does
    column = lines[0].index("HOST")
    assert {line[column : column + 5] for line in lines[1:]} == {"gpu07", "gpu08"}


def test_history_of_one_host_and_limit(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, _ = run(capsys, "history", "gpu08", "--db", str(db))
    assert code == 0
    assert [line.split()[4] for line in out.splitlines()[1:]] == ["gpu08"]
    code, out, _ = run(capsys, "history", "--db", str(db), "--limit", "1")
    assert code == 0
    assert len(out.splitlines()) == 2
    assert out.splitlines()[1].split()[:2] == ["2", "drift"]


def test_history_json(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, err = run(capsys, "history", "gpu07", "--db", str(db), "--json")
    assert (code, err) == (0, "")
    rows = json.loads(out)
    assert isinstance(rows, list)
    assert [(r["run_id"], r["kind"], r["status"], r["verdict"], r["failed"]) for r in rows] == [
        (2, "drift", "incomplete", "NOT_CERTIFIED", 1),
        (1, "certify", "complete", "CERTIFIED", 0),
    ]
    assert rows[0]["finished_at"] is None
    assert rows[1]["finished_at"] is not None
    assert set(rows[0]) == {
        "run_id",
        "kind",
        "started_at",
        "finished_at",
        "status",
        "hostname",
        "verdict",
        "summary",
        "failed",
        "unknown",
        "recorded_at",
        "provenance",
        "certificate",
        "certificate_run",
        "certificate_changed_at",
    }


def test_history_without_a_database_creates_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "state" / "history.db"
    code, out, err = run(capsys, "history", "--db", str(path))
    assert (code, out) == (0, "")
    assert err == f"no history yet at {path}\n"
    code, out, err = run(capsys, "history", "--db", str(path), "--json")
    assert (code, out, err) == (0, "[]\n", "")
    assert not (tmp_path / "state").exists()


def test_history_default_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    code, _, err = run(capsys, "history")
    assert code == 0
    assert err == f"no history yet at {tmp_path / 'gpuready' / 'history.db'}\n"
    with Store.open(tmp_path / "gpuready" / "history.db") as store:
        store.start_run("certify", 3, "p")
    code, out, _ = run(capsys, "history")
    assert code == 0
    assert out.splitlines()[1].split() == [
        "1",
        "certify",
        out.splitlines()[1].split()[2],
        "incomplete",
        "-",
        "-",
        "-",
        "-",
        "-",
        "(no",
        "host",
        "recorded)",
    ]


def test_history_of_unknown_host(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, err = run(capsys, "history", "gpu99", "--db", str(db))
    assert (code, out) == (0, "")
    assert err == f"no runs recorded for gpu99 in {db}\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a database at all\n", "is not a gpuready history database (not SQLite)"),
        (b"SQLite format 3\x00" + b"\x00" * 200, "is damaged"),
    ],
)
def test_history_bad_file_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "history.db"
    path.write_bytes(content)
    code, out, err = run(capsys, "history", "--db", str(path))
    assert code == ExitCode.BAD_INPUT
    assert out == ""
    assert err.startswith("gpuready: error: ")
    assert message in err
    assert err.count("\n") == 1
    assert path.read_bytes() == content


def test_history_newer_database(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    import sqlite3

    connection = sqlite3.connect(db)
    connection.execute("PRAGMA user_version = 7")
    connection.commit()
    connection.close()
    code, _, err = run(capsys, "history", "--db", str(db))
    assert code == ExitCode.BAD_INPUT
    assert "was written by a newer gpuready (schema 7" in err
    assert err.count("\n") == 1


def test_history_limit_must_be_positive(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, _, err = run(capsys, "history", "--db", str(db), "--limit", "0")
    assert code == ExitCode.BAD_INPUT
    assert "--limit" in err


def test_history_prune(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    with Store.open(db) as store:  # gpu07 certified again: run 1 no longer holds its latest
        third = store.start_run("certify", 1, "p")
        tomorrow = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
        later = issue_certificate(result("gpu07"), now=tomorrow)
        store.record_result(third, result("gpu07"), later)
        store.finish_run(third)
    code, out, err = run(
        capsys, "history", "--db", str(db), "--prune", "--keep-runs", "1", "--dry-run"
    )
    assert (code, err) == (0, "")
    # run 2 is still running (its process is this one): it stays
    assert out == f"would remove 1 run (2 results, 1 certificates) from {db}\nruns: 1\n"
    code, out, err = run(capsys, "history", "--db", str(db), "--prune", "--keep-runs", "1")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"removed 1 run (2 results, 1 certificates) from {db}",
        "runs: 1",
        "the file keeps its size: SQLite reuses the freed pages for new runs "
        "(--vacuum gives them back)",
    ]
    code, out, _ = run(capsys, "history", "--db", str(db), "--json")
    assert [row["run_id"] for row in json.loads(out)] == [third, 2]
    code, out, _ = run(capsys, "history", "--db", str(db), "--prune", "--keep-days", "1")
    assert (code, out) == (0, f"removed 0 runs (0 results, 0 certificates) from {db}\n")


def test_history_prune_vacuum_gives_the_space_back(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "history.db"
    with Store.open(path) as store:
        for i in range(40):
            run_id = store.start_run("certify", 1, "p")
            store.record_result(run_id, result(f"gpu{i:02d}"))
            store.finish_run(run_id)
    grown = _bytes(path)
    code, out, err = run(
        capsys, "history", "--db", str(path), "--prune", "--keep-runs", "2", "--vacuum"
    )
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"removed 38 runs (38 results, 0 certificates) from {path}"
    assert lines[-1].startswith(f"compacted {path}: ")
    assert _bytes(path) < grown / 4
    with Store.open(path, readonly=True) as store:
        assert [row.hostname for row in store.history(None, limit=10)] == ["gpu39", "gpu38"]
    # A dry run removes nothing, so compacts nothing.
    code, out, _ = run(
        capsys, "history", "--db", str(path), "--prune", "--keep-runs", "1", "--dry-run",
        "--vacuum",
    )  # fmt: skip
    assert code == 0
    assert "compacted" not in out


def _bytes(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def test_history_prune_keeps_the_runs_holding_latest_certificates(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    with Store.open(db) as store:
        store.finish_run(2)
    code, out, _ = run(capsys, "history", "--db", str(db), "--prune", "--keep-runs", "1")
    assert code == 0
    assert out.splitlines() == [
        f"removed 0 runs (0 results, 0 certificates) from {db}",
        "kept 1 older runs holding the latest certificate of a host (drift's baseline): 1",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prune"], "--prune needs a retention rule: give --keep-days N, --keep-runs N or both"),
        (["--prune", "--keep-days", "0"], "--keep-days '0' is not a whole number from 1 to 36,500"),
        (["--prune", "--keep-days", "1.5"], "--keep-days '1.5' is not a whole number"),
        (["--prune", "--keep-runs", "-3"], "--keep-runs '-3' is not a whole number from 1 to"),
        (["--prune", "--keep-runs", "lots"], "give e.g. --keep-runs 1000"),
        (["--keep-days", "30"], "--keep-days, --keep-runs, --dry-run and --vacuum go with"),
        (["--vacuum"], "go with --prune: add --prune, or drop them"),
        (["--dry-run"], "go with --prune: add --prune, or drop them"),
        (["--prune", "--keep-runs", "1", "gpu07"], "--prune applies to the whole history"),
        (["--prune", "--keep-runs", "1", "--json"], "drop HOST and --json"),
    ],
)
def test_history_prune_bad_values_are_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], db: Path, args: list[str], message: str
) -> None:
    before = db.read_bytes()
    code, out, err = run(capsys, "history", "--db", str(db), *args)
    assert code == ExitCode.BAD_INPUT
    assert out == ""
    assert message in err
    assert err.count("\n") == 1
    assert db.read_bytes() == before


def test_history_prune_without_a_database_creates_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "state" / "history.db"
    code, out, err = run(capsys, "history", "--db", str(path), "--prune", "--keep-days", "9")
    assert (code, out, err) == (0, f"no history yet at {path}: nothing to prune\n", "")
    assert not (tmp_path / "state").exists()


def test_history_summary_is_plain_text_on_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "history.db"
    summary = "drift [bold]since[/bold] :smile: " + "power_limit (GPU 5,6), " * 12
    with Store.open(path) as store:
        run_id = store.start_run("drift", 1, "p")
        store.record_result(run_id, dataclasses.replace(result("gpu07"), summary=summary))
    code, out, _ = run(capsys, "history", "--db", str(path))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[1].split(maxsplit=9)[9] == summary.strip()
    assert "\x1b" not in out


def test_render_history_empty_summary_is_not_padded() -> None:
    assert render_history([]) == (
        "RUN  KIND  STARTED  STATUS  HOST  VERDICT  FAILED  SOURCE  CERTIFICATE  SUMMARY\n"
    )


# ---------------------------------------------------------------- verify-cert


def write_cert(tmp_path: Path, *, key: bytes | None = None) -> Path:
    cert = issue_certificate(result("gpu07"), now=ISSUED)
    if key is not None:
        cert = sign(cert, key)
    path = tmp_path / "gpu07.cert.json"
    path.write_text(certificate_to_json(cert))
    return path


def write_key(tmp_path: Path, name: str, key: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(key + b"\n")
    return path


def test_verify_unsigned(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "verify-cert", str(write_cert(tmp_path)))
    assert (code, err) == (0, "")
    assert out == (
        "certificate of gpu07 issued 2025-03-01T12:00:00+00:00 is intact: "
        "digest matches; unsigned: proves nothing about who wrote it\n"
    )


def test_verify_signed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cert = write_cert(tmp_path, key=KEY)
    key = write_key(tmp_path, "site.key", KEY)
    code, out, err = run(capsys, "verify-cert", str(cert), "--sign-key", str(key))
    assert (code, err) == (0, "")
    assert out == (
        "certificate of gpu07 issued 2025-03-01T12:00:00+00:00 is intact: "
        "HMAC matches the shared key: anyone holding that key could have written it\n"
    )


def _edit_number(path: Path) -> None:
    text = path.read_text()
    assert '"memory_total_mib": 81559' in text
    path.write_text(text.replace('"memory_total_mib": 81559', '"memory_total_mib": 81560', 1))


def _edit_serial(path: Path) -> None:
    data = json.loads(path.read_text())
    data["gpus"][4]["serial"] = "1652323009999"
    path.write_text(json.dumps(data, indent=2))


@pytest.mark.parametrize(
    ("signed", "edit", "with_key", "message", "expected"),
    [
        # A certificate read whole whose seal does not hold: not verified, exit 1.
        (False, _edit_number, None, "was edited after issue", ExitCode.NOT_CERTIFIED),
        (False, _edit_serial, None, "was edited after issue", ExitCode.NOT_CERTIFIED),
        (True, _edit_number, "site.key", "was edited after issue", ExitCode.NOT_CERTIFIED),
        (True, None, "other.key", "signature that does not match the key", ExitCode.NOT_CERTIFIED),
        (False, None, "site.key", "is not signed, but a key was given", ExitCode.NOT_CERTIFIED),
        # What the command needs and did not get: bad input, exit 2.
        (True, None, None, "is signed: give the key file with --sign-key", ExitCode.BAD_INPUT),
        (True, None, "missing.key", "does not exist", ExitCode.BAD_INPUT),
        (True, None, "empty.key", "is empty", ExitCode.BAD_INPUT),
    ],
)
def test_verify_failures_are_one_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    signed: bool,
    edit: Callable[[Path], None] | None,
    with_key: str | None,
    message: str,
    expected: ExitCode,
) -> None:
    cert = write_cert(tmp_path, key=KEY if signed else None)
    if edit is not None:
        edit(cert)
    write_key(tmp_path, "site.key", KEY)
    write_key(tmp_path, "other.key", b"another-site-secret")
    (tmp_path / "empty.key").write_bytes(b"")
    args = ["verify-cert", str(cert)]
    if with_key is not None:
        args += ["--sign-key", str(tmp_path / with_key)]
    code, out, err = run(capsys, *args)
    assert code == expected
    assert out == ""
    assert err.startswith("gpuready: error: ")
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        (b"{\n  broken", "not a certificate: invalid JSON at line 2"),
        (b'{"hostname": "gpu07"}', "lacks the field"),
        (b"\xff\xfe binary", "not UTF-8 text"),
    ],
)
def test_verify_bad_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "cert.json"
    if content is not None:
        path.write_bytes(content)
    code, out, err = run(capsys, "verify-cert", str(path))
    assert code == ExitCode.BAD_INPUT
    assert out == ""
    assert message in err
    assert str(path) in err
    assert err.count("\n") == 1


def test_history_prune_upgrades_a_schema_1_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    old = build_v1(tmp_path / "h.db")
    code, out, err = run(capsys, "history", "--db", str(old.path), "--prune", "--keep-runs", "1")
    assert (code, err) == (0, "")
    # runs 1 and 3 hold the latest certificates of gpu-a and gpu-b; run 4 still runs
    assert out.splitlines() == [
        f"removed 1 run (1 results, 0 certificates) from {old.path}",
        "runs: 2",
        "kept 2 older runs holding the latest certificate of a host (drift's baseline): 1, 3",
        "the file keeps its size: SQLite reuses the freed pages for new runs "
        "(--vacuum gives them back)",
    ]
    with Store.open(old.path, readonly=True) as store:
        assert [row.run_id for row in store.history()] == [4, 3, 1, 1]
