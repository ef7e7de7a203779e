"""``gpuready verify-cert``: check that a certificate file is as issued, and who signed it."""

from __future__ import annotations

from pathlib import Path

import click

from validator import limits
from validator.certificate import (
    Certificate,
    CertificateError,
    SealError,
    certificate_from_json,
    verify_certificate,
)
from validator.cli.options import NonEmptyPath
from validator.error_tree import BadInputError, ExitCode, GpureadyError
from validator.signing import load_key, load_public_key


class NotVerified(GpureadyError):
    """A certificate whose seal does not hold: exit 1, as a node not certified."""

    exit_code = ExitCode.NOT_CERTIFIED


def read_certificate_text(path: str) -> str:
    """The text of a certificate file.

    Raises:
        CertificateError: the file is missing, unreadable or not UTF-8 text.
    """
    where = Path(path)
    try:
        return limits.read_text(where, limits.CERTIFICATE_BYTES)
    except FileNotFoundError:
        raise CertificateError(f"certificate file {where} does not exist") from None
    except limits.OverLimitError as exc:
        if where.is_dir():
            raise CertificateError(f"{where} is a directory, not a certificate file") from None
        raise CertificateError(f"{where} {exc}: not a certificate file") from None
    except UnicodeDecodeError:
        raise CertificateError(f"{where} is not a certificate: not UTF-8 text") from None
    except OSError as exc:
        raise CertificateError(f"cannot read certificate file {where}: {exc.strerror}") from None


@click.command("verify-cert")
@click.argument("file", metavar="FILE", type=NonEmptyPath())
@click.option(
    "--sign-key",
    "key_path",
    type=NonEmptyPath(),
    metavar="KEYFILE",
    help="Key file the certificate was signed with: the shared HMAC secret (required for an "
    "HMAC-signed certificate), or an Ed25519 key.",
)
@click.option(
    "--public-key",
    "public_key_path",
    type=NonEmptyPath(),
    metavar="FILE",
    help="Ed25519 public key (an ssh-ed25519 line or PEM) to check the signature with.",
)
@click.option(
    "--db",
    "db_path",
    type=NonEmptyPath(),
    metavar="PATH",
    help="History to check the certificate against: a later certification of its host that "
    "did not certify it has revoked it (exit 1).",
)
def verify_cert(
    file: str, key_path: str | None, public_key_path: str | None, db_path: str | None
) -> None:
    """Check FILE's digest (any edit fails) and, with a key, its signature; say what it proves.

    Exit 0 when it holds, 1 when the seal does not (edited, re-signed, signature removed,
    another key's) or, with --db, the certificate was revoked, 2 when the file, a key or
    the history cannot be read.
    """
    if key_path is not None and public_key_path is not None:
        raise click.UsageError("give --sign-key or --public-key, not both")
    key = load_key(key_path) if key_path is not None else None
    if public_key_path is not None:
        key = load_public_key(public_key_path)
    text = read_certificate_text(file)
    try:
        cert = certificate_from_json(text)
    except CertificateError as exc:
        raise CertificateError(f"{file}: {exc}") from None
    try:
        proved = verify_certificate(cert, key)
    except SealError as exc:
        raise NotVerified(f"not verified: {exc}") from None
    click.echo(f"{cert.label} is intact: {proved}")
    if db_path is not None:
        _check_revocation(cert, db_path)


def _check_revocation(cert: Certificate, db_path: str) -> None:
    """Say whether history has revoked ``cert``; raise NotVerified when it has."""
    from validator.cli.certify import tell
    from validator.service.drift_service import revocation
    from validator.store import NoHistoryError, Store

    try:
        store = Store.open(db_path, readonly=True)
    except NoHistoryError:
        raise BadInputError(
            f"no history at {db_path}: give the --db the certifications were recorded in"
        ) from None
    with store:
        revoked = revocation(store, cert, cert.hostname)
        unchecked = store.take_notices()  # "revocation not checked: ...", and why
    if revoked is not None:
        raise NotVerified(f"revoked: {revoked.problem}; certify the node again")
    if unchecked:
        tell(unchecked)
    else:
        click.echo(f"not revoked: {db_path} holds no later certification that failed")
