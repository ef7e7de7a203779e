"""``gpuready verify-cert FILE``: a certificate file tampered with in every way we know.

The file is the session baseline's signed certificate of h100-node-01, and ``{tmp}/key``
the key that signed it. Anything but the intact file is refused, on one line: exit 1 where
the file is a certificate whose seal does not hold (edited, re-signed, signature removed or
of another key), exit 2 where it is not a certificate or a key cannot be read.

The Ed25519 rows re-sign that certificate with tests/fixtures/keys/signer, here, by the
format the README documents (``ed25519:`` + base64 of the signature over a context line and
the canonical bytes), not through gpuready's own code; ``{tmp}/signer.pub`` is its public key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.hostile.cases import Case, case
from tests.hostile.data_files import (
    certificate_file,
    combine,
    drop_field,
    duplicate_hostname,
    duplicate_nested_key,
    flip_digest,
    json_edit,
    mkdir,
    nested_json,
    set_field,
    set_gpu_power,
    write,
)

HOST = "h100-node-01"
VERIFY = ("verify-cert", "{tmp}/cert.json")
KEY = ("--sign-key", "{tmp}/key")
PUBLIC = ("--public-key", "{tmp}/signer.pub")
KEYS = Path(__file__).resolve().parent.parent / "fixtures" / "keys"
# ssh-keygen -lf tests/fixtures/keys/signer.pub
SIGNER_FINGERPRINT = "SHA256:V9L+ErjFxSRjkQELkwvnl2wnMX2BGubm49Sq9cnLzbQ"
# What an Ed25519 certificate signature covers before the canonical bytes (README).
SIGNATURE_CONTEXT = b"gpuready certificate signature v1\n"


def _refused(
    label: str,
    edit: Callable[[str], str],
    err: str | tuple[str, ...],
    *,
    key: bool = True,
    exit: int = 2,
) -> Case:
    return case(
        f"verify-{label}",
        *VERIFY,
        *(KEY if key else ()),
        exit=exit,
        err=err,
        setup=certificate_file(HOST, edit),
    )


def _padded(text: str) -> str:
    data = json.loads(text)
    data["padding"] = "x" * 10_000_000
    return json.dumps(data)


def _drop_gpu_field(text: str) -> str:
    data = json.loads(text)
    del data["gpus"][0]["uuid"]
    return json.dumps(data, indent=2, sort_keys=True)


def _negative_index(data: dict[str, object]) -> None:
    data["gpus"][0]["index"] = -1  # type: ignore[index]


CASES: tuple[Case, ...] = (
    # Controls: intact with its key; unsigned (signature removed) intact without one.
    case(
        "verify-intact-with-key", *VERIFY, *KEY, exit=0, out="intact", setup=certificate_file(HOST)
    ),
    case(
        "verify-unsigned-without-key",
        *VERIFY,
        exit=0,
        out="intact",
        setup=certificate_file(HOST, set_field("signature", None)),
    ),
    _refused("signed-without-key", lambda t: t, "--sign-key", key=False),
    case(
        "verify-wrong-key",
        *VERIFY,
        "--sign-key",
        "{tmp}/wrongkey",
        exit=1,
        err="key",
        setup=combine(certificate_file(HOST), write("wrongkey", "some other secret\n")),
    ),
    _refused("signature-removed", drop_field("signature"), "signed", exit=1),
    _refused("signature-nulled", set_field("signature", None), "signed", exit=1),
    _refused("signature-forged", set_field("signature", "0" * 64), "signature", exit=1),
    _refused("digest-bit-flipped", flip_digest, "digest", exit=1),
    _refused("digest-removed", drop_field("digest"), "digest", exit=1),
    _refused("power-limit-edited", set_gpu_power(3, 500.0), "edited", exit=1),
    _refused("hostname-edited", set_field("hostname", "gpu99"), "edited", exit=1),
    _refused(
        "power-limit-rewritten-as-int", lambda t: t.replace("700.0", "700", 1), "edited", exit=1
    ),
    _refused("duplicate-hostname-first-tampered", duplicate_hostname, "hostname"),
    _refused("duplicate-key-inside-a-gpu", duplicate_nested_key, "power_limit_enforced_w"),
    _refused("empty-file", lambda _t: "", "cert.json"),
    _refused("whitespace-only", lambda _t: "  \n\n", "cert.json"),
    _refused("ten-megabytes", _padded, "cert.json"),
    _refused("json-array", lambda _t: "[1, 2, 3]", "cert.json"),
    _refused("json-string", lambda _t: '"certified"', "cert.json"),
    _refused(
        "nan-value",
        lambda t: t.replace('"power_limit_default_w": 700.0', '"power_limit_default_w": NaN', 1),
        "power_limit_default_w",
    ),
    _refused(
        "infinite-value",
        lambda t: t.replace(
            '"power_limit_default_w": 700.0', '"power_limit_default_w": Infinity', 1
        ),
        "power_limit_default_w",
    ),
    _refused(
        "number-overflows",
        lambda t: t.replace('"power_limit_default_w": 700.0', '"power_limit_default_w": 1e400', 1),
        "power_limit_default_w",
    ),
    _refused("schema-from-the-future", set_field("schema_version", 99), "newer"),
    _refused("schema-as-text", set_field("schema_version", "1"), "schema_version"),
    _refused("schema-as-bool", set_field("schema_version", True), "schema_version"),
    _refused("unknown-field", set_field("valid_until", "forever"), "valid_until"),
    _refused("gpus-not-a-list", set_field("gpus", {}), "gpus"),
    _refused("hostname-null", set_field("hostname", None), "hostname"),
    _refused("gpu-field-missing", _drop_gpu_field, "uuid"),
    _refused("gpu-index-negative", json_edit(_negative_index), "index"),
    _refused("trailing-garbage", lambda t: t + "garbage\n", "cert.json"),
    _refused("two-documents", lambda t: t + t, "cert.json"),
    case(
        "verify-binary-file",
        *VERIFY,
        *KEY,
        exit=2,
        err="cert.json",
        setup=combine(certificate_file(HOST), write("cert.json", bytes(range(256)) * 64)),
    ),
    case(
        "verify-latin1-file",
        *VERIFY,
        *KEY,
        exit=2,
        err="cert.json",
        setup=combine(certificate_file(HOST), write("cert.json", b'{"hostname": "caf\xe9"}')),
    ),
    case(
        "verify-nested-200k-deep",
        *VERIFY,
        *KEY,
        exit=2,
        err="cert.json",
        setup=combine(certificate_file(HOST), write("cert.json", nested_json(200_000))),
        child=True,
        timeout_s=60,
    ),
    # The terminal is not the certificate's to drive: no escape sequence reaches stderr.
    case(
        "verify-hostname-with-terminal-escapes",
        *VERIFY,
        *KEY,
        exit=1,
        forbid="\x1b[",
        setup=certificate_file(HOST, set_field("hostname", "gpu\u001b[2J\u001b[31m01")),
    ),
    case("verify-missing-file", "verify-cert", "{tmp}/nocert.json", exit=2, err="nocert.json"),
    case(
        "verify-directory", "verify-cert", "{tmp}/certs", exit=2, err="certs", setup=mkdir("certs")
    ),
    case("verify-empty-path", "verify-cert", "", exit=2, err="FILE"),
    case("verify-no-argument", "verify-cert", exit=2, err="FILE"),
    case(
        "verify-key-file-empty",
        *VERIFY,
        "--sign-key",
        "{tmp}/emptykey",
        exit=2,
        err="emptykey",
        setup=combine(certificate_file(HOST), write("emptykey", "\n\n")),
    ),
    case(
        "verify-key-file-missing",
        *VERIFY,
        "--sign-key",
        "{tmp}/nokey",
        exit=2,
        err="nokey",
        setup=certificate_file(HOST),
    ),
    case(
        "verify-key-is-a-directory",
        *VERIFY,
        "--sign-key",
        "{tmp}/keys",
        exit=2,
        err="keys",
        setup=combine(certificate_file(HOST), mkdir("keys")),
    ),
    case(
        "verify-key-empty-path",
        *VERIFY,
        "--sign-key",
        "",
        exit=2,
        err="--sign-key",
        setup=certificate_file(HOST),
    ),
)


# ------------------------------------------------------------------ Ed25519 rows


def _canonical(data: dict[str, Any]) -> bytes:
    """The bytes a certificate's seal covers: every field but the seal, sorted, compact."""
    content = {k: v for k, v in data.items() if k not in ("digest", "signature")}
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _signer() -> Ed25519PrivateKey:
    key = serialization.load_ssh_private_key((KEYS / "signer").read_bytes(), None)
    assert isinstance(key, Ed25519PrivateKey)
    return key


