"""JUnit of the stage across nodes: one suite, a case per test run, each node's fabric verdict.

Read back with the stdlib parser as a CI consumer reads it; counts are checked against the
stage's own tests, never against numbers written here.
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

from tests.report.cross_node_samples import HOSTILE, sample_stage
from tests.report.test_report_samples import healthy_node, sample_report
from validator.model import CrossNodeStage, CrossNodeTest, KindOutcome, Named, Report
from validator.report.junit import FABRIC_CASES_LIMIT, render_junit


def _parse(text: str) -> ET.Element:
    return ET.fromstring(text.encode("utf-8"))  # noqa: S314 - our own output


def _report(stage: CrossNodeStage, hosts: tuple[str, ...] = ("n1", "n2", "n3", "n4")) -> Report:
    nodes = tuple(healthy_node(host) for host in hosts)
    return dataclasses.replace(sample_report(*nodes), cross_node=stage)


def _fabric(root: ET.Element) -> ET.Element:
    (suite,) = [s for s in root.findall("testsuite") if s.get("name") == "fabric"]
    return suite


def _counts(element: ET.Element) -> tuple[int, int, int, int]:
    return tuple(int(element.get(k, "-1")) for k in ("tests", "failures", "errors", "skipped"))  # type: ignore[return-value]


def test_one_suite_a_case_per_test_and_per_node() -> None:
    stage = sample_stage()
    root = _parse(render_junit(_report(stage)))
    suite = _fabric(root)
    tests = [
        c for c in suite.findall("testcase") if c.get("classname", "").endswith((".rdma", ".nccl"))
    ]
    assert len(tests) == len(stage.tests)
    failed = [c for c in tests if c.find("failure") is not None]
    assert len(failed) == sum(1 for t in stage.tests if t.figure is not None and not t.passed)
    assert all("below the floor" in c.find("failure").get("message", "") for c in failed)  # type: ignore[union-attr]
    errors = [c for c in tests if c.find("error") is not None]
    assert len(errors) == sum(1 for t in stage.tests if t.figure is None) == 1
    assert "Couldn't connect to n3:18515" in errors[0].find("error").get("message", "")  # type: ignore[union-attr]
    nodes = {
        c.get("name"): c
        for c in suite.findall("testcase")
        if c.get("classname") == "gpuready.fabric.node"
    }
    assert set(nodes) == {"n1", "n2", "n3", "n4"}
    assert nodes["n1"].find("failure") is None
    assert nodes["n1"].find("error") is None
    why = nodes["n4"].find("failure")
    assert why is not None
    assert "140.4" in why.get("message", "")
    counted = len(suite.findall("testcase")), len(suite.findall("testcase/failure"))
    assert _counts(suite)[:2] == counted
    assert _counts(root)[0] == sum(_counts(s)[0] for s in root.findall("testsuite"))


def test_a_node_the_stage_did_not_run_on_is_skipped_never_passed() -> None:
    stage = dataclasses.replace(
        sample_stage(),
        outcomes=(KindOutcome("rdma", 380.0, "catalog", skipped="no fabric matched"),),
    )
    suite = _fabric(_parse(render_junit(_report(stage, ("n1", "n9")))))
    nodes = {
        c.get("name"): c
        for c in suite.findall("testcase")
        if c.get("classname") == "gpuready.fabric.node"
    }
    for case in nodes.values():
        skipped = case.find("skipped")
        assert skipped is not None
        assert case.find("system-out") is None
    assert "no fabric matched" in nodes["n1"].find("skipped").get("message", "")  # type: ignore[union-attr]


def test_a_report_without_the_stage_has_no_fabric_suite() -> None:
    root = _parse(render_junit(sample_report()))
    assert [s for s in root.findall("testsuite") if s.get("name") == "fabric"] == []


def test_hostile_node_text_is_escaped_and_parses() -> None:
    stage = sample_stage(hostile=True)
    text = render_junit(_report(stage, ("n1", "n2", "n3", "n4", HOSTILE)))
    assert "\x1b" not in text
    suite = _fabric(_parse(text))
    names = [c.get("name", "") for c in suite.iter("testcase")]
    assert all("\n" not in name and "\x1b" not in name for name in names)


def _thousand_node_stage(nodes: int = 1000) -> CrossNodeStage:
    """Round 1 pairs every node, then log2 rounds of bisection tests: a 1,000-node plan."""
    hosts = tuple(f"gpu{index:04d}" for index in range(nodes))
    tests: list[CrossNodeTest] = []
    round_ = 1
    for size in (2, 2, 4, 8, 16, 32, 64):
        for start in range(0, nodes - size + 1, size):
            group = hosts[start : start + size]
            slow = "gpu0013" in group
            figure = 140.0 if slow else 390.0
            tests.append(CrossNodeTest(round_, "rdma", group, figure, 380.0, not slow, "first"))
        round_ += 1
    outcome = KindOutcome(
        "rdma", 380.0, "catalog", good=tuple(host for host in hosts if host != "gpu0013"),
        slow_nodes=(Named(("gpu0013",), "140.0 Gb/s below 380"),), rounds=round_,
    )  # fmt: skip
    return CrossNodeStage(("rdma",), "ndr-400-ib", hosts, tuple(tests), (outcome,))


def test_a_thousand_node_plan_is_bounded() -> None:
    stage = _thousand_node_stage()
    assert len(stage.tests) > FABRIC_CASES_LIMIT
    one = healthy_node("gpu0000")
    report = Report(
        "2026-12-07T00:00:00Z", "test",
        tuple(dataclasses.replace(one, hostname=host) for host in stage.nodes),
        cross_node=stage,
    )  # fmt: skip
    suite = _fabric(_parse(render_junit(report)))
    cases = suite.findall("testcase")
    tests = [c for c in cases if c.get("classname") == "gpuready.fabric.rdma"]
    nodes = [c for c in cases if c.get("classname") == "gpuready.fabric.node"]
    assert len(nodes) == len(stage.nodes)
    assert len(tests) <= FABRIC_CASES_LIMIT + 2  # the rest folded: a case per kind and outcome
    # every test that did not pass is its own case or counted as failed: none passes unseen
    not_passed = sum(1 for t in stage.tests if not t.passed)
    failures = [c for c in tests if c.find("failure") is not None]
    alone = [c for c in failures if "more" not in c.get("name", "")]
    assert len(alone) == min(not_passed, FABRIC_CASES_LIMIT)
    folded = [c for c in tests if "more" in c.get("name", "")]
    assert folded, "the tests beyond the limit are summarised"
    summary = " ".join(c.findtext("system-out") or "" for c in folded)
    assert str(len(stage.tests) - FABRIC_CASES_LIMIT) in summary
    size = len(ET.tostring(suite))
    assert size < 400 * 1024, size


def test_the_fleets_fabric_verdicts_are_the_certificates() -> None:
    from validator.model.fabric_certified import certified_fabric, fabric_verdicts

    skipped = dataclasses.replace(
        sample_stage(), outcomes=(KindOutcome("rdma", 380.0, "catalog", skipped="no fabric"),)
    )
    for stage in (
        sample_stage(hostile=True),
        skipped,
        dataclasses.replace(sample_stage(), outcomes=()),
    ):
        hosts = (*stage.nodes, "n9")
        verdicts = fabric_verdicts(stage, hosts)
        for host in hosts:
            fabric = certified_fabric(stage, host, "2026-12-07T00:00:00+00:00")
            assert fabric is not None
            assert verdicts[host] == (fabric.status, fabric.why), host
    assert fabric_verdicts(sample_stage(), ["n4"])["n4"][0] == "failed"


def test_every_certificates_fabric_of_a_two_thousand_node_stage_is_read_at_once() -> None:
    """certify asks certified_fabric once per certified node, for every node of the stage.

    Before, ``CrossNodeStage.good`` looked each node up in each kind's good tuple: 8 * 10^9
    comparisons for these 2,000 nodes (minutes, which the suite's durations would show);
    read through sets it is under a second. Timing is bench/'s, not this test's.
    """
    from validator.model.fabric_certified import certified_fabric

    stage = _thousand_node_stage(2000)
    statuses = [certified_fabric(stage, host, "2026-12-07").status for host in stage.nodes]  # type: ignore[union-attr]
    assert statuses.count("failed") == 1
    assert statuses.count("certified") == len(stage.nodes) - 1


def test_a_node_rdma_failed_is_failed_though_nccl_was_skipped() -> None:
    """A kind left unrun (no NCCL floor for the size) never hides another kind's failure."""
    from validator.model.fabric_certified import certified_fabric, fabric_verdicts

    stage = sample_stage()
    rdma, nccl = stage.outcomes
    skipped = "the fabric catalog states no NCCL all-reduce floor for groups of 2"
    stage = dataclasses.replace(
        stage, outcomes=(rdma, dataclasses.replace(nccl, good=(), skipped=skipped))
    )
    verdicts = fabric_verdicts(stage, ["n1", "n4"])
    assert verdicts["n4"][0] == "failed"
    assert verdicts["n4"][1].startswith("rdma: ")
    assert verdicts["n1"] == ("not run", skipped)  # good in RDMA, NCCL not run: not whole
    fabric = certified_fabric(stage, "n4", "2026-12-07T00:00:00+00:00")
    assert fabric is not None
    assert (fabric.status, fabric.why) == verdicts["n4"]
