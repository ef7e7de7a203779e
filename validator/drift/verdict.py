"""The drift verdict of one node; its state as monitoring names it is in the model.

:func:`validator.model.drift_state` reads it from the result, for the renderers too.

Any FAIL is drift (NOT_CERTIFIED); else a required UNKNOWN leaves the node UNKNOWN
(it could not be shown unchanged); else CERTIFIED (no drift). A node never
certified has no baseline: UNKNOWN, never drift. Where there is nothing to judge
at all, by the judge's own rule (:func:`nothing_to_judge`), the summary says so.

A baseline that failed its check (:class:`UntrustedBaseline`: edited after issue, a
bad or missing signature, unreadable, another node's) is not compared with at all:
one FAIL ``drift.certificate``, so the node reads as drift (NOT_CERTIFIED, exit 1).
It is not UNKNOWN: a node whose certificate was tampered with is exactly what drift
is there to catch, and UNKNOWN alone would exit 3 ("nothing could be judged").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from validator.certificate import Certificate
from validator.drift.compare import compare
from validator.judge.actions import assign_actions
from validator.judge.checks.common import by_check, node_finding, nothing_to_judge
from validator.judge.policy import Policy, policy_digest
from validator.model import (
    DriftCheck,
    Finding,
    NodeFacts,
    NodeResult,
    Severity,
    Verdict,
    drift_findings,
)

NEVER_CERTIFIED = "never certified: run gpuready certify first"
NOT_TRUSTED = "baseline not trusted"


@dataclass(frozen=True)
class UntrustedBaseline:
    """A node's certificate that failed its check, and so is no baseline.

    ``problem`` is one line naming the certificate (its label, or the host when it could
    not even be read) and what failed.
    """

    problem: str


def _gpu_run(indexes: Iterable[int]) -> str:
    # "GPU 5,6": short, for a Slurm reason that has to fit its buffer.
    return "GPU " + ",".join(str(i) for i in sorted(set(indexes)))


def drift_by_check(findings: Iterable[Finding]) -> str:
    """The drift checks of ``findings``, each with its GPUs: ``power_limit (GPU 5,6), xid``."""
    return by_check(findings, prefix="drift.", gpus=_gpu_run)


def _never_certified(facts: NodeFacts, digest: str) -> NodeResult:
    finding = node_finding(
        DriftCheck.BASELINE,
        Severity.UNKNOWN,
        f"{facts.hostname} was {NEVER_CERTIFIED}",
        observed="no certificate",
        expected="a certificate",
    )
    return NodeResult(
        hostname=facts.hostname,
        verdict=Verdict.UNKNOWN,
        facts=facts,
        findings=assign_actions((finding,)),
        policy_digest=digest,
        summary=NEVER_CERTIFIED,
    )


def _untrusted(facts: NodeFacts, baseline: UntrustedBaseline, digest: str) -> NodeResult:
    finding = node_finding(
        DriftCheck.CERTIFICATE,
        Severity.FAIL,
        f"{baseline.problem}; it is not used as the drift baseline: find out why, "
        "then certify the node again",
        observed="failed its check",
        expected="a certificate that verifies",
    )
    return NodeResult(
        hostname=facts.hostname,
        verdict=Verdict.NOT_CERTIFIED,
        facts=facts,
        findings=assign_actions((finding,)),
        policy_digest=digest,
        summary=f"{NOT_TRUSTED}: {baseline.problem}",
    )


def decide_drift(
    facts: NodeFacts, findings: Sequence[Finding], issued_at: str
) -> tuple[Verdict, str]:
    """The verdict and its one-line summary, from the sorted drift findings."""
    failed = drift_findings(findings)
    blocking = [f for f in findings if f.severity is Severity.UNKNOWN and f.required]
    since = f"since the certificate of {issued_at}"
    if failed:
        return Verdict.NOT_CERTIFIED, f"drift {since}: {drift_by_check(failed)}"
    if nothing_to_judge(facts):
        return (
            Verdict.UNKNOWN,
            f"nothing measurable: {facts.nvml_detail or facts.nvml_status.value}",
        )
    if blocking:
        return Verdict.UNKNOWN, f"could not be checked: {drift_by_check(blocking)}"
    return Verdict.CERTIFIED, f"no drift {since}"


def drift_node(
    facts: NodeFacts, cert: Certificate | UntrustedBaseline | None, policy: Policy
) -> NodeResult:
    """Judge one node's drift from its latest certificate.

    Args:
        facts: the node's facts now.
        cert: its latest certificate, verified; an :class:`UntrustedBaseline` when it
            failed its check; None when the node was never certified.
        policy: the rules now.

    Returns:
        CERTIFIED when nothing drifted, NOT_CERTIFIED when something did or the
        certificate is not trusted, UNKNOWN when the node was never certified or could
        not be shown unchanged.
    """
    digest = policy_digest(policy)
    if cert is None:
        return _never_certified(facts, digest)
    if isinstance(cert, UntrustedBaseline):
        return _untrusted(facts, cert, digest)
    findings = assign_actions(compare(cert, facts, policy))
    verdict, summary = decide_drift(facts, findings, cert.issued_at)
    return NodeResult(
        hostname=facts.hostname,
        verdict=verdict,
        facts=facts,
        findings=findings,
        sku=cert.sku,
        policy_digest=digest,
        summary=summary,
    )


__all__ = [
    "NEVER_CERTIFIED",
    "NOT_TRUSTED",
    "UntrustedBaseline",
    "decide_drift",
    "drift_by_check",
    "drift_node",
]
