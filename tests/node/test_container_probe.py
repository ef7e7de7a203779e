"""The container runtime's facts: live, simulated and captured through the one System seam.

The container run (``--container-image``) goes through the scenario's commands: the
argv the probe builds is the scenario's key, so a wrong flag is a command not found.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.collecting import collect_capture
from validator.model import CdiSpec, ContainerFacts, Reason, RuntimeConfig, Unavailable
from validator.node.agent import source_for
from validator.node.capture.capture_replay import write_capture
from validator.node.collect import CollectRequest, collect
from validator.node.container_probe import (
    CONTAINER_RM_TIMEOUT_S,
    CONTAINER_RUN_TIMEOUT_S,
    container_facts,
    with_container_run,
)
from validator.node.sim.scenario import load_scenario
from validator.node.system import CommandResult, LiveSystem

IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia-ctk"


def scenario(tmp_path: Path, **changes: object) -> Path:
    """A scenario extending the healthy H100 node with ``changes`` merged over it."""
    path = tmp_path / "ctr.json"
    path.write_text(json.dumps({"name": "ctr", "extends": "healthy-8x-h100-sxm", **changes}))
    return path


def facts_of(path: Path | str, image: str | None = None) -> ContainerFacts:
    request = CollectRequest(interconnect="off", container_image=image)
    found = collect(source_for(str(path)), request).container
    assert found is not None
    return found


def test_the_healthy_node_has_the_toolkit_all_gpus_and_docker() -> None:
    found = facts_of("healthy-8x-h100-sxm")
    assert found.toolkit_version == "1.17.8"
    assert isinstance(found.cdi, CdiSpec)
    assert found.cdi.indexes == tuple(range(8))
    assert len(found.cdi.uuids) == 8
    assert found.runtimes == (
        RuntimeConfig(
            "docker",
            True,
            True,
            "runtimes.nvidia, features.cdi, default-runtime nvidia",
            True,
            "/etc/docker/daemon.json",
        ),
    )
    assert found.run is None  # no image named: no container started


def test_the_container_run_uses_cdi_through_the_scenarios_commands(tmp_path: Path) -> None:
    # Only the exact CDI command line answers: another argv would exit 127 (not found).
    # The container's name is ours and new each run (gpuready-<12 hex digits>).
    line = f"docker run --rm --name gpuready-* --device nvidia.com/gpu=all {IMAGE} nvidia-smi -L"
    smi = "".join(
        f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)\n"
        for i in range(8)
    )
    path = scenario(tmp_path, commands={"docker run *": None, line: {"rc": 0, "stdout": smi}})
    found = facts_of(path, IMAGE)
    assert found.run is not None
    name = found.run.argv[4]
    assert re.fullmatch(r"gpuready-[0-9a-f]{12}", name)
    assert found.run.argv == tuple(line.replace("gpuready-*", name).split())
    assert found.run.uuids == tuple(f"GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(8))


def test_without_cdi_docker_is_asked_for_gpus_all(tmp_path: Path) -> None:
    daemon = (FIXTURES / "daemon-ctk-configured.json").read_text()
    path = scenario(tmp_path, files={"/etc/docker/daemon.json": daemon})
    found = facts_of(path, IMAGE)
    assert found.run is not None
    name = found.run.argv[4]
    assert found.run.argv == (
        "docker", "run", "--rm", "--name", name, "--gpus", "all", IMAGE, "nvidia-smi", "-L",
    )  # fmt: skip


def test_a_container_that_fails_to_start_says_why(tmp_path: Path) -> None:
    said = (
        "docker: Error response from daemon: could not select device driver "
        '"cdi" with capabilities: [].'
    )
    path = scenario(
        tmp_path,
        commands={"docker run *": {"generated": None, "rc": 125, "stdout": "", "stderr": said}},
    )
    found = facts_of(path, IMAGE)
    assert found.run is not None
    assert isinstance(found.run.uuids, Unavailable)
    assert "could not select device driver" in found.run.uuids.detail


def test_no_configured_runtime_runs_no_container(tmp_path: Path) -> None:
    path = scenario(tmp_path, files={"/etc/docker/daemon.json": None})
    found = facts_of(path, IMAGE)
    assert found.runtimes == (RuntimeConfig("docker", True, False, "", False, ""),)
    assert found.run is not None
    assert found.run.argv == ()
    assert isinstance(found.run.uuids, Unavailable)
    assert found.run.uuids.reason is Reason.NOT_SUPPORTED


class _SlowSystem:
    """A host whose container never ends: the run is stopped at its timeout (rc 124)."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []
        self.argvs: list[tuple[str, ...]] = []

    def hostname(self) -> str:
        return "slow"

    def read_text(self, path: str) -> str | None:
        return None

    def glob(self, pattern: str) -> list[str]:
        return []

    def which(self, name: str) -> str | None:
        return None

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        self.timeouts.append(timeout_s)
        self.argvs.append(tuple(argv))
        if argv[1:2] == ("rm",):
            return CommandResult(1, "", "Error response from daemon: the daemon is gone")
        return CommandResult(124, "", "timed out")

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.timezone.utc)


