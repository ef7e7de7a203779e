"""``ibstat`` (infiniband-diags): each CA, its firmware and each port's state and rate.

Shape (one block a CA; tabs or spaces)::

    CA 'mlx5_0'
            CA type: MT4129
            Number of ports: 1
            Firmware version: 28.39.1002
            ...
            Node GUID: 0x58a2e10300dae626
            Port 1:
                    State: Active
                    Physical state: LinkUp
                    Rate: 400
                    ...
                    Link layer: InfiniBand

A trailing ``ibpanic:`` line (a device that vanished while listed) ends the output:
the CAs before it are kept. Output that names no CA at all is no HCA when it is
empty, and nonsense otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from validator.limits import TOOL_OUTPUT_BYTES
from validator.node.parsers.base import ParseError

_CA = re.compile(r"^CA '([^']{1,64})'\s*$")
_PORT = re.compile(r"^Port (\d{1,3}):\s*$")
_KEY = re.compile(r"^([A-Za-z][A-Za-z ]{0,40}):\s*(.*?)\s*$")
# What ibstat prints for no device at all ("ibpanic: ... No IB devices found" and the like).
NO_DEVICE = re.compile(r"no (ib|infiniband) devices? found|couldn't find any", re.IGNORECASE)


@dataclass
class IbstatPort:
    """One port as ibstat prints it."""

    number: int
    state: str = ""  # Active | Down | Init | Armed
    phys_state: str = ""  # LinkUp | Polling | Disabled
    rate: float | None = None  # Gb/s
    link_layer: str = ""


@dataclass
class IbstatCa:
    """One CA (an HCA) as ibstat prints it."""

    name: str
    ca_type: str = ""
    firmware: str = ""
    node_guid: str = ""
    ports: list[IbstatPort] = field(default_factory=list)


def _rate(value: str) -> float:
    number = value.split(maxsplit=1)[0] if value.split() else ""
    try:
        return float(number)
    except ValueError:
        raise ParseError(f"ibstat: rate {value[:30]!r} is not a number") from None


def _port_value(port: IbstatPort, key: str, value: str) -> None:
    if key == "State":
        port.state = value
    elif key == "Physical state":
        port.phys_state = value
    elif key == "Rate":
        port.rate = _rate(value)
    elif key == "Link layer":
        port.link_layer = value


def _ca_value(ca: IbstatCa, key: str, value: str) -> None:
    if key == "CA type":
        ca.ca_type = value
    elif key == "Firmware version":
        ca.firmware = value
    elif key == "Node GUID":
        ca.node_guid = value


def parse_ibstat(text: str) -> list[IbstatCa]:
    """Every CA ibstat printed, with its ports.

    Raises:
        ParseError: text over the bound, or lines that are not ibstat's.
    """
    if len(text) > TOOL_OUTPUT_BYTES:
        raise ParseError(f"ibstat: output over {TOOL_OUTPUT_BYTES} characters")
    cas: list[IbstatCa] = []
    port: IbstatPort | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("ibpanic:") or line.startswith("ibwarn:"):
            if not cas and not NO_DEVICE.search(line):
                raise ParseError(f"ibstat failed: {line[:120]}")
            break
        match = _CA.match(line)
        if match is not None:
            cas.append(IbstatCa(match.group(1)))
            port = None
            continue
        if not cas:
            raise ParseError(f"ibstat: expected \"CA '<name>'\" first, got {line[:60]!r}")
        number = _PORT.match(line)
        if number is not None:
            port = IbstatPort(int(number.group(1)))
            cas[-1].ports.append(port)
            continue
        pair = _KEY.match(line)
        if pair is None:
            raise ParseError(f"ibstat: unexpected line {line[:60]!r}")
        if port is None:
            _ca_value(cas[-1], pair.group(1), pair.group(2))
        else:
            _port_value(port, pair.group(1), pair.group(2))
    return cas
