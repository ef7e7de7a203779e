"""Drift of the measured bandwidths (drift.interconnect): each certified figure against now.

The baseline is the healthy 8x H100 SXM scenario burned and measured with its
interconnect (figures shaped on the recorded 8x H200 nccl-tests run and nvbandwidth's
README: H2D ~55 GB/s, HBM copy ~2880 GB/s, P2P ~394 GB/s, busbw 475 GB/s at 4 GiB), so
the certificate holds schema 3's figures. Then the fault scenarios measured again: a
riser at x8, one NVLink down, a degraded NVSwitch, HBM slow on one GPU; and the figures
changed by hand where no scenario says it (one pair slow, a figure not measured now, a
GPU busy). A schema-2 certificate (``tests/fixtures/certificates/``, issued and signed by
gpuready at commit c39f72b, before the figures) still verifies and is no baseline.
"""

from __future__ import annotations

import dataclasses
import datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import parser

from tests.collecting import collect_simulated
from tests.drift.test_drift_interconnect import now_facts as schema_2_facts
from validator.certificate import (
    Certificate,
    CertifiedAllReduce,
    certificate_from_json,
    issue_certificate,
    verify_certificate,
)
from validator.drift import compare, drift_node, nhc_line
from validator.judge import Policy, Thresholds, judge_node
from validator.judge.catalog import load_catalog
from validator.judge.checks.interconnect import (
    BASEBOARD_SOURCE,
    CORRUPTION_SOURCE,
    HBM_SOURCE,
    PCIE_SOURCE,
)
from validator.judge.checks.nvlink import link_repair
from validator.model import (
    DRIFT_CHECKS,
    Action,
    AllReduce,
    Bandwidth,
    DriftCheck,
    Finding,
    Interconnect,
    NodeFacts,
    Reason,
    Severity,
    Unavailable,
    Verdict,
)
from validator.node.burnin.burn_config import BurnConfig
from validator.report.drift_text import render_drift_text
from validator.report.prometheus import render_prometheus

HEALTHY = "healthy-8x-h100-sxm"
POLICY = Policy()
CHECK = DriftCheck.INTERCONNECT.value
FIXTURES = Path(__file__).parent.parent / "fixtures" / "certificates"
SCHEMA_2 = FIXTURES / "schema2-h100-node-01-signed.json"
SCHEMA_2_KEY = b"schema-2-test-key"
SCHEMA_1 = FIXTURES / "schema1-h100-node-01-signed.json"
SXM_LINKS = link_repair(load_catalog().get("h100-sxm"))
NOW = datetime.datetime(2026, 2, 1, 12, 0, tzinfo=datetime.timezone.utc)


@cache
def baseline() -> Certificate:
    facts = collect_simulated(HEALTHY, burn=BurnConfig(duration_s=1.0), interconnect="on")
    result = judge_node(facts, POLICY)
    assert result.verdict is Verdict.CERTIFIED, result.summary
    cert = issue_certificate(result)
    assert cert.bandwidth_figures == 8 * 3 + 56 + 1
    return cert


@cache
def measured(scenario: str = HEALTHY) -> NodeFacts:
    """A drift run with --interconnect: no burn-in, the interconnect measured."""
    return collect_simulated(scenario, interconnect="on")


def measured_interconnect(facts: NodeFacts | None = None) -> Interconnect:
    interconnect = (facts or measured()).interconnect
    assert interconnect is not None
    return interconnect


def with_interconnect(facts: NodeFacts | None = None, **changes: Any) -> NodeFacts:
    facts = facts or measured()
    changed = dataclasses.replace(measured_interconnect(facts), **changes)
    return dataclasses.replace(facts, interconnect=changed)


def drift(facts: NodeFacts, cert: Certificate | None = None) -> list[Finding]:
    """The drift.interconnect findings that are not PASS."""
    return [
        f
        for f in compare(cert or baseline(), facts, POLICY)
        if f.check == CHECK and f.severity is not Severity.PASS
    ]


def passes(facts: NodeFacts, cert: Certificate | None = None) -> list[Finding]:
    return [
        f
        for f in compare(cert or baseline(), facts, POLICY)
        if f.check == CHECK and f.severity is Severity.PASS
    ]


