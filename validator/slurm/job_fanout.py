"""Certify through the cluster's own Slurm: submit the agent as jobs, gather one result per node.

The SSH fan-out (validator.remote.fanout) reaches into each node; here Slurm does the
reaching. The controller picks the nodes (``--nodelist``/``--exclude`` expanded by
``scontrol show hostnames``, or a partition's), asks ``sinfo`` what state each is in,
writes a submission to the shared spool (validator.slurm.submission_spool) and submits
it: one job over every node (``--exclusive --no-kill``, one step per node), or with
``campaign`` one job per node, each certified when it becomes free. Then it follows:
each node's result is judged the moment its exit status appears in the spool, and a
node whose job ended without one is UNKNOWN in Slurm's own words (the job's state,
the node's state and reason), never a pass.

Nodes Slurm will not run (down, not responding, drained by someone else) are not
submitted: they are UNKNOWN at once with their state and reason. Nodes gpuready
drained itself are re-tested only when the run may manage drains
(``manage_drains``): they are put in a quarantine reservation, resumed inside it (no
other job can land there), and certified by a job of their own in that reservation;
the caller drains again the ones that do not pass.

Ctrl-C (or ``stop``) cancels every job of the submission with ``scancel`` and waits
until Slurm no longer lists them running, and every node without a result is UNKNOWN.
"""

from __future__ import annotations

import contextlib
import getpass
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from validator.error_tree import BadInputError, GpureadyError
from validator.model import HostSpec, NodeResult, SchemaError, Verdict
from validator.packed import agent_facts
from validator.remote.bundle import build_agent
from validator.remote.fanout import FanoutResult, Judge, judged_result, unreachable
from validator.remote.transport import (
    AgentOutcome,
    AgentRequest,
    Arrivals,
    Phase,
    Progress,
    agent_deadline,
)
from validator.safe_text import one_line
from validator.slurm import PREFIX, Runner, SlurmError
from validator.slurm import resume_if_ours as slurm_resume
from validator.slurm.batch_script import STEP_SCRIPT, AgentDelivery, batch_script
from validator.slurm.commands import run_slurm
from validator.slurm.hostlist import expand_hostlist
from validator.slurm.jobs import JobState, cancel, job_states, submit
from validator.slurm.nodes import SlurmNode, list_nodes
from validator.slurm.reservation import create_reservation, delete_reservation
from validator.slurm.submission_spool import (
    AGENT_FILE,
    JOB_FILE,
    STEP_FILE,
    NodeOutput,
    Submission,
    finished_nodes,
    new_submission,
    read_output,
    save,
    write_file,
)

TRANSPORT = "slurm"
# How often the spool and squeue are read while jobs run.
DEFAULT_POLL_S = 5.0
# A job's --time when none is given: the host deadline plus this, rounded up to minutes.
TIME_MARGIN_S = 300.0
# How long a finished job's nodes are still looked for in the spool: NFS clients cache
# directory listings for a few seconds (acdirmax), so a result can show up late. At
# most three looks' worth: a quick poll (a test cluster, local storage) waits less.
SPOOL_GRACE_S = 15.0
GRACE_LOOKS = 3
# How long Ctrl-C (or SIGTERM) waits for Slurm to stop listing the cancelled jobs: well
# inside Slurm's default KillWait (30 s), which a controller run as a job is given
# between its own SIGTERM and SIGKILL, so the reports and history are still written.
CANCEL_WAIT_S = 10.0
_STDERR_KEEP = 8192
# How often a campaign's request.json is rewritten while its jobs are submitted.
SAVE_EVERY_S = 1.0
# At most this many job ids asked of squeue per look (one squeue call); with more live
# jobs (a campaign), each look asks the next this many in turn.
STATES_PER_LOOK = 500