def test_a_container_that_hangs_is_stopped_at_its_timeout() -> None:
    system = _SlowSystem()
    docker = RuntimeConfig("docker", True, True, "features.cdi", True)
    found = with_container_run(system, ContainerFacts(runtimes=(docker,)), IMAGE, True)
    assert system.timeouts == [CONTAINER_RUN_TIMEOUT_S, CONTAINER_RM_TIMEOUT_S]
    assert found.run is not None
    name = found.run.argv[4]
    assert system.argvs == [found.run.argv, ("docker", "rm", "-f", name)]
    assert isinstance(found.run.uuids, Unavailable)
    assert "ran past" in found.run.uuids.detail
    # Its removal failed: said, with the command to run by hand.
    assert f"could not be removed: docker rm -f {name} exited 1" in found.run.uuids.detail


def test_a_capture_keeps_the_files_and_lacks_nothing_it_recorded(tmp_path: Path) -> None:
    outcome = write_capture(tmp_path / "b", load_scenario("cdi-spec-stale").system())
    for name in ("nvidia-ctk-version.txt", "nvidia-ctk-cdi-list.txt", "docker-daemon.json"):
        assert outcome[name] == "written"
    captured = collect_capture(tmp_path / "b").container
    assert captured == facts_of("cdi-spec-stale")
    assert isinstance(captured.cdi, CdiSpec)
    assert captured.cdi.indexes == tuple(range(7))


def test_a_capture_without_the_files_is_not_measured_never_absent(tmp_path: Path) -> None:
    write_capture(tmp_path / "b", load_scenario("healthy-8x-h100-sxm").system())
    for name in ("nvidia-ctk-version.txt", "nvidia-ctk-cdi-list.txt", "docker-daemon.json"):
        (tmp_path / "b" / name).unlink()
    found = collect_capture(tmp_path / "b").container
    assert found is not None
    for value in (found.toolkit_version, found.cdi, found.runtimes):
        assert isinstance(value, Unavailable), value
        assert value.reason is Reason.NOT_MEASURED, value
    assert "nvidia-ctk-version.txt not in the capture" in str(found.toolkit_version)


def test_this_machine_honestly() -> None:
    """Live: whatever this host has, each fact is read or says why not; nothing invented."""
    found = container_facts(LiveSystem())
    if shutil.which("nvidia-ctk") is None:
        assert isinstance(found.toolkit_version, Unavailable)
        assert found.toolkit_version.reason is Reason.NOT_SUPPORTED
    assert isinstance(found.runtimes, tuple)
    docker = [r for r in found.runtimes if r.name == "docker"]
    assert bool(docker) == (shutil.which("docker") is not None)
    if docker and not Path("/etc/docker/daemon.json").exists():
        assert docker[0].configured is False  # no daemon.json: docker's defaults, no GPUs


@pytest.mark.parametrize("name", ["healthy-8x-h100-sxm", "healthy-8x-a100-80gb"])
def test_each_healthy_scenarios_container_lists_its_own_gpus(name: str) -> None:
    request = CollectRequest(interconnect="off", container_image=IMAGE)
    facts = collect(source_for(name), request)
    assert facts.container is not None
    assert facts.container.run is not None
    assert facts.container.run.uuids == tuple(g.uuid for g in facts.gpus)


def test_an_agent_never_hands_the_runtime_an_option_for_an_image() -> None:
    docker = RuntimeConfig("docker", True, True, "features.cdi", True)
    system = _SlowSystem()
    found = with_container_run(system, ContainerFacts(runtimes=(docker,)), "--privileged", True)
    assert system.timeouts == []  # nothing ran
    assert found.run is not None
    assert isinstance(found.run.uuids, Unavailable)
    assert "no image reference" in found.run.uuids.detail
