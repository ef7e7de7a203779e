"""Before the burn: who else is on the GPUs, and which GPUs this run certifies.

NVML lists each GPU's compute processes (validator.node.nvml); their names are the
host's (``/proc/PID/comm``, read through the System, bounded and kept as untrusted
text). Slurm, where it is installed, lists the jobs with processes on this node
(``scontrol listpids``, asked of the local slurmd) and the jobs allocated it (``squeue``,
one question to the controller per certify, never per drift), each under a timeout; the
run's own job (``SLURM_JOB_ID``) is not another's. A chosen GPU with
processes, or a job on the node, is busy: the collector then burns and measures
nothing (validator.node.collect) unless ``--allow-busy`` was given.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from validator.model import GpuFacts, Measured, NodeFacts, Reason, Unavailable
from validator.node.system import NotRecordedError
from validator.node.system_facts import command_failure, read_file

if TYPE_CHECKING:
    from validator.node.system import System

SCONTROL = "scontrol"
LISTPIDS = (SCONTROL, "listpids")
SQUEUE = "squeue"
# A job holds the node's GPUs in these states (PENDING holds nothing yet).
ALLOCATED_STATES = "RUNNING,CONFIGURING,COMPLETING,SUSPENDED"
SLURM_TIMEOUT_S = 10.0
COMM_CHARS = 64  # the kernel keeps 15 (TASK_COMM_LEN); more is not /proc's
LISTPIDS_LINES = 20000  # processes of every job on a node: a fork bomb is not a listing
_JOB_ID = re.compile(r"[0-9]{1,12}(?:[_+][0-9]{1,12})?")


def observe(
    system: System,
    facts: NodeFacts,
    *,
    allow_busy: bool = False,
    chosen: Sequence[int] | None = None,
) -> NodeFacts:
    """The facts with their processes named, Slurm's other jobs, the GPUs chosen and the gate."""
    gpus = tuple(_named(system, gpu) for gpu in facts.gpus)
    return dataclasses.replace(
        facts,
        gpus=gpus,
        slurm_jobs=slurm_jobs(system),
        allow_busy=allow_busy,
        chosen_gpus=None if chosen is None else tuple(chosen),
    )


def _named(system: System, gpu: GpuFacts) -> GpuFacts:
    """One GPU with its processes' names (this process's own left out: it is not busy)."""
    processes = gpu.compute_processes
    if not isinstance(processes, tuple) or not processes:
        return gpu
    named = tuple(
        dataclasses.replace(process, name=process_name(system, process.pid))
        for process in processes
        if process.pid != os.getpid()
    )
    return dataclasses.replace(gpu, compute_processes=named)


def process_name(system: System, pid: int) -> Measured[str]:
    """``/proc/PID/comm``, its first line cut to :data:`COMM_CHARS`; why not, where gone."""
    text = read_file(system, f"/proc/{int(pid)}/comm")
    if isinstance(text, Unavailable):
        return text
    return text.split("\n", 1)[0][:COMM_CHARS]


def slurm_jobs(system: System, own: str | None = None) -> Measured[tuple[str, ...]]:
    """The Slurm jobs other than ``own`` (default ``SLURM_JOB_ID``) here, run or allocated.

    Not supported where ``scontrol`` is absent (no Slurm); an error where it fails.
    """
    if system.which(SCONTROL) is None:
        return Unavailable(Reason.NOT_SUPPORTED, "scontrol not found: no Slurm on this node")
    try:
        result = system.run(LISTPIDS, timeout_s=SLURM_TIMEOUT_S)
    except NotRecordedError as exc:
        return Unavailable(Reason.NOT_MEASURED, str(exc))
    if not result.ok:
        return command_failure(result, "scontrol listpids")
    jobs = parse_listpids(result.stdout)
    allocated = _allocated_jobs(system)
    if isinstance(allocated, Unavailable):
        return allocated
    own_job = os.environ.get("SLURM_JOB_ID", "") if own is None else own
    return tuple(job for job in dict.fromkeys((*jobs, *allocated)) if job != own_job)


def _allocated_jobs(system: System) -> Measured[tuple[str, ...]]:
    """The jobs Slurm has allocated this node, processes or not (``squeue`` asks slurmctld).

    listpids sees only jobs with processes here: one still in its prolog, or an salloc
    that has started nothing, has none. The node's Slurm name is slurmd's
    (``SLURMD_NODENAME``), else the short hostname. No squeue, or one not recorded (a
    scenario), adds nothing; one that fails is an error, not a free node.
    """
    if system.which(SQUEUE) is None:
        return ()
    node = os.environ.get("SLURMD_NODENAME") or system.hostname().split(".", 1)[0]
    argv = (SQUEUE, "--noheader", "--nodelist", node, f"--states={ALLOCATED_STATES}", "--format=%i")
    try:
        result = system.run(argv, timeout_s=SLURM_TIMEOUT_S)
    except NotRecordedError:
        return ()
    if not result.ok:
        return command_failure(result, "squeue")
    lines = result.stdout.splitlines()[:LISTPIDS_LINES]
    return tuple(dict.fromkeys(line.strip() for line in lines if _JOB_ID.fullmatch(line.strip())))


def parse_listpids(text: str) -> tuple[str, ...]:
    """The job ids of ``scontrol listpids``' table (``PID JOBID STEPID LOCALID GLOBALID``).

    The JOBID column is found by its header, so a Slurm that adds or reorders columns
    still reads; a line whose id is not a job id (a warning) is skipped.
    """
    lines = text.splitlines()[:LISTPIDS_LINES]
    header = next((line.split() for line in lines if "JOBID" in line.split()), None)
    if header is None:
        return ()
    column = header.index("JOBID")
    jobs: dict[str, None] = {}
    for line in lines:
        cells = line.split()
        if cells == header or len(cells) <= column:
            continue
        if _JOB_ID.fullmatch(cells[column]):
            jobs[cells[column]] = None
    return tuple(jobs)


__all__ = ["observe", "parse_listpids", "process_name", "slurm_jobs"]
