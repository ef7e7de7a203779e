"""``gpuready init DIR``: write a new site's example inventory and version pins into DIR."""

from __future__ import annotations

import click

from validator.cli.options import NonEmptyPath
from validator.safe_text import visible


@click.command("init")
@click.argument("directory", type=NonEmptyPath(file_okay=False))
@click.option(
    "--force",
    is_flag=True,
    help="Overwrite hosts.ini and group_vars/all.yml when DIRECTORY has them already.",
)
def init(directory: str, force: bool) -> None:
    """Write an example inventory and the version pins into DIRECTORY, to edit, then provision.

    DIRECTORY/hosts.ini is the example inventory (put your hosts in it);
    DIRECTORY/group_vars/all.yml pins the driver, CUDA Toolkit, cuDNN, DCGM and NCCL
    for every host, for provision and certify alike. Existing files are left alone
    unless --force is given.

    \b
    Example:
      gpuready init site
      gpuready provision -i site/hosts.ini --check --diff
    """  # noqa: D301 - click's \b keeps the example's lines as written
    from validator.service.site_init import init_site

    for path in init_site(directory, force=force):
        click.echo(f"wrote {visible(path)}")
    inventory = visible(f"{directory.rstrip('/')}/hosts.ini")
    click.echo(f"next: put your hosts in {inventory}, then: gpuready provision -i {inventory}")
