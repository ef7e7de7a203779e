"""``gpuready verify-cert``: check that a certificate file is as issued, and who signed it."""

from __future__ import annotations

from pathlib import Path

import click

from validator import limits
from validator.certificate import (
    CertificateError,
    SealError,
    certificate_from_json,
    verify_certificate,
)
from validator.cli.options import NonEmptyPath
from validator.errors import ExitCode, GpureadyError
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
def verify_cert(file: str, key_path: str | None, public_key_path: str | None) -> None:
    """Check FILE's digest (any edit fails) and, with a key, its signature; say what it proves.

    Exit 0 when it holds, 1 when the seal does not (edited, re-signed, signature removed,
    another key's), 2 when the file or a key cannot be read.
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
