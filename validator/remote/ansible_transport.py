"""The ansible transport: run the node agent through the site's own Ansible access.

For sites whose SSH access lives in Ansible (become, bastions, connection
plugins, vaulted keys): ``playbooks/certify.yml`` is run through ansible-runner
against the user's inventory, one host per run (``--limit``), and

1. creates the host's cache dir (0700) and copies the agent zipapp there
   (``ansible.builtin.copy`` compares checksums, so a host that has it is not
   sent it again);
2. runs ``<python> <agent> <arguments>`` with ``ansible.builtin.command`` in
   argv form (no shell, so nothing needs quoting) under the per-host timeout;
   the agent's ``--deadline`` is what is left of that timeout as the task starts
   (Ansible renders it then, see :func:`agent_arguments`), less the trip, so the
   agent cuts its burn-in to be back in time.

The facts are read from the events ansible-runner hands to its event handler,
as they happen: the ``runner_on_ok`` event of the task named
:data:`RUN_TASK` carries the agent's stdout in ``event_data.res.stdout``. That
needs no callback plugin, no file written on the host, and no parsing of
Ansible's human output. The same events drive the progress phases.

The user's ansible.cfg and environment are left in force: they are how the
site reaches its hosts. Nothing here raises for what a host does.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ansible_runner
from ansible_runner.exceptions import AnsibleRunnerException

from validator.error_tree import GpureadyError
from validator.model import HostSpec, SchemaError
from validator.packed import agent_facts
from validator.remote.bundle import write_agent
from validator.remote.ssh import DEFAULT_CACHE_DIR
from validator.remote.transport import (
    SHORTEST_AGENT_DEADLINE_S,
    AgentOutcome,
    AgentRequest,
    Phase,
    Progress,
    agent_deadline,
    overrun_s,
)
from validator.safe_text import ansible_error, one_line

RUN_TASK = "Run the gpuready agent"
# Each playbook task, and the phase a host is in while it runs.
TASK_PHASES: Mapping[str, Phase] = {
    "Create the agent cache directory": Phase.CONNECT,
    "Copy the agent unless the host already has it": Phase.UPLOAD,
    RUN_TASK: Phase.RUN,
}
_ENVVARS: Mapping[str, str] = {
    "ANSIBLE_NOCOLOR": "1",
    "ANSIBLE_RETRY_FILES_ENABLED": "False",
    "ANSIBLE_DEPRECATION_WARNINGS": "False",
}
STDERR_KEEP = 64 * 1024
# The run task stops at the deadline plus the transport's overrun, a moment of the
# controller's clock the task works out as it starts (as the agent's own deadline),
# however long Ansible took to start. This long after it, the backstop ends a hung
# Ansible: late enough for the task's clearer message to come first.
_BACKSTOP_AFTER_TASK_S = 5
# Kept back from the agent's deadline for the command module's start and the way
# back through Ansible: at least this long, and this share more of the host's time.
ANSIBLE_TRIP_MIN_S = 3.0
ANSIBLE_TRIP_SHARE = 0.1


def default_playbook() -> Path:
    """``playbooks/certify.yml``: in the wheel (``validator.playbooks``), else the checkout's."""
    import validator

    installed = Path(validator.__file__).resolve().parent / "playbooks" / "certify.yml"
    if installed.is_file():
        return installed
    return Path(validator.__file__).resolve().parent.parent / "playbooks" / "certify.yml"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


class _Events:
    """The events of one host's run, gathered as ansible-runner reports them."""

    def __init__(self, host: str, progress: Progress) -> None:
        self.host = host
        self.progress = progress
        self.results: dict[str, tuple[str, Mapping[str, Any]]] = {}  # task -> (event, res)
        self.unreachable: Mapping[str, Any] | None = None
        self.phase = Phase.CONNECT  # the transport has already said so

    def __call__(self, event: Mapping[str, Any]) -> bool:
        kind = str(event.get("event", ""))
        data = event.get("event_data") or {}
        task = str(data.get("task", ""))
        if kind == "playbook_on_task_start" and task in TASK_PHASES:
            phase = TASK_PHASES[task]
            if phase != self.phase:
                self.phase = phase
                self.progress.phase(self.host, phase)
        elif kind.startswith("runner_on_") and data.get("host") == self.host:
            res = data.get("res") or {}
            if kind == "runner_on_unreachable":
                self.unreachable = res
            else:
                self.results[task] = (kind, res)
        return True  # keep the event in the artifacts too


