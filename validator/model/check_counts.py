"""The one counting unit of every output: checks, not findings.

A check (``burn.speed``, ``nvlink.links``: the judge's check ids) may give one finding
per GPU. Counted by findings, a check failing on two GPUs reads "2 failed" in one place
and "1 check failed" in another; so every output (the terminal, the progress lines, the
HTML and JSON reports and the history's rows) counts through :func:`count_checks`: each
check once per node, at the worst severity any of its findings has (FAIL, then UNKNOWN,
then WARN, then PASS). The judge's summary ("3 checks failed: ...") counts the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from validator.model.findings import Finding, Severity

# Worse first: a check counts at the worst severity among its findings.
_RANK: Dict[Severity, int] = {
    Severity.FAIL: 0,
    Severity.UNKNOWN: 1,
    Severity.WARN: 2,
    Severity.PASS: 3,
}


@dataclass(frozen=True)
class CheckCounts:
    """How many checks came out at each severity (a check at its worst finding's)."""

    passed: int = 0
    warnings: int = 0
    failed: int = 0
    unknown: int = 0

    @property
    def total(self) -> int:
        """All checks counted."""
        return self.passed + self.warnings + self.failed + self.unknown

    def line(self) -> str:
        """The count line: ``53 checks: 48 passed, 1 warning, 3 failed, 1 unknown``."""
        warn_word = "warning" if self.warnings == 1 else "warnings"
        check_word = "check" if self.total == 1 else "checks"
        return (
            f"{self.total} {check_word}: {self.passed} passed, {self.warnings} {warn_word}, "
            f"{self.failed} failed, {self.unknown} unknown"
        )

    def __add__(self, other: CheckCounts) -> CheckCounts:
        """Counts of several nodes together (each node's checks counted on their own)."""
        return CheckCounts(
            passed=self.passed + other.passed,
            warnings=self.warnings + other.warnings,
            failed=self.failed + other.failed,
            unknown=self.unknown + other.unknown,
        )


def worst_by_check(findings: Iterable[Finding]) -> Dict[str, Severity]:
    """Each check of one node at the worst severity among its findings, in first-seen order."""
    worst: Dict[str, Severity] = {}
    for finding in findings:
        known = worst.get(finding.check)
        if known is None or _RANK[finding.severity] < _RANK[known]:
            worst[finding.check] = finding.severity
    return worst


def count_checks(findings: Iterable[Finding]) -> CheckCounts:
    """Count one node's checks by severity, each check once, at its worst finding's.

    Args:
        findings: the findings of one node (for several nodes, add their counts).

    Returns:
        The counts, one field per severity; their total is the number of checks.
    """
    tally = dict.fromkeys(Severity, 0)
    for severity in worst_by_check(findings).values():
        tally[severity] += 1
    return CheckCounts(
        passed=tally[Severity.PASS],
        warnings=tally[Severity.WARN],
        failed=tally[Severity.FAIL],
        unknown=tally[Severity.UNKNOWN],
    )


def checks_at(findings: Iterable[Finding], severity: Severity) -> List[Tuple[str, Tuple[int, ...]]]:
    """The checks counted at ``severity``, each once with the GPUs its findings name.

    ``[("burn.speed", (3, 5)), ("errors.xid", ())]``: in first-seen order, the GPUs of the
    findings at that severity by index (a node-wide finding names none). These are the
    checks :func:`count_checks` counts under ``severity``, so a list and its count agree.
    """
    kept = list(findings)
    worst = worst_by_check(kept)
    gpus: Dict[str, List[int]] = {}
    for finding in kept:
        if worst[finding.check] is not severity:
            continue
        named = gpus.setdefault(finding.check, [])
        index: Optional[int] = finding.gpu_index if finding.severity is severity else None
        if index is not None and index not in named:
            named.append(index)
    return [(check, tuple(sorted(indexes))) for check, indexes in gpus.items()]


def check_words(check: str, gpus: Tuple[int, ...]) -> str:
    """``burn.speed (GPU 3, 5)``; a node-wide check by its name alone."""
    if not gpus:
        return check
    word = "GPU" if len(gpus) == 1 else "GPUs"
    return f"{check} ({word} {', '.join(str(index) for index in gpus)})"


__all__ = ["CheckCounts", "check_words", "checks_at", "count_checks", "worst_by_check"]
