"""``gpuready provision``: run the site playbook over an inventory, with live progress.

Progress goes to stderr: on a terminal a rich bar (hosts x tasks, estimated from
``ansible-playbook --list-tasks``, advanced per host result) and each running host's
current task; elsewhere one plain line per host result. The closing table (one line
per host) goes to stdout, or to stderr under ``--json``, which keeps stdout for the
JSON document.

``--diff`` then shows each host's changes, task by task (validator.cli.diff_view), on
the closing table's stream, before the table.

``--certify`` then certifies the hosts that provisioned successfully, through the
hosts' ``gpuready_transport`` when they all name the same one, ``local`` when every
one has ``ansible_connection=local``, else ``ssh``; the exit code is the worse of
the two. It burns for certify's default 5 minutes and takes certify's report,
policy, signing and DCGM options, which are refused without it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource
from rich.console import Console, Group, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from validator.cli.certify import tell
from validator.cli.help_sections import SectionedCommand
from validator.cli.options import (
    TEXT,
    BurnOptions,
    NonEmptyPath,
    burn_options,
    command_line,
    db_option,
    dcgm_level_option,
    interconnect_option,
    inventory_option,
    limit_option,
    policy_option,
    report_dir_option,
    sign_key_option,
    use_color,
)
from validator.cli.progress import LiveDisplay
from validator.cli.provision_options import force_option, rolling_options, rolling_settings
from validator.error_tree import ExitCode

if TYPE_CHECKING:
    from validator.service.certify_service import CertifyOutcome, CertifyRequest
    from validator.service.provision_diff import RunChanges
from validator.safe_text import one_line, visible
from validator.service.provision_service import (
    ProvisionEvent,
    ProvisionRequest,
    ProvisionResult,
    certify_transport,
    check_request,
    default_playbook,
    estimate_tasks,
    parse_extra_vars,
    run_provision,
)

_SHOWN_HOSTS = 12  # hosts listed with their current task; the rest are counted
# certify's options that only mean something with --certify (their parameter names).
_CERTIFY_ONLY = (
    *("burn_duration", "burn_backend", "burn_dtype", "burn_matrix_size", "burn_memory_fraction"),
    *("policy_path", "report_dir", "sign_key", "dcgm_level", "interconnect"),
)
_STATUS_STYLE = {
    "ok": "green",
    "changed": "yellow",
    "failed": "red",
    "unreachable": "red",
    "skipped": "cyan",
    "started": "",
}


class ProvisionProgress(LiveDisplay):
    """Follows a provisioning run's events: a bar and per-host lines, or plain lines.

    Args:
        total: the estimated number of host x task results; None when unknown.
        console: where to draw (stderr by default).
    """

    def __init__(self, total: int | None, console: Console | None = None) -> None:
        super().__init__(console)
        self.total = total
        self.done = 0
        self.current: dict[str, str] = {}  # host -> the task it is on
        self.trouble: dict[str, str] = {}  # host -> "failed" / "unreachable"
        self.bar = Progress(
            TextColumn("[bold]provisioning[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("host tasks"),
            TimeElapsedColumn(),
            console=self.console,
        )
        self.task_id = self.bar.add_task("provision", total=total)

    def event(self, event: ProvisionEvent) -> None:
        """One host's task started or ended (called from the runner's thread)."""
        with self.lock:
            if not event.final:
                self.current[event.host] = event.task
            else:
                self.done += 1
                if event.status in ("failed", "unreachable") and not event.ignored:
                    self.trouble[event.host] = event.status
                if self.total is not None and self.done > self.total:
                    # The estimate misses loops, includes and fact gathering: grow it.
                    self.total = self.done
            done, total = self.done, self.total
        if self.interactive:
            self.bar.update(self.task_id, completed=done, total=total)
            self.refresh()
        elif event.final:
            self._plain(event, done, total)

    def _plain(self, event: ProvisionEvent, done: int, total: int | None) -> None:
        count = f"{done}/{total}" if total else str(done)
        why = f": {event.message}" if event.message else ""
        ignored = " (ignored)" if event.ignored else ""
        self.console.print(
            visible(f"[{count}] {event.host} {event.status}{ignored}  {event.task}{why}"),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

    def _render(self) -> RenderableType:
        with self.lock:
            current = dict(self.current)
            trouble = dict(self.trouble)
        hosts = Table.grid(padding=(0, 2))
        for host, task in sorted(current.items())[:_SHOWN_HOSTS]:
            state = trouble.get(host)
            label = Text(state, style="red") if state else Text("")
            hosts.add_row(
                Text(f"  {visible(host)}"), label, Text(visible(task), overflow="ellipsis")
            )
        if len(current) > _SHOWN_HOSTS:
            hosts.add_row(Text(f"  ... and {len(current) - _SHOWN_HOSTS} more"), "", "")
        return Group(self.bar, hosts)


def closing_table(result: ProvisionResult) -> Table:
    """One row per host: the recap counts and the first failure."""
    title = "provision (check mode: nothing changed)" if result.check else "provision"
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("host", no_wrap=True)
    for name in ("ok", "changed", "failed", "unreachable"):
        table.add_column(name, justify="right")
    table.add_column("first failure", overflow="fold")
    for host in result.hosts:
        style = "" if host.succeeded and host.host not in result.stopped else "red"
        table.add_row(
            Text(one_line(host.host), style=style),
            str(host.ok),
            Text(str(host.changed), style="yellow" if host.changed else ""),
            Text(str(host.failed), style="red" if host.failed else ""),
            Text(str(host.unreachable), style="red" if host.unreachable else ""),
            Text(one_line(result.failed_messages.get(host.host, ""))),
        )
    for name in result.not_run:
        why = "not run: the roll stopped before this host's batch"
        table.add_row(Text(one_line(name), style="red"), "", "", "", "", Text(why))
    return table


def worse_exit(first: ExitCode, second: ExitCode) -> ExitCode:
    """Two steps' exit codes as one, by the one rule of validator.service.outcome.

    130 when either was interrupted; 0 only when both are 0; 3 only when both are 3;
    anything else 1: a step that judged something is never hidden behind the
    other's "nothing could be judged".
    """
    codes = {first, second}
    for code in (ExitCode.INTERRUPTED, ExitCode.NOT_CERTIFIED):
        if code in codes:
            return code
    if codes == {ExitCode.OK}:
        return ExitCode.OK
    if ExitCode.OK in codes:
        return ExitCode.NOT_CERTIFIED
    return ExitCode.COULD_NOT_RUN


def provision_exit_code(result: ProvisionResult) -> ExitCode:
    """0 when every host succeeded; 1 when any failed or was unreachable; 3 otherwise.

    Otherwise means no host ran, or ansible-playbook ended badly (canceled, timed out,
    an error of its own) while no host failed.
    """
    if result.ok:
        return ExitCode.OK
    if any(not host.succeeded for host in result.hosts):
        return ExitCode.NOT_CERTIFIED
    return ExitCode.COULD_NOT_RUN


def _certify(
    result: ProvisionResult,
    inventories: tuple[str, ...],
    burn: BurnOptions,
    options: dict[str, Any],
    argv: tuple[str, ...],
) -> CertifyOutcome | None:
    """Certify the hosts that provisioned successfully, as ``certify`` does; None for none.

    The run is recorded in history and the certified hosts get certificates, so
    a later ``gpuready drift`` finds their baseline.
    """
    from validator.cli.progress import FleetProgress
    from validator.service.certify_service import run_certify
    from validator.store import Store

    hosts = result.succeeded_hosts
    if not hosts:
        click.echo("gpuready: certify skipped: no host provisioned successfully", err=True)
        return None
    request = _certify_request(inventories, hosts, burn, options, argv)
    with Store.open(options["db_path"], defer_create=True) as store:
        tell(store.take_notices())  # pending runs imported: said before the run starts
        burn_s = request.burn.duration_s if request.burn is not None else 0.0
        with FleetProgress(burn_s=burn_s) as progress:  # each host's burn time left
            certified = run_certify(request, store, fleet_display=progress)
    if certified.written:
        click.echo("reports: " + ", ".join(str(p) for p in certified.written.values()), err=True)
    tell(certified.notices)
    for problem in certified.problems:  # measured, but not stored: exit 3
        click.echo(f"gpuready: error: {one_line(problem)}", err=True)
    return certified


def _certify_request(
    inventories: tuple[str, ...],
    hosts: tuple[str, ...],
    burn: BurnOptions,
    options: dict[str, Any],
    argv: tuple[str, ...],
) -> CertifyRequest:
    """What ``--certify`` asks of certify: the provisioned hosts, with certify's own options."""
    from validator.model import TransportName
    from validator.node.burnin.burn_config import parse_duration
    from validator.service.certify_service import CertifyRequest
    from validator.service.collect_and_judge import Reach

    transport = certify_transport(inventories, hosts)
    click.echo(f"certifying {len(hosts)} host(s) through the {transport} transport", err=True)
    dcgm_level = options["dcgm_level"]
    return CertifyRequest(
        reach=Reach(
            inventories=inventories, limit=":".join(hosts), transport=TransportName(transport)
        ),
        burn=burn.config(parse_duration(burn.burn_duration)),
        policy_path=options["policy_path"],
        report_dir=options["report_dir"],
        sign_key=options["sign_key"],
        interconnect=options["interconnect"],
        argv=argv,
        # Only when given: the policy's level stands otherwise.
        **({} if dcgm_level is None else {"dcgm_level": dcgm_level}),
    )


