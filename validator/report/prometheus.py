"""The node_exporter textfiles, built and written with prometheus_client: drift's here.

Two commands write one, each its own file with its own series, so both can lie in the
textfile collector's folder together (one series in two files is a scrape error):
``gpuready certify --prom-file`` (:mod:`validator.report.prometheus_certify`: the verdict
and each GPU's figures) and ``gpuready drift --prom-file``, whose gauges are:

* ``gpuready_drift_detected{host}``: 1 when the node moved from its certificate, 0 when it
  is as certified; no sample when that could not be told (unknown, never certified);
* ``gpuready_drift_status{host,status}``: 1 for the node's state, 0 for the others
  (ok, drift, unknown, never_certified, not_certified);
* ``gpuready_drift_findings{host,check}``: drift findings per check, every check
  listed, 0 when clean;
* ``gpuready_drift_last_run_timestamp_seconds{host}``: when the node was checked;
* deprecated, kept one release for the dashboards and alerts written against them:
  ``gpuready_certified{host}`` (1 when no drift: the name said more than it meant) and
  ``gpuready_last_check_timestamp_seconds{host}``.

:func:`write_textfile` writes through the one atomic writer
(:func:`validator.files.write_atomic`): a temporary file beside the target, named
``.<name>.<random>.tmp`` so that the collector, which reads ``*.prom``, skips it,
fsynced and renamed over the target, so node_exporter never reads half a file; a
failed or interrupted write removes it. A target that exists and is not a regular
file (a device, a pipe, a folder) is refused: the rename would replace it, and
gpuready often runs as root. :func:`textfile_problem` says what is wrong with a path
before anything is measured.
"""

from __future__ import annotations

import datetime
import os
import stat
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from validator.error_tree import BadInputError, ReportError, UnsafePathError
from validator.files import check_path, write_atomic
from validator.model import (
    DRIFT_CHECKS,
    DriftState,
    NodeResult,
    Verdict,
    drift_findings,
    drift_state,
)
from validator.safe_text import ELLIPSIS, one_line, visible

# The longest label value written: a node's text (a serial, a driver string) is bounded
# before it becomes a label, so no reading can make the file or a dashboard's legend huge.
LABEL_LIMIT = 256


def host_label(hostname: str) -> str:
    """A host as its label: one line, controls escaped (a dashboard shows it)."""
    return _utf8(one_line(hostname, LABEL_LIMIT))


def label_text(value: object) -> str:
    """A node's text as a label value: controls (a newline too) shown as escapes, bounded.

    Quotes, backslashes and newlines are then escaped once more by prometheus_client, as
    the exposition format asks, so a hostile serial stays one label of one series.
    """
    text = visible(value)
    if len(text) > LABEL_LIMIT:
        text = text[: LABEL_LIMIT - len(ELLIPSIS)] + ELLIPSIS
    return _utf8(text)


def _utf8(text: str) -> str:
    """``text`` that encodes as UTF-8: a lone surrogate (from a node's JSON) as its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def timestamp_seconds(moment: datetime.datetime) -> float:
    """Seconds since the epoch to the millisecond; a naive ``moment`` is UTC."""
    aware = moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)
    return round(aware.timestamp(), 3)


def drift_registry(results: Sequence[NodeResult], *, now: datetime.datetime) -> CollectorRegistry:
    """A registry holding the drift metrics of ``results``, checked at ``now`` (naive: UTC)."""
    registry = CollectorRegistry()

    def gauge(name: str, text: str, labels: Sequence[str]) -> Gauge:
        return Gauge(name, text, list(labels), registry=registry)

    detected = gauge(
        "gpuready_drift_detected",
        "1 when the node moved from its latest certificate, 0 when it is as certified; "
        "absent when that could not be told.",
        ["host"],
    )
    status = gauge(
        "gpuready_drift_status",
        "The node's drift state: ok, drift, unknown, never_certified or not_certified.",
        ["host", "status"],
    )
    findings = gauge(
        "gpuready_drift_findings",
        "Drift findings from the certificate, by check.",
        ["host", "check"],
    )
    checked = gauge(
        "gpuready_drift_last_run_timestamp_seconds",
        "When gpuready drift last checked the node.",
        ["host"],
    )
    legacy_certified = gauge(
        "gpuready_certified",
        "Deprecated: use gpuready_drift_detected (inverted). 1 when the node matches its "
        "latest gpuready certificate.",
        ["host"],
    )
    legacy_checked = gauge(
        "gpuready_last_check_timestamp_seconds",
        "Deprecated: use gpuready_drift_last_run_timestamp_seconds.",
        ["host"],
    )
    stamp = timestamp_seconds(now)
    for result in results:
        host = host_label(result.hostname)
        state = drift_state(result)
        if state in (DriftState.OK, DriftState.DRIFT):  # else it could not be told: no sample
            detected.labels(host).set(1 if state is DriftState.DRIFT else 0)
        legacy_certified.labels(host).set(1 if result.verdict is Verdict.CERTIFIED else 0)
        for each in DriftState:
            status.labels(host, each.value).set(1 if each is state else 0)
        counts = Counter(finding.check for finding in drift_findings(result.findings))
        for check in (*DRIFT_CHECKS, *(c for c in counts if c not in DRIFT_CHECKS)):
            findings.labels(host, check).set(counts[check])
        checked.labels(host).set(stamp)
        legacy_checked.labels(host).set(stamp)
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


def check_textfile(path: str) -> None:
    """Refuse a ``--prom-file`` that cannot be written, before anything is measured.

    Raises:
        BadInputError: naming the option, the path, the problem and the fix.
        UnsafePathError: a link planted at the path.
    """
    problem = textfile_problem(path)
    if problem is not None:
        raise BadInputError(f"--prom-file {problem}")


def write_textfile(path: str | os.PathLike[str], text: str) -> Path:
    """Write a textfile atomically, readable by node_exporter's own user (0644).

    Raises:
        ReportError: the folder is missing or not writable, the disk is full, or the
            target is not a regular file; no temporary file is left behind.
        UnsafePathError: a link was planted at the target.
    """
    target = Path(path)
    if _not_a_file(target):
        raise ReportError(
            f"cannot write the Prometheus file {target}: it exists and is not a regular file"
        )
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


def write_prometheus(
    path: str | os.PathLike[str], results: Sequence[NodeResult], *, now: datetime.datetime
) -> Path:
    """Write drift's textfile (see :func:`write_textfile`)."""
    return write_textfile(path, render_prometheus(results, now=now))


__all__ = [
    "LABEL_LIMIT",
    "check_textfile",
    "drift_registry",
    "host_label",
    "label_text",
    "render_prometheus",
    "textfile_problem",
    "timestamp_seconds",
    "write_prometheus",
    "write_textfile",
]
