"""Drain and resume Slurm nodes through ``scontrol``, touching only what gpuready drained.

Every command is an argument list handed to the runner (no shell), so a reason
with spaces or quotes stays one argument. The runner is injectable: tests pass
a fake that records the argument lists and answers like ``scontrol`` would.

Ownership is the reason's prefix: drift drains with ``gpuready: ...`` (:data:`PREFIX`)
and rolling provisioning with ``gpuready-provision: ...``; each resumes a node only
when its current reason starts with its own prefix. A node an administrator (or the
other gpuready command) drained for their own reason is left alone both ways: its
reason is never overwritten (which would later let us resume it). The two prefixes
do not start one another, so neither command ever takes over the other's drain.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

from validator.error_tree import BadInputError
from validator.safe_text import one_line
from validator.slurm.commands import CommandResult, Runner, SlurmError, run_slurm

PREFIX = "gpuready:"

# Slurm node names: letters, digits, dots, dashes, underscores. Anything else
# (a comma or bracket would name several nodes to scontrol) is refused.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# scontrol appends " [user@time]" to the reason it shows.
_REASON_SUFFIX = re.compile(r"\s*\[[^\[\]]*@[^\[\]]*\]\s*$")
_REASON_MAX_CHARS = 240
SCONTROL_TIMEOUT_S = 30.0


def run_scontrol(argv: Sequence[str]) -> CommandResult:
    """The default runner for drains and resumes: :func:`run_slurm`, for ``--slurm-drain``.

    Raises:
        SlurmError: the program is not installed or did not finish in time.
    """
    return run_slurm(argv, timeout_s=SCONTROL_TIMEOUT_S, needed_by="--slurm-drain")


def checked_name(host: str) -> str:
    """``host`` itself when it is one Slurm name (a comma or bracket would name several).

    Raises:
        BadInputError: it is not.
    """
    if not NODE_NAME.fullmatch(host):
        raise BadInputError(f"{host!r} is not a Slurm node name (letters, digits, '.', '-', '_')")
    return host


def _run(argv: list[str], runner: Runner) -> CommandResult:
    result = runner(argv)
    if result.returncode != 0:
        said = one_line(result.stderr or result.stdout) or f"exit {result.returncode}"
        raise SlurmError(f"{' '.join(argv[:3])} failed: {said}")
    return result


@dataclass(frozen=True)
class NodeState:
    """The part of ``scontrol show node`` gpuready needs."""

    name: str
    state: str  # e.g. IDLE+DRAIN, MIXED, DOWN+DRAIN
    reason: str | None  # without the " [user@time]" suffix; None when none set

    @property
    def ours(self) -> bool:
        """Whether gpuready's drift (:data:`PREFIX`) set the current reason."""
        return self.owned_by(PREFIX)

    def owned_by(self, prefix: str) -> bool:
        """Whether the current reason starts with ``prefix`` (who drained the node)."""
        return self.reason is not None and self.reason.startswith(prefix)

    @property
    def drained(self) -> bool:
        """Whether the node is draining or drained."""
        return any(part.startswith("DRAIN") for part in self.state.upper().split("+"))


def parse_show_node(text: str, host: str) -> NodeState:
    """Read state and reason from ``scontrol show node NAME`` output.

    The reason is printed last on its own line (``Reason=text [user@time]``) and may
    hold spaces, so it is taken whole from that line rather than split on blanks.

    Raises:
        SlurmError: the output names no such node.
    """
    state = ""
    reason: str | None = None
    found = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("NodeName="):
            found = True
        # ``scontrol -o`` prints it all on one line, the reason still last.
        head, marker, tail = line.partition(" Reason=")
        if marker:
            line = head
            value = _REASON_SUFFIX.sub("", tail).strip()
            reason = value if value and value != "(null)" else None
        if line.startswith("Reason="):
            value = _REASON_SUFFIX.sub("", line.removeprefix("Reason=")).strip()
            reason = value if value and value != "(null)" else None
            continue
        for part in line.split():
            if part.startswith("State="):
                state = part.removeprefix("State=")
    if not found:
        raise SlurmError(f"scontrol show node {host} gave no node: is it a Slurm node name?")
    return NodeState(name=host, state=state, reason=reason)


def node_state(host: str, runner: Runner = run_scontrol) -> NodeState:
    """The node's state and reason, as ``scontrol show node`` gives them.

    Raises:
        BadInputError: ``host`` is not a node name.
        SlurmError: scontrol is missing or failed.
    """
    name = checked_name(host)
    result = _run(["scontrol", "show", "node", name], runner)
    return parse_show_node(result.stdout, name)


class Action(str, enum.Enum):
    """What a drain or resume call did."""

    DRAINED = "drained"
    UPDATED = "updated"  # already drained by gpuready; reason brought up to date
    UNCHANGED = "unchanged"  # already drained by gpuready with this reason
    LEFT_ALONE = "left_alone"  # someone else's reason: not ours to change
    RESUMED = "resumed"
    NOT_DRAINED = "not_drained"  # nothing to resume


def drain(host: str, reason: str, runner: Runner = run_scontrol, *, prefix: str = PREFIX) -> Action:
    """Drain a node with a ``prefix`` reason, unless someone else drained it first.

    Args:
        host: the Slurm node name.
        reason: the reason; ``prefix`` is added when missing.
        runner: runs the scontrol argument lists.
        prefix: whose drain this is (drift's :data:`PREFIX` by default).

    Raises:
        BadInputError: ``host`` is not a node name.
        SlurmError: scontrol is missing or refused.
    """
    name = checked_name(host)
    text = one_line(
        reason if reason.startswith(prefix) else f"{prefix} {reason}", _REASON_MAX_CHARS
    )
    current = node_state(name, runner)
    ours = current.owned_by(prefix)
    if current.reason is not None and not ours:
        return Action.LEFT_ALONE
    if ours and current.drained and current.reason == text:
        return Action.UNCHANGED
    _run(["scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={text}"], runner)
    return Action.UPDATED if ours and current.drained else Action.DRAINED


def resume_if_ours(host: str, runner: Runner = run_scontrol, *, prefix: str = PREFIX) -> Action:
    """Resume a node only when we drained it (its reason starts with ``prefix``).

    Args:
        host: the Slurm node name.
        runner: runs the scontrol argument lists.
        prefix: whose drain may be lifted (drift's :data:`PREFIX` by default).

    Raises:
        BadInputError: ``host`` is not a node name.
        SlurmError: scontrol is missing or refused.
    """
    name = checked_name(host)
    current = node_state(name, runner)
    if not current.drained:
        return Action.NOT_DRAINED
    if not current.owned_by(prefix):
        return Action.LEFT_ALONE
    _run(["scontrol", "update", f"NodeName={name}", "State=RESUME"], runner)
    return Action.RESUMED


__all__ = [
    "NODE_NAME",
    "PREFIX",
    "Action",
    "NodeState",
    "checked_name",
    "drain",
    "node_state",
    "parse_show_node",
    "resume_if_ours",
    "run_scontrol",
]
