"""``--policy FILE``: every field of validator/judge/policy.py with values no policy means.

Each bad policy is otherwise valid and lets the simulated healthy node certify without
a burn (``require_burn: false``): a value that slipped through would show as exit 0.
"""

from __future__ import annotations

from pathlib import Path

from tests.hostile.cases import Case, Outcome, case
from tests.hostile.cases_certify import value_label
from tests.hostile.data_files import mkdir, policy, symlink, write

BASE = (
    "certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "0",
    "--db", "{tmp}/history.db", "--policy", "{tmp}/policy.yml",
)  # fmt: skip
NO_BURN = "require_burn: false\n"

# field -> YAML values that are the wrong type, out of range, NaN, infinite or huge.
TOP_LEVEL: dict[str, tuple[str, ...]] = {
    "expected_gpu_count": (
        "eight", "-1", "0", ".nan", ".inf", "100000000000000000000", "8.5", "true",
    ),
    "expected_model": ("42", "''", "[H100]"),
    "driver_version": ("550.9", "abc", "'550'", "[550]", "'550.90.07; rm -rf /'"),
    "driver_branch": ("5x0", "550.1"),
    "cuda_version": ("12.10", "twelve"),
    "nvcc_version": ("12.4.x",),
    "cudnn_version": ("nine",),
    "min_pcie_gen": ("0", "7", "-1", ".nan", "five"),
    "min_pcie_width": ("0", "33", "1e9", ".inf"),
    "persistence_mode_required": ("maybe", "2"),
    "mig_mode": ("enabled",),
    "xid_window_hours": (".nan", ".inf", "-.inf", "-1", "0", "1e12", "a day", "[24]"),
    "fail_xids": (
        "[-1]", "[70000]", "'79'", "[[79]]", "['79-1']", "[.nan]", "[true]", "['79-']", "{a: 1}",
    ),
    "warn_xids": ("[99999]", "all"),
    "require_ecc": ("sure",),
    "require_fabric_manager": ("7",),
    "require_nvcc": ("[true]",),
    "require_cudnn": ("'no way'",),
    "thresholds": ("x", "[1]"),
}  # fmt: skip
THRESHOLDS: dict[str, tuple[str, ...]] = {
    "memory_tolerance_mib": ("-1", ".nan", "1e30", "lots"),
    "power_limit_min_ratio": ("0", "1.5", "-0.5", ".nan", ".inf", "high"),
    "thermal_margin_min_c": ("-1", "1000", ".nan", ".inf", "cool"),
    "ecc_corrected_volatile_warn": ("0", "-1", "1e30", ".nan"),
    "retired_pages_max": ("-1", ".nan", "ten"),
    "remapped_rows_uncorrectable_max": ("-1", "1000000000000000000000000000000"),
    "burn_speed_ratio": ("0", "2", ".nan"),
    "burn_relative_min": ("-1", ".inf"),
    "burn_power_min_ratio": ("1.01", ".nan"),
    "burn_thermal_margin_c": ("-5", ".nan"),
    "burn_clock_sag_max": ("-0.1", "1.1", ".nan"),
    "fleet_speed_min": ("0", ".nan"),
    "drift_burn_drop": ("2", ".nan"),
}


def _field_cases() -> tuple[Case, ...]:
    rows = []
    for field, values in TOP_LEVEL.items():
        for value in values:
            rows.append(
                case(
                    f"policy-{field}-{value_label(value)}",
                    *BASE,
                    exit=2,
                    err=field,
                    setup=policy(f"{NO_BURN}{field}: {value}\n"),
                )
            )
    for field, values in THRESHOLDS.items():
        for value in values:
            rows.append(
                case(
                    f"policy-thresholds-{field}-{value_label(value)}",
                    *BASE,
                    exit=2,
                    err=field,
                    setup=policy(f"{NO_BURN}thresholds:\n  {field}: {value}\n"),
                )
            )
    return tuple(rows)


