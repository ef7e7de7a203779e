"""The ``gpuready`` command: a click group and the one place errors become exit codes."""

from __future__ import annotations

import os
import sys
import traceback

import click

from validator import __version__
from validator.cli.capture import capture
from validator.cli.certify import certify
from validator.cli.drift import drift
from validator.cli.history import history
from validator.cli.provision import provision
from validator.cli.scenarios import scenarios
from validator.cli.slurm import slurm
from validator.cli.verify_cert import verify_cert
from validator.errors import ExitCode, GpureadyError
from validator.text import one_line


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuready")
@click.option(
    "--debug", is_flag=True, envvar="GPUREADY_DEBUG", help="Show tracebacks for internal errors."
)
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Take bare NVIDIA GPU hosts to certified, and keep them honest."""
    ctx.obj = {**(ctx.obj or {}), "debug": debug}


cli.add_command(certify)
cli.add_command(scenarios)
cli.add_command(capture)
cli.add_command(provision)
cli.add_command(history)
cli.add_command(drift)
cli.add_command(verify_cert)
cli.add_command(slurm)


def _click_problem(exc: click.ClickException) -> str:
    """click's message on one line, with where the usage is explained."""
    problem = one_line(exc.format_message())
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        return f"{problem} (see '{exc.ctx.command_path} --help')"
    return problem


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0911 - one return per error kind
    """Run the CLI; every error ends as one line on stderr and an exit code.

    Returns:
        The process exit code (also used by the console script).
    """
    args = sys.argv[1:] if argv is None else argv
    try:
        code = cli.main(
            args=args, prog_name="gpuready", standalone_mode=False, obj={"argv": list(args)}
        )
    except GpureadyError as exc:
        click.echo(f"gpuready: error: {exc}", err=True)
        return int(exc.exit_code)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except getattr(click.exceptions, "NoArgsIsHelpError", ()) as exc:  # click 8.2 and newer
        exc.show()  # a bare group or command: its help, as the user asked for nothing
        return int(ExitCode.BAD_INPUT)
    except click.ClickException as exc:
        click.echo(f"gpuready: error: {_click_problem(exc)}", err=True)
        return int(ExitCode.BAD_INPUT)
    except click.exceptions.Abort:
        click.echo("gpuready: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("gpuready: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - the edge: one line instead of a traceback
        if os.environ.get("GPUREADY_DEBUG") or "--debug" in args:
            traceback.print_exc()
        click.echo(
            f"gpuready: internal error: {type(exc).__name__}: {exc} "
            "(re-run with --debug for the traceback, and please report it)",
            err=True,
        )
        return int(ExitCode.BUG)
    return int(code) if isinstance(code, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
