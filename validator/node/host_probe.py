"""The host around the GPUs, read through the System seam (live, capture, simulation).

Each part is one file or command and a pure parser
(:mod:`validator.node.parsers.host_proc`, :mod:`validator.node.parsers.smartctl`):
what cannot be read is an :class:`~validator.model.Unavailable` with the reason,
judged UNKNOWN, never a pass. A capture bundle without a part's file is
"not measured" (its bundle file is named).

The services, sysctl names and packages read are fixed lists (the agent knows no
policy): a policy may require only those (validator.judge.host_policy checks it).
"""

from __future__ import annotations

from typing import Callable, TypeVar

from validator.model import (
    HOST_SERVICES,
    HOST_SYSCTL_NAMES,
    HostFacts,
    Measured,
    NvmeDrive,
    Reason,
    SmartHealth,
    StackVersion,
    Unavailable,
)
from validator.node.parsers.host_proc import (
    parse_cpuinfo,
    parse_df,
    parse_meminfo,
    parse_ofed_info,
    parse_package_versions,
    parse_sysctl,
    parse_systemctl_show,
)
from validator.node.parsers.smartctl import parse_smartctl
from validator.node.system import NotRecordedError, System
from validator.node.system_facts import (
    checked_run,
    command_failure,
    parsed,
    read_file,
    read_parsed,
    run_parsed,
)

T = TypeVar("T")

