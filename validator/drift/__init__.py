"""Drift: what moved on a node since it was certified. Pure: no I/O.

:func:`compare` (:mod:`.compare`) holds a node's facts of now against its latest
certificate (verified first by the caller: a certificate that failed its check is an
:class:`UntrustedBaseline`, never compared with) and says, check by check, what changed.
Each check family's comparison is one module named after the check it pairs with
(``<family>_drift.py`` beside ``validator/judge/checks/<family>.py``): versions
(driver, CUDA, kernel module, nvcc, cuDNN, VBIOS), inventory (GPUs added, removed or
swapped), power caps, PCIe links and replays, errors (ECC, row remaps, retired pages,
new hardware Xids), state (persistence mode, the driver's recovery action), NVLinks
(state, speed, error counters), the interconnect's bandwidths, DCGM's results and, when
a burn-in was run, its speed; :data:`~.compare.FAMILY_COMPARISONS` pairs each family with
its comparison, and what they share is :mod:`.drift_helpers`.
:func:`drift_node` (:mod:`.drift_verdict`) turns that into a :class:`NodeResult`, so the
JSON report, the store and the exit code work as for ``certify``. :mod:`.nhc` gives the line for
Slurm's HealthCheckProgram and a drained node's reason.

The checks are built with the judge's own constructors and helpers
(:mod:`validator.judge.checks.finding_helpers`, the Xid grouping of
:mod:`validator.judge.checks.errors`). The terminal text and the Prometheus
textfile are renderers (:mod:`validator.report.drift_text`,
:mod:`validator.report.prometheus`); they read a result's drift state and the
drift checks from the model (:class:`~validator.model.DriftState`,
:func:`~validator.model.drift_state`, :class:`~validator.model.DriftCheck`,
:data:`~validator.model.DRIFT_CHECKS`), where this package takes them from too.
The command's whole job is :func:`validator.service.drift_service.run_drift`.
"""

from __future__ import annotations

from validator.drift.compare import compare
from validator.drift.drift_verdict import (
    NEVER_CERTIFIED,
    NOT_TRUSTED,
    OLDER_PROVENANCE,
    NoCertificate,
    UntrustedBaseline,
    drift_by_check,
    drift_node,
    not_certified_by,
    revoked,
)
from validator.drift.nhc import NHC_MAX_CHARS, nhc_line, slurm_reason

__all__ = [
    "NEVER_CERTIFIED",
    "NHC_MAX_CHARS",
    "NOT_TRUSTED",
    "OLDER_PROVENANCE",
    "NoCertificate",
    "UntrustedBaseline",
    "compare",
    "drift_by_check",
    "drift_node",
    "nhc_line",
    "not_certified_by",
    "revoked",
    "slurm_reason",
]
