"""The host's own files and tools, parsed: /proc/cpuinfo, /proc/meminfo, ``df -P -k``.

Also ``systemctl show``, ``sysctl``, ``dpkg-query`` / ``rpm -q`` and ``ofed_info -s``.

Pure: text in, model values out; text that is not the tool's raises ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from validator.limits import TOOL_OUTPUT_BYTES
from validator.model import KernelSetting, MountSpace, ServiceState
from validator.node.parsers.base import ParseError


def _bounded(text: str, what: str) -> str:
    if len(text) > TOOL_OUTPUT_BYTES:
        raise ParseError(f"{what} is over {TOOL_OUTPUT_BYTES} bytes")
    return text


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says of the CPUs."""

    model: str  # the first "model name" ("" where the architecture prints none)
    sockets: int
    cores: int  # physical: distinct (physical id, core id); the threads where not said
    threads: int  # "processor" entries


def parse_cpuinfo(text: str) -> CpuInfo:
    """The CPUs of /proc/cpuinfo.

    Raises:
        ParseError: no ``processor`` entry.
    """
    threads = 0
    model = ""
    packages: set[str] = set()
    cores: set[tuple[str, str]] = set()
    package = ""
    for line in _bounded(text, "/proc/cpuinfo").splitlines():
        key, colon, value = line.partition(":")
        if not colon:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor":
            threads += 1
            package = ""
        elif key == "model name" and not model:
            model = " ".join(value.split())
        elif key == "physical id":
            package = value
            packages.add(value)
        elif key == "core id":
            cores.add((package, value))
    if threads == 0:
        raise ParseError("/proc/cpuinfo lists no 'processor'")
    return CpuInfo(model, max(1, len(packages)), len(cores) or threads, threads)


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo's ``Key: N kB`` lines, in KiB.

    Raises:
        ParseError: no MemTotal.
    """
    values: dict[str, int] = {}
    for line in _bounded(text, "/proc/meminfo").splitlines():
        match = re.fullmatch(r"(\w+(?:\(\w+\))?):\s+(\d+)(?:\s+kB)?\s*", line)
        if match:
            values[match.group(1)] = int(match.group(2))
    if "MemTotal" not in values:
        raise ParseError("/proc/meminfo has no MemTotal line")
    return values


def parse_df(text: str) -> tuple[MountSpace, ...]:
    """``df -P -k``: each file system's size and room, by mount point.

    A mount point may hold spaces: the fields before it are counted from the left.

    Raises:
        ParseError: no POSIX header.
    """
    lines = _bounded(text, "df output").splitlines()
    if not lines or not lines[0].startswith("Filesystem") or "Mounted on" not in lines[0]:
        raise ParseError("not `df -P -k` output: no 'Filesystem ... Mounted on' header")
    mounts = []
    for line in lines[1:]:
        match = re.fullmatch(r"(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+%|-)\s+(/.*)", line.rstrip())
        if match:
            source, size, _used, avail, _share, path = match.groups()
            mounts.append(MountSpace(path, source, int(size), int(avail)))
    return tuple(mounts)


def parse_systemctl_show(text: str) -> tuple[ServiceState, ...]:
    """``systemctl show -p Id -p LoadState -p ActiveState UNIT...``: a block a unit.

    Raises:
        ParseError: no ``Id=`` in the output.
    """
    states = []
    for block in re.split(r"\n\s*\n", _bounded(text, "systemctl output").strip()):
        values = dict(line.partition("=")[::2] for line in block.splitlines() if "=" in line)
        unit = values.get("Id", "").strip()
        if not unit:
            continue
        states.append(
            ServiceState(
                unit.removesuffix(".service"),
                values.get("LoadState", "").strip(),
                values.get("ActiveState", "").strip(),
            )
        )
    if not states:
        raise ParseError("not `systemctl show` output: no 'Id=' line")
    return tuple(states)


def parse_sysctl(text: str) -> tuple[KernelSetting, ...]:
    """``sysctl NAME...``'s ``name = value`` lines (its error lines are left out)."""
    settings = []
    for line in _bounded(text, "sysctl output").splitlines():
        name, equals, value = line.partition(" = ")
        if equals and re.fullmatch(r"[\w.\-/]+", name.strip()):
            settings.append(KernelSetting(name.strip(), value.strip()))
    return tuple(settings)


# dpkg's ${db:Status-Abbrev}: the wanted action, the state, an error flag (if any).
_DPKG_STATUS = re.compile(r"[uihrp][ncHUFWti][R]?")


def parse_package_versions(text: str) -> dict[str, str]:
    """Installed packages and their versions, from dpkg-query or rpm -q (host_probe's).

    dpkg's packages that are known but not installed (no version, or a state other than
    installed: ``rc``, ``un``) and the tools' "not installed" lines are left out; a held
    package (``hi``) is installed.
    """
    found: dict[str, str] = {}
    for line in _bounded(text, "package listing").splitlines():
        words = line.split()
        if len(words) < 2 or line.startswith(("dpkg-query:", "package ")):
            continue
        if len(words) == 2 and _DPKG_STATUS.fullmatch(words[1]):
            continue  # "rdma-core  un": known to dpkg, no version, never installed
        if len(words) >= 3 and words[2][1:2] != "i":
            # dpkg's Status-Abbrev: the wanted action, then the state; installed is "?i"
            # ("ii", or "hi" held as gpuready holds what it pins), never "rc" or "un".
            continue
        found[words[0].partition(":")[0]] = words[1]
    return found


def parse_ofed_info(text: str) -> str:
    """``ofed_info -s``: "MLNX_OFED_LINUX-23.10-1.1.9.0:" gives "23.10-1.1.9.0".

    Raises:
        ParseError: no OFED version line.
    """
    match = re.search(
        r"(?:MLNX_OFED_LINUX|OFED-internal|OFED)-([\w.\-]+?):?\s*$",
        _bounded(text, "ofed_info output").strip(),
    )
    if match is None:
        raise ParseError("not `ofed_info -s` output: no '...OFED...-VERSION:' line")
    return match.group(1)


__all__ = [
    "CpuInfo",
    "parse_cpuinfo",
    "parse_df",
    "parse_meminfo",
    "parse_ofed_info",
    "parse_package_versions",
    "parse_sysctl",
    "parse_systemctl_show",
]
