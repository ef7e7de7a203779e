"""The report as JUnit XML, for CI systems (GitLab, Jenkins, GitHub test reporters).

One ``<testsuite>`` per node, one ``<testcase>`` per finding; in a fleet report
(:func:`validator.report.shared.is_fleet`) a check's PASS findings are one passing
``<testcase>`` (``burn.tflops[passed]``), as the history store summarises them,
which keeps a thousand nodes' file a few MB. FAIL is a
``<failure>``, UNKNOWN an ``<error>`` (could not run is never a pass), WARN a
passing test with its message in ``<system-out>``. Each message ends with what to
do (``-> drain and RMA``) where the finding has an action, and the details name the
action and its source. A host that could not be
reached (its one finding ``transport.reach`` UNKNOWN) is an ``<error>`` like any
other unknown; the agent's stderr goes in the suite's ``<system-err>`` and the
host's elapsed time in its ``time``. Fleet findings (``fleet.speed``) are findings
of their node like the rest.

The stage across nodes (``certify --cross-node``), where it ran, is one more suite,
``fabric``: a case per pair or group test run (``gpuready.fabric.rdma``/``.nccl``), a
``<failure>`` below the floor, an ``<error>`` where it gave no figure (never a pass),
then each node's verdict in the fabric (``gpuready.fabric.node``: a ``<failure>`` with
why where the stage named it, ``<skipped>`` where it did not measure it). Beyond
:data:`FABRIC_CASES_LIMIT` tests (those that did not pass listed first) the rest are
counted in one case per kind and outcome, so a 10,000-node plan stays a bounded file.

Built with :mod:`xml.etree.ElementTree`, which escapes by construction; control
characters XML 1.0 cannot carry are made visible first.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from validator.model import (
    Action,
    CrossNodeStage,
    CrossNodeTest,
    Finding,
    NodeResult,
    Report,
    Severity,
    Verdict,
    provenance_of,
)
from validator.report import shared

SUITES_NAME = "gpuready"
FABRIC_SUITE = "fabric"
# Tests across nodes given a case each, at most (a 1,000-node plan runs about 1,000).
FABRIC_CASES_LIMIT = 1000


def _classname(hostname: str, check: str) -> str:
    return f"gpuready.{hostname}.{shared.check_family(check)}"


def _testcase_name(finding: Finding) -> str:
    label = shared.gpu_label(finding)
    return f"{finding.check}[{label}]" if label else finding.check


def _details(finding: Finding) -> str:
    lines = []
    if finding.observed:
        lines.append(f"observed: {finding.observed}")
    if finding.expected:
        lines.append(f"expected: {finding.expected}")
    if finding.gpu_uuid:
        lines.append(f"gpu_uuid: {finding.gpu_uuid}")
    if not finding.required:
        lines.append("required: no")
    if finding.action is not Action.NONE:
        source = f" ({finding.action_source})" if finding.action_source else ""
        lines.append(f"action: {finding.action.value}{source}")
    return shared.clean("\n".join(lines))


def _message(finding: Finding) -> str:
    """The finding's message on one line, what to do after it: ``... -> reset the GPU``."""
    message = shared.one_line(finding.message)
    if finding.action is Action.NONE:
        return message
    return f"{message} -> {shared.action_words(finding.action)}"


class _Tally:
    """Counts for one suite, as JUnit names them."""

    def __init__(self) -> None:
        self.tests = 0
        self.failures = 0
        self.errors = 0
        self.skipped = 0
        self.time_s = 0.0

    def add(self, other: _Tally) -> None:
        self.tests += other.tests
        self.failures += other.failures
        self.errors += other.errors
        self.skipped += other.skipped
        self.time_s += other.time_s

    def apply(self, element: ET.Element) -> None:
        element.set("tests", str(self.tests))
        element.set("failures", str(self.failures))
        element.set("errors", str(self.errors))
        element.set("skipped", str(self.skipped))
        element.set("time", f"{self.time_s:.3f}" if self.time_s > 0 else "0")


def _add_case(suite: ET.Element, classname: str, name: str, tally: _Tally) -> ET.Element:
    """A ``<testcase>`` in ``suite``, counted; its outcome is added by the caller."""
    tally.tests += 1
    attributes = {"classname": shared.clean(classname), "name": shared.clean(name), "time": "0"}
    return ET.SubElement(suite, "testcase", attributes)


def _add_finding(suite: ET.Element, hostname: str, finding: Finding, tally: _Tally) -> None:
    case = _add_case(suite, _classname(hostname, finding.check), _testcase_name(finding), tally)
    message = _message(finding)
    details = _details(finding)
    if finding.severity is Severity.FAIL:
        element = ET.SubElement(case, "failure", {"message": message, "type": "FAIL"})
        element.text = details
        tally.failures += 1
    elif finding.severity is Severity.UNKNOWN and finding.required:
        element = ET.SubElement(case, "error", {"message": message, "type": "UNKNOWN"})
        element.text = details
        tally.errors += 1
    elif finding.severity is Severity.UNKNOWN:
        # An optional check that could not be measured does not block the
        # certificate; "skipped" says "not run" without failing the pipeline.
        ET.SubElement(case, "skipped", {"message": f"UNKNOWN (optional check): {message}"})
        tally.skipped += 1
    elif finding.severity is Severity.WARN:
        out = ET.SubElement(case, "system-out")
        out.text = shared.clean("\n".join(filter(None, [f"WARN: {message}", details])))


