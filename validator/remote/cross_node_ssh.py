"""The stage's steps over SSH: perftest's two sides on two hosts, NCCL through mpirun.

Each host is reached once for the stage through :class:`validator.remote.ssh.SshTransport`
(its known_hosts policy, keys and ProxyJump), and every step is a channel on that
connection. Hosts are connected to in parallel (a host that never answers holds up no
other); a host that could not be reached fails every step of the round at once with the
same line, and is tried again in the next round.

A step's command line is built from quoted parts and starts as
``sh -c '<wrapper>' gpuready-step <dir> <step> <argv>``. The wrapper writes its process
id to its own new file in ``$TMPDIR/<dir>`` (``dir`` named by a random token for the
stage, made mode 700 by us, or the step fails: never a link, never another's), prints it
as its first line, then becomes the program (``exec``): the id is the program's. A step
is ended by that id on its host (SIGTERM to it and to the group it leads, then SIGKILL),
never by a name pattern; where its id line has not come, by the id in its file (a step
not started yet finds its file taken, and never starts). sshd does not end a command
without a terminal when its channel closes, so every step is ended that way before its
channel is closed: on a timeout, on Ctrl-C, and after it finished. The directory goes
when the launcher is closed.

What comes back is held to :data:`validator.limits.TOOL_OUTPUT_BYTES` a stream before it
is read; the parsers and :func:`validator.safe_text.one_line` see it after that.

NCCL groups: nccl-tests span nodes only through MPI (or Slurm's srun). Over SSH a group
runs where ``mpirun`` is given (Open MPI's ``-H host:slots -x VAR``), launched on the
group's first host; without it every group is left UNKNOWN with
:data:`~validator.remote.cross_node_runner.NCCL_NEEDS_LAUNCHER`, never passed.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import select
import threading
import time
from collections.abc import Mapping, Sequence

from paramiko import Channel, SSHClient, SSHException

from validator.limits import TOOL_OUTPUT_BYTES
from validator.model import HostSpec, NcclGroupResult, RdmaPairResult
from validator.remote.cross_node_runner import (
    NCCL_NEEDS_LAUNCHER,
    CrossNodePlan,
    Group,
    HostPlan,
    LaunchError,
    Pair,
    StepRunner,
)
from validator.remote.ssh import SshTransport
from validator.remote.transport import quoted
from validator.safe_text import one_line

# The stage's directory of step ids on a host ("$1" under $TMPDIR, named by a random
# token): made 700 here, or the step fails where it is not a directory of our own (a link
# included). /tmp is sticky: what we own there, no one else can swap.
_OWN_DIR = (
    'd="${TMPDIR:-/tmp}/$1"; mkdir -m 700 "$d" 2>/dev/null; '
    'if [ -L "$d" ] || [ ! -d "$d" ] || [ ! -O "$d" ]; then '
    'echo "gpuready: $d is not a directory of our own" >&2; exit 125; fi; f="$d/$2"; '
)
# Records the shell's id in the step's own new file ("$2"; taken already: the step was
# cancelled before it started, and it never starts), prints it, then becomes the program:
# the id is the program's.
_WITH_PID = _OWN_DIR + (
    '(set -C; echo "$$" > "$f") 2>/dev/null || '
    '{ echo "gpuready: step $2 was stopped before it started" >&2; exit 125; }; '
    'shift 2; echo "$$"; exec "$@"'
)
# Ends process "$p" and the group it leads (if it leads one): SIGTERM, SIGKILL after 2 s.
_END = (
    'kill -TERM "$p" 2>/dev/null || exit 0; kill -TERM -"$p" 2>/dev/null; n=0; '
    'while kill -0 "$p" 2>/dev/null; do n=$((n+1)); if [ "$n" -gt 20 ]; then '
    'kill -KILL -"$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; exit 0; fi; sleep 0.1; done'
)
_KILL = 'p="$1"; ' + _END
# Ends a step whose id never came on its channel by the id its wrapper recorded; a step
# that has not written it yet finds its file taken, and never starts.
_KILL_RECORDED = _OWN_DIR + (
    '(set -C; echo stopped > "$f") 2>/dev/null && exit 0; n=0; p=""; '
    'while [ -z "$p" ] && [ "$n" -lt 20 ]; do [ -L "$f" ] && exit 0; '
    'read -r p < "$f" || p=""; [ -n "$p" ] || sleep 0.05; n=$((n+1)); done; '
    'case "$p" in ""|0*|*[!0-9]*) exit 0 ;; esac; ' + _END
)
# Removes the stage's directory of step ids once every step has ended.
_CLEAN = (
    'd="${TMPDIR:-/tmp}/$1"; '
    'if [ -d "$d" ] && [ ! -L "$d" ] && [ -O "$d" ]; then rm -rf -- "$d"; fi'
)
_KILL_WAIT_S = 10.0
_OPEN_TIMEOUT_S = 15.0

Record = tuple[str, str]  # a step's id file on its host: the stage's directory, the step


def step_command(argv: Sequence[str], env: Mapping[str, str], record: Record) -> str:
    """The remote command line of one step: quoted parts, its id recorded and printed first."""
    assignments = [f"{name}={value}" for name, value in env.items()]
    wrapper = ["sh", "-c", _WITH_PID, "gpuready-step", *record]
    return quoted(["env", *assignments, *wrapper, *argv])


class SshStep:
    """One program running on a host over one SSH channel, known by its process id."""

    def __init__(
        self,
        client: SSHClient,
        where: str,
        command: str,
        *,
        with_pid: bool = True,
        record: Record | None = None,
    ) -> None:
        self._client = client
        self.where = where
        self._record = record
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise LaunchError(f"the connection to {where} is closed")
        try:
            self._channel: Channel = transport.open_session(timeout=_OPEN_TIMEOUT_S)
            self._channel.exec_command(command)
        except (SSHException, OSError, EOFError) as exc:
            raise LaunchError(f"cannot start a step on {where}: {one_line(exc)}") from None
        self._out = bytearray()
        self._err = bytearray()
        self._pid: int | None = None
        self._pid_known = threading.Event()
        if not with_pid:  # a command of our own (the ender): nothing to end by id
            self._pid_known.set()
        self._done = threading.Event()
        self._status: int | None = None
        self._killed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        """The program's process id on its host (None until it printed it)."""
        return self._pid

    def _keep(self, into: bytearray, data: bytes) -> None:
        room = TOOL_OUTPUT_BYTES - len(into)
        if room > 0:
            into += data[:room]

    def _stdout(self, data: bytes) -> None:
        if not self._pid_known.is_set():
            self._keep(self._out, data)
            head, newline, rest = bytes(self._out).partition(b"\n")
            if not newline:
                return
            self._out[:] = rest
            self._pid = int(head) if head.strip().isdigit() else -1
            self._pid_known.set()
            return
        self._keep(self._out, data)

    def _read(self) -> None:
        channel = self._channel
        try:
            while True:
                if channel.recv_ready():
                    self._stdout(channel.recv(1 << 16))
                    continue
                if channel.recv_stderr_ready():
                    self._keep(self._err, channel.recv_stderr(1 << 16))
                    continue
                # Data comes before the exit status on a channel: both streams are drained.
                if channel.exit_status_ready():
                    self._status = channel.recv_exit_status()
                    break
                if channel.closed:
                    self._status = -1
                    break
                select.select([channel], [], [], 0.2)
        except (SSHException, OSError, EOFError, ValueError):
            self._status = -1
        finally:
            self._pid_known.set()
            self._done.set()

    def wait(self, timeout_s: float) -> int | None:
        """Its exit status (-1: the connection went); None while it runs."""
        if self._done.wait(max(timeout_s, 0.0)):
            return self._status
        return None

    def output(self) -> tuple[str, str]:
        """Its stdout (less the id line) and stderr so far, bounded, decoded."""
        return self._out.decode("utf-8", "replace"), self._err.decode("utf-8", "replace")

    def kill(self) -> None:
        """End it on its host by its process id (if it still runs), then close the channel."""
        if self._killed:
            return
        self._killed = True
        if not self._done.is_set():
            ended = False
            if self._pid is not None and self._pid > 0:
                ended = self._end_remote(_KILL, str(self._pid))
            elif self._record is not None:  # its id line has not come: the recorded id
                ended = self._end_remote(_KILL_RECORDED, *self._record)
            if ended:  # its end is on its way; a step nothing was sent to is only closed
                self._done.wait(_KILL_WAIT_S)
        with contextlib.suppress(SSHException, OSError, EOFError):
            self._channel.close()
        self._reader.join(_KILL_WAIT_S)

    def _end_remote(self, script: str, *args: str) -> bool:
        """Run ``script`` on the host to end this step; whether it finished in time."""
        command = quoted(["sh", "-c", script, "gpuready-kill", *args])
        try:
            ender = SshStep(self._client, self.where, command, with_pid=False)
        except LaunchError:
            return False
        finished = ender.wait(_KILL_WAIT_S) is not None
        ender.kill()
        return finished


