"""A host's worst GPU while its burn runs, as the local and SSH transports tell it.

The SSH runs go through a real paramiko server running the real agent (the stub box of
test_remote_ssh), on a scenario with one power-capped GPU: its GPU 3 is the slowest.
"""

from __future__ import annotations

import threading
from pathlib import Path

from paramiko import ECDSAKey

from tests.remote.test_remote_ssh import SshBox, _host, _known, _transport, box, client_key
from validator.model import HostSpec
from validator.node.burnin.burn_config import BurnConfig
from validator.node.burnin.worst_gpu import WorstGpu, progress_line
from validator.remote.local import LocalTransport
from validator.remote.progress_lines import ProgressLines
from validator.remote.transport import AgentRequest

__all__ = ["box", "client_key"]  # fixtures, used by name

CAPPED = "one-gpu-power-capped"
BURN = AgentRequest(burn=BurnConfig(duration_s=3.0))


class Watched:
    """A progress that shows worst GPUs, as the fleet's live view does."""

    def __init__(self) -> None:
        self.phases: list[str] = []
        self.worst: list[tuple[str, WorstGpu]] = []
        self.lock = threading.Lock()

    def phase(self, host: str, phase: str) -> None:
        self.phases.append(str(phase))

    def worst_gpu(self, host: str, worst: WorstGpu) -> None:
        with self.lock:
            self.worst.append((host, worst))


def _slow_gpu_named(watched: Watched, host: str) -> None:
    assert watched.worst, "no worst GPU was told during the burn"
    assert {name for name, _ in watched.worst} == {host}
    # Once the capped GPU has a timing window, it is the one named, with its figures.
    timed = [worst for _, worst in watched.worst if worst.tflops is not None]
    assert timed
    assert {worst.index for worst in timed} == {3}
    assert all(0 <= worst.left_s <= 3.0 for worst in timed)


def test_the_local_transport_tells_the_worst_gpu_while_it_burns() -> None:
    watched = Watched()
    host = HostSpec(name="capped", address="capped", simulate=CAPPED)

    outcome = LocalTransport().run_agent(host, BURN, 30.0, watched)

    assert outcome.error is None
    _slow_gpu_named(watched, "capped")


def test_the_ssh_agent_prints_progress_lines_that_are_told_not_kept(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())
    watched = Watched()
    host = _host(box, client_key[1], simulate=CAPPED)

    outcome = _transport(tmp_path).run_agent(host, BURN, 60.0, watched)

    assert outcome.error is None, outcome.error
    assert "--progress-lines" in box.commands[-1].split()
    _slow_gpu_named(watched, "gpu07")
    # The agent's own stderr is kept for the report; its progress lines are not.
    assert "gpuready-progress" not in outcome.stderr


def test_without_a_burn_the_agent_is_not_asked_for_progress_lines(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())
    watched = Watched()

    outcome = _transport(tmp_path).run_agent(
        _host(box, client_key[1]), AgentRequest(), 60.0, watched
    )

    assert outcome.facts is not None
    assert "--progress-lines" not in box.commands[-1].split()
    assert watched.worst == []


def test_progress_lines_split_across_reads_are_told_and_other_lines_kept() -> None:
    told: list[WorstGpu] = []
    lines = ProgressLines(told.append)
    worst = WorstGpu(index=2, tflops=500.0, left_s=10.0)
    said = f"warming up\n{progress_line(worst)}\nGPU 0: something the agent said\n".encode()

    kept = b"".join(lines.split(said[i : i + 7]) for i in range(0, len(said), 7))

    assert told == [worst]
    assert kept == b"warming up\nGPU 0: something the agent said\n"
    # A forged line is dropped from what is kept and told nothing.
    assert lines.split(b'gpuready-progress {"gpu": 99999}\n') == b""
    assert told == [worst]
    # A long line with no newline yet is not held back: it cannot be a progress line.
    assert lines.split(b"x" * 600) == b"x" * 600
    assert lines.rest() == b""
