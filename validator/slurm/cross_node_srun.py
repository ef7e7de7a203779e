"""The stage across nodes as real Slurm job steps: one allocation a test, steps inside it.

How a Slurm operator runs it, and why:

- **One allocation per pair or group, per round.** Each test of a round is its own
  ``sbatch --exclusive --nodes=N --nodelist=a,b`` job holding only its nodes (the batch
  script only sleeps), so the nodes out of service at once are the round's, each test's
  nodes are free of other jobs' traffic while measured (``--exclusive``), and a node
  that dies takes down its own test's job only (Slurm ends a job whose node fails).
- **GPUs.** Where the test's nodes declare GPU GRES (``scontrol -o show node``, read by
  :mod:`validator.slurm.node_gres`), the job asks ``--gres=gpu:N``: a cluster that fences
  devices (cgroup ``ConstrainDevices``) gives a job only the GPUs it asked for, and its
  steps (which take the job's GRES by default) would see none. N is the fewest GPUs the
  nodes' facts count, never more than Slurm declares. Nodes that declare none are asked
  none (Slurm would refuse the job); an operator's own ``--gres``/``--gpus*`` in
  ``extra_sbatch`` is left alone.
  ``sbatch --parsable`` prints the job id before anything runs, so every job is
  recorded before it can start, and cancelled by that id (never by name or user).
- **Steps inside it.** perftest's server is ``srun --jobid=J --overlap -N1 -n1 -w a``,
  its client the same on ``b``; an NCCL group is one ``srun --jobid=J -N k -w ...
  --ntasks-per-node=G --mpi=pmix`` step (the IB-only variant's environment goes through
  ``--export=ALL,NCCL_P2P_DISABLE=1,...``). Each step prints ``gpuready-step J.S`` first
  (rank 0 only) and then becomes the program (``exec``), so it can be ended by its own
  id (``scancel J.S``).
- **Limits.** The job's ``--time`` is the round's deadline (rounded up to minutes, plus a
  minute); each step's ``--time`` is its own limit; and our own clock ends a step at
  its limit (scancel of the step, then its srun) and the round's jobs when the round
  ends, whatever happened.
- **Nodes that cannot run.** A node Slurm lists as down, drained or not responding is
  not asked for: its tests have no result with Slurm's own words. An allocation that
  has not started within ``allocation_wait_s`` is cancelled, and its tests likewise have
  no result. A node whose slurmd dies mid-test gives no result (its step's limit, or
  Slurm failing the job); the service names it unreachable once two known-good peers
  have had no result from it, never good.
- **Stopping.** Ctrl-C (and SIGTERM through :mod:`validator.service.signals`, which makes
  it a KeyboardInterrupt) stops the round: the steps are ended and every job the round
  submitted is cancelled by id before the interrupt goes on. :meth:`SlurmRunner.close`
  cancels anything left.

Every command is an argument list; node names are checked to be plain host names before
they go into ``-w``; every output is held to :data:`validator.limits.TOOL_OUTPUT_BYTES`
before it is read.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from validator.model import NcclGroupResult, RdmaPairResult
from validator.remote.cross_node_local import LocalStep
from validator.remote.cross_node_runner import (
    CrossNodePlan,
    Group,
    HostPlan,
    LaunchError,
    Pair,
    StepRunner,
)
from validator.safe_text import one_line
from validator.slurm.commands import Runner, SlurmError, run_slurm, said
from validator.slurm.jobs import JobState, cancel, job_states, parse_sbatch
from validator.slurm.node_gres import parse_node_gpus
from validator.slurm.nodes import list_nodes

JOB_NAME = "gpuready-fabric"
_MARKER = "gpuready-step"
# Rank 0 prints the step's id, then becomes the program (its id is the step's).
_WITH_STEP_ID = (
    '[ "${SLURM_PROCID:-0}" != 0 ] || echo "' + _MARKER + ' ${SLURM_JOB_ID}.${SLURM_STEP_ID}"; '
    'exec "$@"'
)
_MARKER_LINE = re.compile(r"^" + _MARKER + r" ([0-9]+)\.([0-9]+)\r?\n", re.MULTILINE)
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_SLURM_KEPT = frozenset({"SLURM_CONF", "SLURM_CLUSTERS"})
_POLL_S = 0.25
_CANCEL_WAIT_S = 15.0
_PROBE_EVERY_S = 0.5
T = TypeVar("T", Pair, Group)
R = TypeVar("R")


@dataclass(frozen=True)
class SrunOptions:
    """Where and how the stage's jobs run.

    Args:
        partition, account, qos, reservation: the jobs' (None: Slurm's default).
        mpi: ``srun --mpi=`` for NCCL groups (``pmix``; ``pmi2`` where PMIx is not built).
        allocation_wait_s: how long a test's job may wait to start before it is cancelled.
        env: more environment for every step (exported with ``--export=ALL,...``).
        extra_sbatch: further sbatch options, as given (``--gres=gpu:8``).
        probe_listening: ask ``ss`` on the server's node (a step) whether it listens.
    """

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    mpi: str = "pmix"
    allocation_wait_s: float = 60.0
    env: Mapping[str, str] = field(default_factory=dict)
    extra_sbatch: tuple[str, ...] = ()
    probe_listening: bool = True


def node_name(name: str) -> str:
    """``name`` if it is a plain host name Slurm can be given in ``-w``.

    Raises:
        LaunchError: it holds anything else (a bracket, comma, space, option dash).
    """
    if not _NODE_NAME.fullmatch(name):
        raise LaunchError(f"{one_line(name)!s} is not a plain node name: it cannot be given to -w")
    return name


def export_option(env: Mapping[str, str]) -> str:
    """``--export=ALL,NAME=value,...``: Slurm's own list, so no value may hold a comma.

    Raises:
        LaunchError: a name that is not a variable name, or a value with a comma or newline.
    """
    parts = ["ALL"]
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name) or any(c in value for c in ",\n\r\0"):
            raise LaunchError(f"{one_line(name)}: cannot be exported to a Slurm step")
        parts.append(f"{name}={value}")
    return "--export=" + ",".join(parts)


def minutes(seconds: float) -> str:
    """Slurm's ``--time`` in whole minutes, at least one."""
    return str(max(1, math.ceil(seconds / 60.0)))


