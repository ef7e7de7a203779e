"""Certify one node: collect its facts, judge them, build the report."""

from __future__ import annotations

import datetime
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from validator import __version__
from validator.errors import ExitCode
from validator.judge import judge_node
from validator.judge.policy import Policy, load_policy
from validator.model import NodeFacts, NodeResult, Report, Verdict
from validator.node.burnin.config import BurnConfig
from validator.node.sources import collect_from
from validator.remote.fanout import run_fanout
from validator.remote.transport import AgentRequest, HostSpec, Progress, Transport

if TYPE_CHECKING:
    from validator.certificate import Certificate
    from validator.node.burnin.run import ProgressSink
    from validator.store import Store

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


def certify(request: CertifyRequest, *, progress: ProgressSink | None = None) -> Report:
    """Collect and judge one node as the request says.

    Args:
        request: the source of facts, the policy and the burn-in.
        progress: called about once a second while the burn-in runs.

    Raises:
        BadInputError: a bad policy file, capture directory or scenario.
        KeyboardInterrupt: Ctrl-C before the burn-in (one during it ends the burn, which is
            then judged as interrupted).
    """
    policy = load_policy(request.policy_path) if request.policy_path else Policy()
    facts = collect_from(
        simulate=request.simulate,
        capture=request.capture,
        window_hours=policy.xid_window_hours,
        burn=request.burn,
        progress=progress,
    )
    return make_report((facts,), policy)


@dataclass(frozen=True)
class FleetRequest:
    """Certify every host of an inventory."""

    inventories: tuple[str, ...]
    limit: str | None = None
    policy_path: str | None = None
    burn: BurnConfig | None = None
    transport: str = "ssh"  # ssh | ansible | local
    parallel: int = 64
    deadline_s: float | None = None  # None: the burn plus a margin
    accept_new_host_keys: bool = False
    connect_timeout_s: float = 10.0
    ssh_config: str | None = None
    known_hosts: str | None = None


# Connecting, uploading the agent and collecting facts take seconds; the burn
# itself is the long part.
DEADLINE_MARGIN_S = 300.0


def make_transport(request: FleetRequest) -> Transport:
    """The transport the request names, configured from its options."""
    if request.transport == "local":
        from validator.remote.local import LocalTransport

        return LocalTransport()
    if request.transport == "ansible":
        from validator.remote.ansible_transport import AnsibleTransport

        return AnsibleTransport(request.inventories)
    from validator.remote.ssh import SshTransport

    return SshTransport(
        ssh_config=Path(request.ssh_config) if request.ssh_config else None,
        known_hosts=Path(request.known_hosts) if request.known_hosts else None,
        accept_new_host_keys=request.accept_new_host_keys,
        connect_timeout_s=request.connect_timeout_s,
    )


def agent_request(burn: BurnConfig | None, policy: Policy) -> AgentRequest:
    """What every host's agent is asked to do."""
    if burn is None:
        return AgentRequest(xid_window_hours=policy.xid_window_hours)
    return AgentRequest(
        burn_s=burn.duration_s,
        burn_backend=burn.backend,
        burn_dtype=burn.dtype,
        burn_matrix_size=burn.matrix_size,
        burn_memory_fraction=burn.memory_fraction,
        xid_window_hours=policy.xid_window_hours,
    )


def certify_fleet(
    request: FleetRequest,
    *,
    progress: Progress | None = None,
    on_result: Callable[[NodeResult], None] | None = None,
    on_hosts: Callable[[list[HostSpec]], None] | None = None,
    stop: threading.Event | None = None,
) -> Report:
    """Certify every inventory host in parallel, then judge the fleet as a whole.

    Raises:
        BadInputError: a bad inventory, limit, policy file or per-host policy variable.
    """
    from validator.inventory import load_hosts, policy_for
    from validator.judge.fleet import judge_fleet

    base = load_policy(request.policy_path) if request.policy_path else Policy()
    hosts = load_hosts(request.inventories, request.limit)
    policies = {host.name: policy_for(host, base) for host in hosts}
    if on_hosts is not None:
        on_hosts(hosts)

    def judge(host: HostSpec, facts: NodeFacts) -> NodeResult:
        return judge_node(facts, policies[host.name])

    burn_s = request.burn.duration_s if request.burn else 0.0
    outcome = run_fanout(
        hosts,
        make_transport(request),
        agent_request(request.burn, base),
        judge,
        parallel=request.parallel,
        deadline_s=request.deadline_s or burn_s + DEADLINE_MARGIN_S,
        progress=progress,
        on_result=on_result,
        stop=stop,
    )
    results, fleet = judge_fleet(
        outcome.results, lambda name: policies.get(name, base), interrupted=outcome.interrupted
    )
    return Report(
        generated_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        tool_version=__version__,
        nodes=results,
        fleet=fleet,
    )


def certificates_for(report: Report, key: bytes | None) -> dict[str, Certificate]:
    """A certificate for every CERTIFIED node, signed when a key is given."""
    from validator.certificate import issue_certificate, sign

    issued = {}
    for node in report.nodes:
        if node.verdict is Verdict.CERTIFIED:
            certificate = issue_certificate(node)
            issued[node.hostname] = sign(certificate, key) if key else certificate
    return issued


def record_report(
    store: Store, run_id: int, report: Report, certificates: dict[str, Certificate]
) -> None:
    """Commit every node's final result (and certificate) and close the run."""
    for node in report.nodes:
        store.record_result(run_id, node, certificates.get(node.hostname))
    interrupted = report.fleet.interrupted if report.fleet is not None else False
    # A burn stopped by Ctrl-C leaves an interrupted run, as a stopped fleet does.
    interrupted = interrupted or any(
        node.facts.burn is not None and node.facts.burn.interrupted for node in report.nodes
    )
    store.finish_run(run_id, interrupted=interrupted)
