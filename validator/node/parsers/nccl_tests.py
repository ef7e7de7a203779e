r"""Parse nccl-tests output (``all_reduce_perf``, ``alltoall_perf``), every layout it has printed.

What nccl-tests prints (NVIDIA/nccl-tests ``src/common.cu`` and ``src/util.cu``):

* ``# nThread 1 nGpus 8 minBytes ... validation: 1 graph: 0`` (the run's settings);
* ``# Using devices``, then one line a rank: ``#  Rank  0 Group  0 Pid 39280 on host
  device  0 [0x0f] NVIDIA H200`` (before NCCL 2.13's resync: no ``Group``; newest:
  ``[0000:0f:00]``, domain:bus:device); the ranks are those lines, and the hosts they
  name say whether the run spans several nodes;
* ``NCCL version 2.19.3+cuda12.2`` (NCCL's own line; NCCL's INFO lines may be
  interleaved anywhere, ``host:pid:tid [0] NCCL INFO ...``) or, newest, ``# nccl-tests
  version 2.19.6 nccl-headers=22807 nccl-library=22807``;
* the table: a header naming its columns (``size count type redop root time algbw busbw
  #wrong time algbw busbw #wrong``; before 2.13 no ``root``, and ``error``, the largest
  relative error, instead of ``#wrong``; ``N/A`` when not validated; newest builds may
  add per-iteration columns and a timestamp), the first ``time``/``algbw``/``busbw``
  out of place, the second in place; one row a message size;
* ``# Out of bounds values : 0 OK`` (``N FAILED``) and ``# Avg bus bandwidth : 68.4048``.

``alltoall_perf`` prints the same table with ``none`` as its reduction; before 2.13 it
left the ``redop`` cell blank (the row is one field short of its header). A multi-node
run launched by srun or mpirun with an MPI build prints one header, rank 0's, listing
every rank; a build without MPI launched the same way runs each process alone and
prints one header each, every one naming a rank 0: that is refused (not one run).

Columns are found by the header's names, so every layout reads the same way. Fail
closed: text with neither a rank list nor a result table nor nccl-tests' own failure
line (``Test NCCL failure common.cu:961 '...'``: the run failed, never a figure) is not
nccl-tests output; a
row that does not fit the header is bad input, except a last line cut mid-row where the
output ends before its footer (the run is then :attr:`NcclParsed.complete` False).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from validator.node.parsers.base import ParseError

_MAX_INT_DIGITS = 20  # a message size fits 64 bits
_MAX_NUMBER_CHARS = 40
_FLOAT = re.compile(r"^[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?$")
# Digits are ASCII ([0-9]) throughout: \d and str.isdigit() also take '٣' or '²', which
# int() reads as 3 or refuses (a crash, not a parse error).
_COUNT = re.compile(r"[0-9]+")
_RANK = re.compile(
    r"^#\s*Rank\s+(?P<rank>[0-9]+)\s+(?:Group\s+(?P<group>[0-9]+)\s+)?Pid\s+(?P<pid>[0-9]+)\s+"
    r"on\s+(?P<host>\S+)\s+device\s+(?P<device>[0-9]+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*)$"
)
_NCCL_VERSION = re.compile(r"\bNCCL version (?P<version>[0-9]+\.[0-9]+\.[0-9]+\S*)")
_TESTS_VERSION = re.compile(
    r"^#\s*nccl-tests version \S+.*\bnccl-library=(?P<code>[0-9]{4,6})(?![0-9A-Za-z_])"
)
_PROGRAM = re.compile(r"^#\s*Collective test (?:starting|concluded):\s*(?P<program>\S+)")
_SETTINGS = re.compile(r"^#\s*nThread\s+[0-9]+\s+nGpus\s+[0-9]+(?![0-9A-Za-z_])")
_VALIDATION = re.compile(r"\bvalidation:\s*(?P<value>[0-9]+)")
_OUT_OF_BOUNDS = re.compile(
    r"^#\s*Out of bounds values\s*:\s*(?P<count>[0-9]+)\s*(?P<word>OK|FAILED)?"
)
# nccl-tests' own failure lines (src/common.h): "host: Test NCCL failure common.cu:961
# 'internal error ...'", " .. host pid 914454: Test failure common.cu:844", "Test CUDA
# failure ...". NCCL's "NCCL WARN" lines alone say nothing of the run's end.
_FAILURE = re.compile(r"\bTest (?:NCCL |CUDA )?failure\s+\S+:[0-9]+")
_AVERAGE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>\S+)")
# The reductions all_reduce_perf runs (-o); all_gather and the others print "none".
_REDUCTIONS = ("sum", "prod", "max", "min", "avg", "mulsum")
ALL_REDUCE_PROGRAMS = ("all_reduce_perf", "all_reduce_perf_mpi")
ALLTOALL_PROGRAMS = ("alltoall_perf", "alltoall_perf_mpi")
# nccl-tests' DeltaMaxValue: the largest relative error a reduction's result may have
# before the layouts with an ``error`` column count it out of bounds. The 16-bit floats
# take the loosest value any release used (5e-2), so what nccl-tests passed passes here.
ERROR_TOLERANCE = {
    **dict.fromkeys(("half", "float16", "bfloat16"), 5e-2),
    **dict.fromkeys(("float", "float32"), 1e-5),
    **dict.fromkeys(("double", "float64"), 1e-12),
    # Integers must be exact (1e-200 in nccl-tests).
    **dict.fromkeys(("int8", "uint8", "int32", "uint32", "int64", "uint64", "int"), 0.0),
}


@dataclass(frozen=True)
class NcclRank:
    """One rank of the run, as its ``# Rank`` line gives it.

    Attributes:
        rank: the rank number.
        host: the host it ran on.
        device: the CUDA device number on that host.
        bus: what nccl-tests printed in brackets: ``0x0f`` (the PCI bus) or
            ``0000:0f:00`` (domain:bus:device).
        name: the board's name.
    """

    rank: int
    host: str
    device: int
    bus: str
    name: str
    pid: int | None = None


@dataclass(frozen=True)
class NcclRow:
    """One message size of the sweep (out of place first, then in place).

    ``wrong`` is nccl-tests' ``#wrong`` (elements wrong); None where not validated
    (``N/A``) or where the layout prints the largest relative error instead
    (``error``, then in ``max_error``; :attr:`out_of_bounds` says which halves exceed
    nccl-tests' tolerance).
    """

    size_bytes: int
    count: int
    dtype: str
    redop: str
    time_us: float
    algbw_gb_s: float
    busbw_gb_s: float
    in_place_time_us: float | None = None
    in_place_algbw_gb_s: float | None = None
    in_place_busbw_gb_s: float | None = None
    wrong: int | None = None
    in_place_wrong: int | None = None
    max_error: float | None = None
    in_place_max_error: float | None = None

    @property
    def out_of_bounds(self) -> int | None:
        """Halves (out of place, in place) whose ``error`` is above nccl-tests' tolerance.

        The older layouts' footer counts exactly these. None where no half printed an
        error (``N/A``, or the ``#wrong`` layout) or the data type's tolerance is unknown.
        """
        tolerance = ERROR_TOLERANCE.get(self.dtype.lower())
        errors = [e for e in (self.max_error, self.in_place_max_error) if e is not None]
        if tolerance is None or not errors:
            return None
        return sum(1 for error in errors if error > tolerance)


@dataclass(frozen=True)
class NcclParsed:
    """What one nccl-tests output says."""

    ranks: tuple[NcclRank, ...]
    rows: tuple[NcclRow, ...]
    nccl_version: str | None = None
    program: str | None = None  # "all_reduce_perf", where the output names it
    validation: int | None = None  # the settings line's "validation: N"
    out_of_bounds: int | None = None  # the footer's count; None without a footer
    average_busbw_gb_s: float | None = None
    complete: bool = False  # the footer was read: the output is not cut short
    failure: str | None = None  # nccl-tests' own failure line, where the run failed

    @property
    def hosts(self) -> tuple[str, ...]:
        """The hosts the ranks ran on, in rank order, each once."""
        return tuple(dict.fromkeys(rank.host for rank in self.ranks))

    @property
    def multi_node(self) -> bool:
        """The run spans several hosts: its figures are not one node's."""
        return len(self.hosts) > 1


@dataclass
class _Columns:
    """Where each figure is in a row, from the header's names."""

    size: int
    count: int
    dtype: int
    redop: int
    time: tuple[int, ...]
    algbw: tuple[int, ...]
    busbw: tuple[int, ...]
    wrong: tuple[int, ...]
    wrong_is_count: bool  # "#wrong" (a count) rather than "error" (a relative error)

    @property
    def needed(self) -> int:
        return 1 + max(
            self.size,
            self.count,
            self.dtype,
            self.redop,
            *self.time,
            *self.algbw,
            *self.busbw,
            *self.wrong,
        )


def _columns(tokens: list[str], number: int) -> _Columns:
    """The columns of a table header (its ``#`` dropped)."""
    names = [token.lower() for token in tokens]

    def all_of(*wanted: str) -> tuple[int, ...]:
        return tuple(i for i, name in enumerate(names) if name in wanted)

    def one(name: str) -> int:
        found = all_of(name)
        if not found:
            raise ParseError(f"nccl-tests output line {number}: the table header has no {name!r}")
        return found[0]

    time, algbw, busbw = all_of("time", "cputime"), all_of("algbw"), all_of("busbw")
    wrong = all_of("#wrong", "error")
    if not (len(algbw) == len(busbw) == len(time)) or not 1 <= len(busbw) <= 2:
        raise ParseError(
            f"nccl-tests output line {number}: the table header has {len(busbw)} busbw and "
            f"{len(time)} time columns (expected out of place and in place)"
        )
    return _Columns(
        size=one("size"),
        count=one("count"),
        dtype=one("type"),
        redop=one("redop"),
        time=time,
        algbw=algbw,
        busbw=busbw,
        wrong=wrong if len(wrong) == len(busbw) else (),
        wrong_is_count="#wrong" in names,
    )


def _whole(token: str, what: str, number: int) -> int:
    if not _COUNT.fullmatch(token) or len(token) > _MAX_INT_DIGITS:
        raise ParseError(f"nccl-tests output line {number}: {what} {token[:24]!r} is not a count")
    return int(token)


def _real(token: str, what: str, number: int) -> float:
    if len(token) > _MAX_NUMBER_CHARS or not _FLOAT.match(token):
        raise ParseError(f"nccl-tests output line {number}: {what} {token[:24]!r} is not a number")
    value = float(token)
    if not math.isfinite(value):
        raise ParseError(f"nccl-tests output line {number}: {what} {token[:24]!r} is not finite")
    return value


def _checked(cell: str, is_count: bool, number: int) -> tuple[int | None, float | None]:
    """(#wrong, largest relative error) of one half of a row; None where not checked.

    nccl-tests prints #wrong with ``%g``, so a large count reads ``1.2e+07``.
    """
    if cell == "N/A":
        return None, None
    value = _real(cell, "#wrong" if is_count else "error", number)
    return (round(value), None) if is_count else (None, value)


def _row(tokens: list[str], columns: _Columns, number: int) -> NcclRow:
    size = _whole(tokens[columns.size], "size", number)
    count = _whole(tokens[columns.count], "count", number)
    halves = []
    for i in range(len(columns.busbw)):
        time = _real(tokens[columns.time[i]], "time", number)
        algbw = _real(tokens[columns.algbw[i]], "algbw", number)
        busbw = _real(tokens[columns.busbw[i]], "busbw", number)
        checked = (
            _checked(tokens[columns.wrong[i]], columns.wrong_is_count, number)
            if columns.wrong
            else (None, None)
        )
        halves.append((time, algbw, busbw, *checked))
    out = halves[0]
    ip = halves[1] if len(halves) > 1 else (None, None, None, None, None)
    return NcclRow(
        size_bytes=size,
        count=count,
        dtype=tokens[columns.dtype],
        redop=tokens[columns.redop],
        time_us=out[0],
        algbw_gb_s=out[1],
        busbw_gb_s=out[2],
        in_place_time_us=ip[0],
        in_place_algbw_gb_s=ip[1],
        in_place_busbw_gb_s=ip[2],
        wrong=out[3],
        in_place_wrong=ip[3],
        max_error=out[4],
        in_place_max_error=ip[4],
    )


@dataclass
class _Reader:
    alltoall: bool = False  # reading alltoall_perf (reduction "none" or blank)
    ranks: list[NcclRank] = field(default_factory=list)
    rows: list[NcclRow] = field(default_factory=list)
    columns: _Columns | None = None
    nccl_version: str | None = None
    program: str | None = None
    validation: int | None = None
    out_of_bounds: int | None = None
    average: float | None = None
    cut_row: str | None = None  # a row that did not fit: bad unless the output ends
    settings_seen: bool = False
    failure: str | None = None

    def feed(self, number: int, raw: str) -> None:
        line = raw.strip()
        if not line:
            return
        if self.cut_row is not None:
            raise ParseError(self.cut_row)
        if self.failure is None and _FAILURE.search(line):
            self.failure = line[:200]
        version = _NCCL_VERSION.search(line)
        if version and self.nccl_version is None:
            self.nccl_version = version["version"]
        if line.startswith("#"):
            self._comment(number, line)
            return
        tokens = line.split()
        # isdigit() is wider than a count on purpose: a row starting '²' or '٣' is
        # refused by _whole, not skipped as foreign text (a host name may start with a
        # digit, so the whole first field must look like a number).
        if self.columns is not None and tokens[0].isdigit():
            self._data(number, tokens)
        # Anything else (NCCL's INFO and WARN lines, a shell prompt, prose around a
        # pasted log) is not nccl-tests' own output.

    def _comment(self, number: int, line: str) -> None:
        rank = _RANK.match(line)
        if rank:
            if any(seen.rank == int(rank["rank"]) for seen in self.ranks):
                raise ParseError(
                    f"nccl-tests output line {number}: rank {rank['rank']} is listed twice "
                    "(several runs in one output: a build without MPI launched once per "
                    "process runs each alone; build nccl-tests with MPI=1)"
                )
            self.ranks.append(
                NcclRank(
                    rank=_whole(rank["rank"], "rank", number),
                    host=rank["host"],
                    device=_whole(rank["device"], "device", number),
                    bus=rank["bus"].strip(),
                    name=rank["name"].strip(),
                    pid=_whole(rank["pid"], "pid", number),
                )
            )
            return
        self._run_facts(number, line)
        tokens = line.lstrip("#").split()
        names = {token.lower() for token in tokens}
        if {"size", "count", "busbw"} <= names:
            self.columns = _columns(tokens, number)

    def _run_facts(self, number: int, line: str) -> None:
        if _SETTINGS.match(line):
            self.settings_seen = True
            validation = _VALIDATION.search(line)
            if validation:
                self.validation = _whole(validation["value"], "validation", number)
        code = _TESTS_VERSION.match(line)
        if code and self.nccl_version is None:
            self.nccl_version = _version_of_code(int(code["code"]))
        program = _PROGRAM.match(line)
        if program:
            self.program = program["program"]
        bounds = _OUT_OF_BOUNDS.match(line)
        if bounds:
            self.out_of_bounds = _whole(bounds["count"], "out-of-bounds count", number)
        average = _AVERAGE.match(line)
        if average:
            self.average = _real(average["value"], "average bus bandwidth", number)

    def _data(self, number: int, tokens: list[str]) -> None:
        columns = self.columns
        assert columns is not None  # noqa: S101 - the caller checked
        if self.alltoall and len(tokens) == columns.needed - 1:
            # Before 2.13 alltoall_perf printed nothing in the redop column.
            tokens = [*tokens[: columns.redop], "", *tokens[columns.redop :]]
        if len(tokens) < columns.needed:
            self.cut_row = (
                f"nccl-tests output line {number}: a result row with {len(tokens)} fields "
                f"where the header names {columns.needed}"
            )
            return
        row = _row(tokens, columns, number)
        if self.alltoall:
            if row.redop.lower() not in ("none", ""):
                raise ParseError(
                    f"nccl-tests output line {number}: reduction {row.redop[:12]!r} in an "
                    "alltoall (is this alltoall_perf output?)"
                )
        elif row.redop.lower() not in _REDUCTIONS:
            raise ParseError(
                f"nccl-tests output line {number}: reduction {row.redop[:12]!r} is no "
                "all-reduce's (is this all_reduce_perf output?)"
            )
        self.rows.append(row)

    def finish(self) -> NcclParsed:
        complete = self.out_of_bounds is not None and self.failure is None
        if self.cut_row is not None and complete:
            raise ParseError(self.cut_row)
        if not self.ranks and not self.rows and not self.settings_seen and not self.failure:
            raise ParseError(
                "the output holds no nccl-tests rank list ('# Using devices') and no result "
                "table (not nccl-tests output)"
            )
        wanted = ALLTOALL_PROGRAMS if self.alltoall else ALL_REDUCE_PROGRAMS
        if self.program is not None and self.program not in wanted:
            raise ParseError(f"the output is {self.program[:40]}'s, not {wanted[0]}'s")
        return NcclParsed(
            ranks=tuple(self.ranks),
            rows=tuple(self.rows),
            nccl_version=self.nccl_version,
            program=self.program,
            validation=self.validation,
            out_of_bounds=self.out_of_bounds,
            average_busbw_gb_s=self.average,
            complete=complete,
            failure=self.failure,
        )


def _version_of_code(code: int) -> str | None:
    """NCCL's version from its code: 22807 is 2.28.7 (NCCL_VERSION_CODE from 2.9 on)."""
    if code < 20900:
        return None
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


def parse_all_reduce(text: str) -> NcclParsed:
    """Parse ``all_reduce_perf`` output (the module docstring lists the layouts).

    Raises:
        ParseError: no rank list and no result table (not nccl-tests output), another
            test's output, a table header without the columns it needs, a row that does
            not fit it (other than a last row cut with the output), a figure that is
            not a number.
    """
    return _read(text, alltoall=False)


def parse_alltoall(text: str) -> NcclParsed:
    """Parse ``alltoall_perf`` output: the same table, reduction ``none`` (or blank).

    Raises:
        ParseError: as :func:`parse_all_reduce`, and for a row with a reduction.
    """
    return _read(text, alltoall=True)


def _read(text: str, alltoall: bool) -> NcclParsed:
    reader = _Reader(alltoall=alltoall)
    for number, line in enumerate(text.splitlines(), start=1):
        reader.feed(number, line)
    return reader.finish()


__all__: Sequence[str] = (
    "ALLTOALL_PROGRAMS",
    "ALL_REDUCE_PROGRAMS",
    "ERROR_TOLERANCE",
    "NcclParsed",
    "NcclRank",
    "NcclRow",
    "parse_all_reduce",
    "parse_alltoall",
)
