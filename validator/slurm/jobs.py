"""Slurm jobs: submit, follow and cancel them through sbatch, squeue, scontrol and scancel.

A job's state is read where Slurm keeps it: ``squeue`` while slurmctld holds the job
(``--json`` where the installed Slurm has it: 22.05's ignores ``-j`` and ``-t`` and
lists every job, finished ones too, so the ids are picked out here; the text form with
``-t all``, else it hides finished jobs), ``scontrol show job`` for one squeue no longer
lists, and ``sacct`` when accounting is on. slurmctld forgets a job MinJobAge (300 s by
default) after it ends; a job found nowhere is UNKNOWN, never finished well. Slurm
answering nothing at all (slurmctld down) is a SlurmError, never "the job is gone".

Job ids stay strings: ``123``, ``123_4`` (array task), ``123_[0-7]`` (array tasks not
started yet), ``123+0`` (heterogeneous job component), as squeue prints them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from validator.error_tree import BadInputError
from validator.safe_text import one_line
from validator.slurm.commands import Runner, SlurmError, run_slurm, said
from validator.slurm.nodes import json_unsupported

# States in which a job may still run and produce results (squeue(1), JOB STATE CODES).
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
        "SPECIAL_EXIT",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
# 23.02+ JSON gives a job's state as a list, base state and flags; the word squeue
# prints is the first of these flags present (job_state_string's order), else the base.
_FLAG_ORDER = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
)
_BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
TEXT_FORMAT = "%i|%T|%r|%N|%j"
SACCT_FIELDS = "JobID,State,Reason,NodeList,ExitCode"
_JOB_ID = re.compile(r"\d+(?:_(?:\d+|\[[0-9,:%-]+\]))?(?:\+\d+)?")
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")
_BATCH = 500
# Slurm's NO_VAL / INFINITE in 32 bits: "no such number".
_NO_VAL = 0xFFFFFFFE
_GONE = "invalid job id"
_DONE_ALREADY = "already completing or completed"


@dataclass(frozen=True)
class JobState:
    """One job as Slurm describes it."""

    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, NODE_FAIL, ...
    reason: str | None = None  # Slurm's reason word (Resources, NodeDown, ...); None: none
    # Slurm's node list split at top-level commas; an entry may still be a range such as
    # gpu[01-04] (expand_hostlist expands it).
    nodes: tuple[str, ...] = ()
    exit_code: str | None = None  # "exit:signal" as scontrol prints it, e.g. "3:0", "0:15"
    name: str | None = None

    @property
    def finished(self) -> bool:
        """Whether the job has ended (well or not): no result can come from it any more."""
        return self.state not in _LIVE

    @property
    def words(self) -> str:
        """``PENDING (Resources)``, ``NODE_FAIL (NodeDown)``, ``COMPLETED``."""
        return f"{self.state} ({self.reason})" if self.reason else self.state


def checked_job_id(job_id: str) -> str:
    """``job_id`` itself when it is one Slurm job id (``123``, ``123_4``, ``123+0``).

    Raises:
        BadInputError: it is not (a comma or a leading dash would say more to Slurm).
    """
    if not _JOB_ID.fullmatch(job_id):
        raise BadInputError(
            f"{job_id!r} is not a Slurm job id: give one as sbatch printed it (123, or 123_4 "
            "for an array task)"
        )
    return job_id


def _reason(value: object) -> str | None:
    text = one_line(value) if value is not None else ""
    return None if text in ("", "None", "(null)") else text


def _number(value: object) -> object:
    """22.05 gives numbers; 23.02 gives ``{"set": true, "infinite": false, "number": 3}``."""
    if isinstance(value, dict):
        if value.get("set") is False or value.get("infinite") is True:
            return None
        return value.get("number")
    return value


def _int(value: object) -> int | None:
    number = _number(value)
    if isinstance(number, bool) or not isinstance(number, int) or number >= _NO_VAL:
        return None
    return number


def _state(raw: object) -> str:
    if isinstance(raw, list):  # 23.02 and later: ["CANCELLED", "COMPLETING"]
        words = [str(word).upper() for word in raw if str(word)]
        flag = next((flag for flag in _FLAG_ORDER if flag in words), None)
        base = next((word for word in words if word in _BASE_STATES), None)
        return flag or base or (words[0] if words else "UNKNOWN")
    return str(raw or "UNKNOWN").upper()


def _exit_code(raw: object) -> str | None:
    """``exit:signal`` from 22.05's wait status (768 is 3:0) or 23.11's object."""
    if isinstance(raw, dict) and ("return_code" in raw or "signal" in raw):
        code = _int(raw.get("return_code"))
        signal = raw.get("signal")
        number = _int(signal.get("id")) if isinstance(signal, dict) else None
        if code is None and number is None:
            return None
        return f"{code or 0}:{number or 0}"
    status = _int(raw)
    if status is None:
        return None
    return f"{(status >> 8) & 0xFF}:{status & 0x7F}"


def node_parts(hostlist: str) -> tuple[str, ...]:
    """``gpu[01-02,05],login1`` as ``("gpu[01-02,05]", "login1")``.

    Split at the commas outside brackets; the ranges are left for Slurm to expand.
    """
    parts: list[str] = []
    depth, start = 0, 0
    for index, char in enumerate(hostlist):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            parts.append(hostlist[start:index])
            start = index + 1
    parts.append(hostlist[start:])
    return tuple(part.strip() for part in parts if part.strip() and part.strip() != "(null)")


def _json_job_id(entry: dict[str, object]) -> str:
    array_job, task = _int(entry.get("array_job_id")), _int(entry.get("array_task_id"))
    tasks = entry.get("array_task_string")
    het, offset = _int(entry.get("het_job_id")), _int(entry.get("het_job_offset"))
    if array_job and task is not None:
        return f"{array_job}_{task}"
    if array_job and isinstance(tasks, str) and tasks:
        return f"{array_job}_[{tasks}]"
    if het and offset is not None:
        return f"{het}+{offset}"
    return str(_number(entry.get("job_id")))


def parse_squeue_json(text: str) -> list[JobState]:
    """Jobs from ``squeue --json`` (22.05's shape, and 23.02's lists and number objects).

    Raises:
        SlurmError: the text is not squeue's JSON, or Slurm put errors in it (22.05 exits
            0 with ``"errors": [{"error": "Unspecified error", "source": "slurm_load_jobs"}]``
            when slurmctld is down). An "Invalid job id" error is no error: no job listed.
    """
    try:
        data = json.loads(text)
        entries = data["jobs"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SlurmError(f"squeue --json gave no job list: {one_line(exc)}") from None
    errors = [one_line(json.dumps(error)) for error in data.get("errors") or []]
    real = [error for error in errors if _GONE not in error.lower()]
    if real:
        words = []
        for error in data["errors"]:
            if isinstance(error, dict):
                parts = (error.get("description"), error.get("error"), error.get("source"))
                words.append(": ".join(str(part) for part in parts if part))
        raise SlurmError(
            f"squeue --json failed: {one_line('; '.join(words)) or real[0]} "
            "(is slurmctld up and reachable?)"
        )
    jobs = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or "job_id" not in entry:
            continue
        nodes = entry.get("nodes")
        jobs.append(
            JobState(
                job_id=_json_job_id(entry),
                state=_state(entry.get("job_state")),
                reason=_reason(entry.get("state_reason")),
                nodes=node_parts(nodes) if isinstance(nodes, str) else (),
                exit_code=_exit_code(entry.get("exit_code")),
                name=str(entry["name"]) if entry.get("name") else None,
            )
        )
    return jobs


def parse_squeue_text(text: str) -> list[JobState]:
    """Jobs from ``squeue -h -r -o '%i|%T|%r|%N|%j'`` (the name last: it may hold ``|``)."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or not parts[0]:
            continue
        parts += [""] * (5 - len(parts))
        name = "|".join(parts[4:])
        jobs.append(
            JobState(
                job_id=parts[0].strip(),
                state=parts[1].strip().upper() or "UNKNOWN",
                reason=_reason(parts[2]),
                nodes=node_parts(parts[3]),
                name=name or None,
            )
        )
    return jobs


