"""The report as one self-contained HTML page: what operators read and sign off.

Everything is inline (style, a small sorting script); the page loads nothing
from anywhere and reads completely without JavaScript. Its Content Security
Policy allows only the one script whose hash it carries, so even a hostname that
slipped past escaping could not run code.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib

from markupsafe import Markup

from validator.model import (
    Finding,
    GpuFacts,
    GpuStatus,
    Measured,
    NodeResult,
    Report,
    Unavailable,
    Verdict,
    XidEvent,
    known,
)
from validator.report import common
from validator.report.environment import render_template

TEMPLATE = "report.html.j2"
SCRIPT_TEMPLATE = "report_sort.js.j2"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One value as shown: its text, whether it is missing, and a secondary line."""

    text: str
    missing: bool = False
    note: str = ""


def _cell(value: object, unit: str = "") -> Cell:
    return Cell(common.show(value, unit), missing=isinstance(value, Unavailable))


def _pcie(gen: Measured[int], width: Measured[int]) -> Cell:
    """``Gen5 x16``, or the reason when neither part is known."""
    if isinstance(gen, Unavailable) and isinstance(width, Unavailable):
        return Cell(common.show_pair(gen, width), missing=True)
    gen_text = f"Gen{gen}" if known(gen) else f"Gen {common.show(gen)}"
    width_text = f"x{width}" if known(width) else f"width {common.show(width)}"
    return Cell(f"{gen_text} {width_text}")


@dataclasses.dataclass(frozen=True)
class GpuRow:
    """One row of the GPU table."""

    index: int
    name: Cell
    uuid: Cell
    serial: Cell
    bus_id: Cell
    memory: Cell
    power: Cell
    temperature: Cell
    pcie: Cell
    vbios: Cell
    status: str
    status_detail: str
    identity: str  # for a GPU that did not answer: whatever still names it


def _identity(gpu: GpuFacts) -> str:
    """What still identifies a GPU, for a row that cannot show its facts."""
    parts = [
        f"{label} {common.show(value)}"
        for label, value in (
            ("UUID", gpu.uuid),
            ("serial", gpu.serial),
            ("bus", gpu.pci_bus_id),
        )
        if known(value)
    ]
    if parts:
        return ", ".join(parts)
    return f"UUID {common.show(gpu.uuid)}"


def _gpu_row(gpu: GpuFacts) -> GpuRow:
    power = _cell(gpu.power_limit_enforced_w, "W")
    if not isinstance(gpu.power_limit_default_w, Unavailable) or not power.missing:
        power = dataclasses.replace(
            power, note=f"default {common.show(gpu.power_limit_default_w, 'W')}"
        )
    temperature = _cell(gpu.temperature_gpu_c, "°C")
    if known(gpu.temperature_memory_c):
        temperature = dataclasses.replace(
            temperature, note=f"memory {common.show(gpu.temperature_memory_c, '°C')}"
        )
    pcie = _pcie(gpu.pcie_gen_current, gpu.pcie_width_current)
    pcie_max = _pcie(gpu.pcie_gen_max, gpu.pcie_width_max)
    if not pcie_max.missing:
        pcie = dataclasses.replace(pcie, note=f"max {pcie_max.text}")
    return GpuRow(
        index=gpu.index,
        name=_cell(gpu.name),
        uuid=_cell(gpu.uuid),
        serial=_cell(gpu.serial),
        bus_id=_cell(gpu.pci_bus_id),
        memory=_cell(gpu.memory_total_mib, "MiB"),
        power=power,
        temperature=temperature,
        pcie=pcie,
        vbios=_cell(gpu.vbios_version),
        status=gpu.status.value,
        status_detail=common.one_line(gpu.status_detail).rstrip("."),
        identity=_identity(gpu),
    )


@dataclasses.dataclass(frozen=True)
class NodeView:
    """One node, ready for the template."""

    anchor: str
    node: NodeResult
    verdict_words: str
    findings: list[Finding]
    counts: common.SeverityCounts
    facts: list[tuple[str, Cell]]
    gpus: list[GpuRow]
    lost_gpus: int
    xid_events: list[XidEvent]
    xid_note: str


def _facts(node: NodeResult) -> list[tuple[str, Cell]]:
    facts = node.facts
    tools = facts.tools
    source = facts.source + (f" ({facts.source_detail})" if facts.source_detail else "")
    nvml = facts.nvml_status.value + (f": {facts.nvml_detail}" if facts.nvml_detail else "")
    return [
        ("SKU", Cell(node.sku or "no SKU matched", missing=node.sku is None)),
        ("Driver", _cell(facts.driver_version)),
        ("CUDA (driver)", _cell(facts.cuda_driver_version)),
        ("nvcc", _cell(tools.nvcc_version)),
        ("cuDNN", _cell(tools.cudnn_version)),
        ("Kernel module", _cell(facts.kernel_module_version)),
        ("Kernel", _cell(facts.kernel)),
        ("OS", _cell(facts.os_name)),
        ("NVML", Cell(common.one_line(nvml))),
        ("GPUs on PCI bus", _cell(facts.pci_gpu_count)),
        ("Collected at", _cell(facts.collected_at)),
        ("Source", Cell(common.one_line(source))),
        ("Policy digest", _cell(node.policy_digest)),
    ]


def _xid(node: NodeResult) -> tuple[list[XidEvent], str]:
    log = node.facts.kernel_log
    window = "whole log" if log.window_hours is None else f"last {common.show(log.window_hours)} h"
    if isinstance(log.events, Unavailable):
        return [], f"Kernel log ({log.source}): {common.unavailable_text(log.events)}."
    count = common.plural(len(log.events), "Xid event")
    return list(log.events), f"Kernel log ({log.source}, {window}): {count}."


def _node_view(position: int, node: NodeResult) -> NodeView:
    events, note = _xid(node)
    return NodeView(
        anchor=f"node-{position}",
        node=node,
        verdict_words=common.verdict_words(node.verdict),
        findings=common.sorted_findings(node.findings),
        counts=common.count_severities(node.findings),
        facts=_facts(node),
        gpus=[_gpu_row(gpu) for gpu in node.facts.gpus],
        lost_gpus=sum(1 for gpu in node.facts.gpus if gpu.status is not GpuStatus.OK),
        xid_events=events,
        xid_note=note,
    )


def _script() -> tuple[Markup, str]:
    """The sorting script and its CSP hash (over the exact text in the page)."""
    text = render_template(SCRIPT_TEMPLATE, {})
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    # Our own static file, rendered without escaping: safe to embed as is.
    return Markup(text), f"'sha256-{digest}'"  # noqa: S704


def render_html(report: Report) -> str:
    """Render the report as one self-contained HTML page.

    Args:
        report: the acceptance report.

    Returns:
        The HTML document.

    Raises:
        ReportError: a template is missing or broken.
    """
    overall = common.overall_verdict(report)
    script, script_hash = _script()
    context = {
        "report": report,
        "overall": overall.value,
        "overall_words": common.verdict_words(overall),
        "summary": common.overall_summary(report),
        "nodes": [_node_view(i, node) for i, node in enumerate(report.nodes, start=1)],
        "gpu_total": sum(len(node.facts.gpus) for node in report.nodes),
        "totals": common.count_severities(f for node in report.nodes for f in node.findings),
        "certified": sum(1 for node in report.nodes if node.verdict is Verdict.CERTIFIED),
        "script": script,
        "script_hash": script_hash,
    }
    return render_template(TEMPLATE, context)
