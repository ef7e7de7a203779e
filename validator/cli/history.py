"""``gpuready history``: past runs and their verdicts, from the history database."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import ClassVar

import click
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from validator.cli.options import TEXT, db_option
from validator.error_tree import BadInputError
from validator.fields import excerpt
from validator.safe_text import one_line
from validator.store import HistoryRow, NoHistoryError, PruneOutcome, Store, history_row_to_dict

# Rows are read into memory and printed: a million is more than any terminal wants.
MAX_LIMIT = 1_000_000
# A retention past a century, or a million runs, is a typo: say so rather than keep everything.
MAX_KEEP_DAYS = 36_500
MAX_KEEP_RUNS = 1_000_000

COLUMNS = (
    "RUN",
    "KIND",
    "STARTED",
    "STATUS",
    "HOST",
    "VERDICT",
    "FAILED",
    "SOURCE",
    "CERTIFICATE",
    "SUMMARY",
)


def _certificate_cell(row: HistoryRow) -> str:
    """``current``, ``revoked by run 7``, ``replaced by run 9``; ``-`` where none was issued."""
    if row.certificate is None:
        return "-"
    if row.certificate_run is None:
        return row.certificate
    return f"{row.certificate} by run {row.certificate_run}"


def _cells(row: HistoryRow) -> tuple[str, ...]:
    """One row's cells, each one line with every control escaped: a node names itself."""
    cells = (
        str(row.run_id),
        row.kind,
        row.started_at,
        row.status,
        row.hostname or "-",
        row.verdict or "-",
        str(row.failed) if row.hostname is not None else "-",
        row.provenance or "-",
        _certificate_cell(row),
        row.summary if row.hostname is not None else "(no host recorded)",
    )
    return tuple(one_line(cell) for cell in cells)


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


def parse_keep(option: str, text: object, maximum: int, example: str) -> int | None:
    """``--keep-days`` / ``--keep-runs``: a whole number from 1 to ``maximum``, or None if absent.

    Raises:
        BadInputError: anything else, as one line naming the option and an example.
    """
    if text is None:
        return None
    value = str(text).strip()
    if re.fullmatch(r"[0-9]{1,7}", value) and 1 <= int(value) <= maximum:
        return int(value)
    raise BadInputError(
        f"{option} {excerpt(str(text))} is not a whole number from 1 to {maximum:,}; "
        f"give e.g. {option} {example}"
    )


def render_prune(
    outcome: PruneOutcome, path: object, compacted: tuple[int, int] | None = None
) -> str:
    """What a prune removed (or would), in a few lines; ``compacted``: bytes before and after."""
    verb = "would remove" if outcome.dry_run else "removed"
    runs = "run" if len(outcome.runs) == 1 else "runs"
    lines = [
        f"{verb} {len(outcome.runs)} {runs} ({outcome.results} results, "
        f"{outcome.certificates} certificates) from {path}"
    ]
    if outcome.runs:
        lines.append("runs: " + _ranges(outcome.runs))
    if outcome.kept:
        lines.append(
            f"kept {len(outcome.kept)} older runs holding the latest certificate of a host "
            f"(drift's baseline): {_ranges(outcome.kept)}"
        )
    if compacted is not None:
        before, after = compacted
        lines.append(f"compacted {path}: {_mib(before)} -> {_mib(after)}")
    elif outcome.runs and not outcome.dry_run:
        lines.append(
            "the file keeps its size: SQLite reuses the freed pages for new runs "
            "(--vacuum gives them back)"
        )
    return "".join(line + "\n" for line in lines)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def _ranges(ids: tuple[int, ...]) -> str:
    """``1-4, 7, 9-10`` for run ids 1, 2, 3, 4, 7, 9, 10."""
    parts: list[str] = []
    start = previous = ids[0]
    for run_id in (*ids[1:], None):
        if run_id is not None and run_id == previous + 1:
            previous = run_id
            continue
        parts.append(f"{start}-{previous}" if previous != start else str(start))
        if run_id is not None:
            start = previous = run_id
    return ", ".join(parts)


def _note_pending(pending: list[Path]) -> None:
    """Say on stderr that runs wait in pending files, which the listing cannot show."""
    if pending:
        runs = "run waits" if len(pending) == 1 else "runs wait"
        click.echo(
            f"gpuready: note: {len(pending)} {runs} in {pending[0].parent} (the database "
            "could not be written then): not shown; the next certify or drift run imports them",
            err=True,
        )


def _check_prune(prune: bool, host: str | None, as_json: bool) -> None:
    """Refuse the retention options without --prune, and --prune with a listing's options."""
    if not prune:
        raise BadInputError(
            "--keep-days, --keep-runs, --dry-run and --vacuum go with --prune: add --prune, "
            "or drop them"
        )
    if host is not None or as_json:
        raise BadInputError("--prune applies to the whole history: drop HOST and --json")


def prune_history(
    db_path: str | None,
    keep_days: int | None,
    keep_runs: int | None,
    dry_run: bool,
    vacuum: bool = False,
) -> str:
    """Apply the retention policy to the history database; the text to print.

    With ``vacuum`` (and not ``dry_run``), the file is compacted afterwards.

    Raises:
        BadInputError: no rule given.
        StoreError: the database cannot be used or written.
    """
    if keep_days is None and keep_runs is None:
        raise BadInputError(
            "--prune needs a retention rule: give --keep-days N, --keep-runs N or both"
        )
    # Opened for writing (an older schema is upgraded, as any writer does), but
    # deferred: pruning a history that does not exist creates none.
    with Store.open(db_path, defer_create=True) as store:
        if not store.has_database():
            return f"no history yet at {store.path}: nothing to prune\n"
        outcome = store.prune(keep_days=keep_days, keep_runs=keep_runs, dry_run=dry_run)
        compacted = store.vacuum() if vacuum and not dry_run else None
        notices = store.take_notices()
    text = render_prune(outcome, store.path, compacted)
    return "".join(f"{notice}\n" for notice in notices) + text


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


