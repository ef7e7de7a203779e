"""Collect and judge a fleet: every host an inventory (or Slurm) names, into one report.

The certify command's whole job (history, certificates, reports, exit code) is
validator.service.certify_service; this module is what it runs to get a fleet's report,
and what one node's in-process collection is asked (:func:`facts_request`).

A deadline binds every path alike: one node (this host or a scenario) and each
host of a fleet, whatever its transport. The burn-in is cut to end within it
(validator.node.collect.burn_within), the interconnect (the policy's interconnect, or
``--interconnect/--no-interconnect``: :func:`interconnect_mode`) is measured in what
the burn leaves (validator.node.collect.interconnect_within), DCGM's diagnostic (the
policy's dcgm_level, or ``--dcgm-level``) gets what is left then
(validator.node.collect.dcgm_within), and a node whose run was cut is judged on what
it measured, then made UNKNOWN as timed out (validator.remote.deadline). Without a
deadline, a host's is the burn plus the interconnect's and the DCGM level's
allowances plus a margin (:func:`host_deadline`).
A fleet's hosts each go through the transport their ``gpuready_transport``
names, the request's for the rest (validator.remote.per_host).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from validator import __version__
from validator.error_tree import GpureadyError
from validator.judge import judge_node
from validator.judge.policy import Policy, load_policy
from validator.model import (
    CrossNodeStage,
    FleetSummary,
    HostSpec,
    NodeFacts,
    NodeResult,
    Report,
    TransportName,
)
from validator.node.bandwidth.bandwidth_config import ALLOWANCE_S
from validator.node.burnin.burn_config import BurnConfig

if TYPE_CHECKING:  # the transports are imported where a fleet uses them, not at start-up
    from validator.judge.catalog import Catalog
    from validator.node.collect import CollectRequest
    from validator.remote.cross_node_runner import CrossNodeRunner
    from validator.remote.per_host import PerHostTransport
    from validator.remote.transport import AgentRequest, Arrivals, Progress, Transport
    from validator.slurm.job_fanout import SlurmOptions
    from validator.slurm.plan_and_reach import SlurmPlan
    from validator.slurm.submission_spool import Submission


def effective_policy(
    policy_path: str | None, dcgm_level: int | None = None, interconnect: bool | None = None
) -> Policy:
    """The policy a run judges by: the file's (or the default), the CLI's overrides applied.

    ``dcgm_level`` is ``--dcgm-level``, ``interconnect`` is ``--interconnect`` (True)
    or ``--no-interconnect`` (False); None leaves the policy's own.

    Raises:
        BadInputError: a bad policy file.
    """
    policy = load_policy(policy_path) if policy_path else Policy()
    return with_overrides(policy, dcgm_level, interconnect)


def with_overrides(policy: Policy, dcgm_level: int | None, interconnect: bool | None) -> Policy:
    """``policy`` with the command line's DCGM level and interconnect applied (None: as is)."""
    return with_interconnect(with_dcgm_level(policy, dcgm_level), interconnect)


def with_interconnect(policy: Policy, interconnect: bool | None) -> Policy:
    """``policy`` with its interconnect overridden (None: as it is)."""
    if interconnect is None or interconnect is policy.interconnect:
        return policy
    return dataclasses.replace(policy, interconnect=interconnect)


def interconnect_mode(policy: Policy) -> str:
    """The agent's ``--interconnect`` mode for what the policy asks.

    ``interconnect: null`` (the default) measures where the GPUs have NVLink (auto),
    as the judge then requires it only on SKUs with NVLink; true always (on); false
    never (off).
    """
    if policy.interconnect is None:
        return "auto"
    return "on" if policy.interconnect else "off"


def with_container_image(policy: Policy, image: str | None) -> Policy:
    """``policy`` with its container image overridden (``--container-image``; None: as it is)."""
    if image is None or image == policy.container.image:
        return policy
    container = dataclasses.replace(policy.container, image=image)
    return dataclasses.replace(policy, container=container)


