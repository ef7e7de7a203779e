"""The drift results as a node_exporter textfile, built and written with prometheus_client.

Metrics, every one a gauge:

* ``gpuready_certified{host}``: 1 when the node matches its latest certificate, else 0;
* ``gpuready_drift_status{host,status}``: 1 for the node's state, 0 for the others
  (ok, drift, unknown, never_certified);
* ``gpuready_drift_findings{host,check}``: drift findings per check, every check
  listed, 0 when clean;
* ``gpuready_last_check_timestamp_seconds{host}``: when the node was checked.

:func:`write_prometheus` writes through ``write_to_textfile``: a temporary file
beside the target (named so that the collector, which reads ``*.prom``, skips it),
renamed over it, so node_exporter never reads half a file.
"""

from __future__ import annotations

import datetime
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest, write_to_textfile

from validator.errors import ReportError
from validator.model import (
    DRIFT_CHECKS,
    DriftState,
    NodeResult,
    Verdict,
    drift_findings,
    drift_state,
)


def drift_registry(results: Sequence[NodeResult], *, now: datetime.datetime) -> CollectorRegistry:
    """A registry holding the drift metrics of ``results``, checked at ``now`` (naive: UTC)."""
    registry = CollectorRegistry()
    certified = Gauge(
        "gpuready_certified",
        "1 when the node matches its latest gpuready certificate.",
        ["host"],
        registry=registry,
    )
    status = Gauge(
        "gpuready_drift_status",
        "The node's drift state: ok, drift, unknown or never_certified.",
        ["host", "status"],
        registry=registry,
    )
    findings = Gauge(
        "gpuready_drift_findings",
        "Drift findings from the certificate, by check.",
        ["host", "check"],
        registry=registry,
    )
    checked = Gauge(
        "gpuready_last_check_timestamp_seconds",
        "When gpuready last checked the node for drift.",
        ["host"],
        registry=registry,
    )
    moment = now if now.tzinfo else now.replace(tzinfo=datetime.timezone.utc)
    for result in results:
        host = result.hostname
        certified.labels(host).set(1 if result.verdict is Verdict.CERTIFIED else 0)
        state = drift_state(result)
        for each in DriftState:
            status.labels(host, each.value).set(1 if each is state else 0)
        counts = Counter(finding.check for finding in drift_findings(result.findings))
        for check in (*DRIFT_CHECKS, *(c for c in counts if c not in DRIFT_CHECKS)):
            findings.labels(host, check).set(counts[check])
        checked.labels(host).set(round(moment.timestamp(), 3))
    return registry


def render_prometheus(results: Sequence[NodeResult], *, now: datetime.datetime) -> str:
    """The drift results in node_exporter's textfile format (see the module's list).

    Args:
        results: the drift results, one per host.
        now: the time of the check (naive: UTC).
    """
    return generate_latest(drift_registry(results, now=now)).decode("utf-8")


def write_prometheus(
    path: str | os.PathLike[str], results: Sequence[NodeResult], *, now: datetime.datetime
) -> Path:
    """Write the textfile atomically, readable by node_exporter's own user.

    Raises:
        ReportError: the directory is missing or not writable.
    """
    target = Path(path)
    try:
        write_to_textfile(os.fspath(target), drift_registry(results, now=now))
        # The temporary file was created under the umask; node_exporter often runs
        # as its own user and must be able to read it.
        os.chmod(target, 0o644)
    except OSError as exc:
        raise ReportError(
            f"cannot write the Prometheus file {target}: {exc.strerror or exc}"
        ) from None
    return target


__all__ = ["drift_registry", "render_prometheus", "write_prometheus"]
