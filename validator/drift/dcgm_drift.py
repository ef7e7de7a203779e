"""Drift of DCGM's diagnostics, paired with :mod:`validator.judge.checks.dcgm`.

* Every test that passed at certification (per GPU, or for the node) and now fails, warns
  or is skipped is drift, with DCGM's own words and the judge's action for that test
  (:func:`validator.judge.checks.dcgm.action_for_result`, the one decision certify uses).
* Every failure or warning now that no certified pass covers (the certificate skipped the
  test, does not hold it, ran a lower level, or holds no DCGM run at all) is drift too: a
  fault now is never passed over for want of a baseline; only a warning the certificate
  held as the same warning is as certified.
* DCGM not run this time (``facts.dcgm`` None) is nothing to compare, as a drift run
  without a burn-in; a test DCGM listed but did not run is UNKNOWN; one absent from this
  run (a lower level) is an UNKNOWN that does not block; DCGM giving no results at all is
  UNKNOWN, required when the policy asks for DCGM.
* A certificate older than the DCGM check (schema 1) is no baseline for it: one note,
  UNKNOWN that does not block, where DCGM gave results now
  (:func:`validator.drift.drift_helpers.predates`).
* A GPU swapped or removed since is left to its own finding: its tests are not compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from validator.certificate import Certificate, CertifiedDcgm, CertifiedDcgmTest
from validator.drift.drift_helpers import DriftInputs, Pair, predates
from validator.judge.checks.dcgm import action_for_result
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    GpuRef,
    gpu_finding,
    node_finding,
    why_not,
    with_action,
)
from validator.judge.policy import Policy
from validator.model import (
    Action,
    CheckFamily,
    DcgmDiag,
    DcgmOutcome,
    DcgmTestResult,
    DriftCheck,
    Finding,
    NodeFacts,
    Unavailable,
)

FAMILY = CheckFamily.DCGM
_DRIFTED = (DcgmOutcome.FAIL, DcgmOutcome.WARN, DcgmOutcome.SKIP)
_WORST_FIRST = (DcgmOutcome.FAIL, DcgmOutcome.WARN, DcgmOutcome.SKIP, DcgmOutcome.NOT_RUN)


def _results_for(was: CertifiedDcgmTest, now: Sequence[DcgmTestResult]) -> list[DcgmTestResult]:
    """The results now of a test that passed at certification, for the same GPU or node.

    DCGM 3 and 4 (and their text output) give some tests per GPU in one version and for
    the node in another: a node's result is compared with every GPU's now, and a GPU's
    with the node's when no per-GPU one is given.
    """
    same_test = [result for result in now if result.test == was.test]
    exact = [result for result in same_test if result.gpu_index == was.gpu_index]
    if exact or was.gpu_index is None:
        return exact or same_test
    return [result for result in same_test if result.gpu_index is None]


def _worst(results: Sequence[DcgmTestResult]) -> DcgmTestResult | None:
    """The result that says most against the test (fail first), None when every one passed."""
    for outcome in _WORST_FIRST:
        for result in results:
            if result.outcome is outcome:
                return result
    return None


def _most_disruptive(actions: Sequence[tuple[Action, str]]) -> tuple[Action, str]:
    order = list(Action)
    return max(actions, key=lambda pair: order.index(pair[0]))


@dataclass
class _DcgmTally:
    """One GPU's (or the node's) tests that passed at certification, by what they do now."""

    drifted: list[DcgmTestResult] = field(default_factory=list)
    # Failures and warnings now that no certified pass covers, with what the
    # certificate holds for them ("skip", "not in the certificate"...).
    new: list[tuple[DcgmTestResult, str]] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def add(self, was: CertifiedDcgmTest, now: Sequence[DcgmTestResult]) -> None:
        """Sort one certified pass by its results now."""
        results = _results_for(was, now)
        worst = _worst(results)
        if not results:
            self.missing.append(was.test)
        elif worst is None:
            self.kept.append(was.test)
        elif worst.outcome in _DRIFTED:
            self.drifted.append(worst)
        else:
            self.not_run.append(was.test)


_PAST = {DcgmOutcome.PASS.value: "passed"}


def _faults_now(tally: _DcgmTally) -> tuple[str, str, tuple[Action, str]]:
    """(observed, message, action) of a tally's failures now, certified passes first."""
    said = [(r, "passed when certified") for r in tally.drifted]
    said += [(r, f"{_PAST.get(was, was)} when certified") for r, was in tally.new]
    observed = ", ".join(f"{r.test} {r.outcome.value}" for r, _ in said)
    text = "; ".join(
        f"DCGM {r.test} {r.outcome.value} now ({was})" + (f": {r.message}" if r.message else "")
        for r, was in said
    )
    return observed, text, _most_disruptive([action_for_result(r) for r, _ in said])


def _dcgm_group(
    where: GpuRef | None, tally: _DcgmTally, levels: tuple[int | None, int | None]
) -> Finding:
    """The finding of one GPU's (or, ``where`` None, the node's) DCGM results."""
    label = "" if where is None else f"GPU {where.index}: "
    check, expected = DriftCheck.DCGM, "pass, as certified"
    severity, required, action = PASS, True, None
    if tally.drifted or tally.new:
        severity = FAIL
        observed, text, action = _faults_now(tally)
    elif tally.not_run:
        severity, observed = UNKNOWN, ", ".join(tally.not_run)
        text = f"DCGM did not run {observed} now (passed when certified)"
    elif tally.missing:
        severity, observed, required = UNKNOWN, ", ".join(tally.missing), False
        was, now = (level if level is not None else "?" for level in levels)
        text = (
            f"DCGM {observed} passed when certified (level {was}) and are not in this run "
            f"(level {now}): not compared"
        )
    else:
        observed = ", ".join(tally.kept)
        text = f"DCGM {observed} pass as certified"
    words = label + text
    finding = gpu_finding(
        check, severity, where, words, observed=observed, expected=expected, required=required
    )
    return finding if action is None else with_action(finding, *action)


