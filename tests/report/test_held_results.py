"""A fleet holds each certified node without its telemetry samples, and nothing shows it.

Until its reports are written a fleet holds every host's result, and a default burn's
2,400 samples are most of a decoded host (issue 16: memory per node). A certified node
is held without them (``hold_without_samples``): its packed facts keep them for the
store and the host files, its GPUs' burn figures are worked out before they go, and
whatever shows the samples themselves takes them back. So every output made from a
held node must be the one made from the whole node: these compare them, format by format.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import weakref
from pathlib import Path

import pytest

from tests.report.test_report_junit import certified_8_gpu_node
from validator.model import (
    Action,
    Finding,
    FleetSummary,
    NodeResult,
    Report,
    Severity,
    Verdict,
    to_dict,
)
from validator.packed import (
    encode,
    facts_with_samples,
    packed_facts,
    packed_result,
    result_json,
    unpack,
    with_samples,
)
from validator.report.shared import hold_without_samples
from validator.service.collect_and_judge import Reach


@pytest.fixture
def whole() -> NodeResult:
    return certified_8_gpu_node()


@pytest.fixture
def held(whole: NodeResult) -> NodeResult:
    return hold_without_samples(whole)


def _demoted(node: NodeResult) -> NodeResult:
    """``node`` failed by the fleet comparison, as judge_fleet does it (the facts kept)."""
    slow = Finding(
        check="fleet.speed",
        severity=Severity.FAIL,
        message="GPU 3 at 61% of the fleet median",
        gpu_index=3,
        action=Action.DRAIN_RMA,
    )
    return dataclasses.replace(node, findings=(*node.findings, slow), verdict=Verdict.NOT_CERTIFIED)


def _fleet(*nodes: NodeResult) -> Report:
    certified = sum(1 for node in nodes if node.verdict is Verdict.CERTIFIED)
    summary = FleetSummary(len(nodes), certified, len(nodes) - certified, 0)
    return Report("2026-12-03T00:00:00Z", "test", nodes, fleet=summary)


def _renamed(node: NodeResult, name: str) -> NodeResult:
    return dataclasses.replace(
        node, hostname=name, facts=dataclasses.replace(node.facts, hostname=name)
    )


def test_a_held_node_keeps_no_sample(whole: NodeResult, held: NodeResult) -> None:
    assert whole.facts.burn is not None
    assert all(gpu.samples for gpu in whole.facts.burn.gpus)
    assert held.facts.burn is not None
    assert [gpu.samples for gpu in held.facts.burn.gpus] == [()] * len(whole.facts.burn.gpus)
    assert held.findings is whole.findings


def test_the_samples_come_back_equal(whole: NodeResult, held: NodeResult) -> None:
    assert with_samples(held) == whole
    assert with_samples(whole) is whole  # a whole node is given back as it is


@pytest.mark.parametrize("verdict", [Verdict.NOT_CERTIFIED, Verdict.UNKNOWN])
def test_only_a_certified_node_is_held_without_samples(whole: NodeResult, verdict: Verdict) -> None:
    failing = dataclasses.replace(whole, verdict=verdict)
    assert hold_without_samples(failing) is failing


def test_the_store_and_the_host_file_get_every_sample(whole: NodeResult, held: NodeResult) -> None:
    assert packed_facts(held.facts) == packed_facts(whole.facts)
    assert packed_result(held) == packed_result(whole)
    assert result_json(held) == result_json(whole)


def test_a_copy_of_held_facts_is_still_packed_with_its_samples(
    whole: NodeResult, held: NodeResult
) -> None:
    copy = dataclasses.replace(held.facts, hostname="renamed")
    expected = encode(to_dict(dataclasses.replace(whole.facts, hostname="renamed")))
    assert unpack(packed_facts(copy)) == expected
    assert facts_with_samples(copy) == dataclasses.replace(whole.facts, hostname="renamed")


def test_a_pending_result_keeps_every_sample(whole: NodeResult, held: NodeResult) -> None:
    from validator.store import _Recorded

    def pending(result: NodeResult) -> dict[str, object]:
        return _Recorded(result, None, "2026-12-03T00:00:00Z").to_json()

    assert pending(held) == pending(whole)


def _reports(whole: NodeResult, held: NodeResult) -> list[tuple[Report, Report]]:
    """The same fleets, of whole nodes and of held ones: certified, demoted, mixed."""
    others = [_renamed(whole, "peer-a"), _renamed(whole, "peer-b")]
    held_others = [hold_without_samples(node) for node in others]
    return [
        (_fleet(whole, *others), _fleet(held, *held_others)),
        (_fleet(_demoted(whole), *others), _fleet(_demoted(held), *held_others)),
        (_fleet(_demoted(whole)), _fleet(_demoted(held))),  # one node: its full section
    ]


def test_the_terminal_report_is_the_same(whole: NodeResult, held: NodeResult) -> None:
    from validator.report.terminal import render_text

    for of_whole, of_held in _reports(whole, held):
        assert render_text(of_held) == render_text(of_whole)


def test_the_html_report_and_the_detail_pages_are_the_same(
    whole: NodeResult, held: NodeResult
) -> None:
    from validator.report.html import render_html

    def detail(name: str) -> str:
        return f"hosts/{name}.html"

    for of_whole, of_held in _reports(whole, held):
        assert render_html(of_held) == render_html(of_whole)
        assert render_html(of_held, detail_files=detail) == render_html(
            of_whole, detail_files=detail
        )
    # A demoted node's own page charts its samples.
    page_of_held = render_html(Report("t", "test", (_demoted(held),)))
    assert page_of_held == render_html(Report("t", "test", (_demoted(whole),)))
    assert "<svg" in page_of_held


def test_the_json_reports_are_the_same(whole: NodeResult, held: NodeResult) -> None:
    from validator.report.json_report import JsonForm, json_chunks

    for of_whole, of_held in _reports(whole, held):
        for form in JsonForm:
            assert "".join(json_chunks(of_held, form)) == "".join(json_chunks(of_whole, form))


def test_the_junit_report_is_the_same(whole: NodeResult, held: NodeResult) -> None:
    from validator.report.junit import render_junit

    for of_whole, of_held in _reports(whole, held):
        assert render_junit(of_held) == render_junit(of_whole)


def test_the_rma_evidence_is_the_same(whole: NodeResult, held: NodeResult) -> None:
    from validator.report.rma import render_rma

    of_whole, of_held = _fleet(_demoted(whole)), _fleet(_demoted(held))
    files = render_rma(of_whole)
    assert files  # the demoted GPU's hardware action gives it a file
    assert "Telemetry over" in files[0].text
    assert render_rma(of_held) == files


def test_held_facts_go_with_their_result() -> None:
    """Nothing is kept past the held result: the fleet's memory goes down with it."""
    from validator import packed

    node = hold_without_samples(_renamed(certified_8_gpu_node(), "short-lived"))
    burn = node.facts.burn
    assert burn is not None
    assert packed._HELD_BURNS.get(burn) is not None
    key, gone = id(burn), weakref.ref(burn)
    del node, burn
    gc.collect()
    assert gone() is None  # the registry holds no strong reference
    assert key not in packed._HELD_BURNS._entries


