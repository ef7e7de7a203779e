"""Simulated nodes: scenario files that describe a whole GPU host.

A scenario drives both halves of a node: the fake NVML
(:class:`validator.node.sim.fake_nvml.FakeNvml`) and the host around it
(:class:`ScenarioSystem`, a :class:`validator.node.system.System`), so the
collector and every check run on it exactly as on a live host.

Format (JSON, one object; every key but ``name`` is optional)::

    {
      "name": "healthy-8x-h100-sxm",
      "description": "One line of summary; more lines may follow.",
      "extends": "another-built-in",       # deep-merged under this file
      "now": "2026-01-01T12:00:00+00:00",  # the host clock (ISO 8601)
      "host": {"hostname": "...", "os_name": "Ubuntu 22.04.4 LTS",
               "kernel": "5.15.0-112-generic", "uptime_s": 86400.5},
      "nvml": { see validator.node.sim.fake_nvml },
      "files": {"/proc/driver/nvidia/version": "NVRM version: ...",
                "/etc/secret": {"error": "permission_denied"}},
      "commands": {"nvidia-smi": {"rc": 0, "stdout": "...", "stderr": ""},
                   "nvcc --version": {...}, "dmesg": {...}, "dpkg-query": {...}},
      "pci": {"gpus": 8, "nvswitches": 4},
      "interconnect": { see validator.node.sim.simulated_bandwidth }
    }

Merging: with ``extends``, objects merge key by key (recursively), any other value
replaces the inherited one, and ``null`` removes the inherited key (a file, a command,
a GPU field). ``nvml.gpu_overrides`` (by GPU index) applies over ``nvml.gpu`` after it.

Synthesised host files: ``/etc/os-release`` from ``host.os_name``,
``/proc/sys/kernel/osrelease`` from ``host.kernel``, ``/proc/uptime`` from
``host.uptime_s`` and, under ``/sys/bus/pci/devices/<address>/``, ``vendor``
and ``class`` for ``pci.gpus`` GPUs (0x10de, 0x030200; addresses from the NVML
bus ids), ``pci.nvswitches`` NVSwitches (0x10de, 0x068000) and two
non-NVIDIA host devices. A file given in ``files`` wins over a synthesised one.

Passthrough: ``"passthrough": {"paths": [prefixes], "commands": [programs]}``
hands files under those path prefixes and those programs to the real host
(a simulated GPU on a test host whose CUDA toolkit and cuDNN were really
provisioned); they win over ``files`` and ``commands``.

Commands: ``run(argv)`` looks up ``" ".join(argv)``, then the same with the program's
directory dropped (``/usr/local/cuda/bin/nvcc --version`` finds ``nvcc --version``), then
keys holding a ``*`` as shell patterns over that line (``dpkg-query *``); absent ones exit 127.
``{"generated": "cdi-list"}`` or ``"smi-list"`` makes the output from the scenario's GPUs
(validator.node.sim.simulated_container).
"""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import importlib.resources
import os
import posixpath
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from validator.error_tree import ScenarioError
from validator.fields import (
    Document,
    Field,
    Invalid,
    LoadError,
    Source,
    excerpt,
    load_json,
    quoted,
    unknown,
)
from validator.limits import (
    SCENARIO_BYTES,
    TELEMETRY_CSV_ROWS,
    OverLimitError,
    read_bounded,
    read_lines,
)
from validator.model import (
    CLOCK_EVENT_REASONS,
    RECOVERY_ACTIONS,
    ErrorCounters,
    GpuFacts,
    TelemetrySample,
)
from validator.node.sim.fake_nvml import (
    COMPUTE_MODES,
    ERROR_CODES,
    FABRIC_STATES,
    GPU_KEYS,
    NOT_SUPPORTED_MARKER,
    NVLINK_ERROR_COUNTERS,
    NVLINK_SPEED_SOURCES,
    FakeNvml,
    default_bus_id,
)
from validator.node.sim.fake_processes import PROCESSES_FIELD
from validator.node.sim.simulated_bandwidth import check_interconnect_section
from validator.node.sim.simulated_burn import check_burn_section
from validator.node.sim.simulated_container import GENERATED, generated_output
from validator.node.system import NOT_FOUND_SUFFIX, CommandResult, LiveSystem

# Through importlib.resources so the built-ins load from a wheel and from the
# agent's zipapp alike.
if TYPE_CHECKING:
    from importlib.abc import Traversable

SCENARIO_DIR = importlib.resources.files("validator.node.scenarios")
DEFAULT_NOW = "2026-01-01T12:00:00+00:00"

TOP_KEYS = frozenset(
    {
        "name",
        "description",
        "extends",
        "now",
        "host",
        "nvml",
        "files",
        "commands",
        "pci",
        "burn",
        "interconnect",
        "passthrough",
    }
)
HOST_KEYS = frozenset({"hostname", "os_name", "kernel", "uptime_s"})
PCI_KEYS = frozenset({"gpus", "nvswitches"})
COMMAND_KEYS = frozenset({"rc", "stdout", "stderr", "generated"})
PASSTHROUGH_KEYS = frozenset({"paths", "commands"})
_GPU_HINTS = typing.get_type_hints(GpuFacts)  # resolved once: they cost most of this import