def srun_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """srun's environment: this process's, less a surrounding job's ``SLURM_*`` settings.

    Run from inside an allocation, the outer job's ``SLURM_NTASKS``, ``SLURM_JOB_ID``, ...
    would shape every step; which cluster (``SLURM_CONF``, ``SLURM_CLUSTERS``) stays.
    """
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if not k.startswith("SLURM_") or k in _SLURM_KEPT}


class SrunStep(LocalStep):
    """One ``srun`` here; its step known by the id it prints first, ended by that id."""

    def __init__(self, argv: Sequence[str], runner: Runner) -> None:
        super().__init__(argv, {}, srun_environment())
        self._runner = runner
        self._cancelled = False

    def step_id(self) -> str | None:
        """``J.S`` once rank 0 printed it (the program then runs on its node)."""
        found = _MARKER_LINE.search(bytes(self._out[:4096]).decode("utf-8", "replace"))
        return f"{found.group(1)}.{found.group(2)}" if found else None

    def output(self) -> tuple[str, str]:
        """stdout less the id line, and stderr; bounded."""
        out, err = super().output()
        return _MARKER_LINE.sub("", out, count=1), err

    def kill(self) -> None:
        """scancel the step by its id (if it runs), then end srun here."""
        if not self._cancelled:
            self._cancelled = True
            step = self.step_id()
            if step is not None and self.wait(0) is None:
                # srun is ended below either way; the job's own cancel ends the rest.
                with contextlib.suppress(SlurmError):
                    self._runner(["scancel", step])
                self.wait(3.0)
        super().kill()


