"""Parse ``/proc/driver/nvidia/version`` (the loaded kernel module's version)."""

from __future__ import annotations

import re

from validator.node.parsers.base import ParseError

# Proprietary: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 ..."
# Open:        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build"
# aarch64 has the same forms with "aarch64" for "x86_64".
_NVRM = re.compile(r"^NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)\b", re.M)


def parse_proc_driver_version(text: str) -> str:
    """The version of the loaded NVIDIA kernel module.

    Args:
        text: contents of /proc/driver/nvidia/version.

    Returns:
        The version, e.g. "550.90.07".

    Raises:
        ParseError: no "NVRM version: ... Kernel Module <version>" line.
    """
    match = _NVRM.search(text)
    if match is None:
        raise ParseError("/proc/driver/nvidia/version has no 'NVRM version: ... Kernel Module'")
    return match.group(1)
