"""PCIe: the link can reach the generation the SKU needs, at full width.

The current generation drops at idle to save power, so only the maximum generation is
judged; the width does not drop at idle, so the current width is judged (an x16 card
trained at x8 has a bad slot, riser or seating).
"""

from __future__ import annotations

from validator.judge.catalog import Sku
from validator.judge.checks.common import (
    FAIL,
    PASS,
    UNKNOWN,
    gpu_finding,
    node_finding,
    readable_gpus,
    unknown_gpu,
    unknown_sku,
)
from validator.judge.policy import Policy
from validator.model import Finding, GpuFacts, NodeFacts, Unavailable


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge each GPU's PCIe link generation and width."""
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
    return findings


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
