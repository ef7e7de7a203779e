"""The ansible transport with real ansible-runner and ansible-core, on localhost (no SSH).

Each run starts ansible-playbook (about 1-3 s), so this file takes ~15 s.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from validator.model import HostSpec
from validator.node.sim.scenario import SCENARIO_DIR
from validator.remote.ansible_transport import AnsibleTransport, default_playbook
from validator.remote.bundle import build_agent
from validator.remote.transport import AgentOutcome, AgentRequest, overrun_s

pytestmark = pytest.mark.skipif(
    shutil.which("ansible-playbook") is None, reason="ansible-playbook is not installed"
)
SCENARIO = "healthy-8x-h100-sxm"
# A hung agent's deadline: far more than Ansible's start, even on a loaded controller.
DEADLINE_S = 20.0


class Phases:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def phase(self, host: str, phase: str) -> None:
        self.seen.append((host, phase))

    def names(self) -> list[str]:
        return [phase for _, phase in self.seen]


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text(
        f"gpuhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        "deadhost ansible_connection=ssh ansible_host=127.0.0.1 ansible_port=1 "
        "ansible_ssh_common_args='-o ConnectTimeout=5 -o StrictHostKeyChecking=no'\n"
    )
    return path


@pytest.fixture
def transport(tmp_path: Path, inventory: Path) -> AnsibleTransport:
    return AnsibleTransport(
        [inventory], cache_dir=str(tmp_path / "cache"), work_dir=tmp_path / "work"
    )


def _local(**fields: object) -> HostSpec:
    values: dict[str, object] = {
        "name": "gpuhost",
        "address": "gpuhost",
        "python": sys.executable,
        "simulate": SCENARIO,
    }
    values.update(fields)
    return HostSpec(**values)  # type: ignore[arg-type]


def _run(
    transport: AnsibleTransport, host: HostSpec, timeout_s: float = 60.0
) -> tuple[AgentOutcome, Phases]:
    phases = Phases()
    return transport.run_agent(host, AgentRequest(), timeout_s, phases), phases


def _assert_one_line(outcome: AgentOutcome) -> str:
    assert outcome.facts is None
    assert outcome.error
    assert "\n" not in outcome.error
    return outcome.error


def test_the_playbook_is_found_beside_the_package() -> None:
    playbook = default_playbook()
    assert playbook.is_file()
    assert playbook.name == "certify.yml"


def test_facts_come_back_and_the_agent_is_copied_once(
    tmp_path: Path, transport: AnsibleTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    from validator import packed

    packs: list[str] = []
    real_pack = packed.pack

    def counted(text: str, **options: bool) -> bytes:
        packs.append(text)
        return real_pack(text, **options)

    monkeypatch.setattr(packed, "pack", counted)
    outcome, phases = _run(transport, _local())
    # The agent printed its facts packed: kept as they came, nothing packed here.
    assert packs == []

    assert outcome.error is None, outcome.error
    assert outcome.facts is not None
    assert outcome.facts.source == "simulate"
    assert outcome.facts.source_detail == SCENARIO
    assert len(outcome.facts.gpus) == 8
    assert outcome.phase == "done"
    assert phases.names() == ["connect", "upload", "run", "done"]
    bundle = build_agent()
    cached = tmp_path / "cache" / bundle.filename
    assert cached.read_bytes() == bundle.data
    first_copy = cached.stat().st_mtime_ns

    # Again, with a scenario path that a shell would split: argv keeps it whole.
    folder = tmp_path / "odd dir; touch pwned"
    folder.mkdir()
    (folder / "node a;b.json").write_bytes((SCENARIO_DIR / f"{SCENARIO}.json").read_bytes())
    again, _ = _run(transport, _local(simulate=str(folder / "node a;b.json")))

    assert again.error is None, again.error
    assert again.facts is not None
    assert len(again.facts.gpus) == 8
    assert cached.stat().st_mtime_ns == first_copy
    assert not Path("pwned").exists()
    assert list((tmp_path / "work").glob("run-*")) == []  # per-run dirs are cleaned up


def test_an_unreachable_host_is_one_line(transport: AnsibleTransport) -> None:
    outcome, phases = _run(transport, HostSpec(name="deadhost", address="127.0.0.1", port=1))

    error = _assert_one_line(outcome)
    assert error.startswith("deadhost is unreachable through Ansible: ")
    assert "Connection refused" in error
    assert outcome.phase == "connect"
    assert phases.names()[-1] == "failed"


def test_the_agents_error_line_becomes_the_error(transport: AnsibleTransport) -> None:
    outcome, phases = _run(transport, _local(simulate="no-such-scenario"))

    error = _assert_one_line(outcome)
    assert error.startswith("gpuready-agent: error: unknown scenario 'no-such-scenario'")
    assert outcome.phase == "run"
    assert error in outcome.stderr
    assert phases.names() == ["connect", "upload", "run", "failed"]


def test_a_host_not_in_the_inventory_says_what_ansible_said(
    transport: AnsibleTransport,
) -> None:
    outcome, _ = _run(transport, HostSpec(name="nohost", address="nohost"))

    error = _assert_one_line(outcome)
    assert error.startswith("ansible run for nohost: ")
    assert "no hosts to target" in error


def test_close_removes_the_temp_dir_it_made(inventory: Path, tmp_path: Path) -> None:
    transport = AnsibleTransport([inventory], cache_dir=str(tmp_path / "cache"))
    outcome, _ = _run(transport, HostSpec(name="nohost", address="nohost"))
    assert outcome.error is not None
    work = transport._work_dir
    assert work is not None
    assert work.is_dir()

    transport.close()

    assert not work.exists()


def test_a_hung_agent_is_stopped_by_the_task_timeout(
    tmp_path: Path, transport: AnsibleTransport
) -> None:
    python = tmp_path / "hanging-python"
    # Far longer than any ansible start-up on a loaded machine: stopping before the
    # hang ends can only be the timeout's doing.
    python.write_text("#!/bin/sh\nsleep 600\n")
    python.chmod(0o755)

    # Longer than Ansible's start on a loaded controller (it took over ten seconds in
    # CI): the task stops at the deadline plus the overrun, however late it started.
    outcome, _ = _run(transport, _local(python=str(python)), timeout_s=DEADLINE_S)

    error = _assert_one_line(outcome)
    assert outcome.phase == "run"
    assert error.startswith("running the agent on gpuhost failed: ")
    # ansible-core 2.19 says "Timed out after N second(s)"; older ones "time frame (N)".
    assert re.search(r"Timed out after \d+ second|time frame \(\d+\)", error), error
    # Stopped at the deadline plus the overrun, before the backstop after it.
    stop = DEADLINE_S + overrun_s(DEADLINE_S)
    assert stop - 1.0 < outcome.elapsed_s < stop + 5.0
