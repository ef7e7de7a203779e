"""A local step's process group is signalled only while its leader's id is still held.

Once a leader is reaped its id (and its group's) is free for the system to give to
another process; every signal to the group must come while the leader is a zombie.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from validator.remote.cross_node_local import LocalStep


def _gone(pid: int, within_s: float = 3.0) -> bool:
    """Whether ``pid`` has ended (gone, or a zombie awaiting whoever adopted it)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_a_child_that_outlives_its_leader_is_ended_with_the_step() -> None:
    step = LocalStep(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!; exit 0"], {})
    try:
        assert step.wait(5.0) == 0
        child = int(step.output()[0].strip())
        assert _gone(child), "the leader's background child still runs after the step ended"
    finally:
        step.kill()


class _Recorder:
    """Records every reap of the step's leader and every signal to its group, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, int]] = []
        real_waitpid: Callable[[int, int], tuple[int, int]] = os.waitpid
        real_killpg: Callable[[int, int], None] = os.killpg

        def waitpid(pid: int, options: int) -> tuple[int, int]:
            done = real_waitpid(pid, options)
            if done[0] != 0:
                self.calls.append(("reaped", done[0]))
            return done

        def killpg(pgid: int, sig: int) -> None:
            self.calls.append(("killpg", pgid))
            real_killpg(pgid, sig)

        monkeypatch.setattr(os, "waitpid", waitpid)
        monkeypatch.setattr(os, "killpg", killpg)

    def check(self, pid: int) -> None:
        mine = [call for call in self.calls if call[1] == pid]
        assert ("reaped", pid) in mine
        reaped_at = mine.index(("reaped", pid))
        assert ("killpg", pid) not in mine[reaped_at:], f"group signalled after its reap: {mine}"


@pytest.mark.parametrize("ends", ["by_itself", "killed"])
def test_the_group_is_never_signalled_after_the_leader_is_reaped(
    monkeypatch: pytest.MonkeyPatch, ends: str
) -> None:
    recorder = _Recorder(monkeypatch)
    argv = ["true"] if ends == "by_itself" else ["sleep", "30"]
    step = LocalStep(argv, {})
    if ends == "by_itself":
        assert step.wait(5.0) == 0
    else:
        assert step.wait(0.05) is None
    step.kill()
    step.kill()  # twice, as a runner's cleanup may
    recorder.check(step.pid)
    if ends == "killed":
        assert ("killpg", step.pid) in recorder.calls


def test_a_step_that_ignores_sigterm_is_killed_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("validator.remote.cross_node_local.KILL_GRACE_S", 0.2)
    step = LocalStep(["sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.05; done"], {})
    end = time.monotonic() + 5
    while "up" not in step.output()[0] and time.monotonic() < end:
        time.sleep(0.02)
    started = time.monotonic()
    step.kill()
    assert time.monotonic() - started < 3
    assert step.wait(0) is not None
    assert _gone(step.pid)
