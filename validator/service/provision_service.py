"""Provision hosts: run ``playbooks/site.yml`` through ansible-runner and return typed results.

:func:`run_provision` takes a :class:`ProvisionRequest` (the CLI's options, checked
and typed) and returns a :class:`ProvisionResult`: the play recap per host, the
first failure message per host and where the run's artifacts are. Every host
result event is also handed, as a :class:`ProvisionEvent`, to an optional
callback, which is how the CLI draws its progress.

Decisions:

* ansible-runner is imported lazily, inside the functions that need it, so that
  importing this module (and ``gpuready --help``) stays cheap, and a missing
  ansible-runner is one :class:`~validator.error_tree.CouldNotRunError` line.
* The inventories are read first with :func:`validator.ansible_inventory.load_hosts`:
  Ansible itself carries on with no hosts when an inventory does not parse or a
  limit matches nothing, and would then report success for provisioning nothing.
* Every ansible-runner option is passed by name here; nothing from the caller is
  forwarded as ``**kwargs``.
* Become passwords travel only in memory: ansible-runner answers ansible-playbook's
  ``BECOME password:`` prompt through its ``passwords`` mapping, and
  ``suppress_env_files=True`` keeps it from writing ``env/passwords`` (or any other
  ``env/`` file) into the private data dir. :class:`ProvisionRequest` leaves the
  password out of its repr.
* ansible-playbook runs in the caller's working directory (``project_dir``), as it
  does when typed by hand, so the ``ansible.cfg`` there and relative paths apply.
* Artifacts (events, stdout, the command line) of each run are kept in
  ``<state dir>/runs/<UTC timestamp>-<id>``; ansible-runner removes all but the
  newest :data:`DEFAULT_KEEP_RUNS`.
* ``event_handler`` returns True: ansible-runner keeps an event (and computes
  ``Runner.stats``) only when the handler's answer is truthy.
* Rolling runs (``batch``) are Ansible's own ``serial`` and ``max_fail_percentage``,
  set on the site play from the extra variables ``provision_serial`` and
  ``provision_max_fail_percentage``, rather than this module running the playbook
  once per batch: one ansible-playbook, one recap, one artifacts dir, and a plain
  ``ansible-playbook -e provision_serial=4`` rolls the same way. ``forks`` is raised
  to the batch size so that a batch runs all at once.
* Slurm drain/resume is a task of the play (``playbooks/library/gpuready_slurm_node.py``
  in ``pre_tasks``/``post_tasks``), so it happens per batch, right before the roles
  and right after ``gpu_verify``. A failed host never reaches ``post_tasks``; after the
  run, :func:`run_provision` writes each failure into the reason of the nodes this run
  drained (it has the messages; the play does not), so they stay drained saying why.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from validator import slurm
from validator.error_tree import BadInputError, CouldNotRunError
from validator.extravars import (
    refuse_on_command_line,
    remove_secrets,
    split_secrets,
    write_secrets,
)
from validator.files import Folder
from validator.safe_text import ansible_error, one_line, strip_ansi

# ansible-playbook's prompt for --ask-become-pass ("BECOME password: ", or with
# "[defaults to SSH password]" when an SSH password is asked for too).
BECOME_PROMPT = r"^BECOME password.*:\s*?$"
DEFAULT_KEEP_RUNS = 20
# ansible-playbook --list-tasks seldom takes more than a few seconds; the estimate is
# only for the progress bar, so a slow one is abandoned rather than waited for.
ESTIMATE_TIMEOUT_S = 60.0
MESSAGE_MAX = 400

EventStatus = Literal["started", "ok", "changed", "failed", "skipped", "unreachable"]
# The statuses that end a host's task; "started" only says which task a host is on.
FINAL_STATUSES: tuple[EventStatus, ...] = ("ok", "changed", "failed", "skipped", "unreachable")

_ENVVARS: Mapping[str, str] = {
    "ANSIBLE_NOCOLOR": "1",
    "ANSIBLE_FORCE_COLOR": "0",
    "ANSIBLE_RETRY_FILES_ENABLED": "False",
    # One SSH round trip per task instead of three (no temporary module file to copy
    # and chmod): the roles' author measured 31 s -> 22 s. The playbook needs no
    # requiretty sudoers, which is the only thing pipelining rules out.
    "ANSIBLE_PIPELINING": "True",
}
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL = re.compile(r"^(https?|file)://\S+$")
_PLAY = re.compile(r"^\s*play #\d+")
_HOSTS = re.compile(r"^\s*hosts \((\d+)\):")
_BATCH = re.compile(r"^([0-9]+)(%?)$")
# Rolling provisioning's own Slurm reason prefix: drift's "gpuready:" does not start
# it (nor it drift's), so neither command resumes a node the other drained.
SLURM_PREFIX = "gpuready-provision:"
# How long a drained node may go on running jobs before its host fails (the play's
# default for provision_slurm_drain_wait_s, repeated here for the module's default).
SLURM_DRAIN_WAIT_S = 3600.0
SLURM_POLL_S = 10.0
# Slurm node state parts of a node that still runs (or is cleaning up) jobs.
_BUSY_STATES = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


# ------------------------------------------------------------ data


@dataclass(frozen=True)
class Batch:
    """How many hosts one wave of a rolling run takes: a count, or a percentage of them.

    Attributes:
        size: the host count, or the percentage (1-100) when ``percent``.
        percent: whether ``size`` is a percentage of the play's hosts.
    """

    size: int
    percent: bool = False

    def __str__(self) -> str:
        return f"{self.size}%" if self.percent else str(self.size)

    @property
    def serial(self) -> int | str:
        """The value for the play's ``serial``: ``4`` or ``"25%"``."""
        return str(self) if self.percent else self.size

    def hosts(self, total: int) -> int:
        """How many of ``total`` hosts one wave takes, counted as Ansible counts it."""
        if not self.percent:
            return self.size
        # ansible.utils.helpers.pct_to_int (ansible-core 2.19): int(pct / 100 * n) or 1.
        return int(self.size / 100.0 * total) or 1


