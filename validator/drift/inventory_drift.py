"""Drift of the GPU set, paired with :mod:`validator.judge.checks.inventory`: which boards.

GPUs are matched by index. A different UUID or serial at the same index is a
swapped GPU: its other facts belong to another board, so only the swap is
reported for it. A GPU that fell off the bus is reported as removed; one the
certificate does not hold is added. The GPUs that are the same boards as certified
are the pairs every other family compares one to one (:func:`gpu_set`).
"""

from __future__ import annotations

from validator.certificate import Certificate, CertifiedGpu
from validator.drift.drift_helpers import DriftInputs, Pair
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    gpu_finding,
    node_finding,
    why_not,
)
from validator.model import (
    CheckFamily,
    DriftCheck,
    Finding,
    GpuFacts,
    GpuStatus,
    NodeFacts,
    Unavailable,
)

FAMILY = CheckFamily.INVENTORY


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


def compare_inventory(inputs: DriftInputs) -> list[Finding]:
    """Added, removed and swapped GPUs, as :func:`gpu_set` found them with the pairs."""
    return list(inputs.gpu_set_findings)


__all__ = ["FAMILY", "compare_inventory", "gpu_set"]
