"""The live host's commands: their output held bounded however much they print.

Real processes (the shell, Python, sleep), no fakes: what the collectors run on a GPU
host goes through this one call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
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


def test_a_long_command_is_stopped_by_a_stop_request_a_short_one_finishes() -> None:
    from validator.node import stop_request

    stop_request.reset()
    try:
        threading.Timer(0.3, stop_request.request, args=(signal.SIGTERM,)).start()
        started = time.monotonic()
        done = LiveSystem().run(["sleep", "30"], timeout_s=600)  # as dcgmi diag is allowed
        assert time.monotonic() - started < 10
        assert done.rc == 124
        assert done.stderr == "sleep: stopped: SIGTERM stopped the run"
        short = LiveSystem().run(["sh", "-c", "sleep 0.5; echo whole"], timeout_s=30)
        assert short.stdout == "whole\n"  # nvidia-smi's facts are printed whole
    finally:
        stop_request.reset()


def test_an_interrupt_while_waiting_kills_the_command() -> None:
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    marker = f"30.{os.getpid()}"
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            LiveSystem().run(["sleep", marker], timeout_s=600)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    time.sleep(0.2)
    alive = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, check=False)
    assert alive.returncode == 1, alive.stdout  # no such process left


def test_carriage_returns_read_as_line_ends_as_text_mode_did() -> None:
    done = LiveSystem().run(["printf", "a\\r\\nb\\rc\\n"])
    assert done.stdout == "a\nb\nc\n"
