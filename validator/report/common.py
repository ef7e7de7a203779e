"""What every report format shares: ordering, counting and showing values.

The renderers differ only in markup; the decisions about which finding comes
first, what the fleet's verdict is and how a missing value reads live here, once.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from validator.model import (
    Finding,
    NvLinkState,
    Report,
    Severity,
    Unavailable,
    Verdict,
)

# The order operators read in: what blocks certification first.
SEVERITY_ORDER: dict[Severity, int] = {
    Severity.FAIL: 0,
    Severity.UNKNOWN: 1,
    Severity.WARN: 2,
    Severity.PASS: 3,
}

# Characters that must never reach a terminal or an XML document verbatim:
# C0 controls (bar tab and newline), DEL and C1 controls. ESC in a message
# taken from a device would otherwise let it repaint the operator's terminal.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@dataclasses.dataclass(frozen=True)
class SeverityCounts:
    """How many findings came out at each severity."""

    passed: int = 0
    warnings: int = 0
    failed: int = 0
    unknown: int = 0

    @property
    def total(self) -> int:
        """All findings counted."""
        return self.passed + self.warnings + self.failed + self.unknown

    def line(self) -> str:
        """The count line, e.g. ``42 passed, 2 warnings, 1 failed, 0 unknown``."""
        warn_word = "warning" if self.warnings == 1 else "warnings"
        return (
            f"{self.passed} passed, {self.warnings} {warn_word}, "
            f"{self.failed} failed, {self.unknown} unknown"
        )


def count_severities(findings: Iterable[Finding]) -> SeverityCounts:
    """Count findings by severity.

    Args:
        findings: the findings of one node (or of several).

    Returns:
        The counts, one field per severity.
    """
    tally = dict.fromkeys(Severity, 0)
    for finding in findings:
        tally[finding.severity] += 1
    return SeverityCounts(
        passed=tally[Severity.PASS],
        warnings=tally[Severity.WARN],
        failed=tally[Severity.FAIL],
        unknown=tally[Severity.UNKNOWN],
    )


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Findings with FAIL first, then UNKNOWN, WARN and PASS.

    The sort is stable, so within one severity the judge's order is kept.

    Args:
        findings: the findings of one node.

    Returns:
        A new list in reading order.
    """
    return sorted(findings, key=lambda finding: SEVERITY_ORDER[finding.severity])


def overall_verdict(report: Report) -> Verdict:
    """The verdict for the whole report: the worst node's.

    NOT_CERTIFIED outranks UNKNOWN, which outranks CERTIFIED. A report with no
    nodes certifies nothing and is UNKNOWN.

    Args:
        report: the acceptance report.

    Returns:
        The fleet verdict.
    """
    verdicts = {node.verdict for node in report.nodes}
    if Verdict.NOT_CERTIFIED in verdicts:
        return Verdict.NOT_CERTIFIED
    if Verdict.UNKNOWN in verdicts or not verdicts:
        return Verdict.UNKNOWN
    return Verdict.CERTIFIED


def overall_summary(report: Report) -> str:
    """One line saying how the nodes came out.

    Args:
        report: the acceptance report.

    Returns:
        For one node its own summary (or its verdict); for several, the tally
        and the hosts that are not certified.
    """
    nodes = report.nodes
    if not nodes:
        return "No nodes were judged."
    if len(nodes) == 1:
        node = nodes[0]
        return node.summary or f"{node.hostname}: {verdict_words(node.verdict)}."
    certified = [n.hostname for n in nodes if n.verdict is Verdict.CERTIFIED]
    failed = [n.hostname for n in nodes if n.verdict is Verdict.NOT_CERTIFIED]
    unknown = [n.hostname for n in nodes if n.verdict is Verdict.UNKNOWN]
    parts = [f"{len(certified)} of {len(nodes)} nodes certified"]
    if failed:
        parts.append(f"not certified: {', '.join(failed)}")
    if unknown:
        parts.append(f"could not be judged: {', '.join(unknown)}")
    return "; ".join(parts) + "."


def verdict_words(verdict: Verdict) -> str:
    """The verdict as words for prose: ``not certified`` rather than ``NOT_CERTIFIED``."""
    return verdict.value.replace("_", " ").lower()


def check_family(check: str) -> str:
    """The family part of a check name: ``memory`` for ``memory.capacity``."""
    family, _, _ = check.partition(".")
    return family or check


def gpu_label(finding: Finding) -> str:
    """``gpu3`` for a finding about GPU 3, empty for a node-wide finding."""
    return "" if finding.gpu_index is None else f"gpu{finding.gpu_index}"


def unavailable_text(value: Unavailable) -> str:
    """How a missing fact reads: ``n/a (not supported)``, with the detail when there is one."""
    reason = value.reason.value.replace("_", " ")
    return f"n/a ({reason}: {value.detail})" if value.detail else f"n/a ({reason})"


def _number(value: float) -> str:
    if value.is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


def show(value: object, unit: str = "") -> str:
    """Render one fact for people.

    Args:
        value: a measured value, an :class:`~validator.model.Unavailable`, a tuple
            of values, or ``None`` (a field that does not apply).
        unit: appended after a number, e.g. ``"W"`` or ``"MiB"``.

    Returns:
        The text: ``n/a (...)`` for a missing fact, ``yes``/``no`` for booleans,
        numbers without trailing zeros, tuples joined by commas, ``-`` for nothing.
    """
    if isinstance(value, Unavailable):
        return unavailable_text(value)
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, NvLinkState):
        return f"{value.link}:{'up' if value.active else 'down'}"
    if isinstance(value, (tuple, list)):
        return ", ".join(show(item) for item in value) if value else "none"
    if isinstance(value, float):
        text = _number(value)
    elif isinstance(value, int):
        text = str(value)
    else:
        text = clean(str(value))
    return f"{text} {unit}" if unit else text


def show_pair(first: object, second: object, unit: str = "", sep: str = " / ") -> str:
    """Two related facts in one cell, e.g. enforced and default power limit.

    When both are missing for the same reason, the reason is said once.
    """
    if isinstance(first, Unavailable) and first == second:
        return unavailable_text(first)
    return f"{show(first, unit)}{sep}{show(second, unit)}"


def clean(text: str) -> str:
    """Replace control characters (ESC, NUL, ...) with visible escapes.

    Tab and newline are kept; callers that need one line replace newlines
    themselves. XML 1.0 cannot carry the others at all, and a terminal would
    obey them.
    """
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def one_line(text: str) -> str:
    """``clean`` and fold line breaks and tabs into single spaces."""
    return " ".join(clean(text).split())


def plural(count: int, word: str) -> str:
    """``1 GPU`` / ``2 GPUs``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
