"""The node agent stopped by a signal prints what it measured, within Slurm's KillWait.

Slurm's time limit and scancel send the agent SIGTERM (then SIGKILL 30 s later), a dropped
SSH session SIGHUP. Under ``--deadline`` its burn runs on a collector thread, where no
KeyboardInterrupt reaches: the stop must still end the burn after its batch, start
neither the interconnect nor DCGM, and print the facts. A second signal ends it at once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_signals import _MARK_BURN, BURNING

KILL_WAIT_S = 30.0
REPO = Path(__file__).resolve().parent.parent.parent
# The child says on stderr when its burn begins, then runs the agent as the zipapp does.
AGENT = _MARK_BURN + "from validator.node.agent import main\nmain()\n"
ARGV = ["--simulate", "healthy-8x-h100-sxm", "--burn", "120", "--interconnect", "on",
        "--dcgm-level", "1"]  # fmt: skip


def _agent(extra: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", AGENT, *ARGV, *extra],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_burn(child: subprocess.Popen[str]) -> None:
    assert child.stderr is not None
    seen = []
    for line in child.stderr:
        seen.append(line)
        if line.startswith(BURNING):
            return
    raise AssertionError(f"the agent never burned: {''.join(seen)}")


@pytest.mark.parametrize(
    ("number", "extra"),
    [
        (signal.SIGTERM, ["--deadline", "600"]),
        (signal.SIGHUP, ["--deadline", "600"]),
        (signal.SIGTERM, []),
    ],
    ids=["SIGTERM-under-deadline", "SIGHUP-under-deadline", "SIGTERM"],
)
def test_a_stopped_agent_prints_its_interrupted_burn_and_starts_nothing_after_it(
    number: int, extra: list[str]
) -> None:
    child = _agent(extra)
    try:
        _wait_for_burn(child)
        time.sleep(1.5)  # into the burn: a batch or more measured
        assert child.poll() is None
        child.send_signal(number)
        sent = time.monotonic()
        out, err = child.communicate(timeout=KILL_WAIT_S * 2)
        seconds = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err
    assert seconds < KILL_WAIT_S / 2, f"took {seconds:.1f} s after the signal"
    facts = json.loads(out)
    burn = facts["burn"]
    assert burn["interrupted"] is True
    assert burn["elapsed_s"] < 60
    name = signal.Signals(number).name
    assert facts["interconnect"]["error"] == f"not started: {name} stopped the run"
    dcgm = facts["dcgm"]["results"]
    assert dcgm["unavailable"] == "not_measured"
    assert dcgm["detail"] == f"not started: {name} stopped the run"


def test_a_second_signal_ends_the_agent_at_once() -> None:
    # The first signal's facts take a minute to print: only a second signal ends it sooner.
    slow_print = AGENT.replace(
        "from validator.node.agent import main\n",
        "from validator.node import agent as _agent\n"
        "import time\n"
        "_real_print = _agent._print\n"
        "def _slow(*args):\n"
        "    print('gpuready-test: printing', file=sys.stderr, flush=True)\n"
        "    time.sleep(60)\n"
        "    _real_print(*args)\n"
        "_agent._print = _slow\n"
        "from validator.node.agent import main\n",
    )
    child = subprocess.Popen(
        [sys.executable, "-c", slow_print, *ARGV, "--deadline", "600"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_burn(child)
        time.sleep(1.0)
        child.send_signal(signal.SIGTERM)
        assert child.stderr is not None
        printing = any(line.startswith("gpuready-test: printing") for line in child.stderr)
        assert printing, "the first signal did not end the burn and go on to the facts"
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        try:
            child.wait(timeout=KILL_WAIT_S)
        finally:
            if child.poll() is None:
                child.kill()
            child.communicate()
    assert time.monotonic() - sent < 5
    assert child.returncode == -signal.SIGTERM  # died of it, as without a handler