def _laughs(levels: int = 9) -> str:
    """A billion-laughs YAML: each anchor a list of nine aliases of the one before."""
    lines = ["- &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels):
        aliases = ", ".join([f"*l{level - 1}"] * 9)
        lines.append(f"- &l{level} [{aliases}]")
    return "\n".join(lines)


def _bomb_under(key: str) -> str:
    body = _laughs().replace("\n", "\n  ")
    return f"{NO_BURN}{key}:\n  {body}\n"


def _short_stderr(_tmp: Path, outcome: Outcome) -> None:
    assert len(outcome.err) < 4096, f"the problem line is {len(outcome.err)} characters long"


CASES: tuple[Case, ...] = (
    # Controls: a policy that certifies, and one whose pin the node does not meet.
    case("policy-no-burn-certifies", *BASE, exit=0, setup=policy(NO_BURN)),
    case(
        "policy-valid-pins-certify",
        *BASE,
        exit=0,
        setup=policy(
            f"{NO_BURN}expected_gpu_count: 8\ndriver_version: '550.90.07'\n"
            "fail_xids: [79, '144-150']\n"
            "xid_window_hours: 8760\nthresholds:\n  retired_pages_max: 0\n"
        ),
    ),
    case(
        "policy-gpu-count-not-met", *BASE, exit=1, setup=policy(f"{NO_BURN}expected_gpu_count: 9\n")
    ),
    case(
        "policy-driver-pin-not-met",
        *BASE,
        exit=1,
        setup=policy(f"{NO_BURN}driver_version: '550.90.08'\n"),
    ),
    # An empty policy is documented to mean the defaults (a burn is then required).
    case("policy-zero-byte-file-is-defaults", *BASE, exit=1, setup=write("policy.yml", b"")),
    case("policy-comments-only-is-defaults", *BASE, exit=1, setup=policy("# nothing here\n\n")),
    *_field_cases(),
    case(
        "policy-fail-xids-range-billions",
        *BASE,
        exit=2,
        err="fail_xids",
        setup=policy(f"{NO_BURN}fail_xids: ['1-99999999999']\n"),
        child=True,
        timeout_s=30,
    ),
    case(
        "policy-warn-xids-range-billions",
        *BASE,
        exit=2,
        err="warn_xids",
        setup=policy(f"{NO_BURN}warn_xids: ['0-4294967296']\n"),
        child=True,
        timeout_s=30,
    ),
    case(
        "policy-driver-pin-off-branch",
        *BASE,
        exit=2,
        err="driver_branch",
        setup=policy(f"{NO_BURN}driver_version: '550.90.07'\ndriver_branch: '535'\n"),
    ),
    case(
        "policy-unknown-key",
        *BASE,
        exit=2,
        err="requre_ecc",
        setup=policy(f"{NO_BURN}requre_ecc: true\n"),
    ),
    case(
        "policy-unknown-threshold",
        *BASE,
        exit=2,
        err="burn_sped_ratio",
        setup=policy(f"{NO_BURN}thresholds:\n  burn_sped_ratio: 0.5\n"),
    ),
    case(
        "policy-duplicate-key",
        *BASE,
        exit=2,
        err="require_ecc",
        setup=policy(f"{NO_BURN}require_ecc: true\nrequire_ecc: false\n"),
    ),
    case(
        "policy-duplicate-threshold",
        *BASE,
        exit=2,
        err="retired_pages_max",
        setup=policy(f"{NO_BURN}thresholds:\n  retired_pages_max: 1\n  retired_pages_max: 1000\n"),
    ),
    case(
        "policy-billion-laughs-unknown-key",
        *BASE,
        exit=2,
        err="laughs",
        setup=policy(_bomb_under("laughs")),
        child=True,
        timeout_s=30,
    ),
    case(
        "policy-billion-laughs-in-a-field",
        *BASE,
        exit=2,
        err="expected_model",
        setup=policy(_bomb_under("expected_model")),
        child=True,
        timeout_s=30,
        check=_short_stderr,
    ),
    case(
        "policy-deeply-nested",
        *BASE,
        exit=2,
        err="policy.yml",
        setup=policy(f"{NO_BURN}expected_model: " + "[" * 50_000 + "]" * 50_000 + "\n"),
        child=True,
        timeout_s=30,
    ),
    case(
        "policy-python-object-tag",
        *BASE,
        exit=2,
        err="policy.yml",
        setup=policy(
            f"{NO_BURN}expected_model: !!python/object/apply:os.system ['touch {{tmp}}/pwned']\n"
        ),
        absent="pwned",
    ),
    case(
        "policy-python-name-tag",
        *BASE,
        exit=2,
        err="policy.yml",
        setup=policy(f"{NO_BURN}expected_model: !!python/name:os.system\n"),
    ),
    case(
        "policy-binary-tag-value",
        *BASE,
        exit=2,
        err="expected_model",
        setup=policy(f"{NO_BURN}expected_model: !!binary aGVsbG8=\n"),
    ),
    case(
        "policy-huge-key",
        *BASE,
        exit=2,
        err="policy.yml",
        setup=policy(f"{NO_BURN}{'k' * 1_000_000}: 1\n"),
        check=_short_stderr,
    ),
    case(
        "policy-is-a-directory",
        "certify",
        "--simulate",
        "healthy-8x-h100-sxm",
        "--burn",
        "0",
        "--db",
        "{tmp}/history.db",
        "--policy",
        "{tmp}/pdir",
        exit=2,
        err="pdir",
        setup=mkdir("pdir"),
    ),
    case(
        "policy-missing-file",
        "certify",
        "--simulate",
        "healthy-8x-h100-sxm",
        "--burn",
        "0",
        "--db",
        "{tmp}/history.db",
        "--policy",
        "{tmp}/nopolicy.yml",
        exit=2,
        err="nopolicy.yml",
    ),
    case(
        "policy-binary-file",
        *BASE,
        exit=2,
        err="policy.yml",
        setup=write("policy.yml", bytes(range(256)) * 4),
    ),
    case(
        "policy-latin1-file",
        *BASE,
        exit=2,
        err="policy.yml",
        setup=write("policy.yml", b"expected_model: caf\xe9\n"),
    ),
    case(
        "policy-syntax-error",
        *BASE,
        exit=2,
        err="line",
        setup=policy(f"{NO_BURN}thresholds: [1,\n"),
    ),
    case(
        "policy-tab-indented",
        *BASE,
        exit=2,
        err="policy.yml",
        setup=policy("thresholds:\n\tretired_pages_max: 1\n"),
    ),
    case("policy-is-a-list", *BASE, exit=2, err="mapping", setup=policy("- require_burn: false\n")),
    case("policy-is-a-string", *BASE, exit=2, err="mapping", setup=policy("just some words\n")),
    case("policy-is-a-number", *BASE, exit=2, err="mapping", setup=policy("42\n")),
    case(
        "policy-two-documents",
        *BASE,
        exit=2,
        err="policy.yml",
        setup=policy(f"{NO_BURN}---\nrequire_ecc: false\n"),
    ),
    # Bounds before parsing: no regular file, or too large, is refused unread.
    case(
        "policy-links-to-dev-zero",
        *BASE,
        exit=2,
        err=("policy.yml", "character device"),
        setup=symlink("policy.yml", "/dev/zero"),
        child=True,
        timeout_s=30,
    ),
    case(
        "policy-over-4-mib",
        *BASE,
        exit=2,
        err=("policy.yml", "larger than the 4 MiB"),
        setup=policy(NO_BURN + "#" * (4 << 20) + "\n"),
        child=True,
        timeout_s=30,
    ),
)
