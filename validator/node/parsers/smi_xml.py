"""Parse ``nvidia-smi -q -x`` XML into :class:`SmiQuery`.

Covers the nvsmi_device v10..v13 DTDs (drivers 418..595 in the corpus): the
tags renamed across them are listed as alternatives, in the same order of
preference as the text parser (see smi_query for the choices on power,
T.Limit offsets and R610 versions). XML is all or nothing: a truncated or
invalid document raises ParseError naming the line. A well-formed document
whose ``<gpu>`` lacks ``<processes>`` (which every whole ``<gpu>`` of the
corpus carries, v10..v13, Linux and Windows, MIG) was cut or trimmed before it
was closed again: ``cut`` says which.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
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


def _get(elem: ET.Element, path: str) -> str | None:
    """Text at ``path``; an element holding text instead of children answers for them.

    ``<remapped_rows>N/A</remapped_rows>`` thus gives "N/A" for remapped_rows/remapped_row_corr.
    """
    node = elem
    for tag in path.split("/"):
        found = node.find(tag)
        if found is None:
            if node is not elem and len(node) == 0 and (node.text or "").strip():
                return node.text
            return None
        node = found
    if len(node) and not (node.text or "").strip():
        return None
    return node.text if node.text is not None else ""


_FIELDS: dict[str, tuple[Callable[[str | None], Measured[Any]], tuple[str, ...]]] = {
    "uuid": (read_text, ("uuid",)),
    "serial": (read_text, ("serial",)),
    "name": (read_text, ("product_name",)),
    "vbios_version": (read_text, ("vbios_version",)),
    "memory_total_mib": (read_count, ("fb_memory_usage/total",)),
    "memory_used_mib": (read_count, ("fb_memory_usage/used",)),
    "ecc_mode_current": (read_bool, ("ecc_mode/current_ecc",)),
    "ecc_mode_pending": (read_bool, ("ecc_mode/pending_ecc",)),
    "retired_pages_sbe": (
        read_count,
        ("retired_pages/multiple_single_bit_retirement/retired_count",),
    ),
    "retired_pages_dbe": (read_count, ("retired_pages/double_bit_retirement/retired_count",)),
    "retired_pages_pending": (
        read_bool,
        ("retired_pages/pending_blacklist", "retired_pages/pending_retirement"),
    ),
    "remapped_rows_correctable": (read_count, ("remapped_rows/remapped_row_corr",)),
    "remapped_rows_uncorrectable": (read_count, ("remapped_rows/remapped_row_unc",)),
    "remap_pending": (read_bool, ("remapped_rows/remapped_row_pending",)),
    "remap_failure": (read_bool, ("remapped_rows/remapped_row_failure",)),
    "temperature_gpu_c": (read_measure, ("temperature/gpu_temp",)),
    "temperature_memory_c": (read_measure, ("temperature/memory_temp",)),
    "temp_shutdown_c": (read_measure, ("temperature/gpu_temp_max_threshold",)),
    "temp_slowdown_c": (read_measure, ("temperature/gpu_temp_slow_threshold",)),
    "temp_max_operating_c": (read_measure, ("temperature/gpu_temp_max_gpu_threshold",)),
    "temp_memory_max_c": (read_measure, ("temperature/gpu_temp_max_mem_threshold",)),
    "tlimit_margin_c": (read_measure, ("temperature/gpu_temp_tlimit",)),
    "tlimit_shutdown_c": (read_measure, ("temperature/gpu_temp_max_tlimit_threshold",)),
    "tlimit_slowdown_c": (read_measure, ("temperature/gpu_temp_slow_tlimit_threshold",)),
    "tlimit_max_operating_c": (read_measure, ("temperature/gpu_temp_max_gpu_tlimit_threshold",)),
    "power_draw_w": (
        read_measure,
        (
            "gpu_power_readings/power_draw",
            "gpu_power_readings/instant_power_draw",
            "gpu_power_readings/average_power_draw",
            "power_readings/power_draw",
        ),
    ),
    "power_limit_enforced_w": (
        read_measure,
        ("gpu_power_readings/current_power_limit", "power_readings/enforced_power_limit"),
    ),
    "power_limit_default_w": (
        read_measure,
        ("gpu_power_readings/default_power_limit", "power_readings/default_power_limit"),
    ),
    "power_limit_min_w": (
        read_measure,
        ("gpu_power_readings/min_power_limit", "power_readings/min_power_limit"),
    ),
    "power_limit_max_w": (
        read_measure,
        ("gpu_power_readings/max_power_limit", "power_readings/max_power_limit"),
    ),
    "sm_clock_mhz": (read_count, ("clocks/sm_clock",)),
    "mem_clock_mhz": (read_count, ("clocks/mem_clock",)),
    "sm_clock_max_mhz": (read_count, ("max_clocks/sm_clock",)),
    "mem_clock_max_mhz": (read_count, ("max_clocks/mem_clock",)),
    "sm_clock_app_mhz": (read_count, ("applications_clocks/graphics_clock",)),
    "mem_clock_app_mhz": (read_count, ("applications_clocks/mem_clock",)),
    "pcie_gen_current": (read_count, ("pci/pci_gpu_link_info/pcie_gen/current_link_gen",)),
    "pcie_gen_max": (
        read_count,
        (
            "pci/pci_gpu_link_info/pcie_gen/max_link_gen",
            "pci/pci_gpu_link_info/pcie_gen/max_device_link_gen",
        ),
    ),
    "pcie_width_current": (read_count, ("pci/pci_gpu_link_info/link_widths/current_link_width",)),
    "pcie_width_max": (read_count, ("pci/pci_gpu_link_info/link_widths/max_link_width",)),
    # Counted since the driver loaded; <replay_rollover_counter> counts the counter's wraps.
    "pcie_replay_count": (read_count, ("pci/replay_counter",)),
    "recovery_action": (read_recovery_action, ("gpu_recovery_action",)),
    "persistence_mode": (read_bool, ("persistence_mode",)),
    "compute_mode": (read_compute_mode, ("compute_mode",)),
    "mig_mode_current": (read_bool, ("mig_mode/current_mig",)),
    "mig_mode_pending": (read_bool, ("mig_mode/pending_mig",)),
    "fabric_state": (read_state_word, ("fabric/state",)),
    "fabric_status": (read_state_word, ("fabric/status",)),
}

_MODULE_POWER = {
    "power_draw_w": ("power_draw", "instant_power_draw"),
    "power_limit_enforced_w": ("current_power_limit",),
    "power_limit_default_w": ("default_power_limit",),
    "power_limit_min_w": ("min_power_limit",),
    "power_limit_max_w": ("max_power_limit",),
}


def _ecc(gpu: ET.Element, kind: str) -> tuple[Measured[int], Measured[int]]:
    """(corrected, uncorrected) for kind "volatile" or "aggregate", any DTD version."""
    base = f"ecc_errors/{kind}"
    block = gpu.find(base)
    if block is not None and (
        block.find("dram_correctable") is not None or block.find("sram_correctable") is not None
    ):
        corrected = sum_counts(
            read_count(_get(gpu, f"{base}/{tag}"))
            for tag in ("dram_correctable", "sram_correctable")
        )
        sram_tags = (
            ("sram_uncorrectable",)
            if block.find("sram_uncorrectable") is not None
            else ("sram_uncorrectable_parity", "sram_uncorrectable_secded")
        )
        uncorrected = sum_counts(
            read_count(_get(gpu, f"{base}/{tag}")) for tag in ("dram_uncorrectable", *sram_tags)
        )
        return corrected, uncorrected
    return (
        read_count(_get(gpu, f"{base}/single_bit/total")),
        read_count(_get(gpu, f"{base}/double_bit/total")),
    )


def _clock_events(gpu: ET.Element) -> Measured[tuple[str, ...]]:
    for section_tag, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        section = gpu.find(section_tag)
        if section is not None:
            entries = [(child.tag.replace(prefix, "", 1), child.text) for child in section]
            return active_reasons(section.text, entries, present=True)
    return NOT_MEASURED


def _gpu_facts(index: int, gpu: ET.Element) -> GpuFacts:
    fields: dict[str, Any] = {
        name: first_known(read(_get(gpu, path)) for path in paths)
        for name, (read, paths) in _FIELDS.items()
    }
    bus_id = read_bus_id(_get(gpu, "pci/pci_bus_id"))
    if isinstance(bus_id, Unavailable):
        from_attr = normalize_bus_id(gpu.get("id", ""))
        bus_id = from_attr if from_attr is not None else bus_id
    fields["pci_bus_id"] = bus_id
    fields["ecc_volatile_corrected"], fields["ecc_volatile_uncorrected"] = _ecc(gpu, "volatile")
    fields["ecc_aggregate_corrected"], fields["ecc_aggregate_uncorrected"] = _ecc(gpu, "aggregate")
    fields["clock_event_reasons"] = _clock_events(gpu)
    use_module_power(fields, lambda tag: _get(gpu, f"module_power_readings/{tag}"), _MODULE_POWER)
    return GpuFacts(index=index, **fields)


def _cut(gpus: list[ET.Element]) -> str:
    for gpu in gpus:
        if gpu.find("processes") is None:
            return f'<gpu id="{gpu.get("id", "?")}"> has no <processes> element'
    return ""


def _document(text: str) -> ET.Element:
    # nvidia-smi never declares entities; refusing them closes the entity-expansion
    # attacks defusedxml guards against (it is not in the standard library the node runs on).
    if "<!ENTITY" in text.upper():
        raise ParseError("nvidia-smi XML must not declare entities (<!ENTITY found)")
    try:
        return ET.fromstring(text)  # noqa: S314 -- entities refused above
    except ET.ParseError as exc:
        line, column = exc.position
        raise ParseError(
            f"invalid nvidia-smi XML at line {line}, column {column}: {exc} (truncated output?)"
        ) from None


def parse_smi_xml(text: str) -> SmiQuery:
    """Parse the XML printed by ``nvidia-smi -q -x``.

    Args:
        text: the command's output.

    Returns:
        The node-level versions and one GpuFacts per <gpu>, in document order.
        When nvidia-smi printed a known error instead of XML, the status says
        which and ``gpus`` is empty.

    Raises:
        ParseError: the text is neither XML nor a known nvidia-smi error, the XML
            is invalid or truncated (the message names the line), or it is not
            an nvidia_smi_log document.
    """
    if "<" not in text:
        return SmiQuery.from_error(smi_error(text, "nvidia-smi XML output"))
    root = _document(text)
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"XML root is <{root.tag}>, expected <nvidia_smi_log>")
    elements = root.findall("gpu")
    check_gpu_count(len(elements), "nvidia-smi XML")
    gpus = tuple(_gpu_facts(i, gpu) for i, gpu in enumerate(elements))
    if not gpus:
        raise ParseError("nvidia-smi XML has no <gpu> element")
    return SmiQuery(
        status=NvmlStatus.OK,
        detail="",
        driver_version=first_known(
            read_text(_get(root, tag)) for tag in ("kmd_version", "driver_version")
        ),
        cuda_version=first_known(
            read_text(_get(root, tag)) for tag in ("cuda_umd_version", "cuda_version")
        ),
        attached_gpus=read_int(_get(root, "attached_gpus")),
        gpus=gpus,
        cut=_cut(elements),
    )
