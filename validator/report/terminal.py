"""The report for a terminal: what an operator reads right after ``certify``.

Plain strings and optional ANSI colour; the CLI decides whether the stream is a
terminal. Text from devices is cleaned of control characters so a message can
never repaint the operator's screen.
"""

from __future__ import annotations

import re

from validator.model import (
    Action,
    BurnResult,
    BurnStatus,
    Finding,
    GpuBurn,
    NodeFacts,
    NodeResult,
    Report,
    Severity,
    Unavailable,
    Verdict,
)
from validator.report import fleet_text, shared

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_SEVERITY_COLOR = {
    Severity.FAIL: "\x1b[31m",  # red
    Severity.UNKNOWN: "\x1b[33m",  # amber
    Severity.WARN: "\x1b[33m",
    Severity.PASS: "\x1b[32m",  # green
}
_VERDICT_COLOR = {
    Verdict.CERTIFIED: "\x1b[1;32m",
    Verdict.NOT_CERTIFIED: "\x1b[1;31m",
    Verdict.UNKNOWN: "\x1b[1;33m",
}
# Width of the severity column: the longest severity name.
_SEV_WIDTH = max(len(severity.value) for severity in Severity)
_BURN_STATUS_WIDTH = max(len(status.value) for status in BurnStatus)
_WIDTH = 100
_ANSI = re.compile("\x1b\\[[0-9;]*m")


class _Painter:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if self.color else text


def _fit(text: str, width: int) -> str:
    """Cut a line we composed (already clean) to ``width``, keeping its spacing."""
    return text if len(text) <= width else text[: max(width - 1, 0)].rstrip() + "\u2026"


def _burn_header(burn: BurnResult, paint: _Painter) -> str:
    elapsed = shared.show(round(burn.elapsed_s, 1), "s")
    head = (
        f"  burn-in  {shared.one_line(burn.backend)} {shared.one_line(burn.dtype)} "
        f"n={burn.matrix_size}  {shared.show(burn.duration_s, 's')} (ran {elapsed})  "
        f"sampler {shared.one_line(burn.sampler)}"
    )
    head = _fit(head, _WIDTH - (len("  SIMULATED") if burn.simulated else 0))
    if burn.simulated:
        head += "  " + paint("SIMULATED", _SEVERITY_COLOR[Severity.WARN])
    return head


def _burn_gpu_line(gpu: GpuBurn, facts: NodeFacts, paint: _Painter) -> str:
    """``  burn gpu3  completed  712.4 TFLOPS  it=5120  errors=0  peak 688 W (98%) ...``."""
    label = f"  burn gpu{gpu.index}".ljust(11) + "  "
    failed = shared.burn_failed(gpu)
    status = gpu.status.value.ljust(_BURN_STATUS_WIDTH)
    colored = paint(status, _SEVERITY_COLOR[Severity.FAIL if failed else Severity.PASS])
    if gpu.status is not BurnStatus.COMPLETED:
        room = _WIDTH - len(label) - len(status) - 2
        detail = shared.shorten(gpu.detail or "no detail given", room)
        return f"{label}{colored}  {detail}".rstrip()
    stats = shared.burn_stats(gpu, facts)
    tflops = shared.tflops_text(gpu.tflops) if isinstance(gpu.tflops, float) else "n/a"
    errors = f"errors={stats.errors}"
    if gpu.reference_ok is False:
        errors += " ref=bad"
    parts = [f"{tflops} TFLOPS", f"it={gpu.iterations}", errors]
    if isinstance(stats.peak_power_w, Unavailable):
        parts.append("power n/a")
    elif isinstance(stats.peak_power_pct, Unavailable):
        parts.append(f"peak {stats.peak_power_w:.0f} W")
    else:
        parts.append(f"peak {stats.peak_power_w:.0f} W ({stats.peak_power_pct:.0f}%)")
    temperature = stats.peak_temperature_c
    parts.append("temp n/a" if isinstance(temperature, Unavailable) else f"{temperature:.0f} C")
    clock = stats.min_sm_clock_mhz
    parts.append("sm n/a" if isinstance(clock, Unavailable) else f"sm>={clock} MHz")
    rest = _fit("  ".join(parts), _WIDTH - len(label) - len(status) - 2)
    return f"{label}{colored}  {rest}"


