"""``gpuready verify-cert``: check that a certificate file is as issued, and who signed it."""

from __future__ import annotations

from pathlib import Path

import click

from validator.certificate import (
    CertificateError,
    certificate_from_json,
    load_key,
    verify_certificate,
)
from validator.cli.options import NonEmptyPath


def read_certificate_text(path: str) -> str:
    """The text of a certificate file.

    Raises:
        CertificateError: the file is missing, unreadable or not UTF-8 text.
    """
    where = Path(path)
    try:
        return where.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CertificateError(f"certificate file {where} does not exist") from None
    except IsADirectoryError:
        raise CertificateError(f"{where} is a directory, not a certificate file") from None
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
    help="Key file the certificate was signed with (required for a signed certificate).",
)
def verify_cert(file: str, key_path: str | None) -> None:
    """Check FILE's digest (any edit fails) and, with --sign-key, its signature."""
    key = load_key(key_path) if key_path is not None else None
    text = read_certificate_text(file)
    try:
        cert = certificate_from_json(text)
    except CertificateError as exc:
        raise CertificateError(f"{file}: {exc}") from None
    verify_certificate(cert, key)
    state = "signed" if cert.signature is not None else "unsigned"
    click.echo(f"{cert.label} is intact ({state})")
