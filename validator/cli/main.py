"""The ``gpuready`` command: a click group and the one place errors become exit codes.

Subcommands are imported when run, not at start-up: ``certify --simulate --json``
should not pay for the provisioning, drift and fan-out code (and rich) it never uses.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import click

from validator import __version__
from validator.cli.log_tap import log_line
from validator.error_tree import ExitCode, GpureadyError
from validator.safe_text import one_line


@dataclass(frozen=True)
class LazyCommand:
    """Where a subcommand lives, and the short help ``gpuready --help`` shows for it.

    ``short_help`` is the command's own (``get_short_help_str`` without a limit);
    a test holds the two equal, so the listing never drifts from the command.
    """

    module: str
    attribute: str
    short_help: str


COMMANDS: dict[str, LazyCommand] = {
    "capture": LazyCommand(
        "validator.cli.capture",
        "capture",
        "Write nvidia-smi, nvcc, cuDNN and kernel-log outputs of this host to DIRECTORY.",
    ),
    "certify": LazyCommand(
        "validator.cli.certify",
        "certify",
        "Certify this machine (or a capture, a simulated node, or an inventory's hosts).",
    ),
    "config": LazyCommand(
        "validator.cli.show_config",
        "config",
        "Show the effective settings and where each came from (file, variable, default).",
    ),
    "drift": LazyCommand(
        "validator.cli.drift",
        "drift",
        "Compare nodes with their latest certificates: exit 0 no drift, 1 drift, 3 none checked.",
    ),
    "history": LazyCommand(
        "validator.cli.history",
        "history",
        "Show past certify and drift runs and their verdicts, for every host or HOST.",
    ),
    "init": LazyCommand(
        "validator.cli.init_command",
        "init",
        "Write an example inventory and the version pins into DIRECTORY, to edit, then provision.",
    ),
    "provision": LazyCommand(
        "validator.cli.provision",
        "provision",
        "Install the pinned NVIDIA driver, CUDA Toolkit and cuDNN on an inventory's hosts.",
    ),
    "scenarios": LazyCommand(
        "validator.cli.scenarios",
        "scenarios",
        "List the built-in scenarios for --simulate, one a line, name first.",
    ),
    "slurm": LazyCommand("validator.cli.slurm", "slurm", "Certification jobs submitted to Slurm."),
    "verify-cert": LazyCommand(
        "validator.cli.verify_cert",
        "verify_cert",
        "Check FILE's digest (any edit fails) and, with a key, its signature; say what it proves.",
    ),
}


def load_command(entry: LazyCommand) -> click.Command:
    """Import the module of ``entry`` and return its click command."""
    command = getattr(importlib.import_module(entry.module), entry.attribute)
    if not isinstance(command, click.Command):  # a table entry naming the wrong thing is our bug
        raise TypeError(f"{entry.module}.{entry.attribute} is not a click command")
    return command


class LazyCommands(MutableMapping[str, click.Command]):
    """The group's commands by name: those of a table imported on first access.

    A mapping rather than a plain dict so that ``cli.commands`` keeps meaning
    every command (tests and the hostile table read it), while listing names costs
    no import. Commands added or replaced at run time stand over the table's.
    """

    def __init__(self, table: dict[str, LazyCommand]) -> None:
        self._table = dict(table)
        self._loaded: dict[str, click.Command] = {}

    def lazy_entry(self, name: str) -> LazyCommand | None:
        """The table's entry for ``name`` while it is not imported yet, else None."""
        return None if name in self._loaded else self._table.get(name)

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            self._loaded[name] = load_command(self._table[name])
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._loaded and name not in self._table:
            raise KeyError(name)
        self._loaded.pop(name, None)
        self._table.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._loaded or name in self._table

    def __iter__(self) -> Iterator[str]:
        yield from self._table
        yield from (name for name in self._loaded if name not in self._table)

    def __len__(self) -> int:
        return len(self._table.keys() | self._loaded.keys())


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when one is run or asked for.

    ``--help`` lists them from the table's short help, importing none.
    """

    commands: LazyCommands

    def __init__(self, *args: Any, table: dict[str, LazyCommand], **kwargs: Any) -> None:  # noqa: ANN401 - click's own arguments, passed through
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(table)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, sorted, without importing any."""
        return sorted(self.commands)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, imported now if it was not yet; None if unknown."""
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands section of ``--help``, as click writes it, from the table."""
        names = self.list_commands(ctx)
        if not names:
            return
        # click's own spacing rule, so the listing reads as it did with every command loaded
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            entry = self.commands.lazy_entry(name)
            if entry is not None:
                # A stand-in with the same help shortens it exactly as click shortens the real one
                stand_in = click.Command(name, help=entry.short_help)
                rows.append((name, stand_in.get_short_help_str(limit)))
                continue
            command = self.commands[name]
            if not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=LazyGroup, table=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, prog_name="gpuready")
