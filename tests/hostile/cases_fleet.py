"""``certify -i INVENTORY``: hostile inventories, host names and host variables.

Hosts are simulated nodes reached through ``--transport local`` (a ``gpuready_simulate``
host variable each); a healthy fleet certifies under the no-burn policy (exit 0).
Nothing here reaches a real host: ssh cases name hosts that cannot resolve.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.hostile.cases import Case, Check, Outcome, case
from tests.hostile.data_files import (
    combine,
    executable,
    inventory,
    mkdir,
    policy,
    simulated,
    write,
)

DB = ("--db", "{tmp}/history.db")
FLEET = (
    "certify",
    "-i",
    "{tmp}/inv.yml",
    "--transport",
    "local",
    "--burn",
    "0",
    "--policy",
    "{tmp}/policy.yml",
    *DB,
)
BURNED_FLEET = tuple("2s" if arg == "0" else arg for arg in FLEET)  # --burn 2s
NO_BURN = "require_burn: false\n"
HEALTHY = "healthy-8x-h100-sxm"
SLEEPER = "#!/bin/sh\nsleep 600\n"


def _host_files(tmp: Path) -> list[dict[str, object]]:
    return [
        json.loads(p.read_text(encoding="utf-8"))
        for p in sorted((tmp / "rep" / "hosts").glob("*.json"))
    ]


def _two_distinct_host_files(tmp: Path, _outcome: Outcome) -> None:
    names = [str(doc["hostname"]) for doc in _host_files(tmp)]
    assert sorted(names) == ["gpu@01", "gpu_01"], (
        f"hosts/ holds {names}: one host overwrote the other"
    )
    certificates = list((tmp / "rep" / "certificates").glob("*.json"))
    assert len(certificates) == 2, f"certificates/ holds {len(certificates)} files for 2 hosts"


def _went_through_local(tmp: Path, _outcome: Outcome) -> None:
    transports = [doc.get("transport") for doc in _host_files(tmp)]
    assert transports == ["local"], (
        f"the host was reached through {transports}, not its own variable"
    )


def _files_stay_in_report_dir(tmp: Path, _outcome: Outcome) -> None:
    allowed = {"inv.yml", "policy.yml", "history.db", "cwd", "rep"}
    strays = sorted(
        p.name
        for p in tmp.iterdir()
        if p.name not in allowed and not p.name.startswith("history.db")
    )
    assert not strays, f"a host name wrote outside the report dir: {strays}"
    outside = sorted(p.name for p in tmp.parent.iterdir() if p.name.startswith(("escape", "pwned")))
    assert not outside, f"a host name wrote outside the case's directory: {outside}"


def _verdicts(expected: dict[str, str]) -> Check:
    """Each host's verdict in hosts/<name>.json, as ``expected`` says."""

    def check(tmp: Path, _outcome: Outcome) -> None:
        found = {str(doc["hostname"]): str(doc["verdict"]) for doc in _host_files(tmp)}
        assert found == expected, f"verdicts {found}, expected {expected}"

    return check


def _forged_speed(label: str, tflops: float, honest: int, **expect: object) -> Case:
    """``honest`` healthy hosts beside one whose scenario reports ``tflops`` on every GPU."""
    hosts = {**simulated(*(f"gpu{n:02}" for n in range(1, honest + 1))), "liar": {}}
    hosts["liar"] = {"gpuready_simulate": "{tmp}/liar.json"}
    return case(
        f"fleet-forged-speed-{label}",
        *BURNED_FLEET,
        "--report-dir", "{tmp}/rep",
        setup=combine(
            inventory(hosts),
            write("liar.json", json.dumps(
                {"name": "liar", "extends": HEALTHY, "burn": {"tflops": tflops}})),
        ),
        timeout_s=90,
        **expect,  # type: ignore[arg-type]
    )  # fmt: skip


def _host(name: str, **host_vars: object) -> dict[str, dict[str, object]]:
    return {name: {"gpuready_simulate": HEALTHY, **host_vars}}