class HistoryCommand(click.Command):
    """``history`` lists runs; ``show`` and ``certificate`` are subcommands of it.

    Not a click group: a group's optional HOST would take a subcommand's name, and
    ``gpuready history gpu07`` must keep listing gpu07's runs. A host named like a
    subcommand is listed with ``gpuready history -- show``.
    """

    SUBCOMMANDS: ClassVar[dict[str, str]] = {
        "show": "history_show",
        "certificate": "history_certificate",
    }
    _CHOSEN = "gpuready.history.subcommand"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """A subcommand's name as the first argument: the rest is its; else the listing's.

        Options may come before the name (``history --db X show 12``): they go to the
        subcommand with the rest, which names any it does not take.
        """
        position = self._subcommand_at(ctx, args)
        if position is not None:
            ctx.meta[self._CHOSEN] = (args[position], args[:position] + args[position + 1 :])
            return []
        return super().parse_args(ctx, args)

    def _subcommand_at(self, ctx: click.Context, args: list[str]) -> int | None:
        """Where the first plain argument (not an option, nor its value) names a subcommand."""
        takes_value = {
            name
            for param in self.get_params(ctx)
            if isinstance(param, click.Option) and not param.is_flag
            for name in param.opts
        }
        skip = False
        for position, arg in enumerate(args):
            if skip:
                skip = False
            elif arg == "--":
                return None
            elif arg.startswith("-") and arg != "-":
                skip = arg in takes_value  # "--db X"; "--db=X" holds its value
            else:
                return position if arg in self.SUBCOMMANDS else None
        return None

    def invoke(self, ctx: click.Context) -> object:
        """Run the subcommand chosen (imported only now), else the listing."""
        chosen = ctx.meta.pop(self._CHOSEN, None)
        if chosen is None:
            return super().invoke(ctx)
        name, rest = chosen
        import importlib

        module = importlib.import_module(f"validator.cli.{self.SUBCOMMANDS[name]}")
        command: click.Command = getattr(module, name)
        # Under the root, named "history show": its usage line reads as typed. The
        # settings history has (db) reach it as they reach the listing.
        with command.make_context(
            f"{ctx.info_name} {name}", rest, parent=ctx.parent, default_map=ctx.default_map
        ) as sub:
            return command.invoke(sub)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The subcommands, after the options (see `gpuready history show --help`)."""
        super().format_epilog(ctx, formatter)
        with formatter.section("Commands"):
            formatter.write_dl(
                [
                    ("show RUN [HOST]", "A past run's findings and figures (--json)."),
                    ("certificate HOST", "Export a stored certificate for verify-cert (-o FILE)."),
                ]
            )


@click.command(cls=HistoryCommand)
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
@click.option(
    "--prune",
    is_flag=True,
    help="Remove old runs instead: those neither younger than --keep-days nor among the "
    "--keep-runs newest. Running runs, and runs holding a host's latest certificate, stay.",
)
@click.option(
    "--keep-days",
    metavar="N",
    callback=lambda _ctx, _param, value: parse_keep("--keep-days", value, MAX_KEEP_DAYS, "90"),
    help="With --prune: keep the runs started in the last N days.",
)
@click.option(
    "--keep-runs",
    metavar="N",
    callback=lambda _ctx, _param, value: parse_keep("--keep-runs", value, MAX_KEEP_RUNS, "1000"),
    help="With --prune: keep the N newest runs.",
)
@click.option("--dry-run", is_flag=True, help="With --prune: say what would go; remove nothing.")
@click.option(
    "--vacuum",
    is_flag=True,
    help="With --prune: then compact the file (SQLite's VACUUM), giving the freed space back. "
    "Holds the write lock while it runs, and needs the file's size again in free space.",
)
def history(
    host: str | None,
    db_path: str | None,
    as_json: bool,
    limit: int,
    prune: bool,
    keep_days: int | None,
    keep_runs: int | None,
    dry_run: bool,
    vacuum: bool,
) -> None:
    """Show past certify and drift runs and their verdicts, for every host or HOST.

    A run whose process died before it finished (killed, power lost) shows as interrupted.
    With --prune, remove the runs a retention policy does not keep.
    """
    if prune or keep_days is not None or keep_runs is not None or dry_run or vacuum:
        _check_prune(prune, host, as_json)
        click.echo(prune_history(db_path, keep_days, keep_runs, dry_run, vacuum), nl=False)
    else:
        _show_history(host, db_path, as_json, limit)


def _show_history(host: str | None, db_path: str | None, as_json: bool, limit: int) -> None:
    """The listing: a table, or JSON; a history not there yet is an empty one."""
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
    _note_pending(pending)
    if as_json:
        click.echo(json.dumps([history_row_to_dict(row) for row in rows], indent=2))
        return
    if not rows:
        where = f"for {one_line(host)} " if host is not None else ""
        click.echo(f"no runs recorded {where}in {store.path}", err=True)
        return
    click.echo(render_history(rows), nl=False)