def _run(request: ProvisionRequest, console: Console) -> ProvisionResult:
    total = estimate_tasks(request)
    started = time.monotonic()
    with ProvisionProgress(total, console) as progress:
        result = run_provision(request, on_event=progress.event)
    seconds = time.monotonic() - started
    waves = f" in {len(result.waves)} batches" if request.batch and result.waves else ""
    lines = [
        f"provision {result.status}{waves} in {seconds:.0f} s; artifacts: {result.artifacts_dir}",
        *(f"gpuready: slurm: {note}" for note in result.slurm.values()),
    ]
    for line in lines:
        console.print(visible(line), markup=False, highlight=False, soft_wrap=True)
    return result


@click.command(cls=SectionedCommand)
@inventory_option("Ansible inventory (INI, YAML, directory or script); repeatable.", required=True)
@limit_option
@rolling_options
@click.option(
    "--tags", type=TEXT, metavar="TAGS", help="Only the tasks with these tags (comma-separated)."
)
@click.option("--skip-tags", type=TEXT, metavar="TAGS", help="Skip the tasks with these tags.")
@click.option("--check", is_flag=True, help="Check mode: report what would change, change nothing.")
@force_option
@click.option(
    "--diff",
    is_flag=True,
    help="Show each host's changes (files, packages), task by task; with --check, the "
    "changes that would be made.",
)
@click.option(
    "--mirror",
    type=TEXT,
    metavar="URL",
    help="CUDA repository URL to use instead of NVIDIA's (a local mirror).",
)
@click.option(
    "-K",
    "--ask-become-pass",
    is_flag=True,
    help="Ask for the become (sudo) password before starting; it is never written to disk.",
)
@click.option(
    "-e",
    "--extra-vars",
    "extra_vars",
    multiple=True,
    type=TEXT,
    metavar="KEY=VALUE",
    help="Extra variable (YAML-typed value; dotted numbers stay text), or @FILE.yml; repeatable.",
)
@click.option(
    "--playbook",
    type=NonEmptyPath(dir_okay=False),
    metavar="FILE|NAME",
    help="Playbook to run: a file, or a bundled one by name (site, drift-timer) (default: site).",
)
@click.option(
    "--certify",
    "certify_after",
    is_flag=True,
    help="Then certify the hosts that provisioned successfully, as `gpuready certify -i` "
    "does (the options below marked 'With --certify' are certify's).",
)
@burn_options(
    "5m",
    "With --certify: the burn-in length (90s, 5m); 0 skips it, and a node is then not certified.",
)
@policy_option
@report_dir_option
@sign_key_option
@dcgm_level_option
@interconnect_option(
    None,
    "With --certify: measure what joins the GPUs after the burn-in (default: the policy's).",
)
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option(
    "--color/--no-color",
    default=None,
    help="Colour the closing table and report (default: when a terminal).",
)
@click.pass_context
def provision(ctx: click.Context, /, **options: Any) -> None:  # noqa: ANN401 - click's options
    """Install the pinned NVIDIA driver, CUDA Toolkit and cuDNN on an inventory's hosts."""
    burn = BurnOptions.pop(options)
    request = _request(ctx, options, burn)
    result = _run(request, Console(stderr=True))
    as_json, color = options["as_json"], options["color"]
    out = Console(
        file=sys.stderr if as_json else sys.stdout,
        force_terminal=color,
        no_color=color is False,
        soft_wrap=False,
    )
    changes = _show_changes(result, out) if request.diff else None
    if result.hosts:
        out.print(closing_table(result))
    if result.error:
        click.echo(f"gpuready: provision: {one_line(result.error)}", err=True)
    certified = None
    if options["certify_after"]:
        certified = _certify(result, request.inventories, burn, options, command_line(ctx))
    code = provision_exit_code(result)
    if certified is not None:
        code = worse_exit(code, certified.exit_code)
    _render(result, certified, changes, as_json=as_json, color=color)
    ctx.exit(int(code))


