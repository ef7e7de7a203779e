"""Node-reported and file-read strings that try to drive the operator's terminal.

One payload carries what a hostile node (or a doctored bundle, spool or database)
would plant: an OSC 52 clipboard write, an OSC 8 link disguised as text, a one-byte
C1 CSI, BEL, CR, a newline followed by a forged ``gpuready:`` line, a right-to-left
override, a Unicode line separator and DEL. It goes in as a host name, a GPU serial,
a driver version, a Slurm reason, a kernel log line and a file name, through every
command that shows them. Whatever each command prints, stdout and stderr hold no raw
control character (only their visible escapes, ``\\x1b``) and no line that starts
with the forged record; the HTML, JUnit and RMA files hold none in their text.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.hostile.cases import Case, Outcome, case
from tests.hostile.data_files import (
    POLICY_NO_BURN,
    Setup,
    Workspace,
    baseline_db,
    bundle,
    combine,
    meta,
    once,
    write,
)

FORGED = "gpuready: FORGED CERTIFIED"
PAYLOAD = (
    "evil\x1b]52;c;cm0gLXJmIC8K\x07"  # OSC 52: "rm -rf /" into the clipboard
    "\x1b]8;;https://evil.example/\x1b\\docs\x1b]8;;\x1b\\"  # OSC 8: a disguised link
    "\x9b2J"  # C1 CSI: clear the screen
    "\x07\r\n" + FORGED + "\u202egnp.exe\u2028\x7f"
)
HOST = "h100-node-01"  # the host the session's baseline certified

# Every character a terminal, a viewer or an XML parser would obey (tab and newline
# are layout; a newline inside a record is caught by the forged line instead).
RAW = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
# The reports and the Prometheus file (a capture's own files are data, kept as read).
REPORT_FILES = ("rep/**/*.html", "rep/**/*.xml", "rep/**/*.txt", "*.prom")

DB = ("--db", "{tmp}/history.db")
CERTIFY = ("certify", "--policy", "{tmp}/policy.yml", *DB)


def _raw_in(text: str) -> list[str]:
    return sorted({f"U+{ord(found):04X}" for found in RAW.findall(text)})


def _assert_shown_safely(tmp: Path, outcome: Outcome) -> None:
    """No raw control character and no forged record in the output or the report files."""
    for name, text in (("stdout", outcome.out), ("stderr", outcome.err)):
        raw = _raw_in(text)
        assert not raw, f"{name} carries raw {raw}:\n{text[-3000:]!r}"
        forged = [line for line in text.splitlines() if line.lstrip().startswith(FORGED)]
        assert not forged, f"{name} has a forged record line: {forged}"
    for pattern in REPORT_FILES:
        for path in sorted(tmp.glob(pattern)):
            raw = _raw_in(path.read_text(encoding="utf-8", errors="replace"))
            assert not raw, f"{path.relative_to(tmp)} carries raw {raw}"


def _shown_with(*names: str) -> Callable[[Path, Outcome], None]:
    """The safety check, and the payload shown (escaped) where it is the subject."""

    def check(tmp: Path, outcome: Outcome) -> None:
        _assert_shown_safely(tmp, outcome)
        both = outcome.out + outcome.err
        for name in names:
            assert name in both, f"the output does not show {name!r}:\n{both[-3000:]}"

    return check


SHOWN = _assert_shown_safely
ESCAPED_ESC = "\\x1b]52"  # what the payload's OSC 52 reads as once escaped
JSON_ESC = "\\u001b]52"  # and in JSON


def _scenario(host: Mapping[str, Any] | None = None, **nvml: Any) -> Setup:
    """``{tmp}/scenario.json``: the healthy H100 node with hostile host and NVML fields."""
    document: dict[str, Any] = {"name": "hostile-text", "extends": "healthy-8x-h100-sxm"}
    if host:
        document["host"] = dict(host)
    if nvml:
        document["nvml"] = nvml
    return combine(
        write("policy.yml", POLICY_NO_BURN),
        write("scenario.json", json.dumps(document, indent=2) + "\n"),
    )


def _certified_first(*argv: str) -> Setup:
    """Run ``gpuready certify`` once in the setup (its output is not the case's)."""

    def setup(ws: Workspace) -> None:
        from validator.cli.main import main

        args = [arg.replace("{tmp}", str(ws.tmp)) for arg in argv]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(args)
        if code not in (0, 1):
            raise AssertionError(f"the setup's certify {args} exited {code}")

    return setup


def _prom_shows_payload(tmp: Path, outcome: Outcome) -> None:
    """Shown safely, and the textfile's labels carry the payload as its escapes."""
    _assert_shown_safely(tmp, outcome)
    # visible() writes ESC as \x1b; the exposition format then escapes that backslash.
    assert "\\\\x1b]52" in (tmp / "g.prom").read_text()


HOSTILE_HOST = _scenario({"hostname": PAYLOAD})
HOSTILE_ALL = _scenario(
    {"hostname": PAYLOAD},
    driver_version="550.90.07" + PAYLOAD,
    gpu_overrides={"0": {"serial": "1650923041" + PAYLOAD}},
)
# The baseline's host, now reporting a driver (and serials) it was not certified with.
DRIFTED = combine(
    baseline_db(),
    _scenario(
        driver_version="550.90.07" + PAYLOAD,
        gpu_overrides={"0": {"serial": "1650923041" + PAYLOAD}},
    ),
)
SIMULATE = ("--simulate", "{tmp}/scenario.json", "--burn", "0")
REPORTS = ("--report-dir", "{tmp}/rep")
# GPU 2 has a row remap pending (drain and RMA): its evidence file names the serial.
HOSTILE_RMA = combine(
    write("policy.yml", POLICY_NO_BURN),
    write(
        "scenario.json",
        json.dumps(
            {
                "name": "hostile-rma",
                "extends": "row-remap-pending",
                "host": {"hostname": PAYLOAD},
                "nvml": {"gpu_overrides": {"2": {"serial": "1654423003026" + PAYLOAD}}},
            }
        ),
    ),
)
KEY = write("key", "0f" * 32 + "\n")
CERTIFIED_PAYLOAD = combine(
    HOSTILE_HOST,
    KEY,
    _certified_first(*CERTIFY, *SIMULATE, *REPORTS, "--sign-key", "{tmp}/key"),
)


def _only_certificate() -> Setup:
    """``{tmp}/cert.json``: the one certificate file the setup's certify run wrote."""

    def setup(ws: Workspace) -> None:
        (found,) = sorted((ws.tmp / "rep" / "certificates").glob("*.json"))
        (ws.tmp / "cert.json").write_bytes(found.read_bytes())

    return setup

_A10_BUNDLE = bundle(
    {
        "meta.json": meta(hostname=PAYLOAD),
        "dmesg.txt": lambda text: text + "[   7.000000] " + PAYLOAD + "\n",
        "nvidia-smi-q.txt": once(
            r"(Serial Number\s+: )1325221009692",
            r"\g<1>1325221009692" + PAYLOAD.replace("\\", "\\\\"),  # a literal backslash
        ),
    }
)

_FLEET = combine(
    HOSTILE_ALL,
    write(
        "inv.yml",
        json.dumps(
            {
                "all": {
                    "hosts": {
                        PAYLOAD: {"gpuready_simulate": "{tmp}/scenario.json"},
                        "gpu02": {"gpuready_simulate": "healthy-8x-h100-sxm"},
                    }
                }
            }
        ),
    ),
)

_PLAYBOOK = (
    "- hosts: all\n  gather_facts: false\n  tasks:\n"
    "    - name: a task that fails with what the host said\n"
    "      ansible.builtin.fail:\n"
    f"        msg: {json.dumps(PAYLOAD)}\n"
)
_LOCAL_HOSTS = (
    "all:\n  hosts:\n    gpu01:\n      ansible_connection: local\n"
    "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
)


# A finished Slurm submission: n1 never ran (Slurm's reason for it is the payload), n2's
# agent failed saying the payload; nothing is left to ask squeue.
_SPOOL = combine(
    write(
        "spool/4711/request.json",
        json.dumps(
            {
                "spool_version": 1,
                "nodes": ["n1", "n2"],
                "jobs": {"n2": "4711"},
                "skipped": {"n1": "Slurm will not run it: DRAINED " + PAYLOAD},
            }
        ),
    ),
    write("spool/4711/out/n2.rc", "3\n"),
    write("spool/4711/out/n2.stdout", ""),
    write("spool/4711/out/n2.stderr", "gpuready-agent: error: " + PAYLOAD + "\n"),
)


CASES: tuple[Case, ...] = (
    # certify: a scenario whose host name, driver and serials are hostile; its reports.
    case("certify-escape-scenario", *CERTIFY, *SIMULATE, *REPORTS, exit=1, setup=HOSTILE_ALL,
         check=_shown_with(ESCAPED_ESC), exists="rep/report.html"),
    case("certify-escape-scenario-json", *CERTIFY, *SIMULATE, "--json", exit=1,
         setup=HOSTILE_ALL, check=_shown_with(JSON_ESC)),
    case("certify-escape-signed-certificate", *CERTIFY, *SIMULATE, *REPORTS, "--sign-key",
         "{tmp}/key", exit=0, setup=combine(HOSTILE_HOST, KEY), check=_shown_with(ESCAPED_ESC),
         exists="rep/certificates/*.json"),
    case("certify-escape-prom-file", *CERTIFY, *SIMULATE, "--prom-file", "{tmp}/g.prom", exit=1,
         setup=HOSTILE_ALL, check=_prom_shows_payload, exists="g.prom"),
    case("certify-escape-rma-evidence", *CERTIFY, *SIMULATE, *REPORTS, exit=1,
         setup=HOSTILE_RMA, check=_shown_with(ESCAPED_ESC), exists="rep/rma/*.txt"),
    # certify: a bundle whose meta.json, kernel log and -q carry the payload.
    case("certify-escape-bundle", *CERTIFY, "--capture", "{tmp}/bundle", *REPORTS,
         exit={0, 1}, setup=_A10_BUNDLE, check=_shown_with(ESCAPED_ESC)),
    case("certify-escape-bundle-json", *CERTIFY, "--capture", "{tmp}/bundle", "--json",
         exit={0, 1}, setup=_A10_BUNDLE, check=_shown_with(JSON_ESC)),
    # certify: a fleet whose inventory names a node with the payload, and whose node reports
    # it too (progress lines, the closing table and the fleet's summary included).
    case("certify-escape-fleet", *CERTIFY, "-i", "{tmp}/inv.yml", "--transport", "local",
         "--burn", "0", *REPORTS, exit=1, setup=_FLEET, check=_shown_with(ESCAPED_ESC)),
    # A file name is the user's, but shown back in an error line all the same.
    case("certify-escape-file-name", *CERTIFY, "--simulate", "{tmp}/" + PAYLOAD, exit=2,
         err="does not exist", setup=write("policy.yml", POLICY_NO_BURN),
         check=_shown_with(ESCAPED_ESC)),
    # history: the rows of a run whose node reported the payload.
    case("history-escape-host", "history", *DB, exit=0, setup=CERTIFIED_PAYLOAD,
         check=_shown_with(ESCAPED_ESC)),
    case("history-escape-host-json", "history", *DB, "--json", exit=0,
         setup=CERTIFIED_PAYLOAD, check=_shown_with(JSON_ESC)),
    case("history-escape-one-host", "history", *DB, PAYLOAD, exit=0, setup=CERTIFIED_PAYLOAD,
         check=_shown_with(ESCAPED_ESC)),
    # drift: a node never certified, one certified as the payload, one drifted.
    case("drift-escape-never-certified", "drift", *SIMULATE, *DB, exit=3,
         setup=combine(baseline_db(), HOSTILE_HOST), check=_shown_with(ESCAPED_ESC)),
    case("drift-escape-certified-host", "drift", *SIMULATE, *DB, "--sign-key", "{tmp}/key",
         exit=0, setup=CERTIFIED_PAYLOAD, check=_shown_with(ESCAPED_ESC)),
    case("drift-escape-driver", "drift", *SIMULATE, *DB, exit=1, setup=DRIFTED,
         check=_shown_with(ESCAPED_ESC)),
    case("drift-escape-driver-nhc", "drift", *SIMULATE, *DB, "--nhc", exit=1, setup=DRIFTED,
         check=_shown_with("gpuready:")),
    case("drift-escape-never-certified-nhc", "drift", *SIMULATE, *DB, "--nhc", exit=1,
         setup=combine(baseline_db(), HOSTILE_HOST), check=_shown_with("gpuready:")),
    case("drift-escape-host-prom-file", "drift", *SIMULATE, *DB, "--sign-key", "{tmp}/key",
         "--prom-file", "{tmp}/g.prom", exit=0, setup=CERTIFIED_PAYLOAD,
         check=_shown_with(ESCAPED_ESC), exists="g.prom"),
    case("drift-escape-driver-json", "drift", *SIMULATE, *DB, "--json", exit=1, setup=DRIFTED,
         check=_shown_with(JSON_ESC)),
    case("drift-escape-prom-file", "drift", *SIMULATE, *DB, "--prom-file", "{tmp}/g.prom",
         exit=1, setup=DRIFTED, check=_shown_with(ESCAPED_ESC)),
    # verify-cert: a genuine, signed certificate of a node that calls itself the payload.
    case("verify-cert-escape-host", "verify-cert", "{tmp}/cert.json", "--sign-key",
         "{tmp}/key", exit=0, setup=combine(CERTIFIED_PAYLOAD, _only_certificate()),
         check=_shown_with(ESCAPED_ESC)),
    # capture: a simulated node's bundle, written and listed.
    case("capture-escape-host", "capture", "--simulate", "{tmp}/scenario.json", "{tmp}/out",
         exit=0, setup=HOSTILE_ALL, check=_shown_with("written")),
    # provision: the host's own words (a failed task's message) in the closing table.
    case("provision-escape-task-message", "provision", "-i", "{tmp}/hosts.yml", "--check",
         "--playbook", "{tmp}/hostile.yml", *DB, exit={1, 3},
         setup=combine(write("hosts.yml", _LOCAL_HOSTS), write("hostile.yml", _PLAYBOOK)),
         check=_shown_with(ESCAPED_ESC), timeout_s=120.0, child=True),
    # slurm collect: Slurm's reason for a node, and a node agent's last words.
    case("slurm-escape-spool-reason", "slurm", "collect", "4711", "--spool", "{tmp}/spool",
         *DB, *REPORTS, exit=3, setup=_SPOOL, check=_shown_with(ESCAPED_ESC, "DRAINED")),
)  # fmt: skip
