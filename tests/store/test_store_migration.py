"""Schema 1 to 2: a history written by the previous gpuready opens, every run still readable."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import sqlite3
from pathlib import Path

import pytest

from tests.store.test_store import certified, power_capped
from tests.store.test_store_plans import failing, realistic
from validator import store as store_module
from validator.certificate import (
    certificate_to_json,
    issue_certificate,
    sign,
    verify_certificate,
)
from validator.model import NodeResult, Severity, to_dict
from validator.store import APPLICATION_ID, Store, StoreError
from validator.store import schema as store_schema

KEY = b"site-key"
MARCH = datetime.datetime(2025, 3, 1, tzinfo=datetime.timezone.utc)

# The history query of schema 1, as gpuready ran it then.
V1_HISTORY = """
    SELECT u.id, u.kind, u.started_at, u.finished_at, u.status,
           r.hostname, r.verdict, r.summary, r.recorded_at,
           (SELECT COUNT(*) FROM findings f WHERE f.result_id = r.id AND f.severity = 'FAIL'),
           (SELECT COUNT(*) FROM findings f WHERE f.result_id = r.id AND f.severity = 'UNKNOWN')
    FROM runs u LEFT JOIN results r ON r.run_id = u.id
    ORDER BY u.id DESC, r.id ASC
"""


def v1_insert(
    db: sqlite3.Connection, run_id: int, result: NodeResult, cert_text: str | None
) -> None:
    """A result as schema 1's gpuready wrote it: the JSON text, every finding, the certificate."""
    cursor = db.execute(
        "INSERT INTO results (run_id, hostname, recorded_at, verdict, sku, summary, result_json)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            result.hostname,
            "2025-03-01T00:00:05+00:00",
            result.verdict.value,
            result.sku,
            result.summary,
            json.dumps(to_dict(result), sort_keys=True),
        ),
    )
    db.executemany(
        'INSERT INTO findings (result_id, "check", severity, gpu_index, message)'
        " VALUES (?, ?, ?, ?, ?)",
        [
            (cursor.lastrowid, f.check, f.severity.value, f.gpu_index, f.message)
            for f in result.findings
        ],
    )
    if cert_text is not None:
        cert = json.loads(cert_text)
        db.execute(
            "INSERT INTO certificates (result_id, hostname, issued_at, digest, json)"
            " VALUES (?, ?, ?, ?, ?)",
            (cursor.lastrowid, cert["hostname"], cert["issued_at"], cert["digest"], cert_text),
        )


