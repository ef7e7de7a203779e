"""``gpuready certify``: judge this machine, a capture or a scenario."""

from __future__ import annotations

import sys

import click

from validator.certify import CertifyRequest, report_exit_code
from validator.certify import certify as run_certify
from validator.node.burnin.config import (
    DEFAULT_MEMORY_FRACTION,
    DTYPES,
    BurnConfig,
    Injection,
    parse_duration,
)


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
@click.option(
    "--policy",
    "policy_path",
    metavar="FILE",
    type=click.Path(),
    help="Policy YAML overriding the defaults.",
)
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
    help="Burn-in length (90s, 5m); 0 skips it, and a node is then not certified.",
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
) -> None:
    """Certify this machine (or a capture, or a simulated node) against its GPU model."""
    if simulate is not None and capture_dir is not None:
        raise click.UsageError("--simulate and --capture are exclusive: choose one source of facts")
    duration = parse_duration(burn_duration)
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
    report = run_certify(
        CertifyRequest(simulate=simulate, capture=capture_dir, policy_path=policy_path, burn=burn)
    )
    if report_dir is not None:
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
    ctx.exit(int(report_exit_code(report)))
