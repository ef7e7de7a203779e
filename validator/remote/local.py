"""The local transport: this machine's facts, collected in-process (no agent shipped)."""

from __future__ import annotations

import time

from validator.errors import GpureadyError
from validator.model import HostSpec
from validator.node.sources import collect_live, collect_simulated
from validator.remote.transport import AgentOutcome, AgentRequest, Phase, Progress


class LocalTransport:
    """Runs the collector for the machine this process runs on (or the host's scenario).

    ``timeout_s`` is not enforced: the collector runs in this thread, and its own
    commands and the burn-in carry their own limits.
    """

    name = "local"

    def run_agent(
        self, host: HostSpec, request: AgentRequest, timeout_s: float, progress: Progress
    ) -> AgentOutcome:
        """Collect in-process; a GpureadyError becomes the outcome's error, never an exception."""
        del timeout_s  # see the class docstring
        started = time.monotonic()
        progress.phase(host.name, Phase.RUN)
        try:
            burn = request.burn
            if host.simulate:
                facts = collect_simulated(host.simulate, request.xid_window_hours, burn)
            else:
                facts = collect_live(request.xid_window_hours, burn=burn)
        except GpureadyError as exc:
            progress.phase(host.name, Phase.FAILED)
            return AgentOutcome(
                host=host.name,
                facts=None,
                error=" ".join(str(exc).split()),
                phase=Phase.RUN,
                elapsed_s=time.monotonic() - started,
            )
        progress.phase(host.name, Phase.DONE)
        return AgentOutcome(
            host=host.name, facts=facts, phase=Phase.DONE, elapsed_s=time.monotonic() - started
        )


__all__ = ["LocalTransport"]