def _burn_lines(facts: NodeFacts, paint: _Painter) -> list[str]:
    burn = facts.burn
    if burn is None:
        return []
    lines = [_burn_header(burn, paint)]
    if burn.error:
        error = shared.shorten(burn.error, _WIDTH - len("  burn-in could not run: "))
        lines.append("  burn-in could not run: " + paint(error, _SEVERITY_COLOR[Severity.FAIL]))
    lines.extend(_burn_gpu_line(gpu, facts, paint) for gpu in burn.gpus)
    return lines


_INTERCONNECT_HEAD = "  Interconnect: "


def _two_lines(parts: list[str]) -> tuple[str, str]:
    """The phrases split into two lines, the longer of them as short as can be."""
    indent = " " * len(_INTERCONNECT_HEAD)
    splits = [
        (_INTERCONNECT_HEAD + ", ".join(parts[:cut]) + ",", indent + ", ".join(parts[cut:]))
        for cut in range(1, len(parts))
    ]
    return min(splits, key=lambda pair: max(len(pair[0]), len(pair[1])))


def _interconnect_lines(facts: NodeFacts, paint: _Painter) -> list[str]:
    """``  Interconnect: H2D 53.1-55.0 GB/s, D2H ..., all-reduce ... (8 GPUs)``, or its error.

    One line when it fits the width, else two, broken between phrases (the second
    indented under the first), so the summary never grows into a table. Simulated
    figures end with ``SIMULATED``, as the burn-in's header does.
    """
    interconnect = facts.interconnect
    if interconnect is None:
        return []
    simulated = interconnect.simulated
    mark = "  " + paint("SIMULATED", _SEVERITY_COLOR[Severity.WARN]) if simulated else ""
    room = _WIDTH - (len("  SIMULATED") if simulated else 0)
    if interconnect.error:
        head = "  Interconnect could not be measured: "
        error = shared.shorten(interconnect.error, room - len(head))
        return [head + paint(error, _SEVERITY_COLOR[Severity.FAIL]) + mark]
    parts = shared.interconnect_parts(interconnect)
    line = _INTERCONNECT_HEAD + ", ".join(parts)
    if len(line) <= room or len(parts) < 2:
        return [line + mark]
    first, second = _two_lines(parts)
    return [first, second + mark]


def _stderr_line(node: NodeResult) -> list[str]:
    """The agent's last words on stderr, one line; the HTML report keeps all of it."""
    lines = [line for line in shared.clean(node.agent_stderr).splitlines() if line.strip()]
    if not lines:
        return []
    count = f" ({len(lines)} lines)" if len(lines) > 1 else ""
    head = f"  agent stderr{count}: "
    return [head + shared.shorten(lines[-1], _WIDTH - len(head))]


def _finding_lines(head: str, text: str, finding: Finding, paint: _Painter) -> list[str]:
    """A finding's line, what to do after it: ``... message  -> drain and RMA``.

    The action goes on the line when it fits in the width (or the message alone is
    already wider), else on a line of its own under the message; either way it starts
    with ``->``, so ``grep -- '-> drain'`` finds them all.
    """
    line = head + text
    if finding.action is Action.NONE:
        return [line]
    words = f"-> {shared.action_words(finding.action)}"
    todo = paint(words, _BOLD) if shared.is_hardware(finding.action) else words
    # The head's width as printed, without colour codes.
    indent = len(_ANSI.sub("", head))
    if indent + len(text) + 2 + len(words) <= _WIDTH or indent + len(text) > _WIDTH:
        return [f"{line}  {todo}"]
    return [line, " " * indent + todo]


