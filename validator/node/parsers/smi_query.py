"""Parse ``nvidia-smi -q`` text into :class:`SmiQuery`.

The text is an indented tree of ``Key : value`` lines and section headers. It
is read into a tree first (indentation decides nesting), then each GPU's facts
are looked up by path, with the renames across driver branches (418..610)
listed as alternatives.

Choices:

* A truncated file (cut mid-GPU) is not an error: the GPUs present are parsed,
  fields after the cut are NOT_MEASURED, ``cut`` says which GPU section the
  text ends in, and ``attached_gpus`` still says how many GPUs the driver
  reported, so a consumer can see the shortfall. A text without the
  ``NVSMI LOG`` banner or without any GPU section raises ParseError.
* A whole GPU section ends with its ``Processes`` entry (``: None``, or one
  ``Process ID`` block per process, each ending with ``Used GPU Memory``),
  followed on R555 and newer by ``Capabilities``. Every real -q in the corpus
  (drivers 470..610, Linux and Windows, MIG) has that shape; a section without
  ``Processes``, a process block without its memory line, a text ending on a
  bare section header or inside the word after ``Processes :`` ("No") is cut.
  A cut inside any other last value ("disa" for "disabled") cannot be told.
* Power comes from "GPU Power Readings" (R535+) or "Power Readings" (older).
  "Module Power Readings" (whole board or superchip) is ignored, except on
  GH200, where the GPU readings can be N/A and the module values are the only
  power figures; then the module values are used.
* Temperature thresholds printed as offsets to T.Limit (Hopper, Ada datacenter)
  go to the ``tlimit_*`` fields only, never to the absolute ones.
* The R610 ``Driver Version``/``CUDA Version`` keys carry a "[Deprecated ...]"
  note; ``KMD Version``/``CUDA UMD Version`` are preferred when printed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Callable

from validator.model import NOT_MEASURED, GpuFacts, Measured, NvmlStatus, Unavailable
from validator.node.parsers.base import ParseError
from validator.node.parsers.smi_common import (
    SmiQuery,
    active_reasons,
    check_gpu_count,
    first_known,
    normalize_bus_id,
    read_bool,
    read_bus_id,
    read_compute_mode,
    read_count,
    read_int,
    read_measure,
    read_recovery_action,
    read_state_word,
    read_text,
    sum_counts,
    use_module_power,
)
from validator.node.parsers.smi_errors import smi_error

_KEY_VALUE = re.compile(r"^(\S.*?)\s+:(?:\s?(.*))?$")
_GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")
# The same header found in the whole text, counted before the tree is built.
_GPU_LINE = re.compile(r"^GPU\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:", re.M)


class _Node:
    """One line of the tree: a key, its value (None for a section header), its children."""

    def __init__(self, key: str, value: str | None, line: int) -> None:
        self.key = key
        self.value = value
        self.line = line
        self.children: list[_Node] = []

    def child(self, key: str) -> _Node | None:
        wanted = key.lower()
        for node in self.children:
            if node.key.lower() == wanted:
                return node
        return None

    def get(self, *path: str) -> str | None:
        """The value at ``path``; a section printed as "Section : N/A" answers for its keys."""
        node: _Node = self
        for key in path:
            if node.value is not None and not node.children and node is not self:
                return node.value
            found = node.child(key)
            if found is None:
                return None
            node = found
        return node.value

    def has(self, *path: str) -> bool:
        node: _Node | None = self
        for key in path:
            node = node.child(key) if node is not None else None
        return node is not None

    def walk(self) -> Iterator[_Node]:
        for node in self.children:
            yield node
            yield from node.walk()


def _build_tree(text: str) -> _Node:
    root = _Node("", None, 0)
    stack: list[tuple[int, _Node]] = [(-1, root)]
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("==="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        match = _KEY_VALUE.match(body)
        node = (
            _Node(match.group(1).strip(), (match.group(2) or "").strip(), number)
            if match
            else _Node(body, None, number)
        )
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def _pick(
    gpu: _Node, read: Callable[[str | None], Measured[Any]], *paths: tuple[str, ...]
) -> Measured[Any]:
    return first_known(read(gpu.get(*path)) for path in paths)


_GPU_POWER = ("GPU Power Readings",)
_OLD_POWER = ("Power Readings",)
_CEILING = ("GPU Power Readings", "GPU Ceiling Power Limit")
_TEMP = ("Temperature",)

# field -> (reader, alternative paths in order of preference)
_FIELDS: dict[str, tuple[Callable[[str | None], Measured[Any]], tuple[tuple[str, ...], ...]]] = {
    "uuid": (read_text, (("GPU UUID",),)),
    "serial": (read_text, (("Serial Number",),)),
    "name": (read_text, (("Product Name",),)),
    "vbios_version": (read_text, (("VBIOS Version",),)),
    "memory_total_mib": (read_count, (("FB Memory Usage", "Total"),)),
    "memory_used_mib": (read_count, (("FB Memory Usage", "Used"),)),
    "ecc_mode_current": (read_bool, (("ECC Mode", "Current"),)),
    "ecc_mode_pending": (read_bool, (("ECC Mode", "Pending"),)),
    "retired_pages_sbe": (read_count, (("Retired Pages", "Single Bit ECC"),)),
    "retired_pages_dbe": (read_count, (("Retired Pages", "Double Bit ECC"),)),
    "retired_pages_pending": (
        read_bool,
        (("Retired Pages", "Pending Page Blacklist"), ("Retired Pages", "Pending Page Retirement")),
    ),
    "remapped_rows_correctable": (read_count, (("Remapped Rows", "Correctable Error"),)),
    "remapped_rows_uncorrectable": (read_count, (("Remapped Rows", "Uncorrectable Error"),)),
    "remap_pending": (read_bool, (("Remapped Rows", "Pending"),)),
    "remap_failure": (read_bool, (("Remapped Rows", "Remapping Failure Occurred"),)),
    "temperature_gpu_c": (read_measure, ((*_TEMP, "GPU Current Temp"),)),
    "temperature_memory_c": (read_measure, ((*_TEMP, "Memory Current Temp"),)),
    "temp_shutdown_c": (read_measure, ((*_TEMP, "GPU Shutdown Temp"),)),
    "temp_slowdown_c": (read_measure, ((*_TEMP, "GPU Slowdown Temp"),)),
    "temp_max_operating_c": (read_measure, ((*_TEMP, "GPU Max Operating Temp"),)),
    "temp_memory_max_c": (read_measure, ((*_TEMP, "Memory Max Operating Temp"),)),
    "tlimit_margin_c": (
        read_measure,
        ((*_TEMP, "GPU T.Limit Temp"), (*_TEMP, "GPU Current T.Limit Temp")),
    ),
    "tlimit_shutdown_c": (read_measure, ((*_TEMP, "GPU Shutdown T.Limit Temp"),)),
    "tlimit_slowdown_c": (read_measure, ((*_TEMP, "GPU Slowdown T.Limit Temp"),)),
    "tlimit_max_operating_c": (read_measure, ((*_TEMP, "GPU Max Operating T.Limit Temp"),)),
    "power_draw_w": (
        read_measure,
        (
            (*_GPU_POWER, "Power Draw"),
            (*_GPU_POWER, "Instantaneous Power Draw"),
            (*_GPU_POWER, "Average Power Draw"),
            (*_OLD_POWER, "Power Draw"),
        ),
    ),
    "power_limit_enforced_w": (
        read_measure,
        (
            (*_GPU_POWER, "Current Power Limit"),
            (*_CEILING, "Current Power Limit"),
            (*_OLD_POWER, "Enforced Power Limit"),
        ),
    ),
    "power_limit_default_w": (
        read_measure,
        (
            (*_GPU_POWER, "Default Power Limit"),
            (*_CEILING, "Default Power Limit"),
            (*_OLD_POWER, "Default Power Limit"),
        ),
    ),
    "power_limit_min_w": (
        read_measure,
        ((*_GPU_POWER, "Min Power Limit"), (*_OLD_POWER, "Min Power Limit")),
    ),
    "power_limit_max_w": (
        read_measure,
        ((*_GPU_POWER, "Max Power Limit"), (*_OLD_POWER, "Max Power Limit")),
    ),
    "sm_clock_mhz": (read_count, (("Clocks", "SM"),)),
    "mem_clock_mhz": (read_count, (("Clocks", "Memory"),)),
    "sm_clock_max_mhz": (read_count, (("Max Clocks", "SM"),)),
    "mem_clock_max_mhz": (read_count, (("Max Clocks", "Memory"),)),
    "sm_clock_app_mhz": (read_count, (("Applications Clocks", "Graphics"),)),
    "mem_clock_app_mhz": (read_count, (("Applications Clocks", "Memory"),)),
    "pcie_gen_current": (read_count, (("PCI", "GPU Link Info", "PCIe Generation", "Current"),)),
    "pcie_gen_max": (
        read_count,
        (
            ("PCI", "GPU Link Info", "PCIe Generation", "Max"),
            ("PCI", "GPU Link Info", "PCIe Generation", "Device Max"),
        ),
    ),
    "pcie_width_current": (read_count, (("PCI", "GPU Link Info", "Link Width", "Current"),)),
    "pcie_width_max": (read_count, (("PCI", "GPU Link Info", "Link Width", "Max"),)),
    # Counted since the driver loaded; "Replay Number Rollovers" counts the counter's wraps.
    "pcie_replay_count": (read_count, (("PCI", "Replays Since Reset"),)),
    "recovery_action": (read_recovery_action, (("GPU Recovery Action",),)),
    "persistence_mode": (read_bool, (("Persistence Mode",),)),
    "compute_mode": (read_compute_mode, (("Compute Mode",),)),
    "mig_mode_current": (read_bool, (("MIG Mode", "Current"),)),
    "mig_mode_pending": (read_bool, (("MIG Mode", "Pending"),)),
    "fabric_state": (read_state_word, (("Fabric", "State"),)),
    "fabric_status": (read_state_word, (("Fabric", "Status"),)),
}

_MODULE_POWER = {
    "power_draw_w": ("Power Draw", "Instantaneous Power Draw"),
    "power_limit_enforced_w": ("Current Power Limit",),
    "power_limit_default_w": ("Default Power Limit",),
    "power_limit_min_w": ("Min Power Limit",),
    "power_limit_max_w": ("Max Power Limit",),
}


def _ecc(gpu: _Node, kind: str) -> tuple[Measured[int], Measured[int]]:
    """(corrected, uncorrected) for kind "Volatile" or "Aggregate", any driver era."""
    base = ("ECC Errors", kind)
    if gpu.has(*base, "DRAM Correctable") or gpu.has(*base, "SRAM Correctable"):
        corrected = sum_counts(
            read_count(gpu.get(*base, key)) for key in ("DRAM Correctable", "SRAM Correctable")
        )
        sram: list[Measured[int]] = (
            [read_count(gpu.get(*base, "SRAM Uncorrectable"))]
            if gpu.has(*base, "SRAM Uncorrectable")
            else [
                read_count(gpu.get(*base, "SRAM Uncorrectable Parity")),
                read_count(gpu.get(*base, "SRAM Uncorrectable SEC-DED")),
            ]
        )
        uncorrected = sum_counts([read_count(gpu.get(*base, "DRAM Uncorrectable")), *sram])
        return corrected, uncorrected
    return read_count(gpu.get(*base, "Single Bit", "Total")), read_count(
        gpu.get(*base, "Double Bit", "Total")
    )


def _clock_events(gpu: _Node) -> Measured[tuple[str, ...]]:
    section = gpu.child("Clocks Event Reasons") or gpu.child("Clocks Throttle Reasons")
    if section is None:
        return NOT_MEASURED
    entries = [(node.key, node.value) for node in section.walk() if node.value is not None]
    return active_reasons(section.value, entries, present=True)


def _gpu_facts(index: int, gpu: _Node, header_bus_id: str) -> GpuFacts:
    fields: dict[str, Any] = {
        name: _pick(gpu, read, *paths) for name, (read, paths) in _FIELDS.items()
    }
    bus_id = read_bus_id(gpu.get("PCI", "Bus Id"))
    fields["pci_bus_id"] = (
        normalize_bus_id(header_bus_id) if isinstance(bus_id, Unavailable) else bus_id
    )
    fields["ecc_volatile_corrected"], fields["ecc_volatile_uncorrected"] = _ecc(gpu, "Volatile")
    fields["ecc_aggregate_corrected"], fields["ecc_aggregate_uncorrected"] = _ecc(gpu, "Aggregate")
    fields["clock_event_reasons"] = _clock_events(gpu)
    use_module_power(fields, lambda key: gpu.get("Module Power Readings", key), _MODULE_POWER)
    return GpuFacts(index=index, **fields)


def _last_line(node: _Node) -> _Node:
    while node.children:
        node = node.children[-1]
    return node


def _cut_inside(bus_id: str, gpu: _Node, last: bool) -> str:
    """Where this GPU section is cut short; "" when it is whole (see the module notes)."""
    processes = gpu.child("Processes")
    if processes is None:
        return f"GPU {bus_id} ends before its Processes section"
    blocks = processes.children
    whole_blocks = all(
        block.child("Used GPU Memory") is not None
        for block in blocks
        if block.key.lower() == "process id"
    )
    if not whole_blocks or (blocks and blocks[-1].key.lower() != "process id"):
        return f"GPU {bus_id} ends inside its process list"
    if not last:
        return ""
    end = _last_line(gpu)
    if end is not gpu and end.value is None:
        return f"GPU {bus_id} ends on the bare section header {end.key!r}"
    if end is processes and _cut_word(end.value or ""):
        return f"GPU {bus_id} ends inside its Processes line ({end.value!r})"
    return ""


# What "Processes : ..." says when there is no process to list.
_NO_PROCESS = ("none", "n/a", "not supported")


def _cut_word(value: str) -> bool:
    """An empty value, or the start of a placeholder without its end ("No" for "None")."""
    word = value.strip().lower()
    return not word or any(full.startswith(word) and full != word for full in _NO_PROCESS)


def _cut(sections: list[tuple[str, _Node]]) -> str:
    for number, (bus_id, gpu) in enumerate(sections):
        where = _cut_inside(bus_id, gpu, last=number == len(sections) - 1)
        if where:
            return where
    return ""


def _version(root: _Node, *keys: str) -> Measured[str]:
    return first_known(read_text(root.get(key)) for key in keys)


def parse_smi_query(text: str) -> SmiQuery:
    """Parse the text printed by ``nvidia-smi -q``.

    Args:
        text: the command's output.

    Returns:
        The node-level versions and one GpuFacts per GPU section, in file order.
        When nvidia-smi printed a known error instead, the status says which and
        ``gpus`` is empty.

    Raises:
        ParseError: the text is neither -q output nor a known nvidia-smi error,
            or it has the banner but no GPU section.
    """
    if "NVSMI LOG" not in text:
        return SmiQuery.from_error(smi_error(text, "nvidia-smi -q output", "no NVSMI LOG banner"))
    check_gpu_count(sum(1 for _ in _GPU_LINE.finditer(text)), "nvidia-smi -q output")
    root = _build_tree(text)
    sections = [
        (match.group(1), node)
        for node in root.children
        if node.value is None and (match := _GPU_HEADER.match(node.key))
    ]
    gpus = [_gpu_facts(index, node, bus_id) for index, (bus_id, node) in enumerate(sections)]
    if not gpus:
        raise ParseError("nvidia-smi -q output has no GPU section (cut before the first GPU?)")
    return SmiQuery(
        status=NvmlStatus.OK,
        detail="",
        driver_version=_version(root, "KMD Version", "Driver Version"),
        cuda_version=_version(root, "CUDA UMD Version", "CUDA Version"),
        attached_gpus=read_int(root.get("Attached GPUs")),
        gpus=tuple(gpus),
        cut=_cut(sections),
    )
