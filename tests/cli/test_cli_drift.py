"""``gpuready drift`` end to end on simulated nodes: store, exit codes, outputs, Slurm."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest
from prometheus_client import parser

from tests.drift.test_drift import ISSUED, POLICY, certified_facts
from validator.certificate import issue_certificate
from validator.cli.drift import drift
from validator.cli.main import cli, main
from validator.judge import judge_node
from validator.store import Store

# The lead registers the command in main.py; until then the tests add it themselves.
if "drift" not in cli.commands:
    cli.add_command(drift)

HOST = "h100-node-01"  # the hostname every built-in H100 scenario reports


def certify_into(db: Path, *hosts: str) -> None:
    """Record a certificate for each host, as a certify run would."""
    result = judge_node(certified_facts(), POLICY)
    with Store.open(db) as store:
        run = store.start_run("certify", len(hosts), result.policy_digest)
        for host in hosts:
            named = dataclasses.replace(
                result, hostname=host, facts=dataclasses.replace(result.facts, hostname=host)
            )
            store.record_result(run, named, issue_certificate(named, now=ISSUED))
        store.finish_run(run)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["drift", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "history.db"


def test_never_certified_exits_3(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db))
    assert code == 3
    assert out == f"{HOST}  NEVER CERTIFIED  never certified: run gpuready certify first\n"


def test_no_drift_exits_0_and_is_recorded(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    certify_into(db, HOST)
    code, out, _ = run(capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db))
    assert code == 0
    assert out.startswith(f"{HOST}  NO DRIFT  no drift since the certificate of 2026-01-01")
    with Store.open(db, readonly=True) as store:
        rows = store.history(HOST)
    assert [(r.kind, r.status, r.verdict) for r in rows] == [
        ("drift", "complete", "CERTIFIED"),
        ("certify", "complete", "CERTIFIED"),
    ]


def test_power_capped_node_drifts(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    certify_into(db, HOST)
    code, out, _ = run(capsys, "--simulate", "one-gpu-power-capped", "--db", str(db))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].endswith(
        "DRIFT  drift since the certificate of 2026-01-01T12:00:00+00:00: power_limit (GPU 3)"
    )
    assert [line.split()[:3] for line in lines[1:]] == [["FAIL", "drift.power_limit", "gpu3"]]
    with Store.open(db, readonly=True) as store:
        latest = store.history(HOST)[0]
    assert (latest.kind, latest.verdict, latest.failed) == ("drift", "NOT_CERTIFIED", 1)


def test_nhc_mode_prints_one_line(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    certify_into(db, HOST)
    code, out, _ = run(capsys, "--simulate", "row-remap-pending", "--db", str(db), "--nhc")
    assert code == 1
    assert out.count("\n") == 1
    assert out.startswith("gpuready: drift since the certificate of ")
    # The remap pending on GPU 2 shows up as the counters, the flag and the Xid 63 it logged.
    assert "row_remap (GPU 2)" in out
    code, out, _ = run(capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--nhc")
    assert (code, out.startswith("gpuready: ok: no drift")) == (0, True)


def test_json_and_prometheus_outputs(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, HOST)
    prom = tmp_path / "gpuready.prom"
    code, out, _ = run(
        capsys,
        "--simulate",
        "one-gpu-power-capped",
        "--db",
        str(db),
        "--json",
        "--prom-file",
        str(prom),
    )
    assert code == 1
    report = json.loads(out)
    (node,) = report["nodes"]
    assert node["verdict"] == "NOT_CERTIFIED"
    failed = [(f["check"], f["gpu_index"]) for f in node["findings"] if f["severity"] == "FAIL"]
    assert failed == [("drift.power_limit", 3)]
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parser.text_string_to_metric_families(prom.read_text())
        for s in family.samples
    }
    assert samples[("gpuready_drift_detected", (("host", HOST),))] == 1.0
    assert samples[("gpuready_certified", (("host", HOST),))] == 0.0  # deprecated, kept a release
    assert (
        samples[("gpuready_drift_findings", (("check", "drift.power_limit"), ("host", HOST)))] == 1
    )
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644


def fake_scontrol(bin_dir: Path, log: Path, reason: str | None) -> None:
    """A scontrol on PATH that logs each argument list (one JSON list a line)."""
    reason_line = f"   Reason={reason} [root@2026-01-02T08:00:01]\n" if reason else ""
    state = "IDLE+DRAIN" if reason else "IDLE"
    script = bin_dir / "scontrol"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"with open({str(log)!r}, 'a') as f: f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "if sys.argv[1:2] == ['show']:\n"
        f"    print('NodeName=' + sys.argv[3] + ' Arch=x86_64')\n"
        f"    print('   State={state} ThreadsPerCore=2')\n"
        f"    sys.stdout.write({reason_line!r})\n"
    )
    script.chmod(0o755)


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_slurm_drain_then_resume(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, HOST)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "scontrol.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    fake_scontrol(bin_dir, log, None)
    code, _, err = run(
        capsys, "--simulate", "one-gpu-power-capped", "--db", str(db), "--slurm-drain", "--nhc"
    )
    assert code == 1
    drained = calls(log)
    assert drained[0] == ["show", "node", HOST]
    assert drained[1][:3] == ["update", f"NodeName={HOST}", "State=DRAIN"]
    assert drained[1][3].startswith("Reason=gpuready: drift since the certificate of ")
    assert drained[1][3].endswith("power_limit (GPU 3)")
    assert f"gpuready: slurm: {HOST}: drained" in err

    log.unlink()
    fake_scontrol(bin_dir, log, "gpuready: drift: power_limit (GPU 3)")
    code, _, err = run(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--slurm-drain"
    )
    assert code == 0
    assert calls(log) == [["show", "node", HOST], ["update", f"NodeName={HOST}", "State=RESUME"]]

    log.unlink()
    fake_scontrol(bin_dir, log, "replacing a PSU")
    code, _, err = run(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--slurm-drain"
    )
    assert code == 0
    assert calls(log) == [["show", "node", HOST]]  # someone else's drain: left alone
    assert "left_alone" in err


def write_inventory(tmp_path: Path, hosts: dict[str, str]) -> Path:
    lines = ["[gpu]"]
    lines += [f"{name} gpuready_simulate={scenario}" for name, scenario in hosts.items()]
    path = tmp_path / "hosts.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fleet_drift_finds_exactly_the_changed_host(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, "gpu01", "gpu02", "gpu03")
    # gpu02's simulated facts changed since certification: someone capped GPU 3.
    inventory = write_inventory(
        tmp_path,
        {
            "gpu01": "healthy-8x-h100-sxm",
            "gpu02": "one-gpu-power-capped",
            "gpu03": "healthy-8x-h100-sxm",
            "gpu04": "healthy-8x-h100-sxm",  # never certified
        },
    )
    prom = tmp_path / "fleet.prom"
    code, out, _ = run(
        capsys,
        "-i",
        str(inventory),
        "--transport",
        "local",
        "--db",
        str(db),
        "--prom-file",
        str(prom),
        "--json",
    )
    assert code == 1
    verdicts = {n["hostname"]: n["verdict"] for n in json.loads(out)["nodes"]}
    assert verdicts == {
        "gpu01": "CERTIFIED",
        "gpu02": "NOT_CERTIFIED",
        "gpu03": "CERTIFIED",
        "gpu04": "UNKNOWN",
    }
    assert 'gpuready_drift_status{host="gpu04",status="never_certified"} 1' in prom.read_text()
    with Store.open(db, readonly=True) as store:
        rows = [r for r in store.history() if r.kind == "drift"]
    assert sorted((r.hostname, r.verdict, r.status) for r in rows) == [
        ("gpu01", "CERTIFIED", "complete"),
        ("gpu02", "NOT_CERTIFIED", "complete"),
        ("gpu03", "CERTIFIED", "complete"),
        ("gpu04", "UNKNOWN", "complete"),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--transport", "ssh"], "--transport ssh needs an inventory (-i)"),
        (["--limit", "gpu01"], "--limit needs an inventory (-i)"),
        (["--json", "--nhc"], "--json and --nhc both print on stdout: choose one"),
        (["--burn", "soon"], "soon"),
        (["--simulate", "no-such-scenario"], "no-such-scenario"),
    ],
)
def test_bad_usage_exits_2(
    args: list[str], message: str, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *args, "--db", str(db))
    assert code == 2
    assert out == ""
    assert message in err


def test_foreign_database_is_one_line_and_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = tmp_path / "notes.db"
    foreign.write_bytes(b"these are my notes, not a database\n" * 10)
    before = foreign.read_bytes()
    code, out, err = run(capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(foreign))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("gpuready: error: ")
    assert foreign.read_bytes() == before


def test_bad_policy_exits_2(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yml"
    policy.write_text("thresholds:\n  drift_burn_drop: 2\n")
    code, _, err = run(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--policy", str(policy)
    )
    assert code == 2
    assert "'thresholds.drift_burn_drop' must be a number above 0 up to 1, got 2" in err


def test_certificate_file_instead_of_the_store(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from validator.certificate import certificate_to_json, sign

    cert = issue_certificate(judge_node(certified_facts(), POLICY), now=ISSUED)
    path = tmp_path / "cert.json"
    path.write_text(certificate_to_json(cert))
    code, out, _ = run(
        capsys, "--simulate", "one-gpu-power-capped", "--db", str(db), "--certificate", str(path)
    )
    assert code == 1
    assert "power_limit (GPU 3)" in out.splitlines()[0]

    # An edited certificate is refused, not compared with.
    path.write_text(certificate_to_json(cert).replace('"550.90.07"', '"560.35.03"', 1))
    code, out, err = run(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--certificate", str(path)
    )
    assert (code, out) == (2, "")
    assert "was edited after issue" in err

    # A signed one needs its key.
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    path.write_text(certificate_to_json(sign(cert, b"s3cret")))
    code, _, err = run(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--certificate", str(path), "--db", str(db)
    )
    assert code == 2
    assert "give the key file with --sign-key" in err
    code, out, _ = run(
        capsys,
        "--simulate",
        "healthy-8x-h100-sxm",
        "--certificate",
        str(path),
        "--sign-key",
        str(key),
        "--db",
        str(db),
    )
    assert code == 0
    assert "NO DRIFT" in out


@pytest.mark.parametrize(
    "module",
    sorted(
        str(path.relative_to(Path(__file__).resolve().parent.parent.parent))
        for path in (Path(__file__).resolve().parent.parent.parent / "validator" / "cli").glob(
            "*.py"
        )
    ),
)
def test_the_commands_stay_thin(module: str) -> None:
    # parse options -> request -> service -> render -> exit: no function past 40 lines.
    source = (Path(__file__).resolve().parent.parent.parent / module).read_text()
    long = [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 40
    ]
    assert long == []


def test_interrupted_fleet_exits_130_and_is_recorded_so(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from validator.remote import fanout

    certify_into(db, "gpu01")
    inventory = write_inventory(tmp_path, {"gpu01": "healthy-8x-h100-sxm"})
    real = fanout.run_fanout

    def stopped(*args: object, **kwargs: object) -> fanout.FanoutResult:
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        return dataclasses.replace(result, interrupted=True)

    monkeypatch.setattr(fanout, "run_fanout", stopped)
    code, out, _ = run(capsys, "-i", str(inventory), "--transport", "local", "--db", str(db))
    assert code == 130
    assert out.startswith("gpu01  NO DRIFT")
    with Store.open(db, readonly=True) as store:
        (row, _) = store.history("gpu01")
    assert (row.kind, row.status) == ("drift", "interrupted")
