r"""Parse perftest's ``ib_write_bw`` and ``ib_write_lat`` output, server or client side.

What perftest prints (linux-rdma/perftest ``src/perftest_parameters.c`` and
``src/perftest_resources.c``), in order, each part optional but the title:

* with ``--use_cuda=N``: ``initializing CUDA``, the CUDA devices, ``Picking device No.
  N``, ``[pid = 29, dev = 0] device name = [NVIDIA H200]`` and the buffer it allocated;
* the server: ``* Waiting for client to connect... *`` in a box of asterisks;
* a rule of dashes, the title (``RDMA_Write BW Test``, ``RDMA_Write Bidirectional BW
  Test``, ``RDMA_Write Latency Test``), the settings (``Device : mlx5_0``, ``Number of
  qps : 2``, ``Link type : IB``; two to a line, tab-separated, on newer builds), a rule,
  each queue pair's addresses, a rule;
* the table header: ``#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec]
  MsgRate[Mpps]`` (``MB/sec`` or ``MiB/sec``, 2^20 bytes, without ``--report_gbits``) or
  ``#bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec]
  t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]`` (older builds stop
  earlier); one row a message size (``-a`` sweeps 2 bytes to 8 MiB; the server side of
  a sweep prints only its last row); a closing rule.

``Conflicting CPU frequency values detected`` may land between the header and a row;
``WARNING: BW peak won't be measured in this run.`` (``-b``, ``-D``) means the peak
column holds 0.00, not a reading (some builds print the 0.00 without the warning: a
zero peak beside a non-zero average is read the same way). A failed run prints why
(``Couldn't connect to host:port``, ``Unable to init the socket connection``,
``Completion with error``) and no table, or a table cut short.

Fail closed: text without a perftest title or failure line is a :class:`ParseError`, as
is another perftest program's output (``ib_send_lat``, ``ib_read_bw``); a table that the
output ends before its closing rule is :attr:`PerftestParsed.complete` False, never a
figure; a row that does not fit its header is a :class:`ParseError`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from validator.limits import TOOL_OUTPUT_BYTES
from validator.node.parsers.base import ParseError

WRITE_BW = "write_bw"
WRITE_LAT = "write_lat"
# "RDMA_Write BW Test", "RDMA_Write Bidirectional BW Test", "RDMA_Write Post List BW Test".
_TITLE = re.compile(
    r"^\s*(?P<op>[A-Za-z_]+)\s+(?P<extra>(?:[A-Za-z]+\s+){0,3}?)(?P<kind>BW|Latency)\s+Test\s*$"
)
_RULE = re.compile(r"^\s*-{20,}\s*$")
_NUMBER = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")
_COUNT = re.compile(r"^[0-9]{1,20}$")
_SETTING = re.compile(r"(?P<key>[A-Za-z][A-Za-z .*_]*?)\s*:\s*(?P<value>\S+)")
_PICKED = re.compile(r"^Picking device No\.\s*(?P<gpu>[0-9]{1,4})\s*$")
_GPU_NAME = re.compile(r"^\[pid = [0-9]+, dev = [0-9]+\] device name = \[(?P<name>[^\]]*)\]")
_FAILURES = (
    "Couldn't connect to",
    "Unable to init the socket connection",
    "Unable to open file descriptor for socket connection",
    "Completion with error",
    "Couldn't read remote address",
    "Failed to exchange data between server and clients",
    "Failed to complete run_iter",
    "Unable to Connect the HCA's through the link",
    "Couldn't get context for the device",
    "No IB devices found",
)
_PEAK_NOT_MEASURED = "BW peak won't be measured"
_CPU_WARNING = "Conflicting CPU frequency values detected"
# Gb/s per unit the bandwidth columns print: perftest's MB is 2^20 bytes (newer builds
# say MiB), a bit is 1/8 byte, a Gb 10^9 bits.
_UNIT_TO_GBIT = {"gb/sec": 1.0, "mb/sec": 8 * 2**20 / 1e9, "mib/sec": 8 * 2**20 / 1e9}
_BW_NAMES = {
    "#bytes": "size",
    "#iterations": "iterations",
    "bw_peak": "peak",
    "bw_average": "average",
    "msgrate[mpps]": "msg_rate",
}
_LAT_NAMES = {
    "#bytes": "size",
    "#iterations": "iterations",
    "t_min[usec]": "min",
    "t_max[usec]": "max",
    "t_typical[usec]": "typical",
    "t_avg[usec]": "average",
    "t_stdev[usec]": "stdev",
    "p99[usec]": "p99",
    "p999[usec]": "p999",
}


@dataclass(frozen=True)
class BwRow:
    """One message size of a bandwidth test, in Gb/s whatever unit perftest printed."""

    size_bytes: int
    iterations: int
    peak_gbit_s: float | None  # None where perftest did not measure the peak
    average_gbit_s: float
    msg_rate_mpps: float | None = None


@dataclass(frozen=True)
class LatRow:
    """One message size of a latency test, in microseconds; None where not printed."""

    size_bytes: int
    iterations: int
    typical_us: float
    min_us: float | None = None
    max_us: float | None = None
    average_us: float | None = None
    stdev_us: float | None = None
    p99_us: float | None = None
    p999_us: float | None = None


@dataclass(frozen=True)
class PerftestParsed:
    """What one ib_write_bw or ib_write_lat output says.

    ``complete`` is True only for a table closed by its rule, with a row, and no
    failure line: anything less is a run cut short, never a figure.
    """

    test: str | None  # WRITE_BW or WRITE_LAT; None when it failed before its title
    bidirectional: bool = False
    server: bool = False  # it waited for a client (the server side)
    device: str | None = None  # the HCA, "mlx5_0"
    link_type: str | None = None  # "IB" or "Ethernet" (RoCE)
    qps: int | None = None
    cuda_device: int | None = None  # --use_cuda's GPU; None: host memory
    gpu_name: str | None = None
    unit: str | None = None  # the bandwidth unit printed: "Gb/sec", "MB/sec", "MiB/sec"
    bw_rows: tuple[BwRow, ...] = ()
    lat_rows: tuple[LatRow, ...] = ()
    failure: str | None = None  # perftest's own words for why the run failed
    warnings: tuple[str, ...] = ()  # e.g. the conflicting CPU frequency lines
    complete: bool = False

    @property
    def largest(self) -> BwRow | LatRow | None:
        """The row of the largest message size (a sweep's headline), None without rows."""
        rows: Sequence[BwRow | LatRow] = self.bw_rows or self.lat_rows
        return max(rows, key=lambda row: row.size_bytes) if rows else None


@dataclass
class _Reader:
    test: str | None = None
    bidirectional: bool = False
    server: bool = False
    settings: dict[str, str] = field(default_factory=dict)
    cuda_device: int | None = None
    gpu_name: str | None = None
    peak_measured: bool = True
    columns: dict[str, int] | None = None
    unit: str | None = None
    bw_rows: list[BwRow] = field(default_factory=list)
    lat_rows: list[LatRow] = field(default_factory=list)
    failure: str | None = None
    warnings: list[str] = field(default_factory=list)
    closed: bool = False
    cut: str | None = None  # a row that did not fit: bad unless the output ends there

    def feed(self, number: int, raw: str) -> None:
        line = raw.strip()
        if not line:
            return
        if self.cut is not None:
            raise ParseError(self.cut)
        if self._run_fact(number, line):
            return
        if self.columns is not None and not self.closed:
            self._table_line(number, line)
        elif self.test is not None and self.columns is None and ":" in line:
            for match in _SETTING.finditer(line):
                self.settings.setdefault(match["key"].strip().lower(), match["value"])

    def _run_fact(self, number: int, line: str) -> bool:
        """Read a line that is not the table's or the settings'; True when it was one."""
        if any(words in line for words in _FAILURES):
            self.failure = self.failure or line[:200]
        elif _CPU_WARNING in line:
            self.warnings.append(line[:200])
        elif _PEAK_NOT_MEASURED in line:
            self.peak_measured = False
        elif "Waiting for client to connect" in line:
            self.server = True
        elif _PICKED.match(line) or _GPU_NAME.match(line):
            self._gpu(line)
        elif _TITLE.match(line):
            self._title(number, _TITLE.match(line))
        elif line.startswith("#bytes"):
            self._header(number, line)
        else:
            return False
        return True

    def _gpu(self, line: str) -> None:
        picked, name = _PICKED.match(line), _GPU_NAME.match(line)
        if picked:
            self.cuda_device = int(picked["gpu"])
        if name:
            self.gpu_name = name["name"].strip()

    def _title(self, number: int, title: re.Match[str] | None) -> None:
        assert title is not None  # noqa: S101 - the caller matched it
        if title["op"] != "RDMA_Write":
            raise ParseError(
                f"perftest output line {number}: {title.group(0).strip()[:40]!r} is not "
                "ib_write_bw's or ib_write_lat's (another perftest program)"
            )
        if self.test is not None:
            raise ParseError(
                f"perftest output line {number}: a second test title (several runs in one "
                "output; give one run's output)"
            )
        self.test = WRITE_BW if title["kind"] == "BW" else WRITE_LAT
        self.bidirectional = "Bidirectional" in title["extra"].split()

    def _header(self, number: int, line: str) -> None:
        if self.test is None:
            raise ParseError(f"perftest output line {number}: a result table before any title")
        text = line.replace("BW peak", "bw_peak").replace("BW average", "bw_average")
        text = text.replace("99.9% percentile", "p999").replace("99% percentile", "p99")
        names = text.split()
        known = _BW_NAMES if self.test == WRITE_BW else _LAT_NAMES
        columns: dict[str, int] = {}
        for index, name in enumerate(names):
            key = name.lower()
            if self.test == WRITE_BW and key.startswith(("bw_peak[", "bw_average[")):
                key, _, unit = key.partition("[")
                self.unit = unit.rstrip("]")
                if self.unit not in _UNIT_TO_GBIT:
                    raise ParseError(f"perftest output line {number}: unknown unit {unit[:16]!r}")
            if key in known:
                columns[known[key]] = index
        needed = (
            {"size", "iterations", "average"}
            if self.test == WRITE_BW
            else {"size", "iterations", "typical"}
        )
        if not needed <= set(columns):
            raise ParseError(
                f"perftest output line {number}: the table header lacks "
                f"{', '.join(sorted(needed - set(columns)))}"
            )
        self.columns = columns

    def _table_line(self, number: int, line: str) -> None:
        if _RULE.match(line):
            self.closed = True
            return
        tokens = line.split()
        if not _COUNT.match(tokens[0]):
            return  # perftest's chatter between rows (or a shell prompt)
        columns = self.columns
        assert columns is not None  # noqa: S101 - the caller checked
        if len(tokens) < 1 + max(columns.values()):
            self.cut = (
                f"perftest output line {number}: a result row with {len(tokens)} "
                "fields, fewer than its header names"
            )
            return
        if self.test == WRITE_BW:
            self.bw_rows.append(self._bw_row(tokens, columns, number))
        else:
            self.lat_rows.append(self._lat_row(tokens, columns, number))

    def _bw_row(self, tokens: list[str], columns: dict[str, int], number: int) -> BwRow:
        factor = _UNIT_TO_GBIT[self.unit or "gb/sec"]
        average = _number(tokens[columns["average"]], number) * factor
        peak = None
        if "peak" in columns and self.peak_measured:
            peak = _number(tokens[columns["peak"]], number) * factor
            # Duration runs (-D) print 0.00 without the warning on some builds: a peak
            # below a real average is no reading.
            peak = None if peak == 0 and average > 0 else peak
        rate = columns.get("msg_rate")
        return BwRow(
            size_bytes=_count(tokens[columns["size"]], number),
            iterations=_count(tokens[columns["iterations"]], number),
            peak_gbit_s=peak,
            average_gbit_s=average,
            msg_rate_mpps=_number(tokens[rate], number) if rate is not None else None,
        )

    @staticmethod
    def _lat_row(tokens: list[str], columns: dict[str, int], number: int) -> LatRow:
        def optional(name: str) -> float | None:
            index = columns.get(name)
            return _number(tokens[index], number) if index is not None else None

        return LatRow(
            size_bytes=_count(tokens[columns["size"]], number),
            iterations=_count(tokens[columns["iterations"]], number),
            typical_us=_number(tokens[columns["typical"]], number),
            min_us=optional("min"),
            max_us=optional("max"),
            average_us=optional("average"),
            stdev_us=optional("stdev"),
            p99_us=optional("p99"),
            p999_us=optional("p999"),
        )

    def finish(self) -> PerftestParsed:
        if self.cut is not None and self.closed:
            raise ParseError(self.cut)
        if self.test is None and self.failure is None:
            raise ParseError(
                "the output holds no perftest title ('RDMA_Write BW Test') and no perftest "
                "failure line (not ib_write_bw or ib_write_lat output)"
            )
        rows = self.bw_rows or self.lat_rows
        qps = self.settings.get("number of qps")
        return PerftestParsed(
            test=self.test,
            bidirectional=self.bidirectional,
            server=self.server,
            device=self.settings.get("device"),
            link_type=self.settings.get("link type"),
            qps=int(qps) if qps is not None and _COUNT.match(qps) else None,
            cuda_device=self.cuda_device,
            gpu_name=self.gpu_name,
            unit={"gb/sec": "Gb/sec", "mb/sec": "MB/sec", "mib/sec": "MiB/sec"}.get(
                self.unit or ""
            ),
            bw_rows=tuple(self.bw_rows),
            lat_rows=tuple(self.lat_rows),
            failure=self.failure,
            warnings=tuple(self.warnings),
            complete=self.closed and bool(rows) and self.failure is None,
        )


def _count(token: str, number: int) -> int:
    if not _COUNT.match(token):
        raise ParseError(f"perftest output line {number}: {token[:24]!r} is not a count")
    return int(token)


def _number(token: str, number: int) -> float:
    if len(token) > 40 or not _NUMBER.match(token):
        raise ParseError(f"perftest output line {number}: {token[:24]!r} is not a number")
    value = float(token)
    if not math.isfinite(value):
        raise ParseError(f"perftest output line {number}: {token[:24]!r} is not finite")
    return value


def parse_perftest(text: str) -> PerftestParsed:
    """Parse one ``ib_write_bw`` or ``ib_write_lat`` output (layouts: the module docstring).

    Raises:
        ParseError: text too large, no perftest title or failure line (not perftest
            output), another perftest program's output, a table header without the
            columns it needs, a row that does not fit it (other than a last row cut with
            the output), a figure that is not a number.
    """
    if len(text) > TOOL_OUTPUT_BYTES:
        raise ParseError(
            f"perftest output of {len(text)} characters is over the {TOOL_OUTPUT_BYTES} "
            "a run prints (not one perftest run)"
        )
    reader = _Reader()
    for number, line in enumerate(text.splitlines(), start=1):
        reader.feed(number, line)
    return reader.finish()


__all__: Sequence[str] = (
    "WRITE_BW",
    "WRITE_LAT",
    "BwRow",
    "LatRow",
    "PerftestParsed",
    "parse_perftest",
)
