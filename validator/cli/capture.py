"""``gpuready capture DIR``: write this host's support bundle (or a simulated node's)."""

from __future__ import annotations

import click

from validator.cli.options import TEXT, BoundedInt, NonEmptyPath
from validator.node.capture.capture_replay import write_capture
from validator.node.sim.scenario import load_scenario
from validator.node.system import LiveSystem, System
from validator.safe_text import one_line


@click.command()
@click.argument("directory", type=NonEmptyPath(file_okay=False, writable=True))
@click.option(
    "--simulate",
    type=TEXT,
    metavar="NAME|FILE",
    help="Capture a simulated node instead (see `gpuready scenarios`): a sample bundle.",
)
@click.option(
    "--dcgm-level",
    type=BoundedInt(0, 4),
    default=0,
    metavar="N",
    help="Also run DCGM's diagnostic `dcgmi diag -r N -j` (1-4; it takes seconds at 1, "
    "minutes at 2-3, hours at 4) into dcgmi-diag.json; 0 (default) runs none.",
)
@click.option(
    "--interconnect/--no-interconnect",
    default=False,
    help="Also run `nvbandwidth -j` (where it is on PATH) into nvbandwidth.json: copy, "
    "peer and HBM bandwidth, read and judged by `certify --capture`.",
)
def capture(directory: str, simulate: str | None, dcgm_level: int, interconnect: bool) -> None:
    """Write nvidia-smi, nvcc, cuDNN and kernel-log outputs of this host to DIRECTORY.

    Certify it anywhere later with `gpuready certify --capture DIRECTORY`.
    """
    system: System = load_scenario(simulate).system() if simulate else LiveSystem()
    outcome = write_capture(directory, system, dcgm_level=dcgm_level, interconnect=interconnect)
    for name, what in sorted(outcome.items()):
        click.echo(f"{one_line(name):26} {one_line(what)}")  # a command's own words
    written = sum(1 for what in outcome.values() if what == "written")
    click.echo(f"{written} files written to {one_line(directory)}")