@dataclass(frozen=True)
class SlurmOptions:
    """How ``certify --slurm`` (and ``drift --slurm``) reach the nodes through Slurm.

    Attributes:
        spool: a folder shared by this machine and every node, at the same path.
        partition: the partition whose nodes are certified (and the jobs' partition).
        nodelist: Slurm host-list of the nodes to certify (all of the partition's: None).
        exclude: Slurm host-list of nodes to leave out.
        reservation: run the jobs in this reservation (a maintenance window).
        account, qos: the jobs' account and QOS.
        time_limit: the jobs' ``--time`` in Slurm's format; None: the deadline plus a margin.
        agent_path: the agent already on a shared filesystem at this path; None: sbcast it.
        campaign: one job per node (each certified when free) instead of one job.
        wait: follow the jobs to the end; False: submit and return.
        manage_drains: re-test nodes gpuready drained (quarantine reservation); the
            caller drains failing nodes and resumes passing ones it drained.
        poll_s: how often the spool and the queue are read.
        extra_sbatch: further sbatch options, as given (e.g. ``--gres=gpu:8``).
    """

    spool: str
    partition: str | None = None
    nodelist: str | None = None
    exclude: str | None = None
    reservation: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None
    agent_path: str | None = None
    campaign: bool = False
    wait: bool = True
    manage_drains: bool = False
    poll_s: float = DEFAULT_POLL_S
    extra_sbatch: tuple[str, ...] = ()


@dataclass(frozen=True)
class Targets:
    """The nodes a run is about, as Slurm described them when it began."""

    nodes: tuple[SlurmNode, ...]

    @property
    def names(self) -> list[str]:
        """Node names, in report order."""
        return [node.name for node in self.nodes]


def target_nodes(options: SlurmOptions, runner: Runner = run_slurm) -> Targets:
    """The nodes to certify: the host-list's (or the partition's), less the excluded.

    Raises:
        BadInputError: a host-list Slurm cannot expand, names Slurm does not know, or
            no node left to certify.
        SlurmError: Slurm's commands are missing or failed.
    """
    if not options.partition and not options.nodelist:
        raise BadInputError(
            "--slurm needs --partition or --nodelist: every node of the cluster (login and "
            "CPU nodes too) is never what a GPU certification means"
        )
    asked = expand_hostlist(options.nodelist, runner) if options.nodelist else None
    known = list_nodes(runner, partition=options.partition, names=asked)
    if asked is not None:
        found = {node.name for node in known}
        missing = [name for name in asked if name not in found]
        if missing:
            where = f" in partition {options.partition}" if options.partition else ""
            raise BadInputError(
                f"Slurm knows no node {', '.join(missing[:5])}{where}"
                f"{' (and more)' if len(missing) > 5 else ''}: check --nodelist"
                " (sinfo -N lists the nodes)"
            )
        by_name = {node.name: node for node in known}
        known = [by_name[name] for name in asked]
    excluded = set(expand_hostlist(options.exclude, runner)) if options.exclude else set()
    nodes = tuple(node for node in known if node.name not in excluded)
    if not nodes:
        raise BadInputError(
            "no Slurm node is left to certify: check --partition, --nodelist and --exclude"
        )
    return Targets(nodes)


def hosts_for(targets: Targets, inventory_hosts: Sequence[HostSpec] = ()) -> list[HostSpec]:
    """A host per node: its inventory entry where one names it (its variables), else bare."""
    by_name = {host.name: host for host in inventory_hosts}
    return [by_name.get(name) or HostSpec(name=name, address=name) for name in targets.names]


def job_time(deadline_s: float, time_limit: str | None) -> str:
    """The jobs' ``--time``: the one given, else the deadline plus a margin, in minutes."""
    if time_limit:
        return time_limit
    return str(max(1, math.ceil((deadline_s + TIME_MARGIN_S) / 60.0)))


# ---------------------------------------------------------------- submitting


