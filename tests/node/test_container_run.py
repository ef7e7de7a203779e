"""``--container-image``'s run: a name of ours, removed when it hangs, cut to the deadline.

A ``docker run`` client killed at its timeout leaves its container running: the run
is named by us (``--name gpuready-<random>``, with ``--rm``) and, stopped at its
timeout, removed by that name alone. Its timeout is what the deadline leaves, never
more than CONTAINER_RUN_TIMEOUT_S.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from validator.model import ContainerFacts, Reason, RuntimeConfig, Unavailable
from validator.node.collect import CollectRequest, collect
from validator.node.container_probe import CONTAINER_RUN_TIMEOUT_S, with_container_run
from validator.node.sim.simulated_source import SimulatedSource
from validator.node.system import CommandResult, LiveSystem, System

IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
NAME = re.compile(r"^gpuready-[0-9a-f]{12}$")
DOCKER = RuntimeConfig("docker", True, True, "features.cdi", True)
# A docker whose container never ends; each call's arguments go to the log.
FAKE_DOCKER = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_DOCKER_LOG"
if [ "$1" = run ]; then exec sleep 60; fi
exit 0
"""


def _name_of(argv: Sequence[str]) -> str:
    return argv[list(argv).index("--name") + 1]


def test_a_hanging_container_is_stopped_and_removed_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    log = tmp_path / "docker.log"
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    started = time.monotonic()
    found = with_container_run(LiveSystem(), ContainerFacts(runtimes=(DOCKER,)), IMAGE, True, 1.0)
    assert time.monotonic() - started < 15
    assert found.run is not None
    name = _name_of(found.run.argv)
    assert NAME.match(name)
    assert found.run.argv[:5] == ("docker", "run", "--rm", "--name", name)
    assert found.run.argv[5:] == ("--device", "nvidia.com/gpu=all", IMAGE, "nvidia-smi", "-L")
    calls = log.read_text().splitlines()
    assert calls == [" ".join(found.run.argv[1:]), f"rm -f {name}"]  # that name, no pattern
    assert isinstance(found.run.uuids, Unavailable)
    assert found.run.uuids.reason is Reason.ERROR
    assert "ran past 1 s" in found.run.uuids.detail
    assert f"its container was removed ({name})" in found.run.uuids.detail
    again = with_container_run(LiveSystem(), ContainerFacts(runtimes=(DOCKER,)), IMAGE, True, 1.0)
    assert again.run is not None
    assert _name_of(again.run.argv) != name  # each run its own


class _Recording(SimulatedSource):
    """The healthy scenario, its commands' timeouts recorded."""

    def __init__(self) -> None:
        super().__init__("healthy-8x-h100-sxm")
        self.calls: list[tuple[tuple[str, ...], float]] = []
        self._wrapped = False

    def system(self) -> System:
        system = super().system()  # made once: every step reads the same one
        if not self._wrapped:
            run = system.run

            def recorded(argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
                self.calls.append((tuple(argv), timeout_s))
                return run(argv, timeout_s)

            system.run = recorded  # type: ignore[method-assign]
            self._wrapped = True
        return system


def _docker_runs(source: _Recording) -> list[tuple[tuple[str, ...], float]]:
    return [(argv, timeout) for argv, timeout in source.calls if argv[:2] == ("docker", "run")]


def test_the_run_shrinks_to_the_deadline_and_is_skipped_without_time() -> None:
    request = CollectRequest(interconnect="off", container_image=IMAGE)
    source = _Recording()
    left = 40.0
    facts = collect(source, request, until=time.monotonic() + left)
    ((_, timeout),) = _docker_runs(source)
    assert 5.0 <= timeout < left  # what the deadline leaves, the trip home kept back
    assert timeout < CONTAINER_RUN_TIMEOUT_S
    assert facts.container is not None
    assert facts.container.run is not None
    assert facts.container.run.uuids == tuple(g.uuid for g in facts.gpus)
    # No deadline: the fixed cap.
    source = _Recording()
    collect(source, request)
    ((_, timeout),) = _docker_runs(source)
    assert timeout == CONTAINER_RUN_TIMEOUT_S
    # Too little left: not started, and said so.
    source = _Recording()
    facts = collect(source, request, until=time.monotonic() + 1.0)
    assert _docker_runs(source) == []
    assert facts.container is not None
    assert facts.container.run is not None
    assert isinstance(facts.container.run.uuids, Unavailable)
    assert facts.container.run.uuids.reason is Reason.NOT_MEASURED
    assert "--deadline" in facts.container.run.uuids.detail