def with_dcgm_level(policy: Policy, dcgm_level: int | None) -> Policy:
    """``policy`` with its DCGM level overridden (None: as it is)."""
    if dcgm_level is None or dcgm_level == policy.dcgm_level:
        return policy
    return dataclasses.replace(policy, dcgm_level=dcgm_level)


def report_of(
    nodes: tuple[NodeResult, ...],
    fleet: FleetSummary | None = None,
    cross_node: CrossNodeStage | None = None,
) -> Report:
    """The run's report of these judged nodes (the fleet's comparison, the stage), stamped now."""
    return Report(
        generated_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        tool_version=__version__,
        nodes=nodes,
        fleet=fleet,
        cross_node=cross_node,
    )


def facts_request(
    policy: Policy,
    burn: BurnConfig | None,
    interconnect: str,
    *,
    gpus: tuple[str, ...] = (),
    allow_busy: bool = False,
) -> CollectRequest:
    """What an in-process collection measures, as the run's policy says (on ``gpus``)."""
    from validator.node.collect import CollectRequest

    return CollectRequest(
        window_hours=policy.xid_window_hours,
        burn=burn,
        dcgm_level=policy.dcgm_level,  # DCGM runs when the policy asks for it
        dcgm_timeout_s=policy.dcgm_timeout_s,
        interconnect=interconnect,
        gpus=gpus,
        allow_busy=allow_busy,
        container_image=policy.container.image,
    )


@dataclass(frozen=True)
class Reach:
    """Which hosts, and how to reach them: the one value every fleet command's request holds.

    The inventories (with ``--limit``) or Slurm's nodes, the transport and its options.
    Without inventories or Slurm: this one node.
    """

    inventories: tuple[str, ...] = ()
    limit: str | None = None
    transport: TransportName = TransportName.SSH
    parallel: int = 64
    accept_new_host_keys: bool = False
    connect_timeout_s: float = 10.0
    ssh_config: str | None = None
    known_hosts: str | None = None
    # Through Slurm instead of a transport: its options.
    slurm: SlurmOptions | None = None

    def __post_init__(self) -> None:
        # click and inventories give the name as text: one type from here on.
        object.__setattr__(self, "transport", TransportName(self.transport))

    @property
    def is_fleet(self) -> bool:
        """Whether hosts are reached (an inventory or Slurm), not this one node."""
        return bool(self.inventories) or self.slurm is not None


@dataclass(frozen=True)
class FleetRequest:
    """Certify every host a :class:`Reach` names, judged as the options here say."""

    reach: Reach
    policy_path: str | None = None
    burn: BurnConfig | None = None
    deadline_s: float | None = None  # None: the burn plus a margin
    dcgm_level: int | None = None  # overrides every host's policy dcgm_level; None: theirs
    interconnect: bool | None = None  # overrides every host's policy interconnect; None: theirs
    # A Slurm submission to gather (``gpuready slurm collect``: a token or job id)
    # instead of submitting one.
    slurm_collect: str | None = None
    gpus: tuple[str, ...] = ()  # --gpus, resolved on each host against its own GPUs
    allow_busy: bool = False  # --allow-busy, passed to every host's agent
    # --cross-node: the stage across nodes' kinds (rdma, nccl), run after the fleet's
    # judgement on the nodes it certified (validator.service.fabric_stage); () runs none.
    cross_node: tuple[str, ...] = ()
    fabric: str | None = None  # --fabric: the fabric catalog's id; None: from the SKUs

    def judging(self) -> dict[str, object]:
        """The options a later ``slurm collect`` judges with (plain data, saved in the spool)."""
        return {
            "policy_path": os.path.abspath(self.policy_path) if self.policy_path else None,
            "dcgm_level": self.dcgm_level,
            "interconnect": self.interconnect,
            "burn_s": self.burn.duration_s if self.burn is not None else None,
            "deadline_s": self.deadline_s,
        }


# Connecting, uploading the agent and collecting facts take seconds; the burn
# itself is the long part.
DEADLINE_MARGIN_S = 300.0


