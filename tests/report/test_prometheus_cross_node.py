"""certify --prom-file with the stage across nodes: each node's fabric verdict and figures.

Read back with prometheus_client's own parser; the figures are checked against the stage's
tests (the slowest each node took part in), never against numbers written here.
"""

from __future__ import annotations

import dataclasses
import datetime

from prometheus_client.parser import text_string_to_metric_families

from tests.report.cross_node_samples import HOSTILE, sample_stage
from tests.report.test_report_samples import healthy_node, sample_report
from validator.model import CrossNodeStage, KindOutcome, Report
from validator.report.prometheus import host_label
from validator.report.prometheus_certify import render_certify_prometheus

NOW = datetime.datetime(2026, 12, 7, 0, 0, tzinfo=datetime.timezone.utc)
STATUS = "gpuready_node_fabric_status"
RDMA = "gpuready_node_fabric_rdma_bandwidth_bytes_per_second"
NCCL = "gpuready_node_fabric_nccl_bus_bandwidth_per_hca_bytes_per_second"
FABRIC_SERIES = {STATUS, RDMA, NCCL}


def _report(stage: CrossNodeStage | None, hosts: tuple[str, ...]) -> Report:
    report = sample_report(*(healthy_node(host) for host in hosts))
    return dataclasses.replace(report, cross_node=stage)


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def _worst(stage: CrossNodeStage, host: str, kind: str) -> float | None:
    figures = [
        t.figure for t in stage.tests if t.kind == kind and host in t.hosts and t.figure is not None
    ]
    return min(figures) if figures else None


def test_each_node_has_its_fabric_status_and_slowest_figures() -> None:
    stage = sample_stage()
    hosts = ("n1", "n2", "n3", "n4", "n9")  # n9 did not enter the stage
    found = _samples(render_certify_prometheus(_report(stage, hosts), now=NOW))
    status = {(s["host"], s["status"]): v for s, v in found[STATUS]}
    assert set(status) == {(h, st) for h in hosts for st in ("certified", "failed", "not_run")}
    ones = {host: st for (host, st), value in status.items() if value == 1}
    assert ones == {"n1": "certified", "n2": "certified", "n3": "certified", "n4": "failed",
                    "n9": "not_run"}  # fmt: skip
    assert sum(status.values()) == len(hosts)
    rdma = {s["host"]: v for s, v in found[RDMA]}
    nccl = {s["host"]: v for s, v in found[NCCL]}
    for host in hosts:
        for series, kind, scale in ((rdma, "rdma", 1e9 / 8), (nccl, "nccl", 1e9)):
            worst = _worst(stage, host, kind)
            if worst is None:
                assert host not in series  # not measured: no sample, never a 0
            else:
                assert series[host] == worst * scale
    assert "n9" not in rdma


def test_a_report_without_the_stage_has_no_fabric_series() -> None:
    text = render_certify_prometheus(_report(None, ("n1", "n2")), now=NOW)
    assert not {f.name for f in text_string_to_metric_families(text)} & FABRIC_SERIES


def test_a_skipped_stage_reads_not_run_with_no_figure() -> None:
    stage = dataclasses.replace(
        sample_stage(),
        tests=(),
        outcomes=(KindOutcome("rdma", 380.0, "catalog", skipped="no fabric"),),
    )
    found = _samples(render_certify_prometheus(_report(stage, ("n1", "n2")), now=NOW))
    ones = {s["host"]: s["status"] for s, v in found[STATUS] if v == 1}
    assert ones == {"n1": "not_run", "n2": "not_run"}
    assert RDMA not in found
    assert NCCL not in found


def test_a_hostile_host_stays_one_label_of_one_series() -> None:
    stage = sample_stage(hostile=True)
    text = render_certify_prometheus(_report(stage, ("n1", HOSTILE)), now=NOW)
    assert "\x1b" not in text
    found = _samples(text)
    hostile = [(s, v) for s, v in found[STATUS] if s["host"] == host_label(HOSTILE)]
    assert len(hostile) == 3
    assert {s["status"] for s, v in hostile if v == 1} == {"failed"}
    assert {s["host"] for s, _ in found[RDMA]} == {"n1", host_label(HOSTILE)}