def _gpu_keys_holding(kind: type) -> frozenset[str]:
    """Per-GPU scenario keys whose GpuFacts field holds a ``kind`` (when measured)."""
    hints = _GPU_HINTS.items()  # key: a GpuFacts field name, hint: its type
    return frozenset(k for k, hint in hints if k in GPU_KEYS and kind in typing.get_args(hint))


_INT_FIELDS = _gpu_keys_holding(int)
_NUMBER_FIELDS = _gpu_keys_holding(float)
_BOOL_FIELDS = _gpu_keys_holding(bool) | {"lost"}
# compute_mode and fabric_state are strings too, checked against their own word lists.
_TEXT_FIELDS = _gpu_keys_holding(str) | {"pci_device_id"}
_REASON_NAMES = frozenset(name for _, name in CLOCK_EVENT_REASONS)

# Non-NVIDIA devices every simulated host has: a host bridge and an ISA bridge.
_HOST_PCI_DEVICES = (("0000:00:00.0", "0x8086", "0x060000"), ("0000:00:1f.0", "0x8086", "0x060100"))


# ---------------------------------------------------------------- loading

MAX_FILE_BYTES = SCENARIO_BYTES  # a scenario file (built-ins are a few KiB)
MAX_DEPTH = 32  # nesting of objects and lists (the built-ins need 6)


def builtin_names() -> list[str]:
    """The names of the built-in scenarios, sorted."""
    return sorted(
        entry.name[: -len(".json")]
        for entry in SCENARIO_DIR.iterdir()
        if entry.name.endswith(".json")
    )


def describe(name: str) -> str:
    """The first line of a scenario's description.

    Raises:
        ScenarioError: when the name or file cannot be loaded.
    """
    description = load_scenario(name).description
    lines = description.strip().splitlines()
    return lines[0] if lines else ""


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a scenario file by path.

    Raises:
        ScenarioError: with one line naming the problem and the fix.
    """
    if name_or_path in builtin_names():
        raw = _read_json(SCENARIO_DIR / f"{name_or_path}.json")
        where = f"built-in scenario {name_or_path!r}"
        if raw.get("name", name_or_path) != name_or_path:
            raise ScenarioError(
                f"{where}: its name is {raw.get('name')!r}; name it {name_or_path!r} like its file"
            )
        path = None
    elif _looks_like_path(name_or_path):
        path = Path(name_or_path)
        raw = _read_json(path)
        where = f"scenario file {path}"
    else:
        raise ScenarioError(
            f"unknown scenario {name_or_path!r}: run `gpuready scenarios` to list the built-in "
            "ones, or give a path to a scenario file"
        )
    raw = _anchor_telemetry(raw, path.parent if path else None)
    data = _resolve(raw, where, seen=(name_or_path,))
    data.setdefault("name", path.stem if path else name_or_path)
    _validate(data, where)
    scenario = Scenario(data, path)
    scenario.telemetry()  # a missing or unreadable log is bad input now, not mid-burn
    return scenario


BUILTIN_PREFIX = "builtin:"


def _anchor_telemetry(raw: dict[str, Any], directory: Path | None) -> dict[str, Any]:
    """``burn.telemetry_csv`` made independent of the file it was written in.

    A path is relative to the scenario file that names it, so it is resolved
    before ``extends`` merges files from different places: a built-in's becomes
    ``builtin:NAME`` (read through importlib.resources), a file's an absolute path.
    """
    burn = raw.get("burn")
    if not isinstance(burn, Mapping) or not isinstance(burn.get("telemetry_csv"), str):
        return raw
    where = str(burn["telemetry_csv"])
    if where.startswith(BUILTIN_PREFIX) or os.path.isabs(where):
        anchored = where
    elif directory is None:
        anchored = BUILTIN_PREFIX + where
    else:
        anchored = str((directory / where).resolve())
    return {**raw, "burn": {**burn, "telemetry_csv": anchored}}


def _looks_like_path(text: str) -> bool:
    return os.sep in text or "/" in text or text.endswith(".json") or Path(text).exists()


def _read_json(path: Path | Traversable) -> dict[str, Any]:
    data = _parse_json(_read_text(path), path)
    depth = _depth_beyond(data, MAX_DEPTH)
    if depth is not None:
        raise ScenarioError(
            f"scenario file {path}: {quoted(depth)} is nested deeper than {MAX_DEPTH} levels; "
            "fix the file (a scenario needs a handful)"
        )
    if not isinstance(data, dict):
        raise ScenarioError(
            f"scenario file {path}: the top level must be a JSON object, not {type(data).__name__}"
        )
    return data


def _read_text(path: Path | Traversable) -> str:
    """The file's text, read up to :data:`MAX_FILE_BYTES` (a FIFO or /dev/zero is refused)."""
    too_large = ScenarioError(
        f"scenario file {path} is larger than {MAX_FILE_BYTES >> 20} MiB: a scenario "
        "describes one node; cut it down (large logs belong in burn.telemetry_csv)"
    )
    try:
        if isinstance(path, Path):
            raw = read_bounded(path, MAX_FILE_BYTES)
        else:  # a built-in, inside the package
            with path.open("rb") as stream:
                raw = stream.read(MAX_FILE_BYTES + 1)
    except OverLimitError as exc:
        if exc.too_large:
            raise too_large from None
        raise ScenarioError(f"scenario file {path} {exc}; give a scenario JSON file") from None
    except FileNotFoundError:
        raise ScenarioError(
            f"scenario file {path} does not exist: check the path, or run `gpuready scenarios` "
            "for the built-in names"
        ) from None
    except OSError as exc:
        raise ScenarioError(
            f"scenario file {path} cannot be read ({exc}); fix its permissions or encoding (UTF-8)"
        ) from None
    if len(raw) > MAX_FILE_BYTES:
        raise too_large
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            f"scenario file {path} cannot be read ({exc}); fix its permissions or encoding (UTF-8)"
        ) from None


