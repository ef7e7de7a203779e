"""Reservations gpuready makes: a quarantine for nodes it drained, while it re-tests them."""

from __future__ import annotations

import math
from collections.abc import Sequence

from validator.slurm.commands import Runner, SlurmError, checked, run_slurm
from validator.slurm.drain import checked_name
from validator.text import one_line


def create_reservation(
    name: str,
    nodes: Sequence[str],
    duration_s: float,
    users: Sequence[str],
    runner: Runner = run_slurm,
) -> None:
    """Reserve ``nodes`` from now for ``duration_s`` for ``users`` only (maintenance).

    ``IGNORE_JOBS`` makes it even where jobs still run; ``MAINT`` keeps those nodes out
    of the cluster's utilisation accounting, as a maintenance window is.

    Raises:
        BadInputError: a node or reservation name Slurm would read as several.
        SlurmError: scontrol refused.
    """
    checked_name(name)
    listed = ",".join(checked_name(node) for node in nodes)
    minutes = max(1, math.ceil(duration_s / 60.0))
    checked(
        [
            "scontrol", "create", "reservation", f"ReservationName={name}", f"Nodes={listed}",
            "StartTime=now", f"Duration={minutes}", f"Users={','.join(users)}",
            "Flags=MAINT,IGNORE_JOBS",
        ],
        runner,
    )  # fmt: skip


def delete_reservation(name: str, runner: Runner = run_slurm) -> None:
    """Delete the reservation; one already gone is fine.

    Raises:
        SlurmError: scontrol refused for another reason.
    """
    result = runner(["scontrol", "delete", f"ReservationName={checked_name(name)}"])
    said = one_line(result.stderr or result.stdout)
    if result.returncode != 0 and "invalid reservation" not in said.lower():
        raise SlurmError(f"scontrol delete reservation {name} failed: {said}")


__all__ = ["create_reservation", "delete_reservation"]
