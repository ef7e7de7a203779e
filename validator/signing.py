"""Keys that seal certificates: a shared HMAC secret, or an Ed25519 key pair.

An HMAC-SHA256 secret proves only that someone holding the secret wrote a
certificate, and every verifier holds it: whoever can check a certificate can
forge one. An Ed25519 signature is made with a private key and checked with the
public key alone, so the hosts and people that verify certificates cannot issue
them. Both stay readable: a certificate's ``signature`` is HMAC's 64 hex digits,
or ``ed25519:`` and the base64 of the 64-byte signature.

The verifier picks the algorithm from the key it was given, never from the
certificate: an Ed25519 public key checks Ed25519 signatures only, so a
certificate "re-signed" with HMAC keyed by the (public) key bytes is refused,
and a file holding any public or private key is never read as an HMAC secret.

Keys are read with the ``cryptography`` library (paramiko's own dependency): an
OpenSSH key (``ssh-keygen -t ed25519``) or PEM (``openssl genpkey -algorithm
ed25519``). An encrypted private key's passphrase comes from the environment
variable :data:`PASSPHRASE_ENV`, never the command line (``ps`` shows argv).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import os
import select
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Union

from validator.error_tree import BadInputError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

# The name of the variable, not a secret.
PASSPHRASE_ENV = "GPUREADY_SIGN_KEY_PASSPHRASE"  # noqa: S105
ED25519_PREFIX = "ed25519:"
# Signed before the certificate's bytes: a signature this key made for anything
# else (another tool's message that happens to be JSON) is no certificate signature.
_CONTEXT = b"gpuready certificate signature v1\n"
# A key file is a few hundred bytes; an HMAC secret file rarely more than a line.
_KEY_FILE_MAX = 64 * 1024
# How long a key handed over through a pipe (``<(vault ...)``) may take to arrive.
_PIPE_WAIT_S = 10.0
# How key files begin: such a file is a key of some kind, never an HMAC secret.
_KEY_SHAPES = (b"-----BEGIN ", b"ssh-", b"ecdsa-", b"sk-")


class KeyKind(enum.Enum):
    """How a key seals a certificate."""

    HMAC = "hmac-sha256"
    ED25519 = "ed25519"


def signature_kind(signature: str) -> KeyKind:
    """The algorithm a certificate's ``signature`` says it was made with (by its shape)."""
    return KeyKind.ED25519 if signature.startswith(ED25519_PREFIX) else KeyKind.HMAC


