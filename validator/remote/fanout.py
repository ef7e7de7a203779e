"""Run the agent on many hosts at once: bounded concurrency, a deadline per host, never stuck.

Workers are daemon threads pulling hosts from a queue, so a host that hangs
(a dead network path, a wedged GPU) holds one worker at most, and never keeps
the process alive at exit. The caller's thread only waits, so Ctrl-C lands
there: the run stops, and every unfinished host is reported UNKNOWN.

Each host's deadline binds in its transport (which has the agent cut its
burn-in to end in time, and stops waiting soon after it passes); a host whose run
was cut is judged on what it measured, then made UNKNOWN as timed out
(validator.remote.deadline). Each host goes through its own transport where the
inventory names one (validator.remote.per_host).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from validator.model import Finding, HostSpec, NodeFacts, NodeResult, Severity, Verdict
from validator.remote.deadline import cut_short, timed_out
from validator.remote.transport import (
    AgentOutcome,
    AgentRequest,
    Arrivals,
    Phase,
    Progress,
    Transport,
    overrun_s,
    transport_for,
    transport_name,
)

Judge = Callable[[HostSpec, NodeFacts], NodeResult]

# The most results handed on at once: enough to commit a burst in one transaction,
# few enough that the first of them is shown without waiting on the rest.
MOST_AT_ONCE = 256


class _Silent:
    def phase(self, host: str, phase: Phase) -> None:
        del host, phase


@dataclass(frozen=True)
class FanoutResult:
    """Every host's result, in inventory order, and whether the run was cut short."""

    results: tuple[NodeResult, ...]
    interrupted: bool


def unreachable(
    host: HostSpec, transport: str, error: str, phase: str, elapsed_s: float, stderr: str = ""
) -> NodeResult:
    """The result for a host that gave no facts: UNKNOWN, with the reason."""
    where = f" ({phase})" if phase else ""
    return NodeResult(
        hostname=host.name,
        verdict=Verdict.UNKNOWN,
        facts=NodeFacts(hostname=host.name, source=transport, source_detail=host.address),
        findings=(
            Finding(
                check="transport.reach",
                severity=Severity.UNKNOWN,
                message=f"{host.name}: {error}",
                observed=f"no facts{where}",
                expected="facts from the agent",
            ),
        ),
        summary=f"could not be judged: {error}",
        transport=transport,
        agent_stderr=stderr,
        elapsed_s=round(elapsed_s, 3),
    )


def judged_result(
    host: HostSpec,
    transport: str,
    outcome: AgentOutcome,
    judge: Judge,
    request: AgentRequest,
    deadline_s: float,
) -> NodeResult:
    """One host's result from its agent's outcome: judged, or UNKNOWN with why not.

    A host whose run the deadline cut is judged on what it measured, then made UNKNOWN
    as timed out (validator.remote.deadline); every transport's outcome goes through here.
    """
    if outcome.facts is None:
        why = outcome.error or "the agent gave no facts"
        return unreachable(host, transport, why, outcome.phase, outcome.elapsed_s, outcome.stderr)
    facts = outcome.facts
    if host.simulate and facts.source != "simulate":
        # Asked for a scenario, the agent's facts are no real host's, whatever source it
        # claims: never a live provenance a drift could take as the host's baseline.
        facts = replace(facts, source="simulate", source_detail=host.simulate)
    judged = judge(host, facts)
    cut = cut_short(request.burn, facts, deadline_s, outcome.elapsed_s)
    if cut is not None:
        judged = timed_out(replace(judged, hostname=host.name), deadline_s, cut)
    return replace(
        judged,
        hostname=host.name,
        transport=transport,
        agent_stderr=outcome.stderr,
        elapsed_s=round(outcome.elapsed_s, 3),
    )


