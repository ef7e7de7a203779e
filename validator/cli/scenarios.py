"""``gpuready scenarios``: list the built-in simulated nodes."""

from __future__ import annotations

import click

from validator.node.sim.scenario import builtin_names, describe


@click.command()
def scenarios() -> None:
    """List the built-in scenarios for --simulate, one a line, name first."""
    names = builtin_names()
    width = max((len(name) for name in names), default=0)
    for name in names:
        click.echo(f"{name.ljust(width)}  {describe(name)}")
