"""``gpuready drift``: compare nodes with their latest certificates, and say what moved."""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import click

from validator import __version__
from validator.certificate import Certificate
from validator.certify import DEADLINE_MARGIN_S, FleetRequest, agent_request
from validator.cli.options import (
    db_option,
    fanout_options,
    inventory_option,
    limit_option,
    policy_option,
)
from validator.drift import (
    drift_exit_code,
    drift_node,
    nhc_line,
    render_drift_text,
    render_prometheus,
    slurm_reason,
    write_prometheus,
)
from validator.errors import GpureadyError
from validator.judge.policy import Policy, load_policy, policy_digest
from validator.model import NodeFacts, NodeResult, Report, Verdict
from validator.node.burnin.config import BurnConfig, parse_duration
from validator.store import Store


@dataclass(frozen=True)
class DriftOutcome:
    """Every node's drift result and whether the run was cut short."""

    results: tuple[NodeResult, ...]
    interrupted: bool = False


def drift_here(
    store: Store,
    *,
    simulate: str | None,
    policy: Policy,
    burn: BurnConfig | None,
    argv: Sequence[str],
    certificate: Certificate | None = None,
) -> DriftOutcome:
    """Collect this machine's (or a scenario's) facts and compare them with its certificate.

    The certificate is ``certificate`` when given (a file shipped to the node), else the
    store's latest for the node's hostname.

    Raises:
        BadInputError: a bad scenario.
        StoreError: the history database failed.
    """
    from validator.node.sources import collect_from

    facts: NodeFacts = collect_from(
        simulate=simulate, window_hours=policy.xid_window_hours, burn=burn
    )
    run_id = store.start_run("drift", 1, policy_digest(policy), argv)
    baseline = certificate or store.latest_certificate(facts.hostname)
    result = drift_node(facts, baseline, policy)
    store.record_result(run_id, result)
    store.finish_run(run_id)
    return DriftOutcome((result,))


def drift_fleet(
    store: Store, request: FleetRequest, *, argv: Sequence[str], quiet: bool
) -> DriftOutcome:
    """Quick facts from every inventory host over certify's fan-out, each compared as it arrives.

    Each host's result is committed to the store as it arrives; a run stopped early
    is finished as interrupted.

    Raises:
        BadInputError: a bad inventory, limit, policy file or per-host policy variable.
        StoreError: the history database failed.
    """
    # The transport factory is certify's own; see the module's closing note in the
    # report for making it public.
    from validator.certify import make_transport
    from validator.cli.progress import FleetProgress
    from validator.inventory import load_hosts, policy_for
    from validator.remote.fanout import run_fanout
    from validator.remote.transport import HostSpec

    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    base = load_policy(request.policy_path) if request.policy_path else Policy()
    hosts = load_hosts(request.inventories, request.limit)
    policies = {host.name: policy_for(host, base) for host in hosts}
    transport = make_transport(request)
    run_id = store.start_run("drift", len(hosts), policy_digest(base), argv)

    def judge(host: HostSpec, facts: NodeFacts) -> NodeResult:
        # Certificates are keyed by inventory name, as certify records them.
        return drift_node(facts, store.latest_certificate(host.name), policies[host.name])

    burn_s = request.burn.duration_s if request.burn else 0.0
    progress = None if quiet else FleetProgress()

    def arrived(result: NodeResult) -> None:
        store.record_result(run_id, result)
        if progress is not None:
            progress.result(result)

    interrupted = True  # until the fan-out returns: an error on the way leaves it so
    try:
        with progress if progress is not None else contextlib.nullcontext():
            if progress is not None:
                progress.set_hosts(hosts)
            outcome = run_fanout(
                hosts,
                transport,
                agent_request(request.burn, base),
                judge,
                parallel=request.parallel,
                deadline_s=request.deadline_s or burn_s + DEADLINE_MARGIN_S,
                progress=progress,
                on_result=arrived,
            )
        interrupted = outcome.interrupted
    finally:
        store.finish_run(run_id, interrupted=interrupted)
    return DriftOutcome(outcome.results, outcome.interrupted)


def _read_certificate(path: str, key_path: str | None) -> Certificate:
    """A certificate file, verified: an edited file (or a bad signature) is refused.

    Raises:
        CertificateError: unreadable, not a certificate, edited, or signed and no key given.
    """
    from validator.certificate import (
        CertificateError,
        certificate_from_json,
        load_key,
        verify_certificate,
    )
    from validator.cli.verify_cert import read_certificate_text

    key = load_key(key_path) if key_path is not None else None
    try:
        cert = certificate_from_json(read_certificate_text(path))
    except CertificateError as exc:
        raise CertificateError(f"{path}: {exc}") from None
    verify_certificate(cert, key)
    return cert


def _check_usage(params: dict[str, object]) -> None:
    """Refuse option combinations that cannot mean anything, naming the fix."""
    inventories = params["inventories"]
    transport = params["transport"]
    if params["as_json"] and params["nhc"]:
        raise click.UsageError("--json and --nhc both print on stdout: choose one")
    if inventories and params["simulate"] is not None:
        raise click.UsageError(
            "-i checks the inventory's hosts: set gpuready_simulate per host instead of --simulate"
        )
    if inventories and params["certificate_path"] is not None:
        raise click.UsageError("--certificate is for one machine: each host's comes from --db")
    if params["key_path"] is not None and params["certificate_path"] is None:
        raise click.UsageError("--sign-key checks a --certificate file: give one")
    if not inventories and params["limit"] is not None:
        raise click.UsageError("--limit needs an inventory (-i)")
    if not inventories and transport in ("ssh", "ansible"):
        raise click.UsageError(f"--transport {transport} needs an inventory (-i)")


