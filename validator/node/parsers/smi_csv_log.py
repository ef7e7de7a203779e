"""Parse a recorded ``nvidia-smi --query-gpu=... --format=csv -l N`` telemetry log.

Such a log is a header line (``timestamp, index, power.draw [W], ...``) followed by one
row per GPU per poll. What a recorded log looks like in practice (tests/fixtures/telemetry
holds real ones, with their sources):

* values with units (``245.33 W``, ``1980 MHz``, ``100 %``) or without (``nounits``);
  ``temperature.gpu`` never carries a unit;
* placeholders ``[Not Supported]``, ``[N/A]``, bare ``N/A``, ``[Unknown Error]``, empty
  cells: these become :class:`~validator.model.Unavailable` (NOT_SUPPORTED, NOT_MEASURED,
  ERROR; an empty cell is NOT_MEASURED);
* columns in any order, any subset; only ``timestamp`` is required;
* prompt or blank lines before the header; a row cut off at the end (logger killed);
* a header written by the logging script rather than by nvidia-smi (``noheader`` data
  under a hand-written header line), which reads like ``nounits``.

Which GPU a row belongs to: the ``index`` column; else the order in which ``pci.bus_id``
values (or, failing that, ``uuid`` values) first appear; else the row's position in its
poll. Rows of one poll do not always share a timestamp (a recorded 8-GPU H100 log has
polls whose first row is stamped up to 0.7 s before the other seven), so a log without
any GPU column is read as polls of N rows in a fixed GPU order, N being the largest
number of consecutive rows that share one timestamp.

Clock-event (throttle) reasons come from the ``clocks_event_reasons.active`` (or the older
``clocks_throttle_reasons.active``) bit mask; where the mask is absent or unreadable, from
the per-reason ``Active``/``Not Active`` columns.

Physically implausible readings become ``Unavailable(Reason.ERROR, "implausible value
...")``. Memory clocks are bounded at 20000 MHz rather than 5000: GDDR boards report
effective memory clocks far above 5000 MHz (L40S 9001 MHz, A10 6251 MHz, RTX 4080 SUPER
11251 MHz in the shared captures).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from validator.model import (
    CLOCK_EVENT_REASONS,
    NOT_MEASURED,
    NOT_SUPPORTED,
    Measured,
    Reason,
    TelemetrySample,
    Unavailable,
    decode_clock_event_reasons,
)
from validator.node.parsers.base import ParseError
from validator.node.parsers.smi_common import clock_event_name, first_known, normalize_bus_id


@dataclass(frozen=True)
class TelemetryLog:
    """A recorded nvidia-smi CSV telemetry log, per GPU."""

    # By GPU key; t_s is seconds since the log's first (earliest) timestamp.
    samples: dict[int, tuple[TelemetrySample, ...]]
    # By GPU key, normalised with smi_common.normalize_bus_id, where the log has pci.bus_id.
    bus_ids: dict[int, str]
    # The field names as read from the header, units stripped, in the header's order.
    columns: tuple[str, ...]


_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")
_TIMESTAMP = re.compile(r"^(\d{4})/(\d{1,2})/(\d{1,2}) (\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")
_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%]*)$")
_HEX = re.compile(r"^0[xX][0-9A-Fa-f]+$")
_FIELD = re.compile(r"^[A-Za-z][\w.]*$")

# Field names (lower case) for each sample field, most preferred first.
_POWER = ("power.draw", "power.draw.instant", "power.draw.average")
_SM_CLOCK = ("clocks.sm", "clocks.current.sm")
_MEM_CLOCK = ("clocks.mem", "clocks.current.memory", "clocks.memory")
_MASKS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_NOT_REASONS = frozenset({"active", "supported"})
_INDEX = ("index",)
_BUS_ID = ("pci.bus_id", "gpu_bus_id")
_UUID = ("uuid", "gpu_uuid")

# Placeholders nvidia-smi prints instead of a value.
_NOT_SUPPORTED_TEXTS = frozenset(
    {
        "not supported",
        "requested functionality has been deprecated",
        "function not found",
        "not found",
        "not available",
    }
)
_NOT_MEASURED_TEXTS = frozenset({"n/a", "na"})
_ERROR_TEXTS = (
    ("insufficient permissions", Reason.NO_PERMISSION),
    ("no permission", Reason.NO_PERMISSION),
    ("gpu is lost", Reason.GPU_LOST),
    ("unknown error", Reason.ERROR),
    ("err!", Reason.ERROR),
    ("error", Reason.ERROR),
)


@dataclass(frozen=True)
class _Bounds:
    """What one numeric field may hold: its unit and the physically possible range."""

    unit: str
    low: float
    high: float
    integral: bool


_POWER_BOUNDS = _Bounds("W", 0.0, 3000.0, integral=False)
_TEMP_BOUNDS = _Bounds("C", -40.0, 150.0, integral=False)
_SM_CLOCK_BOUNDS = _Bounds("MHz", 0.0, 5000.0, integral=True)
_MEM_CLOCK_BOUNDS = _Bounds("MHz", 0.0, 20000.0, integral=True)
_UTIL_BOUNDS = _Bounds("%", 0.0, 100.0, integral=True)

_REASON_ORDER = {name: i for i, (_, name) in enumerate(CLOCK_EVENT_REASONS)}


@dataclass(frozen=True)
class _Row:
    line: int
    cells: tuple[str, ...]
    when: datetime.datetime


def parse_query_gpu_log(text: str) -> TelemetryLog:
    """Read an ``nvidia-smi --query-gpu=... --format=csv [-l N | -lms N]`` log.

    Args:
        text: the log as recorded, header included; prompt or blank lines before the
            header are skipped, and a last row cut off mid-way is dropped.

    Returns:
        The samples of each GPU, the GPUs' bus ids where the log has them, and the
        header's field names.

    Raises:
        ParseError: the text is not such a log: no header with a ``timestamp`` column
            (including ``--format=csv,noheader`` logs), a row with the wrong number of
            cells before the last one, an unreadable timestamp or GPU id, a GPU's
            timestamps going backwards, or a repeated header with other columns.
    """
    lines = text.split("\n")
    header_at = _find_header(lines)
    header = _cells(lines[header_at])
    columns = tuple(_UNIT.sub("", cell) for cell in header)
    names: dict[str, int] = {}
    for position, name in enumerate(columns):
        names.setdefault(name.lower(), position)
    rows = _read_rows(lines, header_at, header, names["timestamp"])
    keys, bus_ids = _gpu_keys(rows, names)
    if not rows:
        return TelemetryLog({}, {}, columns)
    start = min(row.when for row in rows)
    fields = _FieldReader(names)
    by_gpu: dict[int, list[TelemetrySample]] = {}
    last_seen: dict[int, _Row] = {}
    for row, key in zip(rows, keys):
        previous = last_seen.get(key)
        if previous is not None and row.when < previous.when:
            raise ParseError(
                f"line {row.line}: timestamp {row.cells[names['timestamp']].strip()!r} is "
                f"earlier than GPU {key}'s previous sample on line {previous.line}; "
                "not a time-ordered nvidia-smi log"
            )
        last_seen[key] = row
        t_s = round((row.when - start).total_seconds(), 6)
        by_gpu.setdefault(key, []).append(fields.sample(t_s, row.cells))
    samples = {key: tuple(by_gpu[key]) for key in sorted(by_gpu)}
    return TelemetryLog(samples, {key: bus_ids[key] for key in sorted(bus_ids)}, columns)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.rstrip("\r").split(",")]


def _is_header(cells: Iterable[str]) -> bool:
    """Whether cells are field names, one of them ``timestamp`` (a prompt line is not)."""
    cells = list(cells)
    # Asked of every row: most are told apart here, before any regular expression.
    if not any(cell[:9].lower() == "timestamp" for cell in cells):
        return False
    names = [_UNIT.sub("", cell) for cell in cells]
    return "timestamp" in (n.lower() for n in names) and all(_FIELD.match(n) for n in names)


def _looks_like_row(line: str) -> bool:
    return any(_TIMESTAMP.match(cell) for cell in _cells(line))


def _find_header(lines: Sequence[str]) -> int:
    """The index of the header line: the first with a cell that is exactly ``timestamp``."""
    for at, line in enumerate(lines):
        if not line.strip():
            continue
        if _is_header(_cells(line)):
            return at
        if _looks_like_row(line):
            raise ParseError(
                f"line {at + 1}: a data row before any header; the log needs nvidia-smi's "
                "CSV header (record with --format=csv, not --format=csv,noheader)"
            )
    raise ParseError(
        "no header line with a 'timestamp' column: not an nvidia-smi --query-gpu CSV log "
        "(record it with --query-gpu=timestamp,... --format=csv)"
    )


def _read_rows(
    lines: Sequence[str], header_at: int, header: Sequence[str], timestamp_at: int
) -> list[_Row]:
    """The data rows after the header, a cut-off last row dropped."""
    numbered = [
        (at + 1, line.rstrip("\r"))
        for at, line in enumerate(lines)
        if at > header_at and line.strip()
    ]
    rows: list[_Row] = []
    for position, (line_no, line) in enumerate(numbered):
        cells = _cells(line)
        last = position == len(numbered) - 1
        if _is_header(cells):
            if cells == list(header):
                continue  # the logger was started again with >> onto the same file
            raise ParseError(
                f"line {line_no}: a second header with other columns; "
                "this file holds more than one log"
            )
        if len(cells) != len(header):
            if last:
                break  # a row cut off when the logger was stopped
            raise ParseError(
                f"line {line_no}: {len(cells)} cells where the header has {len(header)}; "
                "not a row of this nvidia-smi log"
            )
        when = _timestamp(cells[timestamp_at])
        if when is None:
            if last:
                break  # cut off inside the timestamp
            raise ParseError(
                f"line {line_no}: cannot read timestamp {cells[timestamp_at]!r} "
                "(nvidia-smi writes 2024/10/25 11:21:22.123)"
            )
        rows.append(_Row(line_no, tuple(cells), when))
    return rows


def _timestamp(cell: str) -> datetime.datetime | None:
    match = _TIMESTAMP.match(cell)
    if not match:
        return None
    year, month, day, hour, minute, second, fraction = match.groups()
    try:
        return datetime.datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int((fraction or "0").ljust(6, "0")),
        )
    except ValueError:
        return None


def _first_column(names: dict[str, int], candidates: Iterable[str]) -> int | None:
    for name in candidates:
        if name in names:
            return names[name]
    return None


def _gpu_keys(rows: Sequence[_Row], names: dict[str, int]) -> tuple[list[int], dict[int, str]]:
    """The GPU key of each row, and the bus id of each GPU where the log has them."""
    index_at = _first_column(names, _INDEX)
    bus_at = _first_column(names, _BUS_ID)
    uuid_at = _first_column(names, _UUID)
    if index_at is None and bus_at is None and uuid_at is None:
        return (_positions(rows) if rows else []), {}
    bus_ids: dict[int, str] = {}
    keys: list[int] = []
    order: dict[str, int] = {}
    for row in rows:
        bus = None
        if bus_at is not None:
            bus = normalize_bus_id(row.cells[bus_at])
            if bus is None:
                raise ParseError(f"line {row.line}: cannot read pci.bus_id {row.cells[bus_at]!r}")
        if index_at is not None:
            cell = row.cells[index_at]
            if not cell.isdigit():
                raise ParseError(f"line {row.line}: cannot read GPU index {cell!r}")
            key = int(cell)
        elif bus is not None:
            key = order.setdefault(bus, len(order))
        else:
            assert uuid_at is not None  # noqa: S101 -- the no-column case returned above
            cell = row.cells[uuid_at]
            if not cell.upper().startswith(("GPU-", "MIG-")):
                raise ParseError(f"line {row.line}: cannot read GPU uuid {cell!r}")
            key = order.setdefault(cell, len(order))
        if bus is not None:
            known = bus_ids.setdefault(key, bus)
            if known != bus:
                raise ParseError(
                    f"line {row.line}: GPU {key}'s pci.bus_id changed from {known} to {bus}"
                )
        keys.append(key)
    return keys, bus_ids


def _positions(rows: Sequence[_Row]) -> list[int]:
    """GPU keys for a log with no GPU column: row order within polls of N rows.

    N is the largest number of consecutive rows sharing one timestamp (1 for a one-GPU
    log). A run of N rows sharing a timestamp is one whole poll, so it must start at the
    poll's first GPU; when it does not, rows are missing and positions mean nothing.
    """
    runs: list[tuple[int, int]] = []  # (first row, length)
    for at, row in enumerate(rows):
        if runs and rows[runs[-1][0]].when == row.when:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((at, 1))
    gpus = max(length for _, length in runs)
    for first, length in runs:
        if length == gpus and first % gpus:
            row = rows[first]
            raise ParseError(
                f"line {row.line}: {gpus} rows share timestamp "
                f"{row.when:%Y/%m/%d %H:%M:%S.%f} but start at GPU position {first % gpus}; "
                f"the rows do not fall into polls of {gpus} GPUs (add index to the query)"
            )
    return [at % gpus for at in range(len(rows))]


def _placeholder(cell: str) -> Unavailable | None:
    """The reason a cell holds no value, or None when it may hold one."""
    low = cell.strip().strip("[]").strip().lower()
    if not low:
        return Unavailable(Reason.NOT_MEASURED, "empty cell")
    if low in _NOT_MEASURED_TEXTS:
        return NOT_MEASURED
    if low in _NOT_SUPPORTED_TEXTS:
        return NOT_SUPPORTED
    for needle, reason in _ERROR_TEXTS:
        if needle in low:
            return Unavailable(reason, cell.strip().strip("[]"))
    return None


def _number(cell: str, bounds: _Bounds, name: str) -> Measured[float]:
    missing = _placeholder(cell)
    if missing is not None:
        return missing
    match = _NUMBER.match(cell)
    if not match or match.group(2) not in ("", bounds.unit):
        return Unavailable(Reason.ERROR, f"cannot read {cell!r} as {name}")
    value = float(match.group(1))
    if not bounds.low <= value <= bounds.high:
        return Unavailable(Reason.ERROR, f"implausible value {cell!r} for {name}")
    if bounds.integral and not value.is_integer():
        return Unavailable(Reason.ERROR, f"cannot read {cell!r} as a whole {name}")
    return value


def _whole(value: Measured[float]) -> Measured[int]:
    return value if isinstance(value, Unavailable) else int(value)


class _FieldReader:
    """Turns the cells of one row into a TelemetrySample, columns found once."""

    def __init__(self, names: dict[str, int]) -> None:
        self._power = [(names[n], n) for n in _POWER if n in names]
        self._temp = names.get("temperature.gpu")
        self._mem_temp = names.get("temperature.memory")
        self._sm = _first_column(names, _SM_CLOCK)
        self._mem = _first_column(names, _MEM_CLOCK)
        self._util = names.get("utilization.gpu")
        self._mask = _first_column(names, _MASKS)
        self._reasons = [
            (at, clock_event_name(name[len(prefix) :]))
            for name, at in names.items()
            for prefix in _REASON_PREFIXES
            if name.startswith(prefix) and name[len(prefix) :] not in _NOT_REASONS
        ]

    def sample(self, t_s: float, cells: Sequence[str]) -> TelemetrySample:
        """The sample one row holds."""
        power = first_known(_number(cells[at], _POWER_BOUNDS, name) for at, name in self._power)
        return TelemetrySample(
            t_s=t_s,
            power_w=power,
            temperature_gpu_c=self._read(cells, self._temp, _TEMP_BOUNDS, "temperature.gpu"),
            temperature_memory_c=self._read(
                cells, self._mem_temp, _TEMP_BOUNDS, "temperature.memory"
            ),
            sm_clock_mhz=_whole(self._read(cells, self._sm, _SM_CLOCK_BOUNDS, "SM clock")),
            mem_clock_mhz=_whole(self._read(cells, self._mem, _MEM_CLOCK_BOUNDS, "memory clock")),
            utilization_pct=_whole(self._read(cells, self._util, _UTIL_BOUNDS, "utilization.gpu")),
            clock_event_reasons=first_known([self._mask_reasons(cells), self._listed(cells)]),
        )

    @staticmethod
    def _read(cells: Sequence[str], at: int | None, bounds: _Bounds, name: str) -> Measured[float]:
        return NOT_MEASURED if at is None else _number(cells[at], bounds, name)

    def _mask_reasons(self, cells: Sequence[str]) -> Measured[tuple[str, ...]]:
        if self._mask is None:
            return NOT_MEASURED
        cell = cells[self._mask]
        missing = _placeholder(cell)
        if missing is not None:
            return missing
        if not _HEX.match(cell):
            return Unavailable(Reason.ERROR, f"cannot read {cell!r} as a clock-event mask")
        return decode_clock_event_reasons(int(cell, 16))

    def _listed(self, cells: Sequence[str]) -> Measured[tuple[str, ...]]:
        """The reasons from the per-reason Active / Not Active columns."""
        if not self._reasons:
            return NOT_MEASURED
        active: set[str] = set()
        first_missing: Unavailable | None = None
        readable = False
        for at, name in self._reasons:
            cell = cells[at]
            low = cell.lower()
            if low == "active":
                active.add(name)
                readable = True
            elif low == "not active":
                readable = True
            elif first_missing is None:
                missing = _placeholder(cell)
                first_missing = missing or Unavailable(
                    Reason.ERROR, f"cannot read {cell!r} as Active / Not Active"
                )
        if not readable:
            return first_missing or NOT_MEASURED
        return tuple(
            sorted(active, key=lambda name: (_REASON_ORDER.get(name, len(_REASON_ORDER)), name))
        )
