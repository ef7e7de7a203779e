"""certify's node_exporter textfile: each node's verdict, and each GPU's figures.

Names follow Prometheus's naming guide: the unit in the name and in base units (watts,
celsius, hertz, bytes per second, operations per second), ``_total`` only on counters,
an ``_info`` gauge of 1 for the versions. Every series is labelled ``host``; a GPU's
also ``gpu`` (its NVML index), ``uuid`` and ``serial``, empty where the GPU did not say.

What could not be measured has no sample: never a 0 that a dashboard would graph as a
reading (no Xid line read is no sample, a log read without one is 0). Text a node
reported (a serial, a driver string) is escaped and bounded before it is a label
(:func:`validator.report.prometheus.label_text`); prometheus_client then escapes quotes,
backslashes and newlines as the exposition format asks.

Every series is declared once in :data:`SERIES` (name, type, help, labels), which the
README's table lists too. The GPU figures come from :mod:`validator.report.gpu_figures`.

Where the run ran the stage across nodes (``certify --cross-node``), each node also has
its verdict in the fabric (as its certificate's ``fabric`` says it) and the slowest RDMA
and NCCL figure of the tests it took part in; a run without the stage writes none of them.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from validator.error_tree import ReportError, UnsafePathError
from validator.model import CrossNodeStage, NodeResult, NvmlStatus, Report, Verdict
from validator.report.gpu_figures import GPU_LABELS, Sample, gpu_samples, node_samples
from validator.report.prometheus import (
    host_label,
    label_text,
    timestamp_seconds,
    write_textfile,
)


@dataclass(frozen=True)
class Series:
    """One metric family of the file: what it is called, measures and is labelled with."""

    name: str  # a counter's without ``_total`` (prometheus_client adds it)
    kind: str  # gauge | counter
    help: str
    labels: tuple[str, ...] = ()  # besides host (and a GPU's own labels)
    per_gpu: bool = False
    per_host: bool = True  # False: one series for the file (the writer's build)

    @property
    def exposed(self) -> str:
        """The name the samples carry: a counter's ends in ``_total``."""
        return f"{self.name}_total" if self.kind == "counter" else self.name

    def all_labels(self) -> list[str]:
        """Every label, in the order the samples give their values."""
        host = ("host",) if self.per_host else ()
        return [*host, *(GPU_LABELS if self.per_gpu else ()), *self.labels]


def _gauge(name: str, text: str, *labels: str) -> Series:
    return Series(name, "gauge", text, labels)


def _gpu(name: str, text: str, *labels: str, kind: str = "gauge") -> Series:
    return Series(name, kind, text, labels, per_gpu=True)