def with_peers(changes: dict[tuple[int, int], Any], facts: NodeFacts | None = None) -> NodeFacts:
    """The pairs ``(src, dst)`` with their fields changed (a float: its unidirectional GB/s)."""
    peers = measured_interconnect(facts).peers
    assert isinstance(peers, tuple)

    def changed(peer: Any) -> Any:
        change = changes.get((peer.src, peer.dst))
        if change is None:
            return peer
        if isinstance(change, float):
            return dataclasses.replace(peer, unidirectional=Bandwidth(change))
        return dataclasses.replace(peer, **change)

    return with_interconnect(facts, peers=tuple(changed(peer) for peer in peers))


# ------------------------------------------------------------------ as certified


def test_the_same_figures_are_as_certified() -> None:
    assert drift(measured()) == []
    found = passes(measured())
    # One per GPU, one for the pairs, one for the all-reduce.
    assert len(found) == 10
    gpu0 = next(f for f in found if f.gpu_index == 0)
    assert gpu0.message == (
        "GPU 0: H2D 55.2 GB/s, D2H 55.1 GB/s, HBM 2878 GB/s within 15% of the certificate"
    )
    assert "P2P of the 56 certified GPU pairs within 15% of the certificate" in {
        f.message for f in found
    }
    assert drift_node(measured(), baseline(), POLICY).verdict is Verdict.CERTIFIED


def test_a_fall_within_the_drop_is_no_drift_and_the_policy_sets_the_drop() -> None:
    copies = measured_interconnect().gpus
    assert isinstance(copies, tuple)
    slower = (dataclasses.replace(copies[0], h2d=Bandwidth(55.22 * 0.88)), *copies[1:])
    facts = with_interconnect(gpus=slower)
    assert drift(facts) == []
    strict = Policy(thresholds=Thresholds(drift_interconnect_drop=0.10))
    found = [
        f
        for f in compare(baseline(), facts, strict)
        if f.check == CHECK and f.severity is Severity.FAIL
    ]
    assert [(f.gpu_index, f.observed) for f in found] == [(0, "H2D 48.6 GB/s")]


def test_no_interconnect_measured_now_says_nothing() -> None:
    facts = dataclasses.replace(measured(), interconnect=None)
    assert [f for f in compare(baseline(), facts, POLICY) if f.check == CHECK] == []


# ------------------------------------------------------------------ what fell


def test_h2d_halved_by_a_riser_at_x8_is_drift_on_that_gpu() -> None:
    found = drift(measured("pcie-riser-x8-h2d-half"))
    assert [(f.severity, f.gpu_index, f.observed) for f in found] == [
        (Severity.FAIL, 1, "H2D 27.7 GB/s"),
        (Severity.FAIL, 1, "D2H 27.6 GB/s"),
    ]
    h2d = found[0]
    assert (
        h2d.message == "GPU 1: H2D 27.7 GB/s, 50% of the certified 55.3 GB/s (more than 15% below)"
    )
    assert h2d.expected == ">= 47.0 GB/s (55.3 GB/s certified, -15%)"
    assert (h2d.action, h2d.action_source) == (Action.RESEAT_CABLE_RISER, PCIE_SOURCE)
    assert h2d.gpu_uuid == baseline().gpus[1].uuid


def test_hbm_slow_on_one_gpu_is_the_chip() -> None:
    (found,) = drift(measured("hbm-slow-one-gpu"))
    assert (found.gpu_index, found.observed) == (3, "HBM 1731 GB/s")
    assert (found.action, found.action_source) == (Action.DRAIN_RMA, HBM_SOURCE)


def test_one_pair_slowed_names_the_pair() -> None:
    found = drift(with_peers({(2, 5): 300.0}))
    assert [(f.severity, f.gpu_index) for f in found] == [(Severity.FAIL, None)]
    assert found[0].message == (
        "P2P GPU 2 -> GPU 5 fell (more than 15% below the certificate): 300 GB/s, 76% of the "
        "certified 395 GB/s"
    )
    assert found[0].observed == "GPU 2 -> GPU 5 300 GB/s"
    assert (found[0].action, found[0].action_source) == SXM_LINKS  # as nvlink.links on SXM


def test_both_ways_of_a_pair_and_lost_access_are_one_finding() -> None:
    (found,) = drift(with_peers({(2, 5): 300.0, (5, 2): {"access": False}}))
    assert found.message == (
        "P2P GPUs 2 and 5 both ways fell (more than 15% below the certificate): 300 GB/s, 76% "
        "of the certified 395 GB/s; no peer access now on 1 (certified at 395 GB/s)"
    )
    assert found.severity is Severity.FAIL


