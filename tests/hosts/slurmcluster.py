"""A real Slurm cluster over test hosts: slurmctld on this machine, slurmd in every host.

Debian 12's own Slurm (22.05.8) and MUNGE, nothing simulated: ``srun``,
``sbatch``, ``sbcast``, ``squeue``, ``sinfo`` and ``scontrol`` on this machine
talk to a real slurmctld, which runs jobs through a real slurmd in each test
host (its network namespace, UTS namespace and chroot, as sshd runs there).
Jobs run as root in the host's root filesystem, so a job sees the host's
``/etc/gpuready/scenario.json``.

Per pool (its slot ``S``), under ``<run dir>/slurm/``:

- ``etc/slurm.conf`` and ``etc/cgroup.conf``: bound read-only into every host
  at the same path (and linked from the host's ``/etc/slurm/slurm.conf``), so
  the daemons, this machine's clients and a node's own ``scontrol`` read one file.
- ``munge/``: one shared key; this machine's munged listens on
  ``munge/munge.socket`` and so does each host's own munged, at the same path
  in the host's own tree (``AuthInfo=socket=...``), never the default socket.
- ``shared/``: bound read-write into every host at the same path, like an NFS
  home: the spool a controller and its nodes exchange files through.
- ``ctld/`` (state), ``log/`` (slurmctld's and munged's output); each host's
  slurmd and munged write to ``hosts/<name>/slurmd.log`` and ``munged.log``.

slurmctld listens on ``10.213.S.1:17000+S`` (every address, in fact: it
binds the wildcard), slurmd on ``<host address>:17100+S``, so pools never
collide. Without ``/sys`` in the hosts, slurmd needs ``CgroupPlugin=cgroup/v1``
(autodetection finds no cgroup filesystem and slurmd then refuses to start; the
v1 plugin loads and is never used with ``proctrack/linuxproc`` and
``task/none``) and ``SlurmdParameters=config_overrides`` (hwloc finds no
topology; the configured ``CPUs``/``RealMemory`` win).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from tests.hosts.testhosts import (
    HostsError,
    HostsUnavailable,
    Scenario,
    TestHost,
    TestHostPool,
    mounts_under,
    pids_in_netns,
    processes_mentioning,
)

SLURM_SHAPE = "debian12-slurm"
CTLD_PORT_BASE = 17000
SLURMD_PORT_BASE = 17100
CONTROLLER_NAME = "slurmctl"
SLURMD_SPOOL = "/var/spool/slurmd"
# What this machine needs: the controller's daemons and the clients the tests call.
SLURM_TOOLS = (
    "slurmctld",
    "munged",
    "munge",
    "scontrol",
    "sinfo",
    "squeue",
    "srun",
    "sbatch",
    "scancel",
    "sbcast",
)

# Job states a job never leaves (scontrol's JobState=).
JOB_DONE_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)

_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

NodePredicate = Callable[["NodeState"], bool]
NodeWanted = Union[str, NodePredicate]


def check_slurm_prerequisites() -> None:
    """Raise :class:`HostsUnavailable` naming the Slurm or MUNGE tools this machine lacks."""
    missing = [tool for tool in SLURM_TOOLS if shutil.which(tool, path=_ENV["PATH"]) is None]
    if missing:
        raise HostsUnavailable(
            f"a test Slurm cluster needs {', '.join(missing)} "
            "(apt-get install slurmctld slurmd slurm-client munge)"
        )


@dataclass(frozen=True)
class NodeState:
    """One node as ``scontrol -o show node`` reports it.

    Attributes:
        name: the node's name.
        state: the base state, upper case: ``IDLE``, ``ALLOCATED``, ``MIXED``, ``DOWN``, ...
        flags: the ``+FLAG`` parts: ``DRAIN``, ``NOT_RESPONDING``, ``RESERVED``, ...
        reason: the reason text ("" when none), with Slurm's ``[user@time]`` suffix.
    """

    name: str
    state: str
    flags: frozenset[str]
    reason: str

    @property
    def text(self) -> str:
        """The state as scontrol prints it: ``IDLE+DRAIN``."""
        return "+".join([self.state, *sorted(self.flags)])

    def matches(self, wanted: NodeWanted) -> bool:
        """Whether the node is in ``wanted``.

        Args:
            wanted: a predicate, or ``STATE[+FLAG...]`` where every part must be
                the base state or one of the flags (case-insensitive):
                ``"IDLE"`` (any flags), ``"DOWN+NOT_RESPONDING"``, ``"DRAIN"``.
                ``"IDLE!"`` (a trailing ``!``) also requires no flags at all.
        """
        if callable(wanted):
            return wanted(self)
        exact = wanted.endswith("!")
        parts = {p.strip().upper() for p in wanted.rstrip("!").split("+") if p.strip()}
        have = {self.state, *self.flags}
        if not parts <= have:
            return False
        return not exact or have <= parts


def parse_show_node(text: str) -> dict[str, NodeState]:
    """Nodes from ``scontrol -o show node`` (one node a line)."""
    nodes: dict[str, NodeState] = {}
    for line in text.splitlines():
        name = re.search(r"(?:^|\s)NodeName=(\S+)", line)
        state = re.search(r"(?:^|\s)State=(\S+)", line)
        if not name or not state:
            continue
        # Reason is free text (spaces and all) and scontrol prints it last.
        reason = re.search(r"(?:^|\s)Reason=(.*)$", line)
        base, *flags = state.group(1).upper().split("+")
        if base.endswith("*"):  # older spellings mark not responding with a star
            base = base.rstrip("*")
            flags.append("NOT_RESPONDING")
        nodes[name.group(1)] = NodeState(
            name=name.group(1),
            state=base,
            flags=frozenset(flags),
            reason=reason.group(1).strip() if reason else "",
        )
    return nodes


def _write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the ppid follows the last ")".
    return int(stat.rsplit(")", 1)[1].split()[1])


def _kill_pids(pids: Iterable[int], timeout: float = 5.0) -> list[int]:
    """SIGKILL these processes and wait until they are gone; returns those left."""
    left = set(pids)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        for pid in list(left):
            # A child of ours stays a zombie until reaped; count it as gone.
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                state = "gone"
            if state in ("gone", "Z", "X"):
                left.discard(pid)
        if left:
            time.sleep(0.02)
    return sorted(left)


class SlurmCluster:
    """slurmctld and munged here, munged and slurmd in each host, one slurm.conf.

    Args:
        pool: a pool whose hosts were started with the ``debian12-slurm`` shape.
        hosts: the cluster's nodes (default: every host of the pool). An
            unreachable host (scenario None) is a node whose address nobody owns:
            it never registers: UNKNOWN, and UNKNOWN+NOT_RESPONDING about 7 s
            later (slurmctld never marks DOWN a node it has not heard from).
        extra_conf: more slurm.conf lines (``HealthCheckProgram=...``).
        ro_binds: paths on this machine bound read-only into every host at the
            same path (``/work/main``, its ``.venv``, the Python it links to).
        rw_binds: the same, read-write.
        cpus: ``CPUs=`` of every node (slurmd takes it over what it finds); 8, a
            rank for each of a simulated node's 8 GPUs (srun refuses more tasks).
        real_memory: ``RealMemory=`` of every node, in MB.
        slurmd_timeout: ``SlurmdTimeout=``: how long a silent node stays up.
            With the defaults a killed slurmd's node is NOT_RESPONDING after
            7-10 s and DOWN after 15-18 s.
        message_timeout: ``MessageTimeout=``: an RPC's timeout.
        partition: the one partition's name (Default=YES, every node).
        cluster_name: ``ClusterName=``.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        pool: TestHostPool,
        hosts: Sequence[TestHost] | None = None,
        *,
        extra_conf: Sequence[str] = (),
        ro_binds: Sequence[Path | str] = (),
        rw_binds: Sequence[Path | str] = (),
        cpus: int = 8,
        real_memory: int = 1000,
        slurmd_timeout: int = 5,
        message_timeout: int = 5,
        partition: str = "gpu",
        cluster_name: str = "gpuready",
    ) -> None:
        if not pool.slot:
            raise HostsError("start the pool's hosts before the Slurm cluster")
        self.pool = pool
        self.hosts: list[TestHost] = list(pool.hosts if hosts is None else hosts)
        if not self.hosts:
            raise HostsError("a Slurm cluster needs at least one host")
        self.extra_conf = list(extra_conf)
        self.ro_binds = [Path(p) for p in ro_binds]
        self.rw_binds = [Path(p) for p in rw_binds]
        self.cpus = cpus
        self.real_memory = real_memory
        self.slurmd_timeout = slurmd_timeout
        self.message_timeout = message_timeout
        self.partition = partition
        self.cluster_name = cluster_name
        self.slurm_dir = pool.run_dir / "slurm"
        self.etc_dir = self.slurm_dir / "etc"
        self.conf_path = self.etc_dir / "slurm.conf"
        self.munge_dir = self.slurm_dir / "munge"
        self.munge_socket = self.munge_dir / "munge.socket"
        self.munge_key = self.munge_dir / "munge.key"
        self.shared_dir = self.slurm_dir / "shared"
        self.state_dir = self.slurm_dir / "ctld"
        self.log_dir = self.slurm_dir / "log"
        self.ctld_port = CTLD_PORT_BASE + pool.slot
        self.slurmd_port = SLURMD_PORT_BASE + pool.slot
        self.controller_address = str(pool.network.network_address + 1)
        self._ctld: subprocess.Popen[bytes] | None = None
        self._munged: subprocess.Popen[bytes] | None = None
        self._slurmd: dict[str, subprocess.Popen[bytes]] = {}
        self._host_munged: dict[str, subprocess.Popen[bytes]] = {}
        self._bound: list[tuple[TestHost, Path]] = []
        self._started = False
        self._closed = False

    # ------------------------------------------------------------ views

    @property
    def env(self) -> dict[str, str]:
        """What a client command needs in its environment: ``SLURM_CONF``."""
        return {"SLURM_CONF": str(self.conf_path)}

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def live_hosts(self) -> list[TestHost]:
        """The nodes that run a slurmd (the reachable hosts)."""
        return [h for h in self.hosts if h.reachable]

    @property
    def node_names(self) -> list[str]:
        """Every node's name, in order."""
        return [h.name for h in self.hosts]

    def host(self, name: str) -> TestHost:
        """The host of a node name.

        Raises:
            HostsError: for a name that is not a node of this cluster.
        """
        for host in self.hosts:
            if host.name == name:
                return host
        raise HostsError(f"{name} is not a node of this cluster ({', '.join(self.node_names)})")

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ commands

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 60.0,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command on this machine against this cluster.

        Args:
            argv: the command (``["srun", "-N4", "hostname"]``).
            check: raise when it exits non-zero.
            timeout: seconds before it is killed.
            input: its stdin.
            env: more environment (over this process's and :attr:`env`).
            cwd: its working directory (default: the shared directory, which
                exists on every node, so jobs start where they were submitted).

        Raises:
            HostsError: when ``check`` and it exits non-zero.
        """
        proc = subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **self.env, **(env or {})},
            cwd=str(cwd if cwd is not None else self.shared_dir),
            check=False,
        )
        if check and proc.returncode != 0:
            raise HostsError(
                f"{' '.join(argv)} failed ({proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip()}"
            )
        return proc

    def nodes(self) -> dict[str, NodeState]:
        """Every node's state, from ``scontrol -o show node``."""
        return parse_show_node(self.run(["scontrol", "-o", "show", "node"], timeout=20).stdout)

    def node(self, name: str) -> NodeState:
        """One node's state.

        Raises:
            HostsError: when slurmctld does not know the node.
        """
        found = parse_show_node(
            self.run(["scontrol", "-o", "show", "node", name], timeout=20).stdout
        )
        if name not in found:
            raise HostsError(f"slurmctld does not know node {name}")
        return found[name]

    def wait_state(self, node: str, wanted: NodeWanted, timeout: float = 30.0) -> NodeState:
        """Wait until ``node`` is in ``wanted`` (see :meth:`NodeState.matches`).

        Returns:
            The node's state once it matches.

        Raises:
            HostsError: when it does not within ``timeout``, naming the last state seen.
        """
        deadline = time.monotonic() + timeout
        while True:
            state = self.node(node)
            if state.matches(wanted):
                return state
            if time.monotonic() > deadline:
                what = getattr(wanted, "__name__", "the predicate") if callable(wanted) else wanted
                raise HostsError(
                    f"node {node} not {what} after {timeout:.0f} s: {state.text} "
                    f"(reason {state.reason or 'none'})"
                )
            time.sleep(0.2)

    def job(self, job_id: str | int) -> dict[str, str]:
        """A job's fields from ``scontrol -o show job ID`` (``JobState``, ``Reason``, ...).

        Values are what scontrol prints, up to the next ``Key=``; fields whose
        values hold spaces (``Command``, ``Comment``) may be cut short.

        Raises:
            HostsError: when slurmctld does not know the job.
        """
        out = self.run(["scontrol", "-o", "show", "job", str(job_id)], timeout=20).stdout
        fields = dict(re.findall(r"(?:^|\s)([A-Za-z:/]+)=(\S*)", out.strip()))
        if "JobState" not in fields:
            raise HostsError(f"slurmctld does not know job {job_id}: {out.strip()}")
        return fields

    def wait_job(
        self,
        job_id: str | int,
        states: Iterable[str] = JOB_DONE_STATES,
        timeout: float = 60.0,
    ) -> dict[str, str]:
        """Wait until a job is in one of ``states`` (default: finished, however).

        Faster than ``sbatch --wait``, which polls at growing intervals.

        Returns:
            The job's fields then (see :meth:`job`).

        Raises:
            HostsError: when it is not within ``timeout``, naming its state.
        """
        wanted = {s.upper() for s in states}
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job(job_id)
            if fields["JobState"] in wanted:
                return fields
            if time.monotonic() > deadline:
                raise HostsError(
                    f"job {job_id} still {fields['JobState']} (reason {fields.get('Reason')}) "
                    f"after {timeout:.0f} s"
                )
            time.sleep(0.1)

    def wait_idle(self, timeout: float = 30.0) -> dict[str, NodeState]:
        """Wait until every live node is IDLE with no flags.

        Raises:
            HostsError: when one is not within ``timeout`` (all states named).
        """
        return self.wait_all("IDLE!", timeout)

    def wait_all(self, wanted: NodeWanted, timeout: float = 30.0) -> dict[str, NodeState]:
        """Wait until every live node is in ``wanted`` (see :meth:`NodeState.matches`).

        ``"responding"`` means registered and answering: not UNKNOWN, DOWN or
        NOT_RESPONDING, whatever else (a health check may have drained it).

        Raises:
            HostsError: when one is not within ``timeout`` (all states named).
        """
        test = _responding if wanted == "responding" else wanted
        names = {h.name for h in self.live_hosts}
        deadline = time.monotonic() + timeout
        while True:
            nodes = self.nodes()
            if all(name in nodes and nodes[name].matches(test) for name in names):
                return nodes
            if time.monotonic() > deadline:
                seen = ", ".join(
                    f"{n}={nodes[n].text}" if n in nodes else f"{n}=unknown" for n in sorted(names)
                )
                raise HostsError(
                    f"nodes not {wanted if isinstance(wanted, str) else 'as wanted'} after "
                    f"{timeout:.0f} s: {seen}; {self._log_tails()}"
                )
            time.sleep(0.1)

    # ------------------------------------------------------------ start

    def start(self, timeout: float = 60.0) -> SlurmCluster:
        """Write the configuration, start every daemon and wait until every node is idle.

        Returns:
            The cluster itself.

        Raises:
            HostsUnavailable: when Slurm or MUNGE is missing on this machine.
            HostsError: when a daemon does not come up (with its log's tail).
        """
        if self._closed:
            raise HostsError("this Slurm cluster is closed")
        if self._started:
            return self
        check_slurm_prerequisites()
        for host in self.live_hosts:
            if not (host.root / "usr/sbin/slurmd").exists():
                raise HostsError(
                    f"{host.name} has no slurmd: start the hosts with shape={SLURM_SHAPE!r}"
                )
        self._started = True
        atexit.register(self.close)
        try:
            self._start(timeout)
        except BaseException:
            with contextlib.suppress(HostsError):
                self.close()
            raise
        return self

    def _start(self, timeout: float) -> None:
        # We hold the slot's lock: anything still naming our directory is a crashed run's.
        _kill_pids(processes_mentioning(self.slurm_dir))
        if self.slurm_dir.exists():
            if mounts_under(self.slurm_dir):
                raise HostsError(
                    f"{self.slurm_dir} still has mounts: {mounts_under(self.slurm_dir)}"
                )
            shutil.rmtree(self.slurm_dir)
        for path in (self.etc_dir, self.munge_dir, self.shared_dir, self.state_dir, self.log_dir):
            path.mkdir(mode=0o755, parents=True)
        self._check_port_free(self.ctld_port)
        _write(self.munge_key, os.urandom(1024), 0o400)
        self._write_conf()
        self._munged = self._spawn(self._munged_argv(), self.log_dir / "munged.log")
        self._wait_munge(self.munge_socket, self._munged, self.log_dir / "munged.log")
        self._ctld = self._spawn(
            [
                "unshare",
                "--uts",
                "/bin/sh",
                "-c",
                'hostname "$0" && exec "$@"',
                CONTROLLER_NAME,
                "slurmctld",
                "-D",
                "-f",
                str(self.conf_path),
            ],
            self.log_dir / "slurmctld.log",
        )
        self._wait_ctld(timeout)
        for host in self.live_hosts:
            self._prepare_host(host)
        for host in self.live_hosts:
            self._start_host_munged(host)
        for host in self.live_hosts:
            self._wait_munge(
                host.root / str(self.munge_socket).lstrip("/"),
                self._host_munged[host.name],
                host.host_dir / "munged.log",
            )
            self._slurmd[host.name] = self._spawn_slurmd(host)
        # Registered is enough: a health check (extra_conf) may drain a node at once.
        self.wait_all("responding", timeout)

    def _check_port_free(self, port: int) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("0.0.0.0", port))  # noqa: S104 - slurmctld binds the wildcard too
            except OSError as exc:
                raise HostsError(
                    f"slurmctld's port {port} (slot {self.pool.slot}) is taken: {exc}"
                ) from None

    def conf_text(self) -> str:
        """The slurm.conf this cluster runs with."""
        lines = [
            f"# gpuready's test Slurm cluster (tests/hosts/slurmcluster.py), slot {self.pool.slot}",
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={CONTROLLER_NAME}({self.controller_address})",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # Never the default socket: this machine may run a munged of its own.
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.state_dir}",
            f"SlurmctldPidFile={self.slurm_dir / 'slurmctld.pid'}",
            f"SlurmdSpoolDir={SLURMD_SPOOL}",
            "SlurmdPidFile=/run/slurmd.pid",
            # No cgroups in the hosts (no /sys): processes tracked by parent, no binding.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            # hwloc sees no topology without /sys: the node lines below win.
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            f"SlurmdTimeout={self.slurmd_timeout}",
            # A ping to a dead slurmd retries its refused connection for this long,
            # so it bounds how soon a killed node is seen not responding.
            f"MessageTimeout={self.message_timeout}",
            "InactiveLimit=0",
            "KillWait=2",
            "MinJobAge=300",
            # Start batch jobs in about a second, not after the default 3 s batching delay.
            "SchedulerParameters=batch_sched_delay=0",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            *self.extra_conf,
            *(
                f"NodeName={h.name} NodeAddr={h.address} CPUs={self.cpus} "
                f"RealMemory={self.real_memory} State=UNKNOWN"
                for h in self.hosts
            ),
            f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
        return "\n".join(lines) + "\n"

    def _write_conf(self) -> None:
        _write(self.conf_path, self.conf_text())
        # Autodetection finds no cgroup filesystem in a host and slurmd then
        # refuses to start; the v1 plugin loads without touching one.
        _write(self.etc_dir / "cgroup.conf", "CgroupPlugin=cgroup/v1\n")

    def reconfigure(self, extra_conf: Sequence[str]) -> None:
        """Replace the extra slurm.conf lines and make every daemon reread the file."""
        self.extra_conf = list(extra_conf)
        self._write_conf()
        self.run(["scontrol", "reconfigure"])

    def _munged_argv(self) -> list[str]:
        # --force: the run directory is 0700, and munged wants every directory
        # above its socket searchable by all (everything here runs as root).
        return [
            "munged",
            "--foreground",
            "--force",
            f"--socket={self.munge_socket}",
            f"--key-file={self.munge_key}",
            f"--pid-file={self.munge_dir / 'munged.pid'}",
            f"--seed-file={self.munge_dir / 'munged.seed'}",
            "--num-threads=2",
        ]

    @staticmethod
    def _spawn(argv: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_ENV,
                start_new_session=True,
            )

    def _wait_munge(self, sock: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
        deadline = time.monotonic() + 15.0
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise HostsError(f"munged did not start ({sock}): {_tail(log)}")
            time.sleep(0.02)

    def _wait_ctld(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self._ctld is None or self._ctld.poll() is not None:
                raise HostsError(f"slurmctld exited: {_tail(self.log_dir / 'slurmctld.log')}")
            ping = self.run(["scontrol", "ping"], check=False, timeout=15)
            if "is UP" in ping.stdout:
                return
            if time.monotonic() > deadline:
                raise HostsError(
                    f"slurmctld not up after {timeout:.0f} s: {ping.stdout.strip()} "
                    f"{_tail(self.log_dir / 'slurmctld.log')}"
                )
            time.sleep(0.1)

    def _inner(self, host: TestHost, path: Path | str) -> Path:
        return host.root / str(path).lstrip("/")

    def _prepare_host(self, host: TestHost) -> None:
        for path, read_only in (
            (self.etc_dir, True),
            (self.shared_dir, False),
            *((p, True) for p in self.ro_binds),
            *((p, False) for p in self.rw_binds),
        ):
            host.bind(path, read_only=read_only)
            self._bound.append((host, path))
        # The host's own munge directory, at the same path as this machine's.
        munge_dir = self._inner(host, self.munge_dir)
        munge_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        _write(munge_dir / "munge.key", self.munge_key.read_bytes(), 0o400)
        self._inner(host, SLURMD_SPOOL).mkdir(mode=0o755, parents=True, exist_ok=True)
        # A node's own scontrol (a health check draining itself) reads the default path.
        link = self._inner(host, "/etc/slurm/slurm.conf")
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(self.conf_path, link)

    def _start_host_munged(self, host: TestHost) -> None:
        self._host_munged[host.name] = self._spawn(
            host._chroot_argv(self._munged_argv()), host.host_dir / "munged.log"
        )

    def _spawn_slurmd(self, host: TestHost) -> subprocess.Popen[bytes]:
        return self._spawn(
            host._chroot_argv(["slurmd", "-D", "-f", str(self.conf_path), "-N", host.name]),
            host.host_dir / "slurmd.log",
        )

    # ------------------------------------------------------------ nodes

    def slurmd_running(self, host: TestHost | str) -> bool:
        """Whether this cluster's slurmd of the host is running."""
        name = host if isinstance(host, str) else host.name
        proc = self._slurmd.get(name)
        return proc is not None and proc.poll() is None

    def stop_slurmd(self, host: TestHost | str, *, jobs: bool = True) -> None:
        """Kill the host's slurmd with SIGKILL, as if the node died.

        Args:
            host: the host or its node name.
            jobs: also kill its job steps (slurmstepd and every job process);
                its sshd and munged are spared.
        """
        target = self.host(host) if isinstance(host, str) else host
        proc = self._slurmd.pop(target.name, None)
        pids: set[int] = set()
        if proc is not None:
            pids.add(proc.pid)
        if jobs:
            pids |= self._job_pids(target)
        left = _kill_pids(pids)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        if left:
            raise HostsError(f"processes of {target.name} would not die: {left}")

    def _job_pids(self, host: TestHost) -> set[int]:
        # Everything in the host but its sshd and munged (and their children).
        if not host.reachable:
            return set()
        keep = {p.pid for p in (host.process, self._host_munged.get(host.name)) if p is not None}
        pids = pids_in_netns([host.netns]).get(host.netns, [])
        parents = {pid: _ppid(pid) for pid in pids}
        kept: set[int] = set()
        for pid in pids:
            seen: set[int] = set()
            current: int | None = pid
            while current is not None and current not in seen:
                if current in keep:
                    kept.add(pid)
                    break
                seen.add(current)
                current = parents.get(current)
        return set(pids) - kept

    def start_slurmd(
        self, host: TestHost | str, *, wait: bool = True, timeout: float = 30.0
    ) -> None:
        """Start the host's slurmd again (nothing happens if it runs).

        Args:
            host: the host or its node name.
            wait: wait until slurmctld hears from it (the node no longer DOWN
                or not responding: ReturnToService=2 brings a DOWN node back).
            timeout: seconds to wait.
        """
        target = self.host(host) if isinstance(host, str) else host
        if not target.reachable:
            raise HostsError(f"{target.name} is an unreachable host by design")
        if not self.slurmd_running(target):
            self._slurmd[target.name] = self._spawn_slurmd(target)
        if wait:
            self.wait_state(target.name, _responding, timeout)

    def set_scenario(self, host: TestHost | str, scenario: Scenario) -> None:
        """Write the host's /etc/gpuready/scenario.json (see TestHost.set_scenario)."""
        target = self.host(host) if isinstance(host, str) else host
        if scenario is None:
            raise HostsError("a running node's scenario cannot be None")
        target.set_scenario(scenario)

    def reset(
        self,
        scenarios: Sequence[Scenario] | None = None,
        timeout: float = 30.0,
        wait: str = "IDLE!",
    ) -> None:
        """Back to a fresh cluster: no jobs, no reservations, every node idle.

        Cancels every job, deletes every reservation, restarts a stopped slurmd,
        resumes drained and down nodes and, with ``scenarios``, rewrites the
        hosts' scenarios (one per live host, in order; None keeps one).

        Args:
            scenarios: the hosts' new scenarios.
            timeout: seconds to wait for the nodes.
            wait: what every node must be at the end (:meth:`wait_all`):
                ``"responding"`` where a health check drains nodes again.
        """
        self.run(["scancel", "--user=root"], check=False)
        deadline = time.monotonic() + timeout
        while self.run(["squeue", "-h", "-o", "%i"], timeout=20).stdout.strip():
            if time.monotonic() > deadline:
                raise HostsError("jobs still queued after scancel")
            time.sleep(0.1)
        shown = self.run(["scontrol", "-o", "show", "reservation"], check=False).stdout
        for name in re.findall(r"ReservationName=(\S+)", shown):
            self.run(["scontrol", "delete", f"reservation={name}"], check=False)
        if scenarios is not None:
            for host, scenario in zip(self.live_hosts, scenarios, strict=False):
                if scenario is not None:
                    host.set_scenario(scenario)
        for host in self.live_hosts:
            if not self.slurmd_running(host):
                self.start_slurmd(host, wait=False)
        nodes = self.nodes()
        stuck = [
            n.name
            for h in self.live_hosts
            if (n := nodes.get(h.name)) is not None
            and ({"DRAIN", "FAIL"} & n.flags or n.state == "DOWN")
        ]
        if stuck:
            self.run(
                ["scontrol", "update", f"nodename={','.join(stuck)}", "state=resume"], check=False
            )
        self.wait_all(wait, timeout)

    # ------------------------------------------------------------ logs

    def log_path(self, what: str) -> Path:
        """A daemon's log: ``"slurmctld"``, ``"munged"``, or a node name (its slurmd)."""
        if what in ("slurmctld", "munged"):
            return self.log_dir / f"{what}.log"
        return self.host(what).host_dir / "slurmd.log"

    def _log_tails(self) -> str:
        parts = [f"slurmctld: {_tail(self.log_dir / 'slurmctld.log')}"]
        parts += [f"{h.name}: {_tail(h.host_dir / 'slurmd.log')}" for h in self.live_hosts]
        return "; ".join(parts)

    # ------------------------------------------------------------ teardown

    def close(self) -> None:
        """Kill every daemon this cluster started and undo its mounts in the hosts.

        The job steps and job processes in the hosts go too (sshd stays). The
        files stay under the pool's run directory until the pool closes.
        Safe to call twice, and from atexit.

        Raises:
            HostsError: naming what would not go.
        """
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError):
            atexit.unregister(self.close)
        problems: list[str] = []
        pids: set[int] = set()
        for host in self.live_hosts:
            pids |= self._job_pids(host)
        procs = [
            *self._slurmd.values(),
            *self._host_munged.values(),
            *(p for p in (self._ctld, self._munged) if p is not None),
        ]
        pids |= {p.pid for p in procs}
        problems += [f"process {pid}" for pid in _kill_pids(pids)]
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._slurmd.clear()
        self._host_munged.clear()
        self._ctld = self._munged = None
        # Anything else naming our directory (a job's child re-parented away).
        problems += [f"process {pid}" for pid in _kill_pids(processes_mentioning(self.slurm_dir))]
        for host, path in reversed(self._bound):
            try:
                host.unbind(path)
            except HostsError as exc:
                problems.append(str(exc))
        self._bound.clear()
        if problems:
            raise HostsError("Slurm cluster teardown left: " + ", ".join(problems))


def _responding(node: NodeState) -> bool:
    return node.state not in ("DOWN", "UNKNOWN") and "NOT_RESPONDING" not in node.flags


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"
