"""The node verdict: run every check family, sort the findings, decide and summarise."""

from __future__ import annotations

from collections import Counter

from validator.judge.catalog import Catalog, Sku, load_catalog
from validator.judge.checks import FAMILIES
from validator.judge.checks.common import gpu_list, nvml_problem
from validator.judge.policy import Policy, policy_digest
from validator.model import Finding, NodeFacts, NodeResult, NvmlStatus, Severity, Verdict

_SEVERITY_ORDER = {Severity.FAIL: 0, Severity.UNKNOWN: 1, Severity.WARN: 2, Severity.PASS: 3}

# NVML states in which no GPU could be inspected at all.
_NOTHING_TO_JUDGE = (
    NvmlStatus.LIBRARY_NOT_FOUND,
    NvmlStatus.DRIVER_NOT_LOADED,
    NvmlStatus.NO_PERMISSION,
    NvmlStatus.ERROR,
    NvmlStatus.NOT_MEASURED,
)


def pick_sku(facts: NodeFacts, policy: Policy, catalog: Catalog) -> Sku | None:
    """The SKU to judge against: the policy's expected model, else the GPUs' most common name.

    Raises:
        PolicyError: when the policy's expected_model is not in the catalog.
    """
    if policy.expected_model is not None:
        return catalog.resolve(policy.expected_model)
    names = Counter(gpu.name for gpu in facts.gpus if isinstance(gpu.name, str))
    if not names:
        return None
    return catalog.match(names.most_common(1)[0][0])


def sort_findings(findings: list[Finding]) -> tuple[Finding, ...]:
    """FAIL, UNKNOWN, WARN, PASS; then check id; then GPU index (node-wide first)."""
    return tuple(
        sorted(
            findings,
            key=lambda f: (
                _SEVERITY_ORDER[f.severity],
                f.check,
                -1 if f.gpu_index is None else f.gpu_index,
            ),
        )
    )


def _by_check(findings: list[Finding]) -> str:
    gpus: dict[str, list[int]] = {}
    for finding in findings:
        gpus.setdefault(finding.check, [])
        if finding.gpu_index is not None:
            gpus[finding.check].append(finding.gpu_index)
    return ", ".join(
        f"{check} ({gpu_list(indexes)})" if indexes else check for check, indexes in gpus.items()
    )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def decide(facts: NodeFacts, findings: tuple[Finding, ...]) -> tuple[Verdict, str]:
    """The verdict and its one-line summary, from sorted findings."""
    failed = [f for f in findings if f.severity is Severity.FAIL]
    blocking = [f for f in findings if f.severity is Severity.UNKNOWN and f.required]
    warned = [f for f in findings if f.severity is Severity.WARN]
    pci_gpus = facts.pci_gpu_count if isinstance(facts.pci_gpu_count, int) else 0
    if facts.nvml_status in _NOTHING_TO_JUDGE and not facts.gpus and pci_gpus == 0:
        # No GPU in sight and no driver to ask: a verdict on the tools around
        # them (a missing cuDNN, say) would only hide the one thing to say.
        problem = nvml_problem(facts) or facts.nvml_status.value
        return Verdict.UNKNOWN, f"{problem}; no NVIDIA GPU found: nothing to certify"
    if not findings:
        # Nothing was checked at all: that is never a certificate.
        return Verdict.UNKNOWN, "no check produced a finding: nothing could be judged"
    if failed or blocking:
        parts = []
        if failed:
            count = len({f.check for f in failed})
            parts.append(f"{_plural(count, 'check')} failed: {_by_check(failed)}")
        if blocking:
            count = len({f.check for f in blocking})
            parts.append(
                f"{_plural(count, 'required check')} could not be judged: {_by_check(blocking)}"
            )
        return Verdict.NOT_CERTIFIED, "; ".join(parts)
    checks = len({f.check for f in findings})
    text = f"all {_plural(checks, 'check')} passed"
    if warned:
        text += f" with {_plural(len({f.check for f in warned}), 'warning')}: {_by_check(warned)}"
    return Verdict.CERTIFIED, text


def judge_node(facts: NodeFacts, policy: Policy, catalog: Catalog | None = None) -> NodeResult:
    """Judge one node: every check family, then the verdict.

    Args:
        facts: what the node agent measured.
        policy: the rules and thresholds.
        catalog: the SKU catalog; the packaged one when omitted.

    Raises:
        PolicyError: when the policy names a model the catalog does not know.
    """
    catalog = catalog if catalog is not None else load_catalog()
    sku = pick_sku(facts, policy, catalog)
    findings: list[Finding] = []
    for _, check in FAMILIES:
        findings += check(facts, policy, sku)
    ordered = sort_findings(findings)
    verdict, summary = decide(facts, ordered)
    if sku is not None and verdict is not Verdict.UNKNOWN:
        summary = f"{len(facts.gpus)}x {sku.label}: {summary}"
    return NodeResult(
        hostname=facts.hostname,
        verdict=verdict,
        facts=facts,
        findings=ordered,
        sku=sku.id if sku is not None else None,
        policy_digest=policy_digest(policy),
        summary=summary,
    )
