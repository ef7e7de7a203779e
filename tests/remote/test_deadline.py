"""--deadline binds every path: one node, and a fleet through local, ssh and ansible.

A host that passes its deadline is cut (its burn-in shortened to end in time),
judged as timed out (UNKNOWN, never certified) and keeps what it measured. And an
inventory's ``gpuready_transport`` picks each host's transport, the flag being the
default for the rest.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.collecting import collect_simulated
from tests.remote.test_remote_ssh import SshBox, _host, _known, _transport
from validator.cli.main import main
from validator.error_tree import ExitCode
from validator.judge import Policy, judge_node
from validator.model import BurnStatus, HostSpec, NodeFacts, NodeResult, TransportName, Verdict
from validator.node import agent
from validator.node import collect as collector
from validator.node.burnin.burn_config import BurnConfig
from validator.node.collect import SHORTEST_CUT_BURN_S, burn_within
from validator.remote.ansible_transport import AnsibleTransport
from validator.remote.deadline import CHECK, cut_short, timed_out
from validator.remote.fanout import run_fanout
from validator.remote.local import LocalTransport
from validator.remote.per_host import PerHostTransport
from validator.remote.transport import AgentOutcome, AgentRequest, Progress, overrun_s
from validator.service.certify_service import CertifyRequest, certify_node
from validator.service.collect_and_judge import FleetRequest, Reach, certify_fleet

SCENARIO = "healthy-8x-h100-sxm"
LONG_BURN = BurnConfig(duration_s=30)
# Room for the collection before the burn on a loaded two-core machine; the 30 s burn
# is still cut to a fraction of it.
DEADLINE_S = 6.0


@functools.cache
def two_second_burn() -> NodeFacts:
    """A healthy node's facts after a full 2 s burn (made once)."""
    return collect_simulated(SCENARIO, burn=BurnConfig(duration_s=2))


class Phases:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def phase(self, host: str, phase: str) -> None:
        self.seen.append((host, phase))


def assert_cut_and_kept(result: NodeResult, deadline_s: float) -> None:
    """UNKNOWN as timed out, the burn cut, what was measured before the cut still there."""
    assert result.verdict is Verdict.UNKNOWN
    assert result.summary.startswith(f"could not be judged: cut at the {deadline_s:g} s deadline")
    assert CHECK in [finding.check for finding in result.findings]
    assert len(result.facts.gpus) == 8
    burn = result.facts.burn
    assert burn is not None
    assert 0 < burn.duration_s < LONG_BURN.duration_s
    assert [gpu.status for gpu in burn.gpus] == [BurnStatus.COMPLETED] * 8
    assert all(gpu.iterations > 0 for gpu in burn.gpus)
    # The node was judged on its figures: its burn findings are in the report.
    assert any(finding.check.startswith("burn.") for finding in result.findings)


# -- the cut itself ---------------------------------------------------------------------


def test_a_burn_that_fits_is_left_as_asked() -> None:
    burn = BurnConfig(duration_s=10)
    assert burn_within(burn, 60.0) is burn


def test_a_burn_that_does_not_fit_is_cut_to_end_before_the_deadline() -> None:
    fitted = burn_within(LONG_BURN, 10.0)
    assert fitted is not None
    assert fitted.duration_s < 10.0
    assert fitted.duration_s + fitted.grace_s <= 10.0
    assert fitted.dtype == LONG_BURN.dtype
    assert fitted.memory_fraction == LONG_BURN.memory_fraction


def test_no_time_left_means_no_burn() -> None:
    assert burn_within(LONG_BURN, SHORTEST_CUT_BURN_S) is None


def test_cut_short_names_how_the_run_was_cut() -> None:
    full = two_second_burn()
    assert cut_short(BurnConfig(duration_s=2), full, 60.0, 3.0) is None
    assert cut_short(None, full, 60.0, 3.0) is None
    assert cut_short(LONG_BURN, full, 60.0, 3.0) == "the 30 s burn-in was cut to 2.0 s"
    assert cut_short(BurnConfig(duration_s=2), full, 2.5, 3.0) == "the facts came after 3.0 s"
    bare = collect_simulated(SCENARIO)
    assert cut_short(LONG_BURN, bare, 60.0, 1.0) == "no time was left for the 30 s burn-in"