@dataclass(frozen=True)
class SealKey:
    """A key read from a file: an HMAC secret, or an Ed25519 private or public key.

    Attributes:
        kind: HMAC or Ed25519.
        path: the file it was read from, for messages.
    """

    kind: KeyKind
    path: str
    # The secrets stay out of repr: a request holding a key may be logged.
    secret: bytes = field(default=b"", repr=False)  # HMAC only
    private: Ed25519PrivateKey | None = field(default=None, repr=False)
    public: Ed25519PublicKey | None = field(default=None, repr=False)

    @property
    def can_sign(self) -> bool:
        """False for a public key, which only checks signatures."""
        return self.kind is KeyKind.HMAC or self.private is not None

    @property
    def fingerprint(self) -> str | None:
        """``SHA256:...`` as ``ssh-keygen -lf`` prints it, for an Ed25519 key; else None."""
        if self.public is None:
            return None
        from cryptography.hazmat.primitives import serialization

        line = self.public.public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        blob = base64.b64decode(line.split()[1])
        return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")

    def sign(self, data: bytes) -> str:
        """The ``signature`` field for ``data``: HMAC hex, or ``ed25519:`` + base64.

        Raises:
            BadInputError: a public key, which cannot sign.
        """
        if self.kind is KeyKind.HMAC:
            return hmac.new(self.secret, data, hashlib.sha256).hexdigest()
        if self.private is None:
            raise BadInputError(
                f"{self.path} is a public key: signing needs the private key it belongs to"
            )
        signed = self.private.sign(_CONTEXT + data)
        return ED25519_PREFIX + base64.b64encode(signed).decode("ascii")

    def holds(self, signature: str, data: bytes) -> bool:
        """Whether ``signature`` was made over ``data`` with this key, by this key's algorithm.

        A signature of the other algorithm never holds: the key decides, not the file.
        """
        if signature_kind(signature) is not self.kind:
            return False
        if self.kind is KeyKind.HMAC:
            computed = hmac.new(self.secret, data, hashlib.sha256).hexdigest()
            # compare_digest refuses non-ASCII str; an edited file may hold anything.
            return hmac.compare_digest(
                signature.encode("utf-8", "surrogatepass"), computed.encode("ascii")
            )
        return self._ed25519_holds(signature[len(ED25519_PREFIX) :], data)

    def _ed25519_holds(self, encoded: str, data: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature

        if self.public is None:  # an Ed25519 SealKey is always made with its public key
            return False
        try:
            signed = base64.b64decode(encoded.encode("ascii"), validate=True)
        except (UnicodeEncodeError, binascii.Error):
            return False
        if len(signed) != 64:
            return False
        try:
            self.public.verify(signed, _CONTEXT + data)
        except InvalidSignature:
            return False
        return True


# Accepted wherever a key is: raw bytes are an HMAC secret (the API before Ed25519).
KeyLike = Union[bytes, SealKey]


def as_key(key: KeyLike) -> SealKey:
    """``key`` as a SealKey: bytes are an HMAC secret.

    Raises:
        ValueError: empty bytes, which would sign nothing.
    """
    if isinstance(key, SealKey):
        return key
    if not key:
        raise ValueError("an empty key cannot sign a certificate")
    return SealKey(KeyKind.HMAC, "(key)", secret=key)


def _read(where: Path) -> bytes:
    """The key file's bytes, whitespace around them removed; a pipe is waited on for a while.

    ``--sign-key <(vault kv get ...)`` hands over a pipe, which is read until its writer
    closes it; one nothing writes to (a planted FIFO) is given up on after
    :data:`_PIPE_WAIT_S` instead of hanging the run. A device or a socket is refused.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(where, flags)
    except FileNotFoundError:
        raise BadInputError(f"signing key file {where} does not exist") from None
    except OSError as exc:
        raise BadInputError(f"cannot read signing key file {where}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise BadInputError(f"signing key {where} is a directory, not a key file")
        if stat.S_ISFIFO(mode):
            data = _read_pipe(where, fd)
        elif stat.S_ISREG(mode):
            os.set_blocking(fd, True)
            with os.fdopen(os.dup(fd), "rb") as handle:
                data = handle.read(_KEY_FILE_MAX + 1)
        else:
            raise BadInputError(
                f"signing key {where} is a device or a socket, not a key file: give a file"
            )
    except OSError as exc:
        raise BadInputError(f"cannot read signing key file {where}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > _KEY_FILE_MAX:
        raise BadInputError(
            f"signing key file {where} is over {_KEY_FILE_MAX // 1024} KiB: not a key file"
        )
    return data.strip()


def _read_pipe(where: Path, fd: int) -> bytes:
    """What a pipe's writer sends until it closes it, bounded in bytes and in time."""
    until = time.monotonic() + _PIPE_WAIT_S
    parts: list[bytes] = []
    held = 0
    while held <= _KEY_FILE_MAX:
        left = until - time.monotonic()
        readable, _, _ = select.select([fd], [], [], max(0.0, left))
        if not readable:
            raise BadInputError(
                f"signing key {where} is a pipe nothing wrote a key to within "
                f"{_PIPE_WAIT_S:g} s: give a key file"
            )
        try:
            chunk = os.read(fd, _KEY_FILE_MAX + 1 - held)
        except BlockingIOError:
            continue
        if not chunk:
            if held == 0 and time.monotonic() < until:
                # No writer yet (a FIFO opened before its writer): an empty read, not the end.
                time.sleep(0.05)
                continue
            if held == 0:
                raise BadInputError(
                    f"signing key {where} is a pipe nothing wrote a key to within "
                    f"{_PIPE_WAIT_S:g} s: give a key file"
                )
            break
        parts.append(chunk)
        held += len(chunk)
    return b"".join(parts)


def load_key(path: str | Path) -> SealKey:
    """The key held in a file: an Ed25519 key (OpenSSH or PEM), else an HMAC secret.

    An HMAC secret is the file's bytes, surrounding whitespace removed (``echo`` and
    ``openssl rand -hex 32 > key`` write the same key). A file shaped like any key
    (PEM armour, ``ssh-...``) is never taken as an HMAC secret: a public key used as
    one would let anyone sign.

    Raises:
        BadInputError: missing, unreadable, empty, too large; a key of another type
            (RSA, ECDSA); an encrypted key without its passphrase or with a wrong one.
    """
    where = Path(path)
    data = _read(where)
    if not data:
        raise BadInputError(f"signing key file {where} is empty: put a secret in it")
    if not data.startswith(_KEY_SHAPES):
        return SealKey(KeyKind.HMAC, str(where), secret=data)
    return _asymmetric(where, data)


def load_public_key(path: str | Path) -> SealKey:
    """An Ed25519 public key (an ``ssh-ed25519 ...`` line or PEM) to verify with.

    A private key file is taken too (its public half is used); a shared HMAC secret is not.

    Raises:
        BadInputError: as :func:`load_key`, and a file that is not an Ed25519 key.
    """
    key = load_key(path)
    if key.kind is not KeyKind.ED25519:
        raise BadInputError(
            f"{path} is not an Ed25519 public key (an 'ssh-ed25519 AAAA...' line or a PEM "
            "PUBLIC KEY): a shared HMAC key file goes with --sign-key"
        )
    return key


def load_signing_key(path: str | Path) -> SealKey:
    """A key that can sign: an HMAC secret or an Ed25519 private key.

    Raises:
        BadInputError: as :func:`load_key`, and a public key (it cannot sign).
    """
    key = load_key(path)
    if not key.can_sign:
        raise BadInputError(
            f"--sign-key {path} is a public key: sign with its private key "
            "(the public key is what verify-cert --public-key takes)"
        )
    return key


def _asymmetric(where: Path, data: bytes) -> SealKey:
    """An Ed25519 key from a file shaped like a key.

    Raises:
        BadInputError: not a key cryptography reads, not Ed25519, or a passphrase problem.
    """
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    private = b"PRIVATE KEY-----" in data.split(b"\n", 1)[0]
    try:
        if not private:
            loaded: object = (
                serialization.load_pem_public_key(data)
                if data.startswith(b"-----BEGIN ")
                else serialization.load_ssh_public_key(data)
            )
        else:
            loaded = _private(where, data)
    except BadInputError:
        raise  # a ValueError too, already one line with its fix
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise BadInputError(
            f"signing key file {where} cannot be read as a key ({_first_line(exc)}): "
            "make one with ssh-keygen -t ed25519"
        ) from None
    if isinstance(loaded, ed25519.Ed25519PrivateKey):
        return SealKey(KeyKind.ED25519, str(where), private=loaded, public=loaded.public_key())
    if isinstance(loaded, ed25519.Ed25519PublicKey):
        return SealKey(KeyKind.ED25519, str(where), public=loaded)
    kind = type(loaded).__name__.replace("_", "").replace("PrivateKey", "").replace("PublicKey", "")
    raise BadInputError(
        f"signing key file {where} holds a {kind or 'non-Ed25519'} key: gpuready signs with "
        "Ed25519 keys only: make one with ssh-keygen -t ed25519"
    )


def _load_private(data: bytes, password: bytes | None) -> object:
    from cryptography.hazmat.primitives import serialization

    if data.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----"):
        return serialization.load_ssh_private_key(data, password)
    return serialization.load_pem_private_key(data, password)


def _private(where: Path, data: bytes) -> object:
    """A private key, opened with the passphrase from the environment where it is encrypted.

    Raises:
        BadInputError: encrypted and no passphrase set, or the passphrase does not open it.
        ValueError: not a private key cryptography can read.
    """
    try:
        return _load_private(data, None)
    except TypeError:
        pass  # encrypted: cryptography says so with a TypeError
    passphrase = os.environ.get(PASSPHRASE_ENV)
    if not passphrase:
        raise BadInputError(
            f"signing key {where} is encrypted: put its passphrase in the environment "
            f"variable {PASSPHRASE_ENV} (never on the command line)"
        )
    try:
        return _load_private(data, passphrase.encode("utf-8", "surrogateescape"))
    except (TypeError, ValueError):
        raise BadInputError(
            f"the passphrase in {PASSPHRASE_ENV} does not open signing key {where}"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:160] if text else type(exc).__name__
