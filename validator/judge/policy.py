"""The policy: what a node must satisfy beyond its SKU figures, and the thresholds.

Every field has a default, so an empty policy file (or none) judges a node against its
SKU alone. Version pins are strings: ``cuda_version: 12.10`` unquoted would be the float
12.1 in YAML, so floats are refused with a hint to quote them.

Decisions, in one place:

* ``expected_gpu_count`` None: expect the number of NVIDIA GPUs the PCI bus shows
  (``facts.pci_gpu_count``), so a GPU visible on the bus but missing from the driver fails.
  When the PCI count was not measured either, the count is reported as UNKNOWN (not
  required): counting NVML's GPUs against themselves would prove nothing.
* ``cuda_version`` is a floor: the CUDA version the driver reports must be at least this
  major.minor. That version is what the driver can run, and newer drivers run older CUDA;
  pin the driver itself with ``driver_version`` / ``driver_branch``.
* ``nvcc_version`` / ``cudnn_version`` match by leading components: "12.4" accepts
  "12.4.131" but not "12.40.1".
* ``fail_xids``: Azure azurehpc-health-checks' hardware list (48 56 57 58 62 63 64 65 68 69
  73 74 79 80 81 92 119 120), plus NVIDIA Xid catalog memory-containment errors 94 and 95,
  140 and the NVLink5 range 144-150. ``warn_xids`` None: every other Xid WARNs; a list: only
  those WARN and the rest are noted in the PASS message.
* ``power_limit_min_ratio`` 0.95: an uncapped GPU enforces exactly its default limit; 5%
  leaves room for rounding and small vendor trims, while a deliberate cap
  (``nvidia-smi -pl``) is almost always 10% or more below it.
* ``thermal_margin_min_c`` 10: an idle GPU sits 30-60 C below its slowdown point in the
  captures; less than 10 C at idle means cooling cannot absorb a load step.
* ``ecc_corrected_volatile_warn`` 10000: Azure's SRAM-correctable limit; corrected errors
  alone never fail (GCM sets CRITICAL only at 50,000,000).
* ``retired_pages_max`` 10 (Meta GCM), ``remapped_rows_uncorrectable_max`` 512 (Azure).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from validator.errors import PolicyError
from validator.judge import yamlfile

DEFAULT_FAIL_XIDS: tuple[int, ...] = (
    48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 94, 95, 119, 120, 140,
    *range(144, 151),
)  # fmt: skip


@dataclass(frozen=True)
class Thresholds:
    """Numeric limits. ``memory_tolerance_mib`` None means the SKU row's tolerance."""

    memory_tolerance_mib: int | None = None
    power_limit_min_ratio: float = 0.95
    thermal_margin_min_c: float = 10.0
    ecc_corrected_volatile_warn: int = 10000
    retired_pages_max: int = 10
    remapped_rows_uncorrectable_max: int = 512
    # Burn-in (see validator/judge/checks/burn.py for why these defaults).
    burn_speed_ratio: float = 0.65
    burn_relative_min: float = 0.90
    burn_power_min_ratio: float = 0.75
    burn_thermal_margin_c: float = 5.0
    burn_clock_sag_max: float = 0.30
    fleet_speed_min: float = 0.93  # share of the SKU's fleet median TFLOPS (judge/fleet.py)
    drift_burn_drop: float = 0.10  # burn TFLOPS may fall this share below the certificate


@dataclass(frozen=True)
class Policy:
    """What a node must satisfy; None means "not pinned" or "derive it" (see module doc)."""

    expected_gpu_count: int | None = None
    expected_model: str | None = None  # SKU id or exact product name
    driver_version: str | None = None  # exact, "550.90.07"
    driver_branch: str | None = None  # "550"
    cuda_version: str | None = None  # floor for the driver's CUDA version, "12.4"
    nvcc_version: str | None = None  # leading-component match, "12.4"
    cudnn_version: str | None = None  # leading-component match, "9.1"
    min_pcie_gen: int | None = None  # None: from the SKU
    min_pcie_width: int | None = None  # None: from the SKU
    persistence_mode_required: bool = True
    mig_mode: bool | None = None  # None: either
    xid_window_hours: float = 24.0
    fail_xids: tuple[int, ...] = DEFAULT_FAIL_XIDS
    warn_xids: tuple[int, ...] | None = None  # None: every Xid not in fail_xids
    require_ecc: bool = True
    require_fabric_manager: bool | None = None  # None: NVSwitches on the PCI bus, else SKU
    require_nvcc: bool = True
    require_cudnn: bool = True
    require_burn: bool = True  # a node is certified only after a burn-in
    thresholds: Thresholds = field(default_factory=Thresholds)


