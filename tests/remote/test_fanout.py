"""The fan-out: bounded concurrency, deadlines, failures and interruptions stay per host."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from tests.collecting import collect_simulated
from validator.judge import Policy, judge_node
from validator.model import HostSpec, NodeFacts, NodeResult, Verdict
from validator.remote.fanout import run_fanout
from validator.remote.transport import AgentOutcome, AgentRequest, Progress

FACTS = collect_simulated("healthy-8x-h100-sxm")
HOSTS = [HostSpec(name=f"gpu{i:02d}", address=f"gpu{i:02d}.example") for i in range(12)]


def judge(host: HostSpec, facts: NodeFacts) -> NodeResult:
    del host
    return judge_node(facts, Policy(require_burn=False))


class FakeTransport:
    """Answers per host as told: facts, an error, a hang, or an exception."""

    name = "fake"

    def __init__(self, behaviour: dict[str, str] | None = None, delay_s: float = 0.02) -> None:
        self.behaviour = behaviour or {}
        self.delay_s = delay_s
        self.release = threading.Event()
        self.running = 0
        self.most_at_once = 0
        self.lock = threading.Lock()

    def run_agent(
        self, host: HostSpec, request: AgentRequest, timeout_s: float, progress: Progress
    ) -> AgentOutcome:
        del request, timeout_s
        with self.lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            progress.phase(host.name, "run")
            what = self.behaviour.get(host.name, "ok")
            if what == "hang":
                self.release.wait(60)
            if what == "raise":
                raise RuntimeError("bug in a transport")
            time.sleep(self.delay_s)
            if what == "unreachable":
                return AgentOutcome(host.name, None, error="connection refused", phase="connect")
            return AgentOutcome(host.name, FACTS, stderr="note", elapsed_s=self.delay_s)
        finally:
            with self.lock:
                self.running -= 1


class Phases:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def phase(self, host: str, phase: str) -> None:
        self.seen.append((host, phase))


def test_every_host_is_judged_in_inventory_order_with_bounded_concurrency() -> None:
    transport = FakeTransport(delay_s=0.05)
    arrived: list[str] = []
    outcome = run_fanout(
        HOSTS,
        transport,
        AgentRequest(),
        judge,
        parallel=4,
        on_results=lambda batch: arrived.extend(r.hostname for r in batch),
    )
    assert [r.hostname for r in outcome.results] == [h.name for h in HOSTS]
    assert {r.verdict for r in outcome.results} == {Verdict.CERTIFIED}
    assert transport.most_at_once == 4
    assert sorted(arrived) == sorted(h.name for h in HOSTS)
    assert outcome.results[0].transport == "fake"
    assert outcome.results[0].agent_stderr == "note"
    assert not outcome.interrupted


def test_failures_stay_with_their_host() -> None:
    transport = FakeTransport({"gpu03": "unreachable", "gpu05": "raise"})
    outcome = run_fanout(HOSTS, transport, AgentRequest(), judge, parallel=8)
    verdicts = {r.hostname: r.verdict for r in outcome.results}
    assert verdicts.pop("gpu03") is Verdict.UNKNOWN
    assert verdicts.pop("gpu05") is Verdict.UNKNOWN
    assert set(verdicts.values()) == {Verdict.CERTIFIED}
    gpu03 = outcome.results[3]
    assert gpu03.findings[0].check == "transport.reach"
    assert "connection refused" in gpu03.summary
    assert "bug in a transport" in outcome.results[5].summary


def test_results_that_queue_up_while_the_caller_is_busy_come_in_one_call() -> None:
    """A slow store (the caller's commit) gets every result waiting at once: one transaction."""
    # The other eleven wait for the first commit to begin, then finish while it lasts:
    # on a busy machine, all twelve could otherwise be done before the first call.
    transport = FakeTransport({h.name: "hang" for h in HOSTS[1:]}, delay_s=0.01)
    calls: list[list[str]] = []

    def slow_commit(batch: Sequence[NodeResult]) -> None:
        calls.append([r.hostname for r in batch])
        if len(calls) == 1:
            transport.release.set()
            time.sleep(0.5)  # the other eleven finish meanwhile

    outcome = run_fanout(
        HOSTS, transport, AgentRequest(), judge, parallel=12, on_results=slow_commit
    )
    assert sorted(name for call in calls for name in call) == sorted(h.name for h in HOSTS)
    assert len(calls[0]) >= 1
    assert len(calls) <= 3  # not one call per host
    assert max(len(call) for call in calls[1:]) >= 5
    assert [r.hostname for r in outcome.results] == [h.name for h in HOSTS]


def test_a_hung_host_is_given_up_at_its_deadline() -> None:
    transport = FakeTransport({"gpu02": "hang"})
    started = time.monotonic()
    try:
        outcome = run_fanout(
            HOSTS[:4], transport, AgentRequest(), judge, parallel=4, deadline_s=0.5
        )
    finally:
        transport.release.set()
    assert time.monotonic() - started < 5
    assert outcome.results[2].verdict is Verdict.UNKNOWN
    assert "deadline" in outcome.results[2].summary
    assert [r.verdict for i, r in enumerate(outcome.results) if i != 2] == [Verdict.CERTIFIED] * 3


def test_stopping_reports_unfinished_hosts_unknown() -> None:
    transport = FakeTransport({h.name: "hang" for h in HOSTS[6:]})
    stop = threading.Event()
    arrived: list[NodeResult] = []

    def note(batch: Sequence[NodeResult]) -> None:
        arrived.extend(batch)
        if len(arrived) >= 6:
            stop.set()

    try:
        outcome = run_fanout(
            HOSTS, transport, AgentRequest(), judge, parallel=12, on_results=note, stop=stop
        )
    finally:
        transport.release.set()
    assert outcome.interrupted
    assert [r.verdict for r in outcome.results[:6]] == [Verdict.CERTIFIED] * 6
    assert all(
        r.verdict is Verdict.UNKNOWN and "interrupted" in r.summary for r in outcome.results[6:]
    )
    assert len(arrived) == 12  # the unfinished ones are reported too


def test_ctrl_c_in_the_waiting_thread_still_returns_every_host() -> None:
    transport = FakeTransport({h.name: "hang" for h in HOSTS[2:]})

    calls: list[str] = []
    handed: list[int] = []

    def interrupt(batch: Sequence[NodeResult]) -> None:
        calls.extend(result.hostname for result in batch)
        handed.append(len(batch))
        if len(handed) == 1:  # Ctrl-C arrives once, while the first results are being written
            raise KeyboardInterrupt

    try:
        outcome = run_fanout(
            HOSTS[:5], transport, AgentRequest(), judge, parallel=5, on_results=interrupt
        )
    finally:
        transport.release.set()
    assert outcome.interrupted
    assert len(outcome.results) == 5
    assert sum(r.verdict is Verdict.UNKNOWN for r in outcome.results) >= 3
    assert len(calls) >= 4  # the unfinished hosts were still handed over for writing


def test_progress_hears_each_host_finish() -> None:
    phases = Phases()
    run_fanout(
        HOSTS[:3], FakeTransport({"gpu01": "unreachable"}), AgentRequest(), judge, progress=phases
    )
    finals = {host: phase for host, phase in phases.seen if phase in ("done", "failed")}
    assert finals == {"gpu00": "done", "gpu01": "failed", "gpu02": "done"}


@pytest.mark.parametrize("parallel", [1, 64])
def test_parallel_bounds(parallel: int) -> None:
    transport = FakeTransport(delay_s=0.01)
    run_fanout(HOSTS, transport, AgentRequest(), judge, parallel=parallel)
    assert transport.most_at_once <= min(parallel, len(HOSTS))
