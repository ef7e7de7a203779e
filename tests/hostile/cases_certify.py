"""``gpuready certify`` on one node: its flags, its outputs, and this machine (no GPU here).

A simulated healthy H100 node is the subject; ``--burn 0`` unless the burn is the
point (the node is then NOT CERTIFIED, exit 1, which a bad flag must not reach).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.hostile.cases import Case, Outcome, case
from tests.hostile.data_files import (
    POLICY_NO_BURN,
    Setup,
    Workspace,
    combine,
    foreign_sqlite,
    future_schema_db,
    mkdir,
    policy,
    symlink,
    truncated_baseline_db,
    write,
)

# The shortest burn the cases rely on to certify a simulated node; the one place to
# change should the shortest accepted burn grow.
BURN_OK = "2s"

DB = ("--db", "{tmp}/history.db")
SIM = ("certify", "--simulate", "healthy-8x-h100-sxm", *DB)
QUICK = (*SIM, "--burn", "0")
NO_BURN_POLICY = policy(POLICY_NO_BURN)
_KEYS = Path(__file__).resolve().parent.parent / "fixtures" / "keys"


CAPPED = (
    "certify",
    "--simulate",
    "one-gpu-power-capped",
    *DB,
    "--burn",
    "0",
    "--policy",
    "{tmp}/policy.yml",
    "--report-dir",
    "{tmp}/rep",
)


def _stale_certificate(name: str) -> Setup:
    """``{tmp}/rep/certificates/<name>``: the baseline's intact certificate of h100-node-01."""

    def setup(ws: Workspace) -> None:
        source = ws.baseline / "rep" / "certificates" / "h100-node-01.json"
        (ws.tmp / "rep" / "certificates").mkdir(parents=True, exist_ok=True)
        (ws.tmp / "rep" / "certificates" / name).write_bytes(source.read_bytes())

    return setup


def _victim_kept(tmp: Path, _outcome: Outcome) -> None:
    assert (tmp / "victim.json").read_text(encoding="utf-8") == "keep me\n"


def _stdout_is_json(_tmp: Path, outcome: Outcome) -> None:
    document = json.loads(outcome.out)
    assert document["nodes"], "the JSON report names no node"


def value_label(value: str) -> str:
    """A bad value as a case id part: ``-1s`` is ``neg1s``, ``[1]`` ``list_1``, ``""`` ``empty``."""
    kinds = {"[": "list_", "{": "map_", "'": "text_"}
    kind = "".join(kinds[char] for char in value[: len(value) - len(value.lstrip("[{'"))])
    inner = value.strip("[]{}'")
    if inner.startswith("-"):
        inner = "neg" + inner[1:]
    label = re.sub(r"[^A-Za-z0-9]+", "_", inner.replace("-", "to")).strip("_")
    return (kind + label).strip("_") or "empty"


def _flag(
    flag: str, values: tuple[str, ...], *, prefix: str, base: tuple[str, ...]
) -> tuple[Case, ...]:
    """One exit-2 case per bad value of ``flag``, each naming the flag."""
    rows = []
    for value in values:
        label = value_label(value)
        # A burn accepted by mistake would run for days: refused at once, or cut at 15 s.
        limit = 15.0 if flag == "--burn" else 30.0
        rows.append(
            case(f"{prefix}-{label}", *base, flag, value, exit=2, err=flag, timeout_s=limit)
        )
    return tuple(rows)


_BURN = _flag(
    "--burn",
    ("0.5s", "100ms", "99999h", "20000m", "-1s", "abc", "", "nan", "inf", "1e3", "5 m s"),
    prefix="certify-burn",
    base=SIM,
)
_MEMORY_FRACTION = _flag(
    "--burn-memory-fraction",
    ("nan", "inf", "0", "1.5", "-0.1", "half"),
    prefix="certify-memory-fraction",
    base=QUICK,
)
_MATRIX = _flag(
    "--burn-matrix-size",
    ("99999999", "15", "-1", "abc", "9223372036854775808", ""),
    prefix="certify-matrix-size",
    base=QUICK,
)
_DEADLINE = _flag(
    "--deadline",
    ("0", "-5s", "abc", "nan", "inf", "99999h", ""),
    prefix="certify-deadline",
    base=QUICK,
)
_CONNECT_TIMEOUT = _flag(
    "--connect-timeout",
    ("nan", "inf", "-1", "0", "abc", ""),
    prefix="certify-connect-timeout",
    base=QUICK,
)
_PARALLEL = _flag(
    "--parallel", ("0", "-1", "abc", "1e3", ""), prefix="certify-parallel", base=QUICK
)
_EMPTY = tuple(
    case(
        f"certify-empty-{flag.strip('-')}", "certify", *DB, "--burn", "0", flag, "", exit=2, err=err
    )
    for flag, err in (
        ("--simulate", "--simulate"),
        ("--capture", "--capture"),
        ("--policy", "--policy"),
        ("--report-dir", "--report-dir"),
        ("--sign-key", "--sign-key"),
        ("--ssh-config", "--ssh-config"),
        ("--known-hosts", "--known-hosts"),
        ("-i", "inventory"),
    )
)