CPUINFO = "/proc/cpuinfo"
MEMINFO = "/proc/meminfo"
CMDLINE = "/proc/cmdline"
NVME_ROOT = "/sys/class/nvme"
NVME_PATTERN = f"{NVME_ROOT}/nvme*"
DF = ("df", "-P", "-k")
SYSTEMCTL = (
    "systemctl",
    "show",
    "-p",
    "Id",
    "-p",
    "LoadState",
    "-p",
    "ActiveState",
    *(f"{unit}.service" for unit in HOST_SERVICES),
)
# The kernel settings GPU and RDMA tuning guides name; -e: an unknown one is no error.
SYSCTL = ("sysctl", "-e", *HOST_SYSCTL_NAMES)
# component -> the packages it is installed as (deb, rpm), as the roles install them.
PACKAGES: dict[str, tuple[str, ...]] = {
    "nccl": ("libnccl2", "libnccl"),
    "dcgm": ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager"),
    "container_toolkit": ("nvidia-container-toolkit",),
    "rdma_core": ("rdma-core",),
}
_ALL_PACKAGES = tuple(name for names in PACKAGES.values() for name in names)
DPKG_STACK = (
    "dpkg-query",
    "-W",
    "-f",
    "${Package} ${Version} ${db:Status-Abbrev}\\n",
    *_ALL_PACKAGES,
)
RPM_STACK = ("rpm", "-q", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\\n", *_ALL_PACKAGES)
OFED_INFO = ("ofed_info", "-s")
COMPONENTS = (*PACKAGES, "mofed")
SMARTCTL_TIMEOUT_S = 60.0


def smartctl_argv(name: str) -> tuple[str, ...]:
    """The smartctl health query of one controller (``nvme0``)."""
    return ("smartctl", "-H", "-A", "-j", f"/dev/{name}")


def probe_host(system: System) -> HostFacts:
    """The host's facts; never raises on what it finds."""
    cpu = read_parsed(system, CPUINFO, parse_cpuinfo)
    memory = read_parsed(system, MEMINFO, parse_meminfo)
    cmdline = read_file(system, CMDLINE)

    def of_cpu(get: Callable[..., T]) -> Measured[T]:
        return cpu if isinstance(cpu, Unavailable) else get(cpu)

    def of_memory(key: str) -> Measured[int]:
        if isinstance(memory, Unavailable):
            return memory
        return memory.get(key, Unavailable(Reason.NOT_SUPPORTED, f"{MEMINFO} has no {key}"))

    model = of_cpu(lambda c: c.model or Unavailable(Reason.NOT_SUPPORTED, "no CPU model name"))
    return HostFacts(
        cpu_model=model,
        cpu_sockets=of_cpu(lambda c: c.sockets),
        cpu_cores=of_cpu(lambda c: c.cores),
        cpu_threads=of_cpu(lambda c: c.threads),
        memory_kib=of_memory("MemTotal"),
        swap_kib=of_memory("SwapTotal"),
        nvme=nvme_drives(system),
        mounts=run_parsed(system, DF, parse_df, "df", any_rc=True),
        cmdline=cmdline if isinstance(cmdline, Unavailable) else " ".join(cmdline.split()),
        sysctl=run_parsed(system, SYSCTL, parse_sysctl, "sysctl", any_rc=True),
        services=run_parsed(system, SYSTEMCTL, parse_systemctl_show, "systemctl"),
        versions=stack_versions(system),
    )


def nvme_drives(system: System) -> Measured[tuple[NvmeDrive, ...]]:
    """Every NVMe controller under /sys/class/nvme, each with smartctl's health reading."""
    try:
        paths = system.glob(NVME_PATTERN)
    except NotRecordedError as exc:  # the bundle lacks the tree
        return Unavailable(Reason.NOT_MEASURED, str(exc))
    drives = []
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        model = read_file(system, f"{path}/model")
        serial = read_file(system, f"{path}/serial")
        drives.append(
            NvmeDrive(
                name=name,
                model=model.strip() if isinstance(model, str) else "",
                serial=serial.strip() if isinstance(serial, str) else "",
                smart=_smart(system, name),
            )
        )
    return tuple(drives)


def _smart(system: System, name: str) -> Measured[SmartHealth]:
    argv = smartctl_argv(name)
    try:
        result = system.run(argv, timeout_s=SMARTCTL_TIMEOUT_S)
    except NotRecordedError as exc:
        return Unavailable(Reason.NOT_MEASURED, str(exc))
    if result.rc in (124, 126, 127) and not result.stdout.strip():
        return command_failure(result, "smartctl")
    # A bit mask: bit 3 (the drive is failing) comes with a whole document.
    return parsed(parse_smartctl, result.stdout, f"smartctl /dev/{name}")


def stack_versions(system: System) -> Measured[tuple[StackVersion, ...]]:
    """NCCL, DCGM, the container toolkit and rdma-core from dpkg (else rpm), MOFED's too.

    A package not installed is "" (the check compares it with its pin); no package
    manager at all is "not measured".
    """
    listing = checked_run(system, DPKG_STACK, "dpkg-query", any_rc=True)
    if isinstance(listing, Unavailable):  # no dpkg (or none recorded): an rpm host's
        rpm = checked_run(system, RPM_STACK, "rpm", any_rc=True)
        if isinstance(rpm, Unavailable):
            return listing
        listing = rpm
    installed = parse_package_versions(listing.stdout)
    found = []
    for component, names in PACKAGES.items():
        package = next((name for name in names if name in installed), names[0])
        found.append(StackVersion(component, package, installed.get(package, "")))
    ofed_run = checked_run(system, OFED_INFO, "ofed_info")
    ofed = ofed_run if isinstance(ofed_run, Unavailable) else ofed_run.stdout
    if isinstance(ofed, str) and not ofed.strip():  # a bundle's record of no ofed_info
        ofed = Unavailable(Reason.NOT_SUPPORTED, "ofed_info not found")
    if not (isinstance(ofed, Unavailable) and ofed.reason is Reason.NOT_MEASURED):
        # No ofed_info: MOFED is not installed (rdma-core is the stack).
        mofed = "" if isinstance(ofed, Unavailable) else parsed(parse_ofed_info, ofed, "ofed")
        found.append(StackVersion("mofed", "ofed_info", mofed if isinstance(mofed, str) else ""))
    return tuple(found)


__all__ = [
    "COMPONENTS",
    "CPUINFO",
    "DF",
    "DPKG_STACK",
    "MEMINFO",
    "NVME_PATTERN",
    "OFED_INFO",
    "RPM_STACK",
    "SYSCTL",
    "SYSTEMCTL",
    "nvme_drives",
    "probe_host",
    "smartctl_argv",
    "stack_versions",
]
