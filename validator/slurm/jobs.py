"""Slurm jobs: submit, follow and cancel them through sbatch, squeue, scontrol and scancel.

A job's state is read where Slurm keeps it: ``squeue`` while slurmctld holds the job
(``--json`` where the installed Slurm has it; 22.05's ignores ``-j`` and lists every
job, finished ones too, so the ids are picked out here), ``scontrol show job`` for one
squeue no longer lists (slurmctld keeps it MinJobAge, 300 s by default), and ``sacct``
when accounting is on. A job found nowhere is UNKNOWN, never finished well.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from validator.slurm.commands import Runner, SlurmError, run_slurm
from validator.text import one_line

# States in which a job may still produce results (squeue(1), JOB STATE CODES).
_LIVE = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
TEXT_FORMAT = "%i|%T|%r|%N|%j"
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")
_CANCEL_BATCH = 500


@dataclass(frozen=True)
class JobState:
    """One job as Slurm describes it."""

    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, NODE_FAIL, ...
    reason: str | None = None
    nodes: tuple[str, ...] = ()  # as Slurm prints them (a host-list), when it has any
    exit_code: str | None = None
    name: str | None = None

    @property
    def finished(self) -> bool:
        """Whether the job has ended (well or not): no result can come from it any more."""
        return self.state not in _LIVE

    @property
    def words(self) -> str:
        """``PENDING (Resources)``, ``NODE_FAIL (NodeDown)``, ``COMPLETED``."""
        return f"{self.state} ({self.reason})" if self.reason else self.state


def _reason(value: object) -> str | None:
    text = str(value).strip() if value is not None else ""
    return None if text in ("", "None", "(null)") else text


def parse_squeue_json(text: str) -> list[JobState]:
    """Jobs from ``squeue --json`` (22.05's shape, and 23.02's lists and numbers objects).

    Raises:
        SlurmError: the text is not squeue's JSON.
    """
    try:
        entries = json.loads(text)["jobs"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SlurmError(f"squeue --json gave no job list: {one_line(exc)}") from None
    jobs = []
    for entry in entries:
        if not isinstance(entry, dict) or "job_id" not in entry:
            continue
        state = entry.get("job_state")
        if isinstance(state, list):  # 23.02 and later: ["RUNNING"]
            state = state[0] if state else "UNKNOWN"
        job_id = str(_number(entry["job_id"]))
        task = _number(entry.get("array_task_id"))
        if task is not None and str(_number(entry.get("array_job_id"))) not in ("0", "None"):
            job_id = f"{_number(entry.get('array_job_id'))}_{task}"
        nodes = str(entry.get("nodes") or "")
        exit_code = _number(entry.get("exit_code"))
        jobs.append(
            JobState(
                job_id=job_id,
                state=str(state or "UNKNOWN").upper(),
                reason=_reason(entry.get("state_reason")),
                nodes=(nodes,) if nodes else (),
                exit_code=None if exit_code is None else str(exit_code),
                name=str(entry["name"]) if entry.get("name") else None,
            )
        )
    return jobs


def _number(value: object) -> object:
    """22.05 gives numbers; 23.02 gives ``{"set": true, "number": 3}`` objects."""
    if isinstance(value, dict):
        if value.get("set") is False:
            return None
        return value.get("number", value.get("return_code"))
    return value


def parse_squeue_text(text: str) -> list[JobState]:
    """Jobs from ``squeue -h -o '%i|%T|%r|%N|%j'``."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or not parts[0]:
            continue
        parts += [""] * (5 - len(parts))
        jobs.append(
            JobState(
                job_id=parts[0],
                state=parts[1].upper(),
                reason=_reason(parts[2]),
                nodes=(parts[3],) if parts[3] else (),
                name=parts[4] or None,
            )
        )
    return jobs


