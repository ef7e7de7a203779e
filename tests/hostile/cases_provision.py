"""``gpuready provision``: only inputs refused before anything runs.

No case may reach a host. As a second guard, should a refusal regress, every run is in
``--check`` mode with a playbook of no tasks and no fact gathering, over a host at an
address reserved for documentation (192.0.2.1, TEST-NET-1): nothing connects anywhere.
"""

from __future__ import annotations

from tests.hostile.cases import Case, case
from tests.hostile.data_files import combine, executable, mkdir, symlink, write

NOOP_PLAYBOOK = "- hosts: all\n  gather_facts: false\n  tasks: []\n"
HOSTS = (
    "all:\n  hosts:\n    gpu01:\n      ansible_host: 192.0.2.1\n"
    "      ansible_ssh_timeout: 1\n      ansible_ssh_common_args: -o ConnectTimeout=1\n"
)
SAFE = combine(write("noop.yml", NOOP_PLAYBOOK), write("hosts.yml", HOSTS))
GUARD = ("--check", "--playbook", "{tmp}/noop.yml", "--db", "{tmp}/history.db")
PROVISION = ("provision", "-i", "{tmp}/hosts.yml", *GUARD)


def _refused(label: str, *argv: str, err: str | tuple[str, ...], setup: object = None) -> Case:
    return case(
        f"provision-{label}",
        *PROVISION,
        *argv,
        exit=2,
        err=err,
        setup=combine(SAFE, setup) if setup else SAFE,  # type: ignore[arg-type]
        absent="pwned",
    )


def _label(value: str) -> str:
    text = (
        ("neg" + value[1:] if value.startswith("-") else value)
        .replace("%", "pct")
        .replace(".", "_")
    )
    return text or "empty"


