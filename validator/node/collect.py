"""The one collector: ``collect(source, request, until)``, the same road for every source.

A source is where facts come from: this host (validator.node.live.live_source), a
scenario (validator.node.sim.simulated_source) or a capture bundle
(validator.node.capture.capture_source); only the agent's entry point chooses one
(validator.node.agent.source_for). Whatever the source, the facts are read from its
System first (validator.node.system_facts), then the burn-in runs, then the
interconnect is measured (the copies and the all-reduce would share the GPUs with
the burn), then DCGM's diagnostic. A capture measures nothing: what it recorded is
read with its other facts.

With a deadline (``until``, on ``time.monotonic()``'s clock) each step is cut to
end within it: the burn-in to what is left once the other facts are in, less the
room kept for the interconnect (:func:`burn_within`, :func:`interconnect_reserve`);
the interconnect to what the burn leaves (:func:`interconnect_within`); DCGM's
timeout to what the interconnect leaves (:func:`dcgm_within`). A step with no time
left is not started, and says so.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Union

from validator.model import (
    DEFAULT_XID_WINDOW_HOURS,
    BurnResult,
    DcgmDiag,
    Interconnect,
    NodeFacts,
    Reason,
    busy_reasons,
    busy_summary,
    chosen_gpus,
)
from validator.node import stop_request
from validator.node.bandwidth import check_mode, wanted
from validator.node.bandwidth.bandwidth_config import ALLOWANCE_S, InterconnectConfig

if TYPE_CHECKING:
    from validator.node.burnin.burn_config import BurnConfig
    from validator.node.burnin.burn_progress import ProgressSink
    from validator.node.system import System

# A mode that measures nothing: the agent run by hand, and drift unless asked.
INTERCONNECT_OFF = "off"
# What a collector measures unless told: what certify measures under the default policy
# (the agent's own --interconnect defaults to off; the controller always says).
INTERCONNECT_AUTO = "auto"

# Of the time left when the burn-in would start, this share is kept back for what
# follows the products: the reads after the burn, the JSON, the trip home.
DEADLINE_KEEP_SHARE = 0.3
DEADLINE_KEEP_MIN_S = 0.75
DEADLINE_KEEP_MAX_S = 60.0
# A cut burn shorter than this measures nothing worth its setup: it is not run.
SHORTEST_CUT_BURN_S = 0.5
# A cut burn's workers may take this long past its end before they count as wedged
# (at most the burn's own grace): a real GPU's last batch can take a second.
CUT_GRACE_MIN_S = 2.0
# A DCGM diagnostic cut to less than this cannot finish even level 1: it is not run.
SHORTEST_DCGM_S = 5.0
# A container run with less than this: not started (pulling and starting take seconds).
SHORTEST_CONTAINER_S = 5.0
# Less than this leaves no room for the idle gate and one GPU's copies: not started.
SHORTEST_INTERCONNECT_S = 5.0
# Of the time left when the burn-in would start, this share is kept for the
# interconnect measurement that follows it, when wanted: at least enough to start it
# once the trip home is kept back too, at most its ALLOWANCE_S, and never more than
# INTERCONNECT_RESERVE_MAX_SHARE (on a deadline too short for both, the burn comes first).
INTERCONNECT_RESERVE_SHARE = 0.25
INTERCONNECT_RESERVE_MIN_S = 8.0
INTERCONNECT_RESERVE_MAX_SHARE = 0.5
NO_TIME_FOR_INTERCONNECT = (
    "no time left for the interconnect measurement within the deadline: give a longer --deadline"
)


@dataclass(frozen=True)
class CollectRequest:
    """What to collect besides the facts every source has: the same for every source."""

    window_hours: float | None = DEFAULT_XID_WINDOW_HOURS  # how far back Xids count
    burn: BurnConfig | None = None  # None: no burn-in (a capture holds none either way)
    dcgm_level: int = 0  # DCGM's diagnostic, run last; 0 for none
    dcgm_timeout_s: float | None = None  # how long dcgmi may run; None: the level's allowance
    interconnect: str = INTERCONNECT_AUTO  # auto, on or off (validator.node.bandwidth.wanted)
    allow_busy: bool = False  # --allow-busy: burn and measure GPUs with others' work on them
    gpus: tuple[str, ...] = ()  # --gpus: the GPUs to certify (validator.node.gpu_choice); all
    # --container-image / policy container.image: list the GPUs a container of it sees.
    container_image: str | None = None


class FactSource(Protocol):
    """Where facts come from: this host, a scenario or a capture bundle."""

    @property
    def simulated(self) -> bool:
        """Whether its measurements are a scenario's."""
        ...

    @property
    def measures(self) -> bool:
        """Whether it burns and measures; False: it holds recordings (a capture)."""
        ...

    def system(self) -> System:
        """The host its commands and files come from (one, for every step)."""
        ...

    def first_facts(self, request: CollectRequest) -> NodeFacts:
        """The facts read from its System and NVML; a capture's recordings too."""
        ...

    def burn(
        self, facts: NodeFacts, config: BurnConfig, progress: ProgressSink | None
    ) -> BurnResult:
        """Run the burn-in ``config`` asks for on the GPUs ``facts`` found."""
        ...

    def measure_interconnect(
        self, facts: NodeFacts, config: InterconnectConfig, until: float | None
    ) -> Interconnect:
        """Measure copies, peers and the all-reduce; stop starting copies at ``until``."""
        ...