def submit_run(
    hosts: Sequence[HostSpec],
    targets: Targets,
    request: AgentRequest,
    deadline_s: float,
    options: SlurmOptions,
    judging: Mapping[str, Any],
    runner: Runner = run_slurm,
) -> Submission:
    """Write the submission to the spool and submit its job(s).

    Args:
        hosts: one per target node, in order (:func:`hosts_for`).
        targets: the nodes and their Slurm state.
        request: what each node's agent does.
        deadline_s: how long one node's agent may take from its start.
        options: the Slurm options.
        judging: what ``slurm collect`` needs to judge the results later (plain data).
        runner: runs Slurm's commands.

    Raises:
        BadInputError: the spool cannot be written, or sbatch refused the options.
        SlurmError: Slurm's commands failed.
    """
    directory = new_submission(options.spool)
    bundle = build_agent()
    write_file(directory, AGENT_FILE, bundle.data)
    write_file(directory, STEP_FILE, STEP_SCRIPT, mode=0o755)
    delivery = (
        AgentDelivery(options.agent_path, sbcast=False)
        if options.agent_path
        # Node-local, per user (another admin's copy in sticky /tmp cannot be replaced),
        # named by the agent's hash: the same code is one file on every node.
        else AgentDelivery(
            f"/tmp/gpuready-{os.getuid()}-{bundle.filename}",  # noqa: S108
            sbcast=True,
        )
    )
    if options.agent_path:
        write_file(directory, "agent-path.txt", options.agent_path + "\n")
    # The agent cuts its own work to end in time; its clock starts with its step.
    agent_s = agent_deadline(deadline_s)
    commands = {
        host.name: [host.python, delivery.node_path, *request.arguments(host, agent_s)]
        for host in hosts
    }
    first = commands[hosts[0].name] if hosts else None
    script = batch_script(str(directory), delivery, commands, default=first)
    write_file(directory, JOB_FILE, script, mode=0o755)

    runnable: list[str] = []
    quarantine: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for target in targets.nodes:
        if target.usable:
            runnable.append(target.name)
        elif options.manage_drains and options.wait and _ours_to_retest(target):
            quarantine[target.name] = target.reason or ""
        else:
            skipped[target.name] = _not_run_words(target)
    submission = Submission(
        directory=directory,
        nodes=tuple(targets.names),
        skipped=skipped,
        quarantined=quarantine,
        options=dict(judging),
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    save(submission)  # before sbatch: a job never runs without its request on disk
    common = _sbatch_options(directory, deadline_s, options)
    jobs: dict[str, str] = {}
    reservation: str | None = None
    try:
        if quarantine:
            reservation = f"gpuready-quarantine-{directory.name[-8:]}"
            duration = max(deadline_s + TIME_MARGIN_S, 600.0)
            create_reservation(reservation, list(quarantine), duration, [getpass.getuser()], runner)
            # Saved before any node is resumed: every exit path from here releases it.
            submission = replace(submission, reservation=reservation)
            save(submission)
            for node in quarantine:
                slurm_resume(node, runner)
        groups = _groups(runnable, list(quarantine), options)
        submission = _submit_jobs(submission, groups, common, reservation, options, jobs, runner)
    except BaseException:
        # Nothing half-submitted is left running: the jobs so far are cancelled,
        # the ones not yet written down too.
        _abandon(replace(submission, jobs=dict(jobs)), runner)
        raise
    return submission


def _submit_jobs(
    submission: Submission,
    groups: list[tuple[list[str], bool]],
    common: list[str],
    reservation: str | None,
    options: SlurmOptions,
    jobs: dict[str, str],
    runner: Runner,
) -> Submission:
    """sbatch each group; ``jobs`` (node to job id) filled as they go in, for the caller.

    Rewriting request.json after every sbatch of a campaign is quadratic (10,000 jobs:
    10,000 rewrites of a file that grows to 10,000 entries), so it is rewritten at most
    every :data:`SAVE_EVERY_S`, linking only the new job ids, and once all are in.
    """
    directory = submission.directory
    unsaved: list[str] = []  # job ids submitted since request.json was last written
    saved_at = time.monotonic()
    for nodes, in_reservation in groups:
        job_options = [*common]
        chosen = reservation if in_reservation else options.reservation
        if chosen:
            job_options.append(f"--reservation={chosen}")
        # sbatch reads a --nodelist holding "/" as a file: 10,000 names in one
        # argument would pass Linux's 128 KiB limit on a single argument.
        listed = write_file(directory, f"nodes-{len(jobs)}.txt", "\n".join(nodes) + "\n")
        job_options += [
            f"--nodes={len(nodes)}",
            f"--nodelist={listed}",
            f"--job-name=gpuready-certify-{directory.name[-8:]}",
        ]
        job_id = submit(str(directory / JOB_FILE), job_options, runner, args=nodes)
        for node in nodes:
            jobs[node] = job_id
        unsaved.append(job_id)
        if time.monotonic() - saved_at >= SAVE_EVERY_S:
            submission = replace(submission, jobs=dict(jobs))
            save(submission, unsaved)
            unsaved, saved_at = [], time.monotonic()
    if unsaved:
        submission = replace(submission, jobs=dict(jobs))
        save(submission, unsaved)
    return submission


def _groups(
    runnable: list[str], quarantined: list[str], options: SlurmOptions
) -> list[tuple[list[str], bool]]:
    """The jobs to submit: (nodes, in the quarantine reservation)."""
    groups: list[tuple[list[str], bool]] = []
    for nodes, in_reservation in ((runnable, False), (quarantined, True)):
        if not nodes:
            continue
        if options.campaign:
            groups += [([node], in_reservation) for node in nodes]
        else:
            groups.append((nodes, in_reservation))
    return groups


def _sbatch_options(directory: Path, deadline_s: float, options: SlurmOptions) -> list[str]:
    argv = [
        "--exclusive",
        "--no-kill",  # a node that fails leaves the job (and its other nodes) running
        "--ntasks-per-node=1",
        f"--time={job_time(deadline_s, options.time_limit)}",
        f"--output={directory}/slurm-%j.out",
        f"--chdir={directory}",
        "--no-requeue",  # a preempted or failed job is reported, not run again unseen
    ]
    for flag, value in (
        ("--partition", options.partition),
        ("--account", options.account),
        ("--qos", options.qos),
    ):
        if value:
            argv.append(f"{flag}={value}")
    return [*argv, *options.extra_sbatch]


def _ours_to_retest(node: SlurmNode) -> bool:
    """A node gpuready drained that would run a job once resumed (not down, responding).

    Re-tested only while the run waits for it: the quarantine is undone when the run
    ends, which a ``--no-wait`` submission never sees.
    """
    if not node.drained or not (node.reason or "").startswith(PREFIX):
        return False
    undrained = replace(
        node,
        state="IDLE" if node.state in ("DRAINED", "DRAINING") else node.state,
        flags=tuple(flag for flag in node.flags if flag != "DRAIN"),
    )
    return undrained.usable


def _not_run_words(node: SlurmNode) -> str:
    """Why a node was not submitted, in Slurm's words, and what to do about it."""
    if node.drained:
        owner = (
            "gpuready drained it: give --slurm-drain to re-test it in a quarantine reservation"
            if (node.reason or "").startswith(PREFIX)
            else "resume it when its owner is done (scontrol update nodename="
            f"{node.name} state=resume)"
        )
        return f"Slurm will not run it: {node.words}; {owner}"
    return (
        f"Slurm will not run it: {node.words}; start slurmd there and resume it "
        f"(scontrol update nodename={node.name} state=resume)"
    )


def _abandon(submission: Submission, runner: Runner) -> None:
    """Cancel whatever was submitted, drain the quarantined nodes again, drop the reservation."""
    with contextlib.suppress(GpureadyError):
        if submission.job_ids:
            cancel(submission.job_ids, runner)
    restore_quarantined(submission, (), runner)
    release_quarantine(submission, runner)


def release_quarantine(submission: Submission, runner: Runner = run_slurm) -> None:
    """Delete the quarantine reservation, if any (the caller re-drains failing nodes)."""
    if submission.reservation is None:
        return
    with contextlib.suppress(GpureadyError):
        delete_reservation(submission.reservation, runner)


# ---------------------------------------------------------------- following


@dataclass
class _Follow:
    """What following one submission has seen so far."""

    submission: Submission
    hosts: Mapping[str, HostSpec]
    request: AgentRequest
    judge: Judge
    deadline_s: float
    progress: Progress
    runner: Runner
    grace_s: float = SPOOL_GRACE_S
    by_job: dict[str, list[str]] = field(default_factory=dict)  # job id -> its nodes
    results: dict[str, NodeResult] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)  # job id -> first seen running
    ended: dict[str, float] = field(default_factory=dict)  # job id -> first seen finished
    states: dict[str, JobState] = field(default_factory=dict)
    cursor: int = 0  # where the next look's squeue window starts (see _asked)


