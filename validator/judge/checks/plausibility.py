"""Readings plausible: a value no GPU can have is no reading, and certifies nothing.

The node's plausibility pass (:mod:`validator.node.physical_ranges`) puts "not
measured: implausible value" where a source gave a temperature below absolute
zero, a 1 GW power draw or more memory used than there is. A check that reads
such a field already says UNKNOWN; this one makes sure every other field does
too, so a broken sensor or an edited file is never certified because no check
happened to look at the field it broke. One required UNKNOWN per GPU, naming
each field and what it said.
"""

from __future__ import annotations

import dataclasses

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import UNKNOWN, gpu_finding, node_finding
from validator.judge.policy import Policy
from validator.model import Finding, GpuFacts, NodeFacts, Unavailable, implausible_reading

CHECK = "inventory.readings_plausible"
ACTION = (
    "check the sensor and the source: re-read it on the node (`nvidia-smi -q`); if it stays "
    "impossible, drain the node and have the GPU looked at"
)


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """A required UNKNOWN for each GPU (and the node) with a reading that cannot be."""
    del policy, sku  # no threshold: the ranges are physics, declared on the node side
    findings = [_gpu(gpu, bad) for gpu in facts.gpus if (bad := _implausible(gpu))]
    node_bad = _implausible(facts)
    if node_bad:
        findings.append(
            node_finding(
                CHECK,
                UNKNOWN,
                f"The node reported {_list(node_bad)}; {ACTION}",
                observed=_observed(node_bad),
                expected="readings within physical limits",
            )
        )
    return findings


def _implausible(record: GpuFacts | NodeFacts) -> list[tuple[str, Unavailable]]:
    found = []
    for item in dataclasses.fields(record):
        value = getattr(record, item.name)
        if isinstance(value, Unavailable) and implausible_reading(value):
            found.append((item.name, value))
    return found


def _gpu(gpu: GpuFacts, bad: list[tuple[str, Unavailable]]) -> Finding:
    return gpu_finding(
        CHECK,
        UNKNOWN,
        gpu,
        f"GPU {gpu.index} reported {_list(bad)}; {ACTION}",
        observed=_observed(bad),
        expected="readings within physical limits",
    )


def _list(bad: list[tuple[str, Unavailable]]) -> str:
    return "; ".join(value.detail for _, value in bad)


def _observed(bad: list[tuple[str, Unavailable]]) -> str:
    return ", ".join(name for name, _ in bad)
