"""One small interface over every way of reaching a host: local, ssh, ansible.

A host is :class:`validator.model.HostSpec` and a transport's name
:class:`validator.model.TransportName`: plain data the inventory builds too.
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from validator.model import DEFAULT_XID_WINDOW_HOURS, HostSpec, NodeFacts, NodeResult
from validator.node.bandwidth import check_mode
from validator.node.burnin.burn_config import BurnConfig

if TYPE_CHECKING:
    from validator.node.burnin.worst_gpu import WorstGpu


class Phase(str, enum.Enum):
    """Where a host's run is: what the display shows, where a failure stopped."""

    CONNECT = "connect"
    UPLOAD = "upload"
    RUN = "run"
    PARSE = "parse"
    JUDGE = "judge"
    DONE = "done"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class AgentRequest:
    """What the agent is asked to do on every host (per-host simulate comes from HostSpec)."""

    burn: BurnConfig | None = None  # None: no burn-in
    xid_window_hours: float = DEFAULT_XID_WINDOW_HOURS
    dcgm_level: int = 0  # dcgmi diag -r LEVEL after the burn-in; 0: none
    dcgm_timeout_s: float | None = None  # None: the level's allowance
    # Hosts whose own policy (inventory variables) asks DCGM otherwise:
    # (host name, level, timeout), overriding the two above for that host.
    dcgm_by_host: tuple[tuple[str, int, float | None], ...] = ()
    # The interconnect measurement after the burn-in: auto, on or off
    # (validator.node.bandwidth.wanted); and the hosts whose own policy asks otherwise.
    interconnect: str = "off"
    interconnect_by_host: tuple[tuple[str, str], ...] = ()
    gpus: tuple[str, ...] = ()  # --gpus: resolved by each agent against its own GPUs
    allow_busy: bool = False  # --allow-busy: burn GPUs with others' work on them
    container_image: str | None = None  # list the GPUs a container of it sees; None: none

    def __post_init__(self) -> None:
        # One mode check from the controller to the agent: a bad one never leaves here.
        for mode in (self.interconnect, *(mode for _, mode in self.interconnect_by_host)):
            check_mode(mode)

    @property
    def measures_interconnect(self) -> bool:
        """Whether any host's agent may measure the interconnect (a mode other than off)."""
        modes = (self.interconnect, *(mode for _, mode in self.interconnect_by_host))
        return any(mode != "off" for mode in modes)

    def interconnect_for(self, host: HostSpec) -> str:
        """The interconnect mode this host's agent is asked for."""
        for name, mode in self.interconnect_by_host:
            if name == host.name:
                return mode
        return self.interconnect

    def dcgm_for(self, host: HostSpec) -> tuple[int, float | None]:
        """The DCGM level and timeout this host's agent is asked for."""
        for name, level, timeout_s in self.dcgm_by_host:
            if name == host.name:
                return level, timeout_s
        return self.dcgm_level, self.dcgm_timeout_s

    @property
    def burn_s(self) -> float:
        """The burn's length; 0 for none."""
        return self.burn.duration_s if self.burn is not None else 0.0

    def arguments(self, host: HostSpec, deadline_s: float | None = None) -> list[str]:
        """The agent's command-line arguments for this host.

        Args:
            host: the host (its scenario, when simulated).
            deadline_s: how long the agent may take, from its start (see
                :func:`agent_deadline`); None: no limit of its own.
        """
        # Packed: a tenth of the bytes to carry home, kept by the controller as they come
        # (validator.packed.agent_facts), whichever transport carries them.
        args = ["--packed", "--xid-window-hours", f"{self.xid_window_hours:g}"]
        if host.simulate:
            args += ["--simulate", host.simulate]
        if self.burn is not None and self.burn.duration_s > 0:
            args += self.burn.to_argv()
        interconnect = self.interconnect_for(host)
        if interconnect != "off":  # the agent's default
            args += ["--interconnect", interconnect]
        level, timeout_s = self.dcgm_for(host)
        if level > 0:
            args += ["--dcgm-level", str(level)]
            if timeout_s is not None:
                args += ["--dcgm-timeout", repr(float(timeout_s))]
        if self.gpus:
            args += ["--gpus", ",".join(self.gpus)]
        if self.allow_busy:
            args.append("--allow-busy")
        if self.container_image is not None:
            args += ["--container-image", self.container_image]
        if deadline_s is not None:
            args += ["--deadline", f"{deadline_s:.3f}"]
        return args