def test_one_nvlink_down_is_that_gpus_links_and_explains_the_all_reduce() -> None:
    found = drift(measured("nvlink-down-slow-peers"))
    gpu = next(f for f in found if f.gpu_index is not None)
    assert gpu.gpu_index == 6
    assert gpu.message == (
        "GPU 6: P2P to and from all 7 of its peers fell (more than 15% below the "
        "certificate): 131-132 GB/s, 33% of the certified 394-396 GB/s: its links"
    )
    assert gpu.observed == "131-132 GB/s on 14 pairs"
    assert (gpu.action, gpu.action_source) == SXM_LINKS
    (all_reduce,) = [f for f in found if f.gpu_index is None]
    assert all_reduce.message.endswith(": the pairs that fell explain it")
    assert (all_reduce.action, all_reduce.action_source) == SXM_LINKS
    assert len(found) == 2  # no finding per pair


def test_a_degraded_nvswitch_lowers_the_all_reduce_only() -> None:
    (found,) = drift(measured("nvswitch-degraded-all-reduce-low"))
    assert found.message == (
        "All-reduce busbw 200 GB/s at 4 GiB over 8 GPUs, 42% of the certified 475 GB/s "
        "(more than 15% below): the fabric the GPUs share"
    )
    assert found.expected == ">= 404 GB/s (475 GB/s certified, -15%)"
    assert (found.action, found.action_source) == (Action.DRAIN_RMA, BASEBOARD_SOURCE)


def test_a_wrong_all_reduce_now_is_drift_whatever_its_speed() -> None:
    run = measured_interconnect().all_reduce
    assert isinstance(run, AllReduce)
    assert isinstance(run.points, tuple)
    wrong = (dataclasses.replace(run.points[0], wrong=12), *run.points[1:])
    (found,) = drift(with_interconnect(all_reduce=dataclasses.replace(run, points=wrong)))
    assert (found.severity, found.observed, found.action) == (
        Severity.FAIL,
        "12 wrong",
        Action.DRAIN_RMA,
    )


def test_a_gpu_busy_now_is_not_called_drift() -> None:
    facts = with_interconnect(measured("pcie-riser-x8-h2d-half"), busy_gpus=(1,))
    found = drift(facts)
    assert {(f.severity, f.gpu_index, f.required) for f in found} == {(Severity.UNKNOWN, 1, True)}
    assert found[0].message.endswith(
        "but the GPU was busy when measured: measure it again with it idle"
    )


# ------------------------------------------------------------------ not measured now


@pytest.mark.parametrize(
    ("why", "words", "required"),
    [
        (
            Unavailable(Reason.ERROR, "no time left for the peer matrix"),
            "error: no time left for the peer matrix",
            True,
        ),
        (
            Unavailable(Reason.NOT_MEASURED, "peers not asked for"),
            "not measured: peers not asked for",
            False,
        ),
    ],
)
def test_pairs_not_measured_now_are_unknown(why: Unavailable, words: str, required: bool) -> None:
    (found,) = drift(with_interconnect(peers=why))
    assert (found.severity, found.required, found.gpu_index) == (Severity.UNKNOWN, required, None)
    assert found.message == (
        f"The GPU pairs' copies were not measured now: {words}; the 56 certified figures are "
        "not compared"
    )


def test_a_figure_that_failed_now_is_a_required_unknown_on_its_gpu() -> None:
    copies = measured_interconnect().gpus
    assert isinstance(copies, tuple)
    failed = Bandwidth(Unavailable(Reason.ERROR, "cudaMemcpyAsync: an illegal memory access"))
    facts = with_interconnect(
        gpus=(*copies[:4], dataclasses.replace(copies[4], hbm=failed), *copies[5:])
    )
    (found,) = drift(facts)
    assert (found.severity, found.gpu_index, found.required) == (Severity.UNKNOWN, 4, True)
    assert found.message.startswith(
        "GPU 4: HBM was certified at 2876 GB/s and was not measured now: error: cudaMemcpyAsync"
    )
    assert drift_node(facts, baseline(), POLICY).verdict is not Verdict.CERTIFIED


def test_a_pair_without_a_figure_now_and_the_all_reduce_not_run() -> None:
    failed = {"unidirectional": Bandwidth(Unavailable(Reason.ERROR, "cudaMemcpyPeerAsync failed"))}
    facts = with_peers({(0, 7): failed})
    facts = with_interconnect(facts, all_reduce=Unavailable(Reason.ERROR, "libnccl.so.2 not found"))
    found = drift(facts)
    assert {(f.severity, f.required) for f in found} == {(Severity.UNKNOWN, True)}
    assert [f.message.split(":")[0] for f in found] == [
        "P2P of 1 certified GPU pairs was not measured now",
        "The all-reduce at 4 GiB over 8 GPUs was not measured now",
    ]