def _show_changes(result: ProvisionResult, console: Console) -> RunChanges:
    """``--diff``: each host's changes, read back from the run's artifacts, then printed."""
    from validator.cli.diff_view import print_changes
    from validator.service.provision_diff import read_changes

    changes = read_changes(result.artifacts_dir)
    hosts = [host.host for host in result.hosts]
    print_changes(changes, hosts, console, check=result.check)
    return changes


def _refuse_certify_options(ctx: click.Context) -> None:
    """certify's options without --certify: one line naming the first one typed.

    Only what was typed: a policy, report dir or sign key from the settings (config
    files, GPUREADY_*) is certify's, and simply not used by a provision without it.
    """
    for name in _CERTIFY_ONLY:
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            param = next(p for p in ctx.command.params if p.name == name)
            off = param.secondary_opts and ctx.params.get(name) is False  # --no-interconnect
            flag = param.secondary_opts[0] if off else param.opts[0]
            raise click.UsageError(f"{flag} needs --certify")


def bundled_playbook(given: str | None) -> str | None:
    """``--playbook``: a bundled playbook's path for its name (``drift-timer``), else as given.

    A file of that name in the working directory is the operator's and wins.
    """
    if given is None or "/" in given or given.endswith((".yml", ".yaml")):
        return given
    bundled = default_playbook().parent / f"{given}.yml"
    return str(bundled) if bundled.is_file() and not os.path.exists(given) else given


