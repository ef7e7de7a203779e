"""Inventory: the driver answers, every GPU is there and answering, one known model."""

from __future__ import annotations

from collections import Counter

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    follow_driver,
    gpu_finding,
    gpu_list,
    gpu_state,
    node_finding,
    nvml_fix,
    nvml_problem,
    readable_gpus,
    why_not,
    with_action,
)
from validator.judge.policy import Policy
from validator.model import Finding, GpuStatus, NodeFacts, NvmlStatus


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge the driver's reach, GPU count, lost GPUs and the GPU model."""
    findings = [*_driver(facts), *_gpu_status(facts), *_count(facts, policy)]
    findings += _model(facts, policy, sku)
    return findings


def _driver(facts: NodeFacts) -> list[Finding]:
    # A version mismatch is judged (and failed) by versions.kernel_module, not twice.
    if facts.nvml_status is NvmlStatus.DRIVER_MISMATCH:
        return []
    if facts.nvml_status in (NvmlStatus.OK, NvmlStatus.NO_DEVICES):
        return [
            node_finding(
                "inventory.driver",
                PASS,
                "The NVIDIA driver answered through NVML",
                observed=facts.nvml_status.value,
                expected="ok",
            )
        ]
    problem = nvml_problem(facts) or facts.nvml_status.value
    fix = nvml_fix(facts)
    advice = f"; {fix[0]}" if fix is not None else ""
    pci_gpus = facts.pci_gpu_count
    if isinstance(pci_gpus, int) and pci_gpus > 0:
        finding = node_finding(
            "inventory.driver",
            FAIL,
            f"The PCI bus shows {pci_gpus} NVIDIA GPUs but {problem}"
            + (advice or "; install or load the driver (gpuready provision)")
            + ", and certify again",
            observed=facts.nvml_status.value,
            expected="ok",
        )
    else:
        finding = node_finding(
            "inventory.driver",
            UNKNOWN,
            f"GPUs cannot be inspected: {problem}{advice}",
            observed=facts.nvml_status.value,
            expected="ok",
        )
    if fix is None:
        return [finding]
    return [with_action(finding, fix[1], f"gpuready: {fix[0]}")]


def _gpu_status(facts: NodeFacts) -> list[Finding]:
    findings: list[Finding] = []
    for gpu in facts.gpus:
        bus = gpu.pci_bus_id if isinstance(gpu.pci_bus_id, str) else "bus id unknown"
        status, why = gpu_state(gpu)
        detail = f": {why}" if why else ""
        if status is GpuStatus.LOST:
            findings.append(
                gpu_finding(
                    "inventory.gpu_status",
                    FAIL,
                    gpu,
                    f"GPU {gpu.index} ({bus}) has fallen off the bus{detail}; reboot the node "
                    "and replace the GPU if it happens again",
                    observed="lost",
                    expected="ok",
                )
            )
        elif status is GpuStatus.ERROR:
            findings.append(
                gpu_finding(
                    "inventory.gpu_status",
                    UNKNOWN,
                    gpu,
                    f"GPU {gpu.index} ({bus}) could not be read{detail}; none of its checks "
                    "can be judged",
                    observed="error",
                    expected="ok",
                )
            )
    if facts.gpus and not findings:
        findings.append(
            node_finding(
                "inventory.gpu_status",
                PASS,
                f"All {len(facts.gpus)} GPUs answered",
                observed=len(facts.gpus),
                expected=len(facts.gpus),
            )
        )
    return findings


