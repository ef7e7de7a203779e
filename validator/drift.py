"""Drift: what moved on a node since it was certified, and how to tell the world.

:func:`compare` holds a node's facts of now against its latest certificate and
says, check by check, what changed: versions, GPU identity, power caps, PCIe
links, error counters, new hardware Xids, persistence mode and, when a burn-in
was run, its speed. Each check gives FAIL (drift), PASS (as certified) or
UNKNOWN (could not be measured now: never taken for "no drift").

:func:`drift_node` turns that into a :class:`NodeResult`, so the terminal and
JSON reports, the store and the exit codes work as for ``certify``. The
outputs for monitoring live here too: a Prometheus textfile for node_exporter
(:func:`render_prometheus`, :func:`write_prometheus`) and one NHC-style line
for Slurm's HealthCheckProgram (:func:`nhc_line`).

Decisions:

* A value the certificate lacks (``None``: not measured at certification) has no
  baseline. Absent now as well: nothing to compare, no finding. Present now: a
  WARN for versions (something new appeared) and an UNKNOWN that does not block
  for numbers (nothing to measure growth against).
* A version measured at certification and ``not supported`` now (the tool is
  gone: no nvcc, no cuDNN header) is drift; any other reason it is missing now is
  UNKNOWN.
* GPUs are matched by index. A different UUID or serial at the same index is a
  swapped GPU: that GPU's other facts belong to another board, so only the swap is
  reported for it. A GPU that fell off the bus is reported as removed.
* Counters (ECC uncorrected, row remaps, retired pages) drift when they grew.
  Volatile ECC counters reset when the driver reloads, so a smaller value is no drift.
* A hardware Xid (policy ``fail_xids``) with a time on or after the certificate's
  issue, or with no wall-clock time at all (dmesg without -T), is new: the node was
  certified with no hardware Xid in its window, so an undated one cannot be older.
* The verdict: any FAIL is drift (NOT_CERTIFIED); else a required UNKNOWN leaves
  the node UNKNOWN (it could not be shown unchanged); else CERTIFIED (no drift).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from validator.certificate import Certificate, CertifiedGpu
from validator.errors import ExitCode, ReportError
from validator.judge.checks.common import node_finding, why_not
from validator.judge.checks.errors import bus_key, xid_meaning
from validator.judge.policy import Policy, policy_digest
from validator.judge.verdict import sort_findings
from validator.model import (
    BurnStatus,
    Finding,
    GpuFacts,
    GpuStatus,
    Measured,
    NodeFacts,
    NodeResult,
    NvmlStatus,
    Reason,
    Severity,
    Unavailable,
    Verdict,
    XidEvent,
)

PASS = Severity.PASS
WARN = Severity.WARN
FAIL = Severity.FAIL
UNKNOWN = Severity.UNKNOWN

# Every drift check, in report order; the Prometheus file lists each (0 when clean).
DRIFT_CHECKS: tuple[str, ...] = (
    "drift.baseline",
    "drift.driver",
    "drift.cuda",
    "drift.kernel_module",
    "drift.nvcc",
    "drift.cudnn",
    "drift.gpu_added",
    "drift.gpu_removed",
    "drift.gpu_swapped",
    "drift.vbios",
    "drift.power_limit",
    "drift.pcie_gen",
    "drift.pcie_width",
    "drift.ecc",
    "drift.row_remap",
    "drift.retired_pages",
    "drift.persistence",
    "drift.xid",
    "drift.burn",
)

NEVER_CERTIFIED = "never certified: run gpuready certify first"

# A power limit read back through NVML is in milliwatts rounded to watts by some
# readers; half a watt keeps rounding apart from a real change of the cap.
_POWER_TOLERANCE_W = 0.5

# NVML states in which the driver gave no facts at all.
_NO_DRIVER = frozenset(
    {
        NvmlStatus.LIBRARY_NOT_FOUND,
        NvmlStatus.DRIVER_NOT_LOADED,
        NvmlStatus.DRIVER_MISMATCH,
        NvmlStatus.NO_PERMISSION,
        NvmlStatus.ERROR,
        NvmlStatus.NOT_MEASURED,
    }
)


# ------------------------------------------------------------------ finding builders


_node = node_finding  # the judge's own constructor: drift findings are findings


def _gpu(
    check: str,
    severity: Severity,
    gpu: GpuFacts | CertifiedGpu,
    message: str,
    *,
    observed: object = "",
    expected: object = "",
    required: bool = True,
) -> Finding:
    finding = node_finding(
        check, severity, message, observed=observed, expected=expected, required=required
    )
    uuid = gpu.uuid if isinstance(gpu.uuid, str) else None
    return dataclasses.replace(finding, gpu_index=gpu.index, gpu_uuid=uuid)


# ------------------------------------------------------------------ node-wide facts


def _version(
    check: str, label: str, was: str | None, now: Measured[str], since: str
) -> Finding | None:
    if was is None:
        if isinstance(now, Unavailable):
            return None
        return _node(
            check,
            WARN,
            f"{label} {now} is present but was not found when the node was certified",
            observed=now,
            expected="not in the certificate",
            required=False,
        )
    if isinstance(now, Unavailable):
        if now.reason is Reason.NOT_SUPPORTED:
            return _node(
                check,
                FAIL,
                f"{label} {was} was certified; now it is not found: {why_not(now)}",
                observed=f"not found: {why_not(now)}",
                expected=was,
            )
        return _node(
            check,
            UNKNOWN,
            f"{label} could not be read now: {why_not(now)}; certified was {was}",
            observed=why_not(now),
            expected=was,
        )
    if now != was:
        return _node(
            check,
            FAIL,
            f"{label} changed from {was} to {now} since the certificate {since}",
            observed=now,
            expected=was,
        )
    return _node(check, PASS, f"{label} {now} as certified", observed=now, expected=was)


def _versions(cert: Certificate, facts: NodeFacts) -> list[Finding]:
    since = f"of {cert.issued_at}"
    pairs: tuple[tuple[str, str, str | None, Measured[str]], ...] = (
        ("drift.driver", "Driver", cert.driver_version, facts.driver_version),
        ("drift.cuda", "CUDA driver version", cert.cuda_driver_version, facts.cuda_driver_version),
        (
            "drift.kernel_module",
            "NVIDIA kernel module",
            cert.kernel_module_version,
            facts.kernel_module_version,
        ),
        ("drift.nvcc", "nvcc", cert.nvcc_version, facts.tools.nvcc_version),
        ("drift.cudnn", "cuDNN", cert.cudnn_version, facts.tools.cudnn_version),
    )
    findings = []
    for check, label, was, now in pairs:
        finding = _version(check, label, was, now, since)
        if finding is not None:
            findings.append(finding)
    return findings


# ------------------------------------------------------------------ GPU identity


def _identity(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    """The swap finding for one index: FAIL swapped, UNKNOWN unreadable, None when the same."""
    changed = []
    unreadable = []
    for label, before, now in (("UUID", was.uuid, gpu.uuid), ("serial", was.serial, gpu.serial)):
        if before is None:
            continue
        if isinstance(now, Unavailable):
            unreadable.append(f"{label}: {why_not(now)}")
        elif now != before:
            changed.append((label, before, now))
    if changed:
        observed = ", ".join(f"{label} {now}" for label, _, now in changed)
        expected = ", ".join(f"{label} {before}" for label, before, _ in changed)
        return _gpu(
            "drift.gpu_swapped",
            FAIL,
            gpu,
            f"GPU {gpu.index} is another board than certified ({observed}; was {expected}): "
            "certify the node again",
            observed=observed,
            expected=expected,
        )
    if unreadable:
        return _gpu(
            "drift.gpu_swapped",
            UNKNOWN,
            gpu,
            f"GPU {gpu.index}'s identity could not be read: {'; '.join(unreadable)}",
            observed="; ".join(unreadable),
            expected=f"UUID {was.uuid}, serial {was.serial}",
        )
    return None


def _gpu_set(
    cert: Certificate, facts: NodeFacts
) -> tuple[list[Finding], list[tuple[CertifiedGpu, GpuFacts]]]:
    """Added, removed and swapped GPUs; and the pairs whose facts compare one to one."""
    findings: list[Finding] = []
    pairs: list[tuple[CertifiedGpu, GpuFacts]] = []
    now_by_index = {gpu.index: gpu for gpu in facts.gpus}
    certified = {gpu.index for gpu in cert.gpus}
    for was in cert.gpus:
        gpu = now_by_index.get(was.index)
        if gpu is None:
            findings.append(
                _gpu(
                    "drift.gpu_removed",
                    FAIL,
                    was,
                    f"GPU {was.index} ({was.uuid}) was certified and is gone now",
                    observed="absent",
                    expected=f"UUID {was.uuid}",
                )
            )
            continue
        if gpu.status is GpuStatus.LOST:
            findings.append(
                _gpu(
                    "drift.gpu_removed",
                    FAIL,
                    was,
                    f"GPU {was.index} ({was.uuid}) stopped answering: "
                    f"{gpu.status_detail or 'lost'}",
                    observed=f"lost: {gpu.status_detail}" if gpu.status_detail else "lost",
                    expected=f"UUID {was.uuid}",
                )
            )
            continue
        if gpu.status is GpuStatus.ERROR:
            findings.append(
                _gpu(
                    "drift.gpu_removed",
                    UNKNOWN,
                    was,
                    f"GPU {was.index} could not be read: {gpu.status_detail or 'error'}",
                    observed=gpu.status_detail or "error",
                    expected=f"UUID {was.uuid}",
                )
            )
            continue
        swap = _identity(was, gpu)
        if swap is not None:
            findings.append(swap)
            if swap.severity is FAIL:
                continue
        pairs.append((was, gpu))
    for gpu in facts.gpus:
        if gpu.index not in certified:
            uuid = gpu.uuid if isinstance(gpu.uuid, str) else why_not(gpu.uuid)
            findings.append(
                _gpu(
                    "drift.gpu_added",
                    FAIL,
                    gpu,
                    f"GPU {gpu.index} ({uuid}) is new: the certificate has {len(cert.gpus)} GPUs",
                    observed=f"UUID {uuid}",
                    expected="absent",
                )
            )
    if not findings:
        findings.append(
            _node(
                "drift.gpu_swapped",
                PASS,
                f"The same {len(cert.gpus)} GPUs as certified, by UUID and serial",
                observed=f"{len(facts.gpus)} GPUs",
                expected=f"{len(cert.gpus)} GPUs",
            )
        )
    return findings, pairs


# ------------------------------------------------------------------ per-GPU facts


def _unknown_now(check: str, gpu: GpuFacts, label: str, now: Unavailable, was: object) -> Finding:
    return _gpu(
        check,
        UNKNOWN,
        gpu,
        f"GPU {gpu.index}: {label} could not be read now: {why_not(now)}",
        observed=why_not(now),
        expected=was,
    )


def _vbios(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    now = gpu.vbios_version
    if was.vbios_version is None:
        return None
    if isinstance(now, Unavailable):
        return _unknown_now("drift.vbios", gpu, "VBIOS version", now, was.vbios_version)
    if now != was.vbios_version:
        return _gpu(
            "drift.vbios",
            FAIL,
            gpu,
            f"GPU {gpu.index}: VBIOS changed from {was.vbios_version} to {now}",
            observed=now,
            expected=was.vbios_version,
        )
    return _gpu(
        "drift.vbios",
        PASS,
        gpu,
        f"GPU {gpu.index}: VBIOS {now} as certified",
        observed=now,
        expected=was.vbios_version,
    )


def _power(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    now = gpu.power_limit_enforced_w
    before = was.power_limit_enforced_w
    if before is None:
        return None
    if isinstance(now, Unavailable):
        return _unknown_now("drift.power_limit", gpu, "the power limit", now, f"{before:g} W")
    if abs(now - before) > _POWER_TOLERANCE_W:
        way = "lowered" if now < before else "raised"
        return _gpu(
            "drift.power_limit",
            FAIL,
            gpu,
            f"GPU {gpu.index}: power limit {way} from {before:g} W to {now:g} W",
            observed=f"{now:g} W",
            expected=f"{before:g} W",
        )
    return _gpu(
        "drift.power_limit",
        PASS,
        gpu,
        f"GPU {gpu.index}: power limit {now:g} W as certified",
        observed=f"{now:g} W",
        expected=f"{before:g} W",
    )


def _pcie(
    check: str, label: str, gpu: GpuFacts, before: int | None, now: Measured[int]
) -> Finding | None:
    if before is None:
        return None
    if isinstance(now, Unavailable):
        return _unknown_now(check, gpu, f"the PCIe link {label}", now, before)
    if now < before:
        return _gpu(
            check,
            FAIL,
            gpu,
            f"GPU {gpu.index}: PCIe link {label} fell from {before} to {now}",
            observed=now,
            expected=f">= {before}",
        )
    return _gpu(
        check,
        PASS,
        gpu,
        f"GPU {gpu.index}: PCIe link {label} {now} as certified",
        observed=now,
        expected=f">= {before}",
    )


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
            continue
        if isinstance(now, Unavailable):
            unreadable.append(f"{label}: {why_not(now)}")
            continue
        compared.append(f"{label} {now}")
        if now > before:
            grown.append((label, before, now))
    if grown:
        observed = ", ".join(f"{label} {now}" for label, _, now in grown)
        expected = ", ".join(f"{label} {before}" for label, before, _ in grown)
        text = "; ".join(f"{label} {before} -> {now}" for label, before, now in grown)
        return _gpu(
            check,
            FAIL,
            gpu,
            f"GPU {gpu.index}: {what} grew since certified: {text}",
            observed=observed,
            expected=expected,
        )
    if unreadable:
        return _gpu(
            check,
            UNKNOWN,
            gpu,
            f"GPU {gpu.index}: {what} could not be read now: {'; '.join(unreadable)}",
            observed="; ".join(unreadable),
            expected="no growth",
        )
    if compared:
        return _gpu(
            check,
            PASS,
            gpu,
            f"GPU {gpu.index}: {what} as certified",
            observed=", ".join(compared),
            expected="no growth",
        )
    if no_baseline:
        return _gpu(
            check,
            UNKNOWN,
            gpu,
            f"GPU {gpu.index}: {what} have no value in the certificate to compare with",
            observed=", ".join(no_baseline),
            expected="a certified value",
            required=False,
        )
    return None  # not supported then, not supported now: nothing to say


def _flag(
    check: str, what: str, gpu: GpuFacts, flags: Sequence[tuple[str, Measured[bool]]]
) -> Finding | None:
    """A pending/failed flag that is set now is drift whatever the certificate says."""
    raised = [label for label, value in flags if value is True]
    if raised:
        return _gpu(
            check,
            FAIL,
            gpu,
            f"GPU {gpu.index}: {what}: {', '.join(raised)}",
            observed=", ".join(raised),
            expected="none",
        )
    return None


def _ecc(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    return _counters(
        "drift.ecc",
        "uncorrected ECC errors",
        gpu,
        (
            ("volatile", was.ecc_volatile_uncorrected, gpu.ecc_volatile_uncorrected),
            ("aggregate", was.ecc_aggregate_uncorrected, gpu.ecc_aggregate_uncorrected),
        ),
    )


def _merge(first: Finding | None, second: Finding | None) -> Finding | None:
    """The worse of a counter finding and a flag finding for the same check."""
    if first is None or second is None:
        return first or second
    if first.severity is FAIL and second.severity is FAIL:
        return Finding(
            check=first.check,
            severity=FAIL,
            message=f"{first.message}; {second.observed}",
            observed=f"{first.observed}, {second.observed}",
            expected=first.expected,
            gpu_index=first.gpu_index,
            gpu_uuid=first.gpu_uuid,
        )
    return second if second.severity is FAIL else first


def _row_remap(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    counters = _counters(
        "drift.row_remap",
        "remapped rows",
        gpu,
        (
            ("correctable", was.remapped_rows_correctable, gpu.remapped_rows_correctable),
            ("uncorrectable", was.remapped_rows_uncorrectable, gpu.remapped_rows_uncorrectable),
        ),
    )
    flags = _flag(
        "drift.row_remap",
        "row remapping",
        gpu,
        (("remap pending", gpu.remap_pending), ("remap failed", gpu.remap_failure)),
    )
    return _merge(counters, flags)


def _retired_pages(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    counters = _counters(
        "drift.retired_pages",
        "retired pages",
        gpu,
        (
            ("single-bit", was.retired_pages_sbe, gpu.retired_pages_sbe),
            ("double-bit", was.retired_pages_dbe, gpu.retired_pages_dbe),
        ),
    )
    flags = _flag(
        "drift.retired_pages",
        "page retirement",
        gpu,
        (("retirement pending", gpu.retired_pages_pending),),
    )
    return _merge(counters, flags)


def _persistence(was: CertifiedGpu, gpu: GpuFacts, policy: Policy) -> Finding | None:
    now = gpu.persistence_mode
    expected_on = was.persistence_mode is True or (
        was.persistence_mode is None and policy.persistence_mode_required
    )
    if not expected_on:
        return None
    if isinstance(now, Unavailable):
        return _unknown_now("drift.persistence", gpu, "persistence mode", now, "on")
    if now is False:
        return _gpu(
            "drift.persistence",
            FAIL,
            gpu,
            f"GPU {gpu.index}: persistence mode is off (it was on when certified); "
            "turn it on with nvidia-persistenced",
            observed="off",
            expected="on",
        )
    return _gpu(
        "drift.persistence",
        PASS,
        gpu,
        f"GPU {gpu.index}: persistence mode on",
        observed="on",
        expected="on",
    )


def _burn(
    pairs: Sequence[tuple[CertifiedGpu, GpuFacts]], facts: NodeFacts, policy: Policy
) -> list[Finding]:
    burn = facts.burn
    if burn is None:
        return []  # a quick drift check runs no burn-in: nothing to compare
    drop = policy.thresholds.drift_burn_drop
    by_index = {gpu.index: gpu for gpu in burn.gpus}
    findings = []
    for was, gpu in pairs:
        check = "drift.burn"
        if was.burn_tflops is None:
            findings.append(
                _gpu(
                    check,
                    UNKNOWN,
                    gpu,
                    f"GPU {gpu.index}: the certificate holds no burn-in speed to compare with",
                    observed="",
                    expected="a certified TFLOPS figure",
                    required=False,
                )
            )
            continue
        floor = was.burn_tflops * (1.0 - drop)
        expected = f">= {floor:.1f} TFLOPS ({was.burn_tflops:.1f} certified, -{drop:.0%})"
        ran = by_index.get(gpu.index)
        if burn.error is not None or ran is None or ran.status is not BurnStatus.COMPLETED:
            why = burn.error or (ran.detail or ran.status.value if ran else "not burned")
            findings.append(
                _gpu(
                    check,
                    UNKNOWN,
                    gpu,
                    f"GPU {gpu.index}: the burn-in gave no speed: {why}",
                    observed=why,
                    expected=expected,
                )
            )
            continue
        tflops = ran.tflops
        if isinstance(tflops, Unavailable) or not math.isfinite(tflops):
            why = why_not(tflops) if isinstance(tflops, Unavailable) else str(tflops)
            findings.append(
                _gpu(
                    check,
                    UNKNOWN,
                    gpu,
                    f"GPU {gpu.index}: no burn-in speed: {why}",
                    observed=why,
                    expected=expected,
                )
            )
            continue
        if tflops < floor:
            share = 1.0 - tflops / was.burn_tflops
            findings.append(
                _gpu(
                    check,
                    FAIL,
                    gpu,
                    f"GPU {gpu.index}: burn-in {tflops:.1f} TFLOPS is {share:.0%} below the "
                    f"certified {was.burn_tflops:.1f}",
                    observed=f"{tflops:.1f} TFLOPS",
                    expected=expected,
                )
            )
        else:
            findings.append(
                _gpu(
                    check,
                    PASS,
                    gpu,
                    f"GPU {gpu.index}: burn-in {tflops:.1f} TFLOPS",
                    observed=f"{tflops:.1f} TFLOPS",
                    expected=expected,
                )
            )
    return findings


# ------------------------------------------------------------------ Xids


def _parse_time(text: str) -> datetime.datetime | None:
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace(",", "."))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def _is_new(event: XidEvent, issued: datetime.datetime | None) -> bool:
    if issued is None or event.timestamp is None:
        return True  # see the module doc: an undated hardware Xid cannot predate the certificate
    moment = _parse_time(event.timestamp)
    return moment is None or moment >= issued


def _xids(cert: Certificate, facts: NodeFacts, policy: Policy) -> list[Finding]:
    check = "drift.xid"
    events = facts.kernel_log.events
    if isinstance(events, Unavailable):
        return [
            _node(
                check,
                UNKNOWN,
                f"The kernel log could not be read for Xids: {why_not(events)}",
                observed=why_not(events),
                expected="no new hardware Xid",
            )
        ]
    issued = _parse_time(cert.issued_at)
    hardware = [
        event
        for event in events
        if not event.nvswitch and event.xid in policy.fail_xids and _is_new(event, issued)
    ]
    if not hardware:
        return [
            _node(
                check,
                PASS,
                f"No hardware Xid since the certificate of {cert.issued_at}",
                observed="none",
                expected="no new hardware Xid",
            )
        ]
    gpus_by_bus = {
        key: gpu
        for gpu in facts.gpus
        if isinstance(gpu.pci_bus_id, str) and (key := bus_key(gpu.pci_bus_id)) is not None
    }
    grouped: dict[tuple[int | None, int], list[XidEvent]] = {}
    for event in hardware:
        key = bus_key(event.pci_bus_id)
        gpu = gpus_by_bus.get(key) if key is not None else None
        grouped.setdefault((gpu.index if gpu else None, event.xid), []).append(event)
    findings = []
    by_index = {gpu.index: gpu for gpu in facts.gpus}
    for (index, xid), group in sorted(
        grouped.items(), key=lambda item: (item[0][0] or -1, item[0][1])
    ):
        where = f"GPU {index}" if index is not None else f"PCI device {group[0].pci_bus_id}"
        times = f"{len(group)} times" if len(group) > 1 else "once"
        text = (
            f"Xid {xid} ({xid_meaning(xid)}) on {where}, {times} since the certificate of "
            f"{cert.issued_at}"
        )
        observed = f"Xid {xid} x{len(group)}"
        if index is not None:
            findings.append(
                _gpu(
                    check,
                    FAIL,
                    by_index[index],
                    text,
                    observed=observed,
                    expected="no new hardware Xid",
                )
            )
        else:
            findings.append(
                _node(check, FAIL, text, observed=observed, expected="no new hardware Xid")
            )
    return findings


# ------------------------------------------------------------------ the comparison


def _nothing_measured(facts: NodeFacts) -> bool:
    return facts.nvml_status in _NO_DRIVER and not facts.gpus


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
    if _nothing_measured(facts):
        detail = facts.nvml_detail or facts.nvml_status.value
        findings.append(
            _node(
                "drift.gpu_removed",
                UNKNOWN,
                f"The driver gave no GPU facts ({detail}): the GPUs cannot be compared",
                observed=detail,
                expected=f"{len(cert.gpus)} GPUs",
            )
        )
        return sort_findings(findings)
    set_findings, pairs = _gpu_set(cert, facts)
    findings += set_findings
    for was, gpu in pairs:
        for finding in (
            _vbios(was, gpu),
            _power(was, gpu),
            _pcie("drift.pcie_gen", "generation", gpu, was.pcie_gen_max, gpu.pcie_gen_max),
            _pcie("drift.pcie_width", "width", gpu, was.pcie_width_current, gpu.pcie_width_current),
            _ecc(was, gpu),
            _row_remap(was, gpu),
            _retired_pages(was, gpu),
            _persistence(was, gpu, policy),
        ):
            if finding is not None:
                findings.append(finding)
    findings += _burn(pairs, facts, policy)
    findings += _xids(cert, facts, policy)
    return sort_findings(findings)


def drift_findings(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that are drift (FAIL)."""
    return [finding for finding in findings if finding.severity is FAIL]