def parse_batch(text: str) -> Batch:
    """``--batch``: a positive host count (``4``) or a percentage of the hosts (``25%``).

    Raises:
        BadInputError: anything else, on one line with the fix.
    """
    match = _BATCH.match(text.strip())
    size = int(match.group(1)) if match else 0
    percent = bool(match and match.group(2))
    if not match or size < 1 or (percent and size > 100):
        raise BadInputError(
            f"--batch {text!r}: expected a host count (e.g. 4) or a percentage of the "
            "hosts from 1% to 100% (e.g. 25%)"
        )
    return Batch(size=size, percent=percent)


def parse_percentage(text: str, flag: str = "--max-fail-percentage") -> int:
    """A whole percentage from 0 to 100, as ``flag`` gives it (``10`` or ``10%``).

    Raises:
        BadInputError: anything else, on one line with the fix.
    """
    digits = text.strip().removesuffix("%")
    if not digits.isdigit() or int(digits) > 100:
        raise BadInputError(
            f"{flag} {text!r}: expected a whole percentage from 0 to 100 (e.g. 0 to stop "
            "the roll at the first failed host)"
        )
    return int(digits)


@dataclass(frozen=True)
class ProvisionRequest:
    """What to provision, and how; the CLI's options, typed.

    Attributes:
        inventories: inventory files, directories or scripts (or ``h1,h2,`` lists).
        limit: an Ansible ``--limit`` pattern; None for every host.
        tags: ``--tags`` (comma-separated); None for all.
        skip_tags: ``--skip-tags`` (comma-separated); None for none.
        check: run in check mode (``--check``): nothing is changed.
        diff: show file differences (``--diff``) in the events.
        mirror: the CUDA repository URL to use instead of NVIDIA's (sets the extra
            variable ``cuda_repository_url``).
        extra_vars: extra variables (``-e``), already typed (see :func:`parse_extra_vars`).
        become_password: answered to ansible-playbook's become prompt; kept in memory
            only, never written to disk or shown in a repr.
        playbook: the playbook; None for :func:`default_playbook`.
        state_dir: where runs keep their artifacts; None for :func:`default_state_dir`.
        keep_runs: how many runs' artifacts to keep.
        batch: roll through the hosts this many at a time (the play's ``serial``);
            None for all at once.
        max_fail_percentage: the play's ``max_fail_percentage``: once more than this
            share of a batch failed, the roll stops. None for 0 when batching (the
            first failure stops the roll before the next batch reboots), else no limit.
        slurm_drain: drain each batch's Slurm nodes before the roles run and resume
            them after ``gpu_verify`` passes (sets ``provision_slurm_drain``; hosts can
            also set it in the inventory).
        force: run every install role even on hosts the converged probe finds
            unchanged since their last full run (sets ``provision_force``).
    """

    inventories: tuple[str, ...]
    limit: str | None = None
    tags: str | None = None
    skip_tags: str | None = None
    check: bool = False
    diff: bool = False
    mirror: str | None = None
    # Out of repr: it may hold secrets (validator.extravars), read from a vars file.
    extra_vars: Mapping[str, object] = field(default_factory=dict, repr=False)
    become_password: str | None = field(default=None, repr=False)
    playbook: str | None = None
    state_dir: str | None = None
    keep_runs: int = DEFAULT_KEEP_RUNS
    batch: Batch | None = None
    max_fail_percentage: int | None = None
    slurm_drain: bool = False
    force: bool = False

    @property
    def effective_max_fail_percentage(self) -> int | None:
        """The budget the play gets: as given, else 0 when batching, else None (none)."""
        if self.max_fail_percentage is not None:
            return self.max_fail_percentage
        return 0 if self.batch is not None else None


@dataclass(frozen=True)
class ProvisionEvent:
    """One host's task starting or ending, as ansible-runner reported it.

    Attributes:
        host: the inventory host name.
        task: the task's name.
        status: ``started`` (the host began the task), or how it ended: ``ok``,
            ``changed``, ``failed``, ``skipped`` or ``unreachable``.
        message: for failed and unreachable, Ansible's reason on one line; else "".
        ignored: a failure the play ignores (``ignore_errors``).
    """

    host: str
    task: str
    status: EventStatus
    message: str = ""
    ignored: bool = False

    @property
    def final(self) -> bool:
        """Whether this event ends the host's task (everything but ``started``)."""
        return self.status != "started"


@dataclass(frozen=True)
class HostRecap:
    """One host's line of the play recap."""

    host: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0

    @property
    def succeeded(self) -> bool:
        """No task failed and the host was reachable throughout."""
        return self.failed == 0 and self.unreachable == 0


