"""``ibv_devinfo`` / ``ibv_devinfo -v`` (rdma-core): each HCA's firmware, PSID and ports.

Shape (one block an HCA, blank line between)::

    hca_id: mlx5_0
            transport:                      InfiniBand (0)
            fw_ver:                         28.39.2048
            node_guid:                      58a2:e103:002a:09b8
            vendor_part_id:                 4129
            board_id:                       MT_0000000838
            phys_port_cnt:                  1
                    port:   1
                            state:                  PORT_ACTIVE (4)
                            ...
                            link_layer:             InfiniBand

``-v`` adds device capabilities (flag lists, one a line, kept out) and, per port,
``phys_state: LINK_UP (5)``, ``active_width`` and ``active_speed``. ``No IB devices
found`` is no HCA.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from validator.limits import TOOL_OUTPUT_BYTES
from validator.node.parsers.base import ParseError

_HCA = re.compile(r"^hca_id:\s*(\S{1,64})\s*$")
_PORT = re.compile(r"^port:\s*(\d{1,3})\s*$")
_KEY = re.compile(r"^([a-z_][a-z_ ()]{0,40}):\s*(.*?)\s*$", re.IGNORECASE)
NO_DEVICE = "No IB devices found"


@dataclass
class DevinfoPort:
    """One port as ibv_devinfo prints it."""

    number: int
    state: str = ""  # PORT_ACTIVE | PORT_DOWN | PORT_INIT | PORT_ARMED
    phys_state: str = ""  # LINK_UP | POLLING | DISABLED (-v only)
    link_layer: str = ""


@dataclass
class DevinfoHca:
    """One HCA as ibv_devinfo prints it."""

    name: str
    fw_ver: str = ""
    board_id: str = ""
    node_guid: str = ""
    vendor_part_id: str = ""
    ports: list[DevinfoPort] = field(default_factory=list)


def _word(value: str) -> str:
    """``PORT_ACTIVE (4)`` as ``PORT_ACTIVE``."""
    return value.split(maxsplit=1)[0] if value.split() else ""


def _keep(hca: DevinfoHca, port: DevinfoPort | None, key: str, value: str) -> None:
    if port is not None:
        if key == "state":
            port.state = _word(value)
        elif key == "phys_state":
            port.phys_state = _word(value)
        elif key == "link_layer":
            port.link_layer = value
        return
    if key in ("fw_ver", "board_id", "node_guid", "vendor_part_id"):
        setattr(hca, key, value)


def parse_ibv_devinfo(text: str) -> list[DevinfoHca]:
    """Every HCA ibv_devinfo printed, with its ports; [] for "No IB devices found".

    Raises:
        ParseError: text over the bound, or text that is not ibv_devinfo's.
    """
    if len(text) > TOOL_OUTPUT_BYTES:
        raise ParseError(f"ibv_devinfo: output over {TOOL_OUTPUT_BYTES} characters")
    hcas: list[DevinfoHca] = []
    port: DevinfoPort | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith(NO_DEVICE) and not hcas:
            return []
        match = _HCA.match(line)
        if match is not None:
            hcas.append(DevinfoHca(match.group(1)))
            port = None
            continue
        if not hcas:
            raise ParseError(f"ibv_devinfo: expected 'hca_id: <name>' first, got {line[:60]!r}")
        number = _PORT.match(line)
        if number is not None:
            port = DevinfoPort(int(number.group(1)))
            hcas[-1].ports.append(port)
            continue
        pair = _KEY.match(line)
        if pair is None:
            continue  # a -v capability flag or GID line: not read
        _keep(hcas[-1], port, pair.group(1).strip(), pair.group(2))
    return hcas
