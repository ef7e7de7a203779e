"""JUnit XML: counts, failure/error elements, escaping."""

from __future__ import annotations

import dataclasses
import functools
import xml.etree.ElementTree as ET

from tests.report.test_report_samples import (
    SCRIPT_DETAIL,
    TIMEOUT_DETAIL,
    burn_node,
    failing_node,
    fleet_report,
    healthy_node,
    sample_report,
    unreachable_node,
)
from validator.model import Action, Finding, NodeFacts, NodeResult, Report, Severity, Verdict
from validator.report.junit import render_junit


def _parse(text: str) -> ET.Element:
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    # Our own output, read with the stdlib parser the way a CI consumer would.
    return ET.fromstring(text.encode("utf-8"))  # noqa: S314


def _counts(element: ET.Element) -> tuple[int, int, int, int]:
    return (
        int(element.get("tests", "-1")),
        int(element.get("failures", "-1")),
        int(element.get("errors", "-1")),
        int(element.get("skipped", "-1")),
    )


def test_one_suite_per_node_with_correct_counts() -> None:
    root = _parse(render_junit(sample_report()))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["gpu-node-01", "gpu-node-02"]
    assert _counts(suites[0]) == (4, 0, 0, 0)
    assert _counts(suites[1]) == (6, 2, 1, 0)
    assert _counts(root) == (10, 2, 1, 0)
    # The attribute counts agree with the elements actually present.
    for suite in suites:
        cases = suite.findall("testcase")
        assert len(cases) == int(suite.get("tests", "-1"))
        assert len(suite.findall("testcase/failure")) == int(suite.get("failures", "-1"))
        assert len(suite.findall("testcase/error")) == int(suite.get("errors", "-1"))


def test_fail_is_failure_unknown_is_error_warn_passes() -> None:
    suite = _parse(render_junit(sample_report(failing_node())))[0]
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    remap = cases["memory.remap[gpu1]"]
    failure = remap.find("failure")
    assert failure is not None
    assert failure.get("message") == (
        "Row remap pending: reset the GPU before use. -> reset the GPU"
    )
    assert "observed: remap_pending=yes" in (failure.text or "")
    assert "action: reset_gpu (gpuready default)" in (failure.text or "")
    assert remap.get("classname") == "gpuready.gpu-node-02.memory"

    power = cases["power.limit[gpu1]"]
    error = power.find("error")
    assert error is not None
    assert error.get("message") == "Power limit not supported by this GPU. -> run it again"
    assert power.find("failure") is None

    thermal = cases["thermal.idle[gpu0]"]
    assert thermal.find("failure") is None
    assert thermal.find("error") is None
    out = thermal.find("system-out")
    assert out is not None
    assert (out.text or "").startswith("WARN: GPU 0 idles at 88 C")

    count = cases["gpu.count"]
    assert list(count) == []
    assert count.get("classname") == "gpuready.gpu-node-02.gpu"


def test_failing_cases_come_first() -> None:
    suite = _parse(render_junit(sample_report(failing_node())))[0]
    names = [case.get("name") for case in suite.findall("testcase")]
    assert names[:3] == ["memory.remap[gpu1]", "gpu.present[gpu2]", "power.limit[gpu1]"]


def test_optional_unknown_is_skipped_not_passed() -> None:
    node = healthy_node()
    optional = Finding("nvlink.state", Severity.UNKNOWN, "NVLink not queried.", required=False)
    node = dataclasses.replace(node, findings=(*node.findings, optional))
    suite = _parse(render_junit(sample_report(node)))[0]
    assert _counts(suite) == (5, 0, 0, 1)
    skipped = suite.find("testcase[@name='nvlink.state']/skipped")
    assert skipped is not None
    assert "NVLink not queried." in (skipped.get("message") or "")


def test_node_without_findings_is_not_green() -> None:
    dark = NodeResult(
        hostname="dark-01",
        verdict=Verdict.UNKNOWN,
        facts=NodeFacts(hostname="dark-01", source="live"),
        findings=(),
        summary="Host unreachable: connection refused.",
    )
    suite = _parse(render_junit(sample_report(dark)))[0]
    assert _counts(suite) == (1, 0, 1, 0)
    error = suite.find("testcase[@name='verdict']/error")
    assert error is not None
    assert error.get("message") == "Host unreachable: connection refused."


