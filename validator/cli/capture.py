"""``gpuready capture DIR``: write this host's support bundle."""

from __future__ import annotations

import click

from validator.node.capture import write_capture
from validator.node.system import LiveSystem


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, writable=True))
def capture(directory: str) -> None:
    """Write nvidia-smi, nvcc, cuDNN and kernel-log outputs of this host to DIRECTORY.

    Certify it anywhere later with `gpuready certify --capture DIRECTORY`.
    """
    outcome = write_capture(directory, LiveSystem())
    for name, what in sorted(outcome.items()):
        click.echo(f"{name:26} {what}")
    written = sum(1 for what in outcome.values() if what == "written")
    click.echo(f"{written} files written to {directory}")