def _bad_var(label: str, err: str, **host_vars: object) -> Case:
    return case(
        f"fleet-var-{label}", *FLEET, exit=2, err=err, setup=inventory(_host("gpu01", **host_vars))
    )


def _yaml(label: str, text: str | bytes, err: str, **options: object) -> Case:
    """A hand-written YAML inventory (for values JSON cannot spell, such as .nan)."""
    return case(
        f"fleet-{label}",
        *FLEET,
        exit=2,
        err=err,
        setup=combine(policy(NO_BURN), write("inv.yml", text)),
        **options,  # type: ignore[arg-type]
    )


def _odd_name(label: str, name: str, *, exits: frozenset[int] = frozenset({0, 2})) -> Case:
    return case(
        f"fleet-hostname-{label}",
        *FLEET,
        "--report-dir",
        "{tmp}/rep",
        exit=exits,
        setup=inventory(simulated(name)),
        absent="pwned",
        check=_files_stay_in_report_dir,
    )


def _flag(flag: str, value: str) -> Case:
    label = value.lstrip("-") or "empty"
    return case(
        f"fleet-{flag.strip('-')}-{'neg' if value.startswith('-') else ''}{label}",
        *FLEET,
        flag,
        value,
        exit=2,
        err=flag,
        setup=inventory(simulated("gpu01")),
    )


HOST_VAR_YAML = "all:\n  hosts:\n    gpu01:\n      gpuready_simulate: healthy-8x-h100-sxm\n"