def test_timed_out_keeps_a_proven_fault_and_every_finding() -> None:
    facts = collect_simulated("one-gpu-power-capped", burn=BurnConfig(duration_s=2))
    judged = judge_node(facts, Policy())
    assert judged.verdict is Verdict.NOT_CERTIFIED

    result = timed_out(judged, 3.0, "the 30 s burn-in was cut to 2.0 s")

    # The FAIL was measured before the cut: not certified, never "could not be judged".
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert result.summary.startswith("not certified: ")
    assert result.summary.endswith("cut at the 3 s deadline: the 30 s burn-in was cut to 2.0 s")
    assert set(judged.findings) < set(result.findings)
    severities = [finding.severity.value for finding in result.findings]
    assert severities == sorted(severities, key=["FAIL", "UNKNOWN", "WARN", "PASS"].index)
    (deadline,) = [f for f in result.findings if f.check == CHECK]
    assert deadline.severity.value == "UNKNOWN"
    assert "give a --deadline longer than the burn-in" in deadline.message


# -- one node -----------------------------------------------------------------------------


def test_a_single_node_past_its_deadline_is_cut_and_keeps_its_figures() -> None:
    started = time.monotonic()
    report = certify_node(CertifyRequest(simulate=SCENARIO, burn=LONG_BURN, deadline_s=DEADLINE_S))
    elapsed = time.monotonic() - started

    assert elapsed < DEADLINE_S + overrun_s(DEADLINE_S)
    (node,) = report.nodes
    assert_cut_and_kept(node, DEADLINE_S)


def test_a_single_node_within_its_deadline_is_judged_as_usual() -> None:
    report = certify_node(
        CertifyRequest(simulate=SCENARIO, burn=BurnConfig(duration_s=2), deadline_s=60.0)
    )
    (node,) = report.nodes
    assert node.verdict is Verdict.CERTIFIED, node.summary
    assert CHECK not in [finding.check for finding in node.findings]