def show_job_fields(text: str) -> dict[str, str]:
    """``scontrol -o show job``'s ``Key=value`` fields (values may hold spaces)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    marks = list(_FIELD.finditer(line))
    fields = {}
    for here, after in zip(marks, [*marks[1:], None]):
        end = after.start() if after is not None else len(line)
        fields[here.group(1)] = line[here.end() : end].strip()
    return fields


def parse_show_job(text: str) -> JobState | None:
    """A job from ``scontrol -o show job ID``; None for "Invalid job id specified"."""
    fields = show_job_fields(text)
    if "JobId" not in fields or "JobState" not in fields:
        return None
    job_id = fields["JobId"]
    if fields.get("ArrayTaskId") and fields.get("ArrayJobId"):
        job_id = f"{fields['ArrayJobId']}_{fields['ArrayTaskId']}"
    nodes = fields.get("NodeList", "")
    return JobState(
        job_id=job_id,
        state=fields["JobState"].upper(),
        reason=_reason(fields.get("Reason")),
        nodes=(nodes,) if nodes and nodes != "(null)" else (),
        exit_code=fields.get("ExitCode"),
        name=fields.get("JobName"),
    )


def parse_sbatch(text: str) -> str:
    """The job id ``sbatch --parsable`` printed (``123`` or ``123;cluster``).

    Raises:
        SlurmError: it printed no job id.
    """
    first = text.strip().split(";")[0].strip()
    if not first.isdigit():
        raise SlurmError(f"sbatch printed no job id: {one_line(text) or 'nothing'}")
    return first


def submit(
    script_path: str, options: Sequence[str], runner: Runner = run_slurm, args: Sequence[str] = ()
) -> str:
    """Submit ``script_path`` with ``options`` (and ``args`` for the script); its job id.

    Raises:
        SlurmError: sbatch refused the job (its words: a partition, account or limit), or
            printed no id.
    """
    result = runner(["sbatch", "--parsable", *options, script_path, *args])
    if result.returncode != 0:
        said = one_line(result.stderr or result.stdout) or f"exit {result.returncode}"
        raise SlurmError(
            f"sbatch refused the job: {said}; check --partition, --account, --qos, "
            "--reservation and --time"
        )
    return parse_sbatch(result.stdout)


def _squeue(job_ids: Collection[str], runner: Runner) -> dict[str, JobState]:
    wanted = set(job_ids)
    result = runner(["squeue", "--json"])
    if result.returncode == 0:
        jobs = parse_squeue_json(result.stdout)
    else:
        said = one_line(result.stderr or result.stdout)
        if "json" not in said.lower() and "option" not in said.lower():
            raise SlurmError(f"squeue failed: {said or f'exit {result.returncode}'}")
        argv = ["squeue", "-h", "-t", "all", "-j", ",".join(sorted(wanted)), "-o", TEXT_FORMAT]
        listed = runner(argv)
        # squeue -j exits 1 for ids it no longer knows: what it did list still counts.
        jobs = parse_squeue_text(listed.stdout)
    return {job.job_id: job for job in jobs if job.job_id in wanted}


def _sacct(job_id: str, runner: Runner) -> JobState | None:
    argv = ["sacct", "-X", "-P", "-n", "-j", job_id, "-o", "JobID,State,Reason,NodeList,ExitCode"]
    result = runner(argv)
    if result.returncode != 0:
        return None  # accounting off (or sacct missing): nothing more to learn
    for line in result.stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 5 and parts[0] == job_id:
            state = parts[1].split()[0].upper() if parts[1].strip() else "UNKNOWN"
            return JobState(job_id, state, _reason(parts[2]), (parts[3],), parts[4], None)
    return None


def job_states(job_ids: Collection[str], runner: Runner = run_slurm) -> dict[str, JobState]:
    """Each job's state, from squeue, else scontrol, else sacct; UNKNOWN where none knows it.

    Raises:
        SlurmError: squeue itself failed (slurmctld down): nothing can be said this time.
    """
    if not job_ids:
        return {}
    states = _squeue(job_ids, runner)
    for job_id in job_ids:
        if job_id in states:
            continue
        shown = runner(["scontrol", "-o", "show", "job", job_id])
        found = parse_show_job(shown.stdout) if shown.returncode == 0 else None
        found = found or _sacct(job_id, runner)
        states[job_id] = found or JobState(
            job_id,
            "UNKNOWN",
            f"Slurm no longer knows job {job_id} (it ended more than MinJobAge ago and "
            "accounting is off)",
        )
    return states


def cancel(job_ids: Collection[str], runner: Runner = run_slurm) -> None:
    """``scancel`` the jobs (in batches); jobs already gone are no error.

    Raises:
        SlurmError: scancel is missing or refused.
    """
    ids = list(job_ids)
    for start in range(0, len(ids), _CANCEL_BATCH):
        batch = ids[start : start + _CANCEL_BATCH]
        result = runner(["scancel", *batch])
        said = one_line(result.stderr or result.stdout)
        if result.returncode != 0 and "invalid job id" not in said.lower():
            raise SlurmError(f"scancel failed: {said or f'exit {result.returncode}'}")


__all__ = [
    "TEXT_FORMAT",
    "JobState",
    "cancel",
    "job_states",
    "parse_sbatch",
    "parse_show_job",
    "parse_squeue_json",
    "parse_squeue_text",
    "show_job_fields",
    "submit",
]
