"""Host facts that are not about the GPU driver: OS, kernel, PCI devices.

Each is a path (or command) plus a pure parser, like every other fact.
"""

from __future__ import annotations

import shlex

from validator.model import Measured, Reason, Unavailable

OS_RELEASE = "/etc/os-release"
KERNEL_RELEASE = "/proc/sys/kernel/osrelease"
PCI_DEVICES = "/sys/bus/pci/devices/*"

NVIDIA_VENDOR = 0x10DE
# PCI base class 0x03 (display): 0x0300 VGA, 0x0302 3D controller (datacenter GPUs).
GPU_CLASSES = (0x0300, 0x0302)
# NVSwitches enumerate as bridges of class 0x0680 ("other bridge").
NVSWITCH_CLASS = 0x0680


def parse_os_release(text: str) -> Measured[str]:
    """The PRETTY_NAME (else NAME VERSION_ID) from /etc/os-release text."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or not key.strip() or key.strip().startswith("#"):
            continue
        try:
            parts = shlex.split(raw)
        except ValueError:
            continue
        values[key.strip()] = parts[0] if parts else ""
    if values.get("PRETTY_NAME"):
        return values["PRETTY_NAME"]
    name = " ".join(v for v in (values.get("NAME"), values.get("VERSION_ID")) if v)
    return name or Unavailable(Reason.ERROR, "/etc/os-release names no OS")


def classify_pci_device(vendor_text: str, class_text: str) -> str | None:
    """'gpu', 'nvswitch' or None for one device's sysfs vendor and class files."""
    try:
        vendor = int(vendor_text.strip(), 16)
        device_class = int(class_text.strip(), 16) >> 8
    except ValueError:
        return None
    if vendor != NVIDIA_VENDOR:
        return None
    if device_class in GPU_CLASSES:
        return "gpu"
    if device_class == NVSWITCH_CLASS:
        return "nvswitch"
    return None


def parse_lspci_numeric(text: str) -> tuple[int, int]:
    """NVIDIA GPUs and NVSwitches in ``lspci -n`` output.

    Lines look like ``0000:18:00.0 0302: 10de:2330 (rev a1)``; the domain is
    optional.
    """
    gpus = switches = 0
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[1].endswith(":"):
            continue
        vendor, _, _device = fields[2].partition(":")
        kind = classify_pci_device(vendor, fields[1].rstrip(":") + "00")
        gpus += kind == "gpu"
        switches += kind == "nvswitch"
    return gpus, switches