CASES: tuple[Case, ...] = (
    *(
        _refused(f"batch-{_label(v)}", "--batch", v, err="--batch")
        for v in ("0", "101%", "abc", "-1", "", "0%", "1e3")
    ),
    *(
        _refused(
            f"max-fail-{_label(v)}",
            "--batch",
            "1",
            "--max-fail-percentage",
            v,
            err="--max-fail-percentage",
        )
        for v in ("101", "abc", "-5", "1.5", "")
    ),
    _refused("extra-var-without-equals", "-e", "novalue", err="novalue"),
    _refused("extra-var-bad-name", "-e", "1abc=2", err="1abc"),
    _refused("extra-var-empty-name", "-e", "=5", err="-e"),
    _refused("extra-var-bad-yaml", "-e", "driver_version=[", err="-e"),
    _refused(
        "extra-var-python-tag",
        "-e",
        "x=!!python/object/apply:os.system ['touch {tmp}/pwned']",
        err="-e",
    ),
    _refused("extra-var-file-missing", "-e", "@{tmp}/missing.yml", err="missing.yml"),
    _refused(
        "extra-var-file-a-list",
        "-e",
        "@{tmp}/vars.yml",
        err="vars.yml",
        setup=write("vars.yml", "- a\n- b\n"),
    ),
    _refused(
        "extra-var-file-binary",
        "-e",
        "@{tmp}/vars.yml",
        err="vars.yml",
        setup=write("vars.yml", bytes(range(256))),
    ),
    _refused(
        "extra-var-file-duplicate-key",
        "-e",
        "@{tmp}/vars.yml",
        err="driver_version",
        setup=write("vars.yml", "driver_version: '550.90.07'\ndriver_version: '535.183.01'\n"),
    ),
    _refused("mirror-not-a-url", "--mirror", "mirror.example", err="--mirror"),
    _refused("mirror-empty", "--mirror", "", err="--mirror"),
    _refused("mirror-with-newline", "--mirror", "http://mirror.example/\nexit 1", err="--mirror"),
    _refused(
        "mirror-disagrees-with-extra-var",
        "--mirror",
        "http://a.example",
        "-e",
        "cuda_repository_url=http://b.example",
        err="--mirror",
    ),
    _refused("burn-without-certify", "--burn", "5m", err="--burn"),
    _refused("certify-burn-word", "--certify", "--burn", "abc", err="--burn"),
    _refused("certify-burn-half-second", "--certify", "--burn", "0.5s", err="--burn"),
    _refused("certify-burn-huge", "--certify", "--burn", "99999h", err="--burn"),
    _refused(
        "certify-matrix-size-huge",
        "--certify",
        "--burn",
        "5m",
        "--burn-matrix-size",
        "99999999",
        err="--burn-matrix-size",
    ),
    _refused(
        "certify-inject-bogus",
        "--certify",
        "--burn",
        "5m",
        "--burn-inject",
        "melt:0:1",
        err="melt:0:1",
    ),
    _refused(
        "certify-memory-fraction-nan",
        "--certify",
        "--burn",
        "5m",
        "--burn-memory-fraction",
        "nan",
        err="--burn-memory-fraction",
    ),
    _refused("limit-matches-nothing", "--limit", "nohost", err="nohost"),
    _refused("limit-empty", "--limit", "", err="--limit"),
    _refused("inventory-timeout-zero", "--inventory-timeout", "0", err="--inventory-timeout"),
    _refused("unknown-option", "--yes-really", err="--yes-really"),
    case("provision-no-inventory", "provision", *GUARD, exit=2, err="inventory", setup=SAFE),
    case(
        "provision-inventory-missing",
        "provision",
        "-i",
        "{tmp}/nohosts.yml",
        *GUARD,
        exit=2,
        err="nohosts.yml",
        setup=SAFE,
    ),
    case(
        "provision-inventory-empty-string",
        "provision",
        "-i",
        "",
        *GUARD,
        exit=2,
        err="inventory",
        setup=SAFE,
    ),
    case(
        "provision-inventory-duplicate-key",
        *PROVISION,
        exit=2,
        err="ansible_host",
        setup=combine(SAFE, write("hosts.yml", HOSTS + "      ansible_host: 192.0.2.2\n")),
    ),
    case(
        "provision-inventory-syntax-error",
        *PROVISION,
        exit=2,
        err="hosts.yml",
        setup=combine(SAFE, write("hosts.yml", "all:\n  hosts: [gpu01,\n")),
    ),
    case(
        "provision-inventory-bad-gpuready-var",
        *PROVISION,
        exit=2,
        err="gpuready_requre_ecc",
        setup=combine(SAFE, write("hosts.yml", HOSTS + "      gpuready_requre_ecc: true\n")),
    ),
    case(
        "provision-inventory-script-sleeps",
        "provision",
        "-i",
        "{tmp}/inv.sh",
        "--inventory-timeout",
        "2",
        *GUARD,
        exit={2, 3},
        err="inv.sh",
        setup=combine(SAFE, executable("inv.sh", "#!/bin/sh\nsleep 600\n")),
        child=True,
        timeout_s=30,
    ),
    case(
        "provision-playbook-missing",
        "provision",
        "-i",
        "{tmp}/hosts.yml",
        "--check",
        "--playbook",
        "{tmp}/nobook.yml",
        "--db",
        "{tmp}/history.db",
        exit=2,
        err="nobook.yml",
        setup=SAFE,
    ),
    case(
        "provision-playbook-empty-string",
        "provision",
        "-i",
        "{tmp}/hosts.yml",
        "--check",
        "--playbook",
        "",
        "--db",
        "{tmp}/history.db",
        exit=2,
        err="--playbook",
        setup=SAFE,
    ),
    case(
        "provision-playbook-is-a-directory",
        "provision",
        "-i",
        "{tmp}/hosts.yml",
        "--check",
        "--playbook",
        "{tmp}/books",
        "--db",
        "{tmp}/history.db",
        exit=2,
        err="--playbook",
        setup=combine(SAFE, mkdir("books")),
    ),
    case(
        "provision-empty-db",
        "provision",
        "-i",
        "{tmp}/hosts.yml",
        "--check",
        "--playbook",
        "{tmp}/noop.yml",
        "--db",
        "",
        exit=2,
        err="--db",
        setup=SAFE,
    ),
    # A secret on gpuready's command line is in the process list and shell history
    # already: refused with the fix (-K, or a vars file), the value never echoed.
    *(
        case(
            f"provision-secret-on-the-command-line-{label}",
            *PROVISION,
            "-e",
            item,
            exit=2,
            err=("-K", "@FILE"),
            forbid="hunter2",
            setup=SAFE,
        )
        for label, item in (
            ("become-password", "ansible_become_password=hunter2"),
            ("become-pass", "ansible_become_pass=hunter2"),
            ("ssh-pass", "ansible_ssh_pass=hunter2"),
            ("password", "ansible_password=hunter2"),
            ("vault-password", "my_vault_password=hunter2"),
            ("token", "API_TOKEN=hunter2"),
            ("secret", "client_secret=hunter2"),
            ("nested-in-a-mapping", "db={host: db1, password: hunter2}"),
            ("nested-in-a-list", "users=[{name: a, passwd: hunter2}]"),
            ("bad-yaml", "ansible_password=[hunter2"),
            ("empty-value", "ansible_become_password="),
        )
    ),
    # `gpuready init DIR`: the example inventory and pins, never over a file or through a link.
    case(
        "init-writes-the-site",
        "init",
        "{tmp}/site",
        exit=0,
        exists=("site/hosts.ini", "site/group_vars/all.yml"),
    ),
    case("init-no-directory", "init", exit=2, err="DIR"),
    case(
        "init-keeps-an-edited-inventory",
        "init",
        "{tmp}/site",
        setup=write("site/hosts.ini", "[gpu]\nmine\n"),
        exit=2,
        err=("already exist", "--force"),
        absent="site/group_vars/all.yml",
    ),
    case(
        "init-through-a-planted-link",
        "init",
        "{tmp}/site",
        "--force",
        setup=combine(mkdir("elsewhere"), symlink("site", "{tmp}/elsewhere")),
        exit=2,
        err="link",
        absent="elsewhere/hosts.ini",
    ),
    case("init-empty-directory-name", "init", "", exit=2, err="DIR"),
)
