"""Slurm drain/resume for rolling provisioning: validator.slurm with the provision prefix.

The runner is a fake ``scontrol`` that keeps one node's state and reason, changes
them on ``update`` as slurmctld would, and records every argument list. Drift's
own drain/resume (prefix ``gpuready:``) is tested in tests/drift/test_drift_outputs.py;
here the two prefixes are checked against each other too.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from validator.service.provision_service import (
    SLURM_PREFIX,
    drain_for_provision,
    hold_drained,
    resume_after_provision,
    wait_until_idle,
)
from validator.slurm import PREFIX, Action, CommandResult, NodeState, SlurmError, drain

NODE = "gpu07"


class Node:
    """One Slurm node behind a fake scontrol; ``busy`` answers the next shows as busy."""

    def __init__(self, state: str = "IDLE", reason: str | None = None, busy: int = 0) -> None:
        self.state = state
        self.reason = reason
        self.busy = busy
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        if list(argv[:2]) == ["scontrol", "show"]:
            state = self.state
            if self.busy:
                self.busy -= 1
                state = state.replace("IDLE", "MIXED")
            reason = f"   Reason={self.reason} [slurm@2026-01-02T08:00:01]\n" if self.reason else ""
            return CommandResult(0, f"NodeName={argv[3]} Arch=x86_64\n   State={state}\n{reason}")
        fields = dict(arg.split("=", 1) for arg in argv[2:])
        base = self.state.split("+")[0]
        if fields["State"] == "DRAIN":
            self.state, self.reason = f"{base}+DRAIN", fields["Reason"]
        else:
            self.state, self.reason = base, None
        return CommandResult(0)

    def updates(self) -> list[list[str]]:
        return [call for call in self.calls if call[1] == "update"]


class Clock:
    """A clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_the_prefixes_do_not_start_one_another() -> None:
    # Else one command would take the other's drain for its own.
    assert not SLURM_PREFIX.startswith(PREFIX)
    assert not PREFIX.startswith(SLURM_PREFIX)


def test_drain_takes_the_provision_prefix() -> None:
    node = Node()
    assert drain_for_provision(NODE, "provisioning run 1", runner=node) == (Action.DRAINED, True)
    assert node.updates() == [
        [
            "scontrol",
            "update",
            f"NodeName={NODE}",
            "State=DRAIN",
            "Reason=gpuready-provision: provisioning run 1",
        ]
    ]
    assert resume_after_provision(NODE, runner=node) is Action.RESUMED
    assert (node.state, node.reason) == ("IDLE", None)


def test_a_node_someone_else_drained_is_left_alone_both_ways() -> None:
    node = Node("IDLE+DRAIN", "replacing a PSU, ticket 4711")
    assert drain_for_provision(NODE, "provisioning run 1", runner=node) == (
        Action.LEFT_ALONE,
        False,
    )
    assert resume_after_provision(NODE, runner=node) is Action.LEFT_ALONE
    assert node.updates() == []
    assert node.reason == "replacing a PSU, ticket 4711"


def test_drift_and_provisioning_never_lift_each_others_drain() -> None:
    drifted = Node("IDLE+DRAIN", "gpuready: drift: power_limit (GPU 3)")
    assert drain_for_provision(NODE, "run 1", runner=drifted)[0] is Action.LEFT_ALONE
    assert resume_after_provision(NODE, runner=drifted) is Action.LEFT_ALONE
    assert drifted.updates() == []

    provisioning = Node("IDLE+DRAIN", "gpuready-provision: provisioning run 1")
    assert drain(NODE, "drift: driver", runner=provisioning) is Action.LEFT_ALONE
    assert provisioning.updates() == []


def test_generalised_prefix_keeps_drifts_default() -> None:
    node = Node()
    assert drain(NODE, "drift: driver", runner=node) is Action.DRAINED
    assert node.reason == "gpuready: drift: driver"
    state = NodeState(NODE, "IDLE+DRAIN", "gpuready-provision: run 1")
    assert not state.ours
    assert state.owned_by(SLURM_PREFIX)


