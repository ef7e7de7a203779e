"""``gpuready history``: bad limits and databases that are not gpuready's history."""

from __future__ import annotations

import json
from pathlib import Path

from tests.hostile.cases import Case, Outcome, case
from tests.hostile.data_files import (
    baseline_db,
    combine,
    failed_attempt,
    foreign_sqlite,
    future_schema_db,
    mkdir,
    truncated_baseline_db,
    write,
)

DB = ("--db", "{tmp}/history.db")
HISTORY = ("history", *DB)
BASE = baseline_db(key=False)


def _json_list(_tmp: Path, outcome: Outcome) -> None:
    rows = json.loads(outcome.out)
    assert isinstance(rows, list), f"history --json printed {outcome.out[:200]!r}"
    assert rows, "history --json printed no row for a database with runs"


def _empty_json_list(_tmp: Path, outcome: Outcome) -> None:
    assert json.loads(outcome.out) == [], f"history --json printed {outcome.out[:200]!r}"


def _limit(value: str) -> Case:
    label = ("neg" + value[1:] if value.startswith("-") else value).replace(".", "_") or "empty"
    return case(
        f"history-limit-{label}", *HISTORY, "--limit", value, exit=2, err="--limit", setup=BASE
    )


CASES: tuple[Case, ...] = (
    case("history-baseline", *HISTORY, exit=0, out="h100-node-01", setup=BASE),
    case(
        "history-one-host",
        *HISTORY,
        "gpu02",
        exit=0,
        out="gpu02",
        forbid="h100-node-01",
        setup=BASE,
    ),
    case("history-unknown-host", *HISTORY, "gpu99", exit=0, setup=BASE),
    case("history-host-with-wildcards", *HISTORY, "%", exit=0, forbid="h100-node-01", setup=BASE),
    case("history-host-with-quote", *HISTORY, "gpu'; DROP TABLE runs; --", exit=0, setup=BASE),
    case("history-json", *HISTORY, "--json", exit=0, setup=BASE, check=_json_list),
    case("history-limit-one", *HISTORY, "--limit", "1", exit=0, setup=BASE),
    case("history-no-database-yet", *HISTORY, exit=0, absent="history.db"),
    case(
        "history-no-database-yet-json",
        *HISTORY,
        "--json",
        exit=0,
        absent="history.db",
        check=_empty_json_list,
    ),
    case("history-zero-byte-database", *HISTORY, exit=0, setup=write("history.db", b"")),
    *(_limit(value) for value in ("1e20", "0", "-1", "abc", "", "99999999999999999999", "1.5")),
    case("history-empty-db", "history", "--db", "", exit=2, err="--db"),
    case(
        "history-db-is-a-directory",
        "history",
        "--db",
        "{tmp}/dbdir",
        exit=2,
        err="--db",
        setup=mkdir("dbdir"),
    ),
    case(
        "history-db-not-sqlite",
        "history",
        "--db",
        "{tmp}/notes.db",
        exit=2,
        err="notes.db",
        setup=write("notes.db", "these are my notes\n" * 20),
    ),
    case(
        "history-db-of-another-program",
        "history",
        "--db",
        "{tmp}/other.db",
        exit=2,
        err="other.db",
        setup=foreign_sqlite("other.db"),
    ),
    case(
        "history-db-truncated",
        *HISTORY,
        exit={2, 3},
        err="history.db",
        setup=truncated_baseline_db(),
    ),
    case("history-db-from-the-future", *HISTORY, exit=2, err="newer", setup=future_schema_db()),
    case("history-two-hosts", *HISTORY, "gpu01", "gpu02", exit=2, err="extra argument", setup=BASE),
    # Which certificates a later certification replaced or revoked, and where every
    # result came from (issue 30).
    case(
        "history-shows-the-revoked-certificate",
        *HISTORY,
        exit=0,
        out=("revoked by run", "simulate"),
        setup=combine(BASE, failed_attempt("h100-node-01")),
    ),
)
