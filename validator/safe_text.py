"""Text safe to show: what every report, error message, NHC line and Slurm reason is made of.

:func:`visible` is the one escaping of text that came from a node or a file, for every
renderer (terminal, history, drift, provision, Slurm, progress, errors, NHC, JUnit,
HTML); :func:`one_line` is the same text as one record on one line.

Standard library only: the node agent ships with this module.
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
ELLIPSIS = "..."

# What a terminal, a log reader or an XML parser would obey rather than show: C0
# controls bar tab and newline (ESC starts OSC 52 clipboard writes and OSC 8 links,
# CR rewrites a line), DEL, C1 controls (0x9b is a one-byte CSI), the bidi embeddings,
# overrides, isolates and marks (they reorder what is shown) and the Unicode line and
# paragraph separators (they end a line in some viewers, so forge records).
_HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
    "\u202a-\u202e\u2066-\u2069]"
)
_HIDDEN_OR_NEWLINE = re.compile(f"[\n{_HIDDEN.pattern[1:-1]}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, *, lines: bool = False) -> str:
    r"""``text`` with every character a terminal or viewer would obey shown as an escape.

    ESC reads ``\x1b``, CSI ``\x9b``, a right-to-left override ``\u202e``; printable
    text (any script) is kept as it is.

    Args:
        text: the text, or any object whose ``str`` is the text.
        lines: keep newlines (a block of several lines: an agent's stderr, a log
            excerpt); otherwise a newline is escaped too, so the result is one line.

    Returns:
        The text, safe to print, to write into XML, or to put in HTML text.
    """
    pattern = _HIDDEN if lines else _HIDDEN_OR_NEWLINE
    return pattern.sub(_escape, str(text))


def one_line(text: object, limit: int | None = None) -> str:
    """``text`` (anything ``str`` can show) as one record: escaped, white space folded.

    Runs of spaces, tabs and newlines become one space (a wrapped message reads as it
    was meant); every other control character is shown by :func:`visible`.

    Args:
        text: the text, or an exception or other object whose ``str`` is the text.
        limit: the longest result; a longer line is cut and ends in ``...``.

    Returns:
        The line; the object's type name when it has no text at all (a bare exception).
    """
    line = " ".join(visible(text, lines=True).split())
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


__all__ = ["ANSI", "ansible_error", "bus_key", "one_line", "strip_ansi", "visible"]


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
