"""Drift of the error counters and Xids, paired with :mod:`validator.judge.checks.errors`.

As ``errors.ecc_*``, ``errors.row_remap``, ``errors.retired_pages`` and ``errors.xid`` are
certify's checks of the same facts:

* Uncorrected ECC errors, remapped rows and retired pages drift when they grew. Volatile
  ECC counters reset when the driver reloads, so a smaller value is no drift. A value the
  certificate lacks (not measured then) has no baseline: an UNKNOWN that does not block
  when there is a value now, nothing when there is none. A row remap or page retirement
  pending or failed now is drift whatever the certificate holds.
* A hardware Xid (policy ``fail_xids``) with a time on or after the certificate's issue,
  or with no wall-clock time at all (dmesg without -T), is new: the node was certified
  with no hardware Xid in its window, so an undated one cannot be older. Xids are grouped
  as the judge groups them (:func:`validator.judge.checks.errors.group_xids`). A kernel
  log that could not be read is UNKNOWN.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence

from validator.certificate import Certificate, CertifiedGpu
from validator.drift.drift_helpers import DriftInputs
from validator.judge.checks.errors import group_xids, parse_time, xid_finding, xid_meaning
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    gpu_finding,
    node_finding,
    why_not,
)
from validator.judge.policy import Policy
from validator.model import (
    CheckFamily,
    DriftCheck,
    Finding,
    GpuFacts,
    Measured,
    NodeFacts,
    Unavailable,
    XidEvent,
)

FAMILY = CheckFamily.ERRORS


def _counters(
    check: str, what: str, gpu: GpuFacts, counters: Sequence[tuple[str, int | None, Measured[int]]]
) -> Finding | None:
    """One finding over a family of counters: FAIL when any grew."""
    grown = []
    unreadable = []
    compared = []
    no_baseline = []
    for label, before, now in counters:
        if before is None:
            if not isinstance(now, Unavailable):
                no_baseline.append(f"{label} {now}")
        elif isinstance(now, Unavailable):
            unreadable.append(f"{label}: {why_not(now)}")
        else:
            compared.append(f"{label} {now}")
            if now > before:
                grown.append((label, before, now))
    required, expected = True, "no growth"
    if grown:
        severity = FAIL
        text = "grew since certified: " + "; ".join(f"{k} {was} -> {now}" for k, was, now in grown)
        observed = ", ".join(f"{label} {now}" for label, _, now in grown)
        expected = ", ".join(f"{label} {before}" for label, before, _ in grown)
    elif unreadable:
        severity, observed = UNKNOWN, "; ".join(unreadable)
        text = f"could not be read now: {observed}"
    elif compared:
        severity, observed, text = PASS, ", ".join(compared), "as certified"
    elif no_baseline:
        severity, observed = UNKNOWN, ", ".join(no_baseline)
        text = "have no value in the certificate to compare with"
        required, expected = False, "a certified value"
    else:
        return None  # not supported then, not supported now: nothing to say
    return gpu_finding(
        check,
        severity,
        gpu,
        f"GPU {gpu.index}: {what} {text}",
        observed=observed,
        expected=expected,
        required=required,
    )


def _with_flags(
    check: str,
    counted: Finding | None,
    gpu: GpuFacts,
    what: str,
    flags: Sequence[tuple[str, Measured[bool]]],
) -> Finding | None:
    """The counters' finding, with the pending or failed flags that are set now.

    A flag set now is drift whatever the certificate says: it outweighs counters
    that did not grow, and joins those that did in one finding.
    """
    raised = ", ".join(label for label, value in flags if value is True)
    if not raised:
        return counted
    if counted is not None and counted.severity is FAIL:
        return dataclasses.replace(
            counted,
            message=f"{counted.message}; {raised}",
            observed=f"{counted.observed}, {raised}",
        )
    return gpu_finding(
        check, FAIL, gpu, f"GPU {gpu.index}: {what}: {raised}", observed=raised, expected="none"
    )


def _ecc(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    return _counters(
        DriftCheck.ECC,
        "uncorrected ECC errors",
        gpu,
        (
            ("volatile", was.ecc_volatile_uncorrected, gpu.ecc_volatile_uncorrected),
            ("aggregate", was.ecc_aggregate_uncorrected, gpu.ecc_aggregate_uncorrected),
        ),
    )


def _row_remap(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    counted = _counters(
        DriftCheck.ROW_REMAP,
        "remapped rows",
        gpu,
        (
            ("correctable", was.remapped_rows_correctable, gpu.remapped_rows_correctable),
            ("uncorrectable", was.remapped_rows_uncorrectable, gpu.remapped_rows_uncorrectable),
        ),
    )
    flags = (("remap pending", gpu.remap_pending), ("remap failed", gpu.remap_failure))
    return _with_flags(DriftCheck.ROW_REMAP, counted, gpu, "row remapping", flags)


def _retired_pages(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    counted = _counters(
        DriftCheck.RETIRED_PAGES,
        "retired pages",
        gpu,
        (
            ("single-bit", was.retired_pages_sbe, gpu.retired_pages_sbe),
            ("double-bit", was.retired_pages_dbe, gpu.retired_pages_dbe),
        ),
    )
    flags = (("retirement pending", gpu.retired_pages_pending),)
    return _with_flags(DriftCheck.RETIRED_PAGES, counted, gpu, "page retirement", flags)


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


def compare_counters(inputs: DriftInputs) -> list[Finding]:
    """Each paired GPU's uncorrected ECC errors, remapped rows and retired pages."""
    findings: list[Finding] = []
    for was, gpu in inputs.pairs:
        found = (_ecc(was, gpu), _row_remap(was, gpu), _retired_pages(was, gpu))
        findings += [finding for finding in found if finding is not None]
    return findings


def compare_xids(inputs: DriftInputs) -> list[Finding]:
    """Hardware Xids since the certificate."""
    return _xids(inputs.cert, inputs.facts, inputs.policy)


__all__ = ["FAMILY", "compare_counters", "compare_xids"]