def collect(
    source: FactSource,
    request: CollectRequest = CollectRequest(),
    until: float | None = None,
    progress: ProgressSink | None = None,
) -> NodeFacts:
    """The node's facts from ``source``: its first facts, the burn-in, the interconnect, DCGM.

    Args:
        source: where the facts come from.
        request: what to measure after the first facts.
        until: the deadline, on ``time.monotonic()``'s clock; None for none.
        progress: told about the burn about once a second.

    Raises:
        GpureadyError: a bad scenario, capture, burn setting or interconnect mode.
    """
    check_mode(request.interconnect)
    facts = _with_families(source, source.first_facts(request), request.container_image, until)
    if not source.measures:
        return facts
    facts = _gate(source, facts, request)
    busy = busy_reasons(facts)
    if busy and not request.allow_busy:
        return _not_measured_beside(source, facts, request, busy_summary(busy))
    chosen = _chosen(facts)  # what is burned and measured
    if request.burn is not None:
        reserve = until is not None and wanted(chosen, request.interconnect)
        burn = _burn(source, chosen, request.burn, until, progress, reserve)
        facts = _network_after_burn(source, dataclasses.replace(facts, burn=burn))
    facts = _interconnect(source, facts, request.interconnect, until)
    return _dcgm(source, facts, request.dcgm_level, request.dcgm_timeout_s, until)


def _with_families(
    source: FactSource, facts: NodeFacts, image: str | None, until: float | None
) -> NodeFacts:
    """The families beside the GPUs': HCAs, GPUDirect readiness, host, container runtime.

    Every source sets them (live, capture, simulated): what one cannot read is
    NOT_MEASURED inside, never the family left out.
    """
    from validator.node.gpudirect_probe import gpudirect_facts
    from validator.node.host_probe import probe_host
    from validator.node.network_probe import with_network

    system = source.system()
    facts = with_network(system, facts)
    facts = _container(system, facts, image, until)
    return dataclasses.replace(facts, gpudirect=gpudirect_facts(system), host=probe_host(system))


def _network_after_burn(source: FactSource, facts: NodeFacts) -> NodeFacts:
    """The facts with each HCA port's error counters read again after the burn-in."""
    if facts.network is None:
        return facts
    from validator.node.network_probe import counters_after

    return dataclasses.replace(facts, network=counters_after(source.system(), facts.network))


