"""What a run comes to, and the one rule that turns it into an exit code.

The rule lives below every room that needs it (validator.model.overall_verdict and
validator.judge.verdict.exit_code); in words:

The rule, for ``certify``, ``drift`` and ``provision --certify`` alike:

- every node CERTIFIED (for drift: no drift): the run is CERTIFIED, exit 0;
- no node could be judged (every node UNKNOWN, or no node at all): UNKNOWN, exit 3;
- anything else, a mix of CERTIFIED and UNKNOWN nodes included: NOT_CERTIFIED, exit 1.
  A fleet is certified only when every node earned it, and one node that could
  not be judged is enough to keep it from being so, without hiding the nodes
  that were judged behind "nothing could be judged";
- Ctrl-C during the run: exit 130, whatever was judged (the report still says it);
  SIGTERM 143 and SIGHUP 129 (validator.service.signals);
- history that cannot be written (a read-only or full disk) changes no exit code:
  the verdict stands, and the store's failure is a warning (:func:`close_run`).
"""

from __future__ import annotations

from validator.error_tree import ExitCode
from validator.judge.verdict import exit_code
from validator.model import Report, overall_verdict
from validator.store import NotStoredError, Store


def report_interrupted(report: Report) -> bool:
    """Whether the run was cut short: a fleet stopped, or a node's burn stopped, by Ctrl-C."""
    if report.fleet is not None and report.fleet.interrupted:
        return True
    return any(node.facts.burn is not None and node.facts.burn.interrupted for node in report.nodes)


def close_run(store: Store, run_id: int, *, interrupted: bool) -> bool:
    """Close the run in history; False when it could be stored nowhere (then a warning).

    The warning goes among the store's notices, told after the verdict: a compute
    node whose shared history folder is mounted read-only still reports its drift.
    """
    try:
        store.finish_run(run_id, interrupted=interrupted)
    except NotStoredError as exc:
        store.notices.append(f"warning: {exc}")
        return False
    return True


def report_exit_code(report: Report) -> ExitCode:
    """The exit code of a certify report."""
    return exit_code(
        (node.verdict for node in report.nodes), interrupted=report_interrupted(report)
    )


__all__ = ["close_run", "exit_code", "overall_verdict", "report_exit_code", "report_interrupted"]
