"""The node's network cards (HCAs: InfiniBand and RoCE), their ports, counters and flaps.

Read from ``/sys/class/infiniband`` (else ``ibstat``), with ``ibv_devinfo`` as a
cross-check (validator.node.network_probe). A value that could not be read is an
:class:`~validator.model.Unavailable`, judged UNKNOWN, never a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from validator.model.measured import NOT_MEASURED, Measured

# The port error counters judged, as /sys/class/infiniband/<dev>/ports/<n>/counters names
# them (the IBA PortCounters): signal integrity, link retraining and drops.
IB_ERROR_COUNTERS: Tuple[str, ...] = (
    "symbol_error",
    "link_downed",
    "port_rcv_errors",
    "excessive_buffer_overrun_errors",
    "link_error_recovery",
)


@dataclass(frozen=True)
class PortCounter:
    """One error counter of a port: its name and count (since the driver loaded)."""

    name: str
    value: Measured[int] = NOT_MEASURED


@dataclass(frozen=True)
class HcaPort:
    """One port of an HCA, as sysfs (or ibstat) shows it."""

    device: str  # mlx5_0
    port: int  # 1
    state: Measured[str] = NOT_MEASURED  # ACTIVE | DOWN | INIT | ARMED (upper case)
    phys_state: Measured[str] = NOT_MEASURED  # LinkUp | Polling | Disabled | ...
    rate_gbps: Measured[float] = NOT_MEASURED  # 400.0
    rate_text: str = ""  # as read: "400 Gb/sec (4X NDR)"
    link_layer: Measured[str] = NOT_MEASURED  # InfiniBand | Ethernet
    pkey: Measured[str] = NOT_MEASURED  # pkeys/0, "0xffff"
    counters: Measured[Tuple[PortCounter, ...]] = NOT_MEASURED
    # The same counters read again after the burn-in; not measured where no burn ran.
    counters_after: Measured[Tuple[PortCounter, ...]] = NOT_MEASURED

    @property
    def name(self) -> str:
        """How findings name the port: ``mlx5_0 port 1``."""
        return f"{self.device} port {self.port}"


@dataclass(frozen=True)
class Hca:
    """One HCA (an RDMA device: ``mlx5_0``) and its ports."""

    device: str
    hca_type: Measured[str] = NOT_MEASURED  # MT4129 (ConnectX-7)
    fw_ver: Measured[str] = NOT_MEASURED  # 28.39.1002
    board_id: Measured[str] = NOT_MEASURED  # the PSID, MT_0000000838
    node_guid: Measured[str] = NOT_MEASURED
    ports: Tuple[HcaPort, ...] = ()
    netdevs: Tuple[str, ...] = ()  # its network interfaces (ibp26s0, enp27s0f0np0)


FLAP_LINES = 16
FLAP_LINE_CHARS = 300


@dataclass(frozen=True)
class LinkFlap:
    """A network interface's link going down in the kernel log within the window."""

    interface: str  # the netdev named by the line (enp1s0f0, ibp26s0)
    pci_address: str  # 0000:01:00.0
    downs: int  # "Link down" lines
    ups: int  # "Link up" lines
    # The kernel's own lines for it (its newest FLAP_LINES, each cut to FLAP_LINE_CHARS):
    # the evidence an RMA file quotes. () in an older agent's facts.
    lines: Tuple[str, ...] = ()


@dataclass(frozen=True)
class NetworkFacts:
    """Every HCA of the node; where they were read from, and how sources agreed.

    ``hcas`` is Unavailable when neither sysfs nor ibstat could be read (a capture
    without them: not measured). An empty tuple is a read that found no HCA.
    """

    source: str  # "sysfs", "ibstat", or what was tried
    hcas: Measured[Tuple[Hca, ...]] = NOT_MEASURED
    flaps: Measured[Tuple[LinkFlap, ...]] = NOT_MEASURED
    # Where ibstat or ibv_devinfo disagreed with sysfs (one sentence each).
    disagreements: Tuple[str, ...] = ()
