"""A failed certification revokes the older certificate; every verdict says where it came from.

A node certified once and failing its next certification must not read "no drift":
the failed attempt revokes the certificate for drift and NHC until a new one is issued,
``--report-dir`` keeps no certificate of it, and history says which certificates were
replaced or revoked. Provenance (live, capture, simulate) is sealed into every
certificate, kept on every history row and in every report, and a simulated node's
certificate is never a real host's baseline.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.drift.test_drift import baseline, quick_facts
from validator.certificate import (
    Certificate,
    CertificateError,
    canonical_bytes,
    certificate_from_json,
    certificate_to_json,
    verify_certificate,
)
from validator.cli.main import main
from validator.drift import drift_node
from validator.judge.policy import Policy
from validator.model import Verdict
from validator.store import Store
from validator.store import schema as store_schema

HOST = "h100-node-01"  # the hostname every built-in H100 scenario reports
HEALTHY = "healthy-8x-h100-sxm"
CAPPED = "one-gpu-power-capped"  # certify fails it: power.limit, burn.speed on GPU 3


def gpuready(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "policy.yml").write_text("require_burn: false\n", encoding="utf-8")
    return tmp_path


def certify(
    capsys: pytest.CaptureFixture[str], work: Path, scenario: str, *extra: str
) -> tuple[int, str, str]:
    return gpuready(
        capsys,
        "certify",
        "--simulate",
        scenario,
        "--burn",
        "0",
        "--policy",
        str(work / "policy.yml"),
        "--db",
        str(work / "h.db"),
        "--report-dir",
        str(work / "rep"),
        *extra,
    )


def drift(capsys: pytest.CaptureFixture[str], work: Path, *extra: str) -> tuple[int, str, str]:
    return gpuready(capsys, "drift", "--simulate", HEALTHY, "--db", str(work / "h.db"), *extra)


def cert_file(work: Path) -> Path:
    return work / "rep" / "certificates" / f"{HOST}.json"


# ------------------------------------------------------------------ revocation


def test_a_failed_certification_revokes_the_certificate_for_drift_and_nhc(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert certify(capsys, work, HEALTHY)[0] == 0
    assert drift(capsys, work, "--nhc")[0] == 0  # the control: certified, no drift
    assert certify(capsys, work, CAPPED)[0] == 1
    code, out, _ = drift(capsys, work, "--nhc")
    assert code == 1, out
    assert out.startswith("gpuready:"), out
    assert "last certification on" in out, out
    assert "failed:" in out, out
    assert "power.limit" in out, out


def test_a_new_certificate_ends_the_revocation(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert certify(capsys, work, HEALTHY)[0] == 0
    assert certify(capsys, work, CAPPED)[0] == 1
    assert drift(capsys, work)[0] == 1
    assert certify(capsys, work, HEALTHY)[0] == 0
    code, out, _ = drift(capsys, work)
    assert code == 0, out


def test_report_dir_keeps_no_certificate_of_a_host_it_did_not_certify(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert certify(capsys, work, HEALTHY)[0] == 0
    assert cert_file(work).is_file()
    assert certify(capsys, work, CAPPED)[0] == 1
    assert not cert_file(work).exists()
    code, _, err = gpuready(capsys, "verify-cert", str(cert_file(work)))
    assert code == 2
    assert "does not exist" in err


def test_a_certificate_planted_as_a_link_is_refused_never_followed(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = work / "victim.json"
    victim.write_text("keep me\n", encoding="utf-8")
    cert_file(work).parent.mkdir(parents=True)
    os.symlink(victim, cert_file(work))
    code, _, err = certify(capsys, work, CAPPED)
    assert code == 3, err  # measured and recorded, but the folder could not be cleaned
    assert str(cert_file(work)) in err, err
    assert "link" in err, err
    assert victim.read_text(encoding="utf-8") == "keep me\n"
    with Store.open(work / "h.db") as store:
        assert [row.verdict for row in store.history(HOST)] == ["NOT_CERTIFIED"]


def test_a_certificates_folder_planted_as_a_link_is_not_followed(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / f"{HOST}.json").write_text("not ours\n", encoding="utf-8")
    (work / "rep").mkdir()
    os.symlink(elsewhere, work / "rep" / "certificates")
    code, _, _ = certify(capsys, work, CAPPED)
    assert code in (1, 2, 3)
    assert (elsewhere / f"{HOST}.json").read_text(encoding="utf-8") == "not ours\n"


def test_an_older_certificate_copied_back_after_a_failure_is_still_revoked(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert certify(capsys, work, HEALTHY)[0] == 0
    saved = work / "saved.json"
    shutil.copyfile(cert_file(work), saved)
    assert certify(capsys, work, CAPPED)[0] == 1
    shutil.copyfile(saved, cert_file(work))  # put back by hand
    code, out, _ = drift(capsys, work, "--certificate", str(cert_file(work)), "--nhc")
    assert code == 1, out
    assert "last certification on" in out, out


def test_a_failure_under_another_case_of_the_host_name_still_revokes(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def inventory(name: str, scenario: str) -> Path:
        path = work / f"{scenario}.yml"
        path.write_text(
            f"all:\n  hosts:\n    {name}:\n      gpuready_simulate: {scenario}\n", encoding="utf-8"
        )
        return path

    def fleet(command: str, path: Path) -> int:
        extra = ("--burn", "0", "--policy", str(work / "policy.yml"))
        return gpuready(
            capsys,
            command,
            "-i",
            str(path),
            "--transport",
            "local",
            "--db",
            str(work / "h.db"),
            *(extra if command == "certify" else ()),
        )[0]

    assert fleet("certify", inventory("gpu01", HEALTHY)) == 0
    assert fleet("drift", inventory("gpu01", HEALTHY)) == 0
    assert fleet("certify", inventory("GPU01", CAPPED)) == 1
    assert fleet("drift", inventory("gpu01", HEALTHY)) == 1


def test_history_shows_the_certificates_replaced_and_revoked(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert certify(capsys, work, HEALTHY)[0] == 0
    assert certify(capsys, work, HEALTHY)[0] == 0
    assert certify(capsys, work, CAPPED)[0] == 1
    code, out, _ = gpuready(capsys, "history", "--db", str(work / "h.db"), "--json")
    assert code == 0, out
    rows = {row["run_id"]: row for row in json.loads(out)}
    assert rows[1]["certificate"].startswith("replaced"), rows[1]
    assert rows[2]["certificate"].startswith("revoked"), rows[2]
    assert rows[3]["certificate"] is None, rows[3]
    assert {row["provenance"] for row in rows.values()} == {"simulate"}
    code, out, _ = gpuready(capsys, "history", "--db", str(work / "h.db"))
    for word in ("revoked", "replaced", "simulate"):
        assert word in out, out


# ------------------------------------------------------------------ provenance


def test_a_certificate_seals_its_provenance() -> None:
    cert = baseline()
    assert cert.provenance == "simulate"
    assert b'"provenance":"simulate"' in canonical_bytes(cert)
    edited = certificate_to_json(cert).replace('"provenance": "simulate"', '"provenance": "live"')
    assert edited != certificate_to_json(cert)
    with pytest.raises(CertificateError, match="edited after issue"):
        verify_certificate(certificate_from_json(edited), None)


def test_a_current_certificate_without_provenance_is_refused() -> None:
    data = json.loads(certificate_to_json(baseline()))
    del data["provenance"]
    with pytest.raises(CertificateError, match="provenance"):
        certificate_from_json(json.dumps(data))


def older(cert: Certificate) -> Certificate:
    """The certificate as schema 3 issued it: no provenance, sealed again."""
    import hashlib

    old = dataclasses.replace(cert, schema_version=3, provenance=None, signature=None)
    return dataclasses.replace(old, digest=hashlib.sha256(canonical_bytes(old)).hexdigest())


def test_an_older_certificate_without_provenance_stays_readable_and_says_so() -> None:
    old = older(baseline())
    text = certificate_to_json(old)
    assert "provenance" not in text
    read = certificate_from_json(text)
    verify_certificate(read, None)
    result = drift_node(quick_facts(), read, Policy())
    assert result.verdict is Verdict.CERTIFIED, result.summary
    assert "provenance unknown (older certificate)" in result.summary


def test_drift_refuses_a_simulated_certificate_as_a_real_hosts_baseline() -> None:
    for source in ("live", "capture"):
        facts = dataclasses.replace(quick_facts(), source=source)
        result = drift_node(facts, baseline(), Policy())
        assert result.verdict is Verdict.NOT_CERTIFIED, result.summary
        assert "simulated" in result.summary
        assert "certify" in result.summary
        assert "\n" not in result.summary
    # a simulated node against its simulated certificate is compared as before
    assert drift_node(quick_facts(), baseline(), Policy()).verdict is Verdict.CERTIFIED


def test_a_simulated_certificate_renamed_to_a_real_host_is_refused(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    assert certify(capsys, work, HEALTHY)[0] == 0
    issued = certificate_from_json(cert_file(work).read_text(encoding="utf-8"))
    # Renamed and resealed, so its digest holds: only its provenance can give it away.
    renamed_cert = dataclasses.replace(issued, hostname=socket.gethostname())
    renamed_cert = dataclasses.replace(
        renamed_cert, digest=hashlib.sha256(canonical_bytes(renamed_cert)).hexdigest()
    )
    verify_certificate(renamed_cert, None)
    renamed = work / "renamed.json"
    renamed.write_text(certificate_to_json(renamed_cert), "utf-8")
    code, out, err = gpuready(
        capsys, "drift", "--certificate", str(renamed), "--db", str(work / "h.db")
    )
    # This machine has no GPU, so nothing is measured and the baseline is not even used
    # (the rule itself: test_drift_refuses_a_simulated_certificate_as_a_real_hosts_baseline);
    # what matters here is that the resealed, renamed certificate never reads as no drift.
    assert code == 1, (out, err)
    assert "NO DRIFT" not in out.upper(), out


def test_reports_name_the_provenance(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert certify(capsys, work, HEALTHY)[0] == 0
    html = (work / "rep" / "report.html").read_text(encoding="utf-8")
    assert 'id="simulated-banner"' in html
    assert "SIMULATED" in html
    junit = (work / "rep" / "junit.xml").read_text(encoding="utf-8")
    assert '<property name="provenance" value="simulate"' in junit
    report = json.loads((work / "rep" / "report.json").read_text(encoding="utf-8"))
    assert report["nodes"][0]["facts"]["source"] == "simulate"


def test_the_summary_json_names_the_provenance_of_every_node() -> None:
    from tests.drift.test_drift import certified_facts
    from validator.judge import judge_node
    from validator.report.json_report import node_summary

    result = judge_node(certified_facts(), Policy())
    assert node_summary(result)["provenance"] == "simulate"
    forged = dataclasses.replace(result, facts=dataclasses.replace(result.facts, source="Live"))
    assert node_summary(forged)["provenance"] == "unknown"


def test_history_rows_of_a_schema_2_store_get_their_provenance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.store.test_store_plans import realistic

    db = tmp_path / "h.db"
    with monkeypatch.context() as patch:
        patch.setattr(store_schema, "MIGRATIONS", store_schema.MIGRATIONS[:2])
        with Store.open(db) as old:
            run = old.start_run("certify", 1, "p")
            old.record_result(run, realistic("gpu-1"))
            old.finish_run(run)
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 2
    with Store.open(db) as store:
        rows = store.history()
    assert [row.provenance for row in rows] == [realistic("gpu-1").facts.source]


def test_the_latest_attempt_is_by_time_in_any_case_and_skips_runs_cut_short(
    tmp_path: Path,
) -> None:
    from tests.store.test_store_plans import failing, realistic

    def unknown(host: str) -> object:
        return dataclasses.replace(realistic(host), verdict=Verdict.UNKNOWN)

    with Store.open(tmp_path / "h.db") as store:
        assert store.latest_attempt("gpu-1") is None
        first = store.start_run("certify", 1, "p")
        store.record_result(first, realistic("gpu-1"))
        store.finish_run(first)
        attempt = store.latest_attempt("GPU-1")
        assert attempt is not None
        assert (attempt.run_id, attempt.certified) == (first, True)
        second = store.start_run("certify", 1, "p")
        store.record_result(
            second, dataclasses.replace(failing("Gpu-1"), verdict=Verdict.NOT_CERTIFIED)
        )
        store.finish_run(second)
        cut = store.start_run("certify", 1, "p")
        store.record_result(cut, unknown("gpu-1"))  # type: ignore[arg-type]
        store.finish_run(cut, interrupted=True)
        drift = store.start_run("drift", 1, "p")
        store.record_result(drift, realistic("gpu-1"))
        store.finish_run(drift)
        attempt = store.latest_attempt("gpu-1")
    assert attempt is not None
    assert (attempt.run_id, attempt.hostname, attempt.certified) == (second, "Gpu-1", False)
    assert len(attempt.failed) == 2  # the two FAIL findings, each with its GPU


def test_an_agent_asked_to_simulate_that_claims_live_facts_is_recorded_simulated() -> None:
    # The controller asked for a scenario: an agent (forged, or of another version) that
    # says its facts are live must not give the host a live provenance.
    from validator.model import HostSpec, NodeResult, provenance_of
    from validator.remote.fanout import judged_result
    from validator.remote.transport import AgentOutcome, AgentRequest

    claimed_live = dataclasses.replace(quick_facts(), source="live", source_detail="")
    seen: list[str] = []

    def judge(host: HostSpec, facts: object) -> NodeResult:
        assert isinstance(facts, type(claimed_live))
        seen.append(provenance_of(facts))
        return NodeResult(
            hostname=host.name, facts=facts, verdict=Verdict.CERTIFIED, findings=()
        )

    host = HostSpec(name="n1", address="n1", simulate="healthy-8x-h100-sxm")
    result = judged_result(
        host, "ssh", AgentOutcome("n1", claimed_live), judge, AgentRequest(), 600.0
    )
    assert seen == ["simulate"]
    assert provenance_of(result.facts) == "simulate"
    assert result.facts.source_detail == "healthy-8x-h100-sxm"


def test_verify_cert_with_history_says_whether_the_certificate_was_revoked(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert certify(capsys, work, HEALTHY)[0] == 0
    kept = work / "kept.json"  # the operator's copy: the report folder drops it on failure
    shutil.copyfile(cert_file(work), kept)
    code, out, _ = gpuready(capsys, "verify-cert", str(kept), "--db", str(work / "h.db"))
    assert code == 0, out
    assert "not revoked:" in out
    assert certify(capsys, work, CAPPED)[0] == 1
    code, out, err = gpuready(capsys, "verify-cert", str(kept), "--db", str(work / "h.db"))
    assert code == 1, out + err
    assert "is intact" in out  # the seal still holds: the history revoked it
    assert "revoked:" in err
    assert "power.limit" in err
    # without the history, verify-cert proves only the seal, as before
    assert gpuready(capsys, "verify-cert", str(kept))[0] == 0


def test_verify_cert_against_a_history_that_never_certified_the_host_says_so(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert certify(capsys, work, HEALTHY)[0] == 0
    other = work / "other.db"
    Store.open(other).close()  # a history of its own: never saw this host
    code, out, err = gpuready(capsys, "verify-cert", str(cert_file(work)), "--db", str(other))
    assert code == 0, err
    assert "not revoked" not in out
    assert "revocation not checked: the history at" in err
    code, _, err = gpuready(
        capsys, "verify-cert", str(cert_file(work)), "--db", str(work / "absent.db")
    )
    assert code == 2
    assert "no history at" in err