def _by_check(findings: Sequence[Finding]) -> str:
    gpus: dict[str, list[int]] = {}
    for finding in findings:
        indexes = gpus.setdefault(finding.check, [])
        if finding.gpu_index is not None and finding.gpu_index not in indexes:
            indexes.append(finding.gpu_index)
    parts = []
    for check, indexes in gpus.items():
        name = check.removeprefix("drift.")
        parts.append(f"{name} (GPU {','.join(map(str, indexes))})" if indexes else name)
    return ", ".join(parts)


def drift_node(facts: NodeFacts, cert: Certificate | None, policy: Policy) -> NodeResult:
    """Judge one node's drift from its latest certificate.

    Args:
        facts: the node's facts now.
        cert: its latest certificate; None when it was never certified.
        policy: the rules now.

    Returns:
        CERTIFIED when nothing drifted, NOT_CERTIFIED when something did, UNKNOWN when
        the node was never certified or could not be shown unchanged.
    """
    digest = policy_digest(policy)
    if cert is None:
        finding = _node(
            "drift.baseline",
            UNKNOWN,
            f"{facts.hostname} was {NEVER_CERTIFIED}",
            observed="no certificate",
            expected="a certificate",
        )
        return NodeResult(
            hostname=facts.hostname,
            verdict=Verdict.UNKNOWN,
            facts=facts,
            findings=(finding,),
            policy_digest=digest,
            summary=NEVER_CERTIFIED,
        )
    findings = compare(cert, facts, policy)
    failed = drift_findings(findings)
    blocking = [f for f in findings if f.severity is UNKNOWN and f.required]
    since = f"since the certificate of {cert.issued_at}"
    if failed:
        verdict = Verdict.NOT_CERTIFIED
        summary = f"drift {since}: {_by_check(failed)}"
    elif _nothing_measured(facts):
        verdict = Verdict.UNKNOWN
        summary = f"nothing measurable: {facts.nvml_detail or facts.nvml_status.value}"
    elif blocking:
        verdict = Verdict.UNKNOWN
        summary = f"could not be checked: {_by_check(blocking)}"
    else:
        verdict = Verdict.CERTIFIED
        summary = f"no drift {since}"
    return NodeResult(
        hostname=facts.hostname,
        verdict=verdict,
        facts=facts,
        findings=findings,
        sku=cert.sku,
        policy_digest=digest,
        summary=summary,
    )