def make_transport(reach: Reach) -> PerHostTransport:
    """Each host's transport: the one its ``gpuready_transport`` names, else the reach's.

    Each is configured from the reach's options, and made when a host first needs it.
    """
    from validator.remote.per_host import PerHostTransport

    return PerHostTransport(reach.transport, lambda name: transport_named(name, reach))


def transport_named(name: TransportName, reach: Reach) -> Transport:
    """The transport of that name, configured from the reach's options."""
    if name is TransportName.LOCAL:
        from validator.remote.local import LocalTransport

        return LocalTransport()
    if name is TransportName.ANSIBLE:
        from validator.remote.ansible_transport import AnsibleTransport

        return AnsibleTransport(reach.inventories)
    from validator.remote.ssh import SshTransport

    return SshTransport(
        ssh_config=Path(reach.ssh_config) if reach.ssh_config else None,
        known_hosts=Path(reach.known_hosts) if reach.known_hosts else None,
        accept_new_host_keys=reach.accept_new_host_keys,
        connect_timeout_s=reach.connect_timeout_s,
    )


def host_deadline(
    deadline_s: float | None,
    burn: BurnConfig | None,
    policy: Policy | None = None,
    interconnect: bool = False,
) -> float:
    """Each host's deadline: the one given, else the burn plus :data:`DEADLINE_MARGIN_S`.

    Where ``policy`` asks for a DCGM level, its diagnostic's allowance is added
    (``dcgm_timeout_s``, else the level's: validator.node.dcgm_run.DEFAULT_TIMEOUT_S); where
    the interconnect may be measured (``interconnect``: a mode other than off, see
    :attr:`AgentRequest.measures_interconnect`), its allowance
    (validator.node.bandwidth.bandwidth_config.ALLOWANCE_S).
    """
    if deadline_s is not None:
        return deadline_s
    burn_s = burn.duration_s if burn else 0.0
    interconnect_s = ALLOWANCE_S if interconnect else 0.0
    return burn_s + interconnect_s + dcgm_allowance(policy) + DEADLINE_MARGIN_S


def dcgm_allowance(policy: Policy | None) -> float:
    """How long the policy's DCGM diagnostic may take; 0 when it asks for none."""
    if policy is None or policy.dcgm_level <= 0:
        return 0.0
    from validator.node.dcgm_run import default_timeout

    if policy.dcgm_timeout_s is not None:
        return policy.dcgm_timeout_s
    return default_timeout(policy.dcgm_level)


def agent_request(
    burn: BurnConfig | None,
    policy: Policy,
    per_host: Mapping[str, Policy] | None = None,
    interconnect: Callable[[Policy], str] = interconnect_mode,
) -> AgentRequest:
    """What every host's agent is asked to do.

    DCGM and the interconnect as the policy asks, or as a host's own policy
    (``per_host``, by inventory name) asks where it differs. ``interconnect`` gives a
    policy's interconnect mode: certify's is :func:`interconnect_mode`; drift's is
    off unless asked (validator.service.drift_service).
    """
    hosts = sorted((per_host or {}).items())
    wanted = (policy.dcgm_level, policy.dcgm_timeout_s)
    by_host = tuple(
        (name, own.dcgm_level, own.dcgm_timeout_s)
        for name, own in hosts
        if (own.dcgm_level, own.dcgm_timeout_s) != wanted
    )
    mode = interconnect(policy)
    modes = ((name, interconnect(own)) for name, own in hosts)
    from validator.remote.transport import AgentRequest

    return AgentRequest(
        burn=burn,
        xid_window_hours=policy.xid_window_hours,
        dcgm_level=policy.dcgm_level,
        dcgm_timeout_s=policy.dcgm_timeout_s,
        dcgm_by_host=by_host,
        interconnect=mode,
        interconnect_by_host=tuple((name, own) for name, own in modes if own != mode),
        container_image=policy.container.image,
    )


