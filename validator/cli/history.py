"""``gpuready history``: past runs and their verdicts, from the history database."""

from __future__ import annotations

import io
import json
import re

import click
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from validator.cli.options import TEXT, db_option
from validator.errors import BadInputError
from validator.fields import excerpt
from validator.store import HistoryRow, NoHistoryError, Store, history_row_to_dict

# Rows are read into memory and printed: a million is more than any terminal wants.
MAX_LIMIT = 1_000_000

COLUMNS = ("RUN", "KIND", "STARTED", "STATUS", "HOST", "VERDICT", "FAILED", "SUMMARY")


def _cells(row: HistoryRow) -> tuple[str, ...]:
    return (
        str(row.run_id),
        row.kind,
        row.started_at,
        row.status,
        row.hostname or "-",
        row.verdict or "-",
        str(row.failed) if row.hostname is not None else "-",
        row.summary if row.hostname is not None else "(no host recorded)",
    )


def parse_limit(text: object) -> int:
    """``--limit``: a whole number from 1 to :data:`MAX_LIMIT`.

    Raises:
        BadInputError: anything else (``0``, ``-1``, ``1e20``, ``abc``), as one line.
    """
    value = str(text).strip()
    # ASCII digits only (str.isdigit takes "²"), and short: int() of a huge text is slow.
    if re.fullmatch(r"[0-9]{1,7}", value) and 1 <= int(value) <= MAX_LIMIT:
        return int(value)
    raise BadInputError(
        f"--limit {excerpt(str(text))} is not a whole number from 1 to {MAX_LIMIT:,}; "
        "give e.g. --limit 50"
    )


def render_history(rows: list[HistoryRow]) -> str:
    """Rows as plain aligned columns under a header, the summary last and never wrapped.

    Cells are plain text: a summary's brackets are not markup, and nothing is coloured.
    """
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="", expand=False)
    for name in COLUMNS:
        table.add_column(name, no_wrap=True, overflow="ignore")
    cells = [_cells(row) for row in rows]
    for line in cells:
        table.add_row(*(Text(cell) for cell in line))
    # As wide as the widest row: a summary is one line, whatever the terminal.
    width = sum(max(cell_len(line[i]) for line in [COLUMNS, *cells]) for i in range(len(COLUMNS)))
    out = io.StringIO()
    console = Console(file=out, width=width + 2 * len(COLUMNS), color_system=None, highlight=False)
    console.print(table)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


@click.command()
@click.argument("host", required=False, type=TEXT)
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list on stdout.")
@click.option(
    "--limit",
    metavar="N",
    default="50",
    show_default=True,
    callback=lambda _ctx, _param, value: parse_limit(value),
    help=f"At most this many rows (1-{MAX_LIMIT:,}), newest run first.",
)
def history(host: str | None, db_path: str | None, as_json: bool, limit: int) -> None:
    """Show past certify and drift runs and their verdicts, for every host or HOST.

    A run whose process died before it finished (killed, power lost) shows as interrupted.
    """
    try:
        store = Store.open(db_path, readonly=True)
    except NoHistoryError as exc:
        # Nothing recorded yet is an answer, not a failure.
        if as_json:
            click.echo("[]")
        else:
            click.echo(str(exc), err=True)
        return
    with store:
        rows = store.history(host, limit=limit)
        pending = store.pending_files()
    if pending:
        runs = "run waits" if len(pending) == 1 else "runs wait"
        click.echo(
            f"gpuready: note: {len(pending)} {runs} in {pending[0].parent} (the database "
            "could not be written then): not shown; the next certify or drift run imports them",
            err=True,
        )
    if as_json:
        click.echo(json.dumps([history_row_to_dict(row) for row in rows], indent=2))
        return
    if not rows:
        where = f"for {host} " if host is not None else ""
        click.echo(f"no runs recorded {where}in {store.path}", err=True)
        return
    click.echo(render_history(rows), nl=False)