def run_fanout(
    hosts: Sequence[HostSpec],
    transport: Transport,
    request: AgentRequest,
    judge: Judge,
    *,
    parallel: int = 64,
    deadline_s: float = 600.0,
    progress: Progress | None = None,
    on_results: Arrivals | None = None,
    stop: threading.Event | None = None,
) -> FanoutResult:
    """Certify every host; one failing, hanging or unreachable host never holds up the others.

    Args:
        hosts: the hosts, in the order the report lists them.
        transport: how to reach them.
        request: what the agent does on each.
        judge: facts to a NodeResult (the host's own policy applied).
        parallel: how many hosts at once.
        deadline_s: how long one host may take from connect to facts.
        progress: told each host's phase.
        on_results: called (in the caller's thread) with the results that have arrived
            since its last call (every one waiting, up to :data:`MOST_AT_ONCE`).
        stop: set it to end the run early; unfinished hosts are reported UNKNOWN.
    """
    run = _Run(hosts, transport, request, judge, deadline_s, progress or _Silent(), stop)
    run.start(parallel)
    interrupted = False
    try:
        run.collect(on_results)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        run.stop.set()
    if len(run.results) < len(hosts):
        interrupted = True
        why = "the run was interrupted before this host finished"
        run.record(
            [
                (
                    position,
                    unreachable(host, transport_name(transport, host), why, "interrupted", 0.0),
                )
                for position, host in enumerate(hosts)
                if position not in run.results
            ],
            on_results,
        )
    return FanoutResult(
        results=tuple(run.results[i] for i in range(len(hosts))), interrupted=interrupted
    )


class _Run:
    """One fan-out's shared state: the queue of hosts, the workers, what came back."""

    def __init__(
        self,
        hosts: Sequence[HostSpec],
        transport: Transport,
        request: AgentRequest,
        judge: Judge,
        deadline_s: float,
        progress: Progress,
        stop: threading.Event | None,
    ) -> None:
        self.hosts = hosts
        self.transport = transport
        self.request = request
        self.judge = judge
        self.deadline_s = deadline_s
        self.progress = progress
        self.stop = stop or threading.Event()
        self.pending: queue.Queue[int] = queue.Queue()
        for position in range(len(hosts)):
            self.pending.put(position)
        self.done: queue.Queue[tuple[int, NodeResult]] = queue.Queue()
        self.started: dict[int, float] = {}
        self.lock = threading.Lock()
        self.results: dict[int, NodeResult] = {}

    def start(self, parallel: int) -> None:
        for i in range(max(1, min(parallel, len(self.hosts)))):
            threading.Thread(target=self._work, name=f"fanout-{i}", daemon=True).start()

    def _work(self) -> None:
        while not self.stop.is_set():
            try:
                position = self.pending.get_nowait()
            except queue.Empty:
                return
            host = self.hosts[position]
            with self.lock:
                self.started[position] = time.monotonic()
            name = transport_name(self.transport, host)
            try:
                chosen = transport_for(self.transport, host)
                outcome = chosen.run_agent(host, self.request, self.deadline_s, self.progress)
                result = judged_result(
                    host, chosen.name, outcome, self.judge, self.request, self.deadline_s
                )
            except Exception as exc:  # noqa: BLE001 - one host's bug must not end the run
                why = f"{type(exc).__name__}: {exc}"
                result = unreachable(host, name, why, "", 0.0)
            self.done.put((position, result))

    def collect(self, on_results: Arrivals | None) -> None:
        while len(self.results) < len(self.hosts) and not self.stop.is_set():
            try:
                arrived = [self.done.get(timeout=0.2)]
            except queue.Empty:
                self._expire(on_results)
                continue
            while len(arrived) < MOST_AT_ONCE:
                try:
                    arrived.append(self.done.get_nowait())
                except queue.Empty:
                    break
            # A host given up on past its deadline already has its result.
            self.record([(p, r) for p, r in arrived if p not in self.results], on_results)

    def record(self, arrived: list[tuple[int, NodeResult]], on_results: Arrivals | None) -> None:
        for position, result in arrived:
            self.results[position] = result
            failed = result.verdict is Verdict.UNKNOWN
            self.progress.phase(self.hosts[position].name, Phase.FAILED if failed else Phase.DONE)
        if on_results is not None and arrived:
            on_results([result for _, result in arrived])

    def _expire(self, on_results: Arrivals | None) -> None:
        # Every transport enforces the deadline itself; this is the backstop for one
        # that cannot (a hung DNS lookup, a blocked library call).
        now = time.monotonic()
        # Later than any transport's own limit, so that its words are the ones shown.
        margin = overrun_s(self.deadline_s) + min(30.0, 0.1 * self.deadline_s)
        with self.lock:
            overdue = [
                p
                for p, t in self.started.items()
                if p not in self.results and now - t > self.deadline_s + margin
            ]
        why = f"no answer within the {self.deadline_s:g} s deadline"
        given_up = []
        for position in overdue:
            host = self.hosts[position]
            name = transport_name(self.transport, host)
            elapsed = now - self.started[position]
            given_up.append((position, unreachable(host, name, why, "deadline", elapsed)))
        self.record(given_up, on_results)
