"""``gpuready certify``: judge this machine, a capture or a scenario."""

from __future__ import annotations

import logging
import sys

import click
from click.core import ParameterSource

from validator.certificate import Certificate, load_key
from validator.certify import (
    CertifyRequest,
    FleetRequest,
    certificates_for,
    certify_fleet,
    record_report,
    report_exit_code,
)
from validator.certify import certify as run_certify
from validator.cli.options import (
    db_option,
    fanout_options,
    inventory_option,
    limit_option,
    policy_option,
)
from validator.model import NodeResult, Report
from validator.node.burnin.config import (
    DEFAULT_MEMORY_FRACTION,
    DTYPES,
    BurnConfig,
    Injection,
    parse_duration,
)
from validator.remote.transport import HostSpec
from validator.store import Store

# A simulated node's burn proves the plumbing, not a GPU: without --burn it is short.
SIMULATED_BURN_DEFAULT = "10s"
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT


@click.command()
@click.option(
    "--simulate", metavar="NAME|FILE", help="Certify a simulated node (see `gpuready scenarios`)."
)
@click.option(
    "--capture",
    "capture_dir",
    metavar="DIR",
    type=click.Path(),
    help="Certify from a captured support bundle (see `gpuready capture`).",
)
@policy_option
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report on stdout.")
@click.option(
    "--report-dir",
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Write report.json, report.html and junit.xml here.",
)
@click.option(
    "--color/--no-color",
    default=None,
    help="Colour the terminal report (default: when a terminal).",
)
@click.option(
    "--burn",
    "burn_duration",
    default="5m",
    show_default=True,
    metavar="DURATION",
    help="Burn-in length (90s, 5m); 0 skips it, and a node is then not certified. "
    f"A simulated node burns {SIMULATED_BURN_DEFAULT} unless given.",
)
@click.option(
    "--burn-backend",
    type=click.Choice(["cublas", "torch", "numpy"]),
    help="Force a burn backend (default: cublas, else torch; numpy only measures the CPU).",
)
@click.option(
    "--burn-dtype",
    type=click.Choice(list(DTYPES)),
    default="bf16",
    show_default=True,
    help="Precision of the burn-in products.",
)
@click.option("--burn-matrix-size", type=click.IntRange(min=16), help="Matrix size (default 8192).")
@click.option(
    "--burn-memory-fraction",
    type=click.FloatRange(0.01, 0.98),
    default=DEFAULT_MEMORY_FRACTION,
    show_default=True,
    help="Share of free GPU memory the result buffers fill.",
)
@click.option("--burn-inject", hidden=True, help="Test hook: KIND:GPU:ITERATION (flip or nan).")
@inventory_option("Certify every host of an Ansible inventory (INI, YAML or a script); repeatable.")
@limit_option
@click.option(
    "--transport",
    type=click.Choice(["ssh", "ansible", "local"]),
    default="ssh",
    show_default=True,
    help="How to reach the inventory's hosts.",
)
@db_option
@click.option(
    "--sign-key",
    type=click.Path(dir_okay=False),
    help="Sign certificates with HMAC-SHA256 using this key file.",
)
@fanout_options
@click.pass_context
def certify(
    ctx: click.Context,
    simulate: str | None,
    capture_dir: str | None,
    policy_path: str | None,
    as_json: bool,
    report_dir: str | None,
    color: bool | None,
    burn_duration: str,
    burn_backend: str | None,
    burn_dtype: str,
    burn_matrix_size: int | None,
    burn_memory_fraction: float,
    burn_inject: str | None,
    inventories: tuple[str, ...],
    limit: str | None,
    transport: str,
    parallel: int,
    deadline: str | None,
    accept_new_host_keys: bool,
    connect_timeout: float,
    ssh_config: str | None,
    known_hosts: str | None,
    db_path: str | None,
    sign_key: str | None,
) -> None:
    """Certify this machine (or a capture, a simulated node, or an inventory's hosts)."""
    if simulate is not None and capture_dir is not None:
        raise click.UsageError("--simulate and --capture are exclusive: choose one source of facts")
    if inventories and (simulate is not None or capture_dir is not None):
        raise click.UsageError(
            "-i certifies the inventory's hosts: set gpuready_simulate per host instead of "
            "--simulate, and certify a capture on its own"
        )
    if not inventories and limit is not None:
        raise click.UsageError("--limit needs an inventory (-i)")
    key = load_key(sign_key) if sign_key else None
    duration, note = _burn_seconds(ctx, burn_duration, simulate)
    burn = None
    if duration > 0 and capture_dir is None:
        burn = BurnConfig(
            duration_s=duration,
            dtype=burn_dtype,
            backend=burn_backend,
            matrix_size=burn_matrix_size,
            memory_fraction=burn_memory_fraction,
            inject=Injection.parse(burn_inject) if burn_inject else None,
        )
    store = Store.open(db_path)
    if inventories:
        fleet = FleetRequest(
            inventories=inventories,
            limit=limit,
            policy_path=policy_path,
            burn=burn,
            transport=transport,
            parallel=parallel,
            deadline_s=parse_duration(deadline) if deadline else None,
            accept_new_host_keys=accept_new_host_keys,
            connect_timeout_s=connect_timeout,
            ssh_config=ssh_config,
            known_hosts=known_hosts,
        )
        with store:
            report, run_id = _certify_fleet(fleet, report_dir, store)
            certificates = certificates_for(report, key)
            record_report(store, run_id, report, certificates)
    else:
        with store:
            run_id = store.start_run("certify", 1, "", sys.argv[1:])
            request = CertifyRequest(
                simulate=simulate, capture=capture_dir, policy_path=policy_path, burn=burn
            )
            report = _certify_node(request, store, run_id, note)
            certificates = certificates_for(report, key)
            record_report(store, run_id, report, certificates)
    if report_dir is not None:
        _write_certificates(certificates, report_dir)
        from validator.report.writer import write_reports

        written = write_reports(report, report_dir)
        if not as_json:
            click.echo("reports: " + ", ".join(str(path) for path in written.values()), err=True)
    if as_json:
        from validator.report.json_report import render_json

        click.echo(render_json(report), nl=False)
    else:
        from validator.report.text import render_text

        use_color = sys.stdout.isatty() if color is None else color
        click.echo(render_text(report, color=use_color), nl=False)
    if not inventories and _burn_interrupted(report):
        ctx.exit(EXIT_INTERRUPTED)
    ctx.exit(int(report_exit_code(report)))


