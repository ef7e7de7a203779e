"""``provision``'s own options: how it rolls through the hosts, and --force."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from validator.cli.options import F, apply_options

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
    return apply_options(_ROLLING_OPTIONS, command)


def rolling_settings(options: dict[str, Any]) -> dict[str, Any]:
    """The rolling options a command was given, as ProvisionRequest's fields (taken out).

    Raises:
        BadInputError: a batch or failure budget that is not one (one line, with the fix).
    """
    from validator.service.provision_service import parse_batch, parse_percentage

    batch, budget = options.pop("batch"), options.pop("max_fail_percentage")
    return {
        "batch": parse_batch(batch) if batch is not None else None,
        "max_fail_percentage": parse_percentage(budget) if budget is not None else None,
        "slurm_drain": options.pop("slurm_drain"),
    }
