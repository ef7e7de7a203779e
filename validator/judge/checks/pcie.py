"""PCIe: the link can reach the generation the SKU needs, at full width, without replays.

The current generation drops at idle to save power, so only the maximum generation is
judged; the width does not drop at idle, so the current width is judged (an x16 card
trained at x8 has a bad slot, riser or seating).

``pcie.replays``: the link layer resends a packet that arrived damaged, and NVML counts
each resend (nvmlDeviceGetPcieReplayCounter). The count is kept since the driver loaded,
so only its growth under the burn-in's load is judged, against the policy's
``pcie_replay_growth_max`` (DCGM's pcie plugin limit). A link that keeps resending is a
marginal riser, cable, slot or seating: reseat or replace it. DCGM watches the count in
every test, so it is required wherever the burn ran on a GPU that offers it.
"""

from __future__ import annotations

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    gpu_finding,
    node_finding,
    readable_gpus,
    unknown_gpu,
    unknown_sku,
    why_not,
    with_action,
)
from validator.judge.policy import Policy
from validator.model import (
    Action,
    BurnStatus,
    Finding,
    GpuBurn,
    GpuFacts,
    NodeFacts,
    Reason,
    Unavailable,
)

REPLAYS = "pcie.replays"
# What to do about replays that grew, and why: certify's pcie.replays and drift's
# drift.pcie_replay give this one answer.
REPLAY_REPAIR = (
    Action.RESEAT_CABLE_RISER,
    "gpuready: replays grow on a marginal riser, cable, slot or seating",
)
# An UNKNOWN replay count is a reading that failed, not a link that did.
REPLAY_RERUN_SOURCE = "gpuready: the replay counter was not read around the burn; run it again"


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge each GPU's PCIe link generation and width, and its replays during the burn."""
    gpus = readable_gpus(facts)
    if not gpus:
        return []
    min_gen, min_width = policy.min_pcie_gen, policy.min_pcie_width
    if sku is not None:
        min_gen = min_gen if min_gen is not None else sku.pcie_gen
        min_width = min_width if min_width is not None else sku.pcie_width
    findings: list[Finding] = []
    for check_id, minimum, what in (
        ("pcie.gen", min_gen, "generation"),
        ("pcie.width", min_width, "width"),
    ):
        if minimum is not None:
            continue
        if sku is None:
            findings.append(unknown_sku(check_id, f"The PCIe link {what}"))
        else:
            findings.append(
                node_finding(
                    check_id,
                    UNKNOWN,
                    f"The catalog sets no PCIe link {what} for {sku.label}; set "
                    f"min_pcie_{'gen' if what == 'generation' else 'width'} in the policy to "
                    "judge it",
                    required=False,
                )
            )
    for gpu in gpus:
        if min_gen is not None:
            findings.append(_gen(gpu, min_gen))
        if min_width is not None:
            findings.append(_width(gpu, min_width))
    return findings + _replays(facts, gpus, policy)


def _gen(gpu: GpuFacts, minimum: int) -> Finding:
    check_id = "pcie.gen"
    top, now = gpu.pcie_gen_max, gpu.pcie_gen_current
    if isinstance(top, Unavailable):
        return unknown_gpu(check_id, gpu, "maximum PCIe generation", top)
    if top < minimum:
        return gpu_finding(
            check_id,
            FAIL,
            gpu,
            f"GPU {gpu.index} PCIe link can reach Gen{top} at most, below the Gen{minimum} "
            "required; check the slot, riser and the BIOS PCIe speed setting",
            observed=f"Gen{top}",
            expected=f">= Gen{minimum}",
        )
    idle = (
        f" (Gen{now} now: links slow down at idle, which is normal)"
        if isinstance(now, int) and now < top
        else ""
    )
    return gpu_finding(
        check_id,
        PASS,
        gpu,
        f"GPU {gpu.index} PCIe link can reach Gen{top}{idle}",
        observed=f"Gen{top}",
        expected=f">= Gen{minimum}",
    )


def _width(gpu: GpuFacts, minimum: int) -> Finding:
    check_id = "pcie.width"
    width = gpu.pcie_width_current
    if isinstance(width, Unavailable):
        return unknown_gpu(check_id, gpu, "PCIe link width", width)
    if width < minimum:
        return gpu_finding(
            check_id,
            FAIL,
            gpu,
            f"GPU {gpu.index} PCIe link runs at x{width}, below the x{minimum} required; "
            "reseat the GPU or check the slot and riser",
            observed=f"x{width}",
            expected=f">= x{minimum}",
        )
    return gpu_finding(
        check_id,
        PASS,
        gpu,
        f"GPU {gpu.index} PCIe link runs at x{width}",
        observed=f"x{width}",
        expected=f">= x{minimum}",
    )


def _replays(facts: NodeFacts, gpus: list[GpuFacts], policy: Policy) -> list[Finding]:
    burn = facts.burn
    if burn is None or burn.error:
        return []  # no load to judge the counter under; burn.run says why
    readable = {gpu.index for gpu in gpus}
    limit = policy.thresholds.pcie_replay_growth_max
    return [_replay(gpu, limit) for gpu in burn.gpus if gpu.index in readable]


def _replay(gpu: GpuBurn, limit: int) -> Finding:
    before = gpu.counters_before.pcie_replay_count
    after = gpu.counters_after.pcie_replay_count
    expected = f"growth <= {limit}"
    if isinstance(before, Unavailable):
        return _replay_unknown(gpu, before, expected)
    if isinstance(after, Unavailable):
        return _replay_unknown(gpu, after, expected)
    growth = after - before
    figures = f"+{growth} ({before} -> {after})"
    if growth < 0:
        return _replay_unknown(
            gpu,
            Unavailable(Reason.ERROR, f"the count went back from {before} to {after} (reset?)"),
            expected,
        )
    if growth > limit:
        finding = gpu_finding(
            REPLAYS,
            FAIL,
            gpu,
            f"GPU {gpu.index} PCIe link resent {growth} packets during the burn-in ({before} -> "
            f"{after} replays), above the {limit} allowed; reseat the GPU and check its riser, "
            "cable and slot",
            observed=figures,
            expected=expected,
        )
        return with_action(finding, *REPLAY_REPAIR)
    return gpu_finding(
        REPLAYS,
        PASS,
        gpu,
        f"GPU {gpu.index} PCIe link resent {growth} packets during the burn-in (at most "
        f"{limit} allowed)",
        observed=figures,
        expected=expected,
    )


def _replay_unknown(gpu: GpuBurn, missing: Unavailable, expected: str) -> Finding:
    # DCGM watches replays in every test: required wherever the GPU offers the counter and
    # the burn loaded it; a GPU that never completed its burn is failed by burn.status.
    required = missing.reason is not Reason.NOT_SUPPORTED and gpu.status is BurnStatus.COMPLETED
    finding = gpu_finding(
        REPLAYS,
        UNKNOWN,
        gpu,
        f"GPU {gpu.index} PCIe replays during the burn-in cannot be judged: {why_not(missing)}",
        observed=missing,
        expected=expected,
        required=required,
    )
    return with_action(finding, Action.RERUN, REPLAY_RERUN_SOURCE)


__all__ = ["REPLAYS", "REPLAY_REPAIR", "REPLAY_RERUN_SOURCE", "check"]