def _node_lines(node: NodeResult, paint: _Painter, *, fleet: bool = False) -> list[str]:
    sku = node.sku or "no SKU matched"
    gpus = shared.plural(len(node.facts.gpus), "GPU")
    verdict = paint(node.verdict.value, _VERDICT_COLOR[node.verdict])
    header = f"{paint(shared.one_line(node.hostname), _BOLD)}  {verdict}  {sku}  {gpus}"
    if fleet:
        elapsed = shared.elapsed_text(node.elapsed_s)
        header += f"  via {shared.one_line(node.transport)}" + (
            f" {elapsed}" if node.elapsed_s > 0 else ""
        )
    lines = [header]
    if node.verdict is Verdict.UNKNOWN and node.summary:
        # Nothing could be judged: say why before the details, not after them.
        lines.append(f"  {paint(shared.one_line(node.summary), _VERDICT_COLOR[node.verdict])}")
    lines.extend(_stderr_line(node))
    lines.extend(_burn_lines(node.facts, paint))
    lines.extend(_interconnect_lines(node.facts, paint))
    findings = [f for f in shared.sorted_findings(node.findings) if f.severity is not Severity.PASS]
    check_width = min(max((len(f.check) for f in findings), default=0), 32)
    for finding in findings:
        color = _SEVERITY_COLOR[finding.severity]
        severity = paint(finding.severity.value.ljust(_SEV_WIDTH), color)
        gpu = (shared.gpu_label(finding) or "node").ljust(6)
        optional = "" if finding.required else " (optional)"
        message = shared.one_line(finding.message)
        head = f"  {severity}  {finding.check.ljust(check_width)}  {gpu}"
        lines.extend(_finding_lines(head, f"{message}{optional}", finding, paint))
    lines.append(f"  {shared.count_checks(node.findings).line()}")
    if node.summary and node.verdict is not Verdict.UNKNOWN:
        lines.append(f"  {shared.one_line(node.summary)}")
    return lines


def _verdict_painter(paint: _Painter) -> fleet_text.Paint:
    return lambda verdict, text: paint(text, _VERDICT_COLOR[verdict])


def _fleet_blocks(report: Report, paint: _Painter, *, quiet: bool) -> list[str]:
    """A fleet: a line per node, the details of each node not certified, the summary.

    Quiet: the summary alone.
    """
    verdicts = _verdict_painter(paint)
    summary = "\n".join(fleet_text.summary_lines(report, verdicts))
    if quiet:
        return [summary]
    blocks = ["\n".join(fleet_text.node_lines(report, verdicts))]
    blocks.extend(
        "\n".join(_node_lines(node, paint, fleet=True))
        for node in shared.reading_order(report)
        if node.verdict is not Verdict.CERTIFIED
    )
    blocks.append(summary)
    return blocks


def render_text(report: Report, *, color: bool = False, quiet: bool = False) -> str:
    """Render the report for a terminal.

    One node: a header (hostname, verdict, SKU, GPU count); when a burn-in ran, a
    line saying how and one compact line per GPU (status, TFLOPS, iterations,
    errors, peak power and its share of the limit, peak temperature, lowest SM
    clock); when the interconnect was measured, its summary in a line or two (the
    range of each copy figure over the GPUs, the peer range and its slowest pair,
    busbw at the largest message), or why it could not be; each finding that did
    not pass (severity, check, GPU, message and what to do, ``-> drain and RMA``),
    the count line (checks, as every output counts them) and the summary; the last
    line of the agent's stderr, if it wrote any.
    A fleet report (``report.fleet`` set) has one line per node (verdict, SKU, GPU
    count, failing checks with their GPUs, what to do), not certified nodes first;
    then the details above for each node that is not certified, saying how the host
    was reached and how long it took; and at the end the summary
    (validator.report.fleet_text): the fleet line (``fleet: 64 hosts, 61 certified,
    2 not certified, 1 unknown``), a line per SKU with its burn-in median, a line per
    node to act on, and the overall verdict.

    Args:
        report: the acceptance report.
        color: add ANSI colours (only when writing to a terminal).
        quiet: a fleet's summary alone; one node's line alone.

    Returns:
        The text, lines at most about 100 columns except for long messages and a
        fleet's node lines that name several checks, ending in a newline.
    """
    paint = _Painter(color)
    if report.fleet is not None:
        return "\n\n".join(_fleet_blocks(report, paint, quiet=quiet)) + "\n"
    if quiet:
        lines = fleet_text.node_lines(report, _verdict_painter(paint))
        if len(report.nodes) != 1:
            lines.append(fleet_text.summary_lines(report, _verdict_painter(paint))[-1])
        return "\n".join(lines) + "\n"
    blocks = ["\n".join(_node_lines(node, paint)) for node in shared.reading_order(report)]
    if len(report.nodes) != 1:
        verdict = shared.overall_verdict(report)
        overall = paint(verdict.value, _VERDICT_COLOR[verdict])
        blocks.append(f"Overall: {overall}  {shared.overall_summary(report)}")
    return "\n\n".join(blocks) + "\n"