CASES: tuple[Case, ...] = (
    # Controls: the same node certifies with a burn, and is not certified without one.
    case("certify-burn-ok-certifies", *SIM, "--burn", BURN_OK, exit=0, out="CERTIFIED"),
    case("certify-burn-zero-is-no-burn", *QUICK, exit=1, out="burn.run"),
    case(
        "certify-no-burn-policy-certifies",
        *QUICK,
        "--policy",
        "{tmp}/policy.yml",
        "--report-dir",
        "{tmp}/rep",
        exit=0,
        setup=NO_BURN_POLICY,
        exists=("rep/report.json", "rep/report.html", "rep/junit.xml", "rep/certificates/*.json"),
    ),
    case(
        "certify-not-certified-gets-no-certificate",
        *QUICK,
        "--report-dir",
        "{tmp}/rep",
        exit=1,
        exists=("rep/report.json",),
        absent=("rep/certificates/*",),
    ),
    case("certify-json-is-json", *QUICK, "--json", exit=1, check=_stdout_is_json),
    *_BURN,
    *_MEMORY_FRACTION,
    *_MATRIX,
    case(
        "certify-matrix-size-huge-before-burning",
        *SIM,
        "--burn",
        BURN_OK,
        "--burn-matrix-size",
        "99999999",
        exit=2,
        err="--burn-matrix-size",
    ),
    case("certify-burn-dtype-unknown", *QUICK, "--burn-dtype", "fp64", exit=2, err="--burn-dtype"),
    case(
        "certify-burn-backend-unknown",
        *QUICK,
        "--burn-backend",
        "cuda",
        exit=2,
        err="--burn-backend",
    ),
    # --burn-inject: refused before the burn when it names nothing that exists.
    case(
        "certify-inject-gpu-missing",
        *SIM,
        "--burn",
        BURN_OK,
        "--burn-inject",
        "flip:99:1",
        exit=2,
        err=("--burn-inject", "99"),
    ),
    case(
        "certify-inject-iteration-absurd",
        *SIM,
        "--burn",
        BURN_OK,
        "--burn-inject",
        "flip:0:2000000000",
        exit=2,
        err=("--burn-inject", "2000000000"),
    ),
    case(
        "certify-inject-kind-unknown",
        *SIM,
        "--burn",
        BURN_OK,
        "--burn-inject",
        "melt:0:1",
        exit=2,
        err="melt:0:1",
    ),
    case(
        "certify-inject-no-iteration",
        *SIM,
        "--burn",
        BURN_OK,
        "--burn-inject",
        "flip:0",
        exit=2,
        err="flip:0",
    ),
    # An injection the burn never reaches proves nothing: never CERTIFIED.
    case(
        "certify-inject-iteration-unreached",
        *SIM,
        "--burn",
        BURN_OK,
        "--burn-inject",
        "flip:0:100000",
        exit={1, 2},
    ),
    case(
        "certify-inject-flip-detected", *SIM, "--burn", BURN_OK, "--burn-inject", "flip:3:2", exit=1
    ),
    *_DEADLINE,
    *_CONNECT_TIMEOUT,
    *_PARALLEL,
    *_EMPTY,
    case(
        "certify-empty-db",
        "certify",
        "--simulate",
        "healthy-8x-h100-sxm",
        "--burn",
        "0",
        "--db",
        "",
        exit=2,
        err="--db",
    ),
    case(
        "certify-blank-scenario-name",
        "certify",
        *DB,
        "--burn",
        "0",
        "--simulate",
        "   ",
        exit=2,
        err="--simulate",
    ),
    case(
        "certify-unknown-scenario",
        "certify",
        *DB,
        "--burn",
        "0",
        "--simulate",
        "no-such-node",
        exit=2,
        err="no-such-node",
    ),
    case(
        "certify-missing-scenario-file",
        "certify",
        *DB,
        "--burn",
        "0",
        "--simulate",
        "{tmp}/missing.json",
        exit=2,
        err="missing.json",
    ),
    case(
        "certify-simulate-and-capture",
        *QUICK,
        "--capture",
        "{tmp}",
        exit=2,
        err=("--simulate", "--capture"),
    ),
    case("certify-limit-without-inventory", *QUICK, "--limit", "gpu01", exit=2, err="--limit"),
    case("certify-unknown-transport", *QUICK, "--transport", "pigeon", exit=2, err="--transport"),
    case("certify-unknown-option", *QUICK, "--burn-forever", exit=2, err="--burn-forever"),
    # A key file that cannot sign is refused before anything is measured.
    case(
        "certify-sign-key-missing",
        *QUICK,
        "--policy",
        "{tmp}/policy.yml",
        "--sign-key",
        "{tmp}/nokey",
        exit=2,
        err="nokey",
        setup=NO_BURN_POLICY,
    ),
    case(
        "certify-sign-key-empty",
        *QUICK,
        "--policy",
        "{tmp}/policy.yml",
        "--sign-key",
        "{tmp}/key",
        exit=2,
        err="key",
        setup=combine(NO_BURN_POLICY, write("key", "\n")),
    ),
    case(
        "certify-sign-key-directory",
        *QUICK,
        "--sign-key",
        "{tmp}/keys",
        exit=2,
        err="--sign-key",
        setup=mkdir("keys"),
    ),
    # A key file that is a key but cannot sign here: never taken as an HMAC secret.
    *(
        case(
            f"certify-sign-key-{label}",
            *QUICK,
            "--policy",
            "{tmp}/policy.yml",
            "--sign-key",
            f"{{tmp}}/{name}",
            exit=2,
            err=err,
            setup=combine(NO_BURN_POLICY, write(name, (_KEYS / name).read_bytes())),
        )
        for label, name, err in (
            ("public-key", "signer.pub", "public key"),
            ("rsa-private-key", "rsa", "Ed25519"),
            ("rsa-public-key", "rsa.pub", "Ed25519"),
            ("encrypted-without-passphrase", "encrypted", "GPUREADY_SIGN_KEY_PASSPHRASE"),
        )
    ),
    # Outputs that cannot be written.
    case(
        "certify-report-dir-is-a-file",
        *QUICK,
        "--report-dir",
        "{tmp}/afile",
        exit=2,
        err="--report-dir",
        setup=write("afile", "a file\n"),
    ),
    case(
        "certify-report-dir-under-a-file",
        *QUICK,
        "--report-dir",
        "{tmp}/afile/rep",
        exit={2, 3},
        err="afile",
        setup=write("afile", "a file\n"),
        absent=("afile/*",),
    ),
    case(
        "certify-db-is-a-directory",
        "certify",
        "--simulate",
        "healthy-8x-h100-sxm",
        "--burn",
        "0",
        "--db",
        "{tmp}/dbdir",
        exit=2,
        err="--db",
        setup=mkdir("dbdir"),
    ),
    case(
        "certify-db-not-sqlite",
        "certify",
        "--simulate",
        "healthy-8x-h100-sxm",
        "--burn",
        "0",
        "--db",
        "{tmp}/notes.db",
        exit=2,
        err="notes.db",
        setup=write("notes.db", "these are my notes, not a database\n" * 10),
    ),
    case(
        "certify-db-of-another-program",
        "certify",
        "--simulate",
        "healthy-8x-h100-sxm",
        "--burn",
        "0",
        "--db",
        "{tmp}/other.db",
        exit=2,
        err="other.db",
        setup=foreign_sqlite("other.db"),
    ),
    case(
        "certify-db-truncated", *QUICK, exit={2, 3}, err="history.db", setup=truncated_baseline_db()
    ),
    case("certify-db-from-the-future", *QUICK, exit=2, err="history.db", setup=future_schema_db()),
    case(
        "certify-db-under-a-file",
        "certify",
        "--simulate",
        "healthy-8x-h100-sxm",
        "--burn",
        "0",
        "--db",
        "{tmp}/afile/h.db",
        exit={2, 3},
        err="afile",
        setup=write("afile", "a file\n"),
    ),
    # This machine has no GPU and no driver: nothing can be judged.
    case("certify-this-machine", "certify", *DB, "--burn", "0", exit=3),
    case("certify-this-machine-json", "certify", *DB, "--burn", "0", "--json", exit=3),
    case(
        "certify-this-machine-bad-policy",
        "certify",
        *DB,
        "--burn",
        "0",
        "--policy",
        "{tmp}/policy.yml",
        exit=2,
        err="xid_window_hours",
        setup=policy("xid_window_hours: .nan\n"),
    ),
    # --report-dir keeps no certificate of a host the run did not certify (issue 30): an
    # older one left there reads "intact" to verify-cert. Host names in any case.
    *(
        case(
            f"certify-failed-removes-stale-certificate-{label}",
            *CAPPED,
            exit=1,
            setup=combine(NO_BURN_POLICY, _stale_certificate(name)),
            absent=f"rep/certificates/{name}",
            exists="rep/report.json",
        )
        for label, name in (("same", "h100-node-01.json"), ("upper", "H100-NODE-01.json"))
    ),
    # The control: a certified run keeps (rewrites) it.
    case(
        "certify-passed-keeps-its-certificate",
        *QUICK,
        "--policy",
        "{tmp}/policy.yml",
        "--report-dir",
        "{tmp}/rep",
        exit=0,
        setup=combine(NO_BURN_POLICY, _stale_certificate("h100-node-01.json")),
        exists="rep/certificates/h100-node-01.json",
    ),
    # A link planted in a certificate's place is refused, never followed nor its target
    # removed; the run is measured and recorded all the same (exit 3: not all stored).
    case(
        "certify-failed-stale-certificate-is-a-link",
        *CAPPED,
        exit=3,
        err="h100-node-01.json",
        setup=combine(
            NO_BURN_POLICY,
            write("victim.json", "keep me\n"),
            mkdir("rep/certificates"),
            symlink("rep/certificates/h100-node-01.json", "{tmp}/victim.json"),
        ),
        check=_victim_kept,
    ),
)