def follow(
    submission: Submission,
    hosts: Sequence[HostSpec],
    request: AgentRequest,
    judge: Judge,
    *,
    deadline_s: float,
    wait: bool = True,
    poll_s: float = DEFAULT_POLL_S,
    progress: Progress | None = None,
    on_results: Arrivals | None = None,
    stop: threading.Event | None = None,
    runner: Runner = run_slurm,
) -> FanoutResult:
    """Gather every node's result as it lands in the spool; judge it; say why for the rest.

    Args:
        submission: what was submitted.
        hosts: one per node of the submission (their policies are in ``judge``).
        request: what the agents were asked (for judging a run cut short).
        judge: facts to a NodeResult.
        deadline_s: how long one node's agent may take; a job running past it (and
            its margin) is cancelled and its unfinished nodes are UNKNOWN.
        wait: follow until every job has ended; False: one look, and the nodes still
            pending or running are UNKNOWN with their job's state.
        poll_s: the pause between looks.
        progress: told each node's phase.
        on_results: called with the results that arrived since its last call (a look's
            worth at once).
        stop: set it to end early (Ctrl-C does the same): the jobs are cancelled.
        runner: runs Slurm's commands.
    """
    by_name = {host.name: host for host in hosts}
    run = _Follow(
        submission,
        by_name,
        request,
        judge,
        deadline_s,
        progress or _Silent(),
        runner,
        grace_s=min(SPOOL_GRACE_S, GRACE_LOOKS * poll_s),
    )
    for node, job in submission.jobs.items():
        run.by_job.setdefault(job, []).append(node)
    order = list(submission.nodes)
    for node, words in submission.skipped.items():
        run.results[node] = _unknown(run, node, words, "not submitted")
    _told(run, list(submission.skipped), on_results)
    interrupted = False
    try:
        while True:
            # Without waiting, one look is the last: a finished job's missing nodes are told now.
            _look(run, on_results, final=not wait)
            # Done when every node that has a job has its result (a node without one, in
            # a submission saved part-way, can never get one: _unfinished says so).
            if not wait or all(n in run.results for n in order if n in submission.jobs):
                break
            if stop is not None and stop.wait(poll_s):
                raise KeyboardInterrupt
            if stop is None:
                time.sleep(poll_s)
    except KeyboardInterrupt:
        interrupted = True
        _cancel_and_wait(run)
        _gather(run, on_results)  # what finished before the cancel still counts
    unfinished = [node for node in order if node not in run.results]
    for node in unfinished:
        run.results[node] = _unfinished(run, node, interrupted)
    _told(run, unfinished, on_results)
    return FanoutResult(results=tuple(run.results[node] for node in order), interrupted=interrupted)


