"""``gpuready config``: the effective settings, and where each one came from."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from validator.cli.settings import (
    SETTINGS,
    Effective,
    Source,
    Value,
    builtin_defaults,
    check_value,
    effective,
)
from validator.safe_text import visible

F = Callable[..., Any]


def _setting_options(command: F) -> F:
    """One option per setting (``--db``, ``--report-dir``, ...), to see the command line win."""
    for setting in reversed(SETTINGS):
        command = click.option(
            setting.option,
            setting.key,
            metavar="VALUE",
            help=f"{setting.help[0].upper()}{setting.help[1:]}, as a command takes it "
            f"(otherwise ${setting.env}).",
        )(command)
    return command


def _with_command_line(found: Effective, given: dict[str, str | None]) -> dict[str, Value]:
    """The settings with those given here on top, each checked as a command checks it."""
    values = dict(found.values)
    defaults = builtin_defaults()
    for setting in SETTINGS:
        text = given.get(setting.key)
        if text is not None:
            checked = check_value(setting, text, setting.option)
            values[setting.key] = Value(checked, Source.COMMAND_LINE, setting.option)
        elif values[setting.key].source is Source.DEFAULT and setting.key in defaults:
            values[setting.key] = Value(defaults[setting.key], Source.DEFAULT)
    return values


def render(values: dict[str, Value], found: Effective) -> str:
    """The table ``gpuready config`` prints: setting, value, and where it came from."""
    rows = [("setting", "value", "from")]
    for setting in SETTINGS:
        value = values[setting.key]
        shown = "(none)" if value.value is None else visible(str(value.value))
        where = f"{value.source.value} {visible(value.where)}".rstrip()
        rows.append((setting.key, shown, where))
    widths = [max(len(row[column]) for row in rows) for column in range(2)]
    lines = [f"{key:<{widths[0]}}  {shown:<{widths[1]}}  {where}" for key, shown, where in rows]
    files = ", ".join(
        f"{visible(str(path))} ({'read' if there else 'absent'})" for path, there in found.files
    )
    order = "command line > GPUREADY_* variable > user file > /etc file > default"
    return "\n".join([*lines, "", f"config files: {files}", f"precedence: {order}"]) + "\n"


@click.command("config")
@_setting_options
@click.option("--json", "as_json", is_flag=True, help="Print the settings as JSON on stdout.")
@click.pass_context
def config(ctx: click.Context, /, as_json: bool, **given: str | None) -> None:
    """Show the effective settings and where each came from (file, variable, default).

    The sign key is shown as its path: gpuready never reads key material from a setting.
    """
    found = effective()
    given = {
        key: value
        for key, value in given.items()
        if ctx.get_parameter_source(key) is ParameterSource.COMMANDLINE
    }
    values = _with_command_line(found, given)
    if not as_json:
        click.echo(render(values, found), nl=False)
        return
    document = [
        {
            "setting": setting.key,
            "value": values[setting.key].value,
            "source": values[setting.key].source.value,
            "where": values[setting.key].where,
            "env": setting.env,
        }
        for setting in SETTINGS
    ]
    click.echo(json.dumps(document, indent=2))
