"""A finding judged against an unconfirmed catalog figure says so.

The checks take their floors and expected values from the SKU row; this step, run once
on every finding after the checks, knows which catalog figures each check holds a GPU
to and, where the policy did not set its own, appends the catalog's note
(:meth:`validator.judge.catalog.Sku.figure_note`) to the message. The terminal, the
JSON, the HTML and history all show the message, so each says it. The checks stay as
they are: one table here, not a clause in each of them.

``inventory.figures_plausible`` is the one UNKNOWN noted: it blocks the certificate because
a reading is above a ceiling made of catalog figures (a peak, the board power, the memory
bandwidth, the links), so an unconfirmed one there is as much the reason as a floor is.
``memory.capacity`` and ``power.default`` are left out: they already say when their
figure is an estimate or from the datasheet alone (``memory_verified``,
``power_verified``, kept in step with ``figure_sources`` by the catalog tests).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from validator.judge.catalog import Sku
from validator.judge.policy import Policy
from validator.model import Finding, NodeFacts, Severity

_Uses = Callable[[Finding, NodeFacts, Policy], tuple[str, ...]]


def _unless_policy(threshold: str, *figures: str) -> _Uses:
    """The catalog's figures, unless the policy's thresholds set the floor themselves."""

    def uses(finding: Finding, facts: NodeFacts, policy: Policy) -> tuple[str, ...]:
        return () if getattr(policy.thresholds, threshold) is not None else figures

    return uses


def _burn_peak(finding: Finding, facts: NodeFacts, policy: Policy) -> tuple[str, ...]:
    dtype = getattr(facts.burn, "dtype", None)
    return (f"peak_tflops.{dtype}",) if isinstance(dtype, str) else ()


def _pcie(attribute: str) -> _Uses:
    def uses(finding: Finding, facts: NodeFacts, policy: Policy) -> tuple[str, ...]:
        return () if getattr(policy, f"min_{attribute}") is not None else (attribute,)

    return uses


def _ceilings(finding: Finding, facts: NodeFacts, policy: Policy) -> tuple[str, ...]:
    """The figures behind the ceilings a reading went over.

    Read off the names the finding gives the readings (``observed``: "burn bf16 TFLOPS,
    HBM copy GB/s", as figure_ceilings writes them).
    """
    observed = finding.observed
    names: list[str] = []
    dtype = getattr(facts.burn, "dtype", None)
    if isinstance(dtype, str) and f"burn {dtype} TFLOPS" in observed:
        names.append(f"peak_tflops.{dtype}")
    if "burn power draw W" in observed:
        names += ["tdp_w", "power_limits_w"]
    if "HBM copy GB/s" in observed:
        names.append("memory_bandwidth_gbs")
    if "H2D copy GB/s" in observed or "D2H copy GB/s" in observed:
        names += ["pcie_gen", "pcie_width"]
    if "P2P " in observed:
        names += ["nvlinks", "nvlink_speed_gbs"]
    return tuple(names)


# Check id -> the catalog figures its verdict rests on (given the facts and the policy).
USES: dict[str, _Uses] = {
    "burn.speed": _burn_peak,
    "pcie.gen": _pcie("pcie_gen"),
    "pcie.width": _pcie("pcie_width"),
    "nvlink.links": lambda finding, facts, policy: ("nvlinks", "nvlink_speed_gbs"),
    "inventory.figures_plausible": _ceilings,
    "interconnect.h2d": _unless_policy("h2d_min_gbs", "h2d_min_gbs"),
    "interconnect.d2h": _unless_policy("d2h_min_gbs", "d2h_min_gbs"),
    "interconnect.hbm": _unless_policy("hbm_min_gbs", "hbm_copy_min_gbs"),
    "interconnect.p2p": _unless_policy("p2p_min_gbs", "p2p_min_gbs"),
    "interconnect.all_reduce": _unless_policy("all_reduce_min_gbs", "all_reduce_min_gbs"),
}


def note_unconfirmed(
    findings: list[Finding], facts: NodeFacts, policy: Policy, sku: Sku | None
) -> list[Finding]:
    """``findings`` with the note appended to each judged against an unconfirmed figure.

    A check with no catalog figure behind it, a figure the policy overrode, a finding
    that judged nothing (UNKNOWN: not measured, no GPU backend; the ceilings' UNKNOWN
    excepted) or a row whose figures are all confirmed leaves the finding as it was.
    """
    if sku is None or not sku.unconfirmed():
        return findings
    return [_noted(finding, facts, policy, sku) for finding in findings]


def _noted(finding: Finding, facts: NodeFacts, policy: Policy, sku: Sku) -> Finding:
    uses = USES.get(finding.check)
    if uses is None or (
        finding.severity is Severity.UNKNOWN and finding.check != "inventory.figures_plausible"
    ):
        return finding
    note = sku.figure_note(uses(finding, facts, policy))
    if not note or note in finding.message:
        return finding
    return dataclasses.replace(finding, message=f"{finding.message} {note}")
