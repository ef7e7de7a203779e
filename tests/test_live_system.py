"""The live host's commands: their output held bounded however much they print.

Real processes (the shell, Python, sleep), no fakes: what the collectors run on a GPU
host goes through this one call.
"""

from __future__ import annotations

import sys
import time

import pytest

from validator.node import system
from validator.node.system import LiveSystem


def test_a_command_gives_its_status_and_output() -> None:
    done = LiveSystem().run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (done.rc, done.stdout, done.stderr, done.partial) == (3, "out\n", "err\n", "")


def test_a_missing_command_is_127() -> None:
    assert LiveSystem().run(["gpuready-no-such-command"]).rc == 127


def test_a_command_past_its_timeout_is_124_and_killed() -> None:
    started = time.monotonic()
    done = LiveSystem().run(["sleep", "30"], timeout_s=0.3)
    assert done.rc == 124
    assert "timed out after 0.3 s" in done.stderr
    assert time.monotonic() - started < 10


def test_a_flood_of_output_keeps_only_its_newest_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    # A kernel log of 1,000,000 lines (about 12 MB): the newest 1 MiB of it is held.
    monkeypatch.setattr(system, "LIVE_OUTPUT_BYTES", 1 << 20)
    flood = "import sys\nfor i in range(1_000_000): sys.stdout.write(f'line {i}\\n')"
    done = LiveSystem().run([sys.executable, "-c", flood], timeout_s=120)
    assert done.rc == 0
    assert len(done.stdout) <= 1 << 20
    lines = done.stdout.splitlines()
    assert lines[-1] == "line 999999"
    assert lines[0].startswith("line ")  # whole lines from the first kept one on
    assert int(lines[1].split()[1]) == int(lines[0].split()[1]) + 1
    assert done.partial.startswith("only its last 1 MiB were read: it printed 1")


def test_a_flood_on_stderr_keeps_its_last_lines() -> None:
    flood = "import sys\nfor i in range(100_000): sys.stderr.write(f'warning {i}\\n')"
    done = LiveSystem().run([sys.executable, "-c", flood], timeout_s=120)
    assert len(done.stderr) <= system.LIVE_STDERR_BYTES
    assert done.stderr.endswith("warning 99999\n")


def test_a_child_left_holding_the_output_does_not_hold_up_the_collector() -> None:
    started = time.monotonic()
    done = LiveSystem().run(["sh", "-c", "sleep 20 & echo started"])
    assert done.rc == 0
    assert done.stdout == "started\n"
    assert time.monotonic() - started < 20
