"""Whether this machine has anything to certify: NVIDIA GPUs on its PCI bus, and a driver.

Read before anything is measured or recorded, so that a first run on a machine
without a GPU (a laptop, a login node, a CI box) gets the one line that matters
instead of a report of every tool around a GPU that is not there.

The bus is read from sysfs itself, not through NVML: a GPU is on the bus whether or
not a driver is loaded. Each ``/sys/bus/pci/devices/<address>`` entry is sysfs's own
link into ``/sys/devices``; it is followed only where it stays under the sysfs root,
and the ``vendor`` and ``class`` files themselves are opened without following a link
and read only as far as such a file goes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from validator.node.host import classify_pci_device

# Module attributes, read at each call: tests point them at a sysfs and a /proc of their own.
SYSFS_ROOT = "/sys"
PROC_ROOT = "/proc"
DEVICES = "bus/pci/devices"
DRIVER_VERSION = "driver/nvidia/version"  # under PROC_ROOT: present while nvidia.ko is loaded
# A machine has a few hundred PCI functions at most; a sysfs attribute, a few bytes.
MAX_DEVICES = 4096
ATTRIBUTE_BYTES = 64
NAMED_GPUS = 4  # the addresses a message names before "and N more"
# A PCI address as sysfs names it: domain:bus:device.function.
ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
# A driver other than NVIDIA's that holds the GPU, and what to do about it.
OTHER_DRIVERS = {
    "nouveau": "blacklist nouveau (gpuready provision does) and reboot",
    "vfio-pci": "it is passed through to a VM (vfio-pci): certify inside that VM",
}


@dataclass(frozen=True)
class BusGpu:
    """One NVIDIA display or 3D controller on the PCI bus."""

    address: str  # 0000:18:00.0
    driver: str | None  # the kernel driver bound to it ("nvidia", "nouveau"), None if none


def nvidia_gpus_on_bus(sysfs_root: str | None = None) -> tuple[BusGpu, ...] | None:
    """The NVIDIA GPUs sysfs lists on the PCI bus, by address; None when it cannot be read.

    Args:
        sysfs_root: where sysfs is mounted; :data:`SYSFS_ROOT` when None.
    """
    root = os.path.realpath(sysfs_root or SYSFS_ROOT)
    folder = os.path.join(root, DEVICES)
    try:
        with os.scandir(folder) as entries:
            names: list[str] = []
            for entry in entries:
                if len(names) >= MAX_DEVICES:
                    break
                names.append(entry.name)
    except OSError:
        return None
    found = []
    for name in sorted(names):
        device = os.path.join(folder, name)
        if not ADDRESS.fullmatch(name) or not _inside(device, root):
            continue
        vendor = _attribute(os.path.join(device, "vendor"))
        device_class = _attribute(os.path.join(device, "class"))
        if vendor is None or device_class is None:
            continue
        if classify_pci_device(vendor, device_class) == "gpu":
            found.append(BusGpu(name, _driver(device)))
    return tuple(found)


def driver_loaded(proc_root: str | None = None) -> bool:
    """Whether the NVIDIA kernel module is loaded (it makes /proc/driver/nvidia/version)."""
    return os.path.lexists(os.path.join(proc_root or PROC_ROOT, DRIVER_VERSION))


def first_run_problem(sysfs_root: str | None = None, proc_root: str | None = None) -> str | None:
    """Why this machine has nothing to certify, in one line naming the fix; None if it may.

    None too where the bus cannot be read (no sysfs in a container): the run then
    finds out what it can, as it always did.
    """
    gpus = nvidia_gpus_on_bus(sysfs_root)
    if gpus is None:
        return None
    if not gpus:
        return (
            "no NVIDIA GPU on this machine's PCI bus: nothing to certify (run gpuready on a "
            "GPU node, or try it here with --simulate healthy-8x-h100-sxm)"
        )
    if driver_loaded(proc_root):
        return None
    return no_driver_problem(gpus)


def no_driver_problem(gpus: tuple[BusGpu, ...]) -> str:
    """GPUs on the bus and no NVIDIA driver loaded: the cause and the fix."""
    named = ", ".join(gpu.address for gpu in gpus[:NAMED_GPUS])
    if len(gpus) > NAMED_GPUS:
        named += f" and {len(gpus) - NAMED_GPUS} more"
    count = f"{len(gpus)} NVIDIA GPU" + ("s" if len(gpus) > 1 else "")
    held = sorted({gpu.driver for gpu in gpus if gpu.driver in OTHER_DRIVERS})
    if held:
        return (
            f"{count} on the PCI bus ({named}) but held by {', '.join(held)}, not the NVIDIA "
            f"driver: {'; '.join(OTHER_DRIVERS[driver] for driver in held)}"
        )
    return (
        f"{count} on the PCI bus ({named}) but no NVIDIA driver is loaded: install it "
        "(gpuready provision) or load it (modprobe nvidia); see dmesg for why it did not load"
    )


def _inside(device: str, root: str) -> bool:
    """Whether a device entry (sysfs's own link) leads to a place under the sysfs root."""
    target = os.path.realpath(device)
    return target.startswith(root.rstrip("/") + "/") and os.path.isdir(target)


def _attribute(path: str) -> str | None:
    """A sysfs file's first bytes as text, never through a link; None where it cannot be read."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        data = os.read(fd, ATTRIBUTE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("ascii", "replace")


def _driver(device: str) -> str | None:
    """The kernel driver bound to a device: the name its ``driver`` link (sysfs's own) ends in."""
    try:
        return os.path.basename(os.readlink(os.path.join(device, "driver")))
    except OSError:
        return None