def _count(facts: NodeFacts, policy: Policy) -> list[Finding]:
    seen = len(facts.gpus)
    pci = facts.pci_gpu_count if isinstance(facts.pci_gpu_count, int) else None
    if facts.nvml_status not in (NvmlStatus.OK, NvmlStatus.NO_DEVICES):
        bus = f"; the PCI bus shows {pci}" if pci is not None else ""
        return [
            follow_driver(
                node_finding(
                    "inventory.gpu_count",
                    UNKNOWN,
                    f"GPUs cannot be counted through the driver{bus}",
                    observed="unknown",
                    expected=policy.expected_gpu_count or pci or "",
                ),
                facts,
            )
        ]
    if seen == 0:
        bus = f"; the PCI bus shows {pci}" if pci else ""
        return [
            node_finding(
                "inventory.gpu_count",
                FAIL,
                f"The driver found no GPU on this node{bus}",
                observed=0,
                expected=policy.expected_gpu_count or pci or ">= 1",
            )
        ]
    findings: list[Finding] = []
    if policy.expected_gpu_count is not None:
        expected, basis = policy.expected_gpu_count, "the policy expects"
    elif pci is not None:
        expected, basis = pci, "the PCI bus shows"
    else:
        return [
            node_finding(
                "inventory.gpu_count",
                UNKNOWN,
                f"The driver sees {seen} GPUs, but neither the policy (expected_gpu_count) nor "
                "the PCI bus gives a count to compare with",
                observed=seen,
                required=False,
            )
        ]
    if seen == expected:
        findings.append(
            node_finding(
                "inventory.gpu_count",
                PASS,
                f"The driver sees {seen} GPUs and {basis} {expected}",
                observed=seen,
                expected=expected,
            )
        )
    else:
        hint = (
            "; a GPU on the bus that the driver cannot see has failed or lost power"
            if seen < expected
            else ""
        )
        findings.append(
            node_finding(
                "inventory.gpu_count",
                FAIL,
                f"The driver sees {seen} GPUs but {basis} {expected}{hint}",
                observed=seen,
                expected=expected,
            )
        )
    if policy.expected_gpu_count is not None and pci is not None and pci != seen:
        findings.append(
            node_finding(
                "inventory.pci_visible",
                FAIL,
                f"The PCI bus shows {pci} NVIDIA GPUs but the driver sees {seen}",
                observed=seen,
                expected=pci,
            )
        )
    return findings


def _model(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    gpus = readable_gpus(facts)
    named = {gpu.index: gpu.name for gpu in gpus if isinstance(gpu.name, str)}
    findings: list[Finding] = [
        gpu_finding(
            "inventory.model",
            UNKNOWN,
            gpu,
            f"GPU {gpu.index} product name could not be read, so its model is unknown: "
            f"{why_not(gpu.name)}",
        )
        for gpu in gpus
        if not isinstance(gpu.name, str)
    ]
    if not named:
        return findings
    counts = Counter(named.values())
    if len(counts) > 1:
        parts = [
            f"{gpu_list(i for i, n in named.items() if n == name)} are {name}"
            for name, _ in counts.most_common()
        ]
        findings.append(
            node_finding(
                "inventory.model",
                FAIL,
                "This node mixes GPU models (" + "; ".join(parts) + "); a node must hold one model",
                observed=", ".join(sorted(counts)),
                expected="one model",
            )
        )
    else:
        findings.append(
            node_finding(
                "inventory.model",
                PASS,
                f"All GPUs are {next(iter(counts))}",
                observed=next(iter(counts)),
                expected="one model",
            )
        )
    if policy.expected_model is not None and sku is not None:
        wrong = [i for i, name in named.items() if name not in sku.names]
        if wrong:
            seen = ", ".join(sorted({named[i] for i in wrong}))
            findings.append(
                node_finding(
                    "inventory.expected_model",
                    FAIL,
                    f"{gpu_list(wrong)} {'is' if len(wrong) == 1 else 'are'} {seen}, but the "
                    f"policy expects {sku.label} ({', '.join(sku.names)})",
                    observed=seen,
                    expected=sku.id,
                )
            )
        else:
            findings.append(
                node_finding(
                    "inventory.expected_model",
                    PASS,
                    f"All GPUs are the expected {sku.label}",
                    observed=sku.id,
                    expected=sku.id,
                )
            )
    elif sku is None:
        name = counts.most_common(1)[0][0]
        findings.append(
            node_finding(
                "inventory.sku",
                FAIL,
                f"GPU model {name!r} is not in the SKU catalog; add a row for it to "
                "validator/judge/skus.yaml or set expected_model in the policy",
                observed=name,
                expected="a catalog model",
            )
        )
    else:
        findings.append(
            node_finding(
                "inventory.sku",
                PASS,
                f"GPU model is {sku.label} ({sku.id}) in the SKU catalog",
                observed=sku.id,
                expected=sku.id,
            )
        )
    return findings
