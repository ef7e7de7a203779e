"""What the families' drift comparisons share: their inputs, GPU pairs, counter growth, notes.

Each family's comparison (``validator/drift/<family>_drift.py``, paired by name with
``validator/judge/checks/<family>.py``) takes one :class:`DriftInputs`: the certificate,
the facts of now, the GPUs that are the same boards as certified (:data:`Pair`, from
:func:`validator.drift.inventory_drift.gpu_set`), the policy and the certified SKU.

The helpers here are those more than one family uses:

* :func:`moved`: FAIL saying what changed on a GPU, else PASS saying what was kept;
* :func:`no_baseline`: a fact measured now that the certificate lacks (UNKNOWN, not
  blocking);
* :func:`predates` and :func:`predated`: a certificate older than a check (schema 1 before
  the NVLink, PCIe replay and DCGM checks) is no baseline: one note per check, not blocking;
* :class:`Reading` and :func:`growth`: error counters held to the policy's growth limits
  since certification (NVLink error counters, PCIe replays). They count since the driver
  loaded, so a total below the certified one was reset (a reboot or driver reload):
  everything it counts came after the certificate, so above the limit it is drift; within
  it, the growth before the reset is lost and cannot be judged: an UNKNOWN that does not
  block, saying so;
* :func:`acted`: a finding with the action to take, when it is drift.

Every finding is built with the judge's constructors
(:mod:`validator.judge.checks.finding_helpers`): drift findings are findings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from validator.certificate import INTERCONNECT_SCHEMA_VERSION, Certificate, CertifiedGpu
from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    gpu_finding,
    node_finding,
    why_not,
    with_action,
)
from validator.judge.policy import Policy
from validator.model import Action, DriftCheck, Finding, GpuFacts, Measured, NodeFacts, Unavailable

Pair = tuple[CertifiedGpu, GpuFacts]  # a GPU as certified, and the same board now


@dataclass(frozen=True)
class DriftInputs:
    """What every family's drift comparison reads: the baseline, the facts now, the rules."""

    cert: Certificate
    facts: NodeFacts  # screened: a figure beyond the certified model's is not measured now
    pairs: tuple[Pair, ...]  # the GPUs that are the same boards as certified
    policy: Policy
    sku: Sku | None  # the certified SKU; None where this catalog does not know it
    # What the GPU set said (added, removed, swapped), found with ``pairs``: made once.
    gpu_set_findings: tuple[Finding, ...] = ()


# One family's drift comparison: its findings for the node, unsorted.
Comparison = Callable[[DriftInputs], list[Finding]]
# A check the certificate may predate: (check, what it compares, measured now on a GPU).
PredatedCheck = tuple[DriftCheck, str, Callable[[GpuFacts], bool]]


def moved(
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


def no_baseline(check: str, gpu: GpuFacts, what: str, now: str) -> Finding:
    """A fact measured now that the certificate lacks: nothing to compare, not blocking."""
    return gpu_finding(
        check,
        UNKNOWN,
        gpu,
        f"GPU {gpu.index}: {what} has no value in the certificate to compare with",
        observed=now,
        expected="a certified value",
        required=False,
    )


def has(value: Measured[object]) -> bool:
    """True for a value measured now that is not an empty list of links."""
    return not isinstance(value, Unavailable) and value != ()


def predates(cert: Certificate, check: str, what: str) -> Finding:
    """A note that the certificate is older than a check: not drift, not blocking."""
    return node_finding(
        check,
        UNKNOWN,
        f"The {cert.label} predates drift's {what} check (certificate schema "
        f"{cert.schema_version}): not compared; certify the node again to record it",
        observed=f"certificate schema {cert.schema_version}",
        expected=f"certificate schema {INTERCONNECT_SCHEMA_VERSION} or newer",
        required=False,
    )


def predated(inputs: DriftInputs, checks: Sequence[PredatedCheck]) -> list[Finding]:
    """One :func:`predates` note per check that some GPU has something to compare for now."""
    return [
        predates(inputs.cert, check, what)
        for check, what, measured in checks
        if any(measured(gpu) for _, gpu in inputs.pairs)
    ]


def acted(finding: Finding, action: tuple[Action, str]) -> Finding:
    """``finding`` with the action to take, when it is drift."""
    return with_action(finding, *action) if finding.severity is FAIL else finding


# ------------------------------------------------------------------ counter growth


@dataclass(frozen=True)
class Reading:
    """One error counter as certified and now, and the growth the policy allows."""

    label: str  # "NVLink 3 CRC flit", "PCIe replays"
    before: int | None
    now: Measured[int]
    limit: int


@dataclass
class _Tally:
    """Counters sorted by what can be said of each."""

    grown: list[str] = dataclasses.field(default_factory=list)
    grown_now: list[str] = dataclasses.field(default_factory=list)
    unreadable: list[str] = dataclasses.field(default_factory=list)
    reset: list[str] = dataclasses.field(default_factory=list)
    compared: list[str] = dataclasses.field(default_factory=list)
    no_baseline: list[str] = dataclasses.field(default_factory=list)

    def add(self, counter: Reading) -> None:
        """Sort one counter (see the module doc: a total below the certified one was reset)."""
        label, before, now, limit = counter.label, counter.before, counter.now, counter.limit
        if isinstance(now, Unavailable):
            if before is not None:
                self.unreadable.append(f"{label}: {why_not(now)}")
        elif before is None:
            self.no_baseline.append(f"{label} {now}")
        elif now < before:
            # Reset since (a reboot or driver reload): everything counted now came after.
            if now > limit:
                self.grown.append(f"{label} {now} since the counters were reset (max {limit})")
                self.grown_now.append(f"{label} {now}")
            else:
                self.reset.append(f"{label} {before} -> {now}")
        elif now - before > limit:
            self.grown.append(f"{label} +{now - before} ({before} -> {now}, max {limit})")
            self.grown_now.append(f"{label} {now}")
        else:
            self.compared.append(f"{label} {now}")


def growth(
    check: str, gpu: GpuFacts, what: str, counters: Sequence[Reading], expected: str
) -> Finding | None:
    """One finding over a GPU's counters: FAIL when any grew beyond its limit."""
    tally = _Tally()
    for counter in counters:
        tally.add(counter)
    required = True
    if tally.grown:
        severity, observed = FAIL, ", ".join(tally.grown_now)
        text = f"grew since certified: {'; '.join(tally.grown)}"
    elif tally.unreadable:
        severity, observed = UNKNOWN, "; ".join(tally.unreadable)
        text = f"could not be read now: {observed}"
    elif tally.reset:
        severity, observed, required = UNKNOWN, "; ".join(tally.reset), False
        text = (
            f"were reset since certified (a reboot or driver reload: {observed}), so their "
            "growth cannot be judged; what they counted since is within the limits"
        )
    elif tally.compared:
        severity, observed = PASS, ", ".join(tally.compared)
        text = "within the limits since certified"
    elif tally.no_baseline:
        return no_baseline(check, gpu, what, ", ".join(tally.no_baseline))
    else:
        return None  # not measured then, not measured now: nothing to say
    return gpu_finding(
        check,
        severity,
        gpu,
        f"GPU {gpu.index}: {what} {text}",
        observed=observed,
        expected=expected,
        required=required,
    )


__all__ = [
    "Comparison",
    "DriftInputs",
    "Pair",
    "PredatedCheck",
    "Reading",
    "acted",
    "growth",
    "has",
    "moved",
    "no_baseline",
    "predated",
    "predates",
]
