"""Certificate keys (validator.signing): Ed25519 key pairs and shared HMAC secrets.

The keys under tests/fixtures/keys were made with OpenSSH's ssh-keygen (its README);
PEM keys are made here with cryptography, encrypted ones with a passphrase.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.trust.test_certificate import issued
from validator import signing
from validator.certificate import (
    CertificateError,
    SealError,
    canonical_bytes,
    certificate_from_json,
    certificate_to_json,
    sign,
    verify_certificate,
)
from validator.cli.main import cli
from validator.cli.verify_cert import NotVerified
from validator.error_tree import BadInputError
from validator.signing import (
    PASSPHRASE_ENV,
    KeyKind,
    load_key,
    load_public_key,
    load_signing_key,
)

KEYS = Path(__file__).parent.parent / "fixtures" / "keys"
SIGNER_FINGERPRINT = "SHA256:V9L+ErjFxSRjkQELkwvnl2wnMX2BGubm49Sq9cnLzbQ"


def _pem_pair(tmp: Path, passphrase: bytes | None = None) -> tuple[Path, Path]:
    key = Ed25519PrivateKey.generate()
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase)
        if passphrase
        else serialization.NoEncryption()
    )
    private = tmp / "pem.key"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    public = tmp / "pem.pub"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


# ------------------------------------------------------------------ reading keys


def test_openssh_pair_signs_and_verifies_with_the_public_key_alone() -> None:
    signer = load_signing_key(KEYS / "signer")
    public = load_public_key(KEYS / "signer.pub")
    assert signer.kind is KeyKind.ED25519
    assert public.kind is KeyKind.ED25519
    assert not public.can_sign
    cert = sign(issued(), signer)
    assert cert.signature is not None
    assert cert.signature.startswith("ed25519:")
    assert verify_certificate(cert, public) == f"signed by ED25519 key {SIGNER_FINGERPRINT}"
    assert verify_certificate(cert, signer) == f"signed by ED25519 key {SIGNER_FINGERPRINT}"


def test_pem_pair_signs_and_verifies(tmp_path: Path) -> None:
    private, public = _pem_pair(tmp_path)
    cert = sign(issued(), load_signing_key(private))
    assert verify_certificate(cert, load_public_key(public)).startswith("signed by ED25519 key")
    with pytest.raises(SealError, match="does not match the key"):
        verify_certificate(cert, load_public_key(KEYS / "signer.pub"))


def test_fingerprint_is_what_ssh_keygen_prints() -> None:
    key = load_public_key(KEYS / "signer.pub")
    assert key.fingerprint == SIGNER_FINGERPRINT
    if shutil.which("ssh-keygen") is None:
        return
    for name in ("signer.pub", "other.pub"):
        printed = subprocess.run(
            ["ssh-keygen", "-lf", str(KEYS / name)], capture_output=True, text=True, check=True
        ).stdout.split()[1]
        assert load_public_key(KEYS / name).fingerprint == printed


def test_the_signature_is_ed25519_over_the_context_and_canonical_bytes() -> None:
    """The documented format: another tool can check it with the public key alone."""
    cert = sign(issued(), load_signing_key(KEYS / "signer"))
    assert cert.signature is not None
    raw = base64.b64decode(cert.signature.removeprefix("ed25519:"), validate=True)
    public = serialization.load_ssh_public_key((KEYS / "signer.pub").read_bytes())
    public.verify(raw, b"gpuready certificate signature v1\n" + canonical_bytes(cert))  # type: ignore[call-arg, union-attr]


def test_a_public_key_cannot_sign() -> None:
    with pytest.raises(BadInputError, match="public key"):
        load_signing_key(KEYS / "signer.pub")
    with pytest.raises(BadInputError, match="public key"):
        sign(issued(), load_key(KEYS / "signer.pub"))


@pytest.mark.parametrize("name", ["rsa", "rsa.pub"])
def test_other_key_types_are_refused(name: str) -> None:
    with pytest.raises(BadInputError, match="Ed25519 keys only") as caught:
        load_key(KEYS / name)
    assert "\n" not in str(caught.value)


def test_an_hmac_secret_is_no_public_key(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("site-secret\n")
    assert load_key(secret).kind is KeyKind.HMAC
    with pytest.raises(BadInputError, match="not an Ed25519 public key"):
        load_public_key(secret)


@pytest.mark.parametrize(
    "content",
    [
        b"ssh-ed25519 AAAA!!!notbase64 me\n",
        b"ssh-ed25519\n",
        b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
        b"-----BEGIN OPENSSH PRIVATE KEY-----\ngarbage\n-----END OPENSSH PRIVATE KEY-----\n",
        b"-----BEGIN PRIVATE KEY-----\n\n-----END PRIVATE KEY-----\n",
    ],
)
def test_a_garbled_key_file_is_one_line_never_an_hmac_secret(
    tmp_path: Path, content: bytes
) -> None:
    where = tmp_path / "bad"
    where.write_bytes(content)
    with pytest.raises(BadInputError) as caught:
        load_key(where)
    assert str(where) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_huge_key_file_is_refused(tmp_path: Path) -> None:
    where = tmp_path / "huge"
    where.write_bytes(b"x" * (1024 * 1024))
    with pytest.raises(BadInputError, match="not a key file"):
        load_key(where)


def test_a_fifo_nothing_writes_to_is_given_up_on_not_waited_on_forever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(signing, "_PIPE_WAIT_S", 0.5)
    planted = tmp_path / "key"
    os.mkfifo(planted)
    started = time.monotonic()
    with pytest.raises(BadInputError, match=r"a pipe nothing wrote a key to within 0\.5 s"):
        load_key(planted)
    assert time.monotonic() - started < 5


def test_a_key_handed_over_through_a_pipe_is_read(tmp_path: Path) -> None:
    # as --sign-key <(vault kv get -field=key ...) hands it over: /dev/fd/N, a pipe
    reading, writing = os.pipe()
    try:
        os.write(writing, b"piped-secret\n")
        os.close(writing)
        key = load_key(f"/dev/fd/{reading}")
    finally:
        os.close(reading)
    assert key.kind is KeyKind.HMAC
    assert key.secret == b"piped-secret"


def test_a_device_is_no_key_file() -> None:
    with pytest.raises(BadInputError, match="a device or a socket, not a key file"):
        load_key("/dev/zero")


def test_secrets_stay_out_of_repr(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("do-not-print-me\n")
    assert "do-not-print-me" not in repr(load_key(secret))
    signer = load_signing_key(KEYS / "signer")
    assert "Ed25519PrivateKey" not in repr(signer)


# ------------------------------------------------------------------ encrypted keys


def test_encrypted_openssh_key_needs_the_passphrase_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    with pytest.raises(BadInputError, match=PASSPHRASE_ENV) as caught:
        load_signing_key(KEYS / "encrypted")
    assert "command line" in str(caught.value)
    monkeypatch.setenv(PASSPHRASE_ENV, "wrong horse")
    with pytest.raises(BadInputError, match="does not open"):
        load_signing_key(KEYS / "encrypted")
    monkeypatch.setenv(PASSPHRASE_ENV, "correct horse")
    key = load_signing_key(KEYS / "encrypted")
    assert key.can_sign
    assert verify_certificate(sign(issued(), key), key).startswith("signed by ED25519 key")


def test_encrypted_pem_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    private, public = _pem_pair(tmp_path, b"pem pass")
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    with pytest.raises(BadInputError, match=PASSPHRASE_ENV):
        load_signing_key(private)
    monkeypatch.setenv(PASSPHRASE_ENV, "pem pass")
    cert = sign(issued(), load_signing_key(private))
    verify_certificate(cert, load_public_key(public))


def test_a_passphrase_set_for_an_unencrypted_key_is_not_in_the_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PASSPHRASE_ENV, "unused")
    assert load_signing_key(KEYS / "signer").can_sign


# ------------------------------------------------------------------ forgeries


def test_downgrade_to_hmac_keyed_by_the_public_key_fails() -> None:
    cert = sign(issued(), load_signing_key(KEYS / "signer"))
    public = load_public_key(KEYS / "signer.pub")
    edited = dataclasses.replace(cert, hostname="gpu-forged")
    for key_bytes in (
        (KEYS / "signer.pub").read_bytes(),
        (KEYS / "signer.pub").read_bytes().strip(),
        base64.b64decode((KEYS / "signer.pub").read_bytes().split()[1]),
    ):
        forged = sign(edited, key_bytes)  # an HMAC made with what anyone has
        with pytest.raises(SealError, match="never checks an HMAC"):
            verify_certificate(forged, public)


def test_downgrade_to_unsigned_fails_with_a_key_and_proves_nothing_without() -> None:
    cert = sign(issued(), load_signing_key(KEYS / "signer"))
    public = load_public_key(KEYS / "signer.pub")
    resealed = sign(dataclasses.replace(cert, hostname="gpu-forged"), b"x")
    stripped = dataclasses.replace(resealed, signature=None)
    with pytest.raises(SealError, match="not signed"):
        verify_certificate(stripped, public)
    said = verify_certificate(stripped, None)
    assert said == "digest matches; unsigned: proves nothing about who wrote it"


def test_a_signature_moved_to_another_certificate_fails() -> None:
    signer = load_signing_key(KEYS / "signer")
    public = load_public_key(KEYS / "signer.pub")
    first = sign(issued(), signer)
    other = sign(dataclasses.replace(issued(), hostname="gpu-node-02"), signer)
    moved = dataclasses.replace(other, signature=first.signature)
    with pytest.raises(SealError, match="does not match the key"):
        verify_certificate(moved, public)


def test_signed_without_a_key_names_the_flag() -> None:
    cert = sign(issued(), load_signing_key(KEYS / "signer"))
    with pytest.raises(CertificateError, match="--public-key") as caught:
        verify_certificate(cert, None)
    assert not isinstance(caught.value, SealError)


def test_hmac_still_verifies_and_says_what_it_proves() -> None:
    cert = sign(issued(), b"site-secret")
    assert (
        cert.signature
        == hmac.new(b"site-secret", canonical_bytes(cert), hashlib.sha256).hexdigest()
    )
    said = verify_certificate(cert, b"site-secret")
    assert said == "HMAC matches the shared key: anyone holding that key could have written it"
    with pytest.raises(SealError, match="--public-key"):
        verify_certificate(sign(issued(), load_signing_key(KEYS / "signer")), b"site-secret")


def test_an_ed25519_certificate_round_trips_through_json() -> None:
    cert = sign(issued(), load_signing_key(KEYS / "signer"))
    back = certificate_from_json(certificate_to_json(cert))
    assert back == cert
    verify_certificate(back, load_public_key(KEYS / "signer.pub"))


# ------------------------------------------------------------------ the commands


def test_certify_signs_with_ed25519_and_verify_cert_checks_with_the_public_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    runner = CliRunner()
    done = runner.invoke(
        cli,
        [
            "certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "2s",
            "--db", str(tmp_path / "h.db"), "--report-dir", str(tmp_path / "rep"),
            "--sign-key", str(KEYS / "signer"), "--json",
        ],
    )  # fmt: skip
    certificates = list((tmp_path / "rep" / "certificates").glob("*.json"))
    assert certificates, done.output
    path = str(certificates[0])
    checked = runner.invoke(cli, ["verify-cert", path, "--public-key", str(KEYS / "signer.pub")])
    assert checked.exit_code == 0, checked.output
    assert f"signed by ED25519 key {SIGNER_FINGERPRINT}" in checked.output
    wrong = runner.invoke(cli, ["verify-cert", path, "--public-key", str(KEYS / "other.pub")])
    # The group raises; main() maps the error to its exit code (1 for a seal that fails).
    assert isinstance(wrong.exception, NotVerified)
    assert wrong.exception.exit_code == 1
    assert "does not match the key" in str(wrong.exception)


def test_drift_checks_an_ed25519_baseline_with_the_public_key_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from validator.cli.main import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    db = str(tmp_path / "h.db")
    simulate = ("--simulate", "healthy-8x-h100-sxm")
    assert main(["certify", *simulate, "--burn", "2s", "--db", db,
                 "--sign-key", str(KEYS / "signer")]) == 0  # fmt: skip
    capsys.readouterr()
    public = ["--public-key", str(KEYS / "signer.pub")]
    assert main(["drift", *simulate, "--db", db, *public]) == 0
    assert "NO DRIFT" in capsys.readouterr().out
    # Another key's public half: the stored certificate is no trusted baseline.
    assert main(["drift", *simulate, "--db", db, "--public-key", str(KEYS / "other.pub")]) == 1
    assert "does not match the key" in capsys.readouterr().out
    # Both flags at once is a usage error.
    both = [*public, "--sign-key", str(KEYS / "signer")]
    assert main(["drift", *simulate, "--db", db, *both]) == 2
