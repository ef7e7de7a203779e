"""Reservations gpuready makes: a quarantine for nodes it drained, while it re-tests them."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from validator.error_tree import BadInputError
from validator.slurm.commands import Runner, SlurmError, checked, run_slurm, said
from validator.slurm.drain import checked_name

# POSIX user names (and Slurm's "-user" / "+user" are not ours to use).
_USER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*\$?")
_GONE = ("requested reservation is invalid", "invalid reservation")


def _checked_user(user: str) -> str:
    if not _USER.fullmatch(user):
        raise BadInputError(f"{user!r} is not a user name Slurm can reserve nodes for")
    return user


def create_reservation(
    name: str,
    nodes: Sequence[str],
    duration_s: float,
    users: Sequence[str],
    runner: Runner = run_slurm,
) -> None:
    """Reserve ``nodes`` from now for ``duration_s`` for ``users`` only (maintenance).

    Runs ``scontrol create reservation ReservationName=NAME Nodes=A,B StartTime=now
    Duration=MINUTES Users=U Flags=MAINT,IGNORE_JOBS``. ``IGNORE_JOBS`` makes it even
    where jobs still run; ``MAINT`` keeps those nodes out of the cluster's utilisation
    accounting, as a maintenance window is. The duration is rounded up to whole minutes.

    Raises:
        BadInputError: no node or no user, or a node, user or reservation name Slurm
            would read as several.
        SlurmError: scontrol refused (its words, e.g. "Invalid node name specified").
    """
    checked_name(name)
    if not nodes:
        raise BadInputError(f"reservation {name}: no nodes to reserve")
    if not users:
        raise BadInputError(f"reservation {name}: no user to reserve the nodes for")
    listed = ",".join(checked_name(node) for node in nodes)
    people = ",".join(_checked_user(user) for user in users)
    minutes = max(1, math.ceil(duration_s / 60.0))
    checked(
        [
            "scontrol", "create", "reservation", f"ReservationName={name}", f"Nodes={listed}",
            "StartTime=now", f"Duration={minutes}", f"Users={people}",
            "Flags=MAINT,IGNORE_JOBS",
        ],
        runner,
    )  # fmt: skip


def delete_reservation(name: str, runner: Runner = run_slurm) -> None:
    """Delete the reservation; one already gone is fine.

    Raises:
        BadInputError: ``name`` is not one reservation name.
        SlurmError: scontrol refused for another reason.
    """
    result = runner(["scontrol", "delete", f"ReservationName={checked_name(name)}"])
    if result.returncode != 0 and not any(gone in said(result).lower() for gone in _GONE):
        raise SlurmError(f"scontrol delete reservation {name} failed: {said(result)}")


__all__ = ["create_reservation", "delete_reservation"]
