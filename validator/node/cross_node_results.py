"""From a tool's output between nodes to the model: one RDMA pair, one NCCL group.

The parsers read the text (:mod:`validator.node.parsers.perftest`,
:mod:`validator.node.parsers.nccl_tests`); this puts what they read into
:class:`RdmaPairResult` and :class:`NcclGroupResult`, with who ran it and how. A run
that failed or was cut short keeps no figure: its values are Unavailable with the
reason, and ``completed`` is False.
"""

from __future__ import annotations

import dataclasses

from validator.model import (
    AllReducePoint,
    NcclGroupResult,
    RdmaEnd,
    RdmaPairResult,
    Reason,
    Unavailable,
)
from validator.node.parsers.nccl_tests import (
    NcclParsed,
    NcclRow,
    parse_all_reduce,
    parse_alltoall,
)
from validator.node.parsers.perftest import WRITE_BW, BwRow, LatRow, parse_perftest

_PEAK_NOT_MEASURED = Unavailable(
    Reason.NOT_SUPPORTED, "perftest does not measure the peak in this mode (-b, -D)"
)


def _not_measured(why: str) -> Unavailable:
    return Unavailable(Reason.ERROR, why)


def rdma_pair_result(
    text: str, server: RdmaEnd, client: RdmaEnd, command: str = ""
) -> RdmaPairResult:
    """The pair test the client's ib_write_bw or ib_write_lat output records.

    Raises:
        ParseError: the text is not ib_write_bw or ib_write_lat output.
    """
    parsed = parse_perftest(text)
    test = parsed.test or (WRITE_BW if "_bw" in command else "write_lat")
    if not parsed.complete:
        why = parsed.failure or "the run was cut short (no closing rule after its table)"
        failed = failed_pair(test, server, client, command, _not_measured(why))
        return dataclasses.replace(failed, bidirectional=parsed.bidirectional)
    row = parsed.largest
    if isinstance(row, BwRow):
        return RdmaPairResult(
            server=server,
            client=client,
            test=test,
            size_bytes=row.size_bytes,
            bw_peak_gbit_s=_PEAK_NOT_MEASURED if row.peak_gbit_s is None else row.peak_gbit_s,
            bw_average_gbit_s=row.average_gbit_s,
            bidirectional=parsed.bidirectional,
            command=command,
            completed=True,
        )
    assert isinstance(row, LatRow)  # noqa: S101 - a complete run has a row
    unprinted = Unavailable(Reason.NOT_SUPPORTED, "this perftest build does not print it")
    return RdmaPairResult(
        server=server,
        client=client,
        test=test,
        size_bytes=row.size_bytes,
        lat_typical_us=row.typical_us,
        lat_average_us=unprinted if row.average_us is None else row.average_us,
        lat_p999_us=unprinted if row.p999_us is None else row.p999_us,
        command=command,
        completed=True,
    )


def nccl_group_result(
    text: str, collective: str, variant: str = "default", command: str = ""
) -> NcclGroupResult:
    """The group test an all_reduce_perf or alltoall_perf output records.

    Raises:
        ParseError: the text is not that program's output.
    """
    parsed = (parse_alltoall if collective == "alltoall" else parse_all_reduce)(text)
    points = tuple(_point(row) for row in parsed.rows)
    if not parsed.complete or not points:
        why = parsed.failure or "the run was cut short (no out-of-bounds footer)"
        failed = failed_group(parsed.hosts, collective, variant, command, _not_measured(why))
        return dataclasses.replace(
            failed, ranks=len(parsed.ranks), points=points, nccl_version=parsed.nccl_version
        )
    largest = max(points, key=lambda point: point.size_bytes)
    return NcclGroupResult(
        hosts=parsed.hosts,
        ranks=len(parsed.ranks),
        collective=collective,
        variant=variant,
        points=points,
        largest_busbw_gb_s=largest.busbw_gb_s,
        wrong=_wrong(parsed),
        out_of_bounds=parsed.out_of_bounds if parsed.out_of_bounds is not None else 0,
        nccl_version=parsed.nccl_version,
        command=command,
        completed=True,
    )


def failed_pair(
    test: str, server: RdmaEnd, client: RdmaEnd, command: str, gone: Unavailable
) -> RdmaPairResult:
    """A pair test that gave no figure: every figure ``gone``, its reason the detail."""
    return RdmaPairResult(
        server=server,
        client=client,
        test=test,
        size_bytes=gone,
        bw_peak_gbit_s=gone,
        bw_average_gbit_s=gone,
        lat_typical_us=gone,
        lat_average_us=gone,
        lat_p999_us=gone,
        command=command,
        completed=False,
        detail=gone.detail,
    )


def failed_group(
    hosts: tuple[str, ...], collective: str, variant: str, command: str, gone: Unavailable
) -> NcclGroupResult:
    """A group test that gave no figure: every figure ``gone``, its reason the detail."""
    return NcclGroupResult(
        hosts=hosts,
        ranks=0,
        collective=collective,
        variant=variant,
        largest_busbw_gb_s=gone,
        wrong=gone,
        out_of_bounds=gone,
        command=command,
        completed=False,
        detail=gone.detail,
    )


def _point(row: NcclRow) -> AllReducePoint:
    wrong = None
    if row.wrong is not None or row.in_place_wrong is not None:
        wrong = (row.wrong or 0) + (row.in_place_wrong or 0)
    return AllReducePoint(
        size_bytes=row.size_bytes,
        time_us=row.time_us,
        algbw_gb_s=row.algbw_gb_s,
        busbw_gb_s=row.busbw_gb_s,
        busbw_in_place_gb_s=row.in_place_busbw_gb_s,
        wrong=wrong,
    )


def _wrong(parsed: NcclParsed) -> int | Unavailable:
    counted = [n for row in parsed.rows for n in (row.wrong, row.in_place_wrong) if n is not None]
    if not counted:
        return Unavailable(Reason.NOT_SUPPORTED, "not validated, or this layout prints errors")
    return sum(counted)


__all__ = ["failed_group", "failed_pair", "nccl_group_result", "rdma_pair_result"]