def test_certify_on_the_command_line_binds_the_deadline_for_one_node(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Needs run_certify to hand the command line's deadline to the collector.
    started = time.monotonic()
    code = main(
        ["certify", "--simulate", SCENARIO, "--burn", "30s", "--deadline", "3s", "--json",
         "--db", str(tmp_path / "h.db")]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert time.monotonic() - started < 3.0 + overrun_s(3.0) + 2.0
    assert code == ExitCode.COULD_NOT_RUN
    (node,) = json.loads(out)["nodes"]
    assert node["verdict"] == "UNKNOWN"
    assert "cut at the 3 s deadline" in node["summary"]
    assert node["facts"]["burn"]["duration_s"] < 3.0


# -- local ------------------------------------------------------------------------------


def test_the_local_transport_cuts_the_burn_to_its_deadline() -> None:
    host = HostSpec(name="here", address="here", simulate=SCENARIO)
    started = time.monotonic()

    outcome = LocalTransport().run_agent(host, AgentRequest(burn=LONG_BURN), DEADLINE_S, Phases())

    assert time.monotonic() - started < DEADLINE_S + overrun_s(DEADLINE_S)
    assert outcome.error is None, outcome.error
    assert outcome.facts is not None
    assert outcome.facts.burn is not None
    assert outcome.facts.burn.duration_s < DEADLINE_S


@pytest.fixture
def stuck_collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The collector blocks (a wedged GPU's driver call) until released."""
    release = threading.Event()

    def stuck(*_: object) -> NodeFacts:
        release.wait(60)
        raise RuntimeError("released")

    monkeypatch.setattr(collector, "collect", stuck)
    yield release
    release.set()


def test_a_stuck_local_collector_is_given_up_at_the_deadline(
    stuck_collector: threading.Event,
) -> None:
    phases = Phases()
    host = HostSpec(name="here", address="here", simulate=SCENARIO)
    started = time.monotonic()

    outcome = LocalTransport().run_agent(host, AgentRequest(), 0.5, phases)

    assert time.monotonic() - started < 0.5 + overrun_s(0.5) + 1.0
    assert outcome.facts is None
    assert outcome.error == "no facts within the 0.5 s deadline (the collector did not return)"
    assert phases.seen[-1] == ("here", "failed")


# -- the fan-out ---------------------------------------------------------------------------


class CutTransport:
    """Gives every host the facts of a burn shorter than asked, as a cut agent does."""

    name = "fake"

    def __init__(self) -> None:
        self.facts = two_second_burn()

    def run_agent(
        self, host: HostSpec, request: AgentRequest, timeout_s: float, progress: Progress
    ) -> AgentOutcome:
        del request, timeout_s, progress
        return AgentOutcome(host.name, self.facts, elapsed_s=2.5)


def test_the_fanout_judges_a_cut_host_as_timed_out() -> None:
    hosts = [HostSpec(name=f"gpu{i}", address=f"gpu{i}") for i in range(2)]

    def judge(host: HostSpec, facts: NodeFacts) -> NodeResult:
        del host
        return judge_node(facts, Policy())

    outcome = run_fanout(hosts, CutTransport(), AgentRequest(burn=LONG_BURN), judge, deadline_s=3.0)

    for result in outcome.results:
        assert result.verdict is Verdict.UNKNOWN
        assert result.summary.endswith("the 30 s burn-in was cut to 2.0 s")
        assert result.transport == "fake"
        assert len(result.facts.gpus) == 8
    # The same facts within a burn as asked: certified, nothing cut.
    full = run_fanout(
        hosts, CutTransport(), AgentRequest(burn=BurnConfig(duration_s=2)), judge, deadline_s=3.0
    )
    assert [r.verdict for r in full.results] == [Verdict.CERTIFIED] * 2


def write_inventory(path: Path, hosts: dict[str, dict[str, Any]]) -> Path:
    lines = ["all:", "  hosts:"]
    for name, variables in hosts.items():
        lines.append(f"    {name}:")
        lines += [f"      {key}: {value}" for key, value in variables.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_fleet_through_local_is_cut_at_its_deadline(tmp_path: Path) -> None:
    inventory = write_inventory(
        tmp_path / "hosts.yml",
        {f"gpu0{i}": {"gpuready_simulate": SCENARIO} for i in range(2)},
    )
    request = FleetRequest(
        Reach(inventories=(str(inventory),), transport=TransportName.LOCAL),
        burn=LONG_BURN,
        deadline_s=DEADLINE_S,
    )
    started = time.monotonic()
    report = certify_fleet(request)
    assert time.monotonic() - started < DEADLINE_S + overrun_s(DEADLINE_S) + 2.0
    for node in report.nodes:
        assert node.transport == "local"
        assert_cut_and_kept(node, DEADLINE_S)


# -- gpuready_transport per host ---------------------------------------------------------------


def test_a_host_variable_picks_its_transport_and_the_flag_covers_the_rest(
    tmp_path: Path,
) -> None:
    inventory = write_inventory(
        tmp_path / "hosts.yml",
        {
            "here": {"gpuready_transport": "local", "gpuready_simulate": SCENARIO},
            # No variable: the default, ssh, to a port nothing listens on.
            "far": {"ansible_host": "127.0.0.1", "ansible_port": 1},
        },
    )
    request = FleetRequest(
        Reach(
            inventories=(str(inventory),),
            connect_timeout_s=2.0,
            known_hosts=str(tmp_path / "known_hosts"),
            ssh_config=str(tmp_path / "no-ssh-config"),
        ),
        burn=BurnConfig(duration_s=2),
    )
    assert request.reach.transport is TransportName.SSH

    report = certify_fleet(request)

    nodes = {node.hostname: node for node in report.nodes}
    assert nodes["here"].transport == "local"
    assert nodes["here"].verdict is Verdict.CERTIFIED, nodes["here"].summary
    assert nodes["here"].facts.source_detail == SCENARIO
    assert nodes["far"].transport == "ssh"
    assert nodes["far"].verdict is Verdict.UNKNOWN
    assert "connection refused" in nodes["far"].summary.lower()


def test_the_host_variable_wins_over_the_flag_through_the_cli(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inventory = write_inventory(
        tmp_path / "hosts.yml",
        {"here": {"gpuready_transport": "local", "gpuready_simulate": SCENARIO}},
    )
    code = main(
        ["certify", "-i", str(inventory), "--transport", "ansible", "--burn", "2s", "--json",
         "--db", str(tmp_path / "h.db")]
    )  # fmt: skip
    (node,) = json.loads(capsys.readouterr().out)["nodes"]
    assert code == ExitCode.OK, node["summary"]
    assert node["transport"] == "local"
    assert node["verdict"] == "CERTIFIED"


def test_each_transport_is_made_once_and_only_when_needed() -> None:
    made: list[TransportName] = []

    def make(name: TransportName) -> LocalTransport:
        made.append(name)
        return LocalTransport()

    routed = PerHostTransport(TransportName.SSH, make)
    local = HostSpec(name="a", address="a", vars={"gpuready_transport": " local "})
    plain = HostSpec(name="b", address="b")
    assert routed.name_for(local) == "local"
    assert routed.name_for(plain) == "ssh"
    assert made == []
    assert routed.pick(local) is routed.pick(local)
    routed.pick(plain)
    assert made == [TransportName.LOCAL, TransportName.SSH]


# -- the agent, over ssh and ansible -----------------------------------------------------------


def test_the_agent_cuts_its_own_burn_to_its_deadline(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    code = agent.run(["--simulate", SCENARIO, "--burn", "30", "--deadline", f"{DEADLINE_S:g}"])
    assert time.monotonic() - started < DEADLINE_S + overrun_s(DEADLINE_S)
    assert code == 0
    facts = json.loads(capsys.readouterr().out)
    assert 0 < facts["burn"]["duration_s"] < DEADLINE_S
    assert len(facts["gpus"]) == 8


def test_an_agent_whose_collector_hangs_exits_at_its_deadline() -> None:
    script = (
        "import sys, threading\n"
        "from validator.node import agent, collect\n"
        "collect.collect = lambda *_: threading.Event().wait()\n"
        "sys.exit(agent.run(['--deadline', '0.5']))\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert time.monotonic() - started < 10
    assert done.returncode == ExitCode.COULD_NOT_RUN
    assert done.stderr.startswith("gpuready-agent: error: no facts within the 0.5 s deadline")
    assert done.stderr.count("\n") == 1


@pytest.fixture
def client_key(tmp_path: Path) -> tuple[Any, Path]:
    from paramiko import ECDSAKey

    key = ECDSAKey.generate()
    path = tmp_path / "id_ecdsa"
    key.write_private_key_file(str(path))
    return key, path


@pytest.fixture
def box(tmp_path: Path, client_key: tuple[Any, Path]) -> Iterator[SshBox]:
    server = SshBox(tmp_path / "home", client_key[0])
    yield server
    server.stop()


def test_over_ssh_the_agent_is_given_the_deadline_and_its_figures_come_back(
    tmp_path: Path, box: SshBox, client_key: tuple[Any, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())
    started = time.monotonic()

    outcome = _transport(tmp_path).run_agent(
        _host(box, client_key[1]), AgentRequest(burn=LONG_BURN), 6.0, Phases()
    )

    assert time.monotonic() - started < 6.0 + overrun_s(6.0)
    assert outcome.error is None, outcome.error
    assert "--deadline" in box.commands[-1]
    assert outcome.facts is not None
    assert outcome.facts.burn is not None
    assert 0 < outcome.facts.burn.duration_s < 6.0
    assert len(outcome.facts.gpus) == 8


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="no ansible-playbook")
def test_through_ansible_the_agent_is_given_the_deadline_and_its_figures_come_back(
    tmp_path: Path,
) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        f"gpuhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    transport = AnsibleTransport(
        [inventory], cache_dir=str(tmp_path / "cache"), work_dir=tmp_path / "work"
    )
    host = HostSpec(name="gpuhost", address="gpuhost", python=sys.executable, simulate=SCENARIO)
    started = time.monotonic()

    # Ansible starts slowly on a loaded machine (on CI it once took 13 s before the agent
    # ran, leaving no time for a burn): 25 s leaves room for it and still cuts the burn.
    deadline_s = 25.0
    outcome = transport.run_agent(host, AgentRequest(burn=LONG_BURN), deadline_s, Phases())

    # Far from the 30 s burn: only Ansible's own teardown may go past the deadline.
    assert time.monotonic() - started < deadline_s + overrun_s(deadline_s) + 3.0
    assert outcome.error is None, outcome.error
    assert outcome.facts is not None
    assert outcome.facts.burn is not None
    assert 0 < outcome.facts.burn.duration_s < deadline_s


def test_an_empty_simulate_is_this_host_as_it_always_was(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The agent reads ``--simulate ''`` as no scenario: this host's facts, not a bad name."""
    assert agent.run(["--simulate", ""]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert (facts["source"], facts["source_detail"]) == ("live", "")