def show_job_fields(text: str) -> dict[str, str]:
    """The first job's ``Key=value`` fields from ``scontrol -o show job``.

    A value may hold spaces: it runs to the next `` Key=``.
    """
    line = text.strip().splitlines()[0] if text.strip() else ""
    marks = list(_FIELD.finditer(line))
    fields: dict[str, str] = {}
    for index, here in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(line)
        fields.setdefault(here.group(1), line[here.end() : end].strip())
    return fields


def _show_job(fields: dict[str, str]) -> JobState | None:
    if "JobId" not in fields or "JobState" not in fields:
        return None
    job_id = fields["JobId"]
    array_job, task = fields.get("ArrayJobId"), fields.get("ArrayTaskId")
    if array_job and task:
        job_id = f"{array_job}_{task}" if task.isdigit() else f"{array_job}_[{task}]"
    elif fields.get("HetJobId") and fields.get("HetJobOffset"):
        job_id = f"{fields['HetJobId']}+{fields['HetJobOffset']}"
    return JobState(
        job_id=job_id,
        state=fields["JobState"].upper(),
        reason=_reason(fields.get("Reason")),
        nodes=node_parts(fields.get("NodeList", "")),
        exit_code=fields.get("ExitCode") or None,
        name=fields.get("JobName") or None,
    )


