"""Judging: facts plus policy give findings and a verdict. Pure: no I/O.

Entry points: :func:`judge_node` for one node, :func:`load_policy` /
:func:`policy_from_mapping` for the rules, :func:`load_catalog` for the SKU figures.
"""

from __future__ import annotations

from validator.judge.catalog import Catalog, PeakTflops, Sku, load_catalog
from validator.judge.policy import (
    DEFAULT_FAIL_XIDS,
    Policy,
    Thresholds,
    load_policy,
    policy_digest,
    policy_from_mapping,
)
from validator.judge.verdict import judge_node, pick_sku, sort_findings

__all__ = [
    "DEFAULT_FAIL_XIDS",
    "Catalog",
    "PeakTflops",
    "Policy",
    "Sku",
    "Thresholds",
    "judge_node",
    "load_catalog",
    "load_policy",
    "pick_sku",
    "policy_digest",
    "policy_from_mapping",
    "sort_findings",
]