def _container(
    system: System, facts: NodeFacts, image: str | None, until: float | None
) -> NodeFacts:
    """The facts with the container runtime's (validator.node.container_probe), every source.

    A container is started only where an image is named; a capture records none, so
    there the run is not measured. With ``until``, its timeout is what is left then.
    """
    from validator.node import container_probe

    found = container_probe.container_facts(system)
    if image is not None:
        usable = container_probe.cdi_names_all(found)
        timeout_s: float | None = container_probe.CONTAINER_RUN_TIMEOUT_S
        if until is not None:
            timeout_s = container_within(until - time.monotonic())
        found = container_probe.with_container_run(system, found, image, usable, timeout_s)
    return dataclasses.replace(facts, container=found)


def _chosen(facts: NodeFacts) -> NodeFacts:
    """The facts as the burn and the interconnect see them: the chosen GPUs alone (--gpus)."""
    return (
        facts if facts.chosen_gpus is None else dataclasses.replace(facts, gpus=chosen_gpus(facts))
    )


def _gate(source: FactSource, facts: NodeFacts, request: CollectRequest) -> NodeFacts:
    """The facts with the chosen GPUs (``--gpus``), who else is on them, and the gate.

    Raises:
        BadInputError: a ``--gpus`` selector names none of the node's GPUs.
    """
    from validator.node.busy_gate import observe
    from validator.node.gpu_choice import resolve_gpus

    chosen = resolve_gpus(request.gpus, facts.gpus) if request.gpus else None
    return observe(source.system(), facts, allow_busy=request.allow_busy, chosen=chosen)


def _not_measured_beside(
    source: FactSource, facts: NodeFacts, request: CollectRequest, why: str
) -> NodeFacts:
    """The facts of a node whose chosen GPUs are busy: nothing burned, measured or stressed."""
    from validator.node.burnin.burn_request import not_started

    said = f"not started: {why}; drain the node or wait for its jobs, or give --allow-busy"
    burn = None if request.burn is None else not_started(request.burn, "none", said)
    interconnect = _not_measured(source, said) if wanted(facts, request.interconnect) else None
    dcgm = None
    if request.dcgm_level > 0:
        from validator.node.dcgm_run import not_run

        dcgm = not_run(request.dcgm_level, Reason.NOT_MEASURED, said)
    return dataclasses.replace(facts, burn=burn, interconnect=interconnect, dcgm=dcgm)


Collected = Union[NodeFacts, BaseException]


def collect_in_background(
    source: FactSource,
    request: CollectRequest,
    until: float,
    progress: ProgressSink | None = None,
) -> queue.Queue[Collected]:
    """Start :func:`collect` on a daemon thread; its facts (or error) arrive on the queue.

    ``progress`` is told about the burn (on that thread) as :func:`collect` tells it.

    A daemon, so that a collector stuck past the deadline (a wedged GPU's driver call)
    never keeps its process alive; the caller stops waiting at the deadline.
    """
    arrived: queue.Queue[Collected] = queue.Queue(maxsize=1)

    def run() -> None:
        try:
            arrived.put(collect(source, request, until, progress))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread as it is
            arrived.put(exc)

    threading.Thread(target=run, name="gpuready-collect", daemon=True).start()
    return arrived


def stopped_reason(facts: NodeFacts) -> str | None:
    """Why nothing more is started after the burn-in: it was stopped; None when it was not.

    A stopped run has seconds left (Slurm's KillWait is 30 s) for its facts to be
    printed, judged and recorded: the interconnect and DCGM would take minutes.
    """
    if stop_request.requested():
        return stop_request.reason()
    if facts.burn is not None and facts.burn.interrupted:
        return "not started: the run was interrupted during the burn-in"
    return None


