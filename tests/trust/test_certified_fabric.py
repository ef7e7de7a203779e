"""The certificate's ``fabric``: certified in the fabric, not run, failed; absent if not asked."""

from __future__ import annotations

import datetime
import json

import pytest

from tests.trust.test_certificate import certified
from validator.certificate import (
    CertificateError,
    certificate_from_json,
    certificate_to_json,
    issue_certificate,
    verify_certificate,
    with_fabric,
)
from validator.model import CrossNodeStage, KindOutcome, Named
from validator.model.fabric_certified import certified_fabric

ISSUED = datetime.datetime(2026, 12, 6, 21, 30, tzinfo=datetime.timezone.utc)


def _stage(good: tuple[str, ...], slow: tuple[str, ...] = (), skipped: str = "") -> CrossNodeStage:
    nodes = good + slow
    outcome = KindOutcome(
        "rdma",
        380.0,
        "catalog",
        good=good,
        slow_nodes=tuple(Named((n,), "below the floor with n1 140.4 Gb/s") for n in slow),
        rounds=2,
        skipped=skipped,
    )
    return CrossNodeStage(("rdma",), "ndr-400-ib", nodes, outcomes=(outcome,))


def test_good_node_is_certified_in_the_fabric_with_its_date() -> None:
    fabric = certified_fabric(_stage(("n1", "n2")), "n1", "2026-12-06T21:30:00+00:00")
    assert fabric is not None
    assert (fabric.status, fabric.fabric, fabric.date, fabric.kinds) == (
        "certified",
        "ndr-400-ib",
        "2026-12-06",
        ("rdma",),
    )


def test_slow_node_failed_with_why() -> None:
    fabric = certified_fabric(_stage(("n1",), ("n3",)), "n3", "2026-12-06T21:30:00+00:00")
    assert fabric is not None
    assert fabric.status == "failed"
    assert "140.4" in fabric.why


def test_skipped_or_absent_is_not_run() -> None:
    skipped = certified_fabric(_stage(("n1",), skipped="no fabric"), "n1", "2026-12-06")
    assert skipped is not None
    assert (skipped.status, skipped.why, skipped.date) == ("not run", "no fabric", None)
    absent = certified_fabric(_stage(("n1",)), "n9", "2026-12-06")
    assert absent is not None
    assert absent.status == "not run"
    assert certified_fabric(None, "n1", "2026-12-06") is None


def test_certificate_carries_it_sealed_and_reads_it_back() -> None:
    name = certified().hostname
    alone = issue_certificate(certified(), now=ISSUED)
    cert = with_fabric(alone, certified_fabric(_stage((name, "other")), name, alone.issued_at))
    assert cert.fabric is not None
    assert cert.fabric.status == "certified"
    text = certificate_to_json(cert)
    assert json.loads(text)["fabric"]["date"] == "2026-12-06"
    again = certificate_from_json(text)
    assert again == cert
    verify_certificate(again, None)  # the digest covers it
    edited = json.loads(text)
    edited["fabric"]["status"] = "failed"
    with pytest.raises(CertificateError):
        verify_certificate(certificate_from_json(json.dumps(edited)), None)


def test_left_out_when_the_stage_was_not_asked() -> None:
    cert = issue_certificate(certified(), now=ISSUED)
    assert cert.fabric is None
    assert "fabric" not in json.loads(certificate_to_json(cert))


def test_a_bad_status_is_refused() -> None:
    alone = issue_certificate(certified(), now=ISSUED)
    fabric = certified_fabric(_stage(("x",)), "y", alone.issued_at)
    data = json.loads(certificate_to_json(with_fabric(alone, fabric)))
    data["fabric"]["status"] = "sort of"
    with pytest.raises(CertificateError, match="fabric"):
        certificate_from_json(json.dumps(data))
