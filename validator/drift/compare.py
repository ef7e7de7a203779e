"""Compare a node's facts of now with its latest certificate, family by family.

Each check gives FAIL (drift), PASS (as certified) or UNKNOWN (could not be
measured now: never taken for "no drift"); WARN for a version that is new since.

Each family's comparison sits in ``validator/drift/<family>_drift.py``, named after the
check it pairs with in ``validator/judge/checks/`` (gpud's vertical components are the
model); what they share is :mod:`validator.drift.drift_helpers`. :data:`FAMILY_COMPARISONS`
pairs each :class:`~validator.model.CheckFamily` with its comparison, in report order, and
:func:`compare` runs them in turn (``tests/house/test_family_pairs.py`` holds the pairing
to the check families).

Decisions made here, for every family:

* A value the certificate lacks (``None``: not measured at certification) has no
  baseline. Absent now as well: nothing to compare, no finding. Present now: a
  WARN for versions (something new appeared) and an UNKNOWN that does not block
  for numbers (nothing to measure growth against).
* When the driver gave no GPU facts at all, the GPUs cannot be compared: one
  UNKNOWN says so (with the node's versions), rather than every certified GPU reported
  as removed.
* A figure beyond what the certified model can do is not measured now
  (:func:`validator.judge.figure_ceilings.screen`): never "unchanged".
* A certificate of some GPUs (``certify --gpus``) is compared on those alone, and a
  required UNKNOWN names the GPUs it cannot vouch for (:func:`certified_scope`): the
  node is never shown unchanged by it (a Slurm health check fails it).
* Only the GPUs that are the same boards as certified are compared one to one
  (:func:`validator.drift.inventory_drift.gpu_set`); a GPU added, removed or swapped is
  its own finding.
"""

from __future__ import annotations

from validator.certificate import Certificate
from validator.drift import (
    burn_drift,
    container_drift,
    dcgm_drift,
    errors_drift,
    gpudirect_drift,
    host_drift,
    interconnect_drift,
    inventory_drift,
    network_drift,
    nvlink_drift,
    pcie_drift,
    power_drift,
    state_drift,
    versions_drift,
)
from validator.drift.drift_helpers import Comparison, DriftInputs, Pair
from validator.error_tree import PolicyError
from validator.judge.catalog import Sku, load_catalog
from validator.judge.checks.finding_helpers import UNKNOWN, driver_silent, node_finding
from validator.judge.figure_ceilings import screen
from validator.judge.policy import Policy
from validator.judge.verdict import sort_findings
from validator.model import CheckFamily, DriftCheck, Finding, NodeFacts, scope_text

# Each check family's drift comparison, in the order drift has always compared them: the
# node's versions, which GPUs are there, what moved on each, the links and the interconnect,
# then what was measured this run (burn-in, DCGM) and the kernel log. The errors family is
# two entries, as FAMILIES lists the inventory's three checks: its counters sit with what
# moved on each GPU, its Xids last. The findings are sorted after, so the order is only
# that of reading.
FAMILY_COMPARISONS: tuple[tuple[CheckFamily, Comparison], ...] = (
    (CheckFamily.VERSIONS, versions_drift.compare_versions),
    (CheckFamily.INVENTORY, inventory_drift.compare_inventory),
    (CheckFamily.POWER, power_drift.compare_power),
    (CheckFamily.PCIE, pcie_drift.compare_pcie),
    (CheckFamily.ERRORS, errors_drift.compare_counters),
    (CheckFamily.STATE, state_drift.compare_state),
    (CheckFamily.NVLINK, nvlink_drift.compare_nvlink),
    (CheckFamily.INTERCONNECT, interconnect_drift.compare_interconnect),
    (CheckFamily.BURN, burn_drift.compare_burn),
    (CheckFamily.DCGM, dcgm_drift.compare_dcgm),
    (CheckFamily.ERRORS, errors_drift.compare_xids),
    (CheckFamily.NETWORK, network_drift.compare_network),
    (CheckFamily.GPUDIRECT, gpudirect_drift.compare_gpudirect),
    (CheckFamily.HOST, host_drift.compare_host),
    (CheckFamily.CONTAINER, container_drift.compare_container),
)


SCOPE_ACTION = "certify the whole node"


def gpus_unreadable(facts: NodeFacts) -> bool:
    """True when the driver gave no GPU facts at all: the GPUs cannot be compared."""
    return not facts.gpus and driver_silent(facts) is not None


def _certified_sku(cert: Certificate) -> Sku | None:
    try:
        return load_catalog().get(cert.sku) if cert.sku else None
    except PolicyError:
        return None  # another catalog's SKU: the largest ceilings, the milder repair


def compare(cert: Certificate, facts: NodeFacts, policy: Policy) -> tuple[Finding, ...]:
    """Every drift finding of a node's facts against its certificate, sorted.

    Args:
        cert: the node's latest certificate (the baseline).
        facts: the node's facts now.
        policy: the rules now (hardware Xids, the burn-in drop, persistence).

    Returns:
        Findings with check ids ``drift.*``: FAIL for drift, PASS for unchanged,
        UNKNOWN for what could not be measured now.
    """
    # A figure beyond what the certified model can do is not measured now: never "unchanged".
    sku = _certified_sku(cert)
    facts, _ = screen(facts, sku, load_catalog())
    if gpus_unreadable(facts):
        # No GPU pairs: the versions family says only the node's versions.
        findings = versions_drift.compare_versions(DriftInputs(cert, facts, (), policy, sku))
        detail = facts.nvml_detail or facts.nvml_status.value
        findings.append(
            node_finding(
                DriftCheck.GPU_REMOVED,
                UNKNOWN,
                f"The driver gave no GPU facts ({detail}): the GPUs cannot be compared",
                observed=detail,
                expected=f"{len(cert.gpus)} GPUs",
            )
        )
        return sort_findings(findings)
    set_findings, pairs = inventory_drift.gpu_set(cert, facts)
    pairs, findings = certified_scope(cert, pairs)
    inputs = DriftInputs(cert, facts, tuple(pairs), policy, sku, tuple(set_findings))
    for _family, comparison in FAMILY_COMPARISONS:
        findings += comparison(inputs)
    return sort_findings(findings)


def certified_scope(cert: Certificate, pairs: list[Pair]) -> tuple[list[Pair], list[Finding]]:
    """The GPUs a certificate vouches for, and a required UNKNOWN naming the others (--gpus).

    A certificate of some GPUs lists every GPU (the node's identity: which boards are
    there is still compared), but only those certified were tested: the others' state
    and figures are no baseline. Drift on the certified GPUs is still drift; without
    it the node is not "no drift" (NHC would then pass a node never certified whole),
    but UNKNOWN: certify the whole node.
    """
    chosen = cert.certified_gpus
    if chosen is None:
        return pairs, []
    others = [gpu.index for gpu in cert.gpus if gpu.index not in chosen]
    scope = scope_text(chosen, len(cert.gpus))
    named = ", ".join(str(index) for index in others)
    finding = node_finding(
        DriftCheck.SCOPE,
        UNKNOWN,
        f"The certificate covers {scope} only (certify --gpus): drift compares those and "
        f"cannot vouch for GPU{'s' if len(others) != 1 else ''} {named}; "
        f"{SCOPE_ACTION}",
        observed=scope,
        expected=f"all {len(cert.gpus)} GPUs certified",
    )
    return [pair for pair in pairs if pair[0].index in chosen], [finding]


__all__ = ["FAMILY_COMPARISONS", "certified_scope", "compare", "gpus_unreadable"]
