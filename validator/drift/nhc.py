"""Drift for Slurm: one NHC-style line for HealthCheckProgram, and a drained node's reason.

NHC (and a Prolog, and every HealthCheckProgram wrapper) reads any exit status but 0
as a failed check. So the line's exit code is 0 only when every node shows no drift
from a certificate it may be compared with, and 1 for anything else: drift, a
certificate not trusted or revoked, a node never certified (or whose certification
failed), a node that could not be shown unchanged, no node at all. 130 when the run
was interrupted (the CLI says 143 or 129 for SIGTERM or SIGHUP). Without ``--nhc``,
drift keeps the one rule of :mod:`validator.service.outcome` (3 when nothing could be
judged). A run history could not record ends its line with ``(not recorded)``, and
keeps its exit code. The README's ``--nhc`` table lists every code.
"""

from __future__ import annotations

from collections.abc import Sequence

from validator.error_tree import ExitCode
from validator.model import NodeResult, Verdict, never_certified, overall_verdict
from validator.safe_text import one_line

# Slurm keeps a node's reason in a fixed buffer on some versions; a long reason
# is cut anyway, and one line that fits a terminal reads better.
NHC_MAX_CHARS = 240
PREFIX = "gpuready:"
NOT_RECORDED = " (not recorded)"


def _line(text: str) -> str:
    return one_line(f"{PREFIX} {text}", NHC_MAX_CHARS)


def nhc_line(
    results: Sequence[NodeResult], *, interrupted: bool = False, recorded: bool = True
) -> tuple[int, str]:
    """The exit code and one line prefixed ``gpuready:``, as NHC-style health checks give.

    One node is named by its summary alone; several, each by hostname. A run that
    is not clean names the drifted nodes first, then those that could not be checked.
    A run that history could not record says so at the end, within the line's limit.
    """
    code, line = _nhc_line(results, interrupted=interrupted)
    if recorded:
        return code, line
    return code, one_line(line, NHC_MAX_CHARS - len(NOT_RECORDED)) + NOT_RECORDED


def nhc_exit(results: Sequence[NodeResult], *, interrupted: bool = False) -> int:
    """0 only when there are results and every one shows no drift; 130 interrupted; else 1."""
    if interrupted:
        return int(ExitCode.INTERRUPTED)
    clean = bool(results) and all(r.verdict is Verdict.CERTIFIED for r in results)
    return int(ExitCode.OK if clean else ExitCode.NOT_CERTIFIED)


def _unknown(result: NodeResult) -> str:
    """``unknown: `` before a summary that could not show a node unchanged.

    A node without a certificate says so in its own summary ("never certified: ...",
    "not certified: run 7 ..."), which "unknown:" would only blur.
    """
    return "" if never_certified(result) else "unknown: "


def _nhc_line(results: Sequence[NodeResult], *, interrupted: bool) -> tuple[int, str]:
    code = nhc_exit(results, interrupted=interrupted)
    if not results:
        return code, _line("unknown: no node was checked")
    overall = overall_verdict(r.verdict for r in results)
    alone = len(results) == 1

    def named(result: NodeResult, state: str = "") -> str:
        return result.summary if alone else f"{result.hostname}: {state}{result.summary}"

    if overall is Verdict.CERTIFIED:
        return code, _line("ok: " + "; ".join(named(r) for r in results))
    if overall is Verdict.UNKNOWN and alone:
        return code, _line(_unknown(results[0]) + results[0].summary)
    drifted = [named(r) for r in results if r.verdict is Verdict.NOT_CERTIFIED]
    unknown = [named(r, _unknown(r)) for r in results if r.verdict is Verdict.UNKNOWN]
    return code, _line("; ".join(drifted + unknown))


def slurm_reason(result: NodeResult) -> str:
    """The drain reason for a drifted node: ``gpuready: <summary>``, one line."""
    return _line(result.summary)


__all__ = ["NHC_MAX_CHARS", "nhc_exit", "nhc_line", "slurm_reason"]