class SshLauncher:
    """Starts steps on hosts over SSH, one connection a host for the stage.

    Args:
        transport: connects as certify does (known_hosts, keys, ProxyJump).
        hosts: each host's inventory entry, by name.
        mpirun: the mpirun to launch NCCL groups with (Open MPI); None: no groups.
    """

    def __init__(
        self, transport: SshTransport, hosts: Mapping[str, HostSpec], mpirun: str | None = None
    ) -> None:
        self.transport = transport
        self.hosts = dict(hosts)
        self.mpirun = mpirun
        self._clients: dict[str, list[SSHClient]] = {}
        self._failed: dict[str, str] = {}  # this round's failed connects: each host's one line
        self._connecting: dict[str, threading.Lock] = {}  # one a host, held while it connects
        self._closed = False
        self._lock = threading.Lock()  # the dicts above; never held while connecting
        self._record_dir = f"gpuready-steps-{secrets.token_hex(8)}"
        self._steps = itertools.count(1)

    def new_round(self) -> None:
        """Forget the last round's failed connects: each such host is tried again."""
        with self._lock:
            self._failed.clear()

    def _client(self, name: str) -> SSHClient:
        spec = self.hosts.get(name)
        if spec is None:
            raise LaunchError(f"{one_line(name)} is not in the inventory")
        with self._lock:
            connecting = self._connecting.setdefault(name, threading.Lock())
        # Hosts connect in parallel; a second step to a host waits for the first's connect.
        with connecting:
            with self._lock:
                if name in self._failed:
                    raise LaunchError(self._failed[name])
                if name in self._clients:
                    return self._clients[name][-1]
            deadline = time.monotonic() + 4 * self.transport.connect_timeout_s
            try:
                clients = self.transport.connect(spec, deadline)
            except Exception as exc:  # noqa: BLE001 - every failure is one line
                why = one_line(getattr(exc, "message", exc))
                with self._lock:
                    self._failed[name] = why
                raise LaunchError(why) from None
            with self._lock:
                if not self._closed:
                    self._clients[name] = clients
                    return clients[-1]
            for client in reversed(clients):
                client.close()
            raise LaunchError(f"the connection to {one_line(name)} is closed")

    def start(self, host: HostPlan, argv: Sequence[str], env: Mapping[str, str]) -> SshStep:
        """Start ``argv`` on ``host``."""
        client = self._client(host.name)
        with self._lock:
            record = (self._record_dir, str(next(self._steps)))
        command = step_command(argv, env, record)
        return SshStep(client, one_line(host.name), command, record=record)

    def start_group(
        self, hosts: Sequence[HostPlan], argv: Sequence[str], env: Mapping[str, str], ranks: int
    ) -> SshStep:
        """mpirun on the group's first host, ``ranks`` ranks on each host."""
        if self.mpirun is None:
            raise LaunchError(NCCL_NEEDS_LAUNCHER)
        spread = ",".join(f"{host.address}:{ranks}" for host in hosts)
        exported = [part for name, value in env.items() for part in ("-x", f"{name}={value}")]
        command = [self.mpirun, "-np", str(ranks * len(hosts)), "-H", spread, *exported, *argv]
        return self.start(hosts[0], command, {})

    def group_unavailable(self) -> str | None:
        """Why groups cannot run over this SSH fleet (None where mpirun is given)."""
        if self.mpirun is not None:
            return None
        return f"{NCCL_NEEDS_LAUNCHER}: give mpirun, or certify through Slurm"

    def listening(self, host: HostPlan, port: int) -> bool | None:
        """Whether ``ss`` on the host shows a listener on ``port``; None where it cannot say."""
        try:
            step = self.start(host, ["ss", "-Hltn", f"sport = :{port}"], {})
        except LaunchError:
            return None
        try:
            status = step.wait(5.0)
            out, _ = step.output()
        finally:
            step.kill()
        if status != 0:
            return None
        return bool(out.strip())

    def close(self) -> None:
        """Remove each host's step ids, and close every connection (the steps have ended)."""
        with self._lock:
            self._closed = True
            connected = list(self._clients.items())
            self._clients.clear()
        cleaners = []
        for name, clients in connected:
            command = quoted(["sh", "-c", _CLEAN, "gpuready-clean", self._record_dir])
            with contextlib.suppress(LaunchError):
                cleaners.append(SshStep(clients[-1], one_line(name), command, with_pid=False))
        end = time.monotonic() + _KILL_WAIT_S
        for cleaner in cleaners:  # all at once: a host that hangs costs the rest nothing
            cleaner.wait(end - time.monotonic())
            cleaner.kill()
        for _, clients in connected:
            for client in reversed(clients):
                client.close()


