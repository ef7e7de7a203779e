"""Whether the chosen GPUs were free when the run began: others' work makes a node UNKNOWN.

A GPU with compute processes, or a node with a Slurm job other than the run's own,
was not burned or measured (validator.node.collect): nothing can be said of its
hardware, and burning beside a job would blame the hardware for the job's load. With
``--allow-busy`` they were burned anyway, and the report says so.
"""

from __future__ import annotations

from validator.judge.catalog import Sku
from validator.judge.policy import Policy
from validator.model import Action, Finding, NodeFacts, Severity, busy_reasons

CHECK = "state.busy"
NOT_MEASURED_WORDS = (
    "not burned or measured: drain the node or wait for its jobs to end, or give --allow-busy"
)


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """One finding per busy GPU (and one for Slurm's jobs); none where the GPUs were free."""
    del policy, sku  # whatever the rules, a busy GPU was not tested
    findings = []
    for reason in busy_reasons(facts):
        if facts.allow_busy:
            findings.append(
                Finding(
                    CHECK,
                    Severity.WARN,
                    f"{reason.text}: burned anyway (--allow-busy); its figures may read low",
                    observed=reason.text,
                    expected="no other work on the GPUs",
                    gpu_index=reason.gpu_index,
                    required=False,
                    action=Action.WAIT_IDLE,
                )
            )
            continue
        findings.append(
            Finding(
                CHECK,
                Severity.UNKNOWN,
                f"{reason.text}: {NOT_MEASURED_WORDS}",
                observed=reason.text,
                expected="no other work on the GPUs",
                gpu_index=reason.gpu_index,
                action=Action.WAIT_IDLE,
            )
        )
    return findings