class AnsibleTransport:
    """Runs the agent on a host through ``ansible-runner`` and ``playbooks/certify.yml``.

    Args:
        inventory: the inventory file(s) the user gave, exactly as given to Ansible.
        cache_dir: where hosts keep the agent (``~`` is the remote user's home).
        playbook: the certify playbook; default :func:`default_playbook`.
        work_dir: where the per-run private data dirs go; default a new temp dir,
            removed by :meth:`close`.
    """

    name = "ansible"

    def __init__(
        self,
        inventory: Sequence[str | Path],
        *,
        cache_dir: str = DEFAULT_CACHE_DIR,
        playbook: Path | None = None,
        work_dir: Path | None = None,
    ) -> None:
        self.inventory = [str(Path(item).resolve()) for item in inventory]
        self.cache_dir = cache_dir
        self.playbook = (playbook or default_playbook()).resolve()
        self._work_dir = work_dir
        self._owns_work_dir = work_dir is None
        self._lock = threading.Lock()
        self._agent: Path | None = None

    def close(self) -> None:
        """Remove the temp dir this transport made (the agent copy and run artifacts)."""
        with self._lock:
            if self._owns_work_dir and self._work_dir is not None:
                shutil.rmtree(self._work_dir, ignore_errors=True)
                self._work_dir = None
                self._agent = None

    def __enter__(self) -> AnsibleTransport:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _prepare(self) -> tuple[Path, Path]:
        """The work dir root and the agent in it, made once per transport.

        Raises:
            GpureadyError: the agent cannot be built.
            OSError: the work dir cannot be written.
        """
        with self._lock:
            if self._work_dir is None:
                self._work_dir = Path(tempfile.mkdtemp(prefix="gpuready-ansible-"))
            self._work_dir.mkdir(parents=True, exist_ok=True)
            if self._agent is None:
                self._agent = write_agent(self._work_dir)
            return self._work_dir, self._agent

    def run_agent(
        self, host: HostSpec, request: AgentRequest, timeout_s: float, progress: Progress
    ) -> AgentOutcome:
        """Run the playbook for this one host and read the agent's facts from its events.

        Never raises for anything the host, Ansible or the agent does.
        """
        started = time.monotonic()
        progress.phase(host.name, Phase.CONNECT)
        try:
            root, agent = self._prepare()
            private = Path(tempfile.mkdtemp(prefix="run-", dir=root))
        except (GpureadyError, OSError) as exc:
            progress.phase(host.name, Phase.FAILED)
            return AgentOutcome(
                host=host.name,
                facts=None,
                error=f"cannot prepare the ansible run for {host.name}: {one_line(exc)}",
                phase=Phase.CONNECT,
                elapsed_s=time.monotonic() - started,
            )
        events = _Events(host.name, progress)
        stop_at = time.time() + timeout_s + overrun_s(timeout_s)  # the run task's, see above
        seconds = math.ceil(timeout_s + overrun_s(timeout_s)) + _BACKSTOP_AFTER_TASK_S
        try:
            runner = ansible_runner.run(
                private_data_dir=str(private),
                playbook=str(self.playbook),
                inventory=self.inventory,
                limit=host.name,
                extravars={
                    "gpuready_agent_path": str(agent),
                    "gpuready_agent_args": agent_arguments(request, host, timeout_s),
                    "gpuready_cache_dir": self.cache_dir,
                    "gpuready_python": host.python,
                    "gpuready_agent_stop_at": round(stop_at, 3),
                },
                envvars=dict(_ENVVARS),
                event_handler=events,
                # The task's own timeout ends a hung agent with a clear message; this
                # backstop, a little later, ends a hung Ansible.
                timeout=seconds,
                quiet=True,
            )
            status = str(runner.status)
            output = _read(runner)
        except (AnsibleRunnerException, OSError, ValueError) as exc:
            status, output = "error", one_line(exc)
        finally:
            shutil.rmtree(private, ignore_errors=True)
        outcome = _outcome(host, events, status, output, seconds)
        progress.phase(host.name, Phase.DONE if outcome.facts is not None else Phase.FAILED)
        return AgentOutcome(
            host=outcome.host,
            facts=outcome.facts,
            error=outcome.error,
            stderr=outcome.stderr,
            phase=outcome.phase,
            elapsed_s=time.monotonic() - started,
        )


