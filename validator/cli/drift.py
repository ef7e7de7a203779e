"""``gpuready drift``: compare nodes with their latest certificates, and say what moved."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from validator.certificate import Certificate
from validator.cli.certify import tell
from validator.cli.help_sections import SectionedCommand
from validator.cli.options import (
    BURN_DURATION,
    TEXT,
    NonEmptyPath,
    command_line,
    db_option,
    fanout_options,
    interconnect_option,
    inventory_option,
    limit_option,
    policy_option,
    reach_settings,
)
from validator.cli.slurm_options import slurm_options, slurm_settings, tell_slurm_steps
from validator.model import TransportName
from validator.node.burnin.burn_config import BurnConfig, parse_duration
from validator.service.drift_service import DriftOutcome, DriftRequest, run_drift
from validator.signing import SealKey
from validator.store import Store


@click.command(cls=SectionedCommand)
@inventory_option("Check every host of an Ansible inventory; repeatable (default: this machine).")
@limit_option
@click.option(
    "--transport",
    type=click.Choice([name.value for name in TransportName]),
    help="How to reach the inventory's hosts (default ssh; local checks this machine).",
)
@click.option(
    "--burn",
    "burn_duration",
    type=BURN_DURATION,
    default="0",
    show_default=True,
    metavar="DURATION",
    help="Also run a burn-in this long (90s, 5m) and compare its speed; 0 skips it.",
)
@interconnect_option(
    False,
    "Also measure what joins the GPUs (copy, peer and all-reduce bandwidth) where they "
    "have NVLink (everywhere with a policy's interconnect: true) and compare it with the "
    "certificate's figures; off by default: add it to a weekly drift.",
)
@db_option
@policy_option
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report on stdout.")
@click.option(
    "--prom-file",
    metavar="PATH",
    type=NonEmptyPath(dir_okay=False),
    help="Write a Prometheus textfile (node_exporter textfile collector), atomically.",
)
@click.option(
    "--nhc",
    is_flag=True,
    help="Print one line prefixed 'gpuready:' for Slurm's HealthCheckProgram: exit 0 only "
    "when the node matches its certificate; 1 on drift, no certificate or not checked "
    "(NHC reads any non-zero as a failed check; the README's table lists every code).",
)
@click.option(
    "--slurm-drain",
    is_flag=True,
    help="Drain drifted nodes (reason 'gpuready: ...'); resume only nodes gpuready drained.",
)
@click.option(
    "--simulate",
    type=TEXT,
    metavar="NAME|FILE",
    help="Check a simulated node (see `gpuready scenarios`).",
)
@click.option(
    "--certificate",
    "certificate_path",
    type=NonEmptyPath(),
    metavar="FILE",
    help="Compare this machine with this certificate file instead of the store's latest.",
)
@click.option(
    "--certificates",
    "certificates_dir",
    type=NonEmptyPath(exists=True, file_okay=False),
    metavar="DIR",
    help="Read-only folder of <host>.json certificates (certify --report-dir's "
    "certificates/): a host's baseline when --db holds none of it.",
)
@click.option(
    "--sign-key",
    "key_path",
    type=NonEmptyPath(),
    metavar="KEYFILE",
    help="Key the certificates were signed with: every baseline must carry its signature "
    "(required for a signed --certificate file). An Ed25519 key's public half is enough.",
)
@click.option(
    "--public-key",
    "public_key_path",
    type=NonEmptyPath(),
    metavar="FILE",
    help="Ed25519 public key (ssh-ed25519 line or PEM) the certificates were signed with: "
    "every baseline must carry its signature.",
)
@fanout_options
@slurm_options
@click.pass_context
def drift(ctx: click.Context, /, **options: Any) -> None:  # noqa: ANN401 - click's options
    """Compare nodes with their latest certificates: exit 0 no drift, 1 drift, 3 none checked.

    With --nhc, a node that cannot be shown to match a certificate (never certified
    included) exits 1, not 3.
    """
    request = _request(ctx, options)
    with Store.open(options["db_path"], defer_create=True) as store:
        tell(store.take_notices())  # pending runs imported: said before the run starts
        outcome = _run(request, store, quiet=options["nhc"])
        notices = store.take_notices()  # the run spooled to a pending file, or not recorded
    code = _render(outcome, as_json=options["as_json"], nhc=options["nhc"])
    tell(notices)  # after the verdict, which a store that cannot be written never holds back
    ctx.exit(code)


def _request(ctx: click.Context, options: dict[str, Any]) -> DriftRequest:
    """The request the options make; a --certificate file is read and verified first."""
    from validator.signing import load_key, load_public_key

    slurm = slurm_settings(options, manage_drains=options["slurm_drain"])
    if slurm is not None and not slurm.wait:
        raise click.UsageError("drift --slurm compares as results arrive: leave out --no-wait")
    _drop_unused_settings(ctx, options, slurm=slurm is not None)
    _check_usage(options, slurm=slurm is not None)
    duration = parse_duration(options["burn_duration"])
    path, key_path = options["certificate_path"], options["key_path"]
    public_path = options["public_key_path"]
    if key_path is not None and public_path is not None:
        raise click.UsageError("give --sign-key or --public-key, not both")
    key = load_key(key_path) if key_path is not None else None
    if public_path is not None:
        key = load_public_key(public_path)
    return DriftRequest(
        simulate=options["simulate"],
        certificate=_read_certificate(path, key) if path is not None else None,
        sign_key=key,
        policy_path=options["policy_path"],
        burn=BurnConfig(duration_s=duration) if duration > 0 else None,
        reach=reach_settings(options, options["transport"] or "ssh", slurm),
        deadline_s=options.pop("deadline"),  # seconds (Deadline), None when not given
        prom_file=options["prom_file"],
        slurm_drain=options["slurm_drain"],
        measure_interconnect=options["interconnect"],
        certificates_dir=options["certificates_dir"],
        argv=command_line(ctx),
    )


def _drop_unused_settings(ctx: click.Context, options: dict[str, Any], *, slurm: bool) -> None:
    """Settings (config files, GPUREADY_*) this run cannot use are left out, not refused.

    ``transport: ssh`` is for fleets, a ``certificates`` folder or a ``sign_key`` gives
    way to a typed --certificate or --public-key: the combination rules are about what
    was typed, and a node's drift (NHC's) must not fail on a fleet's settings.
    """

    def typed(name: str) -> bool:
        return ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE

    if not typed("transport") and not options["inventories"] and not slurm:
        options["transport"] = None
    if not typed("certificates_dir") and options["certificate_path"] is not None:
        options["certificates_dir"] = None
    if not typed("key_path") and options["public_key_path"] is not None:
        options["key_path"] = None


def _check_usage(options: dict[str, Any], *, slurm: bool = False) -> None:
    """Refuse option combinations that cannot mean anything, naming the fix."""
    inventories, transport = options["inventories"], options["transport"]
    if slurm and (options["simulate"] is not None or options["certificate_path"] is not None):
        raise click.UsageError(
            "--slurm checks the cluster's nodes: set gpuready_simulate per host in an "
            "inventory (-i); each node's certificate comes from --db"
        )
    if options["as_json"] and options["nhc"]:
        raise click.UsageError("--json and --nhc both print on stdout: choose one")
    if inventories and options["simulate"] is not None:
        raise click.UsageError(
            "-i checks the inventory's hosts: set gpuready_simulate per host instead of --simulate"
        )
    if options["certificate_path"] is not None and options["certificates_dir"] is not None:
        raise click.UsageError("give --certificate FILE or --certificates DIR, not both")
    if inventories and options["certificate_path"] is not None:
        raise click.UsageError("--certificate is for one machine: each host's comes from --db")
    if not inventories and options["limit"] is not None:
        raise click.UsageError("--limit needs an inventory (-i)")
    if not inventories and not slurm and transport in ("ssh", "ansible"):
        raise click.UsageError(f"--transport {transport} needs an inventory (-i)")
    if options["prom_file"] is not None:
        from validator.report.prometheus import check_textfile

        check_textfile(options["prom_file"])


def _read_certificate(path: str, key: SealKey | None) -> Certificate:
    """A certificate file, verified: an edited file (or a bad signature) is refused.

    Raises:
        CertificateError: unreadable, not a certificate, edited, or signed and no key given.
    """
    from validator.certificate import CertificateError, certificate_from_json, verify_certificate
    from validator.cli.verify_cert import read_certificate_text

    try:
        cert = certificate_from_json(read_certificate_text(path))
    except CertificateError as exc:
        raise CertificateError(f"{path}: {exc}") from None
    verify_certificate(cert, key)
    return cert


def _run(request: DriftRequest, store: Store, *, quiet: bool) -> DriftOutcome:
    """The run; a fleet's under its live display unless only one line is to be printed."""
    from validator.cli.progress import FleetProgress

    if not request.reach.is_fleet or quiet:
        return run_drift(request, store)
    with FleetProgress() as display:
        return run_drift(request, store, fleet_display=display)


def _render(outcome: DriftOutcome, *, as_json: bool, nhc: bool) -> int:
    """Print what Slurm was told (stderr), then the results (stdout); the exit code."""
    tell_slurm_steps(outcome.slurm)
    if nhc:
        from validator.drift import nhc_line

        code, line = nhc_line(
            outcome.results, interrupted=outcome.interrupted, recorded=outcome.recorded
        )
        click.echo(line)
        return code
    if as_json:
        from validator.report.json_report import render_json

        click.echo(render_json(outcome.report), nl=False)
    else:
        from validator.report.drift_text import render_drift_text

        click.echo(render_drift_text(outcome.results), nl=False)
    return int(outcome.exit_code)
