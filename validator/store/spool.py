"""Pending runs: the files a run goes to when the database cannot be written, and their import.

Nothing measured is lost to the database. A run whose writes still fail (the
database stays locked by another program, or is full or damaged) is spooled:
the run and every result it records are written, atomically, to a pending
file beside the database (``<db>.pending/<time>-<pid>-<n>.json``), and the
next process that opens the database for writing imports it (the file is
deleted only once its import has committed; importing twice changes nothing).
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from validator import fields as doc
from validator.error_tree import BadInputError
from validator.files import STALE_AFTER_S
from validator.model import CrossNodeStage, NodeResult, SchemaError, from_dict
from validator.safe_text import one_line
from validator.store.queries import RUN_KINDS, RUN_STATUSES
from validator.store.result_rows import (
    _encode,
    _insert_result,
    _Recorded,
    _stage_packed,
    _store_stage,
)
from validator.store.run_locks import _process_alive


def pending_dir(db_path: Path) -> Path:
    """Where runs that could not be written to ``db_path`` wait: ``<db>.pending/``."""
    return db_path.with_name(db_path.name + ".pending")


PENDING_FORMAT = "gpuready-pending-run"
PENDING_VERSION = 1

_PENDING_RUN = doc.Document(
    (
        doc.Field("db_run_id", int, minimum=1, nullable=True, required=True),
        doc.Field("kind", str, choices=RUN_KINDS, required=True),
        doc.Field("started_at", str, non_empty=True, required=True),
        doc.Field("finished_at", str, nullable=True),
        doc.Field("status", str, choices=RUN_STATUSES, required=True),
        doc.Field("hosts", int, minimum=0, required=True),
        doc.Field("policy_digest", str, required=True),
        doc.Field("argv", list, item=doc.Field("arg", str), required=True),
        doc.Field("tool_version", str, required=True),
        doc.Field("pid", int, minimum=0, nullable=True),
        doc.Field("hostname", str, nullable=True),
        # The run's stage across nodes (validator.model.CrossNodeStage), when it ran one.
        doc.Field("cross_node", dict, nullable=True),
    ),
    noun="field",
    wanted="a JSON object",
)
_PENDING_RESULT = doc.Document(
    (
        doc.Field("result", dict, required=True),
        doc.Field("certificate", str, nullable=True, required=True),
        doc.Field("recorded_at", str, non_empty=True, required=True),
    ),
    noun="field",
    wanted="a JSON object",
)
PENDING_FIELDS = doc.Document(
    (
        doc.Field("format", str, choices=(PENDING_FORMAT,), required=True),
        doc.Field("version", int, minimum=1, maximum=PENDING_VERSION, required=True),
        doc.Field("database", str),
        doc.Field("reason", str),
        doc.Field("run", dict, document=_PENDING_RUN, required=True),
        doc.Field(
            "results",
            list,
            required=True,
            item=doc.Field("result", dict, document=_PENDING_RESULT),
        ),
    ),
    noun="field",
    wanted="a JSON object",
)


class _PendingError(ValueError):
    """A pending file that cannot be imported; the message is one line."""


@dataclass
class _Spool:
    """A run whose writes go to a pending file, kept whole in memory and on disk."""

    path: Path
    run: dict[str, Any]
    reason: str
    results: dict[str, _Recorded] = field(default_factory=dict)
    announced: bool = False
    error: str | None = None  # why the file could not be written, the last time it was tried

    def document(self, database: Path) -> dict[str, object]:
        return {
            "format": PENDING_FORMAT,
            "version": PENDING_VERSION,
            "database": str(database),
            "reason": self.reason,
            "run": self.run,
            "results": [recorded.to_json() for recorded in self.results.values()],
        }


def read_pending(path: Path) -> tuple[dict[str, Any], list[_Recorded]]:
    """A pending file's run and results, every field checked.

    Raises:
        _PendingError: not readable, not JSON, or not a pending run.
    """
    source = doc.Source(str(path), error=_PendingError)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _PendingError(f"{path}: cannot be read ({one_line(exc)})") from None
    try:
        data = doc.load_json(text)
    except doc.LoadError as exc:
        if exc.syntax:
            raise _PendingError(f"{path}: not JSON ({exc.problem})") from None
        raise source.loaded(exc) from None
    checked = PENDING_FIELDS.check(data, source)
    from validator.certificate import certificate_from_json

    recorded = []
    for index, entry in enumerate(checked["results"]):
        try:
            result = from_dict(NodeResult, entry["result"])
            text = entry["certificate"]
            certificate = certificate_from_json(text) if text is not None else None
        except (SchemaError, BadInputError) as exc:
            raise _PendingError(f"{path}: results[{index}]: {one_line(exc)}") from None
        recorded.append(_Recorded(result, certificate, entry["recorded_at"]))
    run = dict(checked["run"])
    if run.get("cross_node") is not None:
        try:  # checked whole now: the import then writes only a stage that reads back
            run["cross_node"] = from_dict(CrossNodeStage, run["cross_node"])
        except SchemaError as exc:
            raise _PendingError(f"{path}: run.cross_node: {one_line(exc)}") from None
    return run, recorded


def _writer_gone(path: Path, run: dict[str, Any]) -> bool:
    """Whether the process spooling a running run to ``path`` is gone.

    Its process is asked where it can be (this host); a file of another host,
    or of a process id now reused, counts as abandoned once untouched for an
    hour. Importing one too early is harmless: a writer that lives on rewrites
    the file, and the import of the newer file updates the same run.
    """
    if not _process_alive(run.get("pid"), run.get("hostname")):
        return True
    try:
        return time.time() - path.stat().st_mtime > STALE_AFTER_S
    except OSError:
        return False


def _import_run(db: sqlite3.Connection, run: dict[str, Any], results: list[_Recorded]) -> int:
    """Write a pending run into the database (inside the caller's transaction).

    Idempotent: the run is found again by its database id, or by what it was
    (kind, start, process, command line), so a file imported twice adds nothing.
    """
    argv = json.dumps(run["argv"])
    target: int | None = None
    if run["db_run_id"] is not None:
        found = db.execute("SELECT id FROM runs WHERE id = ?", (run["db_run_id"],)).fetchone()
        target = found[0] if found else None
    if target is None:
        found = db.execute(
            "SELECT id FROM runs WHERE kind = ? AND started_at = ? AND pid IS ? AND argv = ?"
            " AND tool_version = ? ORDER BY id LIMIT 1",
            (run["kind"], run["started_at"], run.get("pid"), argv, run["tool_version"]),
        ).fetchone()
        target = found[0] if found else None
    if target is None:
        cursor = db.execute(
            "INSERT INTO runs (kind, started_at, hosts, policy_digest, argv, tool_version, pid)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                run["kind"],
                run["started_at"],
                run["hosts"],
                run["policy_digest"],
                argv,
                run["tool_version"],
                run.get("pid"),
            ),
        )
        target = cursor.lastrowid
    assert target is not None  # noqa: S101 - an INSERT into a rowid table sets it
    for recorded in results:
        _insert_result(db, target, _encode(recorded))
    _store_stage(db, target, _stage_packed(run.get("cross_node")))
    # A run still "running" in its file is one whose process died (live ones wait).
    status = "interrupted" if run["status"] == "running" else run["status"]
    db.execute(
        "UPDATE runs SET status = ?, finished_at = ? WHERE id = ?",
        (status, run.get("finished_at"), target),
    )
    return target
