"""A host's result as a run records it, and as the rows of the database hold it.

A result is encoded (packed, its findings counted) before the write lock is taken;
:func:`_insert_result` then writes its result, findings and certificate rows.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from validator.model import CrossNodeStage, NodeResult, Severity, provenance_of, to_dict
from validator.model.check_counts import count_checks
from validator.packed import packed_facts, packed_result, with_samples
from validator.store.schema import _passed_counts

if TYPE_CHECKING:  # certificates are read only where a run issued one
    from validator.certificate import Certificate


@dataclass(frozen=True)
class _Recorded:
    """One host's result as a run records it."""

    result: NodeResult
    certificate: Certificate | None
    recorded_at: str

    def to_json(self) -> dict[str, object]:
        from validator.certificate import certificate_text

        return {
            "result": to_dict(with_samples(self.result)),  # a held result's samples too
            "certificate": certificate_text(self.certificate) if self.certificate else None,
            "recorded_at": self.recorded_at,
        }


@dataclass(frozen=True)
class _Encoded:
    """A recorded result as its rows will hold it: encoded before the write lock is taken."""

    recorded: _Recorded
    result_packed: bytes  # the result without its facts
    facts_packed: bytes
    failed: int
    unknown: int
    passed: str
    findings: tuple[tuple[str, str, int | None, str], ...]  # check, severity, GPU, message
    certificate_packed: bytes | None


def _encode(recorded: _Recorded) -> _Encoded:
    result, certificate = recorded.result, recorded.certificate
    certificate_packed = None
    if certificate is not None:
        from validator.certificate import packed_certificate

        certificate_packed = packed_certificate(certificate)
    kept = tuple(
        (f.check, f.severity.value, f.gpu_index, f.message)
        for f in result.findings
        if f.severity is not Severity.PASS
    )
    counts = count_checks(result.findings)
    return _Encoded(
        recorded=recorded,
        result_packed=packed_result(result),
        facts_packed=packed_facts(result.facts),
        # Checks, as every report counts them (a check failing on two GPUs is one).
        failed=counts.failed,
        unknown=counts.unknown,
        passed=_passed_counts([f.check for f in result.findings if f.severity is Severity.PASS]),
        findings=kept,
        certificate_packed=certificate_packed,
    )


def _insert_result(db: sqlite3.Connection, run_id: int, encoded: _Encoded) -> None:
    """Replace a host's result in a run with ``encoded``, its findings and certificate."""
    recorded = encoded.recorded
    result, certificate = recorded.result, recorded.certificate
    earlier = [
        (row[0],)
        for row in db.execute(
            "SELECT id FROM results WHERE hostname = ? AND run_id = ?", (result.hostname, run_id)
        )
    ]
    if earlier:
        db.executemany("DELETE FROM certificates WHERE result_id = ?", earlier)
        db.executemany("DELETE FROM findings WHERE result_id = ?", earlier)
        db.executemany("DELETE FROM results WHERE id = ?", earlier)
    cursor = db.execute(
        "INSERT INTO results (run_id, hostname, recorded_at, verdict, sku, summary,"
        " failed, unknown, passed, result_packed, facts_packed, provenance)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            result.hostname,
            recorded.recorded_at,
            result.verdict.value,
            result.sku,
            result.summary,
            encoded.failed,
            encoded.unknown,
            encoded.passed,
            encoded.result_packed,
            encoded.facts_packed,
            provenance_of(result.facts),
        ),
    )
    result_id = cursor.lastrowid
    if encoded.findings:
        db.executemany(
            'INSERT INTO findings (result_id, "check", severity, gpu_index, message)'
            " VALUES (?, ?, ?, ?, ?)",
            [(result_id, *finding) for finding in encoded.findings],
        )
    if certificate is not None:
        db.execute(
            "INSERT INTO certificates (result_id, hostname, issued_at, digest, json_packed)"
            " VALUES (?, ?, ?, ?, ?)",
            (
                result_id,
                certificate.hostname,
                certificate.issued_at,
                certificate.digest,
                encoded.certificate_packed,
            ),
        )


def _stage_packed(stage: CrossNodeStage | None) -> bytes | None:
    """A run's stage across nodes as ``runs.cross_node_packed`` holds it; None without one."""
    if stage is None:
        return None
    from validator.codec import pack

    return pack(json.dumps(to_dict(stage), sort_keys=True, allow_nan=False))


def _store_stage(db: sqlite3.Connection, run_id: int, packed: bytes | None) -> None:
    """Keep a run's stage with its row (inside the caller's transaction); None keeps none."""
    if packed is not None:
        db.execute("UPDATE runs SET cross_node_packed = ? WHERE id = ?", (packed, run_id))
