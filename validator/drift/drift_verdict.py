"""The drift verdict of one node; its state as monitoring names it is in the model.

:func:`validator.model.drift_state` reads it from the result, for the renderers too.

Any FAIL is drift (NOT_CERTIFIED); else a required UNKNOWN leaves the node UNKNOWN
(it could not be shown unchanged); else CERTIFIED (no drift). A node never
certified has no baseline: UNKNOWN, never drift; where certify was run and did not
certify it, the summary names that run and its failed checks (:class:`NoCertificate`).
Where there is nothing to judge
at all, by the judge's own rule (:func:`nothing_to_judge`), the summary says so.

A baseline that failed its check (:class:`UntrustedBaseline`: edited after issue, a
bad or missing signature, unreadable, another node's) is not compared with at all:
one FAIL ``drift.certificate``, so the node reads as drift (NOT_CERTIFIED, exit 1).
It is not UNKNOWN: a node whose certificate was tampered with is exactly what drift
is there to catch, and UNKNOWN alone would exit 3 ("nothing could be judged").

Two more baselines are refused the same way. A certificate revoked by a later
certification that did not certify the node (:func:`revoked`): drift reports "last
certification on <date> failed: <checks>" until a new certificate is issued. And a
simulated node's certificate taken as a live or captured host's baseline: a scenario
proves nothing about a real machine. A certificate older than provenance (schema 1-3)
is compared as before, and the summary says its provenance is unknown.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from validator.certificate import Certificate
from validator.drift.compare import compare
from validator.judge.actions import assign_actions
from validator.judge.checks.finding_helpers import by_check, node_finding, nothing_to_judge
from validator.judge.policy import Policy, policy_digest
from validator.model import (
    CERTIFICATION_FAILED,
    DriftCheck,
    Finding,
    NodeFacts,
    NodeResult,
    Severity,
    Verdict,
    drift_findings,
    provenance_of,
)
from validator.safe_text import one_line

NEVER_CERTIFIED = "never certified: run gpuready certify first"
NOT_TRUSTED = "baseline not trusted"
OLDER_PROVENANCE = "provenance unknown (older certificate)"


@dataclass(frozen=True)
class UntrustedBaseline:
    """A node's certificate that failed its check, and so is no baseline.

    ``problem`` is one line naming the certificate (its label, or the host when it could
    not even be read) and what failed.
    """

    problem: str
    # The result's summary in place of "baseline not trusted: <problem>" (a revocation's).
    summary: str = ""


@dataclass(frozen=True)
class NoCertificate:
    """No certificate to compare with, though the node was tried: what its last try said.

    ``summary`` is one line naming the run that did not certify the node (see
    :func:`not_certified_by`): drift right after a failed certify says so, not "never
    certified".
    """

    summary: str


def _minute(when: str) -> str:
    """``2026-12-06 14:03`` for an ISO 8601 time; the text itself (one line) otherwise."""
    try:
        return datetime.datetime.fromisoformat(when).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return one_line(when, 40)


def not_certified_by(
    *, run_id: int, when: str, verdict: str, failed: Sequence[tuple[str, int | None]], summary: str
) -> NoCertificate:
    """A node without a certificate whose latest certification (run ``run_id``) did not certify it.

    ``not certified: run 7 (2026-12-06 14:03) failed: 2 checks (burn.speed (GPU 1),
    nvlink.state (GPU 2)); fix and certify again``; an attempt that failed no check (it
    could not judge the node) gives its own summary instead.
    """
    run = f"run {run_id} ({_minute(when)})"
    if failed:
        checks = len({check for check, _ in failed})
        noun = "check" if checks == 1 else "checks"
        what = f"failed: {checks} {noun} ({_failed_checks(failed)}); fix and certify again"
    else:
        what = (
            f"did not certify it ({one_line(verdict, 20)}: {one_line(summary, 200)}); "
            "fix what it names and certify again"
        )
    return NoCertificate(f"not certified: {run} {what}")


def _failed_checks(failed: Iterable[tuple[str, int | None]]) -> str:
    """``power.limit (GPU 3), burn.speed (GPU 3)``: each check once, with its GPUs."""
    gpus: dict[str, list[int]] = {}
    for check, gpu in failed:
        named = gpus.setdefault(one_line(check, 60), [])
        if gpu is not None:
            named.append(gpu)
    return ", ".join(
        f"{check} ({_gpu_run(indexes)})" if indexes else check for check, indexes in gpus.items()
    )


def revoked(
    cert: Certificate,
    *,
    when: str,
    run_id: int,
    verdict: str,
    failed: Sequence[tuple[str, int | None]],
    summary: str,
) -> UntrustedBaseline:
    """``cert`` revoked by the host's later certification (run ``run_id``) that did not certify it.

    Args:
        cert: the host's latest certificate, verified.
        when: when the later attempt was recorded (ISO 8601).
        run_id: its run.
        verdict: its verdict (NOT_CERTIFIED, or UNKNOWN: nothing certified it).
        failed: the checks that failed, each with its GPU (None: the node).
        summary: its own summary, shown where no check failed.
    """
    date = one_line(when, 40)
    if failed:
        outcome = f"failed: {_failed_checks(failed)}"
    else:
        outcome = f"did not certify it ({one_line(verdict, 20)}: {one_line(summary, 200)})"
    return UntrustedBaseline(
        problem=(
            f"{cert.label} was revoked by the certification of {date} (run {run_id}), "
            f"which {outcome}"
        ),
        summary=f"last certification on {date} {outcome}: certify the node again",
    )


def _simulated_baseline(facts: NodeFacts, cert: Certificate) -> UntrustedBaseline | None:
    """Why a simulated node's certificate is no baseline for ``facts``; None when it may be."""
    if not cert.simulated or facts.source == "simulate":
        return None
    return UntrustedBaseline(
        f"{cert.label} was issued for a simulated node, and is no baseline for a "
        f"{provenance_of(facts)} host: certify {one_line(facts.hostname, 80)} itself "
        "(without --simulate or gpuready_simulate)"
    )


