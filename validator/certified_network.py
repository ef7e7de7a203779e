"""What a certificate keeps of the node's HCAs: each port's state, rate, firmware and counters.

An optional certificate field (``network``): a certificate issued without it (older, or
a node whose HCAs were not read) has none, and drift then compares nothing for the
network (validator.drift.network_drift).
"""

from __future__ import annotations

from dataclasses import dataclass

from validator.fields import Document, Field
from validator.model import IB_ERROR_COUNTERS, Measured, NetworkFacts, Unavailable


@dataclass(frozen=True)
class CertifiedPort:
    """One HCA port as certified."""

    device: str
    port: int
    state: str | None  # ACTIVE
    rate_gbps: float | None
    fw_ver: str | None
    symbol_error: int | None = None
    link_downed: int | None = None
    port_rcv_errors: int | None = None
    excessive_buffer_overrun_errors: int | None = None
    link_error_recovery: int | None = None

    @property
    def name(self) -> str:
        """How findings name the port: ``mlx5_0 port 1``."""
        return f"{self.device} port {self.port}"

    def counter(self, name: str) -> int | None:
        """The certified count of one error counter (None: not read then)."""
        value = getattr(self, name, None)
        return value if isinstance(value, int) else None


def _value(measured: Measured[object]) -> object:
    return None if isinstance(measured, Unavailable) else measured


def certified_ports(network: NetworkFacts | None) -> tuple[CertifiedPort, ...] | None:
    """The ports a certificate keeps; None where the HCAs were not read."""
    if network is None or isinstance(network.hcas, Unavailable):
        return None
    ports: list[CertifiedPort] = []
    for hca in network.hcas:
        fw = hca.fw_ver if isinstance(hca.fw_ver, str) else None
        for port in hca.ports:
            # After the burn where it ran: the counts the node left certification with.
            after = port.counters_after
            source = port.counters if isinstance(after, Unavailable) else after
            counts = (
                {}
                if isinstance(source, Unavailable)
                else {c.name: c.value for c in source if isinstance(c.value, int)}
            )
            ports.append(
                CertifiedPort(
                    device=port.device,
                    port=port.port,
                    state=port.state if isinstance(port.state, str) else None,
                    rate_gbps=port.rate_gbps if isinstance(port.rate_gbps, float) else None,
                    fw_ver=fw,
                    **{name: counts.get(name) for name in IB_ERROR_COUNTERS},
                )
            )
    return tuple(ports)


def _count(name: str) -> Field:
    return Field(name, int, minimum=0, nullable=True)


PORT_FIELDS = Document(
    (
        Field("device", str, non_empty=True, required=True),
        Field("port", int, minimum=0, required=True),
        Field("state", str, nullable=True, required=True),
        Field("rate_gbps", float, minimum=0.0, convert=float, nullable=True, required=True),
        Field("fw_ver", str, nullable=True, required=True),
        *(_count(name) for name in IB_ERROR_COUNTERS),
    ),
    noun="field",
    wanted="a JSON object",
)

# The certificate's field: absent from a certificate without it.
NETWORK_FIELD = Field(
    "network",
    list,
    wanted="a list of HCA ports",
    nullable=True,
    item=Field("port", dict, document=PORT_FIELDS),
    convert=lambda items: tuple(CertifiedPort(**each) for each in items),
)

__all__ = ["NETWORK_FIELD", "CertifiedPort", "certified_ports"]
