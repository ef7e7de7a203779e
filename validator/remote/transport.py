"""One small interface over every way of reaching a host: local, ssh, ansible.

A host is :class:`validator.model.HostSpec` and a transport's name
:class:`validator.model.TransportName`: plain data the inventory builds too.
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from validator.model import DEFAULT_XID_WINDOW_HOURS, HostSpec, NodeFacts
from validator.node.burnin.config import BurnConfig


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

    @property
    def burn_s(self) -> float:
        """The burn's length; 0 for none."""
        return self.burn.duration_s if self.burn is not None else 0.0

    def arguments(self, host: HostSpec) -> list[str]:
        """The agent's command-line arguments for this host."""
        args = ["--xid-window-hours", f"{self.xid_window_hours:g}"]
        if host.simulate:
            args += ["--simulate", host.simulate]
        if self.burn is not None and self.burn.duration_s > 0:
            args += self.burn.to_argv()
        return args


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


class Progress(Protocol):
    """Told about each host's phase as it changes (the CLI draws it; tests record it)."""

    def phase(self, host: str, phase: Phase) -> None:
        """Host ``host`` entered ``phase``."""
        ...


class Transport(Protocol):
    """Runs the node agent on one host and brings its facts back."""

    name: str

    def run_agent(
        self, host: HostSpec, request: AgentRequest, timeout_s: float, progress: Progress
    ) -> AgentOutcome:
        """Never raises for anything the host does: failures are outcomes."""
        ...
