"""Extra variables that hold secrets, and the private file they reach ansible-playbook in.

ansible-runner hands a dict of extra variables to ansible-playbook as ``-e '{json}'``:
every local user sees that command line (``ps``, /proc/<pid>/cmdline) for the whole
run, and ansible-runner records it in the run's artifacts (``command``). So variables
that look like secrets by their name (become, connection and vault passwords, tokens),
or that hold such a name anywhere inside, go apart: into a file only the owner can
read (0600, created new, never through a link), named on the command line as
``-e @FILE`` and removed when the run ends, however it ends.

On gpuready's own command line (``-e KEY=VALUE``) such a variable is refused: it is
already in the process list and the shell's history by then. The become password has
``-K``; anything else goes in a vars file given as ``-e @FILE``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from validator.error_tree import BadInputError, CouldNotRunError

# Ansible's ansible_password, ansible_ssh_pass, ansible_become_pass(word), vault
# passwords, API tokens, client secrets; "pass" only as a whole word ("bypass" is not).
_SECRET = re.compile(
    r"password|passwd|passphrase|secret|token|credential|(?:^|_)pass(?:$|_)", re.IGNORECASE
)
# A variable naming where a secret lives is no secret (vault_password_file).
_WHERE = re.compile(r"_(?:file|path|dir)$", re.IGNORECASE)
# Deeper than any vars file nests: a structure past it is treated as secret.
_DEPTH_MAX = 64


def is_secret_name(name: str) -> bool:
    """Whether a variable named ``name`` holds a secret, by its name."""
    return bool(_SECRET.search(name)) and not _WHERE.search(name)


def holds_secret(name: str, value: object, depth: int = 0) -> bool:
    """Whether ``name`` is a secret's, or ``value`` holds one under a secret's name."""
    if is_secret_name(name):
        return True
    if depth > _DEPTH_MAX:
        return True  # fail closed: unread is not harmless
    if isinstance(value, Mapping):
        return any(holds_secret(str(key), item, depth + 1) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return any(holds_secret("", item, depth + 1) for item in value)
    return False


def split_secrets(
    variables: Mapping[str, object],
) -> tuple[dict[str, object], dict[str, object]]:
    """The variables that may go on a command line, and the ones that hold secrets."""
    public: dict[str, object] = {}
    secret: dict[str, object] = {}
    for name, value in variables.items():
        (secret if holds_secret(name, value) else public)[name] = value
    return public, secret


def refuse_on_command_line(name: str, value: object) -> None:
    """Refuse ``-e NAME=VALUE`` that holds a secret; the message never shows the value.

    Raises:
        BadInputError: the variable holds a secret.
    """
    if holds_secret(name, value):
        raise BadInputError(
            f"-e {name}=...: {name} holds a secret, and a command line is seen by every "
            "local user (ps) and kept in shell history: give the become password with -K "
            "(--ask-become-pass), or put the variable in a file only you can read and "
            "pass -e @FILE"
        )


def write_secrets(folder: Path, ident: str, secrets: Mapping[str, object]) -> Path:
    """``secrets`` as JSON in a new 0600 file in ``folder`` (the run's private data dir).

    Created with ``O_EXCL`` and ``O_NOFOLLOW``: a file or link planted at the name is
    refused, never written through.

    Raises:
        CouldNotRunError: the file cannot be created or written.
    """
    path = folder / f"vars-{ident}.json"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        descriptor = os.open(path, flags, 0o600)
    except OSError as exc:
        raise CouldNotRunError(
            f"cannot create the private extra-variables file {path}: {exc.strerror or exc}"
        ) from None
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(dict(secrets), handle, default=str)
    except OSError as exc:
        remove_secrets(path)
        raise CouldNotRunError(
            f"cannot write the private extra-variables file {path}: {exc.strerror or exc}"
        ) from None
    return path


def remove_secrets(path: Path) -> None:
    """Remove the file :func:`write_secrets` made; gone already is fine."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
