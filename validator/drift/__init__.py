"""Drift: what moved on a node since it was certified. Pure: no I/O.

:func:`compare` (:mod:`.compare`, :mod:`.gpus`) holds a node's facts of now
against its latest certificate and says, check by check, what changed: versions,
GPU identity, power caps, PCIe links, error counters, new hardware Xids,
persistence mode and, when a burn-in was run, its speed. :func:`drift_node`
(:mod:`.verdict`) turns that into a :class:`NodeResult`, so the JSON report, the
store and the exit code work as for ``certify``. :mod:`.nhc` gives the line for
Slurm's HealthCheckProgram and a drained node's reason.

The checks are built with the judge's own constructors and helpers
(:mod:`validator.judge.checks.common`, the Xid grouping of
:mod:`validator.judge.checks.errors`). The terminal text and the Prometheus
textfile are renderers (:mod:`validator.report.drift_text`,
:mod:`validator.report.prometheus`); the command's whole job is
:func:`validator.operations.drift.run_drift`.
"""

from __future__ import annotations

from validator.drift.compare import DRIFT_CHECKS, compare
from validator.drift.nhc import NHC_MAX_CHARS, nhc_line, slurm_reason
from validator.drift.verdict import (
    NEVER_CERTIFIED,
    DriftState,
    drift_by_check,
    drift_findings,
    drift_node,
    drift_state,
    never_certified,
)

__all__ = [
    "DRIFT_CHECKS",
    "NEVER_CERTIFIED",
    "NHC_MAX_CHARS",
    "DriftState",
    "compare",
    "drift_by_check",
    "drift_findings",
    "drift_node",
    "drift_state",
    "never_certified",
    "nhc_line",
    "slurm_reason",
]
