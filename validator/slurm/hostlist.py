"""Slurm host-lists (``gpu[001-064],login1``), expanded by Slurm itself, never by us.

``scontrol show hostnames`` works on the client alone (no slurmctld needed). It is
lenient: an unclosed ``n[01-`` comes back as the one "name" ``n]`` with exit 0, and an
empty list as nothing, so each name it gives is checked to be one node name.
"""

from __future__ import annotations

from validator.error_tree import BadInputError
from validator.slurm.commands import Runner, run_slurm, said
from validator.slurm.drain import NODE_NAME

_FIX = "give node names or a Slurm host-list such as gpu[001-064],login1"


def expand_hostlist(expression: str, runner: Runner = run_slurm) -> list[str]:
    """The node names a host-list names, in Slurm's order, each once.

    Args:
        expression: a host-list, e.g. ``gpu[001-004],login1``.
        runner: runs ``scontrol show hostnames EXPRESSION``.

    Returns:
        The names, e.g. ``["gpu001", "gpu002", "gpu003", "gpu004", "login1"]``.

    Raises:
        BadInputError: an empty expression, one that starts with ``-`` (scontrol would
            read an option), one scontrol refuses, or one that expands to something that
            is not a node name.
        SlurmError: scontrol is missing or did not answer.
    """
    text = expression.strip()
    if not text:
        raise BadInputError(f"an empty Slurm host-list: {_FIX}")
    if text.startswith("-") or any(char.isspace() for char in text):
        raise BadInputError(f"{text!r} is not a Slurm host-list: {_FIX}")
    result = runner(["scontrol", "show", "hostnames", text])
    if result.returncode != 0:
        raise BadInputError(f"Slurm cannot expand the host-list {text!r} ({said(result)}): {_FIX}")
    names = list(dict.fromkeys(line.strip() for line in result.stdout.splitlines() if line.strip()))
    wrong = [name for name in names if not NODE_NAME.fullmatch(name)]
    if not names or wrong:
        got = f"Slurm reads it as {', '.join(wrong[:3])}" if wrong else "it names no node"
        raise BadInputError(f"{text!r} is not a Slurm host-list ({got}): {_FIX}")
    return names


__all__ = ["expand_hostlist"]
