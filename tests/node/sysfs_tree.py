"""A sysfs and a /proc in a temporary folder, shaped as the kernel lays them out.

``/sys/bus/pci/devices/<address>`` is a link into ``/sys/devices/pci<domain>:<bus>/``,
each device folder holds ``vendor`` and ``class`` files as the kernel prints them
("0x10de\\n", "0x030200\\n"), and a bound device has a ``driver`` link to
``/sys/bus/pci/drivers/<name>``.
"""

from __future__ import annotations

import os
from pathlib import Path

# (address, vendor, class) of a host's own devices: a host bridge, virtio, an audio device.
HOST_DEVICES = (
    ("0000:00:00.0", "0x8086", "0x060000"),
    ("0000:00:03.0", "0x1af4", "0x020000"),
    ("0000:00:1f.3", "0x8086", "0x040300"),
)
H100 = ("0x10de", "0x030200")  # a 3D controller: datacenter GPUs
VGA = ("0x10de", "0x030000")  # a VGA controller: workstation GPUs
NVSWITCH = ("0x10de", "0x068000")
NVIDIA_AUDIO = ("0x10de", "0x040300")  # a GPU's HDMI audio function: not a GPU


def add_device(
    sysfs: Path, address: str, vendor: str, device_class: str, driver: str | None = None
) -> Path:
    """One PCI function: its folder under devices/, its link under bus/pci/devices/."""
    folder = sysfs / "devices" / f"pci{address[:7]}" / address
    folder.mkdir(parents=True)
    (folder / "vendor").write_text(f"{vendor}\n")
    (folder / "class").write_text(f"{device_class}\n")
    bus = sysfs / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    os.symlink(f"../../../devices/pci{address[:7]}/{address}", bus / address)
    if driver is not None:
        drivers = sysfs / "bus" / "pci" / "drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../../bus/pci/drivers/{driver}", folder / "driver")
    return folder


def make_sysfs(
    root: Path, gpus: dict[str, tuple[str, str]] | None = None, driver: str | None = None
) -> Path:
    """A sysfs with the host's own devices and ``gpus`` (address: (vendor, class))."""
    sysfs = root / "sys"
    for address, vendor, device_class in HOST_DEVICES:
        add_device(sysfs, address, vendor, device_class)
    for address, (vendor, device_class) in (gpus or {}).items():
        add_device(sysfs, address, vendor, device_class, driver)
    return sysfs


def make_proc(root: Path, *, nvidia_loaded: bool) -> Path:
    """A /proc whose driver/nvidia/version is there while the module is loaded."""
    proc = root / "proc"
    proc.mkdir()
    if nvidia_loaded:
        (proc / "driver" / "nvidia").mkdir(parents=True)
        (proc / "driver" / "nvidia" / "version").write_text(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release "
            "Build  (dvs-builder@U16-I3-B03-4-3)  Tue Mar 25 17:40:28 UTC 2025\n"
        )
    return proc
