"""Collect GPUDirect RDMA readiness facts through the System seam (live, capture, simulation).

Read: ``/proc/modules`` (nvidia_peermem, ib_core; ``/sys/module/nvidia_peermem`` where
the list cannot be read), ``/sys/class/infiniband/*``, ``/proc/driver/nvidia/version``
(the open kernel module names itself there), ``systemd-detect-virt --vm`` (else the
``hypervisor`` CPU flag), ``nvidia-smi topo -m``, ``lspci -vvv``, and the IOMMU:
``/sys/kernel/iommu_groups/*/type``, ``/sys/class/iommu/*`` and ``/proc/cmdline``.

Whatever could not be read is NOT_MEASURED (or why not), never a guess.
"""

from __future__ import annotations

import posixpath

from validator.model import (
    NOT_MEASURED,
    GpudirectFacts,
    IommuFacts,
    Measured,
    Reason,
    Unavailable,
)
from validator.node.parsers.lspci_acs import parse_acs_ports
from validator.node.parsers.smi_topo import parse_topo_matrix
from validator.node.system import NotRecordedError, System
from validator.node.system_facts import PROC_DRIVER_VERSION, attempt, read_file, run_parsed

PROC_MODULES = "/proc/modules"
PROC_CMDLINE = "/proc/cmdline"
PROC_CPUINFO = "/proc/cpuinfo"
PEERMEM_SYSFS = "/sys/module/nvidia_peermem/initstate"
INFINIBAND = "/sys/class/infiniband/*"
IOMMU_GROUP_TYPES = "/sys/kernel/iommu_groups/*/type"
IOMMU_UNITS = "/sys/class/iommu/*"
TOPO_ARGV = ("nvidia-smi", "topo", "-m")
LSPCI_VVV_ARGV = ("lspci", "-vvv")
DETECT_VIRT_ARGV = ("systemd-detect-virt", "--vm")
# A host has some hundreds of IOMMU groups; their type is the same in all but a few
# (a device handed to vfio is "unmanaged"): read this many at most.
IOMMU_GROUPS_READ = 512
_IOMMU_ARGS = ("intel_iommu=", "amd_iommu=", "iommu=", "iommu.passthrough=", "iommu.strict=")
_PASSTHROUGH_TYPES = ("identity",)
_TRANSLATED_TYPES = ("DMA", "DMA-FQ")


def gpudirect_facts(system: System) -> GpudirectFacts:
    """Every GPUDirect RDMA readiness fact this host (or its recording) shows."""
    modules = _modules(system)
    devices = _glob_names(system, INFINIBAND)
    return GpudirectFacts(
        rdma_stack=_rdma_stack(modules, devices),
        rdma_devices=devices if isinstance(devices, tuple) else (),
        peermem_loaded=_peermem(system, modules),
        open_kernel_module=_open_module(system),
        virtualized=_virtualized(system),
        topology=run_parsed(system, TOPO_ARGV, parse_topo_matrix, "nvidia-smi topo -m"),
        acs_ports=run_parsed(system, LSPCI_VVV_ARGV, parse_acs_ports, "lspci -vvv"),
        iommu=iommu_facts(system),
    )


def _modules(system: System) -> Measured[frozenset[str]]:
    text = read_file(system, PROC_MODULES)
    if isinstance(text, Unavailable):
        return text
    return frozenset(line.split()[0] for line in text.splitlines() if line.split())


def _glob_names(system: System, pattern: str) -> Measured[tuple[str, ...]]:
    try:
        return tuple(sorted(posixpath.basename(path) for path in system.glob(pattern)))
    except NotRecordedError as exc:
        return Unavailable(Reason.NOT_MEASURED, str(exc))
    except OSError as exc:
        return Unavailable(Reason.ERROR, f"{pattern}: {exc.strerror or exc}")


def _rdma_stack(
    modules: Measured[frozenset[str]], devices: Measured[tuple[str, ...]]
) -> Measured[bool]:
    if isinstance(devices, tuple) and devices:
        return True
    if isinstance(modules, frozenset):
        return "ib_core" in modules
    return modules


def _peermem(system: System, modules: Measured[frozenset[str]]) -> Measured[bool]:
    if isinstance(modules, frozenset):
        return "nvidia_peermem" in modules
    state = read_file(system, PEERMEM_SYSFS)
    if isinstance(state, str):
        return state.strip() == "live"
    return modules if state.reason is Reason.NOT_SUPPORTED else state


def _open_module(system: System) -> Measured[bool]:
    text = read_file(system, PROC_DRIVER_VERSION)
    if isinstance(text, Unavailable):
        return text
    # "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07 ..."
    return "Open Kernel Module" in text


def _virtualized(system: System) -> Measured[bool]:
    result = attempt(system, DETECT_VIRT_ARGV)
    if not isinstance(result, Unavailable):
        words = result.stdout.split()
        if words and result.rc in (0, 1):
            return words[0] != "none"  # exits 1 printing "none" on bare metal
    cpuinfo = read_file(system, PROC_CPUINFO)
    if isinstance(cpuinfo, Unavailable):
        return result if isinstance(result, Unavailable) else cpuinfo
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return "hypervisor" in line.split()
    return Unavailable(Reason.ERROR, f"{PROC_CPUINFO} shows no CPU flags")


def iommu_facts(system: System) -> Measured[IommuFacts]:
    """How the IOMMU treats DMA: its groups' types, its units and the kernel's arguments."""
    units = _glob_names(system, IOMMU_UNITS)
    try:
        type_paths = system.glob(IOMMU_GROUP_TYPES)[:IOMMU_GROUPS_READ]
    except NotRecordedError as exc:
        return Unavailable(Reason.NOT_MEASURED, str(exc))
    except OSError as exc:
        return Unavailable(Reason.ERROR, f"{IOMMU_GROUP_TYPES}: {exc.strerror or exc}")
    types = set()
    for path in type_paths:
        text = read_file(system, path)
        if isinstance(text, str) and text.strip():
            types.add(text.strip())
    cmdline_text = read_file(system, PROC_CMDLINE)
    cmdline = (
        tuple(arg for arg in cmdline_text.split() if arg.startswith(_IOMMU_ARGS))
        if isinstance(cmdline_text, str)
        else ()
    )
    unit_count = len(units) if isinstance(units, tuple) else 0
    mode = iommu_mode(tuple(sorted(types)), unit_count, cmdline)
    if mode is None:
        return Unavailable(
            Reason.ERROR, "IOMMU groups show no type and the kernel arguments do not say"
        )
    return IommuFacts(
        mode=mode, group_types=tuple(sorted(types)), units=unit_count, cmdline=cmdline
    )


def iommu_mode(types: tuple[str, ...], units: int, cmdline: tuple[str, ...]) -> str | None:
    """off, passthrough, translated or mixed; None where nothing tells."""
    passthrough = any(kind in _PASSTHROUGH_TYPES for kind in types)
    translated = any(kind in _TRANSLATED_TYPES for kind in types)
    if passthrough or translated:
        return {(True, True): "mixed", (True, False): "passthrough"}.get(
            (passthrough, translated), "translated"
        )
    if not types and units == 0:
        return "off"
    # Kernels before 5.11 give the groups no type: the arguments say what was asked.
    if any(arg in ("iommu=pt", "iommu.passthrough=1") for arg in cmdline):
        return "passthrough"
    if any(arg in ("intel_iommu=on", "amd_iommu=on", "iommu.passthrough=0") for arg in cmdline):
        return "translated"
    return None


__all__ = ["NOT_MEASURED", "gpudirect_facts", "iommu_facts", "iommu_mode"]
