"""Collect and judge: one node, or every host of an inventory, into one report.

The certify command's whole job (history, certificates, reports, exit code) is
validator.operations.certify; this module is what it runs to get the report.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from validator import __version__
from validator.judge import judge_node
from validator.judge.policy import Policy, load_policy
from validator.model import HostSpec, NodeFacts, NodeResult, Report, TransportName
from validator.node.burnin.config import BurnConfig
from validator.node.sources import collect_from
from validator.remote.fanout import run_fanout
from validator.remote.transport import AgentRequest, Progress, Transport

if TYPE_CHECKING:
    from validator.node.burnin.run import ProgressSink


@dataclass(frozen=True)
class NodeRequest:
    """One node to certify (this host, a capture or a scenario), and against which policy."""

    simulate: str | None = None
    capture: str | os.PathLike[str] | None = None
    policy_path: str | None = None
    burn: BurnConfig | None = None  # None: no burn-in


def make_report(results: tuple[NodeFacts, ...], policy: Policy) -> Report:
    """Judge each node's facts into one report."""
    return Report(
        generated_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        tool_version=__version__,
        nodes=tuple(judge_node(facts, policy) for facts in results),
    )


def certify_node(request: NodeRequest, *, progress: ProgressSink | None = None) -> Report:
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
    transport: TransportName = TransportName.SSH
    parallel: int = 64
    deadline_s: float | None = None  # None: the burn plus a margin
    accept_new_host_keys: bool = False
    connect_timeout_s: float = 10.0
    ssh_config: str | None = None
    known_hosts: str | None = None

    def __post_init__(self) -> None:
        # click and inventories give the name as text: one type from here on.
        object.__setattr__(self, "transport", TransportName(self.transport))


def fleet_of(request: object) -> FleetRequest:
    """The fan-out a command's request asks for: its fields named as FleetRequest's."""
    return FleetRequest(
        **{field.name: getattr(request, field.name) for field in dataclasses.fields(FleetRequest)}
    )


# Connecting, uploading the agent and collecting facts take seconds; the burn
# itself is the long part.
DEADLINE_MARGIN_S = 300.0


def make_transport(request: FleetRequest) -> Transport:
    """The transport the request names, configured from its options."""
    if request.transport is TransportName.LOCAL:
        from validator.remote.local import LocalTransport

        return LocalTransport()
    if request.transport is TransportName.ANSIBLE:
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
    return AgentRequest(burn=burn, xid_window_hours=policy.xid_window_hours)


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