def _argv(ctx: click.Context) -> list[str]:
    """The options as given, for the history (drift takes no secret)."""
    given = []
    for param in ctx.command.params:
        name = param.name or ""
        value = ctx.params.get(name)
        if ctx.get_parameter_source(name) is click.core.ParameterSource.DEFAULT:
            continue
        if value in (None, False, ()):
            continue
        flag = max(param.opts, key=len)
        for item in value if isinstance(value, tuple) else (value,):
            given += [flag] if item is True else [flag, str(item)]
    return ["gpuready", "drift", *given]


def _slurm(results: Sequence[NodeResult]) -> None:
    """Drain drifted nodes, resume the ones gpuready drained that are clean again."""
    from validator.slurm import Action, drain, resume_if_ours

    for result in results:
        try:
            if result.verdict is Verdict.NOT_CERTIFIED:
                action = drain(result.hostname, slurm_reason(result))
            elif result.verdict is Verdict.CERTIFIED:
                action = resume_if_ours(result.hostname)
            else:
                continue  # could not be checked: neither drift to drain for, nor clean
        except GpureadyError as exc:
            click.echo(f"gpuready: slurm: {result.hostname}: {exc}", err=True)
            continue
        if action in (Action.DRAINED, Action.UPDATED, Action.RESUMED, Action.LEFT_ALONE):
            note = " (drained by someone else)" if action is Action.LEFT_ALONE else ""
            click.echo(f"gpuready: slurm: {result.hostname}: {action.value}{note}", err=True)


@click.command()
@inventory_option("Check every host of an Ansible inventory; repeatable (default: this machine).")
@limit_option
@click.option(
    "--transport",
    type=click.Choice(["ssh", "ansible", "local"]),
    help="How to reach the inventory's hosts (default ssh; local checks this machine).",
)
@click.option(
    "--burn",
    "burn_duration",
    default="0",
    show_default=True,
    metavar="DURATION",
    help="Also run a burn-in this long (90s, 5m) and compare its speed; 0 skips it.",
)
@db_option
@policy_option
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report on stdout.")
@click.option(
    "--prom-file",
    metavar="PATH",
    type=click.Path(dir_okay=False),
    help="Write a Prometheus textfile (node_exporter textfile collector), atomically.",
)
@click.option(
    "--nhc",
    is_flag=True,
    help="Print one line prefixed 'gpuready:' for Slurm's HealthCheckProgram; exit 1 on drift.",
)
@click.option(
    "--slurm-drain",
    is_flag=True,
    help="Drain drifted nodes (reason 'gpuready: ...'); resume only nodes gpuready drained.",
)
@click.option(
    "--simulate", metavar="NAME|FILE", help="Check a simulated node (see `gpuready scenarios`)."
)
@click.option(
    "--certificate",
    "certificate_path",
    metavar="FILE",
    help="Compare this machine with this certificate file instead of the store's latest.",
)
@click.option(
    "--sign-key",
    "key_path",
    metavar="KEYFILE",
    help="Key the --certificate file was signed with (required for a signed one).",
)
@fanout_options
@click.pass_context
def drift(
    ctx: click.Context,
    inventories: tuple[str, ...],
    limit: str | None,
    transport: str | None,
    burn_duration: str,
    db_path: str | None,
    policy_path: str | None,
    as_json: bool,
    prom_file: str | None,
    nhc: bool,
    slurm_drain: bool,
    simulate: str | None,
    certificate_path: str | None,
    key_path: str | None,
    parallel: int,
    deadline: str | None,
    accept_new_host_keys: bool,
    connect_timeout: float,
    ssh_config: str | None,
    known_hosts: str | None,
) -> None:
    """Compare nodes with their latest certificates: exit 0 no drift, 1 drift, 3 none checked."""
    _check_usage(ctx.params)
    duration = parse_duration(burn_duration)
    burn = BurnConfig(duration_s=duration) if duration > 0 else None
    argv = _argv(ctx)
    certificate = (
        _read_certificate(certificate_path, key_path) if certificate_path is not None else None
    )
    with Store.open(db_path) as store:
        if inventories:
            request = FleetRequest(
                inventories=inventories,
                limit=limit,
                policy_path=policy_path,
                burn=burn,
                transport=transport or "ssh",
                parallel=parallel,
                deadline_s=parse_duration(deadline) if deadline else None,
                accept_new_host_keys=accept_new_host_keys,
                connect_timeout_s=connect_timeout,
                ssh_config=ssh_config,
                known_hosts=known_hosts,
            )
            outcome = drift_fleet(store, request, argv=argv, quiet=nhc)
        else:
            policy = load_policy(policy_path) if policy_path else Policy()
            outcome = drift_here(
                store,
                simulate=simulate,
                policy=policy,
                burn=burn,
                argv=argv,
                certificate=certificate,
            )
    now = datetime.datetime.now(datetime.timezone.utc)
    results = outcome.results
    if prom_file is not None:
        write_prometheus(prom_file, render_prometheus(results, now=now))
    if slurm_drain:
        _slurm(results)
    if nhc:
        code, line = nhc_line(results)
        click.echo(line)
        ctx.exit(code)
    if as_json:
        from validator.report.json_report import render_json

        report = Report(
            generated_at=now.isoformat(timespec="seconds"),
            tool_version=__version__,
            nodes=results,
        )
        click.echo(render_json(report), nl=False)
    else:
        click.echo(render_drift_text(results), nl=False)
    ctx.exit(int(drift_exit_code(results)))
