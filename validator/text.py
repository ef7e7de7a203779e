"""Text as one line: what every error message, NHC line and Slurm reason is made of.

Standard library only: the node agent ships with this module.
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
ELLIPSIS = "..."


def one_line(text: object, limit: int | None = None) -> str:
    """``text`` (anything ``str`` can show) with every run of white space folded to one space.

    Args:
        text: the text, or an exception or other object whose ``str`` is the text.
        limit: the longest result; a longer line is cut and ends in ``...``.

    Returns:
        The line; the object's type name when it has no text at all (a bare exception).
    """
    line = " ".join(str(text).split())
    if not line and isinstance(text, BaseException):
        line = type(text).__name__
    if limit is not None and len(line) > limit:
        return line[: max(0, limit - len(ELLIPSIS))] + ELLIPSIS
    return line


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour and cursor sequences (as Ansible prints them)."""
    return ANSI.sub("", text)


def ansible_error(output: str, limit: int | None = None) -> str:
    """The first error ansible-playbook printed (``ERROR!`` before 2.19, ``[ERROR]:`` since).

    Returns:
        That error as one line (at most ``limit`` characters); "" when it printed none.
    """
    for raw in strip_ansi(output).splitlines():
        line = raw.strip()
        for prefix in ("ERROR!", "[ERROR]:"):
            if line.startswith(prefix):
                return one_line(line[len(prefix) :], limit)
    return ""


def bus_key(bus_id: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) from "0000:c1:00" or "00000000:C1:00.0"; None if unparsable.

    The kernel log names a GPU without its function number, NVML with a longer domain:
    compared as numbers, the two spellings of one device match.
    """
    parts = bus_id.strip().split(":")
    if len(parts) != 3:  # domain:bus:device
        return None
    domain, bus, device = parts
    try:
        return int(domain, 16), int(bus, 16), int(device.split(".")[0], 16)
    except ValueError:
        return None


__all__ = ["ANSI", "ansible_error", "bus_key", "one_line", "strip_ansi"]


def size_words(size_bytes: int) -> str:
    """A message or buffer size in binary units as people write them: 4 GiB, 1.5 GiB, 512 MiB."""
    value = float(size_bytes)
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    unit = 0
    while abs(value) >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    # Two decimals at most, trailing zeros dropped: never 1e+03 for 1000 bytes.
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{text} {units[unit]}"
