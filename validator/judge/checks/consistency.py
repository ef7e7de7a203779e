"""Sources agree: a captured bundle's files describe one node at one moment.

The node side compares a bundle's views of the GPUs (``nvidia-smi -q -x``,
``nvidia-smi -q``, the banner, the PCI listing) and records each disagreement,
and each query cut short, as a :class:`~validator.model.SourceConflict`
(:mod:`validator.node.capture.bundle_consistency`). Facts read from files that
contradict each other are not facts about a node, so each conflict is a
required UNKNOWN (nothing is proven wrong with the node, but nothing can be
certified either) and a FAIL where the files themselves prove a fault (a query
saying the driver cannot reach a GPU). The check belongs to the inventory family:
what is there, as the sources say it.

With no conflict, a PASS says so where there was something to compare: a
capture with at least two views. The facts do not list the files compared, so
the views are told from what they left in the facts: GPU facts only a query
gives (a UUID read or refused), the banner's versions without an error, a PCI
GPU count. A capture whose only views are ``-q`` and ``-q -x`` gets no PASS.
"""

from __future__ import annotations

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import FAIL, PASS, UNKNOWN, node_finding
from validator.judge.policy import Policy
from validator.model import Finding, NodeFacts, Reason, SourceConflict, Unavailable

CHECK = "inventory.sources_agree"
RECAPTURE = "re-capture the bundle in one go on the node: `gpuready capture DIR`"
REPLACE = (
    "the file itself shows the fault: reboot the node, and replace the GPU if it happens again"
)


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Each conflict between a node's sources as a finding; a PASS where captured views agree."""
    if facts.source_conflicts:
        return [_finding(conflict) for conflict in facts.source_conflicts]
    views = views_compared(facts)
    if facts.source != "capture" or len(views) < 2:
        return []
    return [
        node_finding(
            CHECK,
            PASS,
            f"The capture's {_and(views)} agree on the driver version, GPU count, GPU names "
            "and bus ids, and no query is cut short",
            observed=", ".join(views),
            expected="all files agree",
        )
    ]


def _finding(conflict: SourceConflict) -> Finding:
    action = REPLACE if conflict.proves_fault else RECAPTURE
    return node_finding(
        CHECK,
        FAIL if conflict.proves_fault else UNKNOWN,
        f"{conflict.detail}; {action}",
        observed=f"{conflict.what} ({', '.join(conflict.sources)})",
        expected="all files agree",
    )


def views_compared(facts: NodeFacts) -> list[str]:
    """The views of the GPUs a capture's facts show were there to compare."""
    views = []
    # Only a query reads a UUID (or its refusal); GPUs from the banner have none.
    if any(not _unmeasured(gpu.uuid) for gpu in facts.gpus):
        views.append("nvidia-smi query")
    if isinstance(facts.tools.nvidia_smi_driver_version, str) and not facts.tools.nvidia_smi_error:
        views.append("nvidia-smi table")
    if isinstance(facts.pci_gpu_count, int):
        views.append("PCI listing")
    return views


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _unmeasured(value: object) -> bool:
    return isinstance(value, Unavailable) and value.reason is Reason.NOT_MEASURED