def test_a_fleet_holds_its_certified_nodes_and_keeps_every_sample(tmp_path: Path) -> None:
    """Through the fleet path: held in the report, whole in history and in the host files."""
    from tests.remote.test_deadline import write_inventory
    from validator.model import TransportName
    from validator.node.burnin.burn_config import BurnConfig
    from validator.service.certify_service import CertifyRequest, run_certify
    from validator.store import Store

    names = ("gpu-a", "gpu-b", "gpu-c")
    inventory = write_inventory(
        tmp_path / "hosts.yml",
        {name: {"gpuready_simulate": "healthy-8x-h100-sxm"} for name in names},
    )
    request = CertifyRequest(
        reach=Reach(inventories=(str(inventory),), transport=TransportName.LOCAL),
        burn=BurnConfig(duration_s=1.0),
        interconnect=True,
        report_dir=str(tmp_path / "out"),
    )
    with Store.open(tmp_path / "h.db") as store:
        outcome = run_certify(request, store)
        assert [node.verdict for node in outcome.report.nodes] == [Verdict.CERTIFIED] * 3
        for node in outcome.report.nodes:
            assert node.facts.burn is not None
            assert not any(gpu.samples for gpu in node.facts.burn.gpus)
            recorded = store.result(outcome.run_id, node.hostname)
            assert recorded is not None
            assert recorded.facts.burn is not None
            assert all(gpu.samples for gpu in recorded.facts.burn.gpus)
            assert recorded.facts == with_samples(node).facts
            host_file = json.loads(
                (tmp_path / "out" / "hosts" / f"{node.hostname}.json").read_text()
            )
            assert all(gpu["samples"] for gpu in host_file["facts"]["burn"]["gpus"])