def _check_certify_inputs(options: dict[str, Any], burn: BurnOptions) -> None:
    """certify's inputs, read before provisioning: a typo shows in seconds, not after it."""
    from validator.node.burnin.burn_config import parse_duration
    from validator.service.collect_and_judge import effective_policy

    burn.config(parse_duration(burn.burn_duration))
    effective_policy(options["policy_path"], options["dcgm_level"], options["interconnect"])
    if options["sign_key"]:
        from validator.signing import load_signing_key

        load_signing_key(options["sign_key"])


def _request(ctx: click.Context, options: dict[str, Any], burn: BurnOptions) -> ProvisionRequest:
    """The provisioning the options ask for; bad input fails here, before anything runs."""
    if not options["certify_after"]:
        _refuse_certify_options(ctx)
    else:
        _check_certify_inputs(options, burn)
    request = ProvisionRequest(
        **rolling_settings(options),
        inventories=options["inventories"],
        limit=options["limit"],
        tags=options["tags"],
        skip_tags=options["skip_tags"],
        check=options["check"],
        diff=options["diff"],
        mirror=options["mirror"],
        extra_vars=parse_extra_vars(options["extra_vars"]),
        playbook=bundled_playbook(options["playbook"]),
        force=options["force"],
    )
    check_request(request)
    if options["ask_become_pass"]:
        password = click.prompt(
            "BECOME password", hide_input=True, err=True, default="", show_default=False
        )
        request = dataclasses.replace(request, become_password=password)
    return request


def _render(
    result: ProvisionResult,
    certified: CertifyOutcome | None,
    changes: RunChanges | None,
    *,
    as_json: bool,
    color: bool | None,
) -> None:
    report = certified.report if certified is not None else None
    if as_json:
        document = result.to_dict()
        if changes is not None:
            document["changes"] = [change.to_dict() for change in changes.changes]
        if report is not None:
            from validator.report.json_report import render_json

            document["certify"] = json.loads(render_json(report))
        click.echo(json.dumps(document, indent=2))
    elif report is not None:
        from validator.report.terminal import render_text

        click.echo(render_text(report, color=use_color(color)), nl=False)
