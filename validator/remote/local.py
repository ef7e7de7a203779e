"""The local transport: this machine's facts, collected in-process (no agent shipped)."""

from __future__ import annotations

import queue
import time

from validator.error_tree import GpureadyError
from validator.model import HostSpec
from validator.node.agent import source_for
from validator.node.burnin.worst_gpu import every
from validator.node.collect import CollectRequest, collect_in_background
from validator.remote.transport import (
    AgentOutcome,
    AgentRequest,
    Phase,
    Progress,
    overrun_s,
    tell_worst,
)


class LocalTransport:
    """Runs the collector for the machine this process runs on (or the host's scenario).

    The deadline binds as on a remote host: the collector cuts its burn-in to end
    within ``timeout_s`` (validator.node.collect.burn_within), measures the interconnect
    and runs DCGM in what the burn leaves, and runs on a daemon thread this transport
    stops waiting for soon after the deadline (``overrun_s``), so a wedged collector
    holds neither the fan-out nor the process.
    """

    name = "local"

    def run_agent(
        self, host: HostSpec, request: AgentRequest, timeout_s: float, progress: Progress
    ) -> AgentOutcome:
        """Collect in-process; a GpureadyError becomes the outcome's error, never an exception.

        Raises:
            Exception: the collector's own bug, as it raised it (the fan-out reports it).
        """
        started = time.monotonic()
        until = started + timeout_s
        progress.phase(host.name, Phase.RUN)
        dcgm_level, dcgm_timeout_s = request.dcgm_for(host)
        asked = CollectRequest(
            window_hours=request.xid_window_hours,
            burn=request.burn,
            dcgm_level=dcgm_level,
            dcgm_timeout_s=dcgm_timeout_s,
            interconnect=request.interconnect_for(host),
            gpus=request.gpus,
            allow_busy=request.allow_busy,
            container_image=request.container_image,
        )
        # The collector's own burn progress, in-process: the live view's worst GPU.
        sink = every(lambda worst: tell_worst(progress, host.name, worst), seconds=1.0)
        arrived = collect_in_background(source_for(host.simulate), asked, until, sink)
        try:
            got = arrived.get(timeout=max(0.0, until + overrun_s(timeout_s) - time.monotonic()))
        except queue.Empty:
            return self._failed(
                host,
                f"no facts within the {timeout_s:g} s deadline (the collector did not return)",
                started,
                progress,
            )
        if isinstance(got, GpureadyError):
            return self._failed(host, " ".join(str(got).split()), started, progress)
        if isinstance(got, BaseException):
            raise got
        progress.phase(host.name, Phase.DONE)
        return AgentOutcome(
            host=host.name, facts=got, phase=Phase.DONE, elapsed_s=time.monotonic() - started
        )

    @staticmethod
    def _failed(host: HostSpec, error: str, started: float, progress: Progress) -> AgentOutcome:
        progress.phase(host.name, Phase.FAILED)
        return AgentOutcome(
            host=host.name,
            facts=None,
            error=error,
            phase=Phase.RUN,
            elapsed_s=time.monotonic() - started,
        )


__all__ = ["LocalTransport"]
