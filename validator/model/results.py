"""A node judged (its facts, findings and verdict), the fleet's summary and the report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from validator.model.cross_node_stage import CrossNodeStage
from validator.model.findings import Finding, Verdict
from validator.model.measured import SCHEMA_VERSION
from validator.model.node_facts import NodeFacts


@dataclass(frozen=True)
class NodeResult:
    """One node judged: its facts, the findings, the verdict."""

    hostname: str
    verdict: Verdict
    facts: NodeFacts
    findings: Tuple[Finding, ...]
    sku: Optional[str] = None  # catalog id the node was judged against
    policy_digest: str = ""
    summary: str = ""  # one line: why this verdict
    transport: str = "local"  # local | ssh | ansible
    agent_stderr: str = ""  # what the agent printed on stderr, kept for the operator
    elapsed_s: float = 0.0  # from connect to facts back


@dataclass(frozen=True)
class SkuFleetStats:
    """Burn-in speed across the fleet for one GPU model."""

    sku: str
    gpus: int  # GPUs with a measured burn-in figure
    median_tflops: float
    mad_tflops: float  # median absolute deviation
    threshold_tflops: float  # below this a GPU is flagged (policy share of the median)


@dataclass(frozen=True)
class FleetSummary:
    """The fleet as a whole: counts by verdict and each model's speed statistics."""

    hosts: int
    certified: int
    not_certified: int
    unknown: int
    skus: Tuple[SkuFleetStats, ...] = ()
    interrupted: bool = False  # the run was stopped (Ctrl-C) before every host finished


@dataclass(frozen=True)
class Report:
    """The acceptance report: one or many nodes."""

    generated_at: str
    tool_version: str
    nodes: Tuple[NodeResult, ...]
    schema_version: int = SCHEMA_VERSION
    fleet: Optional[FleetSummary] = None  # set when more than one host was certified
    # The stage across nodes (certify --cross-node); None when it was not asked.
    cross_node: Optional[CrossNodeStage] = None
