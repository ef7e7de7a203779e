"""Compare a node's facts of now with its latest certificate, check by check.

Each check gives FAIL (drift), PASS (as certified) or UNKNOWN (could not be
measured now: never taken for "no drift"); WARN for a version that is new since.

Decisions:

* A value the certificate lacks (``None``: not measured at certification) has no
  baseline. Absent now as well: nothing to compare, no finding. Present now: a
  WARN for versions (something new appeared) and an UNKNOWN that does not block
  for numbers (nothing to measure growth against).
* A version measured at certification and ``not supported`` now (the tool is
  gone: no nvcc, no cuDNN header) is drift; any other reason it is missing now is
  UNKNOWN. A kernel module and user-space driver that disagree now (NVML's
  version mismatch) is drift: they agreed when the node was certified.
* When the driver gave no GPU facts at all, the GPUs cannot be compared: one
  UNKNOWN says so, rather than every certified GPU reported as removed.
* A hardware Xid (policy ``fail_xids``) with a time on or after the certificate's
  issue, or with no wall-clock time at all (dmesg without -T), is new: the node was
  certified with no hardware Xid in its window, so an undated one cannot be older.
  Xids are grouped as the judge groups them (:func:`group_xids`).
"""

from __future__ import annotations

import datetime

from validator.certificate import Certificate
from validator.drift.gpus import burn_findings, compare_gpu, gpu_set
from validator.judge.checks.common import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    driver_silent,
    node_finding,
    why_not,
)
from validator.judge.checks.errors import group_xids, parse_time, xid_finding, xid_meaning
from validator.judge.policy import Policy
from validator.judge.verdict import sort_findings
from validator.model import (
    DriftCheck,
    Finding,
    Measured,
    NodeFacts,
    NvmlStatus,
    Reason,
    Unavailable,
    XidEvent,
)

# ------------------------------------------------------------------ versions


def _version(
    check: str, label: str, was: str | None, now: Measured[str], since: str
) -> Finding | None:
    if was is None:
        if isinstance(now, Unavailable):
            return None
        text = f"{label} {now} is present but was not found when the node was certified"
        return node_finding(
            check, WARN, text, observed=now, expected="not in the certificate", required=False
        )
    if isinstance(now, Unavailable) and now.reason is Reason.NOT_SUPPORTED:  # the tool is gone
        severity, observed = FAIL, f"not found: {why_not(now)}"
        text = f"{label} {was} was certified; now it is not found: {why_not(now)}"
    elif isinstance(now, Unavailable):
        severity, observed = UNKNOWN, why_not(now)
        text = f"{label} could not be read now: {why_not(now)}; certified was {was}"
    elif now != was:
        severity, observed = FAIL, now
        text = f"{label} changed from {was} to {now} since the certificate {since}"
    else:
        severity, observed, text = PASS, now, f"{label} {now} as certified"
    return node_finding(check, severity, text, observed=observed, expected=was)


def _mismatch(module: Finding | None, facts: NodeFacts) -> Finding | None:
    """The kernel module's finding; a FAIL when it and the user-space driver disagree now."""
    if facts.nvml_status is not NvmlStatus.DRIVER_MISMATCH:
        return module
    if module is not None and module.severity is FAIL:
        return module  # the module itself changed: that already says it
    loaded = facts.kernel_module_version
    return node_finding(
        DriftCheck.KERNEL_MODULE,
        FAIL,
        f"The loaded NVIDIA kernel module ({loaded}) and the user-space driver "
        f"({facts.driver_version}) differ now (Driver/library version mismatch): "
        "reboot or reload the nvidia kernel modules",
        observed=f"kernel module {loaded}, user space {facts.driver_version}",
        expected=module.expected if module is not None else "the same version",
    )


def _versions(cert: Certificate, facts: NodeFacts) -> list[Finding]:
    since = f"of {cert.issued_at}"
    found = [
        _version(DriftCheck.DRIVER, "Driver", cert.driver_version, facts.driver_version, since),
        _version(
            DriftCheck.CUDA,
            "CUDA driver version",
            cert.cuda_driver_version,
            facts.cuda_driver_version,
            since,
        ),
        _mismatch(
            _version(
                DriftCheck.KERNEL_MODULE,
                "NVIDIA kernel module",
                cert.kernel_module_version,
                facts.kernel_module_version,
                since,
            ),
            facts,
        ),
        _version(DriftCheck.NVCC, "nvcc", cert.nvcc_version, facts.tools.nvcc_version, since),
        _version(DriftCheck.CUDNN, "cuDNN", cert.cudnn_version, facts.tools.cudnn_version, since),
    ]
    return [finding for finding in found if finding is not None]


# ------------------------------------------------------------------ Xids


def _is_new(event: XidEvent, issued: datetime.datetime | None) -> bool:
    if issued is None or event.timestamp is None:
        return True  # see the module doc: an undated hardware Xid cannot predate the certificate
    moment = parse_time(event.timestamp)
    return moment is None or moment >= issued


def _xids(cert: Certificate, facts: NodeFacts, policy: Policy) -> list[Finding]:
    check = DriftCheck.XID
    expected = "no new hardware Xid"
    events = facts.kernel_log.events
    if isinstance(events, Unavailable):
        return [
            node_finding(
                check,
                UNKNOWN,
                f"The kernel log could not be read for Xids: {why_not(events)}",
                observed=why_not(events),
                expected=expected,
            )
        ]
    issued = parse_time(cert.issued_at)
    hardware = [
        event
        for event in events
        if not event.nvswitch and event.xid in policy.fail_xids and _is_new(event, issued)
    ]
    if not hardware:
        text = f"No hardware Xid since the certificate of {cert.issued_at}"
        return [node_finding(check, PASS, text, observed="none", expected=expected)]
    return [
        xid_finding(
            check,
            FAIL,
            group,
            f"Xid {group.xid} ({xid_meaning(group.xid)}) on {group.where}, {group.times} "
            f"since the certificate of {cert.issued_at}",
            expected=expected,
        )
        for group in group_xids(hardware, facts.gpus)
    ]


# ------------------------------------------------------------------ the comparison


def gpus_unreadable(facts: NodeFacts) -> bool:
    """True when the driver gave no GPU facts at all: the GPUs cannot be compared."""
    return not facts.gpus and driver_silent(facts) is not None


def compare(cert: Certificate, facts: NodeFacts, policy: Policy) -> tuple[Finding, ...]:
    """Every drift finding of a node's facts against its certificate, sorted.

    Args:
        cert: the node's latest certificate (the baseline).
        facts: the node's facts now.
        policy: the rules now (hardware Xids, the burn-in drop, persistence).

    Returns:
        Findings with check ids ``drift.*``: FAIL for drift, PASS for unchanged,
        UNKNOWN for what could not be measured now.
    """
    findings = _versions(cert, facts)
    if gpus_unreadable(facts):
        detail = facts.nvml_detail or facts.nvml_status.value
        findings.append(
            node_finding(
                DriftCheck.GPU_REMOVED,
                UNKNOWN,
                f"The driver gave no GPU facts ({detail}): the GPUs cannot be compared",
                observed=detail,
                expected=f"{len(cert.gpus)} GPUs",
            )
        )
        return sort_findings(findings)
    set_findings, pairs = gpu_set(cert, facts)
    findings += set_findings
    for was, gpu in pairs:
        findings += compare_gpu(was, gpu, policy)
    findings += burn_findings(pairs, facts, policy)
    findings += _xids(cert, facts, policy)
    return sort_findings(findings)


__all__ = ["compare", "gpus_unreadable"]
