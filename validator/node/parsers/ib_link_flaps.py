"""Network links going down and up in the kernel log: mlx5's ``Link down`` / ``Link up``.

mlx5_core prints, for each of its network interfaces (an Ethernet/RoCE port or an IPoIB
interface)::

    [32710.060490] mlx5_core 0000:01:00.0 enp1s0f0: Link up
    [40211.113302] mlx5_core 0000:01:00.0 enp1s0f0: Link down

A link that goes down after it came up is a flap: a marginal cable or transceiver, or
the switch port. Counted per interface; the window is the caller's (the lines given).
"""

from __future__ import annotations

import re

from validator.limits import KERNEL_LOG_TAIL_BYTES
from validator.model import FLAP_LINE_CHARS, FLAP_LINES, LinkFlap
from validator.node.parsers.base import ParseError

# "mlx5_core 0000:01:00.0 enp1s0f0: Link down" (dmesg, journalctl -k, with any prefix).
_LINK = re.compile(
    r"\bmlx[45]_core (?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) "
    r"(?P<netdev>[A-Za-z0-9_.@-]{1,32}): Link (?P<way>up|down)\b"
)


def parse_link_flaps(text: str) -> tuple[LinkFlap, ...]:
    """Each interface mlx5 reported going down or up, with its counts; in first-seen order.

    A ``Link down`` before the interface's first ``Link up`` is not counted: the driver
    prints one as it brings the port up at boot.

    Raises:
        ParseError: text over the kernel log's bound.
    """
    if len(text) > KERNEL_LOG_TAIL_BYTES:
        raise ParseError(f"kernel log: over {KERNEL_LOG_TAIL_BYTES} characters")
    pci: dict[str, str] = {}
    downs: dict[str, int] = {}
    ups: dict[str, int] = {}
    lines: dict[str, list[str]] = {}
    for match in _LINK.finditer(text):
        netdev = match.group("netdev")
        pci.setdefault(netdev, match.group("pci").lower())
        kept = lines.setdefault(netdev, [])
        kept.append(_line_of(text, match.start(), match.end()))
        del kept[:-FLAP_LINES]  # the newest are the evidence
        if match.group("way") == "up":
            ups[netdev] = ups.get(netdev, 0) + 1
        elif netdev in ups:  # a down before its first up is the driver bringing it up
            downs[netdev] = downs.get(netdev, 0) + 1
    return tuple(
        LinkFlap(
            interface=name,
            pci_address=address,
            downs=downs.get(name, 0),
            ups=ups.get(name, 0),
            lines=tuple(lines[name]),
        )
        for name, address in pci.items()
    )


def _line_of(text: str, start: int, end: int) -> str:
    """The log line around a match (its timestamp and prefix), at most FLAP_LINE_CHARS.

    A longer line keeps the match whole (it is far shorter than the bound).
    """
    floor = max(0, end - FLAP_LINE_CHARS)
    newline = text.rfind("\n", floor, start)
    first = newline + 1 if newline >= 0 else floor
    stop = first + FLAP_LINE_CHARS
    newline = text.find("\n", end, stop)
    return text[first : newline if newline >= 0 else stop].rstrip("\r")