def _add_verdict_case(suite: ET.Element, node: NodeResult, tally: _Tally) -> None:
    """A test for the verdict itself, so a node that is not certified never reads green.

    Only added when no finding already shows it: a node that could not be
    judged at all has no findings, and its suite would otherwise be empty.
    """
    case = _add_case(suite, f"gpuready.{node.hostname}.node", "verdict", tally)
    message = shared.one_line(node.summary or f"verdict {node.verdict.value}")
    if node.verdict is Verdict.NOT_CERTIFIED:
        ET.SubElement(case, "failure", {"message": message, "type": node.verdict.value})
        tally.failures += 1
    else:
        ET.SubElement(case, "error", {"message": message, "type": node.verdict.value})
        tally.errors += 1


def _add_passed(suite: ET.Element, hostname: str, passed: list[Finding], tally: _Tally) -> None:
    """One passing test for all of a check's PASS findings: ``burn.tflops[passed]``.

    The name holds no count, so a CI system's history of the test survives one GPU
    failing; which GPUs passed is in its output.
    """
    check = passed[0].check
    case = _add_case(suite, _classname(hostname, check), f"{check}[passed]", tally)
    gpus = _gpu_runs(sorted({f.gpu_index for f in passed if f.gpu_index is not None}))
    out = ET.SubElement(case, "system-out")
    noun = "finding" if len(passed) == 1 else "findings"
    out.text = shared.clean(f"PASS: {len(passed)} {noun}" + (f" ({gpus})" if gpus else ""))


def _gpu_runs(indexes: list[int]) -> str:
    """``gpu0-7`` for GPUs 0 to 7, ``gpu0, gpu1, gpu3`` where no three run on.

    A fleet's healthy node writes this once per check: eight GPUs named one by one
    were a fifth of its JUnit bytes.
    """
    runs: list[list[int]] = []
    for index in indexes:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    words: list[str] = []
    for run in runs:
        if len(run) >= 3:
            words.append(f"gpu{run[0]}-{run[-1]}")
        else:
            words += [f"gpu{index}" for index in run]
    return ", ".join(words)


def _suite(node: NodeResult, timestamp: str, *, compact: bool) -> tuple[ET.Element, _Tally]:
    facts = node.facts
    suite = ET.Element(
        "testsuite",
        {"name": shared.clean(node.hostname), "hostname": shared.clean(node.hostname)},
    )
    tally = _Tally()
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("verdict", node.verdict.value),
        ("sku", shared.show(node.sku)),
        ("summary", shared.one_line(node.summary)),
        ("driver_version", shared.show(facts.driver_version)),
        ("cuda_driver_version", shared.show(facts.cuda_driver_version)),
        ("gpu_count", str(len(facts.gpus))),
        ("source", shared.one_line(facts.source)),
        ("provenance", provenance_of(facts)),  # live | capture | simulate | unknown
        ("collected_at", shared.one_line(facts.collected_at)),
        ("policy_digest", shared.one_line(node.policy_digest)),
        ("transport", shared.one_line(node.transport)),
    ):
        ET.SubElement(properties, "property", {"name": name, "value": value})
    findings = shared.sorted_findings(node.findings)
    if compact:
        passed: dict[str, list[Finding]] = {}
        for finding in findings:
            if finding.severity is Severity.PASS:
                passed.setdefault(finding.check, []).append(finding)
        findings = [f for f in findings if f.severity is not Severity.PASS]
        for group in passed.values():
            _add_passed(suite, node.hostname, group, tally)
    for finding in findings:
        _add_finding(suite, node.hostname, finding, tally)
    if node.verdict is not Verdict.CERTIFIED and tally.failures + tally.errors == 0:
        _add_verdict_case(suite, node, tally)
    if node.agent_stderr.strip():
        # JUnit's suite-level system-err: CI shows it beside the suite's failures.
        err = ET.SubElement(suite, "system-err")
        err.text = shared.clean(node.agent_stderr)
    # The suite's time is the host's: connect to facts back.
    tally.time_s = max(node.elapsed_s, 0.0)
    tally.apply(suite)
    suite.set("timestamp", shared.one_line(facts.collected_at or timestamp))
    return suite, tally


def _hosts_name(hosts: tuple[str, ...]) -> str:
    """A test's nodes as its case name holds them: both ends of a pair, a group's first and last."""
    if len(hosts) <= 2:
        return "-".join(shared.one_line(host, 80) for host in hosts)
    return f"{shared.one_line(hosts[0], 80)}..{shared.one_line(hosts[-1], 80)} ({len(hosts)} nodes)"