def test_a_rerun_takes_over_its_own_earlier_drain() -> None:
    node = Node("IDLE+DRAIN", "gpuready-provision: failed (run 1): Install the driver: E: x")
    assert drain_for_provision(NODE, "provisioning run 2", runner=node) == (Action.UPDATED, True)
    assert node.reason == "gpuready-provision: provisioning run 2"


def test_check_mode_reads_but_never_updates() -> None:
    node = Node()
    assert drain_for_provision(NODE, "run 1", runner=node, check=True) == (Action.DRAINED, True)
    ours = Node("IDLE+DRAIN", "gpuready-provision: run 1")
    assert resume_after_provision(NODE, runner=ours, check=True) is Action.RESUMED
    assert node.updates() == []
    assert ours.updates() == []
    assert node.calls == [["scontrol", "show", "node", NODE]]


def test_wait_until_the_drained_node_runs_no_job() -> None:
    node = Node("IDLE+DRAIN", "gpuready-provision: run 1", busy=3)
    clock = Clock()
    state = wait_until_idle(NODE, runner=node, poll_s=10, sleep=clock.sleep, clock=clock)
    assert state.state == "IDLE+DRAIN"
    assert clock.sleeps == [10, 10, 10]


def test_a_node_still_busy_after_the_wait_fails_and_stays_drained() -> None:
    node = Node("IDLE+DRAIN", "gpuready-provision: run 1", busy=100)
    clock = Clock()
    with pytest.raises(SlurmError) as caught:
        wait_until_idle(
            NODE, runner=node, wait_idle_s=30, poll_s=10, sleep=clock.sleep, clock=clock
        )
    message = str(caught.value)
    assert message.startswith(f"{NODE} still runs jobs (MIXED+DRAIN) 30 s after the drain")
    assert "provision_slurm_drain_wait_s" in message
    assert node.updates() == []
    assert node.state == "IDLE+DRAIN"


def test_a_node_that_takes_jobs_under_someone_elses_reason_fails() -> None:
    # A reason we may not overwrite, on a node that is not drained: jobs can start.
    node = Node("MIXED", "stale note from an admin")
    with pytest.raises(SlurmError, match="not drained and carries someone else's reason"):
        wait_until_idle(NODE, runner=node, sleep=Clock().sleep)
    down = Node("DOWN", "Not responding")
    assert wait_until_idle(NODE, runner=down).state == "DOWN"


def test_a_failed_node_stays_drained_with_the_failure() -> None:
    node = Node("IDLE+DRAIN", "gpuready-provision: provisioning run 1")
    note = hold_drained(NODE, f"{SLURM_PREFIX} failed (run 1): gpu_verify: no GPU", node)
    assert node.state == "IDLE+DRAIN"
    assert node.reason == "gpuready-provision: failed (run 1): gpu_verify: no GPU"
    assert note == f"{NODE}: stays drained: gpuready-provision: failed (run 1): gpu_verify: no GPU"


def test_a_failed_node_taken_over_meanwhile_is_left_alone() -> None:
    taken = Node("IDLE+DRAIN", "admin: RMA")
    note = hold_drained(NODE, f"{SLURM_PREFIX} failed", taken)
    assert taken.updates() == []
    assert note.startswith(f"{NODE}: left as it is")
    resumed = Node("IDLE")
    hold_drained(NODE, f"{SLURM_PREFIX} failed", resumed)
    assert resumed.updates() == []  # never drained again after someone resumed it


def test_scontrol_failing_while_holding_is_a_note_not_a_crash() -> None:
    def broken(argv: Sequence[str]) -> CommandResult:
        return CommandResult(1, "", "slurm_load_node error: Unable to contact slurm controller")

    note = hold_drained(NODE, f"{SLURM_PREFIX} failed", broken)
    assert note.startswith(f"{NODE}: stays drained; the reason could not be updated: ")
    assert "Unable to contact slurm controller" in note