class SrunLauncher:
    """A :class:`~validator.remote.cross_node_runner.Launcher` over Slurm steps.

    ``allocate`` gives each host the job its steps run in (or why it has none); a host
    without one cannot start a step (LaunchError with the reason).
    """

    def __init__(self, options: SrunOptions, runner: Runner = run_slurm) -> None:
        self.options = options
        self.runner = runner
        self._jobs: dict[str, str] = {}
        self._why: dict[str, str] = {}
        self._servers: dict[str, SrunStep] = {}
        self._probed: dict[str, float] = {}
        self._no_probe = False
        self._deadline = 0.0
        self._lock = threading.Lock()

    def allocate(
        self, jobs: Mapping[str, str], why: Mapping[str, str], deadline: float = 0.0
    ) -> None:
        """The round's hosts: host -> job id, host -> why it has none; the round's end."""
        with self._lock:
            self._jobs, self._why = dict(jobs), dict(why)
            self._servers.clear()
            self._deadline = deadline

    def _job(self, host: str) -> str:
        with self._lock:
            if host in self._jobs:
                return self._jobs[host]
            raise LaunchError(self._why.get(host, f"{one_line(host)}: no Slurm job this round"))

    def _srun(self, job: str, hosts: Sequence[str], tasks: list[str]) -> list[str]:
        # The step's own Slurm limit: the round's end (our clock ends it sooner).
        limit_s = max(self._deadline - time.monotonic(), 0.0) + 60.0
        return [
            "srun",
            f"--jobid={job}",
            "--overlap",
            f"--nodes={len(hosts)}",
            f"--nodelist={','.join(node_name(h) for h in hosts)}",
            *tasks,
            f"--time={minutes(limit_s)}",
            "--chdir=/tmp",
            "--input=none",
        ]

    def _started(self, argv: list[str], program: Sequence[str]) -> SrunStep:
        return SrunStep([*argv, "sh", "-c", _WITH_STEP_ID, _MARKER, *program], self.runner)

    def _one(self, host: HostPlan, argv: Sequence[str], env: Mapping[str, str]) -> SrunStep:
        srun = self._srun(self._job(host.name), [host.name], ["--ntasks=1"])
        return self._started([*srun, export_option({**self.options.env, **env})], argv)

    def start(self, host: HostPlan, argv: Sequence[str], env: Mapping[str, str]) -> SrunStep:
        """One task on ``host`` inside its job."""
        step = self._one(host, argv, env)
        with self._lock:
            self._servers[host.name] = step  # the latest: a server while it listens
        return step

    def start_group(
        self, hosts: Sequence[HostPlan], argv: Sequence[str], env: Mapping[str, str], ranks: int
    ) -> SrunStep:
        """One step over the group's job: ``ranks`` tasks a node, through PMIx."""
        jobs = {self._job(host.name) for host in hosts}
        if len(jobs) != 1:
            raise LaunchError("the group's nodes are not in one Slurm job")
        tasks = [f"--ntasks-per-node={ranks}", f"--mpi={self.options.mpi}"]
        srun = self._srun(jobs.pop(), [h.name for h in hosts], tasks)
        return self._started([*srun, export_option({**self.options.env, **env})], argv)

    def group_unavailable(self) -> str | None:
        """Groups run as srun steps: always possible here."""
        return None

    def listening(self, host: HostPlan, port: int) -> bool | None:
        """False until the server's step runs; then ``ss`` on its node, where there is one."""
        with self._lock:
            server = self._servers.get(host.name)
        if server is None or server.step_id() is None:
            return False
        if self._no_probe or not self.options.probe_listening:
            return None
        if time.monotonic() - self._probed.get(host.name, 0.0) < _PROBE_EVERY_S:
            return False
        self._probed[host.name] = time.monotonic()
        return self._probe(host, port)

    def _probe(self, host: HostPlan, port: int) -> bool | None:
        try:
            step = self._one(host, ["ss", "-Hltn", f"sport = :{port}"], {})
        except LaunchError:
            return None
        try:
            status = step.wait(10.0)
            out, _ = step.output()
        finally:
            step.kill()
        if status != 0:
            self._no_probe = status == 127 or "No such file" in step.output()[1]
            return None
        return bool(out.strip())


