"""Drift of the GPUs themselves: which boards are there, and what moved on each.

GPUs are matched by index. A different UUID or serial at the same index is a
swapped GPU: its other facts belong to another board, so only the swap is
reported for it. A GPU that fell off the bus is reported as removed.

Counters (ECC uncorrected, row remaps, retired pages) drift when they grew.
Volatile ECC counters reset when the driver reloads, so a smaller value is no drift.
A value the certificate lacks (not measured then) has no baseline: an UNKNOWN
that does not block when there is a value now, nothing when there is none.

Every finding is built with the judge's constructors
(:mod:`validator.judge.checks.common`): drift findings are findings.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from validator.certificate import Certificate, CertifiedGpu
from validator.judge.checks.common import (
    FAIL,
    PASS,
    UNKNOWN,
    gpu_finding,
    node_finding,
    unknown_gpu,
    watts,
    why_not,
)
from validator.judge.policy import Policy
from validator.model import (
    BurnResult,
    BurnStatus,
    DriftCheck,
    Finding,
    GpuFacts,
    GpuStatus,
    Measured,
    NodeFacts,
    Unavailable,
)

# A power limit read back through NVML is in milliwatts rounded to watts by some
# readers; half a watt keeps rounding apart from a real change of the cap.
POWER_TOLERANCE_W = 0.5

Pair = tuple[CertifiedGpu, GpuFacts]  # a GPU as certified, and the same board now


# ------------------------------------------------------------------ which GPUs


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
        return gpu_finding(
            DriftCheck.GPU_SWAPPED,
            FAIL,
            gpu,
            f"GPU {gpu.index} is another board than certified ({observed}; was {expected}): "
            "certify the node again",
            observed=observed,
            expected=expected,
        )
    if unreadable:
        return gpu_finding(
            DriftCheck.GPU_SWAPPED,
            UNKNOWN,
            gpu,
            f"GPU {gpu.index}'s identity could not be read: {'; '.join(unreadable)}",
            observed="; ".join(unreadable),
            expected=f"UUID {was.uuid}, serial {was.serial}",
        )
    return None


def _gone(was: CertifiedGpu, gpu: GpuFacts | None) -> Finding | None:
    """FAIL for a certified GPU that is absent or lost now, UNKNOWN for one that errs."""
    expected = f"UUID {was.uuid}"
    if gpu is None:
        return gpu_finding(
            DriftCheck.GPU_REMOVED,
            FAIL,
            was,
            f"GPU {was.index} ({was.uuid}) was certified and is gone now",
            observed="absent",
            expected=expected,
        )
    detail = gpu.status_detail
    if gpu.status is GpuStatus.LOST:
        return gpu_finding(
            DriftCheck.GPU_REMOVED,
            FAIL,
            was,
            f"GPU {was.index} ({was.uuid}) stopped answering: {detail or 'lost'}",
            observed=f"lost: {detail}" if detail else "lost",
            expected=expected,
        )
    if gpu.status is GpuStatus.ERROR:
        return gpu_finding(
            DriftCheck.GPU_REMOVED,
            UNKNOWN,
            was,
            f"GPU {was.index} could not be read: {detail or 'error'}",
            observed=detail or "error",
            expected=expected,
        )
    return None


def gpu_set(cert: Certificate, facts: NodeFacts) -> tuple[list[Finding], list[Pair]]:
    """Added, removed and swapped GPUs; and the pairs whose facts compare one to one."""
    findings: list[Finding] = []
    pairs: list[Pair] = []
    now_by_index = {gpu.index: gpu for gpu in facts.gpus}
    for was in cert.gpus:
        gpu = now_by_index.get(was.index)
        gone = _gone(was, gpu)
        if gone is not None or gpu is None:
            findings += [gone] if gone is not None else []
            continue
        swap = _identity(was, gpu)
        if swap is not None:
            findings.append(swap)
            if swap.severity is FAIL:
                continue
        pairs.append((was, gpu))
    certified = {gpu.index for gpu in cert.gpus}
    for gpu in facts.gpus:
        if gpu.index not in certified:
            uuid = gpu.uuid if isinstance(gpu.uuid, str) else why_not(gpu.uuid)
            findings.append(
                gpu_finding(
                    DriftCheck.GPU_ADDED,
                    FAIL,
                    gpu,
                    f"GPU {gpu.index} ({uuid}) is new: the certificate has {len(cert.gpus)} GPUs",
                    observed=f"UUID {uuid}",
                    expected="absent",
                )
            )
    if not findings:
        findings.append(
            node_finding(
                DriftCheck.GPU_SWAPPED,
                PASS,
                f"The same {len(cert.gpus)} GPUs as certified, by UUID and serial",
                observed=f"{len(facts.gpus)} GPUs",
                expected=f"{len(cert.gpus)} GPUs",
            )
        )
    return findings, pairs


# ------------------------------------------------------------------ what moved on each


def _moved(
    check: str, gpu: GpuFacts, changed: str | None, kept: str, *, observed: object, expected: object
) -> Finding:
    """FAIL saying what ``changed`` when something did, else PASS saying what was ``kept``."""
    return gpu_finding(
        check,
        FAIL if changed is not None else PASS,
        gpu,
        f"GPU {gpu.index}: {changed if changed is not None else kept}",
        observed=observed,
        expected=expected,
    )


def _vbios(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    check, before, now = DriftCheck.VBIOS, was.vbios_version, gpu.vbios_version
    if before is None:
        return None
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, "VBIOS version", now, expected=before)
    changed = f"VBIOS changed from {before} to {now}" if now != before else None
    kept = f"VBIOS {now} as certified"
    return _moved(check, gpu, changed, kept, observed=now, expected=before)


def _power(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    check, before, now = (
        DriftCheck.POWER_LIMIT,
        was.power_limit_enforced_w,
        gpu.power_limit_enforced_w,
    )
    if before is None:
        return None
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, "power limit", now, expected=watts(before))
    changed = None
    if abs(now - before) > POWER_TOLERANCE_W:
        way = "lowered" if now < before else "raised"
        changed = f"power limit {way} from {watts(before)} to {watts(now)}"
    kept = f"power limit {watts(now)} as certified"
    return _moved(check, gpu, changed, kept, observed=watts(now), expected=watts(before))


def _pcie(
    check: str, label: str, gpu: GpuFacts, before: int | None, now: Measured[int]
) -> Finding | None:
    if before is None:
        return None
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, f"PCIe link {label}", now, expected=f">= {before}")
    changed = f"PCIe link {label} fell from {before} to {now}" if now < before else None
    kept = f"PCIe link {label} {now} as certified"
    return _moved(check, gpu, changed, kept, observed=now, expected=f">= {before}")


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


def _persistence(was: CertifiedGpu, gpu: GpuFacts, policy: Policy) -> Finding | None:
    check, now = DriftCheck.PERSISTENCE, gpu.persistence_mode
    expected_on = was.persistence_mode is True or (
        was.persistence_mode is None and policy.persistence_mode_required
    )
    if not expected_on:
        return None
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, "persistence mode", now, expected="on")
    changed = (
        "persistence mode is off (it was on when certified); turn it on with nvidia-persistenced"
        if now is False
        else None
    )
    state = "off" if now is False else "on"
    return _moved(check, gpu, changed, "persistence mode on", observed=state, expected="on")


def compare_gpu(was: CertifiedGpu, gpu: GpuFacts, policy: Policy) -> list[Finding]:
    """What moved on one GPU that is the same board as certified."""
    found = (
        _vbios(was, gpu),
        _power(was, gpu),
        _pcie(DriftCheck.PCIE_GEN, "generation", gpu, was.pcie_gen_max, gpu.pcie_gen_max),
        _pcie(DriftCheck.PCIE_WIDTH, "width", gpu, was.pcie_width_current, gpu.pcie_width_current),
        _ecc(was, gpu),
        _row_remap(was, gpu),
        _retired_pages(was, gpu),
        _persistence(was, gpu, policy),
    )
    return [finding for finding in found if finding is not None]


# ------------------------------------------------------------------ burn-in speed


def _burned(was: CertifiedGpu, gpu: GpuFacts, burn: BurnResult, policy: Policy) -> Finding:
    """One GPU's burn-in speed against its certified figure."""
    check = DriftCheck.BURN
    if was.burn_tflops is None:
        return gpu_finding(
            check,
            UNKNOWN,
            gpu,
            f"GPU {gpu.index}: the certificate holds no burn-in speed to compare with",
            expected="a certified TFLOPS figure",
            required=False,
        )
    drop = policy.thresholds.drift_burn_drop
    floor = was.burn_tflops * (1.0 - drop)
    expected = f">= {floor:.1f} TFLOPS ({was.burn_tflops:.1f} certified, -{drop:.0%})"
    ran = next((g for g in burn.gpus if g.index == gpu.index), None)
    if burn.error is not None or ran is None or ran.status is not BurnStatus.COMPLETED:
        why = burn.error or (ran.detail or ran.status.value if ran else "not burned")
        text = f"the burn-in gave no speed: {why}"
        return gpu_finding(
            check, UNKNOWN, gpu, f"GPU {gpu.index}: {text}", observed=why, expected=expected
        )
    tflops = ran.tflops
    if isinstance(tflops, Unavailable) or not math.isfinite(tflops):
        why = why_not(tflops) if isinstance(tflops, Unavailable) else str(tflops)
        text = f"no burn-in speed: {why}"
        return gpu_finding(
            check, UNKNOWN, gpu, f"GPU {gpu.index}: {text}", observed=why, expected=expected
        )
    if tflops < floor:
        share = 1.0 - tflops / was.burn_tflops
        severity = FAIL
        text = (
            f"burn-in {tflops:.1f} TFLOPS is {share:.0%} below the certified {was.burn_tflops:.1f}"
        )
    else:
        severity, text = PASS, f"burn-in {tflops:.1f} TFLOPS"
    return gpu_finding(
        check,
        severity,
        gpu,
        f"GPU {gpu.index}: {text}",
        observed=f"{tflops:.1f} TFLOPS",
        expected=expected,
    )


def burn_findings(pairs: Sequence[Pair], facts: NodeFacts, policy: Policy) -> list[Finding]:
    """Each GPU's burn-in speed against its certified figure; none without a burn-in."""
    burn = facts.burn
    if burn is None:
        return []  # a quick drift check runs no burn-in: nothing to compare
    return [_burned(was, gpu, burn, policy) for was, gpu in pairs]


__all__ = ["POWER_TOLERANCE_W", "Pair", "burn_findings", "compare_gpu", "gpu_set"]