# Of the time a host has left when its agent starts, this share (within bounds) is
# kept for the trip: the host's Python starting the agent, the facts coming home.
TRIP_SHARE = 0.1
TRIP_MIN_S = 0.5
TRIP_MAX_S = 30.0
SHORTEST_AGENT_DEADLINE_S = 0.1


# How long past a host's deadline its facts are still taken, judged as timed out
# (validator.remote.deadline): a run cut to end in time can still come in late.
OVERRUN_SHARE = 0.1
OVERRUN_MIN_S = 1.0
OVERRUN_MAX_S = 30.0


def overrun_s(deadline_s: float) -> float:
    """How long past ``deadline_s`` a transport still waits for the facts."""
    return min(OVERRUN_MAX_S, max(OVERRUN_MIN_S, OVERRUN_SHARE * deadline_s))


def agent_deadline(seconds_left: float) -> float:
    """The deadline the agent gets: the host's time left, less the trip there and back.

    The agent cuts its own burn-in to end within it (validator.node.collect), so its
    facts are home before the transport stops waiting.
    """
    trip = min(TRIP_MAX_S, max(TRIP_MIN_S, TRIP_SHARE * seconds_left))
    return max(SHORTEST_AGENT_DEADLINE_S, seconds_left - trip)


def quoted(argv: Sequence[str]) -> str:
    """A remote command line built from quoted parts, never pasted strings."""
    return " ".join(shlex.quote(part) for part in argv)


@dataclass(frozen=True)
class AgentOutcome:
    """What running the agent on one host gave: facts, or why not."""

    host: str
    facts: NodeFacts | None
    error: str | None = None  # one line: why no facts (unreachable, auth, agent failed, ...)
    stderr: str = ""  # the agent's stderr, kept for the report
    phase: Phase | str = ""  # where it stopped (""): connect, upload, run, parse
    elapsed_s: float = 0.0


# Told the results that have arrived since it was last called, in the caller's thread:
# one call for everything waiting, so a slow store commits many hosts at once.
Arrivals = Callable[[Sequence[NodeResult]], None]


class Progress(Protocol):
    """Told about each host's phase as it changes (the CLI draws it; tests record it)."""

    def phase(self, host: str, phase: Phase) -> None:
        """Host ``host`` entered ``phase``."""
        ...


@runtime_checkable
class WorstGpuSink(Protocol):
    """A progress that also shows each host's worst GPU while its burn runs (the live view)."""

    def worst_gpu(self, host: str, worst: WorstGpu) -> None:
        """Host ``host``'s burn: its worst GPU so far."""
        ...


def tell_worst(progress: Progress, host: str, worst: WorstGpu) -> None:
    """Tell ``progress`` a host's worst GPU so far, where it shows one (else nothing)."""
    if isinstance(progress, WorstGpuSink):
        progress.worst_gpu(host, worst)


class Transport(Protocol):
    """Runs the node agent on one host and brings its facts back.

    ``timeout_s`` is the host's deadline, from the call to its facts: every
    transport has the agent cut its burn-in to end before it, and stops waiting
    :func:`overrun_s` after it.
    """

    name: str

    def run_agent(
        self, host: HostSpec, request: AgentRequest, timeout_s: float, progress: Progress
    ) -> AgentOutcome:
        """Never raises for anything the host does: failures are outcomes."""
        ...


def transport_for(transport: Transport, host: HostSpec) -> Transport:
    """The transport that reaches ``host``: a per-host choice (PerHostTransport) resolved."""
    pick = getattr(transport, "pick", None)
    return cast(Transport, pick(host)) if callable(pick) else transport


def transport_name(transport: Transport, host: HostSpec) -> str:
    """The name of the transport that reaches ``host`` (without making it)."""
    name_for = getattr(transport, "name_for", None)
    return str(name_for(host)) if callable(name_for) else transport.name