@dataclass(frozen=True)
class ProvisionResult:
    """How a provisioning run ended.

    Attributes:
        status: ansible-runner's status: ``successful``, ``failed``, ``canceled`` or
            ``timeout``.
        rc: ansible-playbook's exit code (254 when canceled).
        hosts: the play recap, one entry per host Ansible processed, by name.
        artifacts_dir: this run's artifacts (events, stdout, the command).
        failed_messages: each failed or unreachable host's first failure, on one line.
        error: why ansible-playbook stopped before any host ran (e.g. a playbook
            syntax error), on one line; None when hosts ran.
        check: whether this was a check-mode run.
        waves: the hosts of each play run, in order: one per ``serial`` batch.
        stopped: hosts that did not fail themselves but were stopped midway when
            their batch spent its failure budget (``max_fail_percentage``); Ansible's
            recap counts no failure for them.
        not_run: hosts of a rolling run that no batch reached (the roll stopped first).
        slurm: per host, what became of the Slurm node this run drained and did not
            resume (it stays drained; the reason says why), on one line.
    """

    status: str
    rc: int
    hosts: tuple[HostRecap, ...]
    artifacts_dir: str
    failed_messages: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None
    check: bool = False
    waves: tuple[tuple[str, ...], ...] = ()
    stopped: tuple[str, ...] = ()
    not_run: tuple[str, ...] = ()
    slurm: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every host ran to the end and succeeded, and at least one ran."""
        return (
            self.status == "successful"
            and bool(self.hosts)
            and all(host.succeeded for host in self.hosts)
            and not self.stopped
            and not self.not_run
        )

    @property
    def succeeded_hosts(self) -> tuple[str, ...]:
        """The hosts that ran to the end without a failure and were reachable, by name."""
        return tuple(
            host.host for host in self.hosts if host.succeeded and host.host not in self.stopped
        )

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready data (``gpuready provision --json``)."""
        return {
            "status": self.status,
            "rc": self.rc,
            "ok": self.ok,
            "check": self.check,
            "error": self.error,
            "artifacts_dir": self.artifacts_dir,
            "hosts": [
                {
                    **dataclasses.asdict(host),
                    "succeeded": host.succeeded,
                    "message": self.failed_messages.get(host.host, ""),
                }
                for host in self.hosts
            ],
            "failed_messages": dict(self.failed_messages),
            "waves": [list(wave) for wave in self.waves],
            "stopped": list(self.stopped),
            "not_run": list(self.not_run),
            "slurm": dict(self.slurm),
        }


# ------------------------------------------------------------ locations


def default_playbook() -> Path:
    """``playbooks/site.yml``: in the wheel (``validator.playbooks``), else the checkout's."""
    import validator

    package = Path(validator.__file__).resolve().parent
    installed = package / "playbooks" / "site.yml"
    if installed.is_file():
        return installed
    return package.parent / "playbooks" / "site.yml"


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/gpuready``, or ``~/.local/state/gpuready`` when that is unset."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    # The XDG spec says a relative value is invalid and must be ignored.
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"
    return root / "gpuready"


# ------------------------------------------------------------ input


def _yaml_value(text: str, origin: str) -> object:
    """A -e value typed as YAML reads it, except that numbers with a dot stay text.

    ``12.4`` is a version here, and as a float ``12.10`` would become ``12.1``.
    """
    import yaml

    if text == "":
        return ""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        from validator.judge.yamlfile import error_line, error_problem

        # YAML's own text quotes the value around the error, and a value may be a secret:
        # its problem and column only.
        mark = getattr(exc, "problem_mark", None)
        where = f" at column {mark.column + 1}" if error_line(exc) == 1 and mark else ""
        raise BadInputError(
            f"{origin}: the value is not valid YAML ({one_line(error_problem(exc), 100)}"
            f"{where}): quote it"
        ) from None
    if isinstance(value, (float, datetime.date)):
        return text  # a version or a date, as written
    return value


def parse_extra_vars(items: Sequence[str]) -> dict[str, object]:
    """Extra variables from ``-e KEY=VALUE`` (or ``-e @FILE.yml``) options.

    Values are typed as YAML reads them (``true`` is a bool, ``3`` an int, ``[a, b]``
    a list), except that dotted numbers stay strings (``12.4`` is a version). Later
    options override earlier ones, as with ansible-playbook.

    Args:
        items: the option values, in order.

    Returns:
        The variables by name.

    Raises:
        BadInputError: an item without ``=``, a key that is not a variable name, a
            value that is not valid YAML, or a file that is missing or not a mapping.
    """
    from validator.fields import LoadError
    from validator.judge.yamlfile import load_located

    variables: dict[str, object] = {}
    for item in items:
        # Named by its file or its key, never its value: a value may be a secret.
        origin = f"-e {item!r}" if item.startswith("@") else f"-e {item.partition('=')[0]!r}=..."
        if item.startswith("@"):
            path = Path(item[1:]).expanduser()
            try:
                # The one YAML reader of every document: a key given twice is refused.
                loaded, _ = load_located(path.read_text(encoding="utf-8"))
            except OSError as exc:
                raise BadInputError(
                    f"{origin}: cannot read {path}: {exc.strerror or exc}: check the path"
                ) from None
            except UnicodeDecodeError as exc:
                raise BadInputError(
                    f"{origin}: {path} is not valid YAML: {one_line(exc, 200)}"
                ) from None
            except LoadError as exc:
                line = f", line {exc.line}" if exc.line is not None else ""
                problem = f"not valid YAML: {exc.detail}" if exc.syntax else exc.problem
                raise BadInputError(f"{origin}: {path}{line}: {one_line(problem, 200)}") from None
            if not isinstance(loaded, Mapping):
                raise BadInputError(f"{origin}: {path} must hold a mapping of variables")
            pairs = [(str(key), value) for key, value in loaded.items()]
        else:
            key, sep, text = item.partition("=")
            if not sep:
                # A bare name is shown (it is no value); anything else may be a secret typed
                # without its key.
                shown = f"-e {item!r}" if _KEY.match(item) else "-e: an item"
                raise BadInputError(f"{shown}: expected KEY=VALUE (or @FILE.yml)")
            key = key.strip()
            refuse_on_command_line(key, None)  # before the value is read, or shown in an error
            pairs = [(key, _yaml_value(text, origin))]
            refuse_on_command_line(key, pairs[0][1])  # a secret inside a mapping
        for key, value in pairs:
            if not _KEY.match(key):
                raise BadInputError(
                    f"{origin}: {key!r} is not a variable name: use letters, digits and "
                    "underscores, not starting with a digit"
                )
            variables[key] = value
    return variables