def ssh_runner(
    transport: SshTransport, hosts: Mapping[str, HostSpec], mpirun: str | None = None
) -> tuple[StepRunner, SshLauncher]:
    """A runner over SSH, and its launcher (close it when the stage is over)."""
    launcher = SshLauncher(transport, hosts, mpirun)
    return _RoundRunner(launcher), launcher


class _RoundRunner(StepRunner):
    """A :class:`StepRunner` whose every round tries again the hosts the last could not reach."""

    def __init__(self, launcher: SshLauncher) -> None:
        super().__init__(launcher)
        self._ssh = launcher

    def rdma_round(
        self, pairs: Sequence[Pair], plan: CrossNodePlan, deadline: float
    ) -> dict[Pair, tuple[RdmaPairResult, ...]]:
        """:meth:`StepRunner.rdma_round`, each host connected to afresh if it failed before."""
        self._ssh.new_round()
        return super().rdma_round(pairs, plan, deadline)

    def nccl_round(
        self, groups: Sequence[Group], plan: CrossNodePlan, deadline: float
    ) -> dict[Group, tuple[NcclGroupResult, ...]]:
        """:meth:`StepRunner.nccl_round`, each host connected to afresh if it failed before."""
        self._ssh.new_round()
        return super().nccl_round(groups, plan, deadline)


__all__ = ["Record", "SshLauncher", "SshStep", "ssh_runner", "step_command"]