def never_certified(result: NodeResult) -> bool:
    """True for the result :func:`drift_node` gives a node without a certificate."""
    return any(f.check == "drift.baseline" for f in result.findings)


# ------------------------------------------------------------------ exit codes and NHC


def drift_exit_code(results: Sequence[NodeResult]) -> ExitCode:
    """0 when no node drifted and all were checked; 1 drift (or some unchecked); 3 none checked.

    As for ``certify``, 0 is earned by every node: a fleet with one node that could
    not be checked is not a clean fleet, so it exits 1 unless no node was checked at all.
    """
    verdicts = {result.verdict for result in results}
    if not verdicts or verdicts == {Verdict.UNKNOWN}:
        return ExitCode.COULD_NOT_RUN
    if verdicts == {Verdict.CERTIFIED}:
        return ExitCode.OK
    return ExitCode.NOT_CERTIFIED


# Slurm keeps a node's reason in a fixed buffer on some versions; a long reason
# is cut anyway, and one line that fits a terminal reads better.
NHC_MAX_CHARS = 240


def _one_line(text: str, limit: int = NHC_MAX_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def nhc_line(results: Sequence[NodeResult]) -> tuple[int, str]:
    """The exit code and one line prefixed ``gpuready:``, as NHC-style health checks give.

    Exit codes are those of ``gpuready drift``: 0 no drift, 1 drift (HealthCheckProgram
    wrappers drain on it), 3 nothing could be checked (never certified, no driver).
    """
    code = drift_exit_code(results)
    drifted = [r for r in results if r.verdict is Verdict.NOT_CERTIFIED]
    unknown = [r for r in results if r.verdict is Verdict.UNKNOWN]
    if code is ExitCode.OK:
        what = (
            "; ".join(f"{r.hostname}: {r.summary}" for r in results)
            if len(results) > 1
            else (results[0].summary)
        )
        return int(code), _one_line(f"gpuready: ok: {what}")
    if drifted:
        parts = [r.summary if len(results) == 1 else f"{r.hostname}: {r.summary}" for r in drifted]
        parts += [f"{r.hostname}: unknown: {r.summary}" for r in unknown]
        return int(code), _one_line("gpuready: " + "; ".join(parts))
    if not results:
        return int(code), "gpuready: unknown: no node was checked"
    parts = [r.summary if len(results) == 1 else f"{r.hostname}: {r.summary}" for r in unknown]
    return int(code), _one_line("gpuready: unknown: " + "; ".join(parts))


def slurm_reason(result: NodeResult) -> str:
    """The drain reason for a drifted node: ``gpuready: <summary>``, one line."""
    return _one_line(f"gpuready: {result.summary}")


# ------------------------------------------------------------------ terminal


_STATE_WORDS = {
    "ok": "NO DRIFT",
    "drift": "DRIFT",
    "unknown": "UNKNOWN",
    "never_certified": "NEVER CERTIFIED",
}


def render_drift_text(results: Sequence[NodeResult]) -> str:
    """The drift results for a terminal: per host its state and summary, then what is not PASS.

    Args:
        results: the drift results, one per host.
    """
    lines = []
    for result in results:
        lines.append(f"{result.hostname}  {_STATE_WORDS[_status(result)]}  {result.summary}")
        for finding in result.findings:
            if finding.severity is PASS or finding.check == "drift.baseline":
                continue
            where = f"gpu{finding.gpu_index}" if finding.gpu_index is not None else "node"
            optional = "" if finding.required or finding.severity is FAIL else " (optional)"
            lines.append(
                f"  {finding.severity.value:<8} {finding.check:<20} {where:<5} "
                f"{finding.message}{optional}"
            )
    if len(results) > 1:
        counts = dict.fromkeys(_STATUSES, 0)
        for result in results:
            counts[_status(result)] += 1
        lines.append(
            f"{len(results)} hosts: {counts['ok']} no drift, {counts['drift']} drifted, "
            f"{counts['unknown']} unknown, {counts['never_certified']} never certified"
        )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ Prometheus textfile


def _label(value: str) -> str:
    # The exposition format escapes exactly these three in label values.
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _status(result: NodeResult) -> str:
    if result.verdict is Verdict.CERTIFIED:
        return "ok"
    if result.verdict is Verdict.NOT_CERTIFIED:
        return "drift"
    return "never_certified" if never_certified(result) else "unknown"


_STATUSES = ("ok", "drift", "unknown", "never_certified")


def render_prometheus(results: Sequence[NodeResult], *, now: datetime.datetime) -> str:
    """The drift results in node_exporter's textfile collector format.

    Metrics: ``gpuready_certified{host}`` (1 no drift from a certificate, else 0),
    ``gpuready_drift_status{host,status}`` (one of ok, drift, unknown, never_certified is 1),
    ``gpuready_drift_findings{host,check}`` (drift findings per check, every check listed,
    0 when clean) and ``gpuready_last_check_timestamp_seconds{host}``.

    Args:
        results: the drift results, one per host.
        now: the time of the check (naive: UTC).
    """
    moment = now if now.tzinfo else now.replace(tzinfo=datetime.timezone.utc)
    stamp = f"{moment.timestamp():.3f}"
    lines = [
        "# HELP gpuready_certified 1 when the node matches its latest gpuready certificate.",
        "# TYPE gpuready_certified gauge",
    ]
    lines += [
        f'gpuready_certified{{host="{_label(r.hostname)}"}} '
        f"{1 if r.verdict is Verdict.CERTIFIED else 0}"
        for r in results
    ]
    lines += [
        "# HELP gpuready_drift_status The node's drift state: ok, drift, unknown or "
        "never_certified.",
        "# TYPE gpuready_drift_status gauge",
    ]
    for r in results:
        state = _status(r)
        lines += [
            f'gpuready_drift_status{{host="{_label(r.hostname)}",status="{s}"}} '
            f"{1 if s == state else 0}"
            for s in _STATUSES
        ]
    lines += [
        "# HELP gpuready_drift_findings Drift findings from the certificate, by check.",
        "# TYPE gpuready_drift_findings gauge",
    ]
    for r in results:
        counts = dict.fromkeys(DRIFT_CHECKS, 0)
        for finding in drift_findings(r.findings):
            counts[finding.check] = counts.get(finding.check, 0) + 1
        lines += [
            f'gpuready_drift_findings{{host="{_label(r.hostname)}",check="{_label(check)}"}} '
            f"{count}"
            for check, count in counts.items()
        ]
    lines += [
        "# HELP gpuready_last_check_timestamp_seconds When gpuready last checked the node for "
        "drift.",
        "# TYPE gpuready_last_check_timestamp_seconds gauge",
    ]
    lines += [
        f'gpuready_last_check_timestamp_seconds{{host="{_label(r.hostname)}"}} {stamp}'
        for r in results
    ]
    return "\n".join(lines) + "\n"


def write_prometheus(path: str | os.PathLike[str], text: str) -> Path:
    """Write the textfile atomically: node_exporter never reads half a file.

    The text goes to a hidden temporary file in the same directory (the collector
    reads only ``*.prom``), is flushed to disk, then renamed over ``path``.

    Raises:
        ReportError: the directory is missing or not writable.
    """
    target = Path(path)
    directory = target.parent
    try:
        handle, temporary = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".tmp", dir=directory
        )
    except OSError as exc:
        raise ReportError(
            f"cannot write the Prometheus file {target}: {exc.strerror or exc}"
        ) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        # mkstemp makes the file 0600; node_exporter often runs as its own user.
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise ReportError(
            f"cannot write the Prometheus file {target}: {exc.strerror or exc}"
        ) from None
    return target


__all__ = [
    "DRIFT_CHECKS",
    "NEVER_CERTIFIED",
    "compare",
    "drift_exit_code",
    "drift_findings",
    "drift_node",
    "never_certified",
    "nhc_line",
    "render_drift_text",
    "render_prometheus",
    "slurm_reason",
    "write_prometheus",
]