def _add_fabric_test(suite: ET.Element, test: CrossNodeTest, tally: _Tally) -> None:
    name = f"round{test.round}[{_hosts_name(test.hosts)}]"
    case = _add_case(suite, f"gpuready.{FABRIC_SUITE}.{test.kind}", name, tally)
    nodes = ", ".join(shared.one_line(host, 80) for host in test.hosts)
    details = shared.clean(f"nodes: {nodes}\npurpose: {test.purpose}\nfloor: {test.floor:g}")
    if test.figure is None:
        why = shared.one_line(test.detail, 300) or "the test gave no result"
        element = ET.SubElement(case, "error", {"message": f"no result: {why}", "type": "UNKNOWN"})
        element.text = details
        tally.errors += 1
        return
    figure = f"{test.figure:,.1f} {test.unit}"
    if not test.passed:
        message = f"{figure} below the floor {test.floor:,.1f} {test.unit}"
        element = ET.SubElement(case, "failure", {"message": message, "type": "FAIL"})
        element.text = details
        tally.failures += 1
        return
    out = ET.SubElement(case, "system-out")
    out.text = shared.clean(f"PASS: {figure}, floor {test.floor:,.1f} {test.unit}")


def _add_folded(suite: ET.Element, tests: list[CrossNodeTest], tally: _Tally) -> None:
    """The tests beyond the limit: one case per kind and outcome, counted; never a pass unseen."""
    for kind in sorted({test.kind for test in tests}):
        passed = sum(1 for test in tests if test.kind == kind and test.passed)
        others = sum(1 for test in tests if test.kind == kind and not test.passed)
        classname = f"gpuready.{FABRIC_SUITE}.{kind}"
        if others:
            case = _add_case(suite, classname, f"{others} more not passed", tally)
            words = f"{others} more tests did not pass (below the floor or no result): report.json"
            ET.SubElement(case, "failure", {"message": words, "type": "FAIL"})
            tally.failures += 1
        if passed:
            case = _add_case(suite, classname, f"{passed} more passed", tally)
            out = ET.SubElement(case, "system-out")
            out.text = f"PASS: {passed} more tests, each at or above its floor (report.json)"


def _add_fabric_node(
    suite: ET.Element, hostname: str, verdict: tuple[str, str], tally: _Tally
) -> None:
    """The node's verdict in the fabric, as its certificate's ``fabric`` says it."""
    status, why = verdict[0], shared.one_line(verdict[1], 300)
    case = _add_case(suite, f"gpuready.{FABRIC_SUITE}.node", shared.one_line(hostname), tally)
    if status == "failed":
        ET.SubElement(case, "failure", {"message": why or "failed in the fabric", "type": "FAIL"})
        tally.failures += 1
    elif status == "not run":
        ET.SubElement(case, "skipped", {"message": f"not run in the fabric: {why}"})
        tally.skipped += 1
    else:
        out = ET.SubElement(case, "system-out")
        out.text = "certified in the fabric"


def _fabric_suite(report: Report, stage: CrossNodeStage) -> tuple[ET.Element, _Tally]:
    """The stage across nodes as one suite: its tests (bounded), then each node's verdict."""
    suite = ET.Element("testsuite", {"name": FABRIC_SUITE, "hostname": ""})
    tally = _Tally()
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("fabric", shared.one_line(stage.fabric, 80)),
        ("kinds", ",".join(stage.kinds)),
        ("nodes", str(len(stage.nodes))),
        ("rounds", str(stage.rounds)),
        ("max_out_of_service", str(stage.max_out_of_service)),
        ("interrupted", "yes" if stage.interrupted else "no"),
    ):
        ET.SubElement(properties, "property", {"name": name, "value": value})
    ordered = sorted(stage.tests, key=lambda test: test.passed)  # those not passed first
    for test in ordered[:FABRIC_CASES_LIMIT]:
        _add_fabric_test(suite, test, tally)
    _add_folded(suite, ordered[FABRIC_CASES_LIMIT:], tally)
    from validator.model.fabric_certified import fabric_verdicts

    nodes = shared.reading_order(report)
    verdicts = fabric_verdicts(stage, (node.hostname for node in nodes))
    for node in nodes:
        _add_fabric_node(suite, node.hostname, verdicts[node.hostname], tally)
    tally.apply(suite)
    suite.set("timestamp", shared.one_line(report.generated_at))
    return suite, tally


def render_junit(report: Report) -> str:
    """Render the report as a JUnit XML document (a fleet's PASS findings grouped by check).

    Args:
        report: the acceptance report.

    Returns:
        The XML text, with declaration and trailing newline.
    """
    root = ET.Element("testsuites", {"name": SUITES_NAME})
    total = _Tally()
    compact = shared.is_fleet(report)
    for node in shared.reading_order(report):
        suite, tally = _suite(node, report.generated_at, compact=compact)
        root.append(suite)
        total.add(tally)
    if report.cross_node is not None:
        suite, tally = _fabric_suite(report, report.cross_node)
        root.append(suite)
        total.add(tally)
    total.apply(root)
    root.set("timestamp", shared.one_line(report.generated_at))
    ET.indent(root, space="  ")
    body = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"
