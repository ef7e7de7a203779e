"""``gpuready drift``: baselines edited in SQLite, keys, certificate files, outputs, flags.

Every case starts from a copy of the session's certified baseline (two simulated
H100 hosts, h100-node-01 and gpu02, signed with ``{tmp}/key``). The hostile edit
that matters most hides a real drift: GPU 3 was capped to 500 W, and the stored
certificate was edited to say 500 W too. That must never read NO DRIFT.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.hostile.cases import Case, Outcome, case
from tests.hostile.data_files import (
    Setup,
    baseline_db,
    certificate_file,
    combine,
    drop_field,
    duplicate_hostname,
    executable,
    failed_attempt,
    flip_digest,
    foreign_sqlite,
    inventory,
    mkdir,
    nan_value,
    policy,
    set_every_gpu_power,
    set_field,
    set_gpu_power,
    simulated,
    stored_certificate,
    stored_copy,
    stored_sql,
    truncated_baseline_db,
    write,
)

DB = ("--db", "{tmp}/history.db")
HEALTHY = ("drift", "--simulate", "healthy-8x-h100-sxm", *DB)
CAPPED = ("drift", "--simulate", "one-gpu-power-capped", *DB)
FLEET = ("drift", "-i", "{tmp}/inv.yml", "--transport", "local", *DB)
HOST = "h100-node-01"
KEY = ("--sign-key", "{tmp}/key")

BASE = baseline_db()
CAP_HIDDEN = combine(BASE, stored_certificate(HOST, set_gpu_power(3, 500.0)))


def _stored(edit: Callable[[str], str]) -> Setup:
    return combine(BASE, stored_certificate(HOST, edit))


def _fleet(*, capped_gpu02: bool = False, **host_vars: object) -> Setup:
    hosts = simulated(HOST)
    hosts.update(
        simulated(
            "gpu02", scenario_name="one-gpu-power-capped" if capped_gpu02 else "healthy-8x-h100-sxm"
        )
    )
    for variables in hosts.values():
        variables.update(host_vars)
    return combine(BASE, inventory(hosts))


def _nhc_one_line(_tmp: Path, outcome: Outcome) -> None:
    lines = outcome.out.splitlines()
    assert len(lines) == 1, f"--nhc printed {outcome.out!r}"
    assert lines[0].startswith("gpuready:"), f"--nhc printed {outcome.out!r}"


def _json_not_certified(_tmp: Path, outcome: Outcome) -> None:
    verdicts = {node["hostname"]: node["verdict"] for node in json.loads(outcome.out)["nodes"]}
    assert verdicts.get(HOST) != "CERTIFIED", f"the edited baseline judged {verdicts}"


def _flag(flag: str, value: str, *, fleet: bool = False) -> Case:
    label = ("neg" + value[1:] if value.startswith("-") else value).replace(".", "_") or "empty"
    name = f"drift-{'fleet-' if fleet else ''}{flag.strip('-')}-{label}"
    if fleet:
        return case(name, *FLEET, flag, value, exit=2, err=flag, setup=_fleet())
    limit = 15.0 if flag == "--burn" else 30.0  # a burn accepted by mistake runs for days
    return case(name, *HEALTHY, flag, value, exit=2, err=flag, setup=BASE, timeout_s=limit)


CASES: tuple[Case, ...] = (
    # Controls: the baseline holds, and a real drift is found.
    case("drift-no-drift", *HEALTHY, exit=0, out="NO DRIFT", setup=BASE),
    case("drift-power-capped-drifts", *CAPPED, exit=1, setup=BASE),
    case("drift-sign-key-alone-accepted", *HEALTHY, *KEY, exit=0, out="NO DRIFT", setup=BASE),
    case(
        "drift-certificate-row-deleted-never-certified",
        *HEALTHY,
        exit=3,
        setup=combine(BASE, stored_sql("DELETE FROM certificates WHERE hostname = 'h100-node-01'")),
    ),
    # Stored baselines edited behind gpuready's back: drift, never NO DRIFT.
    case("drift-stored-edit-hides-power-cap", *CAPPED, exit=1, forbid="NO DRIFT", setup=CAP_HIDDEN),
    case(
        "drift-stored-edit-hides-power-cap-with-key",
        *CAPPED,
        *KEY,
        exit=1,
        forbid="NO DRIFT",
        setup=CAP_HIDDEN,
    ),
    case(
        "drift-stored-edit-hides-power-cap-nhc",
        *CAPPED,
        "--nhc",
        exit=1,
        setup=CAP_HIDDEN,
        check=_nhc_one_line,
    ),
    case(
        "drift-stored-edit-hides-power-cap-json",
        *CAPPED,
        "--json",
        exit=1,
        setup=CAP_HIDDEN,
        check=_json_not_certified,
    ),
    case(
        "drift-stored-power-edited",
        *HEALTHY,
        exit=1,
        forbid="NO DRIFT",
        setup=_stored(set_every_gpu_power(650.0)),
    ),
    case(
        "drift-stored-digest-flipped",
        *HEALTHY,
        exit=1,
        forbid="NO DRIFT",
        setup=_stored(flip_digest),
    ),
    case(
        "drift-stored-digest-removed",
        *HEALTHY,
        exit=1,
        forbid="NO DRIFT",
        setup=_stored(drop_field("digest")),
    ),
    case(
        "drift-stored-json-unparseable",
        *HEALTHY,
        exit=1,
        forbid="NO DRIFT",
        setup=_stored(lambda _t: "{"),
    ),
    case(
        "drift-stored-json-array",
        *HEALTHY,
        exit=1,
        forbid="NO DRIFT",
        setup=_stored(lambda _t: "[]"),
    ),
    case(
        "drift-stored-json-nan",
        *HEALTHY,
        exit=1,
        forbid="NO DRIFT",
        setup=_stored(nan_value("power_limit_default_w")),
    ),
    case(
        "drift-stored-duplicate-hostname",
        *HEALTHY,
        exit=1,
        forbid="NO DRIFT",
        setup=_stored(duplicate_hostname),
    ),
    case(
        "drift-stored-replayed-from-another-host",
        *HEALTHY,
        exit=1,
        forbid="NO DRIFT",
        setup=combine(BASE, stored_copy("gpu02", HOST)),
    ),
    case(
        "drift-stored-signature-removed-with-key",
        *HEALTHY,
        *KEY,
        exit=1,
        forbid="NO DRIFT",
        setup=_stored(set_field("signature", None)),
    ),
    case(
        "drift-stored-signature-forged-with-key",
        *HEALTHY,
        *KEY,
        exit=1,
        forbid="NO DRIFT",
        setup=_stored(set_field("signature", "0" * 64)),
    ),
    case(
        "drift-wrong-key",
        *HEALTHY,
        "--sign-key",
        "{tmp}/wrongkey",
        exit=1,
        forbid="NO DRIFT",
        setup=combine(BASE, write("wrongkey", "not the key that signed\n")),
    ),
    case(
        "drift-sign-key-missing",
        *HEALTHY,
        "--sign-key",
        "{tmp}/nokey",
        exit=2,
        err="nokey",
        setup=BASE,
    ),
    case(
        "drift-sign-key-empty-file",
        *HEALTHY,
        "--sign-key",
        "{tmp}/emptykey",
        exit=2,
        err="emptykey",
        setup=combine(BASE, write("emptykey", "\n")),
    ),
    case(
        "drift-sign-key-directory",
        *HEALTHY,
        "--sign-key",
        "{tmp}/keys",
        exit=2,
        err="keys",
        setup=combine(BASE, mkdir("keys")),
    ),
    # --certificate FILE instead of the store.
    case(
        "drift-certificate-file-with-key",
        *HEALTHY,
        "--certificate",
        "{tmp}/cert.json",
        *KEY,
        exit=0,
        setup=certificate_file(HOST),
    ),
    case(
        "drift-certificate-file-signed-without-key",
        *HEALTHY,
        "--certificate",
        "{tmp}/cert.json",
        exit=2,
        err="signed",
        setup=certificate_file(HOST),
    ),
    case(
        "drift-certificate-file-edited",
        *CAPPED,
        "--certificate",
        "{tmp}/cert.json",
        *KEY,
        exit=2,
        err="certificate",
        setup=certificate_file(HOST, set_gpu_power(3, 500.0)),
    ),
    case(
        "drift-certificate-file-duplicate-hostname",
        *HEALTHY,
        "--certificate",
        "{tmp}/cert.json",
        *KEY,
        exit=2,
        err="hostname",
        setup=certificate_file(HOST, duplicate_hostname),
    ),
    case(
        "drift-certificate-file-empty",
        *HEALTHY,
        "--certificate",
        "{tmp}/cert.json",
        exit=2,
        err="cert.json",
        setup=certificate_file(HOST, lambda _t: ""),
    ),
    case(
        "drift-certificate-file-missing",
        *HEALTHY,
        "--certificate",
        "{tmp}/nocert.json",
        exit=2,
        err="nocert.json",
        setup=BASE,
    ),
    case(
        "drift-certificate-file-is-a-directory",
        *HEALTHY,
        "--certificate",
        "{tmp}/certs",
        exit=2,
        err="certs",
        setup=combine(BASE, mkdir("certs")),
    ),
    # A --certificate file is the operator's pick: its seal is checked, not its name (an
    # inventory name is rarely the name a machine gives itself). Another node is told
    # apart by its GPUs' UUIDs and serials; these two simulated nodes share them, so the
    # intact certificate compares clean: no crash, no refusal, no false drift.
    case(
        "drift-certificate-of-another-host-with-the-same-gpus",
        *HEALTHY,
        "--certificate",
        "{tmp}/cert.json",
        *KEY,
        exit=0,
        out="NO DRIFT",
        setup=certificate_file("gpu02"),
    ),
    case(
        "drift-certificate-empty-string",
        *HEALTHY,
        "--certificate",
        "",
        exit=2,
        err="--certificate",
        setup=BASE,
    ),
    # This machine (no GPU) was never certified.
    case("drift-this-machine", "drift", *DB, exit=3, setup=BASE),
    case(
        "drift-this-machine-against-a-certificate",
        "drift",
        *DB,
        "--certificate",
        "{tmp}/cert.json",
        *KEY,
        exit={1, 3},
        forbid="NO DRIFT",
        setup=certificate_file(HOST),
    ),
    # --prom-file that cannot be written: one line, the drift itself is kept.
    case(
        "drift-prom-file-written",
        *HEALTHY,
        "--prom-file",
        "{tmp}/drift.prom",
        exit=0,
        setup=BASE,
        exists="drift.prom",
    ),
    case(
        "drift-prom-file-missing-directory",
        *HEALTHY,
        "--prom-file",
        "{tmp}/nodir/drift.prom",
        exit={2, 3},
        err="drift.prom",
        setup=BASE,
    ),
    case(
        "drift-prom-file-is-a-directory",
        *HEALTHY,
        "--prom-file",
        "{tmp}/promdir",
        exit=2,
        err="--prom-file",
        setup=combine(BASE, mkdir("promdir")),
    ),
    case(
        "drift-prom-file-under-a-file",
        *HEALTHY,
        "--prom-file",
        "{tmp}/afile/drift.prom",
        exit={2, 3},
        err="drift.prom",
        setup=combine(BASE, write("afile", "x\n")),
    ),
    case(
        "drift-prom-file-empty-string",
        *HEALTHY,
        "--prom-file",
        "",
        exit=2,
        err="--prom-file",
        setup=BASE,
    ),
    # Flags.
    *(_flag("--burn", value) for value in ("abc", "0.5s", "-1s", "99999h", "nan")),
    *(_flag("--deadline", value) for value in ("0", "-5s", "abc")),
    *(_flag("--connect-timeout", value) for value in ("nan", "-1")),
    *(_flag("--parallel", value) for value in ("0",)),
    case(
        "drift-json-and-nhc",
        *HEALTHY,
        "--json",
        "--nhc",
        exit=2,
        err=("--json", "--nhc"),
        setup=BASE,
    ),
    case(
        "drift-ssh-without-inventory",
        *HEALTHY,
        "--transport",
        "ssh",
        exit=2,
        err="--transport",
        setup=BASE,
    ),
    case(
        "drift-unknown-transport",
        *HEALTHY,
        "--transport",
        "pigeon",
        exit=2,
        err="--transport",
        setup=BASE,
    ),
    case(
        "drift-limit-without-inventory",
        *HEALTHY,
        "--limit",
        "gpu01",
        exit=2,
        err="--limit",
        setup=BASE,
    ),
    case(
        "drift-empty-simulate", "drift", *DB, "--simulate", "", exit=2, err="--simulate", setup=BASE
    ),
    case(
        "drift-empty-db",
        "drift",
        "--simulate",
        "healthy-8x-h100-sxm",
        "--db",
        "",
        exit=2,
        err="--db",
    ),
    case(
        "drift-bad-scenario-file",
        "drift",
        *DB,
        "--simulate",
        "{tmp}/scenario.json",
        exit=2,
        err="scenario.json",
        setup=combine(BASE, write("scenario.json", '{"name": "x", "nvml": {"gpu_count": "8"}}')),
    ),
    case(
        "drift-bad-policy",
        *HEALTHY,
        "--policy",
        "{tmp}/bad.yml",
        exit=2,
        err="drift_burn_drop",
        setup=combine(BASE, policy("thresholds:\n  drift_burn_drop: .nan\n", name="bad.yml")),
    ),
    case(
        "drift-db-is-a-directory",
        "drift",
        "--simulate",
        "healthy-8x-h100-sxm",
        "--db",
        "{tmp}/dbdir",
        exit=2,
        err="--db",
        setup=mkdir("dbdir"),
    ),
    case(
        "drift-db-not-sqlite",
        "drift",
        "--simulate",
        "healthy-8x-h100-sxm",
        "--db",
        "{tmp}/notes.db",
        exit=2,
        err="notes.db",
        setup=write("notes.db", "these are my notes\n" * 20),
    ),
    case(
        "drift-db-of-another-program",
        "drift",
        "--simulate",
        "healthy-8x-h100-sxm",
        "--db",
        "{tmp}/other.db",
        exit=2,
        err="other.db",
        setup=foreign_sqlite("other.db"),
    ),
    case(
        "drift-db-truncated", *HEALTHY, exit={2, 3}, err="history.db", setup=truncated_baseline_db()
    ),
    # Fleets.
    case("drift-fleet-no-drift", *FLEET, exit=0, setup=_fleet()),
    case("drift-fleet-sign-key-alone", *FLEET, *KEY, exit=0, setup=_fleet()),
    case(
        "drift-fleet-stored-edit-hides-power-cap",
        *FLEET,
        exit=1,
        out="gpu02",
        setup=combine(
            _fleet(capped_gpu02=True), stored_certificate("gpu02", set_gpu_power(3, 500.0))
        ),
    ),
    case(
        "drift-fleet-stored-unparseable",
        *FLEET,
        exit=1,
        out="gpu02",
        setup=combine(_fleet(), stored_certificate("gpu02", lambda _t: "not json")),
    ),
    case(
        "drift-fleet-transport-host-var-local",
        "drift",
        "-i",
        "{tmp}/inv.yml",
        *DB,
        exit=0,
        setup=_fleet(gpuready_transport="local"),
    ),
    case(
        "drift-fleet-never-certified-host",
        *FLEET,
        exit=3,
        setup=combine(BASE, inventory(simulated("gpu03"))),
    ),
    case(
        "drift-fleet-with-certificate-file",
        *FLEET,
        "--certificate",
        "{tmp}/cert.json",
        exit=2,
        err="--certificate",
        setup=combine(_fleet(), certificate_file(HOST)),
    ),
    case(
        "drift-fleet-with-simulate",
        *FLEET,
        "--simulate",
        "healthy-8x-h100-sxm",
        exit=2,
        err="--simulate",
        setup=_fleet(),
    ),
    case(
        "drift-fleet-prom-file-under-a-file",
        *FLEET,
        "--prom-file",
        "{tmp}/afile/fleet.prom",
        exit={2, 3},
        err="fleet.prom",
        setup=combine(_fleet(), write("afile", "x\n")),
    ),
    case(
        "drift-fleet-inventory-script-sleeps",
        "drift",
        "-i",
        "{tmp}/inv.sh",
        "--transport",
        "local",
        "--inventory-timeout",
        "2",
        *DB,
        exit={2, 3},
        err="inv.sh",
        setup=combine(BASE, executable("inv.sh", "#!/bin/sh\nsleep 600\n")),
        child=True,
        timeout_s=30,
    ),
    *(
        _flag(flag, value, fleet=True)
        for flag, value in (("--parallel", "-2"), ("--deadline", "nan"))
    ),
    # A later certification that did not certify the node revokes its certificate
    # (issue 30): never "no drift" against it, until a new certificate is issued.
    case(
        "drift-revoked-by-a-failed-certification",
        *HEALTHY,
        exit=1,
        out=("last certification on", "failed:", "power.limit"),
        forbid="no drift",
        setup=combine(BASE, failed_attempt(HOST)),
    ),
    case(
        "drift-revoked-nhc-drains",
        *HEALTHY,
        "--nhc",
        exit=1,
        out="gpuready: last certification on",
        check=_nhc_one_line,
        setup=combine(BASE, failed_attempt(HOST)),
    ),
    case(
        "drift-revoked-under-another-case-of-the-name",
        *HEALTHY,
        exit=1,
        out="last certification on",
        setup=combine(BASE, failed_attempt(HOST.upper())),
    ),
    case(
        "drift-revoked-certificate-file-copied-back",
        *HEALTHY,
        "--certificate",
        "{tmp}/cert.json",
        *KEY,
        exit=1,
        out="last certification on",
        setup=combine(BASE, certificate_file(HOST), failed_attempt(HOST)),
    ),
    case(
        "drift-revoked-fleet-only-the-failed-host",
        *FLEET,
        "--json",
        exit=1,
        check=_json_not_certified,
        setup=combine(_fleet(), failed_attempt(HOST)),
    ),
    # The control: an UNKNOWN in a certify run cut short judged nothing, revokes nothing.
    case(
        "drift-interrupted-attempt-revokes-nothing",
        *HEALTHY,
        exit=0,
        out="no drift",
        setup=combine(BASE, failed_attempt(HOST, interrupted=True)),
    ),
    # Provenance is sealed: removing it or calling a simulated node live breaks the seal.
    case(
        "drift-provenance-removed",
        *HEALTHY,
        exit=1,
        out="provenance",
        setup=_stored(drop_field("provenance")),
    ),
    case(
        "drift-provenance-edited-to-live",
        *HEALTHY,
        exit=1,
        forbid="no drift",
        setup=_stored(set_field("provenance", "live")),
    ),
)
