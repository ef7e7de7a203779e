"""Whether the chosen GPUs were free when the run began: others' work makes a node UNKNOWN.

A GPU with compute processes, or a node with a Slurm job other than the run's own,
was not burned or measured (validator.node.collect): nothing can be said of its
hardware, and burning beside a job would blame the hardware for the job's load. With
``--allow-busy`` they were burned anyway, and the report says so.

Where the run could not tell (NVML's process list or ``scontrol listpids`` failed),
the GPUs were burned as if free: that is never a silent PASS. A failed query is a
required UNKNOWN, as for any state the driver could have given and did not; a GPU
whose NVML has no such query (not supported) is an optional UNKNOWN that says so,
as state.recovery_action does for drivers without the field. With ``--allow-busy``
the operator accepted others' work anyway, so not knowing is a WARN.
"""

from __future__ import annotations

from validator.judge.catalog import Sku
from validator.judge.policy import Policy
from validator.model import Action, Finding, NodeFacts, Reason, Severity, Unavailable, busy_reasons
from validator.model.busy_facts import unreadable

CHECK = "state.busy"
# The observed value of a finding that could not tell: not busy, so no "wait for its jobs".
UNREADABLE = "could not read"
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
    return findings + [_unreadable(facts, index, why) for index, why in unreadable(facts)]


def is_busy(finding: Finding) -> bool:
    """True for a finding that others' work kept the GPUs from being tested."""
    return (
        finding.check == CHECK
        and finding.severity is Severity.UNKNOWN
        and finding.observed != UNREADABLE
    )


def _unreadable(facts: NodeFacts, index: int | None, why: Unavailable) -> Finding:
    """Could not tell whether the GPU (``None``: the node, Slurm) was free: never PASS."""
    unsupported = why.reason is Reason.NOT_SUPPORTED
    if index is None:
        what = "the node"
        cause = f"Slurm's job listing could not be read: {why}"
    else:
        what = f"GPU {index}"
        cause = (
            f"NVML does not support listing GPU {index}'s running processes ({why.detail})"
            if unsupported
            else f"GPU {index}'s running processes could not be read: {why}"
        )
    words = f"{cause}: could not tell whether {what} was free of others' work"
    if facts.allow_busy:
        return Finding(
            CHECK,
            Severity.WARN,
            f"{words}; burned anyway (--allow-busy)",
            observed=UNREADABLE,
            expected="a readable process list",
            gpu_index=index,
            required=False,
            action=Action.MEASURE,
        )
    return Finding(
        CHECK,
        Severity.UNKNOWN,
        f"{words}; it was burned as if free",
        observed=UNREADABLE,
        expected="a readable process list",
        gpu_index=index,
        required=not unsupported,
        action=Action.MEASURE if unsupported else Action.RERUN,
    )