def _extravars(request: ProvisionRequest) -> dict[str, object]:
    variables = dict(request.extra_vars)
    for key in variables:
        if not _KEY.match(key):
            raise BadInputError(f"extra variable {key!r} is not a variable name")
    if request.mirror is not None:
        if not _URL.match(request.mirror):
            raise BadInputError(
                f"--mirror {request.mirror!r}: expected a URL (http://, https:// or file://)"
            )
        given = variables.get("cuda_repository_url")
        if given is not None and given != request.mirror:
            raise BadInputError(
                "--mirror and -e cuda_repository_url disagree: give the repository once"
            )
        variables["cuda_repository_url"] = request.mirror.rstrip("/")
    _rolling_vars(request, variables)
    # Reaches ansible-playbook as JSON: anything else YAML typed (a date) as its text.
    typed: dict[str, object] = json.loads(json.dumps(variables, default=str))
    return typed


def _claim(variables: dict[str, object], key: str, value: object, flag: str) -> None:
    """Set the play variable ``key`` for ``flag``, unless ``-e`` already set it otherwise."""
    given = variables.get(key)
    if given is not None and str(given) != str(value):
        raise BadInputError(f"{flag} and -e {key} disagree: give the value once")
    variables[key] = value


def _rolling_vars(request: ProvisionRequest, variables: dict[str, object]) -> None:
    """The site play's header variables for ``batch``, the failure budget and Slurm."""
    budget = request.max_fail_percentage
    if budget is not None and not 0 <= budget <= 100:
        raise BadInputError(
            f"--max-fail-percentage {budget}: expected a whole percentage from 0 to 100"
        )
    if request.batch is not None:
        parse_batch(str(request.batch))  # a Batch built by hand is checked as typed
        _claim(variables, "provision_serial", request.batch.serial, "--batch")
    effective = request.effective_max_fail_percentage
    if effective is not None:
        _claim(variables, "provision_max_fail_percentage", effective, "--max-fail-percentage")
    if request.slurm_drain:
        _claim(variables, "provision_slurm_drain", True, "--slurm-drain")
    if request.force:
        _claim(variables, "provision_force", True, "--force")


def default_forks() -> int:
    """ansible-playbook's forks as configured here (ansible.cfg, ANSIBLE_FORKS; else 5)."""
    from ansible import constants

    return int(constants.DEFAULT_FORKS)


def forks_for(request: ProvisionRequest, hosts: int) -> int | None:
    """``--forks`` for a rolling run: a whole batch at once, and never fewer than configured.

    None (leave ansible-playbook's own) when the run is not batched.
    """
    if request.batch is None:
        return None
    return max(request.batch.hosts(hosts), default_forks())


def _inventory_args(sources: Sequence[str]) -> list[str]:
    """The inventories as ansible-playbook takes them: paths made absolute, host lists kept."""
    return [source if "," in source else os.path.abspath(source) for source in sources]


def _playbook(request: ProvisionRequest) -> Path:
    path = Path(request.playbook).expanduser() if request.playbook else default_playbook()
    if not path.is_file():
        raise BadInputError(f"{path}: playbook not found: check the path")
    return path.resolve()


def _ansible_playbook() -> str:
    """ansible-playbook on PATH, else beside this Python (a venv run without activation)."""
    found = shutil.which("ansible-playbook")
    if found:
        return found
    beside = Path(sys.executable).parent / "ansible-playbook"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    raise CouldNotRunError(
        "ansible-playbook not found: install ansible-core (pip install ansible-core) "
        "or put it on PATH"
    )


def _common_args(request: ProvisionRequest, extravars: Mapping[str, object]) -> list[str]:
    args: list[str] = []
    for source in _inventory_args(request.inventories):
        args += ["-i", source]
    if request.limit:
        args += ["--limit", request.limit]
    if request.tags:
        args += ["--tags", request.tags]
    if request.skip_tags:
        args += ["--skip-tags", request.skip_tags]
    if extravars:
        args += ["-e", json.dumps(dict(extravars))]
    return args


def check_request(request: ProvisionRequest) -> None:
    """Check what :func:`run_provision` would check first, without running anything.

    The CLI calls it before asking for a become password, so that a typo in a path is
    reported before the operator types a secret.

    Raises:
        BadInputError: a missing inventory or playbook, an inventory Ansible cannot
            parse, a limit matching no host, a bad extra variable or mirror URL.
    """
    _checked(request)


def _checked(request: ProvisionRequest) -> tuple[Path, dict[str, object], tuple[str, ...]]:
    """The playbook, extra variables and hosts, after checking everything the run needs.

    Raises:
        BadInputError: a missing inventory or playbook, a limit matching no host, a
            bad extra variable, mirror URL, batch or failure budget.
    """
    from validator.ansible_inventory import load_hosts

    if request.keep_runs < 1:
        raise BadInputError(f"keep_runs must be at least 1, got {request.keep_runs}")
    extravars = _extravars(request)
    playbook = _playbook(request)
    hosts = tuple(spec.name for spec in load_hosts(request.inventories, request.limit))
    return playbook, extravars, hosts


