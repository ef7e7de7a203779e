"""``gpuready slurm collect``: gather and judge what ``certify --slurm --no-wait`` submitted."""

from __future__ import annotations

from typing import Any

import click

from validator.cli.certify import render_outcome, run_with_display, tell
from validator.cli.help_sections import SectionedCommand
from validator.cli.options import (
    TEXT,
    FiniteFloat,
    NonEmptyPath,
    command_line,
    db_option,
    json_form_option,
)
from validator.cli.slurm_options import spool_path, tell_slurm_steps
from validator.safe_text import one_line
from validator.store import Store


@click.group()
def slurm() -> None:
    """Certification jobs submitted to Slurm."""


@slurm.command(cls=SectionedCommand)
@click.argument("job", type=TEXT, metavar="JOBID")
@click.option(
    "--spool",
    type=NonEmptyPath(file_okay=False),
    metavar="DIR",
    help="The spool the job was submitted with (default: as certify --slurm's).",
)
@click.option(
    "--wait/--no-wait",
    default=False,
    help="Follow the jobs still pending or running to the end (default: gather what is "
    "there now; the rest are UNKNOWN with their job's state).",
)
@click.option(
    "--poll",
    type=FiniteFloat(0.2, 600.0, unit="seconds"),
    default=5.0,
    show_default=True,
    help="Seconds between looks while waiting.",
)
@click.option(
    "--slurm-drain",
    is_flag=True,
    help="Drain the nodes that failed; resume the ones gpuready drained that now pass.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report on stdout.")
@json_form_option
@click.option(
    "--report-dir",
    metavar="DIR",
    type=NonEmptyPath(file_okay=False),
    help="Write report.json, report.html and junit.xml here.",
)
@click.option("--color/--no-color", default=None, help="Colour the terminal report.")
@click.option(
    "--sign-key",
    type=NonEmptyPath(dir_okay=False),
    help="Sign certificates with HMAC-SHA256 using this key file.",
)
@db_option
@click.pass_context
def collect(ctx: click.Context, /, job: str, **options: Any) -> None:  # noqa: ANN401
    """Gather JOBID's results (a job id or token certify --slurm printed), judge and record them."""
    from validator.service.saved_submission import collect_request
    from validator.slurm.submission_spool import spool_holding

    spool, moved = spool_holding(spool_path(options["spool"]), job)
    tell([moved] if moved else [])  # a submission from before the spool moved under XDG state
    request = collect_request(
        str(spool),
        job,
        wait=options["wait"],
        poll_s=options["poll"],
        slurm_drain=options["slurm_drain"],
        report_dir=options["report_dir"],
        json_form=options["json_form"],
        sign_key=options["sign_key"],
        argv=command_line(ctx),
    )
    with Store.open(options["db_path"], defer_create=True) as store:
        tell(store.take_notices())
        outcome = run_with_display(request, store, None)
    render_outcome(
        outcome, as_json=options["as_json"], color=options["color"], json_form=request.json_form
    )
    tell_slurm_steps(outcome.slurm)
    tell(outcome.notices)
    for problem in outcome.problems:
        click.echo(f"gpuready: error: {one_line(problem)}", err=True)
    ctx.exit(int(outcome.exit_code))
