"""The options that send ``certify`` and ``drift`` through Slurm, and what Slurm was told.

``--slurm`` turns them on; the rest shape the jobs and are refused without it, so a
``--partition`` given alone never silently certifies over SSH instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from validator.cli.options import TEXT, FiniteFloat, NonEmptyPath
from validator.safe_text import one_line

if TYPE_CHECKING:
    from validator.slurm.job_fanout import SlurmOptions
    from validator.slurm.judged_nodes import SlurmStep
    from validator.slurm.submission_spool import Submission

F = TypeVar("F", bound=Callable[..., Any])

SPOOL_ENV = "GPUREADY_SLURM_SPOOL"

_SHAPING = (
    "partition",
    "nodelist",
    "exclude",
    "reservation",
    "account",
    "qos",
    "slurm_time",
    "agent_path",
    "sbatch_options",
)

_SLURM_OPTIONS: tuple[Callable[[F], F], ...] = (
    click.option(
        "--slurm",
        is_flag=True,
        help="Reach the nodes through the cluster's Slurm: one exclusive job step per node.",
    ),
    click.option("--partition", type=TEXT, help="The partition whose nodes are certified."),
    click.option(
        "--nodelist",
        type=TEXT,
        metavar="HOSTLIST",
        help="Only these nodes, in Slurm's host-list syntax (gpu[001-064]).",
    ),
    click.option("--exclude", type=TEXT, metavar="HOSTLIST", help="Leave these nodes out."),
    click.option(
        "--reservation", type=TEXT, help="Run the jobs in this reservation (a maintenance window)."
    ),
    click.option("--account", type=TEXT, help="The jobs' Slurm account."),
    click.option("--qos", type=TEXT, help="The jobs' quality of service."),
    click.option(
        "--time",
        "slurm_time",
        type=TEXT,
        metavar="TIME",
        help="The jobs' time limit in Slurm's format (default: the deadline plus 5 minutes).",
    ),
    click.option(
        "--spool",
        type=NonEmptyPath(file_okay=False),
        metavar="DIR",
        help="A folder every node sees at the same path (shared storage) for the agent and "
        "the results (default: $GPUREADY_SPOOL or the spool setting, else "
        "$XDG_STATE_HOME/gpuready/spool).",
    ),
    click.option(
        "--agent-path",
        type=TEXT,
        metavar="PATH",
        help="Run the agent from this path on a shared filesystem instead of sbcasting it.",
    ),
    click.option(
        "--campaign",
        is_flag=True,
        help="One job per node, so each is certified when it becomes free (a busy cluster).",
    ),
    click.option(
        "--wait/--no-wait",
        default=True,
        help="Follow the jobs to the end (default), or submit and return: gather the results "
        "later with `gpuready slurm collect JOBID`.",
    ),
    click.option(
        "--sbatch-option",
        "sbatch_options",
        multiple=True,
        type=TEXT,
        metavar="OPTION",
        help="Pass this option to sbatch as given (--gres=gpu:8, --constraint=h100); repeatable.",
    ),
    click.option(
        "--poll",
        "slurm_poll",
        type=FiniteFloat(0.2, 600.0, unit="seconds"),
        default=5.0,
        show_default=True,
        help="Seconds between looks at the spool and the queue.",
    ),
)


def slurm_options(command: F) -> F:
    """``--slurm`` and the options that shape its jobs."""
    for option in reversed(_SLURM_OPTIONS):
        command = option(command)
    return command


def spool_path(given: str | None) -> str:
    """The spool: the one given (or set), else $GPUREADY_SLURM_SPOOL, else XDG state's."""
    if given:
        return given
    from validator.slurm.plan_and_reach import spool_default

    return os.environ.get(SPOOL_ENV) or spool_default()


def slurm_settings(options: dict[str, Any], *, manage_drains: bool) -> SlurmOptions | None:
    """The SlurmOptions the command was given (None without ``--slurm``), options taken out.

    Raises:
        click.UsageError: a Slurm option without --slurm.
    """
    on = options.pop("slurm")
    values = {name: options.pop(name) for name in _SHAPING}
    spool, campaign, wait = options.pop("spool"), options.pop("campaign"), options.pop("wait")
    poll = options.pop("slurm_poll")
    if not on:
        given = [name for name, value in values.items() if value]
        # A spool from a setting (config file, $GPUREADY_SPOOL) waits for a --slurm run.
        spool = spool if _typed("spool") else None
        given += [name for name, on_ in (("spool", spool), ("campaign", campaign)) if on_]
        given += [] if wait else ["no-wait"]
        _refuse_without_slurm(given)
        return None
    from validator.slurm.job_fanout import SlurmOptions

    return SlurmOptions(
        spool=spool_path(spool),
        partition=values["partition"],
        nodelist=values["nodelist"],
        exclude=values["exclude"],
        reservation=values["reservation"],
        account=values["account"],
        qos=values["qos"],
        time_limit=values["slurm_time"],
        agent_path=values["agent_path"],
        campaign=campaign,
        wait=wait,
        manage_drains=manage_drains,
        poll_s=poll,
        extra_sbatch=tuple(values["sbatch_options"]),
    )


def _typed(name: str) -> bool:
    """Whether the running command's ``name`` was given on its command line."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    return ctx is None or ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE


def _refuse_without_slurm(given: list[str]) -> None:
    """A job-shaping option given without --slurm is a usage error naming it."""
    if given:
        flag = "--" + given[0].replace("slurm_", "").replace("_", "-")
        flag = "--sbatch-option" if flag == "--sbatch-options" else flag
        raise click.UsageError(f"{flag} shapes Slurm jobs: give --slurm with it")


def tell_slurm_steps(steps: Iterable[SlurmStep]) -> None:
    """What ``--slurm-drain`` did about each node, one stderr line each (changes only)."""
    for step in steps:
        from validator.slurm import Action  # only when there is a step: the Slurm code is large

        if step.action is None:
            said = one_line(f"{step.hostname}: {step.error}")
            click.echo(f"gpuready: slurm: {said}", err=True)
        elif step.action in (Action.DRAINED, Action.UPDATED, Action.RESUMED, Action.LEFT_ALONE):
            note = " (drained by someone else)" if step.action is Action.LEFT_ALONE else ""
            host = one_line(step.hostname)
            click.echo(f"gpuready: slurm: {host}: {step.action.value}{note}", err=True)


def tell_submitted(submission: Submission) -> None:
    """Where a submission went and how to gather it, on stderr."""
    jobs = submission.job_ids
    named = ", ".join(jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5 else "")
    first = jobs[0] if jobs else submission.token
    click.echo(
        f"gpuready: slurm: submitted {len(submission.jobs)} node(s) as job(s) {named or 'none'}"
        f" (spool {submission.directory}); gather with: gpuready slurm collect {first} "
        f"--spool {submission.directory.parent}",
        err=True,
    )


__all__ = [
    "SPOOL_ENV",
    "slurm_options",
    "slurm_settings",
    "spool_path",
    "tell_slurm_steps",
    "tell_submitted",
]
