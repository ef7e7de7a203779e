"""The drift results as a node_exporter textfile, built and written with prometheus_client.

Metrics, every one a gauge:

* ``gpuready_certified{host}``: 1 when the node matches its latest certificate, else 0;
* ``gpuready_drift_status{host,status}``: 1 for the node's state, 0 for the others
  (ok, drift, unknown, never_certified);
* ``gpuready_drift_findings{host,check}``: drift findings per check, every check
  listed, 0 when clean;
* ``gpuready_last_check_timestamp_seconds{host}``: when the node was checked.

:func:`write_prometheus` writes through the one atomic writer
(:func:`validator.files.write_atomic`): a temporary file beside the target, named
``.<name>.<random>.tmp`` so that the collector, which reads ``*.prom``, skips it,
fsynced and renamed over the target, so node_exporter never reads half a file; a
failed or interrupted write removes it. A target that exists and is not a regular
file (a device, a pipe, a folder) is refused: the rename would replace it, and
``gpuready drift`` often runs as root. :func:`textfile_problem` says what is wrong
with a path before anything is measured.
"""

from __future__ import annotations

import datetime
import os
import stat
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from validator.error_tree import ReportError, UnsafePathError
from validator.files import check_path, write_atomic
from validator.model import (
    DRIFT_CHECKS,
    DriftState,
    NodeResult,
    Verdict,
    drift_findings,
    drift_state,
)
from validator.safe_text import one_line


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
        # A host names itself: a dashboard shows the label, so no control character in it
        host = one_line(result.hostname)
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


def _not_a_file(target: Path) -> bool:
    """True when ``target`` exists (through a link, too) and is not a regular file."""
    try:
        return not stat.S_ISREG(target.stat().st_mode)
    except FileNotFoundError:
        return False  # absent, or a dangling link: the rename puts a file there
    except NotADirectoryError:
        return False  # the folder is not one: the write says so
    except OSError:
        return False  # cannot tell (no permission): the write says what is wrong


def textfile_problem(path: str) -> str | None:
    """What keeps ``path`` from being written as the textfile, before anything is measured.

    Returns:
        The problem and its fix as one phrase, or None when the path looks writable (the
        write itself can still fail: a full disk, a folder without write permission).
    """
    if not path:
        return "is empty; give the path of a .prom file"
    target = Path(path)
    folder = target.parent
    if not folder.exists():
        return f"{path}: the folder {folder} does not exist; create it or give another path"
    if not folder.is_dir():
        return f"{path}: {folder} is not a folder; give another path"
    if target.is_symlink():
        check_path(target)  # a link planted there: refused by name, never followed
    if _not_a_file(target):
        return f"{path}: it exists and is not a regular file; give a file path"
    return None


def write_prometheus(
    path: str | os.PathLike[str], results: Sequence[NodeResult], *, now: datetime.datetime
) -> Path:
    """Write the textfile atomically, readable by node_exporter's own user (0644).

    Raises:
        ReportError: the folder is missing or not writable, the disk is full, or the
            target is not a regular file; no temporary file is left behind.
    """
    target = Path(path)
    if _not_a_file(target):
        raise ReportError(
            f"cannot write the Prometheus file {target}: it exists and is not a regular file"
        )
    text = render_prometheus(results, now=now)
    try:
        # node_exporter often runs as its own user and must be able to read it.
        write_atomic(target, text, mode=0o644)
    except UnsafePathError:
        raise  # a link planted since the check: bad input, named as it is
    except (OSError, ValueError) as exc:  # ValueError: a path with a NUL byte
        raise ReportError(
            f"cannot write the Prometheus file {target}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    return target


__all__ = ["drift_registry", "render_prometheus", "textfile_problem", "write_prometheus"]