class SlurmRunner:
    """A :class:`~validator.remote.cross_node_runner.CrossNodeRunner` through Slurm.

    Each round: one job per test (its nodes, exclusive), wait for them to start, the
    steps through :class:`StepRunner` over :class:`SrunLauncher`, and every job of the
    round cancelled by its id when the round ends, on a timeout or an interrupt too.
    """

    def __init__(self, options: SrunOptions | None = None, runner: Runner = run_slurm) -> None:
        self.options = options or SrunOptions()
        self.runner = runner
        self.launcher = SrunLauncher(self.options, runner)
        self.steps = StepRunner(self.launcher)
        self.submitted: list[str] = []  # every job id of the stage, for the caller's checks
        self._live: set[str] = set()
        self._gpus: dict[str, int] = {}  # node -> GPUs its GRES declares (read once)
        self._lock = threading.Lock()

    def nccl_unavailable(self) -> str | None:
        """Groups always run through srun."""
        return None

    def rdma_round(
        self, pairs: Sequence[Pair], plan: CrossNodePlan, deadline: float
    ) -> dict[Pair, tuple[RdmaPairResult, ...]]:
        """Every pair's records, each pair in its own job."""
        return self._round(
            pairs, plan, deadline, lambda: self.steps.rdma_round(pairs, plan, deadline)
        )

    def nccl_round(
        self, groups: Sequence[Group], plan: CrossNodePlan, deadline: float
    ) -> dict[Group, tuple[NcclGroupResult, ...]]:
        """Every group's records, each group in its own job."""
        return self._round(
            groups, plan, deadline, lambda: self.steps.nccl_round(groups, plan, deadline)
        )

    def _round(
        self, tests: Sequence[T], plan: CrossNodePlan, deadline: float, run: Callable[[], R]
    ) -> R:
        jobs: dict[T, str] = {}
        try:
            why = self._unusable(tests)
            self._read_gpus([host for test in tests for host in test if host not in why])
            for test in tests:
                bad = [host for host in test if host in why]
                if bad:  # its peers have no result either, for the same reason
                    for host in test:
                        why.setdefault(host, why[bad[0]])
                else:
                    self._submit(test, deadline, jobs, why, self._gres(test, plan))
            self._await(jobs, deadline, why)
            self.launcher.allocate(
                {host: job for test, job in jobs.items() for host in test if host not in why},
                why,
                deadline,
            )
            return run()
        finally:
            self.launcher.allocate({}, {})
            self._cancel(list(jobs.values()))

    def _unusable(self, tests: Sequence[T]) -> dict[str, str]:
        """Host -> why Slurm will not run it now (down, drained, not responding, unknown)."""
        names = sorted({host for test in tests for host in test})
        why: dict[str, str] = {}
        for name in names:
            try:
                node_name(name)
            except LaunchError as exc:
                why[name] = str(exc)
        try:
            nodes = {node.name: node for node in list_nodes(self.runner, names=names)}
        except SlurmError as exc:
            return {**dict.fromkeys(names, f"Slurm could not be asked: {exc}"), **why}
        for name in names:
            node = nodes.get(name)
            if node is None:
                why.setdefault(name, f"Slurm does not know a node {one_line(name)}")
            elif not node.usable:
                why.setdefault(name, f"Slurm will not run {name}: {one_line(node.words)}")
        return why

    def _read_gpus(self, names: Sequence[str]) -> None:
        """The GPUs each node's GRES declares, asked once a node; unasked where Slurm fails."""
        missing = sorted({name for name in names if name not in self._gpus})
        if not missing:
            return
        try:
            result = self.runner(["scontrol", "-o", "show", "node", ",".join(missing)])
        except SlurmError:
            return  # as before: no GPUs asked
        if result.returncode == 0:
            found = parse_node_gpus(result.stdout)
            self._gpus.update((name, found[name]) for name in missing if name in found)

    def _gres(self, test: T, plan: CrossNodePlan) -> list[str]:
        """``--gres=gpu:N`` where every node of ``test`` declares GPUs (see the docstring)."""
        if any(a.startswith(("--gres", "--gpus")) for a in self.options.extra_sbatch):
            return []
        declared = [self._gpus.get(host, 0) for host in test]
        if not declared or min(declared) <= 0:
            return []
        counted = [plan.host(h).gpu_count for h in test if plan.has(h)]
        known = [count for count in counted if count]
        wanted = min(known) if known else min(declared)
        return [f"--gres=gpu:{min(wanted, *declared)}"]

    def _submit(
        self,
        test: T,
        deadline: float,
        jobs: dict[T, str],
        why: dict[str, str],
        gres: Sequence[str] = (),
    ) -> None:
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name={JOB_NAME}",
            "--exclusive",
            f"--nodes={len(test)}",
            f"--nodelist={','.join(test)}",
            "--ntasks-per-node=1",
            f"--time={minutes(max(deadline - time.monotonic(), 0.0) + 60.0)}",
            "--output=/dev/null",
            "--chdir=/tmp",
            "--no-requeue",
            *(f"--{flag}={value}" for flag, value in self._placement() if value),
            *gres,
            *self.options.extra_sbatch,
            "--wrap=exec sleep 2147483647",  # holds the nodes; the steps do the work
        ]
        try:
            result = self.runner(argv)
            if result.returncode != 0:
                raise SlurmError(f"sbatch refused the test's job: {said(result)}")
            job = parse_sbatch(result.stdout)
        except SlurmError as exc:
            for host in test:
                why.setdefault(host, one_line(str(exc)))
            return
        with self._lock:
            self.submitted.append(job)
            self._live.add(job)
        jobs[test] = job

    def _placement(self) -> list[tuple[str, str | None]]:
        o = self.options
        return [
            ("partition", o.partition),
            ("account", o.account),
            ("qos", o.qos),
            ("reservation", o.reservation),
        ]

    def _await(self, jobs: dict[T, str], deadline: float, why: dict[str, str]) -> None:
        """Until every job runs, or the wait is over: those not started are cancelled."""
        waiting = dict(jobs)
        until = min(deadline, time.monotonic() + self.options.allocation_wait_s)
        states: dict[str, JobState] = {}
        while waiting:
            try:
                states = job_states(list(waiting.values()), self.runner)
            except SlurmError:
                states = {}
            for test, job in list(waiting.items()):
                state = states.get(job)
                if state is not None and state.state == "RUNNING":
                    del waiting[test]
                elif state is not None and state.finished:
                    del waiting[test]
                    self._lost(test, f"Slurm ended its job {job}: {one_line(state.words)}", why)
            if not waiting or time.monotonic() >= until:
                break
            time.sleep(_POLL_S)
        for test, job in waiting.items():
            state = states.get(job)
            words = one_line(state.words) if state is not None else "not known"
            self._lost(test, f"Slurm did not start job {job} in time: {words}", why)
        self._cancel(list(waiting.values()))

    @staticmethod
    def _lost(test: T, words: str, why: dict[str, str]) -> None:
        for host in test:
            why.setdefault(host, f"no result: {words}")

    def _cancel(self, jobs: list[str]) -> None:
        """scancel by id, then wait (bounded) until squeue no longer lists them live."""
        if not jobs:
            return
        ended: set[str] = set()
        try:
            cancel(jobs, self.runner)
            until = time.monotonic() + _CANCEL_WAIT_S
            while time.monotonic() < until:
                states = job_states(jobs, self.runner)
                # COMPLETING: cancelled, its processes being ended (a dead node's stays so
                # until Slurm marks the node down); nothing of ours runs any more.
                ended = {j for j, s in states.items() if s.finished or s.state == "COMPLETING"}
                if ended >= set(jobs):
                    break
                time.sleep(_POLL_S)
        except SlurmError:
            pass  # kept: close() tries again (their --time ends them at the latest)
        with self._lock:
            self._live.difference_update(ended)

    def close(self) -> None:
        """Cancel every job of the stage still live (after an error the round did not catch)."""
        with self._lock:
            left = sorted(self._live)
        self._cancel(left)


def slurm_runner(options: SrunOptions | None = None, runner: Runner | None = None) -> SlurmRunner:
    """The runner certify's stage across nodes uses under ``--slurm``; ``close()`` it after.

    Slurm's commands run through ``runner`` (:func:`validator.slurm.commands.run_slurm`
    by default: no shell, squeue's and sinfo's output settings dropped).
    """
    return SlurmRunner(options, runner or run_slurm)


__all__ = [
    "JOB_NAME",
    "SlurmRunner",
    "SrunLauncher",
    "SrunOptions",
    "SrunStep",
    "export_option",
    "minutes",
    "node_name",
    "slurm_runner",
    "srun_environment",
]