def _burn(
    source: FactSource,
    facts: NodeFacts,
    burn: BurnConfig,
    until: float | None,
    progress: ProgressSink | None,
    reserve: bool,
) -> BurnResult:
    """The burn-in, cut to what is left before ``until`` (or why it could not start).

    ``reserve``: the interconnect is measured after it, so room is kept for that.
    """
    if until is None:
        return source.burn(facts, burn, progress)
    seconds_left = until - time.monotonic()
    kept = interconnect_reserve(seconds_left) if reserve else 0.0
    fitted = burn_within(burn, seconds_left, kept)
    if fitted is None:
        return _no_time(burn, seconds_left)
    return source.burn(facts, fitted, progress)


def _interconnect(
    source: FactSource, facts: NodeFacts, mode: str, until: float | None
) -> NodeFacts:
    """The facts with the interconnect measured, where ``mode`` wants it for this node.

    Not wanted (validator.node.bandwidth.wanted): the facts as they are, ``interconnect``
    None. With ``until``, it is measured within what is left then.
    """
    chosen = _chosen(facts)  # --gpus: only those
    if not wanted(chosen, mode):
        return facts
    ends = None
    if until is not None:
        allowed = interconnect_within(until - time.monotonic())
        if allowed is None:
            why = NO_TIME_FOR_INTERCONNECT
            return dataclasses.replace(facts, interconnect=_not_measured(source, why))
        ends = time.monotonic() + allowed
    stopped = stopped_reason(facts)
    if stopped is not None:
        return dataclasses.replace(facts, interconnect=_not_measured(source, stopped))
    measured = source.measure_interconnect(chosen, InterconnectConfig(), ends)
    return dataclasses.replace(facts, interconnect=measured)


def _not_measured(source: FactSource, why: str) -> Interconnect:
    """The interconnect measurement that was not started, and why."""
    simulated = source.simulated
    return Interconnect(source="simulate" if simulated else "cuda", simulated=simulated, error=why)


def _dcgm(
    source: FactSource,
    facts: NodeFacts,
    level: int,
    timeout_s: float | None,
    until: float | None,
) -> NodeFacts:
    """The facts with DCGM's diagnostic of ``level`` run last (none for level 0).

    It runs after the burn-in and the interconnect: DCGM's stress tests would share
    the GPUs with them. With ``until``, its timeout is cut to what is left then.
    """
    if level <= 0:
        return facts
    from validator.node.dcgm_run import not_run, run_dcgm

    if until is not None:
        seconds_left = until - time.monotonic()
        timeout_s = dcgm_within(level, timeout_s, seconds_left)
        if timeout_s is None:
            return dataclasses.replace(facts, dcgm=_dcgm_no_time(level, seconds_left))
    stopped = stopped_reason(facts)
    if stopped is not None:
        return dataclasses.replace(facts, dcgm=not_run(level, Reason.NOT_MEASURED, stopped))
    diag = run_dcgm(source.system(), level, timeout_s, facts.chosen_gpus)  # --gpus: those alone
    return dataclasses.replace(facts, dcgm=diag)


def _kept_back(seconds_left: float) -> float:
    return min(DEADLINE_KEEP_MAX_S, max(DEADLINE_KEEP_MIN_S, DEADLINE_KEEP_SHARE * seconds_left))


def burn_within(burn: BurnConfig, seconds_left: float, reserve_s: float = 0.0) -> BurnConfig | None:
    """The burn-in that ends in the time left: as asked when it fits, else cut shorter.

    Args:
        burn: the burn-in asked for.
        seconds_left: from now to the deadline.
        reserve_s: kept for what is measured after the burn (the interconnect:
            :func:`interconnect_reserve`); the burn ends before it.

    Returns:
        ``burn`` itself when it fits with room to spare; a shorter one (and a grace
        that ends near the deadline) when not; None when too little is left for any.
    """
    seconds_left -= reserve_s
    kept = _kept_back(seconds_left)
    if burn.duration_s + kept <= seconds_left:
        return burn
    duration = seconds_left - kept
    if duration < SHORTEST_CUT_BURN_S:
        return None
    grace = min(burn.grace_s, max(kept, CUT_GRACE_MIN_S))
    return dataclasses.replace(burn, duration_s=round(duration, 3), grace_s=grace)