# ------------------------------------------------------------------ value parsers

_Parser = Callable[[object, str, str], Any]


def _type_name(value: object) -> str:
    return type(value).__name__


def _bad(origin: str, key: str, wanted: str, value: object) -> PolicyError:
    return PolicyError(f"{origin}: {key!r} must be {wanted}, got {value!r} ({_type_name(value)})")


def _int_between(low: int, high: int | None) -> _Parser:
    wanted = f"a whole number >= {low}" if high is None else f"a whole number {low}-{high}"

    def parse(value: object, key: str, origin: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(origin, key, wanted, value)
        if value < low or (high is not None and value > high):
            raise _bad(origin, key, wanted, value)
        return value

    return parse


def _number_between(low: float, high: float | None, *, open_low: bool) -> _Parser:
    if high is None:
        wanted = f"a number {'>' if open_low else '>='} {low:g}"
    else:
        wanted = f"a number {'above' if open_low else 'from'} {low:g} up to {high:g}"

    def parse(value: object, key: str, origin: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(origin, key, wanted, value)
        number = float(value)
        too_low = number <= low if open_low else number < low
        if too_low or (high is not None and number > high):
            raise _bad(origin, key, wanted, value)
        return number

    return parse


def _boolean(value: object, key: str, origin: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(origin, key, "true or false", value)
    return value


def _text(value: object, key: str, origin: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(origin, key, "a non-empty string", value)
    return value.strip()


def _version(pattern: str, example: str) -> _Parser:
    regex = re.compile(pattern)
    wanted = f"a quoted version string like {example!r}"

    def parse(value: object, key: str, origin: str) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # 550 or 12 is unambiguous; 12.10 as a float is not
        if not isinstance(value, str) or not regex.fullmatch(value.strip()):
            raise _bad(origin, key, wanted, value)
        return value.strip()

    return parse


_XID_RANGE = re.compile(r"(\d+)\s*-\s*(\d+)")


def _xid_list(value: object, key: str, origin: str) -> tuple[int, ...]:
    wanted = "a list of Xid numbers or ranges like '144-150'"
    if not isinstance(value, list):
        raise _bad(origin, key, wanted, value)
    xids: set[int] = set()
    for item in value:
        if isinstance(item, int) and not isinstance(item, bool) and item > 0:
            xids.add(item)
            continue
        match = _XID_RANGE.fullmatch(item.strip()) if isinstance(item, str) else None
        if match is None or int(match.group(1)) > int(match.group(2)):
            raise _bad(origin, key, wanted, item)
        xids.update(range(int(match.group(1)), int(match.group(2)) + 1))
    return tuple(sorted(xids))


def _optional(parser: _Parser) -> _Parser:
    def parse(value: object, key: str, origin: str) -> object:
        return None if value is None else parser(value, key, origin)

    return parse


_THRESHOLD_FIELDS: dict[str, _Parser] = {
    "memory_tolerance_mib": _optional(_int_between(0, None)),
    "power_limit_min_ratio": _number_between(0.0, 1.0, open_low=True),
    "thermal_margin_min_c": _number_between(0.0, None, open_low=False),
    "ecc_corrected_volatile_warn": _int_between(1, None),
    "retired_pages_max": _int_between(0, None),
    "remapped_rows_uncorrectable_max": _int_between(0, None),
    "burn_speed_ratio": _number_between(0.0, 1.0, open_low=True),
    "burn_relative_min": _number_between(0.0, 1.0, open_low=True),
    "burn_power_min_ratio": _number_between(0.0, 1.0, open_low=True),
    "burn_thermal_margin_c": _number_between(0.0, None, open_low=False),
    "burn_clock_sag_max": _number_between(0.0, 1.0, open_low=False),
    "fleet_speed_min": _number_between(0.0, 1.0, open_low=True),
    "drift_burn_drop": _number_between(0.0, 1.0, open_low=True),
}

_POLICY_FIELDS: dict[str, _Parser] = {
    "expected_gpu_count": _optional(_int_between(1, None)),
    "expected_model": _optional(_text),
    "driver_version": _optional(_version(r"\d+(\.\d+){1,3}", "550.90.07")),
    "driver_branch": _optional(_version(r"\d+", "550")),
    "cuda_version": _optional(_version(r"\d+(\.\d+)?", "12.4")),
    "nvcc_version": _optional(_version(r"\d+(\.\d+){0,2}", "12.4")),
    "cudnn_version": _optional(_version(r"\d+(\.\d+){0,2}", "9.1")),
    "min_pcie_gen": _optional(_int_between(1, 6)),
    "min_pcie_width": _optional(_int_between(1, 32)),
    "persistence_mode_required": _boolean,
    "mig_mode": _optional(_boolean),
    "xid_window_hours": _number_between(0.0, None, open_low=True),
    "fail_xids": _xid_list,
    "warn_xids": _optional(_xid_list),
    "require_ecc": _boolean,
    "require_fabric_manager": _optional(_boolean),
    "require_nvcc": _boolean,
    "require_cudnn": _boolean,
    "require_burn": _boolean,
}


def _unknown_key(origin: str, prefix: str, key: object, valid: list[str]) -> PolicyError:
    text = str(key)
    close = difflib.get_close_matches(text, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return PolicyError(
        f"{origin}: unknown key {prefix + text!r}{hint}; valid keys: {', '.join(valid)}"
    )


def _parse_section(
    data: Mapping[str, Any], fields: Mapping[str, _Parser], origin: str, prefix: str
) -> dict[str, Any]:
    valid = list(fields)
    out: dict[str, Any] = {}
    for key, value in data.items():
        parser = fields.get(key) if isinstance(key, str) else None
        if parser is None:
            raise _unknown_key(origin, prefix, key, valid)
        out[key] = parser(value, prefix + key, origin)
    return out


def policy_from_mapping(data: Mapping[str, Any], origin: str) -> Policy:
    """Build a policy from plain data (a policy file, or inventory variables).

    Args:
        data: policy keys as in a policy file; absent keys take their defaults.
        origin: where the data came from, to start every error message.

    Raises:
        PolicyError: on an unknown key (with the closest valid key), a wrong type or an
            inconsistent pair of pins; the message is one line.
    """
    valid_top = [*_POLICY_FIELDS, "thresholds"]
    for key in data:
        if key not in valid_top:
            raise _unknown_key(origin, "", key, valid_top)
    values = _parse_section(
        {k: v for k, v in data.items() if k != "thresholds"}, _POLICY_FIELDS, origin, ""
    )
    raw_thresholds = data.get("thresholds")
    if raw_thresholds is None:
        thresholds = Thresholds()
    elif isinstance(raw_thresholds, Mapping):
        thresholds = Thresholds(
            **_parse_section(raw_thresholds, _THRESHOLD_FIELDS, origin, "thresholds.")
        )
    else:
        raise _bad(origin, "thresholds", "a mapping of threshold keys", raw_thresholds)
    policy = Policy(**values, thresholds=thresholds)
    if (
        policy.driver_version
        and policy.driver_branch
        and policy.driver_version.split(".")[0] != policy.driver_branch
    ):
        raise PolicyError(
            f"{origin}: driver_version {policy.driver_version!r} is not on driver_branch "
            f"{policy.driver_branch!r}; set one of them"
        )
    return policy


def load_policy(path: str) -> Policy:
    """Read a policy YAML file. An empty file gives the defaults.

    Raises:
        PolicyError: missing or unreadable file, YAML syntax error (with the line), a
            document that is not a mapping, or any error of :func:`policy_from_mapping`.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError(f"{path}: policy file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise PolicyError(f"{path}: cannot read policy file: {reason}") from None
    try:
        data = yamlfile.load(text)
    except yamlfile.YAMLError as exc:
        line = yamlfile.error_line(exc)
        where = f"{path}: line {line}" if line is not None else path
        raise PolicyError(f"{where}: YAML syntax error: {yamlfile.error_problem(exc)}") from None
    if data is None:
        return Policy()
    if not isinstance(data, dict):
        raise PolicyError(
            f"{path}: line {yamlfile.top_line(text)}: the policy must be a mapping of keys "
            f"to values, got a {_yaml_kind(data)}"
        )
    return policy_from_mapping(data, path)


def _yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return _type_name(value)


def policy_digest(policy: Policy) -> str:
    """SHA-256 (hex) of the resolved policy as canonical JSON: same rules, same digest."""
    canonical = json.dumps(
        dataclasses.asdict(policy), sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