def test_hostile_text_is_escaped_and_still_parses() -> None:
    host = 'evil<>&"host'
    node = failing_node(host, message_extra=' <b>&"quoted"</b>\x1b[31m\nsecond line')
    text = render_junit(sample_report(node))
    assert "<b>" not in text
    assert "\x1b" not in text
    suite = _parse(text)[0]
    assert suite.get("name") == host
    failure = suite.find("testcase/failure")
    assert failure is not None
    assert failure.get("message") == (
        'Row remap pending: reset the GPU before use. <b>&"quoted"</b>\\x1b[31m second line'
        " -> reset the GPU"
    )
    classnames = {case.get("classname") for case in suite.findall("testcase")}
    assert f"gpuready.{host}.memory" in classnames


def test_testsuites_attributes() -> None:
    root = _parse(render_junit(sample_report()))
    assert root.get("name") == "gpuready"
    assert root.get("timestamp") == "2025-03-04T10:15:00Z"
    props = {p.get("name"): p.get("value") for p in root[1].findall("properties/property")}
    assert props["verdict"] == "NOT_CERTIFIED"
    assert props["sku"] == "h100-sxm5-80gb"
    assert props["gpu_count"] == "3"


def test_empty_report_is_valid_junit() -> None:
    root = _parse(render_junit(Report("2025-03-04T10:15:00Z", "0.1.0", ())))
    assert _counts(root) == (0, 0, 0, 0)
    assert list(root) == []


def test_burn_findings_are_ordinary_cases() -> None:
    node = burn_node(timeout_detail=TIMEOUT_DETAIL + SCRIPT_DETAIL)
    text = render_junit(sample_report(healthy_node(), node))
    assert "<script>" not in text
    suites = _parse(text).findall("testsuite")
    assert _counts(suites[1]) == (3, 2, 0, 0)
    names = [case.get("name") for case in suites[1].findall("testcase")]
    assert names == ["burn.correctness[gpu1]", "burn.completed[gpu2]", "burn.throughput[gpu0]"]
    props = {p.get("name"): p.get("value") for p in suites[1].findall("properties/property")}
    assert props["gpu_count"] == "3"


# ------------------------------------------------------------------ fleet


def test_unreachable_node_is_an_error() -> None:
    root = _parse(render_junit(sample_report(healthy_node(), unreachable_node())))
    suites = root.findall("testsuite")
    assert _counts(suites[1]) == (1, 0, 1, 0)
    (case,) = suites[1].findall("testcase")
    assert case.get("name") == "transport.reach"
    error = case.find("error")
    assert error is not None
    assert error.get("type") == "UNKNOWN"
    assert "Connection timed out" in (error.get("message") or "")
    assert suites[1].get("time") == "30.000"
    props = {p.get("name"): p.get("value") for p in suites[1].findall("properties/property")}
    assert props["transport"] == "ssh"
    assert props["gpu_count"] == "0"
    err = suites[1].find("system-err")
    assert err is not None
    assert err.text == "warning: nvidia-smi slow to answer\n<b>agent</b> exited 255\\x1b[31m\n"
    assert suites[0].find("system-err") is None
    assert _counts(root) == (5, 0, 1, 0)


def test_optional_unreachable_finding_still_errors_via_the_verdict() -> None:
    node = unreachable_node()
    node = dataclasses.replace(
        node, findings=(dataclasses.replace(node.findings[0], required=False),)
    )
    suite = _parse(render_junit(sample_report(node))).findall("testsuite")[0]
    assert _counts(suite) == (2, 0, 1, 1)


def test_fleet_of_64_totals() -> None:
    root = _parse(render_junit(fleet_report(64, failing=(17, 40), unknown=(5,))))
    suites = root.findall("testsuite")
    assert len(suites) == 64
    # healthy: 3 tests (4 PASS findings of 3 checks); failing: 6 tests (2 PASS findings of
    # 2 checks, 4 others), 2 failures, 1 error; unreachable: 1 test, 1 error.
    assert _counts(root) == (61 * 3 + 2 * 6 + 1, 2 * 2, 2 * 1 + 1, 0)
    assert sum(_counts(s)[0] for s in suites) == _counts(root)[0]
    assert [s.get("name") for s in suites[:4]] == ["gpu18", "gpu41", "gpu06", "gpu01"]
    total = sum(float(s.get("time", "0")) for s in suites)
    assert float(root.get("time", "0")) == round(total, 3)


def test_a_finding_without_an_action_has_no_arrow() -> None:
    node = failing_node()
    bare = tuple(
        dataclasses.replace(f, action=Action.NONE, action_source="") for f in node.findings
    )
    text = render_junit(sample_report(dataclasses.replace(node, findings=bare)))
    assert "->" not in text
    assert "action:" not in text