def longest_dcgm(policy: Policy, per_host: Mapping[str, Policy]) -> Policy:
    """Of the base policy and the hosts' own, the one whose DCGM diagnostic may take longest.

    The fan-out has one deadline for every host, so it must fit the slowest's.
    """
    return max((policy, *per_host.values()), key=dcgm_allowance)


@dataclass(frozen=True)
class FleetPlan:
    """A fleet run's hosts, their policies and what their agents are asked, before reaching them."""

    base: Policy
    hosts: list[HostSpec]
    policies: dict[str, Policy]
    asked: AgentRequest
    deadline_s: float
    slurm_plan: SlurmPlan | None = None


def plan_fleet(
    request: FleetRequest,
    base: Policy | None = None,
    interconnect: Callable[[Policy], str] = interconnect_mode,
) -> FleetPlan:
    """The hosts (the inventory's, or Slurm's nodes), each host's policy and the agent request.

    ``base`` is the run's policy, already read (:func:`effective_policy`); None reads the
    request's. Each host's own variables apply over it. ``interconnect`` gives a policy's
    interconnect mode (:func:`agent_request`): certify's and drift's plans differ there only.

    Raises:
        BadInputError: a bad inventory, limit, policy file, per-host policy variable or
            Slurm host-list.
        SlurmError: Slurm's commands are missing or failed (``request.reach.slurm``).
    """
    from validator.ansible_inventory import load_hosts, policy_for

    if base is None:
        base = effective_policy(request.policy_path, request.dcgm_level, request.interconnect)
    slurm_plan = None
    reach = request.reach
    if reach.slurm is not None:
        from validator.slurm.plan_and_reach import plan

        inventory_hosts = load_hosts(reach.inventories, reach.limit) if reach.inventories else []
        slurm_plan = plan(reach.slurm, inventory_hosts, request.slurm_collect)
        hosts = slurm_plan.hosts
    else:
        hosts = load_hosts(reach.inventories, reach.limit)
    policies = {
        host.name: with_overrides(policy_for(host, base), request.dcgm_level, request.interconnect)
        for host in hosts
    }
    asked = dataclasses.replace(
        agent_request(request.burn, base, policies, interconnect),
        gpus=request.gpus,
        allow_busy=request.allow_busy,
    )
    deadline_s = host_deadline(
        request.deadline_s, request.burn, longest_dcgm(base, policies), asked.measures_interconnect
    )
    return FleetPlan(base, hosts, policies, asked, deadline_s, slurm_plan)


def submit_fleet(request: FleetRequest) -> Submission:
    """Submit a Slurm run and return at once (``--no-wait``): nothing is judged yet.

    Raises:
        BadInputError: as :func:`plan_fleet`; or the request is not a Slurm submission.
        SlurmError: Slurm's commands are missing or failed.
    """
    from validator.error_tree import BadInputError
    from validator.slurm.job_fanout import submit_run
    from validator.slurm.plan_and_reach import judging_options

    if request.reach.slurm is None or request.slurm_collect is not None:
        raise BadInputError("--no-wait needs --slurm: give --slurm, or leave out --no-wait")
    fleet = plan_fleet(request)
    if fleet.slurm_plan is None or fleet.slurm_plan.targets is None:
        raise BadInputError("--no-wait submits: it cannot collect; leave out --no-wait")
    return submit_run(
        fleet.hosts,
        fleet.slurm_plan.targets,
        fleet.asked,
        fleet.deadline_s,
        request.reach.slurm,
        judging_options(fleet.hosts, request.judging()),
    )


def _build_agent_early() -> None:
    """The agent SSH ships, built before the fan-out so the first hosts do not wait on it in turn.

    One that cannot be built is reported by each host that needs it.
    """
    from validator.remote.bundle import build_agent

    with contextlib.suppress(GpureadyError):
        build_agent()