class _Silent:
    def phase(self, host: str, phase: Phase) -> None:
        del host, phase


def _told(run: _Follow, nodes: list[str], on_results: Arrivals | None) -> None:
    """Show ``nodes``' results (each already in ``run.results``) and hand them on at once."""
    for node in nodes:
        verdict = run.results[node].verdict
        run.progress.phase(node, Phase.FAILED if verdict is Verdict.UNKNOWN else Phase.DONE)
    if on_results is not None and nodes:
        on_results([run.results[node] for node in nodes])


def _gather(run: _Follow, on_results: Arrivals | None) -> None:
    """Judge every node whose exit status is new in the spool."""
    landed = []
    for node in sorted(finished_nodes(run.submission)):
        if node in run.results or node not in run.hosts:
            continue
        output = read_output(run.submission, node)
        if output.rc is None:  # not readable yet (being renamed, NFS): the next look
            continue
        run.results[node] = _judged(run, output)
        landed.append(node)
    _told(run, landed, on_results)


def _look(run: _Follow, on_results: Arrivals | None, *, final: bool = False) -> None:
    """One pass: new results from the spool, then the jobs' states."""
    now = time.monotonic()
    _gather(run, on_results)
    waiting = {
        job: [node for node in nodes if node not in run.results]
        for job, nodes in run.by_job.items()
    }
    live = [job for job, nodes in waiting.items() if nodes]
    if not live:
        return
    try:
        run.states.update(job_states(_asked(run, live, final), run.runner))
    except SlurmError as exc:
        if final:
            for job in live:
                run.states.setdefault(job, _unknown_state(job, str(exc)))
        return  # Slurm did not answer this time: look again next time
    overdue = [job for job in live if _watch(run, job, waiting[job], now, final, on_results)]
    if overdue:
        with contextlib.suppress(GpureadyError):
            cancel(overdue, run.runner)
        given_up = []
        for job in overdue:
            for node in waiting[job]:
                if node in run.results:
                    continue
                why = (
                    f"no result within the {run.deadline_s:g} s deadline and its margin; "
                    f"gpuready cancelled job {job}"
                )
                run.results[node] = _unknown(run, node, why, "deadline")
                given_up.append(node)
        _told(run, given_up, on_results)