def test_a_fleet_reports_each_checks_passes_as_one_case_and_every_other_finding_alone() -> None:
    report = fleet_report(8, failing=(3,))
    suites = {s.get("name"): s for s in _parse(render_junit(report)).findall("testsuite")}
    healthy, failing = report.nodes[0], report.nodes[3]
    assert (healthy.verdict, failing.verdict) == (Verdict.CERTIFIED, Verdict.NOT_CERTIFIED)
    cases = {case.get("name"): case for case in suites[healthy.hostname].findall("testcase")}
    assert sorted(cases) == [
        "driver.version[passed]",
        "gpu.count[passed]",
        "memory.capacity[passed]",
    ]
    # A name without a count (a CI system keeps the test's history when a GPU fails); the
    # GPUs that passed are in its output, and nothing in it reads as a failure.
    assert (
        cases["memory.capacity[passed]"].findtext("system-out") == "PASS: 2 findings (gpu0, gpu1)"
    )
    assert cases["gpu.count[passed]"].findtext("system-out") == "PASS: 1 finding"
    assert not suites[healthy.hostname].findall("testcase/failure")
    assert not suites[healthy.hostname].findall("testcase/error")
    failed = {
        c.get("name")
        for c in suites[failing.hostname].findall("testcase")
        if c.find("failure") is not None
        or c.find("error") is not None
        or c.find("skipped") is not None
        or (c.findtext("system-out") or "").startswith("WARN")
    }
    assert failed == {
        "thermal.idle[gpu0]",
        "memory.remap[gpu1]",
        "power.limit[gpu1]",
        "gpu.present[gpu2]",
    }
    # One node alone keeps a case per finding, as before.
    alone = _parse(render_junit(sample_report(healthy))).findall("testsuite")[0]
    assert len(alone.findall("testcase")) == len(healthy.findings)


def test_a_checks_passing_gpus_read_as_runs() -> None:
    node = healthy_8_gpu_fleet(2).nodes[0]
    passed = {
        case.get("name"): case.findtext("system-out")
        for case in _parse(render_junit(healthy_8_gpu_fleet(2))).iter("testcase")
        if (case.get("classname") or "").startswith(f"gpuready.{node.hostname}.")
    }
    assert passed["burn.speed[passed]"] == "PASS: 8 findings (gpu0-7)"
    assert passed["burn.xid[passed]"] == "PASS: 1 finding"
    gaps = [
        dataclasses.replace(f, gpu_index=i)
        for f, i in zip(
            [f for f in node.findings if f.check == "burn.speed"], (0, 1, 3, 4, 5, 7, 7, 9)
        )
    ]
    one = dataclasses.replace(node, findings=tuple(gaps))
    report = dataclasses.replace(healthy_8_gpu_fleet(2), nodes=(one, one))
    texts = {case.findtext("system-out") for case in _parse(render_junit(report)).iter("testcase")}
    assert texts == {"PASS: 8 findings (gpu0, gpu1, gpu3-5, gpu7, gpu9)"}


def test_a_fleets_healthy_node_costs_under_twelve_kilobytes() -> None:
    """Issue 16: a thousand-node report stays small; each healthy 8-GPU node <= 10 KB then.

    Issue 34 added four families beside the GPUs (network cards, GPUDirect readiness, the
    host, the container runtime): 14 test cases a healthy node, about 1.6 KB, their quiet
    checks folded into one PASS each: 12 KB a node.
    """
    one = len(render_junit(healthy_8_gpu_fleet(2)).encode())
    hundred = len(render_junit(healthy_8_gpu_fleet(102)).encode())
    assert (hundred - one) / 100 <= 12 * 1024


@functools.cache
def certified_8_gpu_node() -> NodeResult:
    """A certified 8-GPU node: a simulated 1 s burn, the interconnect measured (made once)."""
    from tests.collecting import collect_simulated
    from validator.judge import judge_node
    from validator.judge.policy import Policy
    from validator.node.burnin.burn_config import BurnConfig

    facts = collect_simulated(
        "healthy-8x-h100-sxm", burn=BurnConfig(duration_s=1.0), interconnect="on"
    )
    result = judge_node(facts, Policy())
    assert result.verdict is Verdict.CERTIFIED
    return result


def healthy_8_gpu_fleet(nodes: int) -> Report:
    """``nodes`` certified 8-GPU nodes (a simulated burn, the interconnect measured)."""
    from validator.model import FleetSummary

    base = certified_8_gpu_node()
    results = tuple(
        dataclasses.replace(
            base,
            hostname=f"gpu{i:05d}",
            facts=dataclasses.replace(base.facts, hostname=f"gpu{i:05d}"),
        )
        for i in range(nodes)
    )
    return Report("2026-12-03T00:00:00Z", "test", results, fleet=FleetSummary(nodes, nodes, 0, 0))
