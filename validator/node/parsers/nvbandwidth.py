r"""Parse ``nvbandwidth`` output: the text it prints and the JSON of ``-j``.

What nvbandwidth writes (NVIDIA/nvbandwidth, ``output.cpp``, ``json_output.cpp`` and
``inline_common.h``, v0.1 to v0.10):

* a header: ``nvbandwidth Version: v0.8``, ``CUDA Runtime Version: 12060`` (v0.10:
  ``13.2 (13020)``), ``Driver Version: 560.35.05``, then (v0.2 to v0.8) one line a
  device, ``Device 0: NVIDIA A100-SXM4-40GB (00000000:99:00)`` (domain:bus:device; up to v0.5
  prints the name alone, v0.8 the host's name above the list, v0.10 no list at all);
* each testcase as ``Running <name>.``, then one matrix a result: its description
  (``memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)``), a row of column numbers,
  one row a source, ``N/A`` where nothing was copied, and from v0.2 on
  ``SUM <key> <total>`` (v0.10 adds ``COEFFICIENT_OF_VARIATION <key> <cv>``). The first
  releases print ``0.00`` on the diagonal and no SUM line;
* the device-to-device bidirectional testcases of v0.6 on print three matrices, keys
  ``<name>_read1``/``_read2``/``_total`` (``_write1``...): see :data:`BIDIRECTIONAL_PARTS`;
* a testcase that fails prints why instead of a matrix: a CUDA error or an ``ASSERT``
  (``ASSERT in expression h_errorFlag == 0 ...`` when the copied data do not verify,
  after ``Invalid value when checking the pattern at ...``), then nvbandwidth exits.
  Such a testcase is :attr:`NvbStatus.FAILED`, never a figure. One the output ends
  inside (a file cut short) is :attr:`NvbStatus.CUT`: not measured.

The JSON (``-j``) holds the same figures under ``{"nvbandwidth": {...}}``: ``version``,
``CUDA Runtime Version``, ``Driver Version``, from v0.8 ``GPU Device list``
(``"0: NAME (00000000:07:00): (host)"``), and ``testcases``, each with ``name``,
``status`` (``Passed``, ``Running``, ``Waived``, ``Error``, ``ERROR``), the
``bandwidth_matrix`` as strings and ``sum``. Three quirks of its writer are read as
nvbandwidth meant them: a failing testcase stays ``Running`` and its error lands in the
top-level ``error``; a caught error adds a second entry of the same name with status
``Error``; and a bidirectional testcase's three matrices are appended to one
``bandwidth_matrix`` (3N rows), its ``sum`` and description being the total's.

Matrix orientation is nvbandwidth's: the row is the device whose context ran the copy.
For ``*_write_*`` testcases data flow row -> column, for ``*_read_*`` column -> row
(:mod:`validator.node.capture.recorded_bandwidth` turns both into source -> destination).
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from validator.node.parsers.base import ParseError

# The three matrices of a device-to-device bidirectional testcase (v0.6 on): for the
# pair (row r, column c), copy 1 moves data c -> r and copy 2 r -> c, both at once;
# "total" is their sum (testcases_ce.cpp: srcBuffers {peer1, src2} -> {src1, peer2}).
BIDIRECTIONAL_PARTS = {"read": ("read1", "read2", "total"), "write": ("write1", "write2", "total")}

# A number nvbandwidth prints is short; a longer run of digits is no figure of its.
_MAX_NUMBER_CHARS = 40
_MAX_INDEX_DIGITS = 6
# Digits are ASCII ([0-9]) throughout: \d and str.isdigit() also take '٣' or '²', which
# int() reads as 3 or refuses (a crash, not a parse error).
_DIGITS = re.compile(r"[0-9]+")
_MAX_ERROR_CHARS = 400
_MAX_NOTES = 8

_NUMBER = re.compile(r"^[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?$")
_RUNNING = re.compile(r"^Running\s+(?P<name>[A-Za-z0-9_]+)\.?$")
_WAIVING = re.compile(r"^Waiving\s+(?P<name>[A-Za-z0-9_]+)\.?$")
_DESCRIPTION = re.compile(r"^(?=.*(?:\(row\)|\(column\))).*\((?P<unit>GB/s|ns)\)$")
_SUM = re.compile(r"^(?:SUM|&&&& PERF)\s+(?P<key>[A-Za-z0-9_]+)\s+(?P<value>\S+)")
_COV = re.compile(r"^COEFFICIENT_OF_VARIATION\s+(?P<key>[A-Za-z0-9_]+)\s+(?P<value>\S+)")
_VERBOSE_STAT = re.compile(r"^(?:MIN|MAX|AVG)\s+[A-Za-z0-9_]+\s+\S+$")
_BUS = r"(?P<domain>[0-9A-Fa-f]{1,8}):(?P<bus>[0-9A-Fa-f]{1,2}):(?P<device>[0-9A-Fa-f]{1,2})"
_DEVICE = re.compile(rf"^Device\s+(?P<index>[0-9]+):\s*(?P<name>.*?)\s*(?:\({_BUS}\))?$")
# A multi-node run (built with MULTINODE, under mpirun) lists each rank's host and device:
# "Process 4 (nvbandwidth-test-worker-1): device 0: HGX GB200 (00000008:01:00)".
_PROCESS = re.compile(r"^Process\s+(?P<rank>[0-9]+)\s+\((?P<host>[^()]*)\):\s*device\s+[0-9]+:")
# -j's device entry, its host after it: "0: NVIDIA GB200 (00000008:06:00): (n179-067-085)".
_JSON_DEVICE = re.compile(
    rf"^(?P<index>[0-9]+):\s*(?P<name>.*?)\s*(?:\({_BUS}\))?(?::\s*\((?P<host>[^()]*)\))?$"
)
_VERSION = re.compile(r"^nvbandwidth Version:\s*(?P<version>\S+)")
_RUNTIME = re.compile(r"^CUDA Runtime Version:\s*(?P<value>.*)$")
_DRIVER = re.compile(r"^Driver Version:\s*(?P<value>\S+)")
# What nvbandwidth prints when a testcase fails: its ASSERT, a CUDA or NVML error (its
# CU_ASSERT/CUDA_ASSERT/NVML_ASSERT), a caught error ("Error: ..."), or the copied data
# failing their check (the kernel's own printf, before the ASSERT).
_FAILURE = re.compile(
    r"^(?:ASSERT in expression|\[(?:CUDA_ERROR|cudaError)\w*\]|NVML_ERROR|Error:|ERROR:"
    r"|Invalid value when checking the pattern)"
)


class NvbStatus(str, enum.Enum):
    """How one testcase ended."""

    PASSED = "passed"  # it printed its matrices
    FAILED = "failed"  # an error or a failed data check instead of figures
    WAIVED = "waived"  # nvbandwidth skipped it (e.g. no GPU pair has peer access)
    CUT = "cut"  # the output ends inside it: not measured


@dataclass(frozen=True)
class NvbMatrix:
    """One result matrix: rows of values (None where nvbandwidth printed N/A).

    Attributes:
        key: the SUM line's key (``device_to_device_bidirectional_memcpy_read_ce_read1``),
            else the testcase's name.
        description: nvbandwidth's words above it, naming the axes and the unit.
        rows: ``rows[r][c]``; a matrix over the host has one row.
        unit: ``GB/s``, or ``ns`` for the latency testcases.
        sum: the SUM line's total, where printed.
        coefficient_of_variation: v0.10's COEFFICIENT_OF_VARIATION, where printed.
    """

    key: str
    description: str
    rows: tuple[tuple[float | None, ...], ...]
    unit: str = "GB/s"
    sum: float | None = None
    coefficient_of_variation: float | None = None

    def covers(self, row: int, column: int) -> bool:
        """Whether (row, column) is inside the matrix."""
        return 0 <= row < len(self.rows) and 0 <= column < len(self.rows[row])

    def value(self, row: int, column: int) -> float | None:
        """The value at (row, column); None where N/A or outside the matrix."""
        return self.rows[row][column] if self.covers(row, column) else None


@dataclass(frozen=True)
class NvbTestcase:
    """One testcase: its matrices when it passed, else why there are none."""

    name: str
    status: NvbStatus
    matrices: tuple[NvbMatrix, ...] = ()
    error: str | None = None

    def matrix(self, part: str = "") -> NvbMatrix | None:
        """The matrix whose key is the name (``part`` empty) or ``<name>_<part>``."""
        wanted = f"{self.name}_{part}" if part else self.name
        for matrix in self.matrices:
            if matrix.key == wanted:
                return matrix
        if not part and len(self.matrices) == 1:
            return self.matrices[0]
        return None


@dataclass(frozen=True)
class NvbDevice:
    """A CUDA device as nvbandwidth lists it.

    Attributes:
        index: the CUDA device number (the matrices' row and column numbers).
        name: the board's name.
        pci_bus_id: ``00000000:34:00.0``, as NVML writes it, where nvbandwidth printed
            the domain, bus and device numbers (v0.6 to v0.8); None otherwise.
    """

    index: int
    name: str
    pci_bus_id: str | None = None


@dataclass(frozen=True)
class NvbParsed:
    """What one nvbandwidth output says."""

    testcases: tuple[NvbTestcase, ...]
    version: str | None = None
    cuda_runtime_version: int | None = None
    driver_version: str | None = None
    devices: tuple[NvbDevice, ...] = ()
    error: str | None = None  # nvbandwidth failing outside any testcase
    # The host of each process (text: a multi-node run's, in rank order) or of each device
    # listed (-j); empty where the output names none.
    hosts: tuple[str, ...] = ()

    @property
    def multi_node(self) -> bool:
        """The run spans several hosts (or ran a multinode testcase): not one node's figures."""
        return len(set(self.hosts)) > 1 or any(
            case.name.startswith("multinode_") for case in self.testcases
        )

    def testcase(self, name: str) -> NvbTestcase | None:
        """The testcase ``name``; where the output ran it more than once, a failure first.

        Several runs in one file (a log of repeated runs) count as one figure each:
        a failed run is not hidden by a passing one (fail closed), else the last
        passing run, else the last.
        """
        runs = [case for case in self.testcases if case.name == name]
        for status in (NvbStatus.FAILED, NvbStatus.PASSED):
            chosen = [case for case in runs if case.status is status]
            if chosen:
                return chosen[-1]
        return runs[-1] if runs else None


# ---------------------------------------------------------------- shared pieces


def _number(token: object, where: str) -> float | None:
    """A value nvbandwidth printed: a non-negative finite number, or None for N/A."""
    if isinstance(token, bool):
        raise ParseError(f"nvbandwidth {where}: {token!r} is not a number")
    if isinstance(token, (int, float)):
        text = repr(token)
    elif isinstance(token, str):
        text = token.strip()
    else:
        raise ParseError(f"nvbandwidth {where}: {str(token)[:40]!r} is not a number")
    if text == "N/A":
        return None
    if len(text) > _MAX_NUMBER_CHARS or not _NUMBER.match(text):
        raise ParseError(f"nvbandwidth {where}: {text[:40]!r} is not a bandwidth")
    value = float(text)
    if not math.isfinite(value):
        raise ParseError(f"nvbandwidth {where}: {text[:40]!r} is not a finite number")
    return value


def _index(digits: str, where: str) -> int:
    if not _DIGITS.fullmatch(digits):
        raise ParseError(f"nvbandwidth {where}: {digits[:12]!r} is not a device number")
    if len(digits) > _MAX_INDEX_DIGITS:
        raise ParseError(f"nvbandwidth {where}: {digits[:12]}... is not a device number")
    return int(digits)


def _bus_id(match: re.Match[str]) -> str | None:
    """NVML's spelling of nvbandwidth's ``domain:bus:device`` (function 0)."""
    if match.group("bus") is None:
        return None
    domain = int(match.group("domain"), 16)
    bus = int(match.group("bus"), 16)
    device = int(match.group("device"), 16)
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def _one_line(parts: Iterable[str]) -> str:
    text = "; ".join(" ".join(part.split()) for part in parts if part.strip())
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


def _unit(description: str) -> str:
    return "ns" if description.rstrip().endswith("(ns)") else "GB/s"


def _check_testcase_name(name: str, where: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_]{1,100}", name):
        raise ParseError(f"nvbandwidth {where}: {name[:40]!r} is not a testcase name")
    return name


# ---------------------------------------------------------------- text


@dataclass
class _Table:
    """A matrix being read: its description, column count and rows so far."""

    description: str
    line: int
    columns: int | None = None
    rows: list[tuple[float | None, ...]] = field(default_factory=list)
    broken: str | None = None  # a row that did not fit: bad unless the output ends

    def expected_rows(self) -> int | None:
        """Rows a complete matrix has: one over the host, one a GPU between GPUs."""
        if "GPU(row)" in self.description:
            return self.columns
        return 1


@dataclass
class _Case:
    """A testcase being read."""

    name: str | None  # None: its matrix came without a "Running" line
    line: int
    matrices: list[NvbMatrix] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failed: bool = False
    expected_matrices: int = 1


@dataclass
class _Header:
    version: str | None = None
    cuda_runtime_version: int | None = None
    driver_version: str | None = None
    devices: dict[int, NvbDevice] = field(default_factory=dict)
    hosts: dict[int, str] = field(default_factory=dict)  # rank -> host, multi-node runs
    seen: bool = False


class _TextReader:
    """nvbandwidth's text, line by line (the module docstring says what it holds)."""

    def __init__(self) -> None:
        self.header = _Header()
        self.cases: list[NvbTestcase] = []
        self.case: _Case | None = None
        self.table: _Table | None = None
        self.error: str | None = None
        self.outside: list[str] = []  # failure lines outside any testcase

    # ------------------------------------------------------------ lines

    def feed(self, number: int, raw: str) -> None:
        line = raw.strip()
        if self.table is not None and self._table_line(number, line):
            return
        if not line or line.startswith("#####"):
            return
        if self._header_line(line):
            return
        running = _RUNNING.match(line)
        if running:
            self._close_case(cut=False)
            self.case = _Case(_check_testcase_name(running["name"], f"line {number}"), number)
            return
        waiving = _WAIVING.match(line)
        if waiving:
            self._close_case(cut=False)
            self.cases.append(NvbTestcase(waiving["name"], NvbStatus.WAIVED))
            return
        self._result_line(number, line)

    def _header_line(self, line: str) -> bool:
        """A header line; a new header closes the run before it (logs of several runs)."""
        version = _VERSION.match(line)
        if version:
            self._close_case(cut=True)
            self.header.version, self.header.seen = version["version"], True
            return True
        runtime = _RUNTIME.match(line)
        if runtime:
            self.header.cuda_runtime_version = _runtime_version(runtime["value"])
            return True
        driver = _DRIVER.match(line)
        if driver:
            self.header.driver_version = driver["value"]
            return True
        process = _PROCESS.match(line) if self.case is None else None
        if process:
            rank = _index(process["rank"], "process list")
            self.header.hosts[rank] = process["host"].strip()
            return True
        device = _DEVICE.match(line) if self.case is None else None
        if device:
            index = _index(device["index"], "device list")
            self.header.devices[index] = NvbDevice(index, device["name"], _bus_id(device))
            return True
        return line.startswith(("Built from Git version", "CUDA Driver Version"))

    def _result_line(self, number: int, line: str) -> None:
        """A line of a testcase's result: a matrix, its SUM, a failure, a note."""
        if _DESCRIPTION.match(line):
            if self.case is None:
                self.case = _Case(None, number)
            if not self.case.matrices and re.search(r"\b(?:Read|Write)1\b", line):
                self.case.expected_matrices = 3
            self.table = _Table(line, number)
            return
        total = _SUM.match(line)
        if total:
            self._attach_sum(number, total["key"], total["value"])
            return
        cov = _COV.match(line)
        if cov:
            self._attach_cov(number, cov["key"], cov["value"])
            return
        if _VERBOSE_STAT.match(line):
            return
        if _FAILURE.match(line):
            # A testcase prints its matrices only after their data verified: a failure
            # after the last of them is the run's (the next step), not the testcase's.
            if self.case is not None and not self._complete(self.case):
                self.case.failed = True
            else:
                self._close_case(cut=False)
                self.outside.append(line)
                return
        if self.case is not None:
            self.case.notes.append(line)
            del self.case.notes[:-_MAX_NOTES]
        elif self.outside:
            self.outside.append(line)
            del self.outside[:-_MAX_NOTES]

    def _complete(self, case: _Case) -> bool:
        return self.table is None and len(case.matrices) >= case.expected_matrices

    # ------------------------------------------------------------ tables

    def _table_line(self, number: int, line: str) -> bool:
        """Feed the open table; False when the line is not the table's (it closes)."""
        table = self.table
        assert table is not None  # noqa: S101 - the caller checked
        if table.broken is not None:
            if not line:
                return True  # a blank line after a row cut with the output
            raise ParseError(f"nvbandwidth output line {table.line}: {table.broken}")
        tokens = line.split()
        if table.columns is None:
            if tokens and all(_DIGITS.fullmatch(token) for token in tokens):
                table.columns = len(tokens)
                return True
            raise ParseError(
                f"nvbandwidth output line {number}: the table {table.description!r} "
                "has no row of column numbers below it"
            )
        # isdigit() is wider than a device number on purpose: a row labelled '²' or '٣'
        # is refused by _index, not taken for the end of the table.
        if tokens and tokens[0].isdigit() and not _SUM.match(line):
            self._table_row(table, table.columns, number, tokens)
            return True
        self._close_table(number, cut=False)
        return False

    @staticmethod
    def _table_row(table: _Table, columns: int, number: int, tokens: list[str]) -> None:
        label = _index(tokens[0], f"output line {number}")
        cells = tokens[1:]
        if label != len(table.rows) or len(cells) != columns:
            table.broken = (
                f"row {tokens[0][:12]} of {table.description!r} has {len(cells)} values for "
                f"{columns} columns (row {len(table.rows)} expected)"
            )
            table.line = number
            return
        where = f"output line {number}"
        table.rows.append(tuple(_number(cell, where) for cell in cells))

    def _close_table(self, number: int, *, cut: bool) -> None:
        """The open table becomes its testcase's matrix; one cut short is no matrix."""
        table, self.table = self.table, None
        if table is None or self.case is None:
            return
        complete = (
            table.broken is None
            and table.columns is not None
            and len(table.rows) == table.expected_rows()
        )
        if complete:
            key = self.case.name or ""
            rows = tuple(table.rows)
            self.case.matrices.append(
                NvbMatrix(key, table.description, rows, _unit(table.description))
            )
            return
        if not cut:
            raise ParseError(
                f"nvbandwidth output line {number}: the table {table.description!r} ends "
                f"after {len(table.rows)} of {table.expected_rows()} rows"
            )

    def _attach_sum(self, number: int, key: str, value: str) -> None:
        case = self.case
        if case is None or not case.matrices:
            return  # a SUM whose matrix is not in the text (an excerpt)
        total = _number(value, f"output line {number}")
        if case.name is None:
            case.name = _name_of_key(key)
        last = case.matrices[-1]
        case.matrices[-1] = replace(last, key=key, sum=total)

    def _attach_cov(self, number: int, key: str, value: str) -> None:
        case = self.case
        if case is None or not case.matrices:
            return
        cov = _number(value, f"output line {number}")
        last = case.matrices[-1]
        if key == last.key:
            case.matrices[-1] = replace(last, coefficient_of_variation=cov)

    # ------------------------------------------------------------ testcases

    def _close_case(self, *, cut: bool) -> None:
        """The open testcase as it ended: passed, failed or cut short."""
        if self.table is not None:
            self._close_table(0, cut=True)
        case, self.case = self.case, None
        if case is None:
            return
        if case.name is None:
            if case.matrices or case.failed:
                raise ParseError(
                    f"nvbandwidth output line {case.line}: a result without its testcase's "
                    "name (no 'Running <testcase>.' line above it and no SUM line)"
                )
            return
        self.cases.append(_finished(case, cut=cut))

    def finish(self) -> NvbParsed:
        self._close_case(cut=True)
        if self.outside:
            self.error = _one_line(self.outside)
        if not self.cases and not self.header.seen and self.error is None:
            raise ParseError(
                "the output holds no nvbandwidth testcase and no nvbandwidth header "
                "(not nvbandwidth output)"
            )
        header = self.header
        return NvbParsed(
            testcases=tuple(self.cases),
            version=header.version,
            cuda_runtime_version=header.cuda_runtime_version,
            driver_version=header.driver_version,
            devices=tuple(header.devices[i] for i in sorted(header.devices)),
            error=self.error,
            hosts=tuple(header.hosts[rank] for rank in sorted(header.hosts)),
        )


def _finished(case: _Case, *, cut: bool) -> NvbTestcase:
    name = case.name or ""
    matrices = tuple(replace(matrix, key=matrix.key or name) for matrix in case.matrices)
    if case.failed:
        return NvbTestcase(name, NvbStatus.FAILED, (), _one_line(case.notes))
    if len(matrices) >= case.expected_matrices:
        return NvbTestcase(name, NvbStatus.PASSED, matrices)
    if cut:
        return NvbTestcase(name, NvbStatus.CUT, matrices, "the output ends inside this testcase")
    return NvbTestcase(
        name,
        NvbStatus.FAILED,
        matrices,
        _one_line(
            [
                f"nvbandwidth printed {len(matrices)} of its {case.expected_matrices} matrices",
                *case.notes,
            ]
        ),
    )


def _name_of_key(key: str) -> str:
    """The testcase a SUM key belongs to (``..._read_ce_read1`` -> ``..._read_ce``)."""
    for parts in BIDIRECTIONAL_PARTS.values():
        for part in parts:
            if key.endswith(f"_{part}"):
                return key[: -len(part) - 1]
    return key


def _runtime_version(value: str) -> int | None:
    """``12060`` or v0.10's ``13.2 (13020)``: CUDA's version number."""
    match = re.search(r"\(([0-9]{1,7})\)\s*$", value) or re.fullmatch(r"\s*([0-9]{1,7})\s*", value)
    return int(match.group(1)) if match else None


def parse_nvbandwidth_text(text: str) -> NvbParsed:
    """Parse the text nvbandwidth prints (every layout the module docstring names).

    Raises:
        ParseError: no nvbandwidth header or testcase at all, a table whose rows do
            not fit its columns, a value that is not a non-negative number, a result
            whose testcase cannot be named.
    """
    if text.lstrip().startswith("{"):
        raise ParseError(
            "the output is nvbandwidth's JSON (-j), not its text: save it as nvbandwidth.json"
        )
    reader = _TextReader()
    for number, line in enumerate(text.splitlines(), start=1):
        reader.feed(number, line)
    return reader.finish()


# ---------------------------------------------------------------- JSON


def _split_preamble(text: str) -> tuple[str, str]:
    """(what came before the JSON, the JSON): a kernel's printf can precede it."""
    start = re.search(r"^\s*\{", text, re.M)
    if start is None:
        return "", text
    return text[: start.start()], text[start.start() :]


def parse_nvbandwidth_json(text: str) -> NvbParsed:
    """Parse ``nvbandwidth -j`` output.

    Raises:
        ParseError: not JSON, no ``nvbandwidth`` object, a testcase without a name or
            with a status nvbandwidth does not write, a matrix that is not rows of
            numbers (or ``N/A``).
    """
    preamble, body = _split_preamble(text)
    try:
        data = json.loads(body)
    except RecursionError:
        raise ParseError("nvbandwidth JSON is nested too deeply to be nvbandwidth's") from None
    except ValueError as exc:
        raise ParseError(f"nvbandwidth output is not valid JSON ({exc})") from None
    root = data.get("nvbandwidth") if isinstance(data, dict) else None
    if not isinstance(root, dict):
        raise ParseError("nvbandwidth JSON has no 'nvbandwidth' object")
    error = root.get("error")
    error_text = _one_line([*preamble.splitlines(), str(error)]) if error else None
    testcases = root.get("testcases")
    if testcases is not None and not isinstance(testcases, list):
        raise ParseError("nvbandwidth JSON: 'testcases' is not a list")
    cases = _json_cases(testcases or [], error_text)
    # Null in v0.9 and v0.10 whatever the GPU count (NVIDIA/nvbandwidth issue 66): no devices.
    listed = _json_devices(root.get("GPU Device list"))
    failed_run = error_text if cases and cases[-1].error == error_text else None
    return NvbParsed(
        testcases=tuple(cases),
        version=_text_field(root, "version"),
        cuda_runtime_version=_int_field(root, "CUDA Runtime Version"),
        driver_version=_text_field(root, "Driver Version"),
        devices=tuple(device for device, _ in listed),
        error=None if failed_run else error_text,
        hosts=tuple(host for _, host in listed if host),
    )


def _text_field(root: Mapping[str, object], key: str) -> str | None:
    value = root.get(key)
    return value.strip() if isinstance(value, str) and value.strip() else None


def _int_field(root: Mapping[str, object], key: str) -> int | None:
    value = root.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**7:
        return value
    return None


def _json_devices(listing: object) -> tuple[tuple[NvbDevice, str], ...]:
    """Each listed device, with the host it is on ("" where the entry names none)."""
    if not isinstance(listing, list):
        return ()
    devices = []
    for entry in listing:
        match = _JSON_DEVICE.match(entry.strip()) if isinstance(entry, str) else None
        if match is None:
            raise ParseError(f"nvbandwidth JSON: device entry {str(entry)[:60]!r} is unreadable")
        index = _index(match["index"], "GPU Device list")
        host = (match["host"] or "").strip()
        devices.append((NvbDevice(index, match["name"], _bus_id(match)), host))
    return tuple(devices)


_JSON_STATUS = {
    "passed": NvbStatus.PASSED,
    "waived": NvbStatus.WAIVED,
    "error": NvbStatus.FAILED,
    "not found": NvbStatus.FAILED,
}


def _json_cases(entries: Sequence[object], run_error: str | None) -> list[NvbTestcase]:
    """The testcases, with the writer's quirks undone (module docstring)."""
    cases: list[NvbTestcase] = []
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ParseError(f"nvbandwidth JSON: testcase {position} has no name")
        name = _check_testcase_name(entry["name"], f"JSON testcase {position}")
        status = str(entry.get("status", "")).strip().lower()
        last = position == len(entries) - 1
        if status == "running":
            why = run_error if last and run_error else "nvbandwidth reported no result for it"
            cases.append(NvbTestcase(name, NvbStatus.FAILED, (), why))
            continue
        outcome = _JSON_STATUS.get(status)
        if outcome is None:
            raise ParseError(f"nvbandwidth JSON: testcase {name!r} has status {status[:30]!r}")
        if outcome is NvbStatus.FAILED:
            why = _one_line([str(entry.get("error") or f"nvbandwidth: {status}")])
            if cases and cases[-1].name == name and cases[-1].status is NvbStatus.FAILED:
                cases.pop()  # the writer's second entry for the testcase it left Running
            cases.append(NvbTestcase(name, NvbStatus.FAILED, (), why))
            continue
        matrices = _json_matrices(entry, name) if outcome is NvbStatus.PASSED else ()
        cases.append(NvbTestcase(name, outcome, matrices))
    return cases


def _json_matrices(entry: Mapping[str, object], name: str) -> tuple[NvbMatrix, ...]:
    rows = _json_rows(entry.get("bandwidth_matrix"), name)
    description = str(entry.get("bandwidth_description", ""))
    total = entry.get("sum")
    total_value = _number(total, f"testcase {name!r} sum") if total is not None else None
    unit = _unit(description)
    columns = len(rows[0])
    parts = _bidirectional_parts(name)
    if parts and len(rows) == 3 * columns:
        # The writer appended the three matrices to one list; its sum is the total's.
        return tuple(
            NvbMatrix(
                f"{name}_{part}",
                description,
                rows[i * columns : (i + 1) * columns],
                unit,
                total_value if part == "total" else None,
            )
            for i, part in enumerate(parts)
        )
    return (NvbMatrix(name, description, rows, unit, total_value),)


def _bidirectional_parts(name: str) -> tuple[str, ...]:
    if not name.startswith("device_to_device_bidirectional"):
        return ()
    return BIDIRECTIONAL_PARTS["read" if "_read_" in name else "write"]


def _json_rows(matrix: object, name: str) -> tuple[tuple[float | None, ...], ...]:
    where = f"testcase {name!r} bandwidth_matrix"
    if not isinstance(matrix, list) or not matrix:
        raise ParseError(f"nvbandwidth JSON: {where} is not a list of rows")
    rows = []
    for row in matrix:
        if not isinstance(row, list) or not row:
            raise ParseError(f"nvbandwidth JSON: {where} holds a row that is not a list")
        rows.append(tuple(_number(cell, where) for cell in row))
    if len({len(row) for row in rows}) != 1:
        raise ParseError(f"nvbandwidth JSON: {where} has rows of different lengths")
    return tuple(rows)


def parse_nvbandwidth(text: str, name: str = "") -> NvbParsed:
    """Parse a recorded nvbandwidth output: by its file name, else JSON, else the text.

    Raises:
        ParseError: it reads as neither.
    """
    if name.endswith(".json"):
        return parse_nvbandwidth_json(text)
    if name.endswith(".txt"):
        return parse_nvbandwidth_text(text)
    if text.lstrip().startswith("{"):
        return parse_nvbandwidth_json(text)
    return parse_nvbandwidth_text(text)


__all__: Sequence[str] = (
    "BIDIRECTIONAL_PARTS",
    "NvbDevice",
    "NvbMatrix",
    "NvbParsed",
    "NvbStatus",
    "NvbTestcase",
    "parse_nvbandwidth",
    "parse_nvbandwidth_json",
    "parse_nvbandwidth_text",
)
