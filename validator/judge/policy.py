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
* Error counters' growth during the burn-in: ``pcie_replay_growth_max`` 80 and
  ``nvlink_crc_growth_max`` 100 are DCGM's pcie plugin limits (``max_pcie_replays``, its CRC
  threshold); ``nvlink_recovery_growth_max`` 0 is DCGM's ``max_nvlink_recovery_errors``;
  ``nvlink_replay_growth_max`` 0 follows Meta GCM, whose NVLink CRC, replay and recovery
  thresholds are all 0. Totals since boot are never judged alone, only their growth.
* ``dcgm_level`` 0: no DCGM diagnostic, so nothing changes for a node without DCGM; 1-4 run
  ``dcgmi diag -r LEVEL -j`` after the burn-in, each test a finding (``dcgm.<test>``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from validator import fields, limits
from validator.error_tree import PolicyError
from validator.fields import Document, Field
from validator.judge import yamlfile
from validator.judge.container_policy import CONTAINER_FIELDS, ContainerPolicy
from validator.judge.gpudirect_policy import GPUDIRECT_FIELDS, GpudirectPolicy
from validator.judge.host_policy import HOST_FIELDS, HostPolicy, host_policy
from validator.judge.network_policy import POLICY_FIELD as NETWORK_POLICY_FIELD
from validator.judge.network_policy import NetworkExpectation
from validator.model import DEFAULT_XID_WINDOW_HOURS

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
    # Error counters' growth during the burn-in, per GPU (PCIe) or per link (NVLink).
    pcie_replay_growth_max: int = 80
    nvlink_crc_growth_max: int = 100  # flit and data CRC errors, each
    nvlink_replay_growth_max: int = 0
    nvlink_recovery_growth_max: int = 0
    # Interconnect bandwidth (validator/judge/checks/interconnect.py). A floor left None
    # comes from the SKU catalog; a GPU or pair below ``interconnect_sibling_min`` of its
    # node's median fails even above the floor.
    h2d_min_gbs: float | None = None
    d2h_min_gbs: float | None = None
    hbm_min_gbs: float | None = None
    p2p_min_gbs: float | None = None
    all_reduce_min_gbs: float | None = None  # busbw at the largest size measured
    interconnect_sibling_min: float = 0.85
    fleet_interconnect_min: float = 0.90  # share of the SKU's fleet median (judge/fleet.py)
    drift_interconnect_drop: float = 0.15  # may fall this share below the certificate


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
    xid_window_hours: float = DEFAULT_XID_WINDOW_HOURS
    fail_xids: tuple[int, ...] = DEFAULT_FAIL_XIDS
    warn_xids: tuple[int, ...] | None = None  # None: every Xid not in fail_xids
    require_ecc: bool = True
    require_fabric_manager: bool | None = None  # None: NVSwitches on the PCI bus, else SKU
    require_nvcc: bool = True
    require_cudnn: bool = True
    require_burn: bool = True  # a node is certified only after a burn-in
    dcgm_level: int = 0  # dcgmi diag -r LEVEL on the node; 0: none
    dcgm_timeout_s: float | None = None  # None: the level's own allowance
    # Measure copies, peers and NCCL after the burn-in; None: where the SKU has NVLink.
    interconnect: bool | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    # The HCAs' layout (validator.judge.network_policy); None: the catalog's for the SKU.
    network: NetworkExpectation | None = None
    # GPUDirect RDMA readiness (validator/judge/gpudirect_policy.py).
    gpudirect: GpudirectPolicy = field(default_factory=GpudirectPolicy)
    host: HostPolicy = field(default_factory=HostPolicy)  # validator.judge.host_policy
    # Containers: required, and the image to try (validator.judge.container_policy).
    container: ContainerPolicy = field(default_factory=ContainerPolicy)


# ------------------------------------------------------------------ declarations
#
# Every key once, with its kind and range (validator.fields). Ranges refuse what no real
# policy means, and what would otherwise break a check later: NaN or infinity, a time
# window beyond a year, an Xid range of billions of numbers.

_COUNT_MAX = 999_999  # counts, MiB and error thresholds: 0-999999
_XID_MAX = 65_535
_HOURS_MAX = 8760.0  # a year
_TEMPERATURE_MAX = 150.0  # degrees C; margins are 0 up to this
_XID_RANGE = re.compile(r"(\d{1,5})\s*-\s*(\d{1,5})")
_XIDS_WANTED = "a list of Xid numbers or ranges like '144-150'"
_DCGM_TIMEOUT_MAX_S = 86_400.0  # a day: level 4 runs for hours, never for days
_XID_ITEMS_MAX = _XID_MAX + 1  # more items than Xids must repeat some: a generated typo
_BANDWIDTH_MAX_GBS = 100_000.0  # GB/s: above any link or memory a GPU has (B200 HBM: 8,000)


def _unquoted_number(value: object) -> object:
    """550 or 12 as text: unambiguous unquoted (12.10 as a float is not, and is refused)."""
    if fields.is_int(value):
        return str(value)
    return value.strip() if isinstance(value, str) else value


def _stripped(value: str) -> str:
    return value.strip()


def _xids(items: list[object]) -> tuple[int, ...]:
    """Xid numbers and ``"a-b"`` ranges (0-65535 both) as one sorted tuple."""
    xids: set[int] = set()
    for index, item in enumerate(items):
        if isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= _XID_MAX:
            xids.add(item)
            continue
        match = _XID_RANGE.fullmatch(item.strip()) if isinstance(item, str) else None
        low, high = (int(match.group(1)), int(match.group(2))) if match else (1, 0)
        if not low <= high <= _XID_MAX:
            raise fields.Invalid(item, at=(index,))
        xids.update(range(low, high + 1))
    return tuple(sorted(xids))


def _count(name: str, low: int = 0, high: int = _COUNT_MAX, *, nullable: bool = False) -> Field:
    return Field(name, int, minimum=low, maximum=high, nullable=nullable)


def _ratio(name: str, *, zero: bool = False) -> Field:
    """A share: above 0 (from 0 when ``zero``) up to 1."""
    return Field(name, float, minimum=0.0, maximum=1.0, above=not zero, convert=float)


def _margin_c(name: str) -> Field:
    return Field(name, float, minimum=0.0, maximum=_TEMPERATURE_MAX, convert=float)


def _version(name: str, pattern: str, example: str) -> Field:
    return Field(
        name,
        str,
        wanted=f"a quoted version string like {example!r}",
        pattern=pattern,
        nullable=True,
        coerce=_unquoted_number,
    )


def _gbs(name: str) -> Field:
    return Field(
        name,
        float,
        minimum=0.0,
        maximum=_BANDWIDTH_MAX_GBS,
        above=True,
        convert=float,
        nullable=True,
    )


def _flag(name: str, *, nullable: bool = False) -> Field:
    return Field(name, bool, nullable=nullable)


def _xid_list(name: str, *, nullable: bool = False) -> Field:
    return Field(
        name,
        list,
        wanted=_XIDS_WANTED,
        nullable=nullable,
        max_items=_XID_ITEMS_MAX,
        convert=_xids,
    )


THRESHOLD_FIELDS = Document(
    (
        _count("memory_tolerance_mib", nullable=True),
        _ratio("power_limit_min_ratio"),
        _margin_c("thermal_margin_min_c"),
        _count("ecc_corrected_volatile_warn", low=1),
        _count("retired_pages_max"),
        _count("remapped_rows_uncorrectable_max"),
        _ratio("burn_speed_ratio"),
        _ratio("burn_relative_min"),
        _ratio("burn_power_min_ratio"),
        _margin_c("burn_thermal_margin_c"),
        _ratio("burn_clock_sag_max", zero=True),
        _ratio("fleet_speed_min"),
        _ratio("drift_burn_drop"),
        _count("pcie_replay_growth_max"),
        _count("nvlink_crc_growth_max"),
        _count("nvlink_replay_growth_max"),
        _count("nvlink_recovery_growth_max"),
        _gbs("h2d_min_gbs"),
        _gbs("d2h_min_gbs"),
        _gbs("hbm_min_gbs"),
        _gbs("p2p_min_gbs"),
        _gbs("all_reduce_min_gbs"),
        _ratio("interconnect_sibling_min"),
        _ratio("fleet_interconnect_min"),
        _ratio("drift_interconnect_drop"),
    ),
    wanted="a mapping of threshold keys",
)

POLICY_FIELDS = Document(
    (
        _count("expected_gpu_count", low=1, high=1024, nullable=True),
        Field("expected_model", str, non_empty=True, nullable=True, convert=_stripped),
        _version("driver_version", r"\d+(\.\d+){1,3}", "550.90.07"),
        _version("driver_branch", r"\d+", "550"),
        _version("cuda_version", r"\d+(\.\d+)?", "12.4"),
        _version("nvcc_version", r"\d+(\.\d+){0,2}", "12.4"),
        _version("cudnn_version", r"\d+(\.\d+){0,2}", "9.1"),
        _count("min_pcie_gen", low=1, high=6, nullable=True),
        _count("min_pcie_width", low=1, high=32, nullable=True),
        _flag("persistence_mode_required"),
        _flag("mig_mode", nullable=True),
        Field(
            "xid_window_hours", float, minimum=0.0, maximum=_HOURS_MAX, above=True, convert=float
        ),
        _xid_list("fail_xids"),
        _xid_list("warn_xids", nullable=True),
        _flag("require_ecc"),
        _flag("require_fabric_manager", nullable=True),
        _flag("require_nvcc"),
        _flag("require_cudnn"),
        _flag("require_burn"),
        _count("dcgm_level", high=4),
        Field(
            "dcgm_timeout_s",
            float,
            minimum=0.0,
            maximum=_DCGM_TIMEOUT_MAX_S,
            above=True,
            convert=float,
            nullable=True,
        ),
        _flag("interconnect", nullable=True),
        Field("thresholds", dict, nullable=True, document=THRESHOLD_FIELDS),
        NETWORK_POLICY_FIELD,
        Field("gpudirect", dict, nullable=True, document=GPUDIRECT_FIELDS),
        Field("host", dict, nullable=True, document=HOST_FIELDS),
        Field("container", dict, nullable=True, document=CONTAINER_FIELDS),
    ),
    wanted="a mapping of keys to values",
)


def policy_from_mapping(data: Mapping[str, Any], origin: str) -> Policy:
    """Build a policy from plain data (a policy file, or inventory variables).

    Args:
        data: policy keys as in a policy file; absent keys take their defaults.
        origin: where the data came from, to start every error message.

    Raises:
        PolicyError: on an unknown key (with the closest valid key), a wrong type, a value
            out of range or an inconsistent pair of pins; the message is one line.
    """
    return _policy(data, fields.Source(origin, error=PolicyError))


def _policy(data: object, source: fields.Source) -> Policy:
    values = POLICY_FIELDS.check(data, source)
    raw_thresholds = values.pop("thresholds", None)
    thresholds = Thresholds() if raw_thresholds is None else Thresholds(**raw_thresholds)
    raw_gpudirect = values.pop("gpudirect", None)
    gpudirect = GpudirectPolicy() if raw_gpudirect is None else GpudirectPolicy(**raw_gpudirect)
    host = host_policy(values.pop("host", None))
    raw_container = values.pop("container", None)
    container = ContainerPolicy() if raw_container is None else ContainerPolicy(**raw_container)
    policy = Policy(
        **values, thresholds=thresholds, gpudirect=gpudirect, host=host, container=container
    )
    if (
        policy.driver_version
        and policy.driver_branch
        and policy.driver_version.split(".")[0] != policy.driver_branch
    ):
        raise source.fail(
            ("driver_branch",),
            f"driver_version {policy.driver_version!r} is not on driver_branch "
            f"{policy.driver_branch!r}; set one of them",
        )
    return policy


def load_policy(path: str) -> Policy:
    """Read a policy YAML file. An empty file gives the defaults.

    Raises:
        PolicyError: missing or unreadable file, YAML syntax error (with the line), a key
            given twice, a document that is not a mapping, or any error of
            :func:`policy_from_mapping` (with the line and column of the bad key or value).
    """
    try:
        text = limits.read_text(path, limits.DOCUMENT_BYTES)
    except FileNotFoundError:
        raise PolicyError(f"{path}: policy file not found") from None
    except limits.OverLimitError as exc:
        raise PolicyError(f"{path}: cannot read policy file: it {exc}; give a YAML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise PolicyError(f"{path}: cannot read policy file: {reason}") from None
    source = fields.Source(path, error=PolicyError)
    try:
        data, marks = yamlfile.load_located(text)
    except fields.LoadError as exc:
        if not exc.syntax:
            raise source.loaded(exc) from None
        where = f"{path}: line {exc.line}" if exc.line is not None else path
        raise PolicyError(f"{where}: YAML syntax error: {exc.problem}") from None
    if data is None:
        return Policy()
    if not isinstance(data, dict):
        line = marks.at(())
        raise PolicyError(
            f"{path}: line {line[0] if line else 1}: the policy must be a mapping of keys "
            f"to values, got a {_yaml_kind(data)}"
        )
    return _policy(data, dataclasses.replace(source, marks=marks))


def _yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


@functools.lru_cache(maxsize=1)
def _family_defaults() -> dict[str, object]:
    plain = dataclasses.asdict(Policy())
    return {key: plain[key] for key in ("network", "gpudirect", "host", "container")}


def policy_digest(policy: Policy) -> str:
    """SHA-256 (hex) of the resolved policy as canonical JSON: same rules, same digest."""
    data = dataclasses.asdict(policy)
    # The families issue 34 added, at their defaults, leave a policy the digest it had.
    defaults = _family_defaults()
    for key, default in defaults.items():
        if data.get(key) == default:
            data.pop(key, None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
