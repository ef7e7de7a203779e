"""Drift for Slurm: one NHC-style line for HealthCheckProgram, and a drained node's reason.

The line's exit code is the one rule of :mod:`validator.service.outcome`: 0 no
drift on any node, 3 nothing could be checked, 1 for anything else (drift, or
some node that could not be shown unchanged: HealthCheckProgram wrappers drain on
it), 130 when the run was interrupted. A run history could not record ends its line
with ``(not recorded)``, and keeps its exit code.
"""

from __future__ import annotations

from collections.abc import Sequence

from validator.judge.verdict import exit_code
from validator.model import NodeResult, Verdict, overall_verdict
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


def _nhc_line(results: Sequence[NodeResult], *, interrupted: bool) -> tuple[int, str]:
    code = int(exit_code((r.verdict for r in results), interrupted=interrupted))
    if not results:
        return code, _line("unknown: no node was checked")
    overall = overall_verdict(r.verdict for r in results)
    alone = len(results) == 1

    def named(result: NodeResult, state: str = "") -> str:
        return result.summary if alone else f"{result.hostname}: {state}{result.summary}"

    if overall is Verdict.CERTIFIED:
        return code, _line("ok: " + "; ".join(named(r) for r in results))
    if overall is Verdict.UNKNOWN:
        return code, _line("unknown: " + "; ".join(named(r) for r in results))
    drifted = [named(r) for r in results if r.verdict is Verdict.NOT_CERTIFIED]
    unknown = [named(r, "unknown: ") for r in results if r.verdict is Verdict.UNKNOWN]
    return code, _line("; ".join(drifted + unknown))


def slurm_reason(result: NodeResult) -> str:
    """The drain reason for a drifted node: ``gpuready: <summary>``, one line."""
    return _line(result.summary)


__all__ = ["NHC_MAX_CHARS", "nhc_line", "slurm_reason"]
