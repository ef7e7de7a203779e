"""Each host through its own transport: ``gpuready_transport`` in the inventory, else the flag's.

An inventory may mix hosts reached in different ways (a workstation certified
``local``, the rack over ``ssh``, the hosts behind a bastion through ``ansible``).
:class:`PerHostTransport` reaches each host through the transport its
``gpuready_transport`` variable names, and the hosts without one through the
default (``--transport``, itself ``ssh`` by default). Each transport is made once,
when the first host needs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from validator.model import HostSpec, TransportName
from validator.remote.transport import AgentOutcome, AgentRequest, Progress, Transport

VARIABLE = "gpuready_transport"


def named_transport(host: HostSpec, default: TransportName) -> TransportName:
    """The transport the host's ``gpuready_transport`` names; ``default`` without one.

    The inventory has checked the value against the transports' names already.
    """
    value = host.vars.get(VARIABLE)
    if isinstance(value, str) and value.strip():
        return TransportName(value.strip())
    return default


class PerHostTransport:
    """Runs each host's agent through the transport its inventory variable names.

    Args:
        default: the transport of the hosts that name none.
        make: builds a transport by name (called at most once per name).
    """

    def __init__(self, default: TransportName, make: Callable[[TransportName], Transport]) -> None:
        self.default = TransportName(default)
        self.name = self.default.value
        self._make = make
        self._made: dict[TransportName, Transport] = {}
        self._lock = threading.Lock()

    def name_for(self, host: HostSpec) -> str:
        """The name of the transport that reaches this host."""
        return named_transport(host, self.default).value

    def pick(self, host: HostSpec) -> Transport:
        """The transport that reaches this host (made on first use)."""
        name = named_transport(host, self.default)
        with self._lock:
            if name not in self._made:
                self._made[name] = self._make(name)
            return self._made[name]

    def run_agent(
        self, host: HostSpec, request: AgentRequest, timeout_s: float, progress: Progress
    ) -> AgentOutcome:
        """Through the host's own transport."""
        return self.pick(host).run_agent(host, request, timeout_s, progress)

    def close(self) -> None:
        """Close every transport made that holds something (the ansible one's temp dir)."""
        with self._lock:
            made = list(self._made.values())
        for transport in made:
            close = getattr(transport, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> PerHostTransport:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = ["VARIABLE", "PerHostTransport", "named_transport"]
