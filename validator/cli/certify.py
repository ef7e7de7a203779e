"""``gpuready certify``: judge this machine, a capture, a scenario or an inventory's hosts."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import click
from click.core import ParameterSource

from validator.cli.help_sections import SectionedCommand
from validator.cli.log_tap import log_line
from validator.cli.options import (
    TEXT,
    BoundedInt,
    BurnOptions,
    NonEmptyPath,
    burn_options,
    command_line,
    db_option,
    fanout_options,
    interconnect_option,
    inventory_option,
    json_form_option,
    limit_option,
    policy_option,
    reach_settings,
    report_dir_option,
    sign_key_option,
    use_color,
)
from validator.cli.slurm_options import (
    slurm_options,
    slurm_settings,
    tell_slurm_steps,
    tell_submitted,
)
from validator.error_tree import ExitCode
from validator.model import TransportName
from validator.node.burnin.burn_config import parse_duration
from validator.node.gpu_choice import parse_gpus
from validator.safe_text import one_line
from validator.service.certify_service import CertifyOutcome, CertifyRequest, run_certify
from validator.store import Store

# A simulated node's burn proves the plumbing, not a GPU: without --burn it is short.
SIMULATED_BURN_DEFAULT = "10s"
# Each host's line comes as it finishes; the fleet's comparison (fleet.* checks) only
# once all are in, so the report's counts may add to a host's line.
# Not "gpuready: ...": that prefix is for errors and notices, which scripts grep for.
FLEET_NOTE = (
    "each host as it finishes, judged on its own; the report at the end adds the fleet "
    "comparison (fleet.* checks)"
)


@click.command(cls=SectionedCommand)
@click.option(
    "--simulate",
    type=TEXT,
    metavar="NAME|FILE",
    help="Certify a simulated node (see `gpuready scenarios`).",
)
@click.option(
    "--capture",
    "capture_dir",
    metavar="DIR",
    type=NonEmptyPath(),
    help="Certify from a captured support bundle (see `gpuready capture`).",
)
@policy_option
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report on stdout.")
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    help="Print the summary alone: a fleet's counts and the nodes to act on, one node's "
    "verdict line; no progress lines.",
)
@json_form_option
@report_dir_option
@click.option(
    "--prom-file",
    metavar="FILE",
    type=NonEmptyPath(dir_okay=False),
    help="Also write the results as a Prometheus textfile for node_exporter's textfile "
    "collector (written atomically): each node's verdict and each GPU's figures.",
)
@click.option(
    "--color/--no-color",
    default=None,
    help="Colour the terminal report (default: when a terminal, and NO_COLOR is not set).",
)
@burn_options(
    "5m",
    "Burn-in length (90s, 5m, 1h30m); 0 skips it, and a node is then not certified. "
    f"A simulated node burns {SIMULATED_BURN_DEFAULT} unless given.",
)
@click.option(
    "--dcgm-level",
    type=BoundedInt(0, 4),
    default=None,
    metavar="N",
    help="Run DCGM's diagnostic `dcgmi diag -r N` after the burn-in and judge each test "
    "(0-4; 0 runs none), overriding the policy's dcgm_level. A capture's recorded DCGM "
    "output is judged whatever the level.",
)
@interconnect_option(
    None,
    "Measure what joins the GPUs after the burn-in: H2D, D2H and HBM copy bandwidth per "
    "GPU, the peer matrix and NCCL all-reduce, and judge them; --no-interconnect measures "
    "none. Overrides the policy's interconnect (default: measured where two or more GPUs "
    "have NVLink). A capture's recorded nvbandwidth and all_reduce_perf output is judged "
    "whenever it is there.",
)
@click.option(
    "--container-image",
    type=TEXT,
    metavar="IMAGE",
    callback=lambda _ctx, _param, value: _image(value),
    help="Also run `nvidia-smi -L` in a container of IMAGE (docker or podman, with CDI's "
    "--device nvidia.com/gpu=all where set up, else --gpus all) and check it lists every "
    "GPU. Overrides the policy's container.image; none is run unless one is named. The "
    "image must be there or pullable.",
)
@click.option(
    "--gpus",
    type=TEXT,
    metavar="LIST",
    help="Certify only these GPUs: indexes, PCI bus ids or UUIDs, comma-separated (0,3; "
    "18:00.0; GPU-...). Every GPU is still read for the node's identity; the report and "
    "the certificate name the GPUs certified.",
)
@click.option(
    "--allow-busy",
    is_flag=True,
    help="Burn and measure GPUs that have other processes (or a node with another Slurm "
    "job) on them; the report says so. Without it such a node is UNKNOWN and nothing is burned.",
)
@inventory_option("Certify every host of an Ansible inventory (INI, YAML or a script); repeatable.")
@limit_option
@click.option(
    "--transport",
    type=click.Choice([name.value for name in TransportName]),
    default="ssh",
    show_default=True,
    help="How to reach the inventory's hosts.",
)
@db_option
@sign_key_option
@fanout_options
@click.option(
    "--cross-node",
    type=TEXT,
    metavar="KINDS",
    help="After the per-node stage, measure the nodes it certified across the fabric: rdma "
    "(ib_write_bw/ib_write_lat per HCA, pair by pair, GPUDirect on the nearest GPU), nccl "
    "(all_reduce_perf/alltoall_perf in groups, also IB-only), or rdma,nccl. A slow group "
    "is bisected to the slow node or link, which is then not certified. Needs a fleet "
    "(-i or --slurm). Default: not run.",
)
@click.option(
    "--fabric",
    type=click.Choice(["ndr-400-ib", "hdr-200-ib", "roce-400"]),
    default=None,
    help="The fabric whose floors --cross-node judges by (default: the one the nodes' "
    "catalog row names).",
)
@slurm_options
@click.option(
    "--slurm-drain",
    is_flag=True,
    help="After judging, drain the nodes that failed (reason 'gpuready: ...', their failing "
    "checks) and resume the ones gpuready drained that now pass; with --slurm, nodes "
    "gpuready drained are re-tested in a quarantine reservation.",
)
@click.pass_context
def certify(ctx: click.Context, /, **options: Any) -> None:  # noqa: ANN401 - click's options
    """Certify this machine (or a capture, a simulated node, or an inventory's hosts)."""
    request, note = _request(ctx, options)
    if request.reach.slurm is not None and not request.reach.slurm.wait:
        from validator.service.collect_and_judge import submit_fleet

        tell_submitted(submit_fleet(request.fleet()))
        ctx.exit(int(ExitCode.OK))
    # Created by the first record: bad input found before anything is measured leaves no file.
    with Store.open(options["db_path"], defer_create=True) as store:
        tell(store.take_notices())  # pending runs imported: said before the run starts
        outcome = run_with_display(request, store, note, quiet=options["quiet"])
    render_outcome(
        outcome,
        as_json=options["as_json"],
        color=options["color"],
        json_form=request.json_form,
        quiet=options["quiet"],
    )
    tell_slurm_steps(outcome.slurm)
    tell(outcome.notices)
    for problem in outcome.problems:  # measured, but not stored: exit 3
        click.echo(f"gpuready: error: {one_line(problem)}", err=True)
    ctx.exit(int(outcome.exit_code))


def tell(notices: Iterable[str]) -> None:
    """The store's notices (a run spooled, pending runs imported), one stderr line each."""
    for notice in notices:
        click.echo(f"gpuready: {one_line(notice)}", err=True)
        log_line("info", notice)  # kept by --log-file, when given


def _request(ctx: click.Context, options: dict[str, Any]) -> tuple[CertifyRequest, str | None]:
    """The request the options make, and a note for a shortened simulated burn."""
    burn_opts = BurnOptions.pop(options)
    simulate, capture = options["simulate"], options["capture_dir"]
    slurm_drain = options.pop("slurm_drain")
    slurm = slurm_settings(options, manage_drains=slurm_drain)
    _check_sources(simulate, capture, options["inventories"], options["limit"], slurm is not None)
    duration, note = _burn_seconds(ctx, burn_opts.burn_duration, simulate)
    dcgm_level = options.pop("dcgm_level")
    # Only when given: the policy's level stands otherwise.
    dcgm = {} if dcgm_level is None else {"dcgm_level": dcgm_level}
    interconnect = options.pop("interconnect")  # None: the policy's own
    gpus = options.pop("gpus")
    cross_node = _cross_node(options, slurm is not None)
    request = CertifyRequest(
        simulate=simulate,
        capture=capture,
        policy_path=options["policy_path"],
        burn=burn_opts.config(duration) if capture is None else None,
        reach=reach_settings(options, options["transport"], slurm),
        deadline_s=options.pop("deadline"),  # seconds (Deadline), None when not given
        report_dir=options["report_dir"],
        prom_file=options["prom_file"],
        json_form=options["json_form"],
        sign_key=options["sign_key"],
        argv=command_line(ctx),
        interconnect=interconnect,
        slurm_drain=slurm_drain,
        gpus=() if gpus is None else parse_gpus(gpus),
        allow_busy=options.pop("allow_busy"),
        container_image=options.pop("container_image"),
        cross_node=cross_node,
        fabric=options.pop("fabric"),
        **dcgm,
    )
    return request, note


def _cross_node(options: dict[str, Any], slurm: bool) -> tuple[str, ...]:
    """``--cross-node``'s kinds (() when not asked); refused for one node."""
    text = options.pop("cross_node")
    if text is None:
        if options["fabric"] is not None:
            raise click.UsageError("--fabric judges --cross-node: give --cross-node too")
        return ()
    if not options["inventories"] and not slurm:
        raise click.UsageError("--cross-node needs a fleet: -i or --slurm")
    from validator.error_tree import BadInputError
    from validator.service.fabric_stage import parse_kinds

    try:
        return parse_kinds(text)
    except BadInputError as exc:
        raise click.BadParameter(str(exc), param_hint="--cross-node") from None


def _image(value: str | None) -> str | None:
    """``--container-image``'s value, refused when it is no image reference (or an option)."""
    import re

    from validator.judge.container_policy import IMAGE_WANTED
    from validator.model import IMAGE_PATTERN

    if value is not None and not re.fullmatch(IMAGE_PATTERN, value):
        raise click.BadParameter(f"{IMAGE_WANTED}, got {value!r}")
    return value


def _check_sources(
    simulate: str | None,
    capture: str | None,
    inventories: tuple[str, ...],
    limit: str | None,
    slurm: bool = False,
) -> None:
    if slurm and (simulate is not None or capture is not None):
        raise click.UsageError(
            "--slurm certifies the cluster's nodes: set gpuready_simulate per host in an "
            "inventory (-i) instead of --simulate, and certify a capture on its own"
        )
    if simulate is not None and capture is not None:
        raise click.UsageError("--simulate and --capture are exclusive: choose one source of facts")
    if inventories and (simulate is not None or capture is not None):
        raise click.UsageError(
            "-i certifies the inventory's hosts: set gpuready_simulate per host instead of "
            "--simulate, and certify a capture on its own"
        )
    if not inventories and limit is not None:
        raise click.UsageError("--limit needs an inventory (-i)")


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


def run_with_display(
    request: CertifyRequest, store: Store, note: str | None, *, quiet: bool = False
) -> CertifyOutcome:
    """The run under its live display: a fleet's table, or one node's burn.

    Ctrl-C before a single node's burn ends the run with nothing judged; one
    during the burn ends the burn, which is judged as interrupted. ``quiet``: the
    live view still draws on a terminal (it leaves nothing behind), but no plain
    progress lines are printed elsewhere.
    """
    from validator.cli.burn_display import BurnDisplay
    from validator.cli.progress import FleetProgress

    if request.reach.is_fleet:
        burn_s = request.burn.duration_s if request.burn is not None else 0.0
        fleet = FleetProgress(quiet=quiet, burn_s=burn_s, deadline_s=request.deadline_s)
        fleet.note = FLEET_NOTE
        with fleet:
            return run_certify(request, store, fleet_display=fleet)
    try:
        with BurnDisplay(note=note, quiet=quiet) as display:
            outcome = run_certify(request, store, burn_progress=display)
            display.print_note()  # a burn too short for a progress tick
            return outcome
    except KeyboardInterrupt:
        click.echo("gpuready: interrupted: nothing was judged", err=True)
        raise click.exceptions.Exit(int(ExitCode.INTERRUPTED)) from None


def render_outcome(
    outcome: CertifyOutcome,
    *,
    as_json: bool,
    color: bool | None,
    json_form: str = "auto",
    quiet: bool = False,
) -> None:
    """The report on stdout (JSON or text), and where the report files went on stderr.

    JSON is rendered whole before any of it is printed (a render error prints
    nothing); a fleet's summary names each host's full result file when the report
    directory holds one (see validator.report.writer).
    """
    for node in outcome.report.nodes:  # --log-file or --verbose: each node's verdict, one line
        log_line("info", f"{node.hostname} {node.verdict.value}: {node.summary}")
    if outcome.written and not as_json and not quiet:
        click.echo("reports: " + ", ".join(str(p) for p in outcome.written.values()), err=True)
    if as_json:
        from validator.report.json_report import json_chunks

        # All pieces first: a render error (a NaN) mid-fleet must not leave half a
        # document on stdout for a pipe to take as the report.
        chunks = list(json_chunks(outcome.report, json_form, _result_files(outcome)))
        for chunk in chunks:
            click.echo(chunk, nl=False)
        return
    from validator.report.terminal import render_text

    click.echo(render_text(outcome.report, color=use_color(color), quiet=quiet), nl=False)


def _result_files(outcome: CertifyOutcome) -> Callable[[str], str | None] | None:
    """Each host's full-result file under the report directory, when one was written."""
    json_path = outcome.written.get("json") if outcome.written else None
    if json_path is None:
        return None
    from validator.report.writer import result_file

    folder = json_path.parent

    def where(hostname: str) -> str | None:
        path = folder / result_file(hostname)
        return str(path) if path.is_file() else None

    return where
