"""Certify and drift through Slurm: which nodes, and how they are reached.

The fleet paths (validator.service.collect_and_judge.certify_fleet,
validator.service.drift_service) ask :func:`plan` for their hosts and :func:`reach` for
their results when the request names Slurm; everything else (judging, the fleet median,
reports, history, certificates) is the SSH fleet's. A plan either submits (the nodes
Slurm lists, each host's variables from the inventory where one is given) or collects a
submission already in the spool (``gpuready slurm collect``), whose hosts and options
were saved with it (validator.service.saved_submission.collect_request asks for it
again). What Slurm is told about the judged nodes afterwards is
validator.slurm.judged_nodes. Nothing here imports the commands' modules back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from validator.error_tree import BadInputError
from validator.model import HostSpec, NodeResult, to_dict
from validator.remote.fanout import FanoutResult, Judge
from validator.remote.transport import AgentRequest, Arrivals, Progress
from validator.safe_text import one_line
from validator.slurm.job_fanout import (
    SlurmOptions,
    Targets,
    follow,
    hosts_for,
    restore_quarantined,
    submit_run,
    target_nodes,
)
from validator.slurm.judged_nodes import certify_reason
from validator.slurm.submission_spool import Submission, find


@dataclass(frozen=True)
class SlurmPlan:
    """The hosts of a Slurm run, and either the nodes to submit to or the submission to read."""

    hosts: list[HostSpec]
    targets: Targets | None = None
    submission: Submission | None = None


def plan(
    options: SlurmOptions,
    inventory_hosts: Sequence[HostSpec] = (),
    collect: str | None = None,
) -> SlurmPlan:
    """The hosts of a Slurm run.

    Args:
        options: the Slurm options (the spool to collect from, too).
        inventory_hosts: hosts of the inventories given with ``--slurm``; a node they
            name gets its variables (scenario, policy overrides, python).
        collect: a submission's token or job id: its saved hosts, nothing submitted.

    Raises:
        BadInputError: no such submission, a bad host-list, or no node to certify.
        SlurmError: Slurm's commands are missing or failed.
    """
    if collect is not None:
        submission = find(options.spool, collect)
        return SlurmPlan(saved_hosts(submission), submission=submission)
    targets = target_nodes(options)
    return SlurmPlan(hosts_for(targets, inventory_hosts), targets=targets)


def saved_hosts(submission: Submission) -> list[HostSpec]:
    """The hosts saved with a submission (every node, in order).

    Raises:
        BadInputError: request.json's hosts do not fit HostSpec.
    """
    saved = submission.options.get("hosts", [])
    try:
        hosts = [_host(data) for data in saved]
    except (TypeError, ValueError) as exc:
        raise BadInputError(
            f"{submission.directory}/request.json: its hosts do not fit ({one_line(exc)}); "
            "submit again"
        ) from None
    by_name = {host.name: host for host in hosts}
    return [by_name.get(node) or HostSpec(name=node, address=node) for node in submission.nodes]


_HOST_TEXT = ("name", "address", "user", "key_file", "python", "simulate")


def _host(data: object) -> HostSpec:
    """One saved host (to_dict's form of HostSpec), each field's type checked."""
    if not isinstance(data, dict):
        raise TypeError("a host is not a map")
    known = {*_HOST_TEXT, "port", "vars"}
    extra = set(data) - known
    if extra:
        raise ValueError(f"unknown host fields {sorted(extra)}")
    for key in _HOST_TEXT:
        if key in data and data[key] is not None and not isinstance(data[key], str):
            raise TypeError(f"host {key} is not text")
    port, variables = data.get("port"), data.get("vars", {})
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
        raise TypeError("host port is not a number")
    if not isinstance(variables, dict):
        raise TypeError("host vars is not a map")
    if not isinstance(data.get("name"), str):
        raise TypeError("a host has no name")
    fields = {key: data[key] for key in _HOST_TEXT if data.get(key) is not None}
    return HostSpec(**fields, port=port, vars=variables)


def judging_options(hosts: Sequence[HostSpec], asked: Mapping[str, Any]) -> dict[str, Any]:
    """What ``slurm collect`` needs to judge later: the hosts and the request's options."""
    return {**asked, "hosts": [to_dict(host) for host in hosts]}


def reach(
    slurm_plan: SlurmPlan,
    options: SlurmOptions,
    request: AgentRequest,
    judge: Judge,
    *,
    deadline_s: float,
    judging: Mapping[str, Any],
    progress: Progress | None = None,
    on_results: Arrivals | None = None,
    stop: threading.Event | None = None,
    on_submitted: Callable[[Submission], None] | None = None,
) -> FanoutResult:
    """Submit (unless collecting), then follow the jobs and judge each node's result.

    Quarantined nodes (gpuready's own drains, re-tested) that end without a verdict are
    drained again with the reason they had, and the quarantine reservation is deleted.
    """
    submission = slurm_plan.submission
    if submission is None:
        if slurm_plan.targets is None:  # a plan either submits or collects
            raise BadInputError("a Slurm plan with neither nodes nor a submission")
        submission = submit_run(
            slurm_plan.hosts,
            slurm_plan.targets,
            request,
            deadline_s,
            options,
            judging_options(slurm_plan.hosts, judging),
        )
    if on_submitted is not None:
        on_submitted(submission)
    from validator.slurm.job_fanout import release_quarantine

    results: Sequence[NodeResult] = ()
    try:
        outcome = follow(
            submission,
            slurm_plan.hosts,
            request,
            judge,
            deadline_s=deadline_s,
            wait=options.wait,
            poll_s=options.poll_s,
            progress=progress,
            on_results=on_results,
            stop=stop,
        )
        results = outcome.results
    finally:
        # Whatever ended the run, no quarantined node leaves the reservation undecided.
        if submission.quarantined and (options.wait or not results):
            restore_quarantined(submission, results, reason_for=certify_reason)
            release_quarantine(submission)
    return outcome


def spool_default() -> str:
    """Where submissions go when no spool is given (see submission_spool.default_spool)."""
    from validator.slurm.submission_spool import default_spool

    return str(default_spool())


__all__ = [
    "SlurmPlan",
    "judging_options",
    "plan",
    "reach",
    "saved_hosts",
    "spool_default",
]