def _asked(run: _Follow, live: list[str], final: bool) -> list[str]:
    """The live jobs whose state this look asks for: all, or the next :data:`STATES_PER_LOOK`.

    A campaign of 10,000 jobs would otherwise cost 20 squeue calls (slurmctld RPCs) on
    every look; the spool brings the results, and a job's state is needed only to notice
    the ones that ended without one or ran past their deadline, which a few looks later
    still notices. The last look asks for them all.
    """
    if final or len(live) <= STATES_PER_LOOK:
        return live
    start = run.cursor % len(live)
    run.cursor = start + STATES_PER_LOOK
    return (live[start:] + live[:start])[:STATES_PER_LOOK]


def _watch(
    run: _Follow,
    job: str,
    waiting: list[str],
    now: float,
    final: bool,
    on_results: Arrivals | None,
) -> bool:
    """Act on one job's state; True when it has run past its deadline (to be cancelled)."""
    state = run.states.get(job)
    if state is None:
        return False
    if state.state == "RUNNING" and job not in run.started:
        run.started[job] = now
        for node in waiting:
            run.progress.phase(node, Phase.RUN)
    if state.finished:
        first_seen = run.ended.setdefault(job, now)
        if final or now - first_seen >= run.grace_s:
            _job_ended(run, job, waiting, state, on_results)
        return False
    started = run.started.get(job)
    return started is not None and now - started > run.deadline_s + TIME_MARGIN_S


def _job_ended(
    run: _Follow,
    job: str,
    nodes: list[str],
    state: JobState,
    on_results: Arrivals | None,
) -> None:
    """Nodes of a finished job that left no result: UNKNOWN with the job's and node's words."""
    missing = [node for node in nodes if node not in run.results]
    if not missing:
        return
    described = _node_words(missing, run.runner)
    for node in missing:
        output = read_output(run.submission, node)
        if output.rc is not None:  # it landed after all
            run.results[node] = _judged(run, output)
        else:
            said = described.get(node, "")
            why = (
                f"job {job} ended {state.words} without a result from {node}"
                f"{'; Slurm says the node is ' + said if said else ''}; see "
                f"{run.submission.directory}/slurm-{job}.out, and check the spool is shared "
                "with the nodes at the same path"
            )
            run.results[node] = _unknown(run, node, why, "run")
    _told(run, missing, on_results)


def _node_words(nodes: list[str], runner: Runner) -> dict[str, str]:
    try:
        return {node.name: node.words for node in list_nodes(runner, names=nodes)}
    except GpureadyError:
        return {}


def _unknown_state(job: str, why: str) -> JobState:
    return JobState(job_id=job, state="UNKNOWN", reason=why, nodes=(), exit_code=None, name=None)


