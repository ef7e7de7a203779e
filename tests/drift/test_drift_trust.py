"""Drift trusts no baseline unchecked: stored certificates are verified before use.

A certificate in the history database can be edited by anyone who can write the
file (sqlite3 is enough). Each case below edits one the way a person would (the
JSON text in the ``certificates`` row), then runs ``gpuready drift`` as a user
would, and checks that the node is not reported as NO DRIFT, that the finding
names the certificate and what failed, and that the exit code is 1 (drift: not
trusted), never 0, 3 or 70.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import parser

from tests.cli.test_cli_drift import write_inventory
from tests.drift.test_drift import ISSUED, POLICY, baseline, certified_facts, quick_facts
from tests.hostile.data_files import substituted
from validator import fields
from validator.certificate import (
    CERTIFICATE_SCHEMA_VERSION,
    Certificate,
    CertificateError,
    certificate_to_json,
    issue_certificate,
    sign,
    verify_baseline,
)
from validator.cli.main import main
from validator.drift import UntrustedBaseline, drift_node
from validator.error_tree import ExitCode
from validator.judge import judge_node
from validator.model import DriftCheck, DriftState, Severity, Verdict, drift_state
from validator.service.drift_service import DriftRequest, run_drift
from validator.store import Store, pack, unpack

HOST = "h100-node-01"  # the hostname every built-in H100 scenario reports
KEY = b"s3cret-drift-key"
LATER = ISSUED + datetime.timedelta(days=30)


# ------------------------------------------------------------------ helpers


def certify_into(
    db: Path, *hosts: str, key: bytes | None = None, now: datetime.datetime = ISSUED
) -> None:
    """Record a certificate for each host, as ``certify [--sign-key]`` would."""
    result = judge_node(certified_facts(), POLICY)
    with Store.open(db) as store:
        run = store.start_run("certify", len(hosts), result.policy_digest)
        for host in hosts:
            named = dataclasses.replace(
                result, hostname=host, facts=dataclasses.replace(result.facts, hostname=host)
            )
            cert = issue_certificate(named, now=now)
            store.record_result(run, named, sign(cert, key) if key is not None else cert)
        store.finish_run(run)


def edit_stored(db: Path, host: str, change: Callable[[str], str], *, newest: bool = True) -> None:
    """Rewrite the stored JSON of a host's certificate with sqlite3, as an intruder would."""
    order = "DESC" if newest else "ASC"
    with sqlite3.connect(db) as raw:
        row_id, text = raw.execute(
            "SELECT id, json_packed FROM certificates WHERE hostname = ?"  # noqa: S608 - a constant
            f" ORDER BY id {order} LIMIT 1",
            (host,),
        ).fetchone()
        raw.execute(
            "UPDATE certificates SET json_packed = ? WHERE id = ?",
            (pack(change(unpack(text))), row_id),
        )
    raw.close()


def gpu_power(index: int, watts: float) -> Callable[[str], str]:
    """An edit that sets one GPU's enforced power limit in the certificate's JSON."""

    def change(text: str) -> str:
        data = json.loads(text)
        data["gpus"][index]["power_limit_enforced_w"] = watts
        return json.dumps(data, indent=2, sort_keys=True)

    return change


def put_first(key: str, value: object) -> Callable[[str], str]:
    """An edit that puts ``"key": value,`` first in the object: the key is given twice."""

    def change(text: str) -> str:
        assert text.startswith("{")
        return "{" + f"{json.dumps(key)}: {json.dumps(value)}," + text[1:]

    return change


def drift(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["drift", *args])
    out, err = capsys.readouterr()
    return code, out, err


def verify_cert(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["verify-cert", *args])
    out, err = capsys.readouterr()
    return code, out, err


def label_of(host: str, when: datetime.datetime = ISSUED) -> str:
    return f"certificate of {host} issued {when.isoformat(timespec='seconds')}"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "history.db"


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "drift.key"
    path.write_bytes(KEY + b"\n")
    return path