def agent_arguments(request: AgentRequest, host: HostSpec, timeout_s: float) -> list[str]:
    """The agent's arguments, its ``--deadline`` left for Ansible to work out.

    Ansible's start and the tasks before the agent's take seconds no one knows in
    advance, so the deadline is a template Ansible renders on the controller as the
    run task starts: what is left then of the host's deadline, less the trip
    (:func:`validator.remote.transport.agent_deadline`). Only numbers go into it.
    """
    ends_at = time.time() + timeout_s  # the controller's clock, as Ansible's now() reads it
    # Beside the agent's own trip, the command module's start and Ansible's results.
    agents_trip = timeout_s - agent_deadline(timeout_s)
    trip = max(ANSIBLE_TRIP_MIN_S, agents_trip + ANSIBLE_TRIP_SHARE * timeout_s)
    left = (
        f"{{{{ '%.3f' | format([{SHORTEST_AGENT_DEADLINE_S!r}, "
        f"{ends_at!r} - now().timestamp() - {trip!r}] | max) }}}}"
    )
    return [*request.arguments(host), "--deadline", left]


def _read(runner: Any) -> str:  # noqa: ANN401 - ansible_runner.Runner is untyped
    """ansible-playbook's own output (the place its ERROR! lines go)."""
    try:
        return str(runner.stdout.read())
    except (AttributeError, OSError, ValueError):
        return ""


def _outcome(
    host: HostSpec, events: _Events, status: str, output: str, seconds: int
) -> AgentOutcome:
    """The facts, or one line saying where and why the run stopped."""
    name = host.name
    if events.unreachable is not None:
        why = one_line(events.unreachable.get("msg", "")) or "no reason given"
        return _failed(name, f"{name} is unreachable through Ansible: {why}", Phase.CONNECT)
    ran = events.results.get(RUN_TASK)
    if ran is not None and ran[0] == "runner_on_ok":
        return _parse(name, ran[1])
    if ran is not None and ran[0] == "runner_on_failed":
        res = ran[1]
        stderr = str(res.get("stderr", ""))[-STDERR_KEEP:]
        why = one_line(res.get("msg", "")) or f"exit status {res.get('rc')}"
        error = _last_line(stderr) or f"running the agent on {name} failed: {why}"
        return _failed(name, error, "run", stderr)
    for task, (kind, res) in events.results.items():
        if kind == "runner_on_failed":
            why = one_line(res.get("msg", "")) or "failed"
            phase = TASK_PHASES.get(task, Phase.CONNECT)
            return _failed(name, f"{task.lower()} on {name} failed: {why}", phase)
    if status == "timeout":
        return _failed(name, f"ansible did not finish on {name} within {seconds}s", "run")
    why = ansible_error(output) or f"ansible-runner ended {status} without running the agent"
    return _failed(name, f"ansible run for {name}: {why}", Phase.CONNECT)


def _parse(name: str, res: Mapping[str, Any]) -> AgentOutcome:
    stderr = str(res.get("stderr", ""))[-STDERR_KEEP:]
    try:
        facts = agent_facts(str(res.get("stdout", "")))
    except SchemaError as exc:
        return _failed(
            name, f"facts from {name} do not fit the model: {one_line(exc)}", "parse", stderr
        )
    except ValueError as exc:
        return _failed(
            name, f"the agent on {name} printed no valid JSON: {one_line(exc)}", "parse", stderr
        )
    return AgentOutcome(host=name, facts=facts, stderr=stderr, phase=Phase.DONE)


def _failed(name: str, error: str, phase: str, stderr: str = "") -> AgentOutcome:
    return AgentOutcome(host=name, facts=None, error=error, stderr=stderr, phase=phase)


__all__ = ["RUN_TASK", "TASK_PHASES", "AnsibleTransport", "agent_arguments", "default_playbook"]