def _unfinished(run: _Follow, node: str, interrupted: bool) -> NodeResult:
    job = run.submission.jobs.get(node)
    if job is None:
        return _unknown(run, node, "no job was submitted for it", "not submitted")
    state = run.states.get(job)
    said = f" ({state.words})" if state is not None else ""
    if interrupted:
        why = f"the run was interrupted: gpuready cancelled job {job}{said} before {node} finished"
        return _unknown(run, node, why, "interrupted")
    why = (
        f"job {job} has not finished{said}: gather its result later with "
        f"gpuready slurm collect {job} --spool {run.submission.directory.parent}"
    )
    return _unknown(run, node, why, "pending")


def _cancel_and_wait(run: _Follow) -> None:
    """scancel every job of the submission; wait (bounded) until none is still listed live."""
    jobs = list(run.submission.job_ids)
    if not jobs:
        return
    try:
        cancel(jobs, run.runner)
    except GpureadyError:
        return
    until = time.monotonic() + CANCEL_WAIT_S
    while time.monotonic() < until:
        try:
            states = job_states(jobs, run.runner)
        except GpureadyError:
            return
        run.states.update(states)
        if all(state.finished for state in states.values()):
            return
        time.sleep(0.5)


def _judged(run: _Follow, output: NodeOutput) -> NodeResult:
    host = run.hosts[output.node]
    outcome = agent_outcome(output)
    return judged_result(host, TRANSPORT, outcome, run.judge, run.request, run.deadline_s)


def _unknown(run: _Follow, node: str, why: str, phase: str) -> NodeResult:
    host = run.hosts.get(node) or HostSpec(name=node, address=node)
    return unreachable(host, TRANSPORT, why, phase, 0.0)


def agent_outcome(output: NodeOutput) -> AgentOutcome:
    """What one node's spool files say: its facts, or why there are none."""
    node = output.node
    stderr = output.stderr[-_STDERR_KEEP:]
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    if output.rc != 0:
        why = one_line(last) or f"the agent on {node} exited with status {output.rc}"
        return AgentOutcome(node, None, why, stderr, Phase.RUN)
    try:
        facts = agent_facts(output.stdout)
    except SchemaError as exc:
        why = f"facts from {node} do not fit the model: {one_line(exc)}"
        return AgentOutcome(node, None, why, stderr, Phase.PARSE)
    except ValueError as exc:
        why = f"the agent on {node} left no valid JSON in the spool: {one_line(exc)}"
        return AgentOutcome(node, None, why, stderr, Phase.PARSE)
    return AgentOutcome(node, facts, None, stderr, Phase.DONE)


def restore_quarantined(
    submission: Submission,
    results: Sequence[NodeResult],
    runner: Runner = run_slurm,
    reason_for: Callable[[NodeResult], str] | None = None,
) -> None:
    """Drain again every quarantined node that did not pass, before the reservation goes.

    A node this run proved failing is drained with ``reason_for`` its result (the caller's
    drain words); one it could not judge (cancelled, lost) goes back to the drain it came
    in with. Only a CERTIFIED node leaves the quarantine resumed, so a re-test never lets
    a suspect node take jobs, whatever ended the run.
    """
    from validator.slurm import drain as slurm_drain

    by_name = {result.hostname: result for result in results}
    for node, reason in submission.quarantined.items():
        result = by_name.get(node)
        if result is not None and result.verdict is Verdict.CERTIFIED:
            continue
        if result is not None and result.verdict is Verdict.NOT_CERTIFIED:
            words = reason_for(result) if reason_for else f"{PREFIX} {result.summary}"
        else:
            words = reason or f"{PREFIX} quarantined, not re-tested"
        with contextlib.suppress(GpureadyError):
            slurm_drain(node, words, runner)


__all__ = [
    "DEFAULT_POLL_S",
    "TRANSPORT",
    "SlurmOptions",
    "Targets",
    "agent_outcome",
    "follow",
    "hosts_for",
    "job_time",
    "release_quarantine",
    "restore_quarantined",
    "submit_run",
    "target_nodes",
]
