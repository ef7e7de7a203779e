"""``gpuready verify-cert FILE``: a certificate file tampered with in every way we know.

The file is the session baseline's signed certificate of h100-node-01, and ``{tmp}/key``
the key that signed it. Anything but the intact file is refused: exit 2, one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable

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


def _refused(
    label: str, edit: Callable[[str], str], err: str | tuple[str, ...], *, key: bool = True
) -> Case:
    return case(
        f"verify-{label}",
        *VERIFY,
        *(KEY if key else ()),
        exit=2,
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
        exit=2,
        err="key",
        setup=combine(certificate_file(HOST), write("wrongkey", "some other secret\n")),
    ),
    _refused("signature-removed", drop_field("signature"), "signed"),
    _refused("signature-nulled", set_field("signature", None), "signed"),
    _refused("signature-forged", set_field("signature", "0" * 64), "signature"),
    _refused("digest-bit-flipped", flip_digest, "digest"),
    _refused("digest-removed", drop_field("digest"), "digest"),
    _refused("power-limit-edited", set_gpu_power(3, 500.0), "edited"),
    _refused("hostname-edited", set_field("hostname", "gpu99"), "edited"),
    _refused("power-limit-rewritten-as-int", lambda t: t.replace("700.0", "700", 1), "edited"),
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
        exit=2,
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