def certify_fleet(
    request: FleetRequest,
    *,
    progress: Progress | None = None,
    on_results: Arrivals | None = None,
    on_hosts: Callable[[list[HostSpec]], None] | None = None,
    stop: threading.Event | None = None,
    on_submitted: Callable[[Submission], None] | None = None,
    policy: Policy | None = None,
) -> Report:
    """Certify every inventory host in parallel, then judge the fleet as a whole.

    ``policy`` is the run's, already read; None reads the request's (:func:`plan_fleet`).

    Through Slurm (``request.reach.slurm``) the hosts are the nodes Slurm lists (or a saved
    submission's), reached by jobs (validator.slurm.plan_and_reach); ``on_submitted`` is
    told the submission once its jobs are in.

    Raises:
        BadInputError: a bad inventory, limit, policy file or per-host policy variable.
    """
    from validator.judge.catalog import load_catalog
    from validator.judge.fleet import judge_fleet
    from validator.remote.fanout import run_fanout  # a fleet's only: one node's start-up skips it
    from validator.report.shared import hold_without_samples

    fleet = plan_fleet(request, policy)
    _check_stage_reach(request, fleet.hosts)  # --cross-node: refused before anything runs
    if on_hosts is not None:
        on_hosts(fleet.hosts)
    # Read once here, before the workers start: their caches do not stop concurrent first
    # callers, and each parse of the catalog costs as much as judging a node.
    catalog = load_catalog()
    if fleet.slurm_plan is None and request.reach.transport is TransportName.SSH:
        _build_agent_early()

    def judge(host: HostSpec, facts: NodeFacts) -> NodeResult:
        # Held until the reports: a certified node without its samples (its facts'
        # packed text keeps them for the store, the host files and the full reports).
        return hold_without_samples(judge_node(facts, fleet.policies[host.name], catalog=catalog))

    if fleet.slurm_plan is not None and request.reach.slurm is not None:
        from validator.slurm.plan_and_reach import reach

        outcome = reach(
            fleet.slurm_plan,
            request.reach.slurm,
            fleet.asked,
            judge,
            deadline_s=fleet.deadline_s,
            judging=request.judging(),
            progress=progress,
            on_results=on_results,
            stop=stop,
            on_submitted=on_submitted,
        )
    else:
        with make_transport(request.reach) as transport:
            outcome = run_fanout(
                fleet.hosts,
                transport,
                fleet.asked,
                judge,
                parallel=request.reach.parallel,
                deadline_s=fleet.deadline_s,
                progress=progress,
                on_results=on_results,
                stop=stop,
            )
    results, report_fleet = judge_fleet(
        outcome.results,
        lambda name: fleet.policies.get(name, fleet.base),
        interrupted=outcome.interrupted,
        catalog=catalog,
    )
    return _with_stage(request, fleet.hosts, results, report_fleet, catalog, stop)


def _check_stage_reach(request: FleetRequest, hosts: list[HostSpec]) -> None:
    """``--cross-node`` over hosts its stage has no runner for: refused (BadInputError)."""
    if request.cross_node:
        from validator.service.fabric_stage import check_reach

        check_reach(request.reach.slurm, request.reach.transport, hosts)


def _with_stage(
    request: FleetRequest,
    hosts: list[HostSpec],
    results: tuple[NodeResult, ...],
    summary: FleetSummary | None,
    catalog: Catalog,
    stop: threading.Event | None,
) -> Report:
    """The report, with the stage across nodes run on the certified nodes where asked."""
    if not request.cross_node:
        return report_of(results, summary)
    from validator.service import signals
    from validator.service.fabric_stage import recounted, run_fabric_stage, stage_runner

    reach = request.reach

    def runner() -> contextlib.AbstractContextManager[CrossNodeRunner]:
        ssh = lambda: transport_named(TransportName.SSH, reach)  # noqa: E731
        return stage_runner(reach.slurm, reach.transport, hosts, ssh)

    results, stage = run_fabric_stage(
        results,
        hosts,
        runner,
        request.cross_node,
        request.fabric,
        catalog=catalog,
        deadline_s=request.deadline_s,
        stop=lambda: signals.received() is not None or (stop is not None and stop.is_set()),
    )
    return report_of(results, recounted(summary, results), stage)