def assert_not_trusted(code: int, out: str, err: str, host: str, failed: str) -> None:
    """Exit 1, the host read as DRIFT, one FAIL finding naming the certificate and the failure."""
    assert (code, err) == (1, ""), err
    first, *findings = out.splitlines()
    assert first.startswith(f"{host}  DRIFT  baseline not trusted: "), first
    assert "NO DRIFT" not in out
    assert [line.split()[:3] for line in findings] == [["FAIL", "drift.certificate", "node"]]
    assert failed in findings[0]


# ------------------------------------------------------------------ edited in SQLite


def test_a_power_limit_edited_in_sqlite_is_not_no_drift(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, HOST)
    # GPU 3 was capped to 500 W after certification; someone hides it in the store.
    code, _, _ = drift(capsys, "--simulate", "one-gpu-power-capped", "--db", str(db))
    assert code == 1
    edit_stored(db, HOST, gpu_power(3, 500.0))
    code, out, err = drift(capsys, "--simulate", "one-gpu-power-capped", "--db", str(db))
    assert_not_trusted(code, out, err, HOST, f"{label_of(HOST)} was edited after issue")
    with Store.open(db, readonly=True) as store:
        latest = store.history(HOST)[0]
    assert (latest.kind, latest.verdict, latest.failed) == ("drift", "NOT_CERTIFIED", 1)


def test_the_finding_is_in_json_nhc_and_prometheus(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, HOST)
    edit_stored(db, HOST, gpu_power(3, 500.0))
    prom = tmp_path / "gpuready.prom"
    code, out, _ = drift(
        capsys, "--simulate", "one-gpu-power-capped", "--db", str(db), "--json",
        "--prom-file", str(prom),
    )  # fmt: skip
    assert code == 1
    (node,) = json.loads(out)["nodes"]
    assert node["verdict"] == "NOT_CERTIFIED"
    assert [(f["check"], f["severity"]) for f in node["findings"]] == [
        ("drift.certificate", "FAIL")
    ]
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parser.text_string_to_metric_families(prom.read_text())
        for s in family.samples
    }
    assert samples[("gpuready_drift_detected", (("host", HOST),))] == 1.0
    assert samples[("gpuready_certified", (("host", HOST),))] == 0.0  # deprecated, kept a release
    assert samples[("gpuready_drift_status", (("host", HOST), ("status", "drift")))] == 1.0
    assert samples[("gpuready_drift_status", (("host", HOST), ("status", "ok")))] == 0.0
    check = (("check", "drift.certificate"), ("host", HOST))
    assert samples[("gpuready_drift_findings", check)] == 1.0
    code, out, _ = drift(capsys, "--simulate", "one-gpu-power-capped", "--db", str(db), "--nhc")
    assert code == 1
    assert out.startswith(f"gpuready: baseline not trusted: {label_of(HOST)} was edited")


def test_the_newest_is_checked_and_never_an_older_one_instead(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, HOST)  # an older certificate that still verifies
    certify_into(db, HOST, now=LATER)
    edit_stored(db, HOST, gpu_power(0, 650.0))  # the newest one edited
    code, out, err = drift(capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db))
    assert_not_trusted(code, out, err, HOST, f"{label_of(HOST, LATER)} was edited after issue")
    assert label_of(HOST, ISSUED) not in out


def test_another_hosts_certificate_copied_in_is_not_a_baseline(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A whole, valid certificate of another node, pasted into this node's row.
    certify_into(db, "gpu-spare", HOST)
    with sqlite3.connect(db) as raw:
        (spare,) = raw.execute(
            "SELECT json_packed FROM certificates WHERE hostname = 'gpu-spare'"
        ).fetchone()
        raw.execute("UPDATE certificates SET json_packed = ? WHERE hostname = ?", (spare, HOST))
    raw.close()
    code, out, err = drift(capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db))
    assert_not_trusted(
        code, out, err, HOST, f"{label_of('gpu-spare')} is taken as the certificate of {HOST}"
    )