def parse_show_jobs(text: str) -> list[JobState]:
    """Every job of ``scontrol -o show job`` (one line each: an array gives several)."""
    found = (_show_job(show_job_fields(line)) for line in text.splitlines() if line.strip())
    return [job for job in found if job is not None]


def parse_show_job(text: str) -> JobState | None:
    """A job from ``scontrol -o show job ID``; None for "Invalid job id specified"."""
    return _show_job(show_job_fields(text))


def parse_sbatch(text: str) -> str:
    """The job id ``sbatch --parsable`` printed (``123`` or ``123;cluster``).

    Raises:
        SlurmError: it printed no job id.
    """
    for line in reversed(text.strip().splitlines()):
        first = line.split(";")[0].strip()
        if first.isdigit():
            return first
    raise SlurmError(f"sbatch printed no job id: {one_line(text, 240) or 'nothing'}")


def submit(
    script_path: str, options: Sequence[str], runner: Runner = run_slurm, args: Sequence[str] = ()
) -> str:
    """Submit the batch script at ``script_path``; its job id. Writes nothing itself.

    Runs ``sbatch --parsable OPTIONS SCRIPT_PATH ARGS``. The script's arguments are
    ``args``, or what follows a ``--`` in ``options`` (``[..., "--", "node1", "node2"]``):
    sbatch takes the first word that is not an option as the script, so they go after it.

    Raises:
        BadInputError: ``script_path`` is empty or starts with ``-``.
        SlurmError: sbatch refused the job (its words: a partition, account or limit), or
            printed no id.
    """
    if not script_path or script_path.startswith("-"):
        raise BadInputError(f"{script_path!r} is not a batch script path: give the job.sh path")
    before, after = list(options), []
    if "--" in before:
        cut = before.index("--")
        before, after = before[:cut], before[cut + 1 :]
    result = runner(["sbatch", "--parsable", *before, script_path, *after, *args])
    if result.returncode != 0:
        raise SlurmError(
            f"sbatch refused the job: {said(result)}; check --partition, --account, --qos, "
            "--reservation and --time"
        )
    return parse_sbatch(result.stdout)


def _batches(ids: Sequence[str]) -> Iterable[list[str]]:
    for start in range(0, len(ids), _BATCH):
        yield list(ids[start : start + _BATCH])


def _squeue(ids: Sequence[str], runner: Runner) -> dict[str, JobState]:
    """What squeue says of ``ids`` (of them, those it still lists)."""
    found: dict[str, JobState] = {}
    for batch in _batches(ids):
        listed = ",".join(batch)
        result = runner(["squeue", "--json", "-t", "all", "-j", listed])
        if result.returncode == 0:
            jobs = parse_squeue_json(result.stdout)
        elif json_unsupported(said(result)):
            argv = ["squeue", "-h", "-r", "-t", "all", "-j", listed, "-o", TEXT_FORMAT]
            text = runner(argv)
            # squeue -j with one id exits 1 when slurmctld no longer knows it.
            if text.returncode != 0 and _GONE not in said(text).lower():
                raise SlurmError(f"squeue -j failed: {said(text)}")
            jobs = parse_squeue_text(text.stdout if text.returncode == 0 else "")
        else:
            raise SlurmError(f"squeue --json failed: {said(result)}")
        found.update(_picked(batch, jobs))
    return found


def _picked(ids: Sequence[str], jobs: Sequence[JobState]) -> dict[str, JobState]:
    """``jobs`` by requested id; an array task not started yet is in its ``A_[range]``."""
    by_id = {job.job_id: job for job in jobs}
    picked = {}
    for job_id in ids:
        job = by_id.get(job_id)
        if job is None and "_" in job_id and "[" not in job_id:
            array, task = job_id.split("_", 1)
            job = next(
                (
                    each
                    for each in jobs
                    if each.job_id.startswith(f"{array}_[")
                    and _covers(each.job_id[len(array) + 2 : -1], task)
                ),
                None,
            )
        if job is not None:
            picked[job_id] = job
    return picked


def _covers(task_string: str, task: str) -> bool:
    """Whether an array task string (``0-7``, ``1,3,5-9:2``, ``0-15%4``) names ``task``."""
    if not task.isdigit():
        return False
    wanted = int(task)
    for item in task_string.split("%", maxsplit=1)[0].split(","):
        bounds, _, step_text = item.partition(":")
        low, _, high = bounds.partition("-")
        try:
            first, last = int(low), int(high or low)
            step = int(step_text) if step_text else 1
        except ValueError:
            continue
        if first <= wanted <= last and step > 0 and (wanted - first) % step == 0:
            return True
    return False