# ------------------------------------------------------------ estimate


def count_listed_tasks(output: str) -> int:
    """Hosts x tasks summed over the plays of ``ansible-playbook --list-hosts --list-tasks``.

    Fact gathering, handlers, loops and ``include_*`` are not listed, so the count is
    an estimate.
    """
    total = 0
    hosts = 0
    in_tasks = False
    for line in output.splitlines():
        if _PLAY.match(line):
            hosts, in_tasks = 0, False
            continue
        match = _HOSTS.match(line)
        if match:
            hosts = int(match.group(1))
            in_tasks = False
        elif line.strip() == "tasks:":
            in_tasks = True
        elif in_tasks and line.strip():
            total += hosts
        elif not line.strip():
            in_tasks = False
    return total


def estimate_tasks(request: ProvisionRequest) -> int | None:
    """Roughly how many host x task results the run will report, for a progress bar.

    Runs ``ansible-playbook --list-hosts --list-tasks`` with the request's inventories,
    limit, tags and extra variables.

    Returns:
        The estimate, or None when ansible-playbook could not list the tasks (the run
        itself will then report why).
    """
    try:
        playbook = _playbook(request)
        command = [
            _ansible_playbook(),
            "--list-hosts",
            "--list-tasks",
            # Secrets are left out: a listing needs none, and this command line is public.
            *_common_args(request, split_secrets(_extravars(request))[0]),
            str(playbook),
        ]
    except (BadInputError, CouldNotRunError):
        return None
    env = {**os.environ, **_ENVVARS}
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=ESTIMATE_TIMEOUT_S,
            env=env,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return count_listed_tasks(done.stdout)


# ------------------------------------------------------------ events


def _failure(res: Mapping[str, Any]) -> str:
    """Ansible's reason for a failed or unreachable result, on one line."""
    results = res.get("results")
    if isinstance(results, list):
        for item in results:
            if isinstance(item, Mapping) and (item.get("failed") or item.get("unreachable")):
                return _failure(item)
    msg = one_line(strip_ansi(str(res.get("msg", ""))), MESSAGE_MAX)
    stderr_lines = [line for line in str(res.get("stderr", "") or "").splitlines() if line.strip()]
    if stderr_lines and (not msg or "non-zero return code" in msg):
        detail = one_line(strip_ansi(stderr_lines[-1]), MESSAGE_MAX)
        return f"{msg}: {detail}" if msg else detail
    if not msg and res.get("rc") is not None:
        return f"exit status {res.get('rc')}"
    return msg or "failed (no message)"


def _status(kind: str, res: Mapping[str, Any]) -> EventStatus | None:
    if kind == "runner_on_start":
        return "started"
    if kind == "runner_on_ok":
        return "changed" if res.get("changed") else "ok"
    if kind == "runner_on_failed":
        return "failed"
    if kind == "runner_on_skipped":
        return "skipped"
    if kind == "runner_on_unreachable":
        return "unreachable"
    return None


def to_event(event: Mapping[str, Any]) -> ProvisionEvent | None:
    """The :class:`ProvisionEvent` for one ansible-runner event; None for other kinds."""
    data = event.get("event_data") or {}
    res = data.get("res") or {}
    if not isinstance(res, Mapping):
        res = {}
    status = _status(str(event.get("event", "")), res)
    host = data.get("host")
    if status is None or not host:
        return None
    message = _failure(res) if status in ("failed", "unreachable") else ""
    return ProvisionEvent(
        host=str(host),
        task=str(data.get("task", "")),
        status=status,
        message=message,
        ignored=bool(data.get("ignore_errors")) if status == "failed" else False,
    )


class _Collector:
    """ansible-runner's event and status handlers: gathers the recap as events arrive."""

    def __init__(self, on_event: Callable[[ProvisionEvent], None] | None) -> None:
        self.on_event = on_event
        self.failed: dict[str, str] = {}
        self.stats: Mapping[str, Any] | None = None
        self.status = "unstarted"
        self.waves: list[list[str]] = []
        self.stopped: list[str] = []
        self.drained: dict[str, str] = {}  # host -> the Slurm node this run drained
        self.resumed: set[str] = set()

    def event(self, event: Mapping[str, Any]) -> bool:
        kind = event.get("event")
        if kind == "playbook_on_stats":
            self.stats = dict(event.get("event_data") or {})
        elif kind == "playbook_on_play_start":
            self.waves.append([])  # a play starts once per serial batch
        elif kind == "playbook_on_no_hosts_remaining" and self.waves:
            # Sent when the batch spent its failure budget (or all its hosts failed):
            # the batch's other hosts are stopped where they were, with no failure of
            # their own in the recap.
            self.stopped += [h for h in self.waves[-1] if h not in self.failed]
        typed = to_event(event)
        if typed is not None:
            if self.waves and typed.host not in self.waves[-1]:
                self.waves[-1].append(typed.host)
            if typed.status in ("failed", "unreachable") and not typed.ignored:
                self.failed.setdefault(typed.host, f"{typed.task}: {typed.message}")
            if typed.status in ("ok", "changed", "failed"):
                self._slurm(typed.host, event)
            if self.on_event is not None:
                self.on_event(typed)
        return True  # ansible-runner keeps (and counts) an event only on a truthy answer

    def _slurm(self, host: str, event: Mapping[str, Any]) -> None:
        """Note what gpuready_slurm_node did to this host's Slurm node."""
        res = (event.get("event_data") or {}).get("res") or {}
        done = res.get("gpuready_slurm") if isinstance(res, Mapping) else None
        if not isinstance(done, Mapping) or done.get("check"):
            return
        if done.get("state") == "drained" and done.get("owned"):
            self.drained[host] = str(done.get("node"))
        elif done.get("state") == "resumed":
            self.resumed.add(host)

    def status_changed(self, data: Mapping[str, Any], runner_config: object) -> None:
        del runner_config  # ansible-runner passes it; it holds the passwords, so never log it
        self.status = str(data.get("status", self.status))