def _burn_seconds(
    ctx: click.Context, burn_duration: str, simulate: str | None
) -> tuple[float, str | None]:
    """The --burn asked for; a simulated node's is short unless --burn was given.

    A note then says so, once the burn runs (bad input still gets its one line alone).
    """
    source = ctx.get_parameter_source("burn_duration")
    if simulate is None or source not in (None, ParameterSource.DEFAULT):
        return parse_duration(burn_duration), None
    duration = parse_duration(SIMULATED_BURN_DEFAULT)
    return duration, f"simulated node: burning {duration:g} s (give --burn to change)"


def _certify_node(request: CertifyRequest, store: Store, run_id: int, note: str | None) -> Report:
    """One node, its burn shown live; Ctrl-C before the burn ends the run with nothing judged.

    A Ctrl-C during the burn ends the burn only: the node is judged as interrupted.
    """
    from validator.cli.burn_display import BurnDisplay

    try:
        with BurnDisplay(note=note) as display:
            report = run_certify(request, progress=display)
            display.print_note()  # a burn too short for a progress tick
            return report
    except KeyboardInterrupt:
        store.finish_run(run_id, interrupted=True)
        click.echo("gpuready: interrupted: nothing was judged", err=True)
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


def _burn_interrupted(report: Report) -> bool:
    return any(node.facts.burn is not None and node.facts.burn.interrupted for node in report.nodes)


def _write_certificates(certificates: dict[str, Certificate], report_dir: str) -> None:
    from validator.certificate import certificate_to_json
    from validator.report.partial import host_result_path

    for hostname, certificate in certificates.items():
        path = host_result_path(report_dir, hostname)
        target = path.parent.parent / "certificates" / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_suffix(".tmp")
        temporary.write_text(certificate_to_json(certificate), encoding="utf-8")
        temporary.replace(target)


def _certify_fleet(
    request: FleetRequest, report_dir: str | None, store: Store
) -> tuple[Report, int]:
    """The fleet run with live progress; each host's result is recorded as it arrives."""
    from validator.cli.progress import FleetProgress
    from validator.report.partial import write_host_result

    # paramiko logs every refused connection on its own; each host's one-line
    # reason reaches the report instead.
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)

    with FleetProgress() as progress:
        run: list[int] = []  # set once the inventory is read

        def hosts_known(hosts: list[HostSpec]) -> None:
            progress.set_hosts(hosts)
            run.append(store.start_run("certify", len(hosts), "", sys.argv[1:]))

        def arrived(result: NodeResult) -> None:
            progress.result(result)
            # Committed as it arrives; the final judgement (after the fleet
            # comparison) replaces it, with its certificate.
            store.record_result(run[0], result)
            if report_dir is not None:
                write_host_result(result, report_dir)

        report = certify_fleet(request, progress=progress, on_result=arrived, on_hosts=hosts_known)
        return report, run[0]
