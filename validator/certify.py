"""Certify one node: collect its facts, judge them, build the report."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

from validator import __version__
from validator.errors import ExitCode
from validator.judge import judge_node
from validator.judge.policy import Policy, load_policy
from validator.model import NodeFacts, Report, Verdict
from validator.node.burnin.config import BurnConfig
from validator.node.sources import collect_from

VERDICT_EXIT = {
    Verdict.CERTIFIED: ExitCode.OK,
    Verdict.NOT_CERTIFIED: ExitCode.NOT_CERTIFIED,
    Verdict.UNKNOWN: ExitCode.COULD_NOT_RUN,
}


@dataclass(frozen=True)
class CertifyRequest:
    """What to certify and against which policy."""

    simulate: str | None = None
    capture: str | os.PathLike[str] | None = None
    policy_path: str | None = None
    burn: BurnConfig | None = None  # None: no burn-in


def report_exit_code(report: Report) -> ExitCode:
    """0 only when every node is certified; 3 when nothing could be judged anywhere."""
    verdicts = {node.verdict for node in report.nodes}
    if not verdicts or verdicts == {Verdict.UNKNOWN}:
        return ExitCode.COULD_NOT_RUN
    if verdicts == {Verdict.CERTIFIED}:
        return ExitCode.OK
    return ExitCode.NOT_CERTIFIED


def make_report(results: tuple[NodeFacts, ...], policy: Policy) -> Report:
    """Judge each node's facts into one report."""
    return Report(
        generated_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        tool_version=__version__,
        nodes=tuple(judge_node(facts, policy) for facts in results),
    )


def certify(request: CertifyRequest) -> Report:
    """Collect and judge one node as the request says.

    Raises:
        BadInputError: a bad policy file, capture directory or scenario.
    """
    policy = load_policy(request.policy_path) if request.policy_path else Policy()
    facts = collect_from(
        simulate=request.simulate,
        capture=request.capture,
        window_hours=policy.xid_window_hours,
        burn=request.burn,
    )
    return make_report((facts,), policy)
