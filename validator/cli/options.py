"""Options several commands share, declared once."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable[..., object])


def fanout_options(command: F) -> F:
    """How to reach an inventory's hosts: concurrency, deadline, SSH settings."""
    decorators = (
        click.option(
            "--parallel",
            type=click.IntRange(min=1),
            default=64,
            show_default=True,
            help="Hosts at once.",
        ),
        click.option(
            "--deadline",
            metavar="DURATION",
            help="How long one host may take (default: the burn plus 5 minutes).",
        ),
        click.option(
            "--accept-new-host-keys",
            is_flag=True,
            help="Add unknown SSH host keys to known_hosts (a changed key is always refused).",
        ),
        click.option(
            "--connect-timeout",
            type=click.FloatRange(min=0.1),
            default=10.0,
            show_default=True,
            help="Seconds to wait for an SSH connection.",
        ),
        click.option(
            "--ssh-config",
            type=click.Path(dir_okay=False),
            help="SSH client config (default ~/.ssh/config).",
        ),
        click.option(
            "--known-hosts",
            type=click.Path(dir_okay=False),
            help="known_hosts file (default ~/.ssh/known_hosts).",
        ),
    )
    for decorate in reversed(decorators):
        command = decorate(command)
    return command


def inventory_option(help_text: str, *, required: bool = False) -> Callable[[F], F]:
    """``-i/--inventory``, repeatable; the sentence says what the command does with it."""
    return click.option(
        "-i",
        "--inventory",
        "inventories",
        multiple=True,
        required=required,
        metavar="INVENTORY",
        help=help_text,
    )


limit_option = click.option(
    "--limit", metavar="PATTERN", help="Only these hosts, as ansible --limit has it."
)
policy_option = click.option(
    "--policy",
    "policy_path",
    metavar="FILE",
    type=click.Path(),
    help="Policy YAML overriding the defaults.",
)
db_option = click.option(
    "--db",
    "db_path",
    metavar="PATH",
    type=click.Path(dir_okay=False),
    help="History database (default: $XDG_STATE_HOME/gpuready/history.db).",
)
