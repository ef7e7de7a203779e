"""Is a text a kernel log at all, and which host does it name? Line shapes, no I/O.

A ``dmesg.txt`` of NUL bytes, random bytes or prose holds no Xid line, and the Xid
checks would read it as a clean log. A kernel log is told by its lines' shapes, each
seen in real logs (``tests/fixtures/kernel-log``, each named in its ``SOURCES.md``):

* ``dmesg``: ``[ 6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, ...``
* ``dmesg -T``: ``[Sun Feb 23 16:24:18 2025] NVRM: ...``
* ``dmesg --time-format iso`` (with ``-x`` facility and level): ``kern  :warn  :
  2025-01-21T04:41:44,283302+00:00 NVRM: ...``
* ``journalctl -k`` (``short``, ``short-precise``) and ``/var/log/kern.log``:
  ``Dec  2 11:49:53 worker4 kernel: [  885.242168] NVRM: ...``
* ``journalctl -k -o short-iso`` and rsyslog's RFC 3339 stamps:
  ``2025-01-21T04:41:44+0000 worker4 kernel: ...``
* ``dmesg -t`` (no stamp): a driver's own prefix, ``NVRM: ...``,
  ``nvidia-nvswitch1: SXid ...``
* a message's continuation lines, indented under the line they continue.

A text whose lines mostly have none of these shapes is not a kernel log: its checks
cannot say "no Xid". Lines that name the host (journal and syslog shapes) give the
host name, so a log from another machine is told apart.
"""

from __future__ import annotations

import re

# The share of a text's lines that must be kernel-log lines. A real log may hold a
# stray line (a wrapped one, a line of a tool's own); garbage and prose hold none.
MIN_SHARE = 0.5

_MONTH_DAY = r"[A-Z][a-z]{2}\s+\d{1,2} \d{2}:\d{2}:\d{2}(?:\.\d+)?"
_ISO_STAMP = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[,.]\d+)?(?:[+-]\d{2}:?\d{2}|Z)?"
_HOST_KERNEL = r"(?P<host>[^\s:\[\]]+)\s+kernel(?:\[\d+\])?:"
# dmesg -x prints facility and level first ("kern  :warn  : "), dmesg -r the raw "<4>".
_PREFIX = r"^(?:\w+\s*:\s*\w+\s*:\s*|<\d+>)?"
_SHAPES = (
    re.compile(_PREFIX + r"\[\s*\d+\.\d+\]"),  # dmesg
    re.compile(_PREFIX + r"\[[A-Z][a-z]{2} " + _MONTH_DAY + r" \d{4}\]"),  # dmesg -T
    re.compile(_PREFIX + _ISO_STAMP + r"\s"),  # --time-format iso
    re.compile(r"^" + _MONTH_DAY + r"\s+" + _HOST_KERNEL),  # journalctl -k, kern.log
    re.compile(r"^" + _ISO_STAMP + r"\s+" + _HOST_KERNEL),  # short-iso, rsyslog RFC 3339
    re.compile(r"^(?:NVRM|nvidia-nvswitch\d*|nvidia-nvlink|nvidia(?:-\w+)?):\s"),  # dmesg -t
)
_WITH_HOST = (_SHAPES[3], _SHAPES[4])
# What journalctl prints around its lines, and its hints' indented further lines.
_NOTE = re.compile(r"^(?:--.*--|Hint:.*|No journal files were found\.?)$")


def not_a_kernel_log(text: str) -> str | None:
    """Why ``text`` is not a kernel log; None when it is one (or shows no line at all).

    Args:
        text: what dmesg, journalctl -k or a kern.log file held.

    Returns:
        None for a kernel log; otherwise one phrase saying what the text is instead
        ("3 lines, none shaped as a kernel log line: 'Hello world'"). A text with no
        line is left to the caller (an empty log is its own finding).
    """
    counted = shaped = 0
    first_odd = ""
    previous_shaped = False
    for line in text.splitlines():
        if not line.strip() or _NOTE.match(line.strip()):
            continue
        counted += 1
        # A continuation line is indented under a kernel line (dmesg's multi-line messages).
        is_shaped = any(shape.match(line) for shape in _SHAPES) or (
            previous_shaped and line[:1].isspace()
        )
        shaped += is_shaped
        previous_shaped = is_shaped
        if not is_shaped and not first_odd:
            first_odd = line.strip()
    if counted == 0 or shaped >= counted * MIN_SHARE:
        return None
    if "\x00" in text and not text.replace("\x00", "").strip():
        return f"{len(text)} NUL bytes"
    lines = f"{counted} line" + ("" if counted == 1 else "s")
    shown = "".join(ch if ch.isprintable() else "?" for ch in first_odd[:60])
    return f"{lines}, {shaped} of them shaped as kernel log lines: {shown!r}"


def log_hosts(text: str) -> set[str]:
    """The host names the log's journal and syslog lines carry (dmesg's carry none).

    Args:
        text: a kernel log.

    Returns:
        The names as printed; empty for a log whose lines name no host.
    """
    found: set[str] = set()
    for line in text.splitlines():
        for shape in _WITH_HOST:
            match = shape.match(line)
            if match:
                found.add(match.group("host"))
                break
    return found


__all__ = ["MIN_SHARE", "log_hosts", "not_a_kernel_log"]
