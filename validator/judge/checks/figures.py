"""Figures plausible: a burn, copy or power figure above what the hardware can do blocks.

:func:`validator.judge.figure_ceilings.screen` makes each such figure "not measured" before the
checks run, so no check passes on it; this names each one, in one required UNKNOWN per
GPU (and one for the node's all-reduce), with the figure, its ceiling and where the
ceiling comes from. UNKNOWN, not FAIL: nothing says the GPU is slow or broken, only that
this figure did not come from it (a tool that miscounted, a unit mixed up, a forged
result).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from validator.judge.checks.finding_helpers import UNKNOWN, gpu_finding, node_finding
from validator.judge.figure_ceilings import Implausible, by_gpu
from validator.model import Finding, GpuBurn, GpuFacts, NodeFacts

CHECK = "inventory.figures_plausible"
ACTION = (
    "no GPU of this model can do that: measure again, and if it stays, trust nothing this "
    "node's agent or tools reported until the cause (a miscounting tool, a wrong unit, an "
    "edited result) is found"
)


def findings(facts: NodeFacts, found: Sequence[Implausible]) -> list[Finding]:
    """One required UNKNOWN per GPU with a figure above its ceiling, and one for the node.

    Args:
        facts: the node's facts, for each GPU's UUID.
        found: what :func:`validator.judge.figure_ceilings.screen` replaced.
    """
    gpus: dict[int, GpuFacts | GpuBurn] = {gpu.index: gpu for gpu in facts.gpus}
    out = []
    for index, items in by_gpu(found).items():
        said = "; ".join(str(item) for item in items)
        observed = ", ".join(item.figure for item in items)
        expected = "figures within what the hardware can do"
        if index is None:
            out.append(
                node_finding(
                    CHECK,
                    UNKNOWN,
                    f"The node reported {said}; {ACTION}",
                    observed=observed,
                    expected=expected,
                )
            )
            continue
        gpu = gpus.get(index)
        message = f"GPU {index} reported {said}; {ACTION}"
        if gpu is None:
            finding = node_finding(CHECK, UNKNOWN, message, observed=observed, expected=expected)
            out.append(_with_index(finding, index))
            continue
        out.append(gpu_finding(CHECK, UNKNOWN, gpu, message, observed=observed, expected=expected))
    return out


def _with_index(finding: Finding, index: int) -> Finding:
    # A burn or copy figure of a GPU the node's facts do not list: still named by index.
    return dataclasses.replace(finding, gpu_index=index)