def _scontrol(job_id: str, runner: Runner) -> JobState | None:
    result = runner(["scontrol", "-o", "show", "job", job_id])
    if result.returncode != 0:
        if _GONE in said(result).lower():
            return None
        raise SlurmError(f"scontrol show job {job_id} failed: {said(result)}")
    jobs = parse_show_jobs(result.stdout)
    return next((job for job in jobs if job.job_id == job_id), jobs[0] if jobs else None)


def parse_sacct(text: str) -> list[JobState]:
    """Jobs from ``sacct -X -P -n -o JobID,State,Reason,NodeList,ExitCode``.

    sacct writes ``CANCELLED by 1000`` (the state is its first word) and ``None
    assigned`` for a job that never had nodes.
    """
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5 or not parts[0]:
            continue
        words = parts[1].split()
        nodes = "" if parts[3].strip() in ("None assigned", "") else parts[3]
        jobs.append(
            JobState(
                job_id=parts[0].strip(),
                state=words[0].upper() if words else "UNKNOWN",
                reason=_reason(parts[2]),
                nodes=node_parts(nodes),
                exit_code=parts[4].strip() or None,
            )
        )
    return jobs


def _sacct(ids: Sequence[str], runner: Runner) -> tuple[dict[str, JobState], str]:
    """What accounting says of ``ids``, and why it said nothing when it could not."""
    argv = ["sacct", "-X", "-P", "-n", "-j", ",".join(ids), "-o", SACCT_FIELDS]
    try:
        result = runner(argv)
    except SlurmError as exc:  # sacct not installed: no accounting here
        return {}, str(exc)
    if result.returncode != 0:
        return {}, said(result)
    return _picked(ids, parse_sacct(result.stdout)), ""


def job_states(job_ids: Collection[str], runner: Runner = run_slurm) -> dict[str, JobState]:
    """Each job's state, from squeue, else scontrol, else sacct; UNKNOWN where none knows it.

    Args:
        job_ids: ids as sbatch printed them (array tasks as ``123_4``).
        runner: runs the commands.

    Returns:
        One state per id asked for, under that id.

    Raises:
        BadInputError: an id is not a Slurm job id.
        SlurmError: Slurm could not be asked (slurmctld down, a command missing or
            failing): nothing can be said this time, which is not "the job is gone".
    """
    ids = list(dict.fromkeys(checked_job_id(job_id) for job_id in job_ids))
    if not ids:
        return {}
    states = _squeue(ids, runner)
    for job_id in ids:
        if job_id not in states:
            shown = _scontrol(job_id, runner)
            if shown is not None:
                states[job_id] = shown
    missing = [job_id for job_id in ids if job_id not in states]
    if missing:
        accounted, why = _sacct(missing, runner)
        states.update(accounted)
        for job_id in missing:
            if job_id not in states:
                states[job_id] = JobState(job_id, "UNKNOWN", _forgotten(job_id, why))
    return {job_id: states[job_id] for job_id in ids}


def _forgotten(job_id: str, why: str) -> str:
    if not why:
        return f"Slurm no longer knows job {job_id} (accounting has no record of it either)"
    if "disabled" in why.lower() or "not found" in why.lower():
        return (
            f"Slurm no longer knows job {job_id} (finished more than MinJobAge ago and no "
            "accounting)"
        )
    return f"Slurm no longer knows job {job_id} (finished more than MinJobAge ago; sacct: {why})"


def cancel(job_ids: Collection[str], runner: Runner = run_slurm) -> None:
    """``scancel`` the jobs (in batches); jobs already ended or gone are no error.

    Raises:
        BadInputError: an id is not a Slurm job id.
        SlurmError: scancel is missing or refused.
    """
    ids = list(dict.fromkeys(checked_job_id(job_id) for job_id in job_ids))
    for batch in _batches(ids):
        result = runner(["scancel", *batch])
        if result.returncode == 0:
            continue
        lines = (result.stderr or result.stdout).lower().splitlines()
        refused = [line for line in lines if line.strip()]
        harmless = (_GONE, _DONE_ALREADY)
        if not refused or any(not any(h in line for h in harmless) for line in refused):
            raise SlurmError(f"scancel failed: {said(result)}")


__all__ = [
    "SACCT_FIELDS",
    "TEXT_FORMAT",
    "JobState",
    "cancel",
    "checked_job_id",
    "job_states",
    "node_parts",
    "parse_sacct",
    "parse_sbatch",
    "parse_show_job",
    "parse_show_jobs",
    "parse_squeue_json",
    "parse_squeue_text",
    "show_job_fields",
    "submit",
]
