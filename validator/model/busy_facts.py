"""Which GPUs a run certifies (``--gpus``), and which of them had work of others on them.

One rule for the collector, which does not burn or measure a busy GPU, and for the
judge, which says why: a chosen GPU with compute processes (NVML's running processes)
is busy, and a node where a Slurm job other than the run's own has processes is busy
as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from validator.model.gpu_facts import GpuFacts, GpuProcess, GpuStatus
from validator.model.measured import Reason, Unavailable
from validator.model.node_facts import NodeFacts
from validator.safe_text import one_line

# Processes named in one line; the rest are counted ("and 5 more").
PROCESSES_NAMED = 3
PROCESS_NAME_CHARS = 32  # /proc/PID/comm holds 15; a longer one is not the kernel's
JOBS_NAMED = 5


@dataclass(frozen=True)
class Busy:
    """One reason a GPU (or the whole node, ``gpu_index`` None) was not free to burn."""

    gpu_index: Optional[int]
    text: str  # one line, escaped: "GPU 3 is busy (pid 4711 python)"


def chosen(facts: NodeFacts, index: Optional[int]) -> bool:
    """Whether the GPU ``index`` is certified by this run (a node-wide None always is)."""
    return index is None or facts.chosen_gpus is None or index in facts.chosen_gpus


def scope_text(chosen_indexes: Optional[Tuple[int, ...]], count: int) -> str:
    """Which GPUs a run or certificate covers: ``GPUs 0, 3 of 8`` (--gpus), or ``all 8 GPUs``."""
    if chosen_indexes is None:
        return f"all {count} GPUs"
    word = "GPU" if len(chosen_indexes) == 1 else "GPUs"
    return f"{word} {', '.join(str(index) for index in chosen_indexes)} of {count}"


def chosen_gpus(facts: NodeFacts) -> Tuple[GpuFacts, ...]:
    """The GPUs this run certifies: those ``--gpus`` named, else every one."""
    return tuple(gpu for gpu in facts.gpus if chosen(facts, gpu.index))


def process_words(process: GpuProcess) -> str:
    """``pid 4711 python``: the pid and the host's name for it, escaped."""
    name = process.name if isinstance(process.name, str) else ""
    name = one_line(name, PROCESS_NAME_CHARS)
    return f"pid {process.pid} {name}" if name else f"pid {process.pid}"


def _processes_words(processes: Tuple[GpuProcess, ...]) -> str:
    named = ", ".join(process_words(p) for p in processes[:PROCESSES_NAMED])
    rest = len(processes) - PROCESSES_NAMED
    return f"{named} and {rest} more" if rest > 0 else named


def busy_reasons(facts: NodeFacts) -> Tuple[Busy, ...]:
    """Why the chosen GPUs were not free to burn: one per busy GPU, one for Slurm's jobs.

    A process list or a Slurm listing that could not be read is no reason: the
    GPUs are then burned as before (NVML's utilisation gate still guards the copies),
    and :func:`unreadable` names them for the judge.
    """
    reasons = [
        Busy(gpu.index, f"GPU {gpu.index} is busy ({_processes_words(gpu.compute_processes)})")
        for gpu in chosen_gpus(facts)
        if isinstance(gpu.compute_processes, tuple) and gpu.compute_processes
    ]
    jobs = facts.slurm_jobs
    if isinstance(jobs, tuple) and jobs:
        named = ", ".join(one_line(job, 24) for job in jobs[:JOBS_NAMED])
        more = f" and {len(jobs) - JOBS_NAMED} more" if len(jobs) > JOBS_NAMED else ""
        plural = "s" if len(jobs) > 1 else ""
        reasons.append(Busy(None, f"Slurm job{plural} {named}{more} running on this node"))
    return tuple(reasons)


def unreadable(facts: NodeFacts) -> Tuple[Tuple[Optional[int], Unavailable], ...]:
    """Where the run could not tell whether others' work was on the chosen GPUs, and why.

    One per chosen GPU that answered but whose process list NVML did not give, and one
    (``None``) for a Slurm listing that failed. Left out: no Slurm at all (a fact, not a
    gap), a listing nobody asked for (a capture, a reading through nvidia-smi), and a GPU
    that did not answer at all (its own checks fail it).
    """
    gaps: list[Tuple[Optional[int], Unavailable]] = [
        (gpu.index, gpu.compute_processes)
        for gpu in chosen_gpus(facts)
        if gpu.status is GpuStatus.OK
        and isinstance(gpu.compute_processes, Unavailable)
        and gpu.compute_processes.reason is not Reason.NOT_MEASURED
    ]
    jobs = facts.slurm_jobs
    if isinstance(jobs, Unavailable) and jobs.reason not in _NO_SLURM:
        gaps.append((None, jobs))
    return tuple(gaps)


_NO_SLURM = (Reason.NOT_SUPPORTED, Reason.NOT_MEASURED)


def busy_summary(reasons: Tuple[Busy, ...]) -> str:
    """The reasons as one line: ``GPU 3 is busy (pid 4711 python); GPU 5 is busy (...)``."""
    return "; ".join(reason.text for reason in reasons)