def _no_time(burn: BurnConfig, seconds_left: float) -> BurnResult:
    """The burn that could not start: the deadline left no time for it."""
    return BurnResult(
        backend=burn.backend or "auto",
        dtype=burn.dtype,
        matrix_size=burn.matrix_size or 0,
        duration_s=0.0,
        elapsed_s=0.0,
        memory_fraction=burn.memory_fraction,
        started_at="",
        sampler="none",
        error=(
            f"the deadline left {max(0.0, seconds_left):.1f} s once the other facts were "
            f"in: no time for the {burn.duration_s:g} s burn-in"
        ),
    )


def dcgm_within(level: int, timeout_s: float | None, seconds_left: float) -> float | None:
    """The timeout DCGM's diagnostic gets in the time left: as asked, or cut to fit.

    Args:
        level: the DCGM level asked for.
        timeout_s: its timeout asked for; None: the level's allowance.
        seconds_left: from now to the deadline.

    Returns:
        The timeout, ending before the deadline with the trip home kept back; None
        when too little is left to run it at all.
    """
    from validator.node.dcgm_run import default_timeout

    asked = default_timeout(level) if timeout_s is None else timeout_s
    room = seconds_left - _kept_back(seconds_left)
    if room < SHORTEST_DCGM_S:
        return None
    return round(min(asked, room), 3)


def container_within(seconds_left: float) -> float | None:
    """The container run's timeout in the time left: at most its fixed cap.

    Returns:
        The timeout, ending before the deadline with the trip home kept back; None
        when too little is left to start one.
    """
    from validator.node.container_probe import CONTAINER_RUN_TIMEOUT_S

    room = seconds_left - _kept_back(seconds_left)
    if room < SHORTEST_CONTAINER_S:
        return None
    return round(min(CONTAINER_RUN_TIMEOUT_S, room), 3)


def _dcgm_no_time(level: int, seconds_left: float) -> DcgmDiag:
    from validator.node.dcgm_run import not_run

    return not_run(
        level,
        Reason.NOT_MEASURED,
        f"the deadline left no time for it: {max(0.0, seconds_left):.1f} s were left after "
        "the burn-in; give a longer --deadline (or a shorter --burn)",
    )


def interconnect_reserve(seconds_left: float) -> float:
    """What the burn-in keeps back for the interconnect measurement after it.

    A share of the time left, enough to start the measurement and at most its
    allowance, so a long deadline burns in full; never more than half of what is
    left, so a short one still burns.
    """
    share = max(INTERCONNECT_RESERVE_MIN_S, INTERCONNECT_RESERVE_SHARE * seconds_left)
    ceiling = min(ALLOWANCE_S, INTERCONNECT_RESERVE_MAX_SHARE * seconds_left)
    return max(0.0, min(share, ceiling))


def interconnect_within(seconds_left: float) -> float | None:
    """How long the interconnect measurement may take in the time left.

    Args:
        seconds_left: from now (after the burn-in) to the deadline.

    Returns:
        Its allowance (validator.node.bandwidth.bandwidth_config.ALLOWANCE_S), or less to end
        before the deadline with the trip home kept back; None when too little is
        left to start it. DCGM, measured after it, gets what it leaves.
    """
    room = seconds_left - _kept_back(seconds_left)
    if room < SHORTEST_INTERCONNECT_S:
        return None
    return round(min(ALLOWANCE_S, room), 3)


__all__ = [
    "INTERCONNECT_AUTO",
    "INTERCONNECT_OFF",
    "CollectRequest",
    "FactSource",
    "burn_within",
    "collect",
    "collect_in_background",
    "container_within",
    "dcgm_within",
    "interconnect_reserve",
    "interconnect_within",
]