def recap(stats: Mapping[str, Any] | None) -> tuple[HostRecap, ...]:
    """The per-host recap from a ``playbook_on_stats`` event (or ``Runner.stats``), by name."""
    if not stats:
        return ()
    columns = {
        "ok": "ok",
        "changed": "changed",
        "failures": "failed",
        "dark": "unreachable",
        "skipped": "skipped",
        "rescued": "rescued",
        "ignored": "ignored",
    }
    names: set[str] = set()
    for key in (*columns, "processed"):
        table = stats.get(key) or {}
        if isinstance(table, Mapping):
            names.update(str(name) for name in table)
    hosts = []
    for name in sorted(names):
        counts = {}
        for key, column in columns.items():
            table = stats.get(key) or {}
            counts[column] = int(table.get(name, 0)) if isinstance(table, Mapping) else 0
        hosts.append(HostRecap(host=name, **counts))
    return tuple(hosts)


def _stdout(artifacts: Path) -> str:
    try:
        return (artifacts / "stdout").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# ------------------------------------------------------------ run


def _ident() -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{uuid.uuid4().hex[:8]}"


def _state_dirs(request: ProvisionRequest) -> tuple[Path, Path]:
    """The runs dir (artifacts) and ansible-runner's private data dir, created 0700.

    Raises:
        CouldNotRunError: they cannot be created.
        UnsafePathError: one of them is a link (or not a folder): refused, never followed.
    """
    state = Path(request.state_dir).expanduser() if request.state_dir else default_state_dir()
    runs = state / "runs"
    private = state / "runner"
    try:
        # The state folder and its runs/ and runner/ are ours: ansible-runner writes the
        # run records (extra vars included) there, so never through a planted link.
        with Folder.open(state, mode=0o700) as folder:
            for name in (runs.name, private.name):
                folder.child(name, mode=0o700).close()
    except OSError as exc:
        raise CouldNotRunError(
            f"cannot create the state directory {state}: {exc.strerror or exc}: "
            "set XDG_STATE_HOME or fix the permissions"
        ) from None
    return runs, private


def _prompts(request: ProvisionRequest) -> tuple[str | None, dict[str, str] | None]:
    """ansible-playbook's extra command line, and the prompts ansible-runner answers."""
    cmdline: list[str] = []
    if request.check:
        cmdline.append("--check")
    if request.diff:
        cmdline.append("--diff")
    passwords: dict[str, str] = {}
    if request.become_password is not None:
        cmdline.append("--ask-become-pass")
        passwords[BECOME_PROMPT] = request.become_password
    return " ".join(cmdline) or None, passwords or None


def _in_thread(run: Callable[[Callable[[], bool]], Any], cancel: threading.Event | None) -> Any:  # noqa: ANN401 - ansible_runner.Runner is untyped
    """``run(cancel_callback)`` in a worker thread; Ctrl-C here cancels it, then re-raises.

    ansible-playbook runs on its own pty, so Ctrl-C reaches only this process: left
    alone, the playbook would go on without anyone watching.

    Raises:
        CouldNotRunError: ansible-runner raised (the reason on one line).
        KeyboardInterrupt: once the interrupted run has stopped.
    """
    stop = threading.Event()

    def canceled() -> bool:
        return stop.is_set() or (cancel is not None and cancel.is_set())

    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["runner"] = run(canceled)
        except Exception as exc:  # noqa: BLE001 - re-raised as one line in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=work, name="gpuready-provision", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
    except KeyboardInterrupt:
        stop.set()
        thread.join(30)
        raise
    error = outcome.get("error")
    if error is not None:
        raise CouldNotRunError(
            f"ansible-runner failed: {type(error).__name__}: {one_line(str(error), 240)}"
        )
    return outcome["runner"]