def _dcgm_unmatched(cert: Certificate, diag: DcgmDiag, policy: Policy) -> list[Finding]:
    """What to say when the results cannot be compared test by test.

    The certificate predates DCGM in drift, DCGM was not run at certification, or it
    gave no results now (required when the policy asks for DCGM).
    """
    results = diag.results
    if not cert.holds_interconnect:
        measured = not isinstance(results, Unavailable)
        return [predates(cert, DriftCheck.DCGM, "DCGM")] if measured else []
    if cert.dcgm is None:
        if isinstance(results, Unavailable):
            return []
        return [
            node_finding(
                DriftCheck.DCGM,
                UNKNOWN,
                f"DCGM ran now (level {diag.level}), but not when the node was certified: "
                "no result to compare with",
                observed=f"{len(results)} results",
                expected="DCGM results in the certificate",
                required=False,
            )
        ]
    why = why_not(results) if isinstance(results, Unavailable) else "none"
    passed = sum(1 for r in cert.dcgm.results if r.outcome == DcgmOutcome.PASS.value)
    return [
        node_finding(
            DriftCheck.DCGM,
            UNKNOWN,
            f"DCGM gave no results now: {why}; the {passed} results that passed when the "
            "node was certified are not compared",
            observed=why,
            expected="DCGM results",
            required=policy.dcgm_level > 0,
        )
    ]


@dataclass(frozen=True)
class _IndexOnly:
    """A GPU DCGM names now that the facts of now do not hold."""

    index: int
    uuid: str | None = None


def _certified_as(certified: CertifiedDcgm | None, result: DcgmTestResult) -> str:
    """What the certificate holds for a result's test on its GPU (or the node)."""
    if certified is None:
        return "DCGM not run"
    for gpu in (result.gpu_index, None):
        for was in certified.results:
            if was.test == result.test and was.gpu_index == gpu:
                return was.outcome
    return "not in the certificate"


def _add_new_faults(
    tallies: dict[int | None, _DcgmTally],
    certified: CertifiedDcgm | None,
    results: Sequence[DcgmTestResult],
) -> None:
    """File every failure or warning now that no certified pass covers (fail closed)."""
    covered = {id(result) for tally in tallies.values() for result in tally.drifted}
    for result in results:
        if result.outcome not in (DcgmOutcome.FAIL, DcgmOutcome.WARN) or id(result) in covered:
            continue
        # A certified pass whose tally reported a worse result of the test (a node's
        # pass failing now on two GPUs) leaves this one to be told here.
        was = _certified_as(certified, result)
        if result.outcome is DcgmOutcome.WARN and was == DcgmOutcome.WARN.value:
            continue  # the same warning as when certified: nothing moved
        tallies.setdefault(result.gpu_index, _DcgmTally()).new.append((result, was))


def _dcgm_tests(
    certified: CertifiedDcgm | None,
    diag: DcgmDiag,
    results: Sequence[DcgmTestResult],
    facts: NodeFacts,
    pairs: Sequence[Pair],
) -> list[Finding]:
    """Each GPU's (and the node's) certified passes, and faults now, against the results."""
    paired = {gpu.index: gpu for _, gpu in pairs}
    tallies: dict[int | None, _DcgmTally] = {}
    for was in certified.results if certified is not None else ():
        if was.outcome != DcgmOutcome.PASS.value:
            continue
        if was.gpu_index is not None and was.gpu_index not in paired:
            continue  # gone or swapped: its own finding says so
        tallies.setdefault(was.gpu_index, _DcgmTally()).add(was, results)
    _add_new_faults(tallies, certified, results)
    now: dict[int, GpuRef] = {gpu.index: gpu for gpu in facts.gpus}
    now.update(paired)
    levels = (certified.level if certified is not None else None, diag.level)
    return [
        _dcgm_group(None if index is None else now.get(index, _IndexOnly(index)), tally, levels)
        for index, tally in tallies.items()
    ]


def _dcgm(
    cert: Certificate, facts: NodeFacts, pairs: Sequence[Pair], policy: Policy
) -> list[Finding]:
    """Every DCGM test that passed at certification, against this run's results.

    No DCGM run now (``facts.dcgm`` None) is nothing to compare, as a drift run without
    a burn-in has no speed to compare.
    """
    diag = facts.dcgm
    if diag is None:
        return []
    results = diag.results
    if isinstance(results, Unavailable):
        return _dcgm_unmatched(cert, diag, policy)
    if not cert.holds_interconnect or cert.dcgm is None:
        # No baseline to compare passes with; a fault now is still a fault.
        return _dcgm_unmatched(cert, diag, policy) + _dcgm_tests(None, diag, results, facts, pairs)
    return _dcgm_tests(cert.dcgm, diag, results, facts, pairs)


def compare_dcgm(inputs: DriftInputs) -> list[Finding]:
    """Every DCGM test that passed at certification, against this run's results."""
    return _dcgm(inputs.cert, inputs.facts, inputs.pairs, inputs.policy)


__all__ = ["FAMILY", "compare_dcgm"]
