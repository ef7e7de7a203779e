"""The quarantine never leaks: whatever stops a submission, gpuready's drained nodes go back.

A fake Slurm answers from the test cluster's recordings and keeps the one piece of
state that matters here, whether node02 is drained; sbatch refuses the job after the
quarantine was made and the node resumed inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from validator.model import HostSpec
from validator.remote.transport import AgentRequest
from validator.slurm import CommandResult, SlurmError
from validator.slurm.job_fanout import SlurmOptions, Targets, submit_run
from validator.slurm.nodes import SlurmNode

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm"
DRAINED = (FIXTURES / "scontrol-show-node-drained.txt").read_text()
REASON = "gpuready: xid 79 fell off the bus"


class Cluster:
    """scontrol and sbatch as far as a quarantine goes; every call recorded."""

    def __init__(self) -> None:
        self.drained = True
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        call = list(argv)
        self.calls.append(call)
        if call[:3] == ["scontrol", "show", "node"]:
            text = DRAINED if self.drained else DRAINED.replace("+DRAIN", "").split(" Reason=")[0]
            return CommandResult(0, text)
        if call[:2] == ["scontrol", "update"]:
            self.drained = "State=DRAIN" in call
            return CommandResult(0)
        if call[:2] in (["scontrol", "create"], ["scontrol", "delete"]):
            return CommandResult(0, "Reservation created\n" if call[1] == "create" else "")
        if call[0] == "sbatch":
            return CommandResult(
                1, "", "sbatch: error: Batch job submission failed: Invalid account"
            )
        return CommandResult(0)


def test_a_refused_submission_drains_the_node_again_and_drops_the_reservation(
    tmp_path: Path,
) -> None:
    slurm = Cluster()
    node = SlurmNode("node02", "IDLE", ("DRAIN",), REASON, ("gpu",))
    options = SlurmOptions(spool=str(tmp_path), manage_drains=True, partition="gpu")
    with pytest.raises(SlurmError, match="Invalid account"):
        submit_run(
            [HostSpec("node02", "node02")], Targets((node,)), AgentRequest(), 60.0, options, {},
            slurm,
        )  # fmt: skip
    updates = [call for call in slurm.calls if call[:2] == ["scontrol", "update"]]
    assert any("State=RESUME" in call for call in updates)  # it was re-tested...
    assert updates[-1][-2:] == ["State=DRAIN", f"Reason={REASON}"]  # ...and is drained again
    assert slurm.drained
    created = [c for c in slurm.calls if c[:3] == ["scontrol", "create", "reservation"]]
    deleted = [c for c in slurm.calls if c[:2] == ["scontrol", "delete"]]
    assert len(created) == 1
    assert deleted == [["scontrol", "delete", created[0][3]]]


def test_without_waiting_nothing_is_quarantined(tmp_path: Path) -> None:
    slurm = Cluster()
    node = SlurmNode("node02", "IDLE", ("DRAIN",), REASON, ("gpu",))
    options = SlurmOptions(spool=str(tmp_path), manage_drains=True, wait=False, partition="gpu")
    submission = submit_run(
        [HostSpec("node02", "node02")], Targets((node,)), AgentRequest(), 60.0, options, {}, slurm
    )
    assert not submission.quarantined
    assert (
        "without" in submission.skipped["node02"] or "--slurm-drain" in submission.skipped["node02"]
    )
    assert not any(call[0] in ("sbatch", "scontrol") for call in slurm.calls)
