"""The node verdict: run every check family, sort the findings, decide and summarise."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from validator.error_tree import ExitCode
from validator.judge import figure_ceilings
from validator.judge.actions import assign_actions
from validator.judge.catalog import Catalog, Sku, load_catalog
from validator.judge.catalog_notes import note_unconfirmed
from validator.judge.checks import FAMILIES
from validator.judge.checks import figures as figure_checks
from validator.judge.checks.advice import advise
from validator.judge.checks.busy import CHECK as BUSY_CHECK
from validator.judge.checks.busy import is_busy
from validator.judge.checks.finding_helpers import (
    by_check,
    nothing_to_certify,
    nothing_to_judge,
)
from validator.judge.policy import Policy, policy_digest
from validator.model import (
    ACTION_WORDS,
    Action,
    CheckFamily,
    Finding,
    NodeFacts,
    NodeResult,
    Severity,
    Verdict,
    chosen_gpus,
    overall_verdict,
    scope_text,
)
from validator.model import chosen as is_chosen
from validator.model.check_counts import count_checks, worst_by_check

# Judged on every GPU whatever --gpus chose: what the node is, and its kernel log.
WHOLE_NODE_FAMILIES = frozenset({CheckFamily.INVENTORY, CheckFamily.VERSIONS, CheckFamily.ERRORS})
_SEVERITY_ORDER = {Severity.FAIL: 0, Severity.UNKNOWN: 1, Severity.WARN: 2, Severity.PASS: 3}


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


def scope_words(facts: NodeFacts) -> str:
    """``GPUs 0, 3 of 8`` for a run that certified a subset (--gpus)."""
    return scope_text(facts.chosen_gpus, len(facts.gpus))


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def decide(facts: NodeFacts, findings: tuple[Finding, ...]) -> tuple[Verdict, str]:
    """The verdict and its one-line summary, from sorted findings."""
    failed = [f for f in findings if f.severity is Severity.FAIL]
    blocking = [f for f in findings if f.severity is Severity.UNKNOWN and f.required]
    warned = [f for f in findings if f.severity is Severity.WARN]
    if nothing_to_judge(facts):
        # No GPU in sight and no driver to ask: a verdict on the tools around
        # them (a missing cuDNN, say) would only hide the one thing to say.
        return Verdict.UNKNOWN, nothing_to_certify(facts)
    busy = [f for f in findings if is_busy(f)]
    if busy:
        # Others' work was on the GPUs, so nothing was burned or measured. What was read
        # all the same (inventory, versions, the error counters, the kernel log, state)
        # still fails the node: a lost GPU or spent spare rows do not wait for a job to
        # end. A busy node's burn is never a FAIL (it did not run: UNKNOWN).
        texts = "; ".join(dict.fromkeys(f.observed for f in busy))
        if not failed:
            return Verdict.UNKNOWN, f"{texts}: not tested; {ACTION_WORDS[Action.WAIT_IDLE]}"
        counts = count_checks(findings)
        return Verdict.NOT_CERTIFIED, (
            f"{_plural(counts.failed, 'check')} failed: {by_check(failed)}; "
            f"{texts}: the rest not tested"
        )
    if not findings:
        # Nothing was checked at all: that is never a certificate.
        return Verdict.UNKNOWN, "no check produced a finding: nothing could be judged"
    # Counted as every report counts (validator.model.check_counts): each check once, at
    # its worst finding; a check named under "failed" is not named again under "could not".
    counts = count_checks(findings)
    worst = worst_by_check(findings)
    blocking = [f for f in blocking if worst[f.check] is Severity.UNKNOWN]
    if failed or blocking:
        parts = []
        if failed:
            parts.append(f"{_plural(counts.failed, 'check')} failed: {by_check(failed)}")
        if blocking:
            count = len({f.check for f in blocking})
            parts.append(
                f"{_plural(count, 'required check')} could not be judged: {by_check(blocking)}"
            )
        return Verdict.NOT_CERTIFIED, "; ".join(parts)
    if counts.unknown:
        # Optional checks that could not be judged: not "all passed", as the counts say.
        unknown = [f for f in findings if worst[f.check] is Severity.UNKNOWN]
        text = (
            f"{counts.passed + counts.warnings} of {_plural(counts.total, 'check')} passed, "
            f"{counts.unknown} optional could not be judged: {by_check(unknown)}"
        )
    else:
        text = f"all {_plural(counts.total, 'check')} passed"
    warned = [f for f in warned if worst[f.check] is Severity.WARN]
    if warned:
        text += f" with {_plural(counts.warnings, 'warning')}: {by_check(warned)}"
    return Verdict.CERTIFIED, text


def _after_busy(finding: Finding) -> Finding:
    """On a node whose GPUs were busy, what could not run waits for them, not for a rerun."""
    if finding.severity is not Severity.UNKNOWN or finding.action is not Action.RERUN:
        return finding
    return replace(
        finding,
        action=Action.WAIT_IDLE,
        action_source=f"gpuready: the GPUs were busy ({BUSY_CHECK})",
    )


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
    # A figure above what the hardware can do is "not measured" for every check, as
    # the node's own pass does for readings no GPU can give; the facts kept are these.
    facts, implausible = figure_ceilings.screen(facts, sku, catalog)
    findings = figure_checks.findings(facts, implausible)
    # --gpus: what the node is (inventory, versions, its kernel log) is judged whole; the
    # rest on the chosen GPUs alone, and no other GPU's finding is kept.
    chosen = facts if facts.chosen_gpus is None else replace(facts, gpus=chosen_gpus(facts))
    for family, check in FAMILIES:
        findings += check(facts if family in WHOLE_NODE_FAMILIES else chosen, policy, sku)
    findings = [f for f in findings if is_chosen(facts, f.gpu_index)]
    # A verdict resting on a catalog figure no source confirms says so in its message.
    findings = note_unconfirmed(findings, facts, policy, sku)
    # Every finding leaves the judge saying what to do about it (NONE on a PASS), and "run
    # it again" only where a rerun can help (checks.advice): where the driver did not
    # answer, what could not run waits for the driver's fix; a capture's gap, its file. On
    # busy GPUs, what could not run waits for them.
    busy = any(is_busy(f) for f in findings)
    assigned = assign_actions(findings)
    ordered = sort_findings([_after_busy(f) for f in assigned] if busy else advise(assigned, facts))
    verdict, summary = decide(facts, ordered)
    if sku is not None and verdict is not Verdict.UNKNOWN:
        summary = f"{len(facts.gpus)}x {sku.label}: {summary}"
    if facts.chosen_gpus is not None:
        summary = f"{scope_words(facts)}: {summary}"
    return NodeResult(
        hostname=facts.hostname,
        verdict=verdict,
        facts=facts,
        findings=ordered,
        sku=sku.id if sku is not None else None,
        policy_digest=policy_digest(policy),
        summary=summary,
    )


# The one rule from a run's node verdicts to its exit code (see
# validator.service.outcome for it in words; the verdict half is model.overall_verdict).
_EXIT = {
    Verdict.CERTIFIED: ExitCode.OK,
    Verdict.NOT_CERTIFIED: ExitCode.NOT_CERTIFIED,
    Verdict.UNKNOWN: ExitCode.COULD_NOT_RUN,
}


def exit_code(verdicts: Iterable[Verdict], *, interrupted: bool = False) -> ExitCode:
    """The process exit code of a run: 0, 1 or 3 by its overall verdict; 130 when interrupted."""
    if interrupted:
        return ExitCode.INTERRUPTED
    return _EXIT[overall_verdict(verdicts)]
