"""The values of ``/sys/class/infiniband``: port state, physical state, rate, counters.

The kernel writes each as one line: ``4: ACTIVE``, ``5: LinkUp``, ``400 Gb/sec (4X NDR)``,
``InfiniBand``, ``0xffff``, a decimal counter. Also the bundle's record of the tree
(``infiniband-sysfs.txt``): one ``path<TAB>value`` line a file.
"""

from __future__ import annotations

import re

from validator.limits import LINE_BYTES
from validator.node.parsers.base import ParseError

# /sys/class/infiniband/<dev>/ports/<n>/state and phys_state: "<number>: <name>".
_NUMBERED = re.compile(r"^\s*(\d+)\s*:\s*([A-Za-z_ ]+?)\s*$")
# ports/<n>/rate: "400 Gb/sec (4X NDR)", "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)".
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec\b")
# The most digits a 64-bit counter has.
_COUNTER_DIGITS = 20
ROOT = "/sys/class/infiniband"


def _line(text: str, what: str) -> str:
    value = text.strip()
    if not value or len(value) > 200 or "\n" in value:
        raise ParseError(f"{what}: expected one short line, got {value[:60]!r}")
    return value


def parse_port_state(text: str) -> str:
    """``4: ACTIVE`` as ``ACTIVE`` (the logical state, upper case as the kernel writes it)."""
    match = _NUMBERED.match(_line(text, "port state"))
    if match is None:
        raise ParseError(f"port state: expected '<n>: <STATE>', got {text.strip()[:60]!r}")
    return match.group(2).upper()


def parse_phys_state(text: str) -> str:
    """``5: LinkUp`` as ``LinkUp``; ``2: Polling`` as ``Polling``."""
    match = _NUMBERED.match(_line(text, "physical state"))
    if match is None:
        raise ParseError(f"physical state: expected '<n>: <Name>', got {text.strip()[:60]!r}")
    return match.group(2)


def parse_rate(text: str) -> float:
    """``400 Gb/sec (4X NDR)`` as 400.0 Gb/s."""
    match = _RATE.match(_line(text, "port rate"))
    if match is None:
        raise ParseError(f"port rate: expected '<n> Gb/sec (...)', got {text.strip()[:60]!r}")
    return float(match.group(1))


def parse_counter(text: str) -> int:
    """A port counter's decimal value."""
    value = _line(text, "port counter")
    if not value.isdigit() or len(value) > _COUNTER_DIGITS:
        raise ParseError(f"port counter: expected a whole number, got {value[:40]!r}")
    return int(value)


def parse_word(text: str, what: str) -> str:
    """A one-word value (link layer, firmware version, PSID, GUID, PKey), checked."""
    value = _line(text, what)
    if any(ch.isspace() for ch in value) and what != "link layer":
        raise ParseError(f"{what}: expected one word, got {value[:60]!r}")
    return value


def parse_tree(text: str) -> dict[str, str]:
    """A bundle's ``infiniband-sysfs.txt``: ``{path: value}`` for each ``path<TAB>value`` line.

    Every path lies under ``/sys/class/infiniband/``; an empty file records a host
    with no RDMA device.

    Raises:
        ParseError: a line without a tab, a path outside the tree, or one with ``..``.
    """
    files: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(line) > LINE_BYTES:
            raise ParseError(f"line {number} is longer than {LINE_BYTES} characters")
        path, tab, value = line.partition("\t")
        if not tab:
            raise ParseError(f"line {number}: expected 'path<TAB>value'")
        if not path.startswith(ROOT + "/") or "/../" in path + "/" or "//" in path:
            raise ParseError(f"line {number}: {path[:80]!r} is not under {ROOT}/")
        files[path] = value
    return files

