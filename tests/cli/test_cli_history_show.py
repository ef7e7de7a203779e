"""``gpuready history show RUN [HOST]`` and ``gpuready history certificate HOST``, as typed.

Runs are recorded by ``certify`` of simulated nodes into a real SQLite history, then read
back through the CLI: the figures shown are compared with the stored result, never with
numbers written here; the export must satisfy ``verify-cert`` and fail it once edited.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from tests.judge.test_judge_healthy import healthy_node, judge
from validator.certificate import issue_certificate
from validator.cli.main import main
from validator.model import NodeResult, Severity
from validator.store import Store

CAPPED = "one-gpu-power-capped"  # GPU 3 capped at 500 W: power.limit and burn.speed fail
HOST = "h100-node-01"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "history.db"
    code, _, _ = run(capsys, "certify", "--simulate", CAPPED, "--db", str(path), "--burn", "2s")
    assert code == 1
    return path


def stored(db: Path, run_id: int = 1, host: str = HOST) -> NodeResult:
    with Store.open(db, readonly=True) as store:
        result = store.result(run_id, host)
    assert result is not None
    return result


# ---------------------------------------------------------------- history show


def test_show_prints_each_finding_with_gpu_and_action_and_the_figures(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "history", "show", "1", "--db", str(db))
    assert (code, err) == (0, "")
    result = stored(db)
    lines = out.splitlines()
    assert lines[0].startswith("run 1  certify  started ")
    assert f"{HOST}  NOT_CERTIFIED" in out
    failed = [f for f in result.findings if f.severity is Severity.FAIL]
    assert failed
    for finding in failed:
        line = next(x for x in lines if f"  {finding.check}  GPU {finding.gpu_index}  " in x)
        assert line.lstrip().startswith("FAIL")
        assert "-> " in line  # what to do
    assert result.facts.burn is not None
    header = next(i for i, x in enumerate(lines) if x.split()[:2] == ["GPU", "TFLOPS"])
    for gpu in result.facts.burn.gpus:
        cells = lines[header + 1 + gpu.index].split()
        assert cells[:2] == [str(gpu.index), f"{gpu.tflops:,.1f}"]
    assert any(x.startswith("  interconnect: H2D ") for x in lines)


def test_show_json_holds_the_same_figures(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "history", "show", "1", HOST, "--db", str(db), "--json")
    assert code == 0
    data = json.loads(out)
    result = stored(db)
    (node,) = data["nodes"]
    assert (data["run"], node["hostname"], node["verdict"]) == (1, HOST, result.verdict.value)
    assert {(f["check"], f["gpu"], f["action"]) for f in node["findings"]} == {
        (f.check, f.gpu_index, f.action.value)
        for f in result.findings
        if f.severity is not Severity.PASS
    }
    assert result.facts.burn is not None
    assert result.facts.interconnect is not None
    by_gpu = {row["gpu"]: row for row in node["gpus"]}
    for gpu in result.facts.burn.gpus:
        assert by_gpu[gpu.index]["burn_tflops"] == gpu.tflops
        assert isinstance(by_gpu[gpu.index]["peak_power_w"], float)
        assert isinstance(by_gpu[gpu.index]["peak_temperature_c"], float)
    for copy in result.facts.interconnect.gpus:
        assert by_gpu[copy.index]["hbm_gb_s"] == copy.hbm.gb_s
    assert node["interconnect"]["all_reduce"]["busbw_gb_s"] > 0


def test_a_hostile_host_name_and_message_are_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = "gpu\x1b]0;owned\x07\n07"
    result = judge(healthy_node())
    findings = list(result.findings)
    findings[0] = dataclasses.replace(
        findings[0], severity=Severity.FAIL, message="bad\x1b[2J\rnews"
    )
    result = dataclasses.replace(result, hostname=evil, findings=tuple(findings))
    db = tmp_path / "h.db"
    with Store.open(db) as store:
        run_id = store.start_run("certify", 1, "p")
        store.record_result(run_id, result)
        store.finish_run(run_id)
    for extra in ((), ("--json",)):
        code, out, _ = run(capsys, "history", "show", str(run_id), "--db", str(db), *extra)
        assert code == 0
        assert "\x1b" not in out
        assert "\x07" not in out
        assert "\r" not in out
    code, out, _ = run(capsys, "history", "show", str(run_id), "--db", str(db))
    assert "bad" in out
    assert "news" in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["12"], "run 12 not found in {db}: `gpuready history` lists runs"),
        (
            ["1", "gpu07"],
            "run 1 has no result of gpu07 (it holds h100-node-01): "
            "`gpuready history gpu07` lists that host's runs",
        ),
        (["x1"], "RUN 'x1' is not a run number: `gpuready history` lists runs (the RUN column)"),
        (["0"], "RUN '0' is not a run number"),
    ],
)
def test_show_of_what_is_not_there_is_one_line_with_the_fix(
    db: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    code, out, err = run(capsys, "history", "show", *args, "--db", str(db))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith("gpuready: error: " + expected.format(db=db)), err


def test_show_without_a_history_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "history", "show", "3", "--db", str(tmp_path / "none.db"))
    assert code == 2
    assert err.startswith("gpuready: error: run 3 not found: no history yet at ")


def test_the_history_options_may_come_before_the_subcommand(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, after, err = run(capsys, "history", "show", "1", "--db", str(db))
    assert (code, err) == (0, "")
    code, before, err = run(capsys, "history", "--db", str(db), "show", "1")
    assert (code, err) == (0, "")
    assert before == after
    code, both, _ = run(capsys, "history", f"--db={db}", "show", "--json", "1", HOST)
    assert code == 0
    assert json.loads(both)
    # An option of the listing's that the subcommand lacks is named, not ignored.
    code, _, err = run(capsys, "history", "--limit", "3", "show", "1", "--db", str(db))
    assert code == 2
    assert "--limit" in err


def test_the_listing_still_takes_a_host_and_a_host_named_show(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "history", HOST, "--db", str(db))
    assert code == 0
    assert HOST in out
    code, out, err = run(capsys, "history", "--db", str(db), "--", "show")
    assert (code, out) == (0, "")
    assert "no runs recorded for show" in err
    code, out, _ = run(capsys, "history", "show", "--help")
    assert out.startswith("Usage: gpuready history show [OPTIONS] RUN [HOST]")


# ---------------------------------------------------------------- history certificate


@pytest.fixture
def signed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """A history with two certificates of HOST, signed with an HMAC key; the key."""
    db, key = tmp_path / "history.db", tmp_path / "sign.key"
    key.write_bytes(os.urandom(32).hex().encode() + b"\n")
    for _ in range(2):
        code, _, _ = run(
            capsys,
            "certify",
            "--simulate",
            "healthy-8x-h100-sxm",
            "--db",
            str(db),
            "--burn",
            "2s",
            "--sign-key",
            str(key),
        )
        assert code == 0
    return db, key


def test_an_exported_certificate_passes_verify_cert_and_fails_once_edited(
    signed: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, key = signed
    out_file = tmp_path / "cert.json"
    code, out, err = run(
        capsys, "history", "certificate", HOST, "--db", str(db), "-o", str(out_file)
    )
    assert (code, out) == (0, "")
    assert "(run 2)" in err
    code, out, _ = run(capsys, "verify-cert", str(out_file), "--sign-key", str(key))
    assert code == 0
    assert "is intact" in out
    with Store.open(db, readonly=True) as store:
        newest = store.latest_certificate(HOST)
    assert newest is not None
    from validator.certificate import certificate_text

    assert out_file.read_text(encoding="utf-8") == certificate_text(newest)
    data = bytearray(out_file.read_bytes())
    at = data.index(b'"driver_version": "') + len(b'"driver_version": "')
    data[at] = ord("4") if data[at] != ord("4") else ord("3")
    edited = tmp_path / "edited.json"
    edited.write_bytes(bytes(data))
    code, _, _ = run(capsys, "verify-cert", str(edited), "--sign-key", str(key))
    assert code == 1


def test_stdout_and_run_pick_the_certificate(
    signed: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = signed
    _, newest, _ = run(capsys, "history", "certificate", HOST, "--db", str(db))
    code, first, err = run(capsys, "history", "certificate", HOST, "--db", str(db), "--run", "1")
    assert code == 0
    assert err == (
        f"gpuready: note: this certificate of {HOST} was replaced by run 2: it is exported as "
        "stored, and `gpuready verify-cert FILE --db HISTORY` reports it\n"
    )
    assert first != newest
    assert json.loads(first)["hostname"] == json.loads(newest)["hostname"] == HOST


def test_the_file_is_not_overwritten_without_force_nor_written_through_a_link(
    signed: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = signed
    target = tmp_path / "cert.json"
    target.write_text("mine\n")
    args = ["history", "certificate", HOST, "--db", str(db), "-o", str(target)]
    code, _, err = run(capsys, *args)
    assert code == 2
    assert (
        err
        == f"gpuready: error: {target} exists: add --force to replace it, or give another -o FILE\n"
    )
    assert target.read_text() == "mine\n"
    code, _, _ = run(capsys, *args, "--force")
    assert code == 0
    assert target.read_text().startswith("{")
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    link = tmp_path / "link.json"
    link.symlink_to(victim)
    code, _, err = run(
        capsys, "history", "certificate", HOST, "--db", str(db), "-o", str(link), "--force"
    )
    assert code == 2
    assert "is a symbolic link" in err
    assert victim.read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["cert.json", "victim", "link.json", "history.db", "sign.key", *_db_sidecars(tmp_path)]
    )


def _db_sidecars(folder: Path) -> list[str]:
    return [
        p.name
        for p in folder.iterdir()
        if p.name.startswith("history.db") and p.name != "history.db"
    ]


def test_no_certificate_is_one_line_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.db"
    result = judge(healthy_node())
    with Store.open(db) as store:
        run_id = store.start_run("certify", 1, "p")
        store.record_result(run_id, result, issue_certificate(result))
        store.finish_run(run_id)
    code, out, err = run(capsys, "history", "certificate", "gpu99", "--db", str(db))
    assert (code, out) == (2, "")
    assert err == (
        f"gpuready: error: no certificate of gpu99 in {db}: `gpuready history gpu99` lists its "
        "runs and what became of each certificate\n"
    )
    code, _, err = run(
        capsys, "history", "certificate", result.hostname, "--db", str(db), "--run", "7"
    )
    assert code == 2
    assert f"issued by run 7 in {db}" in err