# Every series certify writes, in the file's order.
SERIES: tuple[Series, ...] = (
    Series(
        "gpuready_build_info", "gauge", "The gpuready version that wrote this file; always 1.",
        ("version",), per_host=False,
    ),
    _gauge("gpuready_node_certified", "1 when gpuready certified the node, 0 when it did not."),
    _gauge(
        "gpuready_node_verdict", "1 for the node's verdict: certified, not_certified or unknown.",
        "verdict",
    ),
    _gauge("gpuready_certify_last_run_timestamp_seconds", "When gpuready certify judged the node."),
    _gauge(
        "gpuready_node_info",
        "The node's driver, CUDA version, catalog SKU and where its facts came from "
        "(live, capture or simulate); always 1.",
        "driver", "cuda", "sku", "source",
    ),
    _gauge("gpuready_node_gpus", "GPUs the driver (NVML) found on the node."),
    _gauge(
        "gpuready_node_certified_gpus",
        "GPUs the run certified (0 when the node was not certified); scope is node for a "
        "whole-node run, subset for certify --gpus.",
        "scope",
    ),
    _gauge(
        "gpuready_node_all_reduce_bus_bandwidth_bytes_per_second",
        "NCCL all-reduce bus bandwidth at the largest message size measured.",
    ),
    _gauge(
        "gpuready_node_fabric_status",
        "1 for the node's verdict in the stage across nodes (certify --cross-node): certified, "
        "failed or not_run; 0 for the others. No sample when the stage was not asked.",
        "status",
    ),
    _gauge(
        "gpuready_node_fabric_rdma_bandwidth_bytes_per_second",
        "Slowest ib_write_bw average (the pair's slowest HCA, largest message) of the RDMA pair "
        "tests the node took part in; a slow peer lowers it too.",
    ),
    _gauge(
        "gpuready_node_fabric_nccl_bus_bandwidth_per_hca_bytes_per_second",
        "Slowest NCCL all-reduce busbw per HCA (the default run's, largest size) of the "
        "group tests across nodes the node took part in.",
    ),
    _gpu("gpuready_gpu_info", "The GPU's model, PCI bus id and VBIOS; always 1.",
         "name", "pci_bus_id", "vbios"),
    _gpu("gpuready_gpu_responding", "1 when the GPU answered the driver, 0 when lost or failing."),
    _gpu(
        "gpuready_gpu_burn_floating_point_operations_per_second",
        "Matrix-multiply speed in the burn-in (median over its windows), by data type.",
        "dtype",
    ),
    _gpu("gpuready_gpu_burn_power_watts", "Median power draw under load in the burn-in."),
    _gpu("gpuready_gpu_burn_peak_power_watts", "Peak power draw under load in the burn-in."),
    _gpu("gpuready_gpu_power_limit_watts", "Enforced power limit."),
    _gpu(
        "gpuready_gpu_burn_peak_temperature_celsius",
        "Peak GPU temperature under load in the burn-in.",
    ),
    _gpu(
        "gpuready_gpu_burn_peak_memory_temperature_celsius",
        "Peak HBM temperature under load in the burn-in.",
    ),
    _gpu("gpuready_gpu_burn_sm_clock_hertz", "Median SM clock under load in the burn-in."),
    _gpu("gpuready_gpu_sm_clock_max_hertz", "Maximum SM clock the GPU allows."),
    _gpu(
        "gpuready_gpu_memory_bandwidth_bytes_per_second",
        "Device-to-device copy bandwidth within the GPU's HBM (read plus write).",
    ),
    _gpu(
        "gpuready_gpu_host_bandwidth_bytes_per_second",
        "Copy bandwidth between pinned host memory and the GPU, by direction.",
        "direction",
    ),
    _gpu(
        "gpuready_gpu_peer_bandwidth_bytes_per_second",
        "Peer-to-peer copy bandwidth from the GPU to another (peer: its index), "
        "unidirectional or bidirectional.",
        "peer", "mode",
    ),
    _gpu(
        "gpuready_gpu_ecc_volatile_errors", "ECC errors since the driver loaded, by kind.",
        "kind", kind="counter",
    ),
    _gpu(
        "gpuready_gpu_ecc_aggregate_errors", "ECC errors over the GPU's life, by kind.",
        "kind", kind="counter",
    ),
    _gpu("gpuready_gpu_remapped_rows", "HBM rows remapped, by kind.", "kind", kind="counter"),
    _gpu("gpuready_gpu_row_remap_pending", "1 when a row remap waits for a GPU reset."),
    _gpu("gpuready_gpu_row_remap_failure", "1 when a row remap failed."),
    _gpu(
        "gpuready_gpu_retired_pages", "Pages retired (pre-Ampere GPUs), by cause.",
        "cause", kind="counter",
    ),
    _gpu(
        "gpuready_gpu_xid_events",
        "Xid lines the kernel log holds for the GPU in the window gpuready read.",
    ),
    _gpu("gpuready_gpu_pcie_replays", "PCIe replays since the driver loaded.", kind="counter"),
    _gpu(
        "gpuready_gpu_nvlink_errors", "NVLink errors since the driver loaded, all links, by kind.",
        "kind", kind="counter",
    ),
)  # fmt: skip
_BY_NAME = {series.name: series for series in SERIES}


def _family(series: Series) -> GaugeMetricFamily | CounterMetricFamily:
    maker = CounterMetricFamily if series.kind == "counter" else GaugeMetricFamily
    return maker(series.name, series.help, labels=series.all_labels())


