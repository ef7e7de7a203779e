"""The report for a terminal: what an operator reads right after ``certify``.

Plain strings and optional ANSI colour; the CLI decides whether the stream is a
terminal. Text from devices is cleaned of control characters so a message can
never repaint the operator's screen.
"""

from __future__ import annotations

from validator.model import NodeResult, Report, Severity, Verdict
from validator.report import common

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


class _Painter:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if self.color else text


def _node_lines(node: NodeResult, paint: _Painter) -> list[str]:
    sku = node.sku or "no SKU matched"
    gpus = common.plural(len(node.facts.gpus), "GPU")
    verdict = paint(node.verdict.value, _VERDICT_COLOR[node.verdict])
    header = f"{paint(common.one_line(node.hostname), _BOLD)}  {verdict}  {sku}  {gpus}"
    lines = [header]
    if node.verdict is Verdict.UNKNOWN and node.summary:
        # Nothing could be judged: say why before the details, not after them.
        lines.append(f"  {paint(common.one_line(node.summary), _VERDICT_COLOR[node.verdict])}")
    findings = [f for f in common.sorted_findings(node.findings) if f.severity is not Severity.PASS]
    check_width = min(max((len(f.check) for f in findings), default=0), 32)
    for finding in findings:
        color = _SEVERITY_COLOR[finding.severity]
        severity = paint(finding.severity.value.ljust(_SEV_WIDTH), color)
        gpu = (common.gpu_label(finding) or "node").ljust(6)
        optional = "" if finding.required else " (optional)"
        message = common.one_line(finding.message)
        lines.append(f"  {severity}  {finding.check.ljust(check_width)}  {gpu}{message}{optional}")
    lines.append(f"  {common.count_severities(node.findings).line()}")
    if node.summary and node.verdict is not Verdict.UNKNOWN:
        lines.append(f"  {common.one_line(node.summary)}")
    return lines


def render_text(report: Report, *, color: bool = False) -> str:
    """Render the report for a terminal.

    Per node: a header (hostname, verdict, SKU, GPU count), each finding that did
    not pass (severity, check, GPU, message), the count line and the summary.
    Several nodes end with the overall verdict.

    Args:
        report: the acceptance report.
        color: add ANSI colours (only when writing to a terminal).

    Returns:
        The text, lines at most about 100 columns except for long messages,
        ending in a newline.
    """
    paint = _Painter(color)
    blocks = ["\n".join(_node_lines(node, paint)) for node in report.nodes]
    if len(report.nodes) != 1:
        verdict = common.overall_verdict(report)
        overall = paint(verdict.value, _VERDICT_COLOR[verdict])
        blocks.append(f"Overall: {overall}  {common.overall_summary(report)}")
    return "\n\n".join(blocks) + "\n"
