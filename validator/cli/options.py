"""Options several commands share, declared once."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from validator.node.burnin.config import (
    BACKENDS,
    DEFAULT_DTYPE,
    DEFAULT_MATRIX_SIZE,
    DEFAULT_MEMORY_FRACTION,
    DTYPES,
    BurnConfig,
    Dtype,
    Injection,
)

F = TypeVar("F", bound=Callable[..., object])


def _apply(options: tuple[Callable[[F], F], ...], command: F) -> F:
    for option in reversed(options):
        command = option(command)
    return command


_FANOUT_OPTIONS: tuple[Callable[[F], F], ...] = (
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


def fanout_options(command: F) -> F:
    """How to reach an inventory's hosts: concurrency, deadline, SSH settings."""
    return _apply(_FANOUT_OPTIONS, command)


def fanout_settings(options: dict[str, Any]) -> dict[str, Any]:
    """The fan-out options a command was given, as its request's field names (taken out)."""
    from validator.node.burnin.config import parse_duration

    deadline = options.pop("deadline")
    return {
        "parallel": options.pop("parallel"),
        "deadline_s": parse_duration(deadline) if deadline else None,
        "accept_new_host_keys": options.pop("accept_new_host_keys"),
        "connect_timeout_s": options.pop("connect_timeout"),
        "ssh_config": options.pop("ssh_config"),
        "known_hosts": options.pop("known_hosts"),
    }


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


def command_line(ctx: click.Context) -> tuple[str, ...]:
    """The command line as given to ``gpuready`` (for history), without the program name."""
    root = ctx.find_root().obj
    argv = root.get("argv") if isinstance(root, dict) else None
    return tuple(argv) if isinstance(argv, list) else tuple(sys.argv[1:])


_BURN_SETTING_OPTIONS: tuple[Callable[[F], F], ...] = (
    click.option(
        "--burn-backend",
        type=click.Choice(list(BACKENDS)),
        help="Force a burn backend (default: the first of cublas, torch that can run "
        "the dtype; numpy only measures the CPU).",
    ),
    click.option(
        "--burn-dtype",
        type=click.Choice(list(DTYPES)),
        default=DEFAULT_DTYPE.value,
        show_default=True,
        help="Precision of the burn-in products.",
    ),
    click.option(
        "--burn-matrix-size",
        type=click.IntRange(min=16),
        help=f"Matrix size (default {DEFAULT_MATRIX_SIZE}).",
    ),
    click.option(
        "--burn-memory-fraction",
        type=click.FloatRange(0.01, 0.98),
        default=DEFAULT_MEMORY_FRACTION,
        show_default=True,
        help="Share of free GPU memory the result buffers fill.",
    ),
    click.option("--burn-inject", hidden=True, help="Test hook: KIND:GPU:ITERATION (flip or nan)."),
)


def burn_options(default: str, help_text: str) -> Callable[[F], F]:
    """The burn-in options, declared once (certify, provision --certify).

    ``default`` is the ``--burn`` default and ``help_text`` its help; the rest
    take their defaults from validator.node.burnin.config, the one source.
    """
    duration = click.option(
        "--burn",
        "burn_duration",
        default=default,
        show_default=True,
        metavar="DURATION",
        help=help_text,
    )

    def decorate(command: F) -> F:
        return _apply((duration, *_BURN_SETTING_OPTIONS), command)

    return decorate


@dataclass(frozen=True)
class BurnOptions:
    """The burn options as click parsed them."""

    burn_duration: str
    burn_backend: str | None
    burn_dtype: str
    burn_matrix_size: int | None
    burn_memory_fraction: float
    burn_inject: str | None

    @classmethod
    def pop(cls, options: dict[str, Any]) -> BurnOptions:
        """Take the burn options out of a command's keyword arguments."""
        return cls(**{name: options.pop(name) for name in cls.__dataclass_fields__})

    def config(self, duration_s: float) -> BurnConfig | None:
        """The burn these options ask for, ``duration_s`` long; None for none.

        Raises:
            BadInputError: a setting no burn could honour.
        """
        if duration_s <= 0:
            return None
        return BurnConfig(
            duration_s=duration_s,
            dtype=Dtype(self.burn_dtype),
            backend=self.burn_backend,
            matrix_size=self.burn_matrix_size,
            memory_fraction=self.burn_memory_fraction,
            inject=Injection.parse(self.burn_inject) if self.burn_inject else None,
        )


_ROLLING_OPTIONS: tuple[Callable[[F], F], ...] = (
    click.option(
        "--batch",
        metavar="N|N%",
        help="Roll through the hosts N (or N% of them) at a time, as Ansible's serial "
        "(default: all at once).",
    ),
    click.option(
        "--max-fail-percentage",
        metavar="P",
        help="Stop the roll once more than P% of a batch failed (default with --batch: "
        "0, the first failure stops it before the next batch reboots).",
    ),
    click.option(
        "--slurm-drain",
        is_flag=True,
        help="Drain each batch's Slurm nodes first and resume them after gpu_verify "
        "(as provision_slurm_drain: true in the inventory).",
    ),
)


force_option = click.option(
    "--force",
    is_flag=True,
    help="Run every install role, even on hosts whose last full run the probe finds "
    "unchanged (as provision_force: true).",
)


def rolling_options(command: F) -> F:
    """How ``provision`` rolls through the hosts: batch size, failure budget, Slurm drain."""
    return _apply(_ROLLING_OPTIONS, command)


def rolling_settings(options: dict[str, Any]) -> dict[str, Any]:
    """The rolling options a command was given, as ProvisionRequest's fields (taken out).

    Raises:
        BadInputError: a batch or failure budget that is not one (one line, with the fix).
    """
    from validator.provision import parse_batch, parse_percentage

    batch, budget = options.pop("batch"), options.pop("max_fail_percentage")
    return {
        "batch": parse_batch(batch) if batch is not None else None,
        "max_fail_percentage": parse_percentage(budget) if budget is not None else None,
        "slurm_drain": options.pop("slurm_drain"),
    }