@pytest.mark.parametrize(
    ("change", "failed"),
    [
        (lambda text: "{ this is not JSON", "invalid JSON at line 1 column 3"),
        (lambda text: "", "invalid JSON at line 1 column 1"),
        (lambda text: "[1, 2]", "the JSON is not an object"),
        (put_first("hostname", "evil"), "duplicate key 'hostname'"),
        (
            substituted(r'"index":\s*2,', '"index": 2, "index": 7,'),
            "duplicate key 'gpus[2].index'",
        ),
        (
            substituted(
                rf'"schema_version":\s*{CERTIFICATE_SCHEMA_VERSION}', '"schema_version": NaN'
            ),
            "finite",
        ),
        (substituted('"hostname"', '"host_name"'), "host_name"),
    ],
    ids=["not-json", "empty", "array", "duplicate-key", "nested-duplicate", "nan", "unknown-key"],
)
def test_a_stored_row_that_cannot_be_read_is_a_finding_not_a_crash(
    db: Path, capsys: pytest.CaptureFixture[str], change: Callable[[str], str], failed: str
) -> None:
    certify_into(db, HOST)
    edit_stored(db, HOST, change)
    code, out, err = drift(capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db))
    assert_not_trusted(code, out, err, HOST, failed)
    assert f"certificate of {HOST}" in out.splitlines()[1]


# ------------------------------------------------------------------ signatures


def test_sign_key_alone_is_accepted_and_checks_every_stored_baseline(
    db: Path, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, HOST, key=KEY)
    code, out, err = drift(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--sign-key", str(key_file)
    )
    assert (code, err) == (0, "")
    assert out.startswith(f"{HOST}  NO DRIFT  ")


def test_a_wrong_key_is_a_failed_check(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, HOST, key=KEY)
    other = tmp_path / "other.key"
    other.write_text("another key\n")
    code, out, err = drift(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--sign-key", str(other)
    )
    assert_not_trusted(
        code, out, err, HOST, f"{label_of(HOST)} has a signature that does not match the key"
    )


def test_an_unsigned_stored_certificate_with_a_key_given_is_a_failed_check(
    db: Path, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, HOST)
    code, out, err = drift(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--sign-key", str(key_file)
    )
    assert_not_trusted(code, out, err, HOST, f"{label_of(HOST)} is not signed, but a key was given")


def test_a_signed_certificate_edited_and_re_digested_fails_with_the_key(
    db: Path, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Whoever edits the row can recompute the digest (it is in the docs); only the key re-signs.
    certify_into(db, HOST, key=KEY)

    def forge(text: str) -> str:
        data = json.loads(text)
        data["gpus"][3]["power_limit_enforced_w"] = 500.0
        content = {k: v for k, v in data.items() if k not in ("digest", "signature")}
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
        data["digest"] = __import__("hashlib").sha256(canonical.encode("ascii")).hexdigest()
        return json.dumps(data, indent=2, sort_keys=True)

    edit_stored(db, HOST, forge)
    args = ("--simulate", "one-gpu-power-capped", "--db", str(db))
    # Without the key only the digest can be checked, and the forger made it match:
    # that is what --sign-key is for.
    code, out, _ = drift(capsys, *args)
    assert (code, out.split()[1:3]) == (0, ["NO", "DRIFT"])
    code, out, err = drift(capsys, *args, "--sign-key", str(key_file))
    assert_not_trusted(code, out, err, HOST, "has a signature that does not match the key")


def test_a_signed_stored_certificate_without_a_key_has_its_digest_checked(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, HOST, key=KEY)
    code, out, _ = drift(capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db))
    assert (code, out.startswith(f"{HOST}  NO DRIFT")) == (0, True)
    edit_stored(db, HOST, gpu_power(1, 650.0))
    code, out, err = drift(capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db))
    assert_not_trusted(code, out, err, HOST, "was edited after issue")