def run_provision(
    request: ProvisionRequest,
    *,
    on_event: Callable[[ProvisionEvent], None] | None = None,
    cancel: threading.Event | None = None,
    slurm_runner: slurm.Runner = slurm.run_scontrol,
) -> ProvisionResult:
    """Run the playbook over the request's hosts and return the recap.

    Args:
        request: what to run, and on which hosts.
        on_event: called (from the runner's thread) with every host's task start and
            result, in the order Ansible reported them.
        cancel: set it to stop the run; ansible-playbook is then terminated and the
            result's status is ``canceled``.
        slurm_runner: runs scontrol when the run leaves Slurm nodes it drained drained
            (to put each host's failure into its node's reason).

    Returns:
        The result; a host that failed or was unreachable is in it, never raised.

    Raises:
        BadInputError: a missing inventory or playbook, a limit matching no host, a bad
            extra variable or mirror URL (one line each).
        CouldNotRunError: ansible-runner or ansible-playbook is missing, the state
            directory cannot be written, or ansible-runner itself failed.
        KeyboardInterrupt: after the run was stopped by Ctrl-C.
    """
    playbook, extravars, planned = _checked(request)
    envvars = dict(_ENVVARS)
    binary_dir = os.path.dirname(_ansible_playbook())
    if shutil.which("ansible-playbook") is None:
        # ansible-runner starts "ansible-playbook" from PATH (its binary= option would
        # turn off its playbook mode): a venv's bin dir, when not activated, goes first.
        envvars["PATH"] = os.pathsep.join((binary_dir, os.environ.get("PATH", "")))
    try:
        import ansible_runner
    except ImportError as exc:
        raise CouldNotRunError(
            f"ansible-runner cannot be imported ({one_line(exc, 160)}): "
            "install it (pip install ansible-runner)"
        ) from None
    runs, private = _state_dirs(request)
    ident = _ident()
    # Named in the Slurm drain reason, so an operator finds the run's artifacts.
    extravars = {**extravars, "provision_run_id": ident}
    # Secrets reach ansible-playbook in a private file, never on its command line.
    extravars, secrets = split_secrets(extravars)
    forks = forks_for(request, len(planned))
    collector = _Collector(on_event)
    cmdline, passwords = _prompts(request)
    secrets_file = write_secrets(private, ident, secrets) if secrets else None
    if secrets_file is not None:
        cmdline = " ".join(filter(None, (cmdline, "-e", shlex.quote(f"@{secrets_file}"))))

    def run(canceled: Callable[[], bool]) -> Any:  # noqa: ANN401 - ansible_runner.Runner
        return ansible_runner.run(
            private_data_dir=str(private),
            project_dir=os.getcwd(),
            artifact_dir=str(runs),
            ident=ident,
            rotate_artifacts=request.keep_runs,
            playbook=str(playbook),
            inventory=_inventory_args(request.inventories),
            limit=request.limit,
            tags=request.tags,
            skip_tags=request.skip_tags,
            extravars=extravars,
            forks=forks,
            cmdline=cmdline,
            passwords=passwords,
            envvars=envvars,
            # Answer a prompt and look at the cancel flag at least every second.
            settings={"pexpect_timeout": 1},
            suppress_env_files=True,
            quiet=True,
            event_handler=collector.event,
            status_handler=collector.status_changed,
            cancel_callback=canceled,
        )

    try:
        runner = _in_thread(run, cancel)
    finally:
        if secrets_file is not None:
            remove_secrets(secrets_file)
    result = _result(request, runner, collector, runs / ident, planned)
    return _keep_drained(result, collector, slurm_runner)


def _result(
    request: ProvisionRequest,
    runner: Any,  # noqa: ANN401 - ansible_runner.Runner is untyped
    collector: _Collector,
    artifacts: Path,
    planned: Sequence[str] = (),
) -> ProvisionResult:
    stats = collector.stats if collector.stats is not None else getattr(runner, "stats", None)
    hosts = recap(stats)
    status = str(getattr(runner, "status", collector.status))
    rc = getattr(runner, "rc", None)
    problem = None
    if not hosts and status != "successful":
        problem = ansible_error(_stdout(artifacts), MESSAGE_MAX) or (
            f"ansible-playbook ended {status} (rc {rc}) before any host ran a task; "
            f"see {artifacts / 'stdout'}"
        )
    elif not hosts:
        problem = "no host ran any task: check the limit, the tags and the plays' hosts"
    stopped = tuple(dict.fromkeys(collector.stopped))
    failed = dict(collector.failed)
    for host in stopped:
        failed.setdefault(
            host, "stopped: its batch spent the failure budget (--max-fail-percentage)"
        )
    ran = {host.host for host in hosts}
    # Only a rolling run's play ("hosts: all" in site.yml) is known to cover every host.
    not_run = tuple(h for h in planned if h not in ran) if request.batch and hosts else ()
    return ProvisionResult(
        status=status,
        rc=int(rc) if isinstance(rc, int) else -1,
        hosts=hosts,
        artifacts_dir=str(artifacts),
        failed_messages=failed,
        error=problem,
        check=request.check,
        waves=tuple(tuple(wave) for wave in collector.waves if wave),
        stopped=stopped,
        not_run=not_run,
    )


# ------------------------------------------------------------ Slurm, per batch


def _busy(state: slurm.NodeState) -> bool:
    """Whether the node still runs (or cleans up after) a job."""
    return any(part.rstrip("*") in _BUSY_STATES for part in state.state.upper().split("+"))


def _down(state: slurm.NodeState) -> bool:
    return any(part.rstrip("*") == "DOWN" for part in state.state.upper().split("+"))


def _dry(runner: slurm.Runner) -> slurm.Runner:
    """``runner`` for check mode: reads run, every ``scontrol update`` only pretends."""

    def run(argv: Sequence[str]) -> slurm.CommandResult:
        if list(argv[:2]) == ["scontrol", "update"]:
            return slurm.CommandResult(0)
        return runner(argv)

    return run


def drain_for_provision(
    node: str,
    reason: str,
    *,
    runner: slurm.Runner = slurm.run_scontrol,
    check: bool = False,
) -> tuple[slurm.Action, bool]:
    """Drain a batch's node with the provisioning prefix before the roles run.

    A node someone else drained is not taken over (:func:`validator.slurm.drain`
    leaves it alone), so this run will never resume it.

    Args:
        node: the Slurm node name.
        reason: why, after :data:`SLURM_PREFIX` (added when missing).
        runner: runs the scontrol argument lists.
        check: check mode: say what would be done, change nothing.

    Returns:
        What :func:`validator.slurm.drain` did, and whether the drain is now ours.

    Raises:
        SlurmError: scontrol is missing or refused.
        BadInputError: ``node`` is not a Slurm node name.
    """
    action = slurm.drain(node, reason, _dry(runner) if check else runner, prefix=SLURM_PREFIX)
    return action, action in (slurm.Action.DRAINED, slurm.Action.UPDATED, slurm.Action.UNCHANGED)