def _gpu_run(indexes: Iterable[int]) -> str:
    # "GPU 5,6": short, for a Slurm reason that has to fit its buffer.
    return "GPU " + ",".join(str(i) for i in sorted(set(indexes)))


def drift_by_check(findings: Iterable[Finding]) -> str:
    """The drift checks of ``findings``, each with its GPUs: ``power_limit (GPU 5,6), xid``."""
    return by_check(findings, prefix="drift.", gpus=_gpu_run)


def _never_certified(
    facts: NodeFacts, digest: str, tried: NoCertificate | None = None
) -> NodeResult:
    summary = tried.summary if tried is not None else NEVER_CERTIFIED
    finding = node_finding(
        DriftCheck.BASELINE,
        Severity.UNKNOWN,
        f"{facts.hostname}: {summary}" if tried is not None else f"{facts.hostname} was {summary}",
        observed="no certificate" if tried is None else CERTIFICATION_FAILED,
        expected="a certificate",
    )
    return NodeResult(
        hostname=facts.hostname,
        verdict=Verdict.UNKNOWN,
        facts=facts,
        findings=assign_actions((finding,)),
        policy_digest=digest,
        summary=summary,
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
        summary=baseline.summary or f"{NOT_TRUSTED}: {baseline.problem}",
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
        return Verdict.UNKNOWN, _could_not(blocking)
    return Verdict.CERTIFIED, f"no drift {since}"


def _could_not(blocking: Sequence[Finding]) -> str:
    """``could not be checked: ...``; a certificate of some GPUs (--gpus) named first."""
    scope = [f for f in blocking if f.check == DriftCheck.SCOPE]
    rest = [f for f in blocking if f.check != DriftCheck.SCOPE]
    parts = [f"certified only {f.observed}: certify the whole node" for f in scope[:1]]
    if rest:
        parts.append(f"could not be checked: {drift_by_check(rest)}")
    return "; ".join(parts)


def drift_node(
    facts: NodeFacts,
    cert: Certificate | UntrustedBaseline | NoCertificate | None,
    policy: Policy,
) -> NodeResult:
    """Judge one node's drift from its latest certificate.

    Args:
        facts: the node's facts now.
        cert: its latest certificate, verified; an :class:`UntrustedBaseline` when it
            failed its check; a :class:`NoCertificate` when a certification that
            failed is all there is; None when the node was never certified.
        policy: the rules now.

    Returns:
        CERTIFIED when nothing drifted, NOT_CERTIFIED when something did or the
        certificate is not trusted, UNKNOWN when the node was never certified or could
        not be shown unchanged.
    """
    digest = policy_digest(policy)
    if cert is None or isinstance(cert, NoCertificate):
        return _never_certified(facts, digest, cert)
    if isinstance(cert, UntrustedBaseline):
        return _untrusted(facts, cert, digest)
    # Where nothing was measured no baseline is used, so none is refused either.
    refused = None if nothing_to_judge(facts) else _simulated_baseline(facts, cert)
    if refused is not None:
        return _untrusted(facts, refused, digest)
    findings = assign_actions(compare(cert, facts, policy))
    # A certificate older than provenance is compared as before, and the summary says so.
    issued = cert.issued_at if cert.holds_provenance else f"{cert.issued_at}, {OLDER_PROVENANCE}"
    verdict, summary = decide_drift(facts, findings, issued)
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
    "NoCertificate",
    "UntrustedBaseline",
    "decide_drift",
    "drift_by_check",
    "drift_node",
    "not_certified_by",
]