def test_a_missing_key_file_is_bad_input(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = drift(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--sign-key", "/no/key"
    )
    assert (code, out) == (2, "")
    assert err == "gpuready: error: signing key file /no/key does not exist\n"


# ------------------------------------------------------------------ a fleet


def test_a_fleet_flags_exactly_the_host_whose_baseline_fails(
    db: Path, tmp_path: Path, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, "gpu01", "gpu02", "gpu03", key=KEY)
    certify_into(db, "gpu04")  # unsigned
    edit_stored(db, "gpu02", gpu_power(3, 500.0))
    edit_stored(db, "gpu03", lambda text: "{")
    inventory = write_inventory(
        tmp_path,
        {
            "gpu01": "healthy-8x-h100-sxm",
            "gpu02": "one-gpu-power-capped",
            "gpu03": "healthy-8x-h100-sxm",
            "gpu04": "healthy-8x-h100-sxm",
            "gpu05": "healthy-8x-h100-sxm",  # never certified
        },
    )
    code, out, err = drift(
        capsys, "-i", str(inventory), "--transport", "local", "--db", str(db),
        "--sign-key", str(key_file), "--json",
    )  # fmt: skip
    assert code == 1, err
    nodes = {n["hostname"]: n for n in json.loads(out)["nodes"]}
    assert {host: n["verdict"] for host, n in nodes.items()} == {
        "gpu01": "CERTIFIED",
        "gpu02": "NOT_CERTIFIED",
        "gpu03": "NOT_CERTIFIED",
        "gpu04": "NOT_CERTIFIED",
        "gpu05": "UNKNOWN",
    }
    for host, failed in [
        ("gpu02", f"{label_of('gpu02')} was edited after issue"),
        ("gpu03", "certificate of gpu03"),  # the store's words for a row it cannot read
        ("gpu04", f"{label_of('gpu04')} is not signed, but a key was given"),
    ]:
        (finding,) = nodes[host]["findings"]
        assert (finding["check"], finding["severity"]) == ("drift.certificate", "FAIL")
        assert failed in finding["message"]
    assert "invalid JSON" in nodes["gpu03"]["findings"][0]["message"]
    with Store.open(db, readonly=True) as store:
        rows = {r.hostname: r.verdict for r in store.history() if r.kind == "drift"}
    assert rows["gpu02"] == rows["gpu03"] == rows["gpu04"] == "NOT_CERTIFIED"


def test_a_fleet_with_sign_key_and_no_problem_is_clean(
    db: Path, tmp_path: Path, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, "gpu01", "gpu02", key=KEY)
    inventory = write_inventory(
        tmp_path, {"gpu01": "healthy-8x-h100-sxm", "gpu02": "healthy-8x-h100-sxm"}
    )
    code, out, _ = drift(
        capsys, "-i", str(inventory), "--transport", "local", "--db", str(db),
        "--sign-key", str(key_file),
    )  # fmt: skip
    assert code == 0
    assert "2 hosts: 2 no drift" in out


# ------------------------------------------------------------------ the pieces


def test_verify_baseline_checks_digest_signature_and_host() -> None:
    cert = baseline()
    verify_baseline(cert, None, cert.hostname)
    signed = sign(cert, KEY)
    verify_baseline(signed, None, cert.hostname)  # the digest: all that can be checked
    verify_baseline(signed, KEY, cert.hostname)
    with pytest.raises(CertificateError, match="is not signed, but a key was given"):
        verify_baseline(cert, KEY, cert.hostname)
    with pytest.raises(CertificateError, match="is taken as the certificate of gpu99"):
        verify_baseline(cert, None, "gpu99")
    edited = dataclasses.replace(cert, driver_version="560.35.03")
    with pytest.raises(CertificateError, match="was edited after issue"):
        verify_baseline(edited, None, cert.hostname)


def test_an_untrusted_baseline_is_drift_not_unknown() -> None:
    problem = f"{baseline().label} was edited after issue"
    result = drift_node(quick_facts(), UntrustedBaseline(problem), POLICY)
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert drift_state(result) is DriftState.DRIFT
    assert result.summary == f"baseline not trusted: {problem}"
    (finding,) = result.findings
    assert (finding.check, finding.severity) == (DriftCheck.CERTIFICATE, Severity.FAIL)
    assert finding.message.startswith(problem)
    assert result.sku is None  # nothing is taken from a certificate that failed its check


def test_run_drift_verifies_a_given_certificate_too(tmp_path: Path) -> None:
    # A caller of the service layer that skipped the CLI's check is not trusted either.
    edited = dataclasses.replace(baseline(), driver_version="560.35.03")
    with Store.open(tmp_path / "h.db") as store:
        outcome = run_drift(DriftRequest(simulate="healthy-8x-h100-sxm", certificate=edited), store)
    (result,) = outcome.results
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert outcome.exit_code is ExitCode.NOT_CERTIFIED
    assert [f.check for f in result.findings] == [DriftCheck.CERTIFICATE]


def test_run_drift_with_a_key_checks_the_stored_signature(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    certify_into(db, HOST, key=KEY)
    with Store.open(db) as store:
        good = run_drift(DriftRequest(simulate="healthy-8x-h100-sxm", sign_key=KEY), store)
        bad = run_drift(DriftRequest(simulate="healthy-8x-h100-sxm", sign_key=b"nope"), store)
    assert good.exit_code is ExitCode.OK
    assert bad.exit_code is ExitCode.NOT_CERTIFIED


# ------------------------------------------------------------------ duplicate keys


def _issued_file(tmp_path: Path, *, key: bytes | None = None) -> tuple[Path, Certificate]:
    cert = baseline() if key is None else sign(baseline(), key)
    path = tmp_path / "cert.json"
    path.write_text(certificate_to_json(cert))
    return path, cert


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
def test_verify_cert_refuses_a_tampered_duplicate_hostname(
    tmp_path: Path, key_file: Path, signed: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    path, cert = _issued_file(tmp_path, key=KEY if signed else None)
    text = path.read_text()
    # The issue's recipe: the tampered value first, the real one after it.
    at = text.index('  "hostname":')
    path.write_text(text[:at] + '  "hostname": "evil",\n' + text[at:])
    key_args = ["--sign-key", str(key_file)] if signed else []
    code, out, err = verify_cert(capsys, *key_args, str(path))
    assert (code, out) == (2, "")
    assert err == f"gpuready: error: {path}: certificate: duplicate key 'hostname'\n"
    # The same file without the duplicate is intact: only the duplicate is refused.
    path.write_text(text)
    code, out, _ = verify_cert(capsys, *key_args, str(path))
    proved = (
        "HMAC matches the shared key: anyone holding that key could have written it"
        if signed
        else "digest matches; unsigned: proves nothing about who wrote it"
    )
    assert (code, out) == (0, f"{cert.label} is intact: {proved}\n")


def test_drift_refuses_a_certificate_file_with_a_duplicate_key(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _issued_file(tmp_path)
    path.write_text(put_first("driver_version", "999.99")(path.read_text()))
    code, out, err = drift(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--certificate", str(path)
    )
    assert (code, out) == (2, "")
    assert err == f"gpuready: error: {path}: certificate: duplicate key 'driver_version'\n"


@pytest.mark.parametrize(
    ("digest", "signature"),
    [("\u00e9" * 64, None), (None, "\u00fc"), ("\ud800", None)],
    ids=["non-ascii-digest", "non-ascii-signature", "lone-surrogate-digest"],
)
def test_verify_cert_on_non_ascii_seals_is_a_failed_check_not_a_bug(
    tmp_path: Path,
    key_file: Path,
    digest: str | None,
    signature: str | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, _ = _issued_file(tmp_path, key=KEY)
    data = json.loads(path.read_text())
    data["digest"] = digest if digest is not None else data["digest"]
    data["signature"] = signature if signature is not None else data["signature"]
    path.write_text(json.dumps(data))
    code, out, err = verify_cert(capsys, "--sign-key", str(key_file), str(path))
    assert (code, out) == (1, "")  # a certificate whose seal does not hold: not verified
    assert err.startswith(f"gpuready: error: not verified: {baseline().label} ")
    assert err.count("\n") == 1
    assert "internal error" not in err


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('{"a": 1, "a": 2}', "a"),
        ('{"a": {"b": {"c": {"d": 1, "d": 1}}}}', "a.b.c.d"),
        ('[{"x": [{"y": 1}, {"y": 1, "y": 2}]}]', "[0].x[1].y"),
        ('{"a": {"k": 1, "k": 1}, "b": 2}', "a.k"),
        ('{"outer": {"inner": 1}, "outer": {"inner": 2}}', "outer"),
    ],
)
def test_load_json_refuses_a_duplicate_at_every_depth(text: str, path: str) -> None:
    with pytest.raises(fields.LoadError) as caught:
        fields.load_json(text)
    assert caught.value.problem == f"duplicate key '{path}'"


# ------------------------------------------------------------------ --prom-file


def _no_temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in ("history.db",))


def test_a_prom_file_that_cannot_be_written_after_measuring_is_one_line_exit_3(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    certify_into(db, HOST)
    out_dir = tmp_path / "textfiles"
    out_dir.mkdir()
    prom = out_dir / "gpuready.prom"

    def full(src: object, dst: object, **relative: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    # Root writes through chmod 0500: the disk filling up is what is left to fail.
    monkeypatch.setattr(os, "replace", full)
    monkeypatch.setattr(os, "rename", full)
    code, out, err = drift(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--prom-file", str(prom)
    )
    monkeypatch.undo()
    assert (code, out) == (3, "")
    assert err.count("\n") == 1
    assert err.startswith(
        f"gpuready: error: cannot write the Prometheus file {prom}: No space left on device; "
    )
    assert "the drift results are recorded in history (run 2)" in err
    assert "Traceback" not in err
    assert list(out_dir.iterdir()) == []  # no temporary file left behind
    with Store.open(db, readonly=True) as store:
        latest = store.history(HOST)[0]
    assert (latest.kind, latest.status, latest.verdict) == ("drift", "complete", "CERTIFIED")


def test_a_prom_file_whose_folder_is_missing_is_refused_before_measuring(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prom = tmp_path / "absent" / "gpuready.prom"
    code, out, err = drift(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--prom-file", str(prom)
    )
    assert (code, out) == (2, "")
    assert err == (
        f"gpuready: error: --prom-file {prom}: the folder {prom.parent} does not exist; "
        "create it or give another path\n"
    )
    assert not db.exists()  # nothing was measured, nothing recorded


@pytest.mark.parametrize("kind", ["fifo", "empty"])
def test_a_prom_file_that_is_not_a_file_path_is_refused(
    db: Path, tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # As root a rename would replace a device or a pipe with a regular file.
    if kind == "fifo":
        target = tmp_path / "pipe.prom"
        os.mkfifo(target)
        expected = f"--prom-file {target}: it exists and is not a regular file; give a file path"
    else:
        target = Path("")
        expected = "--prom-file is empty: give PATH, or leave --prom-file out"
    code, out, err = drift(
        capsys, "--simulate", "healthy-8x-h100-sxm", "--db", str(db),
        "--prom-file", "" if kind == "empty" else str(target),
    )  # fmt: skip
    assert (code, out) == (2, "")
    assert err == f"gpuready: error: {expected}\n"
    if kind == "fifo":
        assert target.is_fifo()


def test_write_prometheus_refuses_a_target_that_is_not_a_regular_file(tmp_path: Path) -> None:
    from tests.drift.test_drift_outputs import clean
    from validator.error_tree import ReportError
    from validator.report.prometheus import write_prometheus

    pipe = tmp_path / "pipe.prom"
    os.mkfifo(pipe)
    with pytest.raises(ReportError, match="exists and is not a regular file"):
        write_prometheus(pipe, [clean()], now=LATER)
    assert pipe.is_fifo()
    assert _no_temporaries(tmp_path) == ["pipe.prom"]


def test_write_prometheus_cleans_up_when_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.drift.test_drift_outputs import clean
    from validator.report.prometheus import write_prometheus

    def interrupted(src: object, dst: object, **relative: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    monkeypatch.setattr(os, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_prometheus(tmp_path / "gpuready.prom", [clean()], now=LATER)
    assert _no_temporaries(tmp_path) == []