def wait_until_idle(
    node: str,
    *,
    runner: slurm.Runner = slurm.run_scontrol,
    wait_idle_s: float = SLURM_DRAIN_WAIT_S,
    poll_s: float = SLURM_POLL_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> slurm.NodeState:
    """Wait until a drained (or down) node runs no job: nothing may reboot it before.

    Args:
        node: the Slurm node name.
        runner: runs the scontrol argument lists.
        wait_idle_s: how long the drained node may go on running jobs.
        poll_s: how often to look again meanwhile.
        sleep: waits (tests pass a fake).
        clock: reads the time (tests pass a fake).

    Returns:
        The node's state once idle.

    Raises:
        SlurmError: scontrol is missing or refused; the node takes jobs (someone
            else's reason kept us from draining it); or it still ran jobs after
            ``wait_idle_s``.
        BadInputError: ``node`` is not a Slurm node name.
    """
    deadline = clock() + wait_idle_s
    while True:
        state = slurm.node_state(node, runner)
        if not (state.drained or _down(state)):
            raise slurm.SlurmError(
                f"{node} is not drained and carries someone else's reason "
                f"({state.reason}): drain it, or clear that reason, then run again"
            )
        if not _busy(state):
            return state
        if clock() >= deadline:
            raise slurm.SlurmError(
                f"{node} still runs jobs ({state.state}) {wait_idle_s:.0f} s after the "
                "drain: it stays drained; run again once they end, or raise "
                "provision_slurm_drain_wait_s"
            )
        sleep(poll_s)


def resume_after_provision(
    node: str, *, runner: slurm.Runner = slurm.run_scontrol, check: bool = False
) -> slurm.Action:
    """Resume the node after ``gpu_verify`` passed, only when provisioning drained it.

    Raises:
        SlurmError: scontrol is missing or refused.
        BadInputError: ``node`` is not a Slurm node name.
    """
    return slurm.resume_if_ours(node, _dry(runner) if check else runner, prefix=SLURM_PREFIX)


def hold_drained(node: str, reason: str, runner: slurm.Runner = slurm.run_scontrol) -> str:
    """Put why provisioning failed into the reason of a node it drained; one line back.

    A node no longer drained by provisioning (an administrator took it over, or
    resumed it) is left as it is.
    """
    try:
        state = slurm.node_state(node, runner)
        if not (state.drained and state.owned_by(SLURM_PREFIX)):
            return f"{node}: left as it is ({state.state}, reason {state.reason})"
        slurm.drain(node, reason, runner, prefix=SLURM_PREFIX)
    except (slurm.SlurmError, BadInputError) as exc:
        return f"{node}: stays drained; the reason could not be updated: {exc}"
    return f"{node}: stays drained: {one_line(reason, MESSAGE_MAX)}"


def _keep_drained(
    result: ProvisionResult, collector: _Collector, runner: slurm.Runner
) -> ProvisionResult:
    """Each node this run drained and did not resume: its host's failure in its reason."""
    notes: dict[str, str] = {}
    for host, node in collector.drained.items():
        if host in collector.resumed:
            continue
        why = result.failed_messages.get(host) or f"the run ended {result.status}"
        run = Path(result.artifacts_dir).name
        notes[host] = hold_drained(node, f"{SLURM_PREFIX} failed (run {run}): {why}", runner)
    return dataclasses.replace(result, slurm=notes) if notes else result


# ------------------------------------------------------------ certify afterwards


def certify_transport(inventories: Sequence[str], hosts: Sequence[str]) -> str:
    """How ``--certify`` reaches the provisioned hosts: ``local``, ``ansible`` or ``ssh``.

    The hosts' ``gpuready_transport`` when they all set the same one; else ``local``
    when every host has ``ansible_connection=local``; else ``ssh``.

    Raises:
        BadInputError: the inventory can no longer be read.
    """
    from validator.ansible_inventory import load_inventory

    wanted = set(hosts)
    specs = [spec for spec in load_inventory(inventories).hosts if spec.name in wanted]
    chosen = {spec.vars.get("gpuready_transport") for spec in specs}
    if len(chosen) == 1 and None not in chosen:
        return str(chosen.pop())
    connections = _connections(inventories, [spec.name for spec in specs])
    if specs and all(connections.get(spec.name) == "local" for spec in specs):
        return "local"
    return "ssh"


def _connections(inventories: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    """Each host's ``ansible_connection`` as its inventory sets it ("" when unset)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=list(inventories))
    manager = VariableManager(loader=loader, inventory=inventory)
    found: dict[str, str] = {}
    for name in names:
        host = inventory.get_host(name)
        if host is None:
            continue
        value = manager.get_vars(host=host).get("ansible_connection")
        found[name] = str(value) if value is not None else ""
    return found


__all__ = [
    "BECOME_PROMPT",
    "DEFAULT_KEEP_RUNS",
    "FINAL_STATUSES",
    "SLURM_PREFIX",
    "Batch",
    "EventStatus",
    "HostRecap",
    "ProvisionEvent",
    "ProvisionRequest",
    "ProvisionResult",
    "certify_transport",
    "check_request",
    "count_listed_tasks",
    "default_forks",
    "default_playbook",
    "default_state_dir",
    "drain_for_provision",
    "estimate_tasks",
    "forks_for",
    "hold_drained",
    "parse_batch",
    "parse_extra_vars",
    "parse_percentage",
    "recap",
    "resume_after_provision",
    "run_provision",
    "to_event",
    "wait_until_idle",
]
