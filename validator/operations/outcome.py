"""What a run comes to, and the one rule that turns it into an exit code.

The rule, for ``certify``, ``drift`` and ``provision --certify`` alike:

- every node CERTIFIED (for drift: no drift): the run is CERTIFIED, exit 0;
- no node could be judged (every node UNKNOWN, or no node at all): UNKNOWN, exit 3;
- anything else, a mix of CERTIFIED and UNKNOWN nodes included: NOT_CERTIFIED, exit 1.
  A fleet is certified only when every node earned it, and one node that could
  not be judged is enough to keep it from being so, without hiding the nodes
  that were judged behind "nothing could be judged";
- Ctrl-C during the run: exit 130, whatever was judged (the report still says it).
"""

from __future__ import annotations

from collections.abc import Iterable

from validator.errors import ExitCode
from validator.model import Report, Verdict

_EXIT = {
    Verdict.CERTIFIED: ExitCode.OK,
    Verdict.NOT_CERTIFIED: ExitCode.NOT_CERTIFIED,
    Verdict.UNKNOWN: ExitCode.COULD_NOT_RUN,
}


def overall_verdict(verdicts: Iterable[Verdict]) -> Verdict:
    """The verdict of a whole run from its nodes' verdicts, by the rule above."""
    seen = set(verdicts)
    if not seen or seen == {Verdict.UNKNOWN}:
        return Verdict.UNKNOWN
    if seen == {Verdict.CERTIFIED}:
        return Verdict.CERTIFIED
    return Verdict.NOT_CERTIFIED


def exit_code(verdicts: Iterable[Verdict], *, interrupted: bool = False) -> ExitCode:
    """The process exit code of a run, by the rule above."""
    if interrupted:
        return ExitCode.INTERRUPTED
    return _EXIT[overall_verdict(verdicts)]


def report_interrupted(report: Report) -> bool:
    """Whether the run was cut short: a fleet stopped, or a node's burn stopped, by Ctrl-C."""
    if report.fleet is not None and report.fleet.interrupted:
        return True
    return any(node.facts.burn is not None and node.facts.burn.interrupted for node in report.nodes)


def report_exit_code(report: Report) -> ExitCode:
    """The exit code of a certify report."""
    return exit_code(
        (node.verdict for node in report.nodes), interrupted=report_interrupted(report)
    )


__all__ = ["exit_code", "overall_verdict", "report_exit_code", "report_interrupted"]