def test_a_measurement_that_could_not_start_is_one_required_unknown() -> None:
    (found,) = drift(with_interconnect(error="libcudart.so not found"))
    assert (found.severity, found.required) == (Severity.UNKNOWN, True)
    assert found.message == (
        "The interconnect could not be measured now: libcudart.so not found; the 81 certified "
        "bandwidth figures are not compared"
    )


def test_a_swapped_gpu_leaves_its_figures_to_the_swap() -> None:
    gpus = tuple(
        dataclasses.replace(gpu, uuid="GPU-00000000-1111-2222-3333-444444444444")
        if gpu.index == 5
        else gpu
        for gpu in measured("hbm-slow-one-gpu").gpus
    )
    facts = with_peers({(5, 2): 100.0, (2, 5): 100.0}, measured("hbm-slow-one-gpu"))
    facts = dataclasses.replace(facts, gpus=gpus)
    found = drift(facts)
    assert [f.gpu_index for f in found] == [3]  # GPU 3's HBM; nothing of GPU 5 or its pairs
    assert "drift.gpu_swapped" in {f.check for f in compare(baseline(), facts, POLICY)}


# ------------------------------------------------------------------ older certificates


def test_a_schema_2_certificate_still_verifies_and_drifts_without_a_baseline() -> None:
    old = certificate_from_json(SCHEMA_2.read_text())
    verify_certificate(old, SCHEMA_2_KEY)
    facts = dataclasses.replace(schema_2_facts(), interconnect=measured_interconnect())
    (note,) = [f for f in compare(old, facts, POLICY) if f.check == CHECK]
    assert (note.severity, note.required) == (Severity.UNKNOWN, False)
    assert note.message == (
        "The certificate of h100-node-01 issued 2026-01-01T12:00:00+00:00 predates drift's "
        "bandwidth check (certificate schema 2): not compared; certify the node again to "
        "record it"
    )
    assert note.expected == "certificate schema 3 or newer"
    result = drift_node(facts, old, POLICY)
    assert result.verdict is Verdict.CERTIFIED, result.summary
    # Without --interconnect there is nothing to say, old certificate or not.
    assert [f for f in compare(old, schema_2_facts(), POLICY) if f.check == CHECK] == []


def test_a_schema_1_certificate_is_no_baseline_either() -> None:
    old = certificate_from_json(SCHEMA_1.read_text())
    facts = dataclasses.replace(schema_2_facts(), interconnect=measured_interconnect())
    (note,) = [f for f in compare(old, facts, POLICY) if f.check == CHECK]
    assert (note.severity, note.required, note.observed) == (
        Severity.UNKNOWN,
        False,
        "certificate schema 1",
    )


def test_a_certificate_issued_without_figures_has_no_baseline() -> None:
    facts = collect_simulated(HEALTHY, burn=BurnConfig(duration_s=1.0), interconnect="off")
    cert = issue_certificate(judge_node(facts, Policy(interconnect=False)))
    assert cert.holds_bandwidth
    assert cert.bandwidth_figures == 0
    (note,) = drift(measured(), cert)
    assert (note.severity, note.required) == (Severity.UNKNOWN, False)
    assert note.message.startswith("The interconnect was measured now, but the certificate")
    # Measured now and failed: still nothing to compare with, nothing said.
    assert drift(with_interconnect(error="no libcudart"), cert) == []


# ------------------------------------------------------------------ outputs


def test_prometheus_lists_the_check_and_counts_its_drift() -> None:
    assert CHECK in DRIFT_CHECKS
    result = drift_node(measured("hbm-slow-one-gpu"), baseline(), POLICY)
    text = render_prometheus([result], now=NOW)
    counts = {
        s.labels["check"]: s.value
        for family in parser.text_string_to_metric_families(text)
        if family.name == "gpuready_drift_findings"
        for s in family.samples
    }
    assert counts[CHECK] == 1.0
    clean = drift_node(measured(), baseline(), POLICY)
    text = render_prometheus([clean], now=NOW)
    assert f'check="{CHECK}"' in text


