"""Drift of the PCIe links, paired with :mod:`validator.judge.checks.pcie`.

* Each GPU's maximum link generation and current width: below the certified one is
  drift; unreadable now, UNKNOWN; not read at certification, nothing to compare.
* The PCIe replay counter (certificate schema 2; an older certificate predates it, noted
  once and not blocking) drifts when it grew since certification beyond
  ``thresholds.pcie_replay_growth_max``, the same figure as during the burn-in: the whole
  time since certification is held to it. A total below the certified one was reset
  (:func:`validator.drift.drift_helpers.growth`). The action is the judge's for the same
  fault (:data:`validator.judge.checks.pcie.REPLAY_REPAIR`).
"""

from __future__ import annotations

from validator.certificate import CertifiedGpu
from validator.drift.drift_helpers import (
    DriftInputs,
    PredatedCheck,
    Reading,
    acted,
    growth,
    has,
    moved,
    predated,
)
from validator.judge.checks.finding_helpers import unknown_gpu
from validator.judge.checks.pcie import REPLAY_REPAIR
from validator.judge.policy import Policy
from validator.model import CheckFamily, DriftCheck, Finding, GpuFacts, Measured, Unavailable

FAMILY = CheckFamily.PCIE
# PCIe replays: the judge's action for the same fault.
PCIE_REPLAY_ACTION = REPLAY_REPAIR
# What schema 2 added: a schema-1 certificate predates it.
_PREDATES: tuple[PredatedCheck, ...] = (
    (DriftCheck.PCIE_REPLAY, "PCIe replay", lambda gpu: has(gpu.pcie_replay_count)),
)


def _pcie(
    check: str, label: str, gpu: GpuFacts, before: int | None, now: Measured[int]
) -> Finding | None:
    if before is None:
        return None
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, f"PCIe link {label}", now, expected=f">= {before}")
    changed = f"PCIe link {label} fell from {before} to {now}" if now < before else None
    kept = f"PCIe link {label} {now} as certified"
    return moved(check, gpu, changed, kept, observed=now, expected=f">= {before}")


def _pcie_replays(was: CertifiedGpu, gpu: GpuFacts, policy: Policy) -> Finding | None:
    limit = policy.thresholds.pcie_replay_growth_max
    counters = (Reading("PCIe replays", was.pcie_replay_count, gpu.pcie_replay_count, limit),)
    return growth(DriftCheck.PCIE_REPLAY, gpu, "PCIe replays", counters, f"at most +{limit}")


def compare_pcie(inputs: DriftInputs) -> list[Finding]:
    """Each paired GPU's link generation and width, then its PCIe replays."""
    findings: list[Finding] = []
    for was, gpu in inputs.pairs:
        links = (
            _pcie(DriftCheck.PCIE_GEN, "generation", gpu, was.pcie_gen_max, gpu.pcie_gen_max),
            _pcie(
                DriftCheck.PCIE_WIDTH, "width", gpu, was.pcie_width_current, gpu.pcie_width_current
            ),
        )
        findings += [finding for finding in links if finding is not None]
    if not inputs.cert.holds_interconnect:
        return findings + predated(inputs, _PREDATES)
    for was, gpu in inputs.pairs:
        replays = _pcie_replays(was, gpu, inputs.policy)
        if replays is not None:
            findings.append(acted(replays, PCIE_REPLAY_ACTION))
    return findings


__all__ = ["FAMILY", "PCIE_REPLAY_ACTION", "compare_pcie"]