def _parse_json(text: str, path: Path | Traversable) -> object:
    try:
        return load_json(text)
    except LoadError as exc:
        if not exc.syntax:
            raise _source(f"scenario file {path}").loaded(exc) from None
        where = f", line {exc.line} column {exc.column}" if exc.line is not None else ""
        # The problem already says "invalid JSON (...)": the parser's words, or "nested too deep".
        raise ScenarioError(f"scenario file {path}{where}: {exc.problem}; fix the file") from None


def _depth_beyond(data: object, limit: int) -> tuple[str | int, ...] | None:
    """The key path of the first value nested deeper than ``limit``; None when none is.

    Iterative, so that depth is refused before anything recursive (merging, checking)
    walks the document.
    """
    stack: list[tuple[tuple[str | int, ...], object]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if len(path) > limit:
            return path
        if isinstance(value, dict):
            stack.extend(((*path, key), item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend(((*path, index), item) for index, item in enumerate(value))
    return None


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged onto ``base``: objects merge, null removes, the rest replaces."""
    merged: dict[str, Any] = dict(base)
    for key, value in over.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _resolve(raw: dict[str, Any], where: str, seen: tuple[str, ...]) -> dict[str, Any]:
    parent = raw.get("extends")
    if parent is None:
        return dict(raw)
    if not isinstance(parent, str):
        raise ScenarioError(f"{where}: 'extends' must be a built-in scenario name")
    if parent in seen:
        chain = " -> ".join((*seen, parent))
        raise ScenarioError(f"{where}: 'extends' loops ({chain}); break the cycle")
    if parent not in builtin_names():
        raise ScenarioError(
            f"{where}: extends unknown scenario {parent!r}; run `gpuready scenarios` to list "
            "the built-in ones"
        )
    base = _resolve(
        _anchor_telemetry(_read_json(SCENARIO_DIR / f"{parent}.json"), None),
        f"built-in scenario {parent!r}",
        (*seen, parent),
    )
    child = {key: value for key, value in raw.items() if key != "extends"}
    merged = deep_merge(base, child)
    # A child's description and name are its own, never inherited.
    for key in ("name", "description"):
        if key in child:
            merged[key] = child[key]
        else:
            merged.pop(key, None)
    return merged


# ---------------------------------------------------------------- validation
#
# Every key declared once (validator.fields): the top level, host, pci, files, commands,
# passthrough and nvml sections here; per-GPU keys from GpuFacts' own types; the burn
# section's keys in validator.node.sim.simulated_burn, its values here; the interconnect
# section's keys and values in validator.node.sim.simulated_bandwidth.

_FIX = "fix the scenario"
_MAX_GPUS = 64  # per node, NVML and PCI counts alike: more is a typo, and slow to simulate
_MAX_FILES = 10_000  # files and commands a scenario may give; a real host needs dozens
_MAX_LINES = 10_000  # kernel-log lines a burn may add
_MAX_NAMES = 64  # reasons, passthrough paths and programs
_NUMBER_LIMIT = 1e15  # any per-GPU figure: beyond it no reading is real, and floats overflow
_UPTIME_MAX_S = 100 * 365 * 86400.0
_ISO_EXAMPLE = "an ISO 8601 time like '2026-01-01T12:00:00+00:00'"
_BUS_ID = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
_PERMISSION_DENIED = {"error": "permission_denied"}


def _source(where: str) -> Source:
    return Source(where, fix=_FIX, error=ScenarioError)


def _fail(where: str, path: str, problem: str) -> ScenarioError:
    return ScenarioError(f"{where}: {path} {problem}; {_FIX}")


def _is_marker(value: object) -> bool:
    """``"not_supported"`` or ``{"nvml_error": name}``: the NVML call behind a field fails."""
    return _marker_error(value) is not None


def _iso_time(text: str) -> str:
    try:
        _parse_now(text)
    except ValueError:
        raise Invalid() from None
    return text


def _file_text(value: object) -> object:
    if isinstance(value, str) or value == _PERMISSION_DENIED:
        return value
    raise Invalid()


def _reason(name: str) -> str:
    if name in _REASON_NAMES or name.startswith("unknown_0x"):
        return name
    known = ", ".join(reason for _, reason in CLOCK_EVENT_REASONS)
    raise Invalid(
        problem=f"names unknown reason {excerpt(name)}; known reasons: {known}, unknown_0x<bits>"
    )


_NVLINK_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS
_LINKS_WANTED = "a count of active links or a list of true/false"
_NVLINKS_WANTED = f"{_LINKS_WANTED}, or an object of links, speed_gb_s and speed_source"
_NVLINK_KEYS = ("links", "speed_gb_s", "speed_source")
_SPEED_LIMIT_GB_S = 10_000.0  # per link; anything near it is a typo (NVLink5 runs ~53 GB/s)


def _link_list(value: object) -> int | None:
    """How many links a ``links`` value describes; None when it is neither form."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _NVLINK_MAX_LINKS:
        return value
    if (
        isinstance(value, list)
        and len(value) <= _NVLINK_MAX_LINKS
        and all(isinstance(state, bool) for state in value)
    ):
        return len(value)
    return None


def _must(key: str, wanted: str, value: object) -> str:
    """``key must be <wanted>, got <value>``: a problem inside a key's value."""
    return f"{key} must be {wanted}, got {excerpt(value)}"


def _speed(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and 0.0 <= float(value) <= _SPEED_LIMIT_GB_S
    )


def _nvlinks(value: object) -> object:
    """``nvlinks``: a count, a list of flags, or the object form with speeds."""
    if _link_list(value) is not None:
        return value
    if not isinstance(value, dict):
        raise Invalid()
    for key in value:
        if key not in _NVLINK_KEYS:
            raise Invalid(problem="has " + unknown(str(key), _NVLINK_KEYS))
    count = _link_list(value.get("links"))
    if count is None:
        raise Invalid(problem=_must("links", _LINKS_WANTED, value.get("links")))
    speeds = value.get("speed_gb_s")
    fits = (
        speeds is None
        or _is_marker(speeds)
        or _speed(speeds)
        or (isinstance(speeds, list) and len(speeds) == count and all(map(_speed, speeds)))
    )
    if not fits:
        wanted = (
            f"GB/s from 0 to {_SPEED_LIMIT_GB_S:g} for every link, a list of {count} of "
            "them, or an NVML error marker"
        )
        raise Invalid(problem=_must("speed_gb_s", wanted, speeds))
    source = value.get("speed_source", NVLINK_SPEED_SOURCES[0])
    if source not in NVLINK_SPEED_SOURCES:
        raise Invalid(problem=_must("speed_source", " or ".join(NVLINK_SPEED_SOURCES), source))
    return value


_COUNTER_WANTED = "a count from 0 to 1e15"


def _counter_value(value: object, *, markers: bool) -> bool:
    if markers and _is_marker(value):
        return True
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _NUMBER_LIMIT


def _link_counts(counts: dict[str, Any], where: str, *, markers: bool) -> None:
    """One object of NVLink error counters: known names, each a count (or a marker)."""
    for key, value in counts.items():
        if key == "link":
            continue
        if key not in NVLINK_ERROR_COUNTERS:
            valid = ("link", *NVLINK_ERROR_COUNTERS)
            raise Invalid(problem="has " + unknown(f"{where}{key}", valid, name=key))
        if not _counter_value(value, markers=markers):
            wanted = _COUNTER_WANTED + (' or "not_supported"' if markers else "")
            raise Invalid(problem=_must(f"{where}{key}", wanted, value))


def nvlink_errors_value(value: object, *, markers: bool = True) -> object:
    """``nvlink_errors``: one object of counters for every link, or a list of links.

    Args:
        value: the scenario's value.
        markers: counters may be NVML error markers (a GPU's facts; not a burn's counts).

    Raises:
        Invalid: naming the entry and counter at fault.
    """
    if isinstance(value, dict):
        if "link" in value:
            raise Invalid(
                problem="is one object for every link: give no 'link' in it, "
                "or give a list of per-link objects"
            )
        _link_counts(value, "", markers=markers)
        return value
    if not isinstance(value, list) or len(value) > _NVLINK_MAX_LINKS:
        raise Invalid(
            wanted=(
                "an object of NVLink error counters for every link, or a list of at most "
                f"{_NVLINK_MAX_LINKS} per-link objects with a 'link'"
            )
        )
    seen: set[int] = set()
    for index, entry in enumerate(value):
        where = f"[{index}]."
        if not isinstance(entry, dict):
            raise Invalid(
                problem=f"{where[:-1]} must be an object with a 'link', got {excerpt(entry)}"
            )
        link = entry.get("link")
        if not (
            isinstance(link, int) and not isinstance(link, bool) and 0 <= link < _NVLINK_MAX_LINKS
        ):
            numbers = f"0-{_NVLINK_MAX_LINKS - 1}"
            raise Invalid(
                problem=f"{where}link must be a link number {numbers}, got {excerpt(link)}"
            )
        if link in seen:
            raise Invalid(problem=f"{where}link {link} is given twice; give each link once")
        seen.add(link)
        _link_counts(entry, where, markers=markers)
    return value


def _within(low: float, high: float, wanted: str) -> Callable[[Any], Any]:
    """A ``convert`` hook refusing a number outside ``low``-``high``.

    After the kind's own check, so a value of the wrong kind still reads
    "must be an integer"; only a number out of bounds reads ``wanted``.
    """

    def bounded(value: Any) -> Any:  # noqa: ANN401 - a number, as the field declared it
        if not low <= value <= high:
            raise Invalid(wanted=wanted)
        return value

    return bounded


def _count_field(name: str, high: int = _MAX_GPUS) -> Field:
    return Field(name, int, minimum=0, maximum=high, wanted=f"a count 0-{high}")


def _reasons(name: str) -> Field:
    return Field(
        name,
        list,
        wanted=f"a list of at most {_MAX_NAMES} reason names",
        max_items=_MAX_NAMES,
        item=Field("reason", str, convert=_reason),
    )


def _special_gpu_fields() -> dict[str, Field]:
    """The per-GPU keys whose values have a shape of their own (words, links, counters)."""

    def words(name: str, choices: tuple[str, ...]) -> Field:
        return Field(name, str, choices=choices, nullable=True, accept=_is_marker)

    return {
        "compute_mode": words("compute_mode", tuple(COMPUTE_MODES)),
        "fabric_state": words("fabric_state", tuple(FABRIC_STATES)),
        "recovery_action": words("recovery_action", RECOVERY_ACTIONS),
        "nvlinks": Field(
            "nvlinks", wanted=_NVLINKS_WANTED, nullable=True, accept=_is_marker, convert=_nvlinks
        ),
        "nvlink_errors": Field(
            "nvlink_errors", nullable=True, accept=_is_marker, convert=nvlink_errors_value
        ),
        "compute_processes": dataclasses.replace(PROCESSES_FIELD, accept=_is_marker),
        "clock_event_reasons": dataclasses.replace(
            _reasons("clock_event_reasons"), nullable=True, accept=_is_marker
        ),
    }


def _gpu_field(name: str) -> Field:
    """A per-GPU key, typed by its GpuFacts field; any may be an NVML error marker."""
    special = _special_gpu_fields().get(name)
    if special is not None:
        return special
    kind: type = object
    for fields_of_kind, candidate in (
        (_INT_FIELDS, int),
        (_NUMBER_FIELDS, float),
        (_BOOL_FIELDS, bool),
        (_TEXT_FIELDS, str),
    ):
        if name in fields_of_kind:
            kind = candidate
            break
    if kind in (int, float):
        what = "an integer" if kind is int else "a number"
        bound = _within(-_NUMBER_LIMIT, _NUMBER_LIMIT, f"{what} from -1e15 to 1e15")
        return Field(name, kind, nullable=True, accept=_is_marker, convert=bound)
    return Field(name, kind, nullable=True, accept=_is_marker)


GPU_FIELDS = Document(tuple(_gpu_field(name) for name in sorted(GPU_KEYS)), wanted="an object")

_HOST_FIELDS = Document(
    (
        Field("hostname", str),
        Field("os_name", str),
        Field("kernel", str),
        Field(
            "uptime_s",
            float,
            minimum=0.0,
            convert=_within(0.0, _UPTIME_MAX_S, "a number of seconds from 0 to 100 years"),
        ),
    ),
    wanted="an object",
)
_PCI_FIELDS = Document((_count_field("gpus"), _count_field("nvswitches")), wanted="an object")
_COMMAND_FIELDS = Document(
    (
        Field("rc", int, convert=_within(-255, 255, "an exit status from -255 to 255")),
        Field("stdout", str),
        Field("stderr", str),
        Field("generated", str, choices=GENERATED),  # validator.node.sim.simulated_container
    ),
    wanted="an object",
)
_PASSTHROUGH_FIELDS = Document(
    (
        Field(
            "paths",
            list,
            wanted=f"a list of at most {_MAX_NAMES} absolute path prefixes",
            max_items=_MAX_NAMES,
            item=Field("path", str, pattern=r"/[^\n]*", wanted="an absolute path prefix"),
        ),
        Field(
            "commands",
            list,
            wanted=f"a list of at most {_MAX_NAMES} program names",
            max_items=_MAX_NAMES,
            item=Field("program", str, pattern=r"[^/\n]+", wanted="a program name without /"),
        ),
    ),
    wanted="an object",
)
NVML_FIELDS = Document(
    (
        Field(
            "init_error",
            str,
            choices=tuple(sorted(ERROR_CODES)),
            nullable=True,
            coerce=lambda value: value.lower() if isinstance(value, str) else value,
        ),
        Field("driver_version", str, nullable=True, accept=_is_marker),
        Field(
            "cuda_driver_version",
            int,
            wanted="an integer like 12040",
            convert=_within(0, 999_999, "an integer like 12040"),
            nullable=True,
            accept=_is_marker,
        ),
        _count_field("gpu_count"),
        Field(
            "pci_bus_ids",
            list,
            wanted=f"a list of at most {_MAX_GPUS} bus ids",
            max_items=_MAX_GPUS,
            item=Field("bus id", str, pattern=_BUS_ID, wanted="a bus id like '00000000:19:00.0'"),
        ),
        Field("gpu", dict, document=GPU_FIELDS),
        Field("gpu_overrides", dict, wanted="an object of GPU index: GPU keys"),
    ),
    wanted="an object",
)
SCENARIO_FIELDS = Document(
    (
        Field("name", str),
        Field("description", str),
        Field("extends", str),
        Field("now", str, wanted=_ISO_EXAMPLE, convert=_iso_time),
        Field("host", dict, document=_HOST_FIELDS),
        Field("nvml", dict, document=NVML_FIELDS),
        Field(
            "files",
            dict,
            wanted=f"an object of path: text, at most {_MAX_FILES} of them",
            max_items=_MAX_FILES,
            values=Field(
                "file", wanted='text or {"error": "permission_denied"}', convert=_file_text
            ),
        ),
        Field(
            "commands",
            dict,
            wanted=f"an object of command line: result, at most {_MAX_FILES} of them",
            max_items=_MAX_FILES,
            values=Field("command", dict, document=_COMMAND_FIELDS),
        ),
        Field("pci", dict, document=_PCI_FIELDS),
        Field("burn"),  # keys: check_burn_section; values: _BURN_FIELDS
        Field("interconnect"),  # keys and values: check_interconnect_section
        Field("passthrough", dict, document=_PASSTHROUGH_FIELDS),
    ),
    wanted="an object",
)


def _burn_gpu_fields() -> tuple[Field, ...]:
    """Values of the burn keys that apply per GPU (the keys are checked by check_burn_section)."""

    def number(name: str, low: float, high: float, *, nullable: bool = False) -> Field:
        return Field(name, float, minimum=low, maximum=high, nullable=nullable)

    def counter(name: str) -> Field:
        if name == "nvlink_errors":
            return Field(name, convert=lambda value: nvlink_errors_value(value, markers=False))
        hint = str(typing.get_type_hints(ErrorCounters)[name])
        return Field(name, bool) if "bool" in hint else Field(name, int, minimum=0)

    def counters(name: str, *, growing: bool) -> Field:
        names = [f.name for f in dataclasses.fields(ErrorCounters)]
        if growing:  # a flag cannot grow; check_burn_section names one given here
            names = [n for n in names if "bool" not in str(typing.get_type_hints(ErrorCounters)[n])]
        return Field(name, dict, document=Document(tuple(map(counter, names)), closed=False))

    return (
        Field("tflops", float, minimum=0.0, maximum=100_000.0, above=True),
        number("power_fraction", 0.0, 2.0),
        number("temp_peak_c", -50.0, 150.0),
        number("memory_temp_peak_c", -50.0, 150.0, nullable=True),
        number("sm_clock_mhz", 0.0, 100_000.0),
        number("idle_sm_clock_mhz", 0.0, 100_000.0),
        number("mem_clock_mhz", 0.0, 100_000.0),
        number("utilization_pct", 0.0, 100.0),
        _reasons("reasons"),
        counters("counters_after", growing=False),
        counters("counters_growth", growing=True),
        Field("wedged", bool),
        Field("counters_hang", bool),
    )


_BURN_GPU_FIELDS = Document(_burn_gpu_fields(), closed=False)
_BURN_FIELDS = Document(
    (
        *_BURN_GPU_FIELDS.fields,
        Field(
            "xids",
            list,
            wanted=f"a list of at most {_MAX_LINES} kernel-log lines",
            max_items=_MAX_LINES,
            item=Field("line", str),
        ),
        Field(
            "gpu_overrides",
            dict,
            values=Field("gpu", dict, document=_BURN_GPU_FIELDS),
        ),
    ),
    closed=False,
)


def _validate(data: Mapping[str, Any], where: str) -> None:
    source = _source(where)
    SCENARIO_FIELDS.check(data, source)
    _validate_nvml(data.get("nvml", {}), source)
    _validate_burn(data, where)
    _validate_interconnect(data, where)


def _validate_burn(data: Mapping[str, Any], where: str) -> None:
    if "burn" not in data:
        return
    problems = check_burn_section(data["burn"], "burn")
    if problems:
        raise ScenarioError(f"{where}: {problems[0]}; {_FIX}")
    _BURN_FIELDS.check(data["burn"], _source(where), ("burn",))


def _validate_interconnect(data: Mapping[str, Any], where: str) -> None:
    if "interconnect" not in data:
        return
    gpu_count = data.get("nvml", {}).get("gpu_count", 0)
    problems = check_interconnect_section(data["interconnect"], "interconnect", gpu_count)
    if problems:
        raise ScenarioError(f"{where}: {problems[0]}; {_FIX}")


def _validate_nvml(section: Mapping[str, Any], source: Source) -> None:
    """What the declarations cannot say: override indexes, and one serial per GPU."""
    count = section.get("gpu_count", 0)
    indexes = Field(
        "gpu_overrides",
        dict,
        document=Document(
            tuple(Field(str(i), dict, document=GPU_FIELDS) for i in range(count)),
            wanted="an object of GPU index: GPU keys",
        ),
    )
    overrides = indexes.check(section.get("gpu_overrides", {}), source, ("nvml", "gpu_overrides"))
    shared = section.get("gpu", {})
    seen: dict[tuple[str, object], int] = {}
    for index in range(count):
        override = overrides.get(str(index), {})
        for key in ("uuid", "serial"):
            value = override.get(key, shared.get(key))
            if not isinstance(value, str):
                continue
            if (key, value) in seen:
                path = ("nvml", "gpu_overrides", str(index)) if key in override else ("nvml", "gpu")
                raise source.fail(
                    (*path, key),
                    f"{quoted((*path, key))} of GPU {index} repeats GPU "
                    f"{seen[key, value]}'s {excerpt(value)}: give each GPU its own "
                    "(or leave it out to derive one)",
                )
            seen[key, value] = index


def _marker_error(value: object) -> str | None:
    if value == NOT_SUPPORTED_MARKER:
        return NOT_SUPPORTED_MARKER
    if isinstance(value, Mapping) and set(value) == {"nvml_error"}:
        return str(value["nvml_error"])
    return None


def _parse_now(text: str) -> datetime.datetime:
    when = datetime.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc)


# ---------------------------------------------------------------- the scenario


class Scenario:
    """One loaded scenario: merged, validated data and what it drives."""

    def __init__(self, data: dict[str, Any], path: Path | None = None) -> None:
        self.data = data
        self.path = path
        self._telemetry: dict[int, tuple[TelemetrySample, ...]] | None = None

    def telemetry(self) -> dict[int, tuple[TelemetrySample, ...]] | None:
        """The recorded log ``burn.telemetry_csv`` names, by GPU index; None without one.

        Raises:
            ScenarioError: the log is missing, unreadable, or not an nvidia-smi CSV log.
        """
        where = self.data.get("burn", {}).get("telemetry_csv")
        if where is None:
            return None
        if self._telemetry is None:
            self._telemetry = _read_telemetry(str(where), self.name)
        return self._telemetry

    @property
    def name(self) -> str:
        """The scenario's name."""
        return str(self.data.get("name", ""))

    @property
    def description(self) -> str:
        """What the scenario simulates."""
        return str(self.data.get("description", ""))

    def nvml(self, *, bytes_strings: bool = False) -> FakeNvml:
        """A fresh fake NVML for this node."""
        return FakeNvml(self.data.get("nvml", {}), bytes_strings=bytes_strings)

    def system(self) -> ScenarioSystem:
        """The host around the GPUs."""
        return ScenarioSystem(self.data)


def _os_release(pretty: str) -> str:
    words = pretty.split()
    name = words[0] if words else "Linux"
    version = words[1] if len(words) > 1 else ""
    version_id = ".".join(version.split(".")[:2])
    return (
        f'PRETTY_NAME="{pretty}"\n'
        f'NAME="{name}"\n'
        f'VERSION_ID="{version_id}"\n'
        f'VERSION="{" ".join(words[1:])}"\n'
        f"ID={name.lower()}\n"
    )


def nvswitch_addresses(count: int, taken: Sequence[str]) -> list[str]:
    """Sysfs addresses for ``count`` NVSwitches: buses from 0x05 up, skipping GPUs' buses."""
    used = {address.lower() for address in taken}
    out: list[str] = []
    bus = 5
    while len(out) < count:
        address = f"0000:{bus:02x}:00.0"
        if address not in used:
            out.append(address)
        bus += 1
    return out


def _sysfs_address(bus_id: str) -> str:
    """00000000:19:00.0 -> 0000:19:00.0, lower case, as sysfs names devices."""
    domain, _, rest = bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


def _read_telemetry(where: str, scenario: str) -> dict[int, tuple[TelemetrySample, ...]]:
    from validator.node.parsers.base import ParseError
    from validator.node.parsers.smi_csv_log import parse_query_gpu_log

    shown = where[len(BUILTIN_PREFIX) :] if where.startswith(BUILTIN_PREFIX) else where
    try:
        if where.startswith(BUILTIN_PREFIX):
            text = (SCENARIO_DIR / shown).read_text(encoding="utf-8")
        else:
            # Streamed under a bound on rows and on each row: a log of gigabytes (or a
            # line with no end) is refused at its bound, never read whole.
            text = "\n".join(read_lines(where, TELEMETRY_CSV_ROWS))
    except OverLimitError as exc:
        raise ScenarioError(
            f"scenario {scenario!r}: burn.telemetry_csv {shown} {exc}; cut the log down (a "
            f"replay needs at most {TELEMETRY_CSV_ROWS} lines)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(
            f"scenario {scenario!r}: burn.telemetry_csv {shown} cannot be read "
            f"({type(exc).__name__}: {exc}); give the path of an nvidia-smi CSV log, relative "
            "to the scenario file"
        ) from None
    try:
        log = parse_query_gpu_log(text)
    except ParseError as exc:
        raise ScenarioError(f"scenario {scenario!r}: burn.telemetry_csv {shown}: {exc}") from None
    if not log.samples or not any(log.samples.values()):
        raise ScenarioError(
            f"scenario {scenario!r}: burn.telemetry_csv {shown} holds no samples; record one "
            "with nvidia-smi --query-gpu=... --format=csv -lms 500"
        )
    return dict(log.samples)


class ScenarioSystem:
    """A :class:`~validator.node.system.System` answering from a scenario."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data
        host = data.get("host", {})
        self._hostname = str(host.get("hostname") or f"sim-{data.get('name', 'node')}")
        self._now = _parse_now(str(data.get("now", DEFAULT_NOW)))
        self._commands: Mapping[str, Mapping[str, Any]] = data.get("commands", {})
        self._files: dict[str, Any] = {}
        if "os_name" in host:
            self._files["/etc/os-release"] = _os_release(str(host["os_name"]))
        if "kernel" in host:
            self._files["/proc/sys/kernel/osrelease"] = f"{host['kernel']}\n"
        if "uptime_s" in host:
            uptime = float(host["uptime_s"])
            self._files["/proc/uptime"] = f"{uptime:.2f} {uptime * 15.7:.2f}\n"
        self._files.update(self._pci_files(data))
        self._files.update(data.get("files", {}))
        self._dirs = sorted({d for path in self._files for d in _parent_dirs(path)})
        # A simulated GPU on a real host: these paths and programs are the host's
        # own (a provisioned toolkit and cuDNN), the rest is the scenario.
        passthrough = data.get("passthrough", {})
        self._live_paths = tuple(passthrough.get("paths", ()))
        self._live_commands = frozenset(passthrough.get("commands", ()))
        self._live = LiveSystem()

    def _is_live_path(self, path: str) -> bool:
        return any(path.startswith(prefix) for prefix in self._live_paths)

    @staticmethod
    def _pci_files(data: Mapping[str, Any]) -> dict[str, str]:
        pci = data.get("pci", {})
        nvml = data.get("nvml", {})
        bus_ids: list[str] = list(nvml.get("pci_bus_ids", []))
        files: dict[str, str] = {}

        def add(address: str, vendor: str, device_class: str) -> None:
            base = f"/sys/bus/pci/devices/{address}"
            files[f"{base}/vendor"] = f"{vendor}\n"
            files[f"{base}/class"] = f"{device_class}\n"

        for address, vendor, device_class in _HOST_PCI_DEVICES:
            add(address, vendor, device_class)
        gpus = [
            _sysfs_address(bus_ids[index] if index < len(bus_ids) else default_bus_id(index))
            for index in range(int(pci.get("gpus", 0)))
        ]
        for address in gpus:
            add(address, "0x10de", "0x030200")
        for address in nvswitch_addresses(int(pci.get("nvswitches", 0)), gpus):
            add(address, "0x10de", "0x068000")
        return files

    def hostname(self) -> str:
        """The host's name."""
        return self._hostname

    def read_text(self, path: str) -> str | None:
        """A file's text, or None when the scenario has no such file.

        Raises:
            PermissionError: for a file marked ``{"error": "permission_denied"}``.
        """
        if self._is_live_path(path):
            return self._live.read_text(path)
        text = self._files.get(path)
        if isinstance(text, Mapping):
            raise PermissionError(13, "Permission denied", path)
        return text

    def glob(self, pattern: str) -> list[str]:
        """Files and directories matching a shell pattern (``*`` stays within a segment)."""
        if self._is_live_path(pattern):
            return self._live.glob(pattern)
        wanted = pattern.split("/")
        found = [
            path for path in (*self._files, *self._dirs) if _segments_match(path.split("/"), wanted)
        ]
        return sorted(set(found))

    def which(self, name: str) -> str | None:
        """Where a command the scenario knows lives."""
        if name in self._live_commands:
            return self._live.which(name)
        programs = {posixpath.basename(line.split()[0]) for line in self._commands if line.split()}
        if name not in programs:
            return None
        return "/usr/local/cuda/bin/nvcc" if name == "nvcc" else f"/usr/bin/{name}"

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        """The scenario's recorded result for this command line; 127 when it has none."""
        if not argv:
            return CommandResult(127, "", "empty command")
        program = posixpath.basename(argv[0])
        if program in self._live_commands:
            return self._live.run(argv, timeout_s)
        line = " ".join((program, *argv[1:]))
        result = self._commands.get(" ".join(argv)) or self._commands.get(line)
        if result is None:
            # Keys with a wildcard stand for a command whatever its arguments.
            result = next(
                (
                    recorded
                    for key, recorded in self._commands.items()
                    if "*" in key and fnmatch.fnmatchcase(line, key)
                ),
                None,
            )
        if result is not None and "generated" in result:
            return CommandResult(0, generated_output(self._data, str(result["generated"])))
        if result is not None:
            return CommandResult(
                int(result.get("rc", 0)),
                str(result.get("stdout", "")),
                str(result.get("stderr", "")),
            )
        return CommandResult(127, "", f"{argv[0]}{NOT_FOUND_SUFFIX}")

    def now(self) -> datetime.datetime:
        """The scenario's fixed clock, UTC."""
        return self._now


def _parent_dirs(path: str) -> list[str]:
    """/a/b/c -> [/a, /a/b]."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(2, len(parts))]


def _segments_match(parts: Sequence[str], wanted: Sequence[str]) -> bool:
    return len(parts) == len(wanted) and all(
        fnmatch.fnmatchcase(part, pattern) for part, pattern in zip(parts, wanted)
    )