def test_terminal_and_nhc_name_the_gpu_and_what_to_do() -> None:
    result = drift_node(measured("hbm-slow-one-gpu"), baseline(), POLICY)
    assert result.verdict is Verdict.NOT_CERTIFIED
    (line,) = [line for line in render_drift_text([result]).splitlines() if "FAIL" in line]
    assert line.split()[:3] == ["FAIL", CHECK, "gpu3"]
    assert line.endswith("-> drain and RMA")
    code, nhc = nhc_line([result])
    assert code == 1
    assert nhc.endswith(": interconnect (GPU 3)")


# ------------------------------------------------------------------ the review's findings


def _run_now() -> AllReduce:
    run = measured_interconnect().all_reduce
    assert isinstance(run, AllReduce)
    return run


def test_a_wrong_count_for_the_whole_run_is_corruption_not_a_speed() -> None:
    # Old nccl-tests count wrong elements only in total ("Out of bounds values : 3 FAILED").
    (found,) = drift(with_interconnect(all_reduce=dataclasses.replace(_run_now(), wrong=3)))
    assert found.message == (
        "The all-reduce over 8 GPUs returned 3 wrong elements now: data corruption on a GPU "
        "or on the links between them"
    )
    assert (found.severity, found.observed, found.expected) == (Severity.FAIL, "3 wrong", "0 wrong")
    assert (found.action, found.action_source) == (Action.DRAIN_RMA, CORRUPTION_SOURCE)


def test_a_wrong_total_and_wrong_points_add_up() -> None:
    run = _run_now()
    assert isinstance(run.points, tuple)
    points = (dataclasses.replace(run.points[0], wrong=2), *run.points[1:])
    changed = dataclasses.replace(run, points=points, wrong=3)
    (found,) = drift(with_interconnect(all_reduce=changed))
    assert found.observed == "5 wrong"


def test_a_zero_wrong_total_is_compared_as_a_speed() -> None:
    assert drift(with_interconnect(all_reduce=dataclasses.replace(_run_now(), wrong=0))) == []


def test_a_slow_all_reduce_with_the_pairs_not_measured_now_is_not_the_baseboard() -> None:
    # As interconnect.all_reduce: the baseboard only when every pair copies at speed.
    facts = with_interconnect(
        measured("nvswitch-degraded-all-reduce-low"),
        peers=Unavailable(Reason.NOT_MEASURED, "peers not asked for"),
    )
    (all_reduce,) = [f for f in drift(facts) if f.message.startswith("All-reduce")]
    assert all_reduce.message.endswith(
        "(more than 15% below): the pairs were not compared now, so the links or the fabric"
    )
    assert (all_reduce.action, all_reduce.action_source) == SXM_LINKS


def test_a_certified_all_reduce_size_is_said_in_binary_units() -> None:
    odd = CertifiedAllReduce(ranks=8, size_bytes=3 << 29, busbw_gb_s=470.0)
    (found,) = drift(measured(), dataclasses.replace(baseline(), all_reduce=odd))
    assert found.message.startswith(
        "The all-reduce at 1.5 GiB over 8 GPUs was not measured now: error: the sweep now has "
        "no 1.5 GiB message"
    )


def test_pairs_certified_in_groups_name_every_slow_gpu_by_its_own_links() -> None:
    """Two PCIe switches' worth of pairs: a whole group falls, and each finding names links.

    The pairs were certified within {0, 1, 2} and within {3, 4, 5} only, so each GPU has two
    peers; when every copy of the first group falls, GPUs 0, 1 and 2 are each slow to all
    their peers, but once 0 and 1 have named the group's six copies, 2 has none left: a
    finding for it would be a FAIL naming nothing.
    """
    group = ((0, 1, 2), (3, 4, 5))

    def grouped(src: int, dst: int) -> bool:
        return any(src in members and dst in members for members in group)

    cert = baseline()
    assert cert.peers is not None
    cert = dataclasses.replace(cert, peers=tuple(p for p in cert.peers if grouped(p.src, p.dst)))
    assert len(cert.peers or ()) == 12
    slow = {(a, b): 100.0 for a in group[0] for b in group[0] if a != b}
    found = drift(with_peers(slow), cert)
    assert [(f.severity, f.gpu_index) for f in found] == [(Severity.FAIL, 0), (Severity.FAIL, 1)]
    for finding in found:
        assert "GB/s" in finding.observed, finding  # each names the copies that fell
        assert " 0 of the " not in finding.message, finding
    assert found[0].observed == "100 GB/s on 4 pairs"  # 0's four copies
    assert found[1].observed == "GPU 1 -> GPU 2 100 GB/s; GPU 2 -> GPU 1 100 GB/s"
