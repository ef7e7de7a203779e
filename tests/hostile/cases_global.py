"""``gpuready`` itself: --help, --version, and commands or options that do not exist."""

from __future__ import annotations

from tests.hostile.cases import Case, case

DB = ("--db", "{tmp}/history.db")

COMMANDS = (
    "certify", "drift", "capture", "history", "verify-cert", "provision", "scenarios", "config",
    "init",
)  # fmt: skip

CASES: tuple[Case, ...] = (
    case("global-help", "--help", exit=0, out="Usage: gpuready"),
    case("global-help-short", "-h", exit=0, out="Usage: gpuready"),
    case("global-version", "--version", exit=0, out="gpuready"),
    *(case(f"global-{name}-help", name, "--help", exit=0, out="Usage:") for name in COMMANDS),
    # Bare `gpuready` prints its help (not one line), as click groups do.
    case("global-no-arguments", exit=2, out="Commands:", one_line=False),
    case("global-unknown-command", "certfy", exit=2, err="certfy"),
    case("global-unknown-option", "--frobnicate", exit=2, err="--frobnicate"),
    case("global-version-with-junk", "--version=3", exit=2, err="--version"),
    # `gpuready scenarios` takes nothing.
    case(
        "scenarios-lists-the-built-ins",
        "scenarios",
        exit=0,
        out=("healthy-8x-h100-sxm", "no-gpu-driver"),
    ),
    case(
        "scenarios-extra-argument", "scenarios", "healthy-8x-h100-sxm", exit=2, err="extra argument"
    ),
    case("scenarios-unknown-option", "scenarios", "--json", exit=2, err="--json"),
    # `gpuready config`: each setting checked as a command would check it; it opens no history.
    case(
        "config-shows-the-settings",
        "config",
        *DB,
        exit=0,
        out=("history.db  command line --db", "precedence:"),
        absent="history.db",
    ),
    case("config-bad-transport", "config", *DB, "--transport", "telnet", exit=2, err="--transport"),
    case("config-key-material", "config", *DB, "--sign-key", "-----BEGIN", exit=2, err="material"),
    case("config-extra-argument", "config", *DB, "db", exit=2, err="extra argument"),
)
