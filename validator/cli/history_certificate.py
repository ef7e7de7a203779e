"""``gpuready history certificate HOST``: a stored certificate, exported for verify-cert.

The text is the one stored when the certificate was issued, byte for byte: its digest
and signature were made over it, so ``gpuready verify-cert FILE`` judges the export as
it would have judged the file ``certify --report-dir`` wrote. Nothing is parsed or
re-encoded on the way out. ``-o FILE`` is written atomically, never through a link,
and an existing file is replaced only with ``--force``.
"""

from __future__ import annotations

import click

from validator.cli.options import TEXT, NonEmptyPath, db_option
from validator.error_tree import BadInputError, ReportError
from validator.safe_text import one_line
from validator.store import NoHistoryError, Store, StoredCertificate


def read_stored(db_path: str | None, host: str, run_id: int | None) -> StoredCertificate:
    """The host's newest stored certificate, or the one run ``run_id`` issued.

    Raises:
        BadInputError: none is stored (one line with the fix).
        StoreError: the database failed.
    """
    name = one_line(host, 80)
    which = f" issued by run {run_id}" if run_id is not None else ""
    fix = f"`gpuready history {name}` lists its runs and what became of each certificate"
    try:
        store = Store.open(db_path, readonly=True)
    except NoHistoryError as exc:
        raise BadInputError(f"no certificate of {name}: {exc}") from None
    with store:
        stored = store.stored_certificate(host, run_id)
        if stored is None:
            raise BadInputError(f"no certificate of {name}{which} in {store.path}: {fix}")
        _note_fate(store, stored)
    return stored


# How far back a host's history is read for what became of an exported certificate.
_FATE_ROWS = 10_000


def _note_fate(store: Store, stored: StoredCertificate) -> None:
    """Say on stderr when the certificate exported was revoked or replaced since."""
    if stored.run_id is None:
        return
    rows = store.history(stored.hostname, limit=_FATE_ROWS)
    row = next((r for r in rows if r.run_id == stored.run_id and r.certificate), None)
    if row is None or row.certificate == "current" or row.certificate_run is None:
        return
    click.echo(
        f"gpuready: note: this certificate of {one_line(stored.hostname, 80)} was "
        f"{row.certificate} by run {row.certificate_run}: it is exported as stored, and "
        "`gpuready verify-cert FILE --db HISTORY` reports it",
        err=True,
    )


def export(stored: StoredCertificate, path: str, *, force: bool) -> None:
    """Write the certificate's text to ``path``: atomically, through no link.

    Raises:
        BadInputError: the file exists and ``force`` is not given.
        UnsafePathError: a link, folder or other non-file is at ``path``.
        ReportError: the file cannot be written.
    """
    from validator.files import check_path, write_atomic

    if check_path(path) and not force:
        raise BadInputError(f"{path} exists: add --force to replace it, or give another -o FILE")
    try:
        write_atomic(path, stored.text.encode("utf-8"), mode=0o644)
    except OSError as exc:
        raise ReportError(
            f"cannot write the certificate to {path}: {exc.strerror or exc}"
        ) from None


def _check_terminal(stored: StoredCertificate, host: str) -> None:
    """Refuse to print a stored text with controls to a terminal: export it to a file.

    gpuready writes certificates as ASCII JSON; a text edited in the database may hold
    anything, which a terminal would act on. A pipe or file gets the bytes as stored.
    """
    import sys

    text = stored.text
    plain = text.isascii() and all(c == "\n" or " " <= c <= "~" for c in text)
    if not plain and sys.stdout.isatty():
        raise BadInputError(
            f"the stored certificate of {one_line(host, 80)} holds control or non-ASCII "
            "characters (gpuready never writes one so): export it with -o FILE and check it "
            "with `gpuready verify-cert FILE`"
        )


@click.command("certificate")
@click.argument("host", type=TEXT)
@db_option
@click.option(
    "--run",
    "run_number",
    metavar="N",
    type=TEXT,
    help="The certificate run N issued (default: the host's newest).",
)
@click.option(
    "-o",
    "--output",
    metavar="FILE",
    type=NonEmptyPath(dir_okay=False),
    help="Write it to FILE (atomically) instead of stdout.",
)
@click.option("--force", is_flag=True, help="Replace FILE when it exists.")
def certificate(
    host: str, db_path: str | None, run_number: str | None, output: str | None, force: bool
) -> None:
    """Export HOST's stored certificate exactly as issued, for `gpuready verify-cert FILE`.

    The newest one, or with --run N the one run N issued. It is exported whatever
    became of it since: `gpuready verify-cert FILE --db HISTORY` says if it was revoked.
    """
    from validator.cli.history_show import parse_run

    run_id = parse_run(run_number) if run_number is not None else None
    stored = read_stored(db_path, host, run_id)
    if output is None:
        _check_terminal(stored, host)
        click.echo(stored.text, nl=False)
        return
    export(stored, output, force=force)
    run = f" (run {stored.run_id})" if stored.run_id is not None else ""
    click.echo(
        f"wrote the certificate of {one_line(host, 80)} issued {one_line(stored.issued_at, 40)}"
        f"{run} to {output}",
        err=True,
    )