@click.option(
    "--debug", is_flag=True, envvar="GPUREADY_DEBUG", help="Show tracebacks for internal errors."
)
@click.option(
    "--log-file",
    metavar="FILE",
    envvar="GPUREADY_LOG_FILE",
    help="Append timestamped lines (UTC) of what the run did to FILE ($GPUREADY_LOG_FILE).",
)
@click.option(
    "-v", "--verbose", is_flag=True, help="Also print those lines on stderr, with more detail."
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, log_file: str | None, verbose: bool) -> None:
    """Take bare NVIDIA GPU hosts to certified, and keep them honest.

    Settings (history database, spool, sign key, policy, report directory, how hosts are
    reached) may come from /etc/gpuready/config.yaml, ~/.config/gpuready/config.yaml and
    GPUREADY_* variables; the command line wins. See `gpuready config`.
    """
    from validator.cli import settings

    ctx.obj = {**(ctx.obj or {}), "debug": debug}
    path = _command_path(ctx)
    if log_file is not None or verbose:
        _start_log(ctx, path, log_file, verbose)
    found = settings.effective()
    ctx.default_map = settings.default_map(found, path)
    if log_file is not None or verbose:
        from validator.cli.run_log import log

        for key, value in found.values.items():
            if value.source is not settings.Source.DEFAULT:
                log.debug(
                    "setting %s=%s from %s %s", key, value.value, value.source.value, value.where
                )


_GROUP_VALUE_OPTIONS = frozenset({"--log-file"})  # gpuready's options that take a value


def _command_path(ctx: click.Context) -> tuple[str, ...]:
    """The command being run, as names: ``("certify",)``, ``("slurm", "collect")``.

    Read from the command line as given (click has not parsed the subcommand's part
    yet): the settings a group's subcommand takes must be in place before its context is
    made. Without the command line (a test's CliRunner) only the first name is known.
    """
    name = ctx.invoked_subcommand
    if name is None:
        return ()
    argv = ctx.obj.get("argv") if isinstance(ctx.obj, dict) else None
    words = list(argv) if isinstance(argv, list) else []
    at = 0
    while at < len(words) and words[at].startswith("-"):  # the group's own options
        at += 2 if words[at] in _GROUP_VALUE_OPTIONS else 1
    rest = words[at + 1 :] if words[at : at + 1] == [name] else []
    path = [name]
    command = ctx.command.get_command(ctx, name) if isinstance(ctx.command, click.Group) else None
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        path.append(rest[0])
        command, rest = command.get_command(ctx, rest[0]), rest[1:]
    return tuple(path)


def _start_log(
    ctx: click.Context, path: tuple[str, ...], log_file: str | None, verbose: bool
) -> None:
    """The run's log lines begin: what was asked, by whom (the handlers end in main)."""
    from validator.cli import run_log

    run_log.start(log_file, verbose)
    argv = ctx.obj.get("argv") if isinstance(ctx.obj, dict) else None
    run_log.log.info(
        "gpuready %s started: %s (uid %d)",
        __version__,
        " ".join(asked(argv if isinstance(argv, list) else sys.argv[1:], path)),
        os.geteuid(),
    )


