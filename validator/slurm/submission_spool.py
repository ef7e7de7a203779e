"""A Slurm submission on shared storage: the agent, the batch script and each node's result.

The controller and every node see the spool at the same path (an NFS home, a Lustre
or GPFS project folder). One submission is one folder, named by a token the
controller makes and linked under each of its job ids, so ``gpuready slurm collect
JOBID`` finds it::

    SPOOL/<token>/
        request.json     what was asked: nodes, jobs, the options needed to judge
        agent.pyz        the node agent (validator.remote.bundle)
        step.sh          what one node runs: the agent, its output kept atomically
        job.sh           the batch script: delivers the agent, one srun step per node
        slurm-<job>.out  the batch script's own output
        out/<node>.stdout  the agent's stdout (NodeFacts, ``--packed``), renamed into
                           place whole (``<node>.json``, JSON, in older spools)
        out/<node>.stderr  the agent's stderr
        out/<node>.rc      its exit status, written last: the node is done
    SPOOL/<job id> -> <token>

Why a spool rather than srun's labelled output: results outlive the controller
(``--no-wait``, a controller that crashed or was rebooted), each node's arrives whole
as it finishes, and nothing rests on srun relaying megabytes of JSON from thousands
of nodes through one process.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from validator.error_tree import BadInputError, CouldNotRunError
from validator.files import write_atomic
from validator.limits import (
    AGENT_OUTPUT_BYTES,
    INVENTORY_BYTES,
    OverLimitError,
    read_head,
    read_tail,
    read_text,
)

REQUEST_FILE = "request.json"
# Each node's stdout in out/: packed facts. Spools written before the agent packed its
# facts for Slurm named it <node>.json (JSON); those are still read.
STDOUT_SUFFIX = ".stdout"
EARLIER_STDOUT_SUFFIX = ".json"
AGENT_FILE = "agent.pyz"
STEP_FILE = "step.sh"
JOB_FILE = "job.sh"
OUT_DIR = "out"
SPOOL_VERSION = 1
_RC_BYTES = 64  # an exit status and its newline
_STDERR_BYTES = 64 * 1024  # only its last lines are shown
_TOKEN = re.compile(r"gpuready-[0-9]{8}T[0-9]{6}-[0-9a-f]{8}")
_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")


@dataclass(frozen=True)
class NodeOutput:
    """What one node left in the spool; ``rc`` None: not done (or not yet visible)."""

    node: str
    rc: int | None
    stdout: bytes = b""
    stderr: str = ""


@dataclass(frozen=True)
class Submission:
    """One submission's folder and what it asked for.

    Attributes:
        directory: ``SPOOL/<token>``.
        nodes: every target node, in report order.
        jobs: node name to the id of the job that runs it (absent: never submitted).
        skipped: node name to why it was not submitted (Slurm's words).
        quarantined: nodes gpuready drained before and resumed inside ``reservation``
            to test them; each with the reason it had.
        reservation: the quarantine reservation's name, or None.
        options: what the controller needs to judge the results (policy, inventories,
            burn length, deadline, ...): plain JSON data.
        created_at: when it was made (UTC, ISO 8601).
    """

    directory: Path
    nodes: tuple[str, ...]
    jobs: Mapping[str, str] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)
    quarantined: Mapping[str, str] = field(default_factory=dict)
    reservation: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    created_at: str = ""

    @property
    def token(self) -> str:
        """The folder's name, which ``slurm collect`` also takes."""
        return self.directory.name

    @property
    def out_dir(self) -> Path:
        """Where the nodes' results land."""
        return self.directory / OUT_DIR

    @property
    def job_ids(self) -> tuple[str, ...]:
        """Every job id, each once, in submission order."""
        return tuple(dict.fromkeys(self.jobs.values()))

    def to_json(self) -> str:
        """``request.json``'s text."""
        data = {
            "spool_version": SPOOL_VERSION,
            "created_at": self.created_at,
            "nodes": list(self.nodes),
            "jobs": dict(self.jobs),
            "skipped": dict(self.skipped),
            "quarantined": dict(self.quarantined),
            "reservation": self.reservation,
            "options": dict(self.options),
        }
        return json.dumps(data, indent=2, sort_keys=True) + "\n"


def default_spool() -> Path:
    """``$XDG_STATE_HOME/gpuready/spool``, else ``~/.local/state/gpuready/spool``.

    Beside the history database (validator.store.defaults), and under the home folder,
    which a cluster's nodes often share; a spool elsewhere is ``--spool`` or a setting.
    """
    from validator.store.defaults import state_dir

    return state_dir() / "spool"


def earlier_spool() -> Path:
    """Where submissions went before the spool moved under XDG state: ``~/.gpuready/slurm``."""
    return Path.home() / ".gpuready" / "slurm"


def spool_holding(spool: str | os.PathLike[str], token_or_job: str) -> tuple[Path, str | None]:
    """The spool to find ``token_or_job`` in, and a notice when it is not ``spool``.

    A submission made before an upgrade sits in :func:`earlier_spool`: where ``spool`` is
    the default and holds no such submission, the earlier one is read (and said so), so
    that an upgrade loses no pending submission.
    """
    given = Path(spool)
    name = token_or_job.strip().split("_")[0]
    earlier = earlier_spool()
    if (
        given != default_spool()
        or not name
        or "/" in name
        or name in (".", "..")
        or os.path.lexists(given / name)
        or not os.path.lexists(earlier / name)
    ):
        return given, None
    return earlier, (
        f"slurm: {name} is in the earlier spool {earlier} (new submissions go to {given}); "
        "reading it from there"
    )


def new_submission(spool: str | os.PathLike[str]) -> Path:
    """Make ``SPOOL/<token>/out`` and return ``SPOOL/<token>``.

    Raises:
        BadInputError: the spool cannot be made or written, naming it and the fix.
    """
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    directory = Path(spool) / f"gpuready-{stamp}-{secrets.token_hex(4)}"
    try:
        (directory / OUT_DIR).mkdir(parents=True, mode=0o755)
    except OSError as exc:
        raise BadInputError(
            f"--spool {spool} cannot be written ({exc.strerror or exc}); give a folder on "
            "storage every node shares, at the same path"
        ) from None
    return directory


def save(submission: Submission, new_jobs: Collection[str] | None = None) -> None:
    """Write (or rewrite) ``request.json`` and link each job id to the folder.

    Args:
        submission: what to write.
        new_jobs: the job ids to link (those added since the last save); None: all.
            A campaign saves as it submits, so linking only the new ones keeps
            10,000 submissions from checking 10,000 links each time.

    Raises:
        CouldNotRunError: the spool could not be written.
    """
    linked = submission.job_ids if new_jobs is None else tuple(dict.fromkeys(new_jobs))
    try:
        write_atomic(submission.directory / REQUEST_FILE, submission.to_json())
        for job_id in linked:
            link = submission.directory.parent / job_id.split("_")[0]
            # A job id Slurm gave before (another cluster on the same home, a reset
            # controller) points at an older submission: this one takes the name.
            if not link.is_symlink() or os.readlink(link) != submission.token:
                temporary = link.with_name(f".{link.name}.{os.getpid()}.link")
                temporary.unlink(missing_ok=True)
                temporary.symlink_to(submission.token)
                os.replace(temporary, link)
    except OSError as exc:
        raise CouldNotRunError(
            f"cannot write the submission {submission.directory}: {exc.strerror or exc}"
        ) from None


def write_file(directory: Path, name: str, data: str | bytes, *, mode: int = 0o644) -> Path:
    """One file of the submission, atomically.

    Raises:
        CouldNotRunError: it could not be written.
    """
    try:
        return write_atomic(directory / name, data, mode=mode)
    except OSError as exc:
        raise CouldNotRunError(
            f"cannot write {directory / name}: {exc.strerror or exc}; free space on the spool"
        ) from None


def find(spool: str | os.PathLike[str], token_or_job: str) -> Submission:
    """The submission a token or one of its job ids names.

    Raises:
        BadInputError: no such submission in ``spool``, or its request.json is unreadable.
    """
    text = token_or_job.strip()
    if not (_TOKEN.fullmatch(text) or _JOB_ID.fullmatch(text)):
        raise BadInputError(
            f"{token_or_job!r} is neither a job id nor a gpuready submission token; give the "
            "job id or token that certify --slurm --no-wait printed"
        )
    directory = Path(spool) / text.split("_")[0]
    request = directory / REQUEST_FILE
    try:
        data = json.loads(read_text(request, INVENTORY_BYTES))
    except OverLimitError as exc:
        raise BadInputError(f"{request} {exc}: the submission is damaged") from None
    except FileNotFoundError:
        raise BadInputError(
            f"no gpuready submission {text} in {spool}: give the --spool it was submitted with"
        ) from None
    except (OSError, ValueError) as exc:
        raise BadInputError(f"cannot read {request}: {exc}; the submission is damaged") from None
    submission = _from_data(directory.resolve(), data, request)
    job = text.split("_")[0]
    if _JOB_ID.fullmatch(text) and job not in {j.split("_")[0] for j in submission.job_ids}:
        raise BadInputError(
            f"{spool}/{job} is a submission of other jobs ({', '.join(submission.job_ids[:3])}):"
            f" give its token {submission.token}, or the --spool job {job} was submitted with"
        )
    return submission


def _from_data(directory: Path, data: object, where: Path) -> Submission:
    def bad(what: str) -> BadInputError:
        return BadInputError(f"{where}: {what}; the submission is damaged, submit it again")

    if not isinstance(data, dict) or data.get("spool_version") != SPOOL_VERSION:
        raise bad(f"not a version {SPOOL_VERSION} gpuready submission")
    nodes = data.get("nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise bad("'nodes' is not a list of node names")
    maps: dict[str, dict[str, str]] = {}
    for key in ("jobs", "skipped", "quarantined"):
        value = data.get(key, {})
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise bad(f"{key!r} is not a map of node names to text")
        maps[key] = value
    reservation = data.get("reservation")
    options = data.get("options", {})
    if reservation is not None and not isinstance(reservation, str):
        raise bad("'reservation' is not text")
    if not isinstance(options, dict):
        raise bad("'options' is not a map")
    return Submission(
        directory=directory,
        nodes=tuple(nodes),
        jobs=maps["jobs"],
        skipped=maps["skipped"],
        quarantined=maps["quarantined"],
        reservation=reservation,
        options=options,
        created_at=str(data.get("created_at", "")),
    )


def read_output(submission: Submission, node: str) -> NodeOutput:
    """What ``node`` left in the spool (rc None while it has not finished)."""
    out = submission.out_dir
    try:
        rc_text = read_head(out / f"{node}.rc", _RC_BYTES).decode("ascii").strip()
    except (OSError, OverLimitError, UnicodeDecodeError):
        return NodeOutput(node, None)
    try:
        rc = int(rc_text)
    except ValueError:
        return NodeOutput(node, None)  # being written: the rename makes this rare
    stdout = _read_bytes(out / f"{node}{STDOUT_SUFFIX}") or _read_bytes(
        out / f"{node}{EARLIER_STDOUT_SUFFIX}"
    )
    try:
        stderr = read_tail(out / f"{node}.stderr", _STDERR_BYTES)[0].decode("utf-8", "replace")
    except (OSError, OverLimitError):
        stderr = ""
    return NodeOutput(node, rc, stdout, stderr)


def finished_nodes(submission: Submission) -> set[str]:
    """The nodes whose ``.rc`` is in the spool."""
    try:
        names = os.listdir(submission.out_dir)
    except OSError:
        return set()
    return {name[: -len(".rc")] for name in names if name.endswith(".rc")}


def _read_bytes(path: Path) -> bytes:
    """The agent's output, up to one byte past what any agent prints (agent_facts refuses it)."""
    try:
        return read_head(path, AGENT_OUTPUT_BYTES)
    except (OSError, OverLimitError):  # missing, or planted as a FIFO or a device
        return b""


def job_arguments(job_ids: Sequence[str]) -> list[str]:
    """Job ids checked before they reach a Slurm command line."""
    for job_id in job_ids:
        if not _JOB_ID.fullmatch(job_id):
            raise CouldNotRunError(f"sbatch gave {job_id!r}, which is not a job id")
    return list(job_ids)


__all__ = [
    "AGENT_FILE",
    "JOB_FILE",
    "OUT_DIR",
    "REQUEST_FILE",
    "STEP_FILE",
    "NodeOutput",
    "Submission",
    "find",
    "finished_nodes",
    "job_arguments",
    "new_submission",
    "read_output",
    "save",
    "write_file",
]