def v1_run(db: sqlite3.Connection, kind: str, started: str, status: str) -> int:
    cursor = db.execute(
        "INSERT INTO runs (kind, started_at, finished_at, status, hosts, policy_digest, argv,"
        " tool_version, pid) VALUES (?, ?, ?, ?, 2, 'p', '[\"gpuready\"]', '0.1.0', NULL)",
        (kind, started, None if status == "running" else started, status),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


@dataclasses.dataclass
class V1:
    path: Path
    results: dict[tuple[int, str], NodeResult]
    certificates: dict[str, str]  # host: the exact text of its latest certificate
    history: list[tuple[object, ...]]


def build_v1(path: Path) -> V1:
    """A schema 1 database with the statements and rows schema 1's gpuready made."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("BEGIN")
    for statement in store_schema.MIGRATIONS[0]:
        assert isinstance(statement, str)
        db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    db.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")
    results: dict[tuple[int, str], NodeResult] = {}
    certificates: dict[str, str] = {}
    first = v1_run(db, "certify", "2025-03-01T00:00:00+00:00", "complete")
    for result in (realistic("gpu-a"), failing("gpu-b")):
        text = None
        if result.hostname == "gpu-a":
            text = certificate_to_json(sign(issue_certificate(result, now=MARCH), KEY))
            certificates["gpu-a"] = text
        v1_insert(db, first, result, text)
        results[(first, result.hostname)] = result
    second = v1_run(db, "drift", "2025-03-02T00:00:00+00:00", "interrupted")
    for result in (power_capped("gpu-a"),):
        v1_insert(db, second, result, None)
        results[(second, result.hostname)] = result
    third = v1_run(db, "certify", "2025-03-03T00:00:00+00:00", "complete")
    for result in (certified("gpu-b"),):
        text = certificate_to_json(issue_certificate(result, now=MARCH + datetime.timedelta(2)))
        certificates["gpu-b"] = text
        v1_insert(db, third, result, text)
        results[(third, result.hostname)] = result
    v1_run(db, "certify", "2025-03-04T00:00:00+00:00", "running")  # no host yet, no lock file
    db.execute("COMMIT")
    history = db.execute(V1_HISTORY).fetchall()
    db.close()
    return V1(path, results, certificates, history)


def shown(row: tuple[object, ...]) -> tuple[object, ...]:
    # A running run without a lock file reads "incomplete" (never called dead on a guess).
    status = "incomplete" if row[4] == "running" else row[4]
    # A run without a host has no summary: the store shows an empty one, as schema 1's did.
    return (*row[:4], status, *row[5:7], row[7] or "", *row[9:11])


def test_a_schema_1_history_opens_with_every_run_readable(tmp_path: Path) -> None:
    old = build_v1(tmp_path / "h.db")
    with Store.open(old.path) as store:
        rows = store.history(limit=1000)
        assert [
            (
                r.run_id,
                r.kind,
                r.started_at,
                r.finished_at,
                r.status,
                r.hostname,
                r.verdict,
                r.summary,
                r.failed,
                r.unknown,
            )
            for r in rows
        ] == [shown(row) for row in old.history]
        assert [r.recorded_at for r in rows] == [row[8] for row in old.history]
        for host in ("gpu-a", "gpu-b"):
            assert [(r.run_id, r.verdict, r.failed) for r in store.history(host)] == [
                (row[0], row[6], row[9]) for row in old.history if row[5] == host
            ]
        for (run_id, host), result in old.results.items():
            assert store.result(run_id, host) == result
        for host, text in old.certificates.items():
            cert = store.latest_certificate(host)
            assert cert is not None
            # the same text, byte for byte: its digest and signature still hold
            assert certificate_to_json(cert) == text
            verify_certificate(cert, KEY if host == "gpu-a" else None)
        assert store._db is not None
        assert store._db.execute("PRAGMA foreign_keys").fetchone() == (1,)
        assert store.integrity_check() == "ok"
        # and it goes on recording in the new form
        run = store.start_run("certify", 1, "p")
        store.record_results(run, [(certified("gpu-c"), None)])
        store.finish_run(run)
        assert store.history("gpu-c")[0].verdict == "CERTIFIED"
    db = sqlite3.connect(old.path)
    assert db.execute("PRAGMA user_version").fetchone() == (store_module.schema_version(),)
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    stored = dict(db.execute("SELECT hostname, json_packed FROM certificates").fetchall())
    assert store_module.unpack(stored["gpu-a"]) == old.certificates["gpu-a"]
    # PASS findings became counts; the others stayed rows
    finding_rows = db.execute('SELECT "check", severity FROM findings ORDER BY id').fetchall()
    assert {severity for _, severity in finding_rows} == {"FAIL", "UNKNOWN"}
    kept = sum(
        1
        for result in old.results.values()
        for f in result.findings
        if f.severity is not Severity.PASS
    )
    assert len(finding_rows) == kept + sum(
        1 for f in certified("gpu-c").findings if f.severity is not Severity.PASS
    )
    passed = json.loads(
        db.execute("SELECT passed FROM results WHERE hostname = 'gpu-b' AND run_id = 1").fetchone()[
            0
        ]
    )
    expected: dict[str, int] = {}
    for f in failing("gpu-b").findings:
        if f.severity is Severity.PASS:
            expected[f.check] = expected.get(f.check, 0) + 1
    assert passed == expected
    db.close()


def test_a_migration_that_fails_halfway_leaves_schema_1_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = build_v1(tmp_path / "h.db")
    with contextlib.closing(sqlite3.connect(old.path)) as db:
        before = db.execute("SELECT id, result_json FROM results ORDER BY id").fetchall()

    def broken(db: sqlite3.Connection) -> None:
        store_schema._v2_copy_packed(db)
        raise sqlite3.OperationalError("disk I/O error")

    steps = tuple(broken if callable(s) else s for s in store_schema.MIGRATIONS[1])
    monkeypatch.setattr(store_schema, "MIGRATIONS", (store_schema.MIGRATIONS[0], steps))
    with pytest.raises(StoreError, match="disk I/O error"):
        Store.open(old.path)
    with contextlib.closing(sqlite3.connect(old.path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (1,)
        assert db.execute("SELECT id, result_json FROM results ORDER BY id").fetchall() == before
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == {"runs", "results", "findings", "certificates"}
    monkeypatch.undo()
    with Store.open(old.path) as store:  # and the real migration still runs
        assert store.result(1, "gpu-a") == old.results[(1, "gpu-a")]


def test_schema_1_is_read_only_refused_until_a_writer_upgrades_it(tmp_path: Path) -> None:
    old = build_v1(tmp_path / "h.db")
    before = old.path.read_bytes()
    with pytest.raises(StoreError, match="has schema 1, older than this gpuready's 4"):
        Store.open(old.path, readonly=True)
    assert old.path.read_bytes() == before


def test_a_damaged_schema_1_result_migrates_and_reads_as_unreadable(tmp_path: Path) -> None:
    old = build_v1(tmp_path / "h.db")
    with contextlib.closing(sqlite3.connect(old.path)) as db:
        db.execute(
            "UPDATE results SET result_json = '{truncated' WHERE run_id = 2 AND hostname = 'gpu-a'"
        )
        db.commit()
    with Store.open(old.path) as store:
        assert [(r.run_id, r.verdict) for r in store.history("gpu-a")] == [
            (2, old.results[(2, "gpu-a")].verdict.value),
            (1, "CERTIFIED"),
        ]
        with pytest.raises(StoreError) as caught:
            store.result(2, "gpu-a")
        message = str(caught.value)
        assert "holds an unreadable result of gpu-a in run 2" in message
        assert "\n" not in message
        assert store.result(1, "gpu-a") == old.results[(1, "gpu-a")]  # the others read as before
    with contextlib.closing(sqlite3.connect(old.path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (store_module.schema_version(),)
        # the damaged text is kept as it was, for whoever wants to look
        packed = db.execute("SELECT result_packed FROM results WHERE run_id = 2").fetchone()[0]
        assert store_module.unpack(packed) == "{truncated"


def test_the_upgraded_runs_table_never_hands_out_an_id_again(tmp_path: Path) -> None:
    old = build_v1(tmp_path / "h.db")
    with Store.open(old.path):
        pass
    with contextlib.closing(sqlite3.connect(old.path)) as db:
        # what schema 1 numbered is remembered: deleting its newest run frees no id
        assert db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'runs'").fetchone() == (4,)
        db.execute("DELETE FROM runs WHERE id = 4")
        db.commit()
    with Store.open(old.path) as store:
        assert store.start_run("certify", 1, "p") == 5