_OPTION_NAME = re.compile(r"--[A-Za-z][A-Za-z0-9-]*|-[A-Za-z]")


def asked(words: list[str], path: tuple[str, ...]) -> list[str]:
    """The command line's command and option names, in order, never a value.

    A value may be a secret (``-e ansible_become_pass=...``, refused only after this
    line is written), so the log keeps ``--extra-vars`` of ``--extra-vars=x`` and ``-e``
    of ``-eNAME=x``; arguments and values are left out, and everything after ``--``.
    """
    names: list[str] = []
    commands = list(path)
    for word in words:
        if word == "--":
            break
        found = _OPTION_NAME.match(word)
        if found is not None:
            names.append(found.group())
        elif commands and word == commands[0]:
            names.append(commands.pop(0))
    return names


def _click_problem(exc: click.ClickException) -> str:
    """click's message on one line, with where the usage is explained."""
    problem = one_line(exc.format_message())
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        return f"{problem} (see '{exc.ctx.command_path} --help')"
    return problem


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every error ends as one line on stderr and an exit code.

    SIGTERM and SIGHUP stop a run as Ctrl-C does (validator.service.signals); an
    interrupted run then exits 128 + the signal's number (143, 129), Ctrl-C 130.

    Returns:
        The process exit code (also used by the console script).
    """
    from validator.service import signals

    with signals.stop_signals():
        try:
            code = _main(argv)
            late = signals.late_notice()
            if late is not None:
                _say(f"gpuready: {late}")
            code = signals.exit_code(code)
            log_line("info", f"exit {code}")
            return code
        finally:
            run_log = sys.modules.get("validator.cli.run_log")
            if run_log is not None:
                run_log.stop_all()


def _say(line: str) -> None:
    """One line on stderr, and in the log when there is one (on stderr once, with -v too)."""
    click.echo(line, err=True)
    log_line("error" if line.startswith("gpuready: error") else "info", line, said=True)


def _print_traceback() -> None:
    """The traceback of the exception being handled, for --debug."""
    import traceback  # here: a run that does not crash never needs it

    traceback.print_exc()


def _main(argv: list[str] | None) -> int:  # noqa: PLR0911 - one return per error kind
    args = sys.argv[1:] if argv is None else argv
    if not args:
        # A bare gpuready asked for nothing: its help, and exit 2 on every click (8.2 and
        # newer say so themselves; 8.1, all that Python 3.9 has, exited 0).
        with cli.make_context("gpuready", [], resilient_parsing=True) as context:
            click.echo(context.get_help())
        return int(ExitCode.BAD_INPUT)
    try:
        code = cli.main(
            args=args, prog_name="gpuready", standalone_mode=False, obj={"argv": list(args)}
        )
    except GpureadyError as exc:
        # one_line: a message quoting a node's or a file's words must not drive the terminal
        _say(f"gpuready: error: {one_line(exc)}")
        return int(exc.exit_code)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except getattr(click.exceptions, "NoArgsIsHelpError", ()) as exc:  # click 8.2 and newer
        exc.show()  # a bare group or command: its help, as the user asked for nothing
        return int(ExitCode.BAD_INPUT)
    except click.ClickException as exc:
        _say(f"gpuready: error: {_click_problem(exc)}")
        return int(ExitCode.BAD_INPUT)
    except (click.exceptions.Abort, KeyboardInterrupt):
        _say("gpuready: interrupted")
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - the edge: one line instead of a traceback
        if os.environ.get("GPUREADY_DEBUG") or "--debug" in args:
            _print_traceback()
        _say(
            f"gpuready: internal error: {type(exc).__name__}: {one_line(exc)} "
            "(re-run with --debug for the traceback, and please report it)"
        )
        return int(ExitCode.BUG)
    return int(code) if isinstance(code, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
