"""The host around the GPUs: CPUs, memory, swap, NVMe, mounts, services, versions.

Also kernel settings and the versions of the rest of the stack.

Each part is a reading or why there is none (:data:`~validator.model.Measured`); a
node's :class:`HostFacts` is None only where the host was not collected at all (an
older agent's facts), and then no host finding is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from validator.model.measured import NOT_MEASURED, Measured

# The systemd units the node agent reads (validator.node.host_probe) and a policy may
# require (validator.judge.host_policy): one list for both rooms. The DCGM host
# engine's unit is nvidia-dcgm from DCGM 3.
HOST_SERVICES = ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm")
# The kernel settings GPU and RDMA tuning guides name, which the agent reads and a
# policy may set.
HOST_SYSCTL_NAMES = (
    "vm.swappiness",
    "vm.zone_reclaim_mode",
    "vm.overcommit_memory",
    "vm.max_map_count",
    "kernel.numa_balancing",
    "kernel.nmi_watchdog",
    "net.core.rmem_max",
    "net.core.wmem_max",
)


@dataclass(frozen=True)
class SmartHealth:
    """One NVMe drive's SMART health, as smartctl reads it (None: not in its output)."""

    passed: Optional[bool] = None  # smart_status.passed: the drive's own verdict
    critical_warning: Optional[int] = None  # the NVMe critical warning byte
    percentage_used: Optional[int] = None  # rated endurance used, may pass 100
    media_errors: Optional[int] = None  # media and data integrity errors
    available_spare: Optional[int] = None  # percent
    available_spare_threshold: Optional[int] = None
    temperature_c: Optional[int] = None
    power_on_hours: Optional[int] = None
    model: str = ""
    serial: str = ""
    device: str = ""  # as smartctl names it, /dev/nvme0


@dataclass(frozen=True)
class NvmeDrive:
    """One NVMe controller (``/sys/class/nvme/nvmeN``) and its health."""

    name: str  # nvme0
    model: str = ""
    serial: str = ""
    smart: Measured[SmartHealth] = NOT_MEASURED


@dataclass(frozen=True)
class MountSpace:
    """One mounted file system and its room (``df -P -k``)."""

    path: str
    source: str  # the device or export
    size_kib: int
    avail_kib: int


@dataclass(frozen=True)
class KernelSetting:
    """One sysctl value (``sysctl -e NAME...``)."""

    name: str  # vm.swappiness
    value: str


@dataclass(frozen=True)
class ServiceState:
    """One systemd unit's state (``systemctl show``)."""

    name: str  # nvidia-persistenced
    load: str  # loaded | not-found | masked
    active: str  # active | inactive | failed | activating ...


@dataclass(frozen=True)
class StackVersion:
    """The installed version of one part of the stack; "" where it is not installed."""

    component: str  # nccl | dcgm | container_toolkit | rdma_core | mofed
    package: str  # the package (or tool) it was read from
    version: str


@dataclass(frozen=True)
class HostFacts:
    """The host around the GPUs."""

    cpu_model: Measured[str] = NOT_MEASURED
    cpu_sockets: Measured[int] = NOT_MEASURED
    cpu_cores: Measured[int] = NOT_MEASURED  # physical cores, all sockets
    cpu_threads: Measured[int] = NOT_MEASURED  # logical CPUs
    memory_kib: Measured[int] = NOT_MEASURED  # MemTotal
    swap_kib: Measured[int] = NOT_MEASURED  # SwapTotal
    nvme: Measured[Tuple[NvmeDrive, ...]] = NOT_MEASURED
    mounts: Measured[Tuple[MountSpace, ...]] = NOT_MEASURED
    cmdline: Measured[str] = NOT_MEASURED  # /proc/cmdline
    sysctl: Measured[Tuple[KernelSetting, ...]] = NOT_MEASURED
    services: Measured[Tuple[ServiceState, ...]] = NOT_MEASURED
    versions: Measured[Tuple[StackVersion, ...]] = NOT_MEASURED