CASES: tuple[Case, ...] = (
    # Controls.
    case(
        "fleet-healthy-certifies",
        *FLEET,
        "--report-dir",
        "{tmp}/rep",
        exit=0,
        setup=inventory(simulated("gpu01", "gpu02")),
        exists=("rep/hosts/gpu01.json", "rep/hosts/gpu02.json", "rep/certificates/gpu01.json"),
    ),
    case(
        "fleet-one-host-fell-off-the-bus",
        *FLEET,
        exit=1,
        setup=inventory(
            {**simulated("gpu01"), **simulated("gpu02", scenario_name="gpu-fallen-off-bus")}
        ),
        out="gpu02",
    ),
    # A host's own gpuready_transport is honoured when the command line names none.
    case(
        "fleet-transport-host-var-local",
        "certify",
        "-i",
        "{tmp}/inv.yml",
        "--burn",
        "0",
        "--policy",
        "{tmp}/policy.yml",
        *DB,
        "--report-dir",
        "{tmp}/rep",
        exit=0,
        setup=inventory(_host("gpu01", gpuready_transport="local")),
        check=_went_through_local,
    ),
    # Host names become file names injectively, and never paths or commands.
    case(
        "fleet-hostnames-at-and-underscore",
        *FLEET,
        "--report-dir",
        "{tmp}/rep",
        exit=0,
        setup=inventory(simulated("gpu@01", "gpu_01")),
        check=_two_distinct_host_files,
    ),
    _odd_name("semicolon", "gpu;touch {tmp}/pwned"),
    _odd_name("command-substitution", "gpu$(touch {tmp}/pwned)"),
    _odd_name("backticks", "gpu`touch {tmp}/pwned`"),
    _odd_name("path-traversal", "../../escape"),
    _odd_name("absolute-path", "{tmp}/escape"),
    _odd_name("dot-dot", ".."),
    # Too long for a file name: certified and stored under another name, refused, or
    # measured but not stored (3) -- never an internal error.
    _odd_name("three-hundred-characters", "g" * 300, exits=frozenset({0, 2, 3})),
    _odd_name("newline", "gpu\n01"),
    _odd_name("terminal-escape", "gpu\u001b[2J01"),
    case(
        "fleet-ssh-address-metacharacters",
        "certify",
        "-i",
        "{tmp}/inv.yml",
        "--burn",
        "0",
        "--connect-timeout",
        "1",
        *DB,
        exit={2, 3},
        setup=inventory({"gpu01": {"ansible_host": "x;touch {tmp}/pwned"}}),
        absent="pwned",
    ),
    # Host variables that cannot be used.
    _bad_var("transport-unknown", "gpuready_transport", gpuready_transport="pigeon"),
    _bad_var("transport-number", "gpuready_transport", gpuready_transport=5),
    _bad_var("port-too-big", "ansible_port", ansible_port=99999),
    _bad_var("port-text", "ansible_port", ansible_port="ssh"),
    _bad_var("port-negative", "ansible_port", ansible_port=-1),
    _bad_var("port-zero", "ansible_port", ansible_port=0),
    _bad_var("gpuready-misspelt", "gpuready_requre_ecc", gpuready_requre_ecc=True),
    _bad_var("gpu-count-negative", "expected_gpu_count", gpuready_expected_gpu_count=-3),
    _bad_var("thresholds-text", "thresholds", gpuready_thresholds="x"),
    _bad_var("min-pcie-gen-huge", "min_pcie_gen", gpuready_min_pcie_gen=10**30),
    case(
        "fleet-var-valid-override-certifies",
        *FLEET,
        exit=0,
        setup=inventory(_host("gpu01", gpuready_min_pcie_gen=4)),
    ),
    case(
        "fleet-var-simulate-unknown",
        *FLEET,
        exit={2, 3},
        err="no-such-node",
        setup=inventory(_host("gpu01", gpuready_simulate="no-such-node")),
    ),
    case(
        "fleet-var-simulate-empty",
        *FLEET,
        exit={2, 3},
        err="gpuready_simulate",
        setup=inventory(_host("gpu01", gpuready_simulate="")),
    ),
    _yaml(
        "var-xid-window-nan",
        HOST_VAR_YAML + "      gpuready_xid_window_hours: .nan\n",
        "xid_window_hours",
    ),
    _yaml(
        "var-xid-window-inf",
        HOST_VAR_YAML + "      gpuready_xid_window_hours: .inf\n",
        "xid_window_hours",
    ),
    _yaml(
        "var-fail-xids-billions",
        HOST_VAR_YAML + "      gpuready_fail_xids: ['1-99999999999']\n",
        "fail_xids",
        child=True,
        timeout_s=60,
    ),
    _yaml(
        "var-duplicate-key",
        HOST_VAR_YAML + "      gpuready_simulate: gpu-fallen-off-bus\n",
        "gpuready_simulate",
    ),
    _yaml(
        "duplicate-host",
        HOST_VAR_YAML + "    gpu01:\n      gpuready_simulate: gpu-fallen-off-bus\n",
        "gpu01",
    ),
    _yaml("syntax-error", "all:\n  hosts: [gpu01,\n", "inv.yml"),
    _yaml("binary", b"\x00\x01\x02 not an inventory \xff\n", "inv.yml"),
    _yaml("no-hosts", "all:\n  children: {}\n", "inv.yml"),
    case(
        "fleet-inventory-empty-file",
        *FLEET,
        exit=2,
        err="inv.yml",
        setup=combine(policy(NO_BURN), write("inv.yml", b"")),
    ),
    case("fleet-inventory-missing", *FLEET, exit=2, err="inv.yml", setup=policy(NO_BURN)),
    case(
        "fleet-inventory-is-an-empty-directory",
        "certify",
        "-i",
        "{tmp}/inv.d",
        "--transport",
        "local",
        "--burn",
        "0",
        *DB,
        exit=2,
        err="inv.d",
        setup=mkdir("inv.d"),
    ),
    case(
        "fleet-limit-matches-nothing",
        *FLEET,
        "--limit",
        "nohost",
        exit=2,
        err="nohost",
        setup=inventory(simulated("gpu01")),
    ),
    case(
        "fleet-limit-empty",
        *FLEET,
        "--limit",
        "",
        exit=2,
        err="--limit",
        setup=inventory(simulated("gpu01")),
    ),
    # Dynamic inventories: scripts that hang, fail or print nonsense.
    case(
        "fleet-script-sleeps",
        "certify",
        "-i",
        "{tmp}/inv.sh",
        "--transport",
        "local",
        "--burn",
        "0",
        "--inventory-timeout",
        "2",
        *DB,
        exit={2, 3},
        err="inv.sh",
        setup=executable("inv.sh", SLEEPER),
        child=True,
        timeout_s=30,
    ),
    case(
        "fleet-directory-with-sleeping-script",
        "certify",
        "-i",
        "{tmp}/inv.d",
        "--transport",
        "local",
        "--burn",
        "0",
        "--inventory-timeout",
        "2",
        *DB,
        exit={2, 3},
        err="slow.sh",
        setup=combine(
            write("inv.d/hosts.yml", HOST_VAR_YAML),
            executable("inv.d/slow.sh", SLEEPER),
        ),
        child=True,
        timeout_s=30,
    ),
    case(
        "fleet-script-fails",
        "certify",
        "-i",
        "{tmp}/inv.sh",
        "--transport",
        "local",
        "--burn",
        "0",
        *DB,
        exit=2,
        err="inv.sh",
        setup=executable("inv.sh", "#!/bin/sh\necho 'cannot reach the CMDB' >&2\nexit 1\n"),
        child=True,
        timeout_s=60,
    ),
    case(
        "fleet-script-prints-garbage",
        "certify",
        "-i",
        "{tmp}/inv.sh",
        "--transport",
        "local",
        "--burn",
        "0",
        *DB,
        exit=2,
        err="inv.sh",
        setup=executable("inv.sh", "#!/bin/sh\necho 'hosts: maybe'\n"),
        child=True,
        timeout_s=60,
    ),
    case(
        "fleet-script-prints-a-list",
        "certify",
        "-i",
        "{tmp}/inv.sh",
        "--transport",
        "local",
        "--burn",
        "0",
        *DB,
        exit=2,
        err="inv.sh",
        setup=executable("inv.sh", "#!/bin/sh\necho '[1, 2, 3]'\n"),
        child=True,
        timeout_s=60,
    ),
    *(_flag("--inventory-timeout", value) for value in ("0", "-1", "nan", "abc")),
    *(_flag("--parallel", value) for value in ("0", "-3")),
    *(_flag("--deadline", value) for value in ("0", "-5s", "inf")),
    *(_flag("--connect-timeout", value) for value in ("nan", "0")),
    case(
        "fleet-with-simulate",
        *FLEET,
        "--simulate",
        HEALTHY,
        exit=2,
        err="--simulate",
        setup=inventory(simulated("gpu01")),
    ),
    case(
        "fleet-with-capture",
        *FLEET,
        "--capture",
        "{tmp}",
        exit=2,
        err="capture",
        setup=inventory(simulated("gpu01")),
    ),
    # A forged but plausible speed: two nodes are no fleet, three outvote it.
    _forged_speed("990-beside-one", 990.0, 1, exit=0, forbid="fleet.speed"),
    _forged_speed(
        "990-beside-two",
        990.0,
        2,
        exit=0,
        check=_verdicts({"gpu01": "CERTIFIED", "gpu02": "CERTIFIED", "liar": "CERTIFIED"}),
    ),
    # Beyond physics: the liar is not certified and its figures move no median.
    _forged_speed(
        "10000-beside-three",
        10_000.0,
        3,
        exit=1,
        out="inventory.figures_plausible",
        check=_verdicts(
            {
                "gpu01": "CERTIFIED",
                "gpu02": "CERTIFIED",
                "gpu03": "CERTIFIED",
                "liar": "NOT_CERTIFIED",
            }
        ),
    ),
    case(
        "fleet-bad-policy",
        *FLEET,
        exit=2,
        err="xid_window_hours",
        setup=combine(inventory(simulated("gpu01")), policy("xid_window_hours: -1\n")),
    ),
    case(
        "fleet-report-dir-under-a-file",
        *FLEET,
        "--report-dir",
        "{tmp}/afile/rep",
        exit={2, 3},
        err="afile",
        setup=combine(inventory(simulated("gpu01")), write("afile", "x\n")),
    ),
)