def _reseal(change: Callable[[dict[str, Any]], None]) -> Callable[[str], str]:
    """Apply ``change`` (which may set the signature), then recompute the digest."""

    def edit(text: str) -> str:
        data = json.loads(text)
        change(data)
        data["digest"] = hashlib.sha256(_canonical(data)).hexdigest()
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    return edit


def _ed25519_sign(data: dict[str, Any]) -> None:
    signed = _signer().sign(SIGNATURE_CONTEXT + _canonical(data))
    data["signature"] = "ed25519:" + base64.b64encode(signed).decode()


def _signed_then(change: Callable[[dict[str, Any]], None]) -> Callable[[str], str]:
    """Signed with the signer's key, then ``change`` applied and the digest recomputed."""

    def both(data: dict[str, Any]) -> None:
        _ed25519_sign(data)
        change(data)

    return _reseal(both)


def _nothing(data: dict[str, Any]) -> None:
    del data  # the signed certificate as it is


def _power(data: dict[str, Any]) -> None:
    data["gpus"][0]["power_limit_enforced_w"] = 500.0


def _unsigned(data: dict[str, Any]) -> None:
    data["signature"] = None


def _edited_unsigned(data: dict[str, Any]) -> None:
    _power(data)
    data["signature"] = None


def _public_key_bytes() -> list[bytes]:
    line = (KEYS / "signer.pub").read_bytes()
    raw = (
        _signer()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    return [line.strip(), line, raw, base64.b64decode(line.split()[1])]


def _hmac_with_public_key(which: int) -> Callable[[dict[str, Any]], None]:
    """Downgrade: the body edited, then "signed" with HMAC keyed by the public key's bytes."""

    def change(data: dict[str, Any]) -> None:
        _power(data)
        key = _public_key_bytes()[which]
        data["signature"] = hmac.new(key, _canonical(data), hashlib.sha256).hexdigest()

    return change


def _bad_signature(value: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["signature"] = value

    return change


def _truncated_signature(data: dict[str, Any]) -> None:
    data["signature"] = data["signature"][:-8]


def _flipped_signature(data: dict[str, Any]) -> None:
    raw = bytearray(base64.b64decode(data["signature"][len("ed25519:") :]))
    raw[10] ^= 1
    data["signature"] = "ed25519:" + base64.b64encode(bytes(raw)).decode()


def _ed25519(
    label: str,
    change: Callable[[dict[str, Any]], None],
    *argv: str,
    exit: int,
    err: str | tuple[str, ...] = (),
    out: str | tuple[str, ...] = (),
    extra: Callable[..., None] | None = None,
) -> Case:
    keys = combine(
        write("signer.pub", (KEYS / "signer.pub").read_bytes()),
        write("signer", (KEYS / "signer").read_bytes()),
        write("other.pub", (KEYS / "other.pub").read_bytes()),
        write("rsa.pub", (KEYS / "rsa.pub").read_bytes()),
    )
    setup = combine(certificate_file(HOST, _signed_then(change)), keys)
    return case(
        f"verify-ed25519-{label}",
        *VERIFY,
        *argv,
        exit=exit,
        err=err,
        out=out,
        setup=combine(setup, extra) if extra else setup,
    )


ED25519_CASES: tuple[Case, ...] = (
    # Controls: the public key alone verifies and names the key; so does the private key.
    _ed25519("intact", _nothing, *PUBLIC, exit=0, out=("signed by", SIGNER_FINGERPRINT)),
    _ed25519(
        "intact-private-key",
        _nothing,
        "--sign-key",
        "{tmp}/signer",
        exit=0,
        out=SIGNER_FINGERPRINT,
    ),
    _ed25519("other-public-key", _nothing, "--public-key", "{tmp}/other.pub", exit=1, err="key"),
    _ed25519("without-a-key", _nothing, exit=2, err="--public-key"),
    # Whoever can edit the file can recompute the digest: the signature still fails.
    _ed25519("body-edited-digest-recomputed", _power, *PUBLIC, exit=1, err="signature"),
    # Downgrades: to an unsigned (sha256 only) certificate, or to HMAC with the public key.
    _ed25519("resealed-sha256-only", _edited_unsigned, *PUBLIC, exit=1, err="not signed"),
    _ed25519("signature-stripped", _unsigned, *PUBLIC, exit=1, err="not signed"),
    *(
        _ed25519(
            f"hmac-keyed-by-public-key-{i}", _hmac_with_public_key(i), *PUBLIC, exit=1, err="HMAC"
        )
        for i in range(4)
    ),
    # The public key file given where an HMAC secret goes is still a public key.
    _ed25519(
        "hmac-keyed-by-public-key-as-sign-key",
        _hmac_with_public_key(0),
        "--sign-key",
        "{tmp}/signer.pub",
        exit=1,
        err="HMAC",
    ),
    _ed25519("signature-truncated", _truncated_signature, *PUBLIC, exit=1, err="signature"),
    _ed25519("signature-bit-flipped", _flipped_signature, *PUBLIC, exit=1, err="signature"),
    _ed25519(
        "signature-not-base64", _bad_signature("ed25519:!!!"), *PUBLIC, exit=1, err="signature"
    ),
    _ed25519(
        "signature-non-ascii",
        _bad_signature("ed25519:\u00e9\ud800"),
        *PUBLIC,
        exit=1,
        err="signature",
    ),
    _ed25519("signature-empty", _bad_signature(""), *PUBLIC, exit=1, err="Ed25519"),
    # Keys that are no Ed25519 public key are refused before the certificate is judged.
    _ed25519(
        "public-key-is-an-hmac-secret",
        _nothing,
        "--public-key",
        "{tmp}/key",
        exit=2,
        err=("key", "Ed25519"),
    ),
    _ed25519("public-key-is-rsa", _nothing, "--public-key", "{tmp}/rsa.pub", exit=2, err="Ed25519"),
    _ed25519(
        "public-key-garbled",
        _nothing,
        "--public-key",
        "{tmp}/bad.pub",
        exit=2,
        err="bad.pub",
        extra=write("bad.pub", "ssh-ed25519 AAAA!!!notbase64 me\n"),
    ),
    _ed25519(
        "public-key-and-sign-key",
        _nothing,
        *PUBLIC,
        *KEY,
        exit=2,
        err=("--public-key", "--sign-key"),
    ),
)

# What verify-cert says it proved, for the certificates that do verify.
PROOF_CASES: tuple[Case, ...] = (
    case(
        "verify-hmac-says-what-it-proves",
        *VERIFY,
        *KEY,
        exit=0,
        out="anyone holding that key could have written it",
        setup=certificate_file(HOST),
    ),
    case(
        "verify-unsigned-says-it-proves-nothing",
        *VERIFY,
        exit=0,
        out="unsigned: proves nothing about who wrote it",
        setup=certificate_file(HOST, set_field("signature", None)),
    ),
    # The HMAC certificate, checked with a public key: the key decides the algorithm.
    case(
        "verify-hmac-certificate-with-a-public-key",
        *VERIFY,
        *PUBLIC,
        exit=1,
        err="HMAC",
        setup=combine(
            certificate_file(HOST), write("signer.pub", (KEYS / "signer.pub").read_bytes())
        ),
    ),
)

# Provenance is inside the seal (issue 30): a simulated node's certificate cannot be
# made to read live, nor have its provenance removed, without failing verification.
PROVENANCE_CASES: tuple[Case, ...] = (
    case(
        "verify-provenance-edited-to-live",
        *VERIFY,
        *KEY,
        exit={1, 2},
        forbid="intact",
        setup=certificate_file(HOST, set_field("provenance", "live")),
    ),
    case(
        "verify-provenance-removed",
        *VERIFY,
        *KEY,
        exit={1, 2},
        err="provenance",
        forbid="intact",
        setup=certificate_file(HOST, drop_field("provenance")),
    ),
)

CASES = (*CASES, *ED25519_CASES, *PROOF_CASES, *PROVENANCE_CASES)