class CertifyCollector(Collector):
    """The series of :data:`SERIES` for the nodes of one certify report."""

    def __init__(self, report: Report, now: datetime.datetime) -> None:
        """Collect the nodes of ``report``, judged at ``now`` (naive: UTC)."""
        self._nodes = report.nodes
        self._stage = report.cross_node
        self._version = report.tool_version
        self._stamp = timestamp_seconds(now)

    def collect(self) -> Iterator[Metric]:
        """Each family that has samples, in :data:`SERIES` order."""
        families = {series.name: _family(series) for series in SERIES}
        counts = dict.fromkeys(families, 0)

        def add(name: str, labels: Sequence[str], value: float) -> None:
            # add_metric pairs names and values with zip: one missing would shift the rest.
            if len(labels) != len(_BY_NAME[name].all_labels()):
                raise ValueError(f"{name}: {len(labels)} label values for {_BY_NAME[name]}")
            families[name].add_metric(list(labels), value)
            counts[name] += 1

        add("gpuready_build_info", [label_text(self._version)], 1)
        fabric = _fabric_samples(self._stage, [node.hostname for node in self._nodes])
        for node in self._nodes:
            host = host_label(node.hostname)
            for sample in self._node(node):
                add(sample.name, [host, *sample.labels], sample.value)
            for sample in fabric.get(node.hostname, ()):
                add(sample.name, [host, *sample.labels], sample.value)
            for sample in gpu_samples(node):
                add(sample.name, [host, *sample.labels], sample.value)
        yield from (families[name] for name in families if counts[name])

    def _node(self, node: NodeResult) -> Iterator[Sample]:
        facts = node.facts
        certified = node.verdict is Verdict.CERTIFIED
        yield Sample("gpuready_node_certified", (), 1 if certified else 0)
        # certify --gpus: a 1 above is for those GPUs alone; this says how many, and that
        # they are a subset (alert on gpuready_node_certified_gpus < gpuready_node_gpus).
        chosen = facts.chosen_gpus
        scope = "node" if chosen is None else "subset"
        count = len(facts.gpus) if chosen is None else len(chosen)
        yield Sample("gpuready_node_certified_gpus", (scope,), count if certified else 0)
        for verdict in Verdict:
            mine = 1 if verdict is node.verdict else 0
            yield Sample("gpuready_node_verdict", (verdict.value.lower(),), mine)
        yield Sample("gpuready_certify_last_run_timestamp_seconds", (), self._stamp)
        info = (
            _text(facts.driver_version),
            _text(facts.cuda_driver_version),
            label_text(node.sku or ""),
            label_text(facts.source),
        )
        yield Sample("gpuready_node_info", info, 1)
        if facts.nvml_status is NvmlStatus.OK:
            yield Sample("gpuready_node_gpus", (), len(facts.gpus))
        yield from node_samples(node)


# The fabric statuses as label values, and each kind's figure to bytes per second: perftest
# gives Gb/s (10^9 bits), nccl-tests GB/s (10^9 bytes).
_FABRIC_STATUSES = (("certified", "certified"), ("failed", "failed"), ("not run", "not_run"))
_FABRIC_FIGURES = {
    "rdma": ("gpuready_node_fabric_rdma_bandwidth_bytes_per_second", 1e9 / 8),
    "nccl": ("gpuready_node_fabric_nccl_bus_bandwidth_per_hca_bytes_per_second", 1e9),
}


def _fabric_samples(
    stage: CrossNodeStage | None, hostnames: Sequence[str]
) -> dict[str, list[Sample]]:
    """Per host: its fabric status, and its slowest figure per kind where one was measured."""
    if stage is None:
        return {}
    from validator.model.fabric_certified import fabric_verdicts

    verdicts = fabric_verdicts(stage, hostnames)
    found: dict[str, list[Sample]] = {}
    for host in hostnames:
        status = verdicts[host][0]
        found[host] = [
            Sample("gpuready_node_fabric_status", (label,), 1 if status == mine else 0)
            for mine, label in _FABRIC_STATUSES
        ]
    worst: dict[tuple[str, str], float] = {}
    for test in stage.tests:
        if test.figure is None:  # no result: no sample, never a 0
            continue
        for host in test.hosts:
            key = (host, test.kind)
            worst[key] = min(worst.get(key, test.figure), test.figure)
    for (host, kind), figure in worst.items():
        if host in found and kind in _FABRIC_FIGURES:
            name, scale = _FABRIC_FIGURES[kind]
            found[host].append(Sample(name, (), figure * scale))
    return found


def _text(value: object) -> str:
    """A measured text as its label value; "" (Prometheus's absent label) when unmeasured."""
    return label_text(value) if isinstance(value, str) else ""


def certify_registry(report: Report, *, now: datetime.datetime) -> CollectorRegistry:
    """A registry holding certify's series for every node of ``report``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CertifyCollector(report, now))
    return registry


def render_certify_prometheus(report: Report, *, now: datetime.datetime) -> str:
    """The report in node_exporter's textfile format (see :data:`SERIES`)."""
    return generate_latest(certify_registry(report, now=now)).decode("utf-8")


def write_certify_prometheus(
    path: str | os.PathLike[str], report: Report, *, now: datetime.datetime
) -> Path:
    """Write certify's textfile atomically (see validator.report.prometheus.write_textfile).

    Raises:
        ReportError: it cannot be written (named with the reason).
        UnsafePathError: a link was planted at the target.
    """
    return write_textfile(path, render_certify_prometheus(report, now=now))


def textfile_problems(path: str, report: Report) -> list[str]:
    """Write certify's textfile now; what kept it from being written, as one line, or nothing.

    A run's measurements are never lost for its textfile: the caller records them all the
    same, and the line names the file and why (exit 3).
    """
    try:
        write_certify_prometheus(path, report, now=datetime.datetime.now(datetime.timezone.utc))
    except (ReportError, UnsafePathError) as exc:
        return [str(exc)]
    return []


__all__ = [
    "SERIES",
    "CertifyCollector",
    "Series",
    "certify_registry",
    "render_certify_prometheus",
    "textfile_problems",
    "write_certify_prometheus",
]
