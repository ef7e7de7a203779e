"""The default transport: ship the agent over SSH (paramiko) and run it with the host's Python.

One connection per host (through any ProxyJump hops), then three steps on it:

1. a probe (``python3 -c ...``) finds the cache dir, creates it 0700, checks the
   Python version and whether ``<cache>/<bundle.filename>`` is already there;
2. when it is not, the zipapp goes over SFTP to a temporary name and is renamed
   into place, so a half-written agent is never run;
3. ``<python> <cache>/<agent> --packed <arguments> --deadline <seconds>`` runs, every
   part quoted, under the per-host deadline: the agent is given what is left of it,
   less the trip, and cuts its burn-in to end in time; its stdout is the NodeFacts
   JSON packed in base64 (validator.packed.agent_facts reads it).

Host keys are checked as OpenSSH does with ``StrictHostKeyChecking=yes`` (or
``accept-new`` when asked): an unknown key is refused unless new keys are
accepted, a changed key is always refused. Nothing the host does raises: every
failure becomes an :class:`AgentOutcome` with a one-line error and its phase.
No key material, passphrase or password is ever logged or put into an outcome.
"""

from __future__ import annotations

import contextlib
import getpass
import hmac
import io
import logging
import math
import os
import re
import select
import socket
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# paramiko must find the stand-in for invoke (see validator.remote.lazy_invoke).
import validator.remote.lazy_invoke  # noqa: F401

# isort: split
from paramiko import (
    Agent,
    AuthenticationException,
    BadHostKeyException,
    MissingHostKeyPolicy,
    PasswordRequiredException,
    PKey,
    SSHClient,
    SSHConfig,
    SSHException,
    Transport,
)
from paramiko.auth_strategy import AuthSource, AuthStrategy, InMemoryPrivateKey, OnDiskPrivateKey
from paramiko.hostkeys import HostKeyEntry, HostKeys
from paramiko.ssh_exception import ChannelException, NoValidConnectionsError

from validator.error_tree import GpureadyError
from validator.files import write_atomic
from validator.model import HostSpec, NodeFacts, SchemaError
from validator.packed import AGENT_OUTPUT_LIMIT, agent_facts
from validator.remote.bundle import AgentBundle, build_agent
from validator.remote.progress_lines import KEEP_ALL, ProgressLines, agent_lines
from validator.remote.transport import (
    AgentOutcome,
    AgentRequest,
    Phase,
    Progress,
    agent_deadline,
    overrun_s,
    quoted,
)
from validator.safe_text import one_line

MIN_PYTHON = (3, 9)
DEFAULT_CACHE_DIR = "~/.cache/gpuready"
SYSTEM_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")
STDERR_KEEP = 64 * 1024  # bytes of the agent's stderr kept (its tail: the last line matters)
_SSH_PORT = 22
_DEFAULT_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")  # OpenSSH's defaults paramiko can load

# Runs on the host's interpreter before we know its version, so it is written in
# syntax every Python 2.6+/3.x parses. The version line comes first so that an
# interpreter that prints only that much still gets a clear answer.
_PROBE = """import os, sys
sys.stdout.write("%d.%d\\n" % sys.version_info[:2])
d = os.path.expanduser(sys.argv[1])
try:
    os.makedirs(d, 0o700)
except OSError:
    pass
f = os.path.join(d, sys.argv[2])
ok = os.path.isfile(f) and os.path.getsize(f) == int(sys.argv[3])
sys.stdout.write(d + "\\n" + (ok and "present" or "absent") + "\\n")
"""
_VERSION = re.compile(r"^(\d+)\.(\d+)$")

# Threads certify hosts in parallel; appends to one known_hosts file must not interleave.
_KNOWN_HOSTS_LOCK = threading.Lock()

# paramiko's transport thread reads its socket with a 0.1 s timeout, only to notice
# that it was closed: ten wake-ups a second per host while its agent runs, each a
# raised socket.timeout under the GIL. With 64 hosts' agents busy for ~8 s that was
# about 4 ms of controller CPU per host, as much as its handshake. Once logged in
# (the handshake keeps paramiko's own timing, which its banner and negotiation limits
# count on), the thread looks every few seconds, and a close shuts the socket down so
# that it wakes at once instead. Nothing else waits on that timeout: the session's
# limits are kept by the calling thread (_execute), and rekeying after a few hundred
# MB never comes with what an agent sends.
_IDLE_CHECK_S = 5.0


class _Failed(Exception):
    """One step on one host failed; the message is the outcome's one-line error."""

    def __init__(self, phase: Phase, message: str) -> None:
        super().__init__(message)
        self.phase = phase
        self.message = message


def quiet_paramiko() -> None:
    """Silence paramiko's own log, which reports every refused connection by itself.

    Each host's reason is already in its outcome's one-line error, and so in the report.
    """
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)


def _tilde(path: Path) -> str:
    """A path as the user writes it, ``~`` for their home."""
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home) :] if text.startswith(home + os.sep) else text


@dataclass(frozen=True)
class _Endpoint:
    """One SSH server to log in to: the target or a jump host."""

    label: str  # how messages name it
    hostname: str  # what the TCP connection goes to
    port: int
    user: str
    key_files: tuple[str, ...]
    use_default_keys: bool  # agent and ~/.ssh/id_*: only when no key was named in the inventory
    key_alias: str | None = None  # HostKeyAlias

    @property
    def known_hosts_name(self) -> str:
        """The name its key is filed under in known_hosts."""
        if self.key_alias:
            return self.key_alias
        return self.hostname if self.port == _SSH_PORT else f"[{self.hostname}]:{self.port}"


def _parse_jump(spec: str) -> tuple[str | None, str, int | None]:
    """``[ssh://][user@]host[:port]`` (host may be ``[v6]``) into its parts.

    Raises:
        _Failed: the hop cannot be read.
    """
    text = spec.strip()
    text = text.removeprefix("ssh://")
    user, sep, rest = text.rpartition("@")
    if not sep:
        user, rest = "", text
    port: int | None = None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        if tail.startswith(":"):
            port = _port(tail[1:], spec)
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
        port = _port(port_text, spec)
    else:
        host = rest
    if not host:
        raise _Failed(Phase.CONNECT, f"ProxyJump hop {spec!r} names no host")
    return (user or None), host, port


def _port(text: str, where: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise _Failed(Phase.CONNECT, f"port {text!r} in {where!r} is not a TCP port")
    return int(text)


class KnownHosts:
    """The known_hosts files, read once per run and shared by every host's connection.

    Re-reading them for each host costs a parse of every line (paramiko's loader is
    quadratic in the entries) on every connection. Lookups go through a name index
    (hashed ``|1|`` entries are matched one by one, as OpenSSH does); a key recorded
    with :meth:`record` is appended to the user's file and seen by later lookups.
    Lines OpenSSH has but paramiko cannot read (markers, unknown key types) are
    skipped, as paramiko's own loader skips them.

    Args:
        user: the user's known_hosts file, which new keys are added to.
        system: also trusted, never written; its entry for a name wins over the user's.
    """

    def __init__(self, user: Path, system: Path | None = None) -> None:
        self.user = user
        self.system = system
        self._lock = threading.Lock()
        self._files: tuple[_KeyIndex, _KeyIndex] | None = None

    def _loaded(self) -> tuple[_KeyIndex, _KeyIndex]:
        """Both files' keys, read on first use.

        Raises:
            OSError: a file exists but cannot be read (asked again on the next call).
        """
        with self._lock:
            if self._files is None:
                system = _KeyIndex.read(self.system) if self.system is not None else _KeyIndex()
                self._files = (system, _KeyIndex.read(self.user))
            return self._files

    def lookup(self, name: str) -> dict[str, PKey] | None:
        """The keys recorded for ``name`` by type: the system file's, else the user's.

        Raises:
            OSError: a file exists but cannot be read.
        """
        system, user = self._loaded()
        with self._lock:
            found = system.lookup(name)
            return found if found is not None else user.lookup(name)

    def record(self, name: str, key: PKey) -> None:
        """Append ``name``'s ``key`` to the user's file (once) and trust it from now on.

        Raises:
            OSError: the file or its folder cannot be written.
        """
        _, user = self._loaded()
        with self._lock:
            known = user.lookup(name) or {}
            if known.get(key.get_name()) == key:
                return  # another host's connection recorded it a moment ago
            append_known_host(self.user, name, key)
            user.add(name, key)


class _KeyIndex:
    """One known_hosts file's keys: plain names in a dict, hashed names in a list."""

    def __init__(self) -> None:
        # Each key with its line's position, so the first line of a type wins, as in paramiko.
        self._plain: dict[str, list[tuple[int, PKey]]] = {}
        self._hashed: list[tuple[int, str, PKey]] = []
        self._count = 0

    @classmethod
    def read(cls, path: Path) -> _KeyIndex:
        index = cls()
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return index  # no file, no keys: every host is unknown
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                entry = HostKeyEntry.from_line(line, lineno)
            except SSHException:
                continue
            if entry is None or entry.key is None:
                continue
            for name in entry.hostnames:
                index.add(name, entry.key)
        return index

    def add(self, name: str, key: PKey) -> None:
        self._count += 1
        if name.startswith("|1|"):
            self._hashed.append((self._count, name, key))
        else:
            self._plain.setdefault(name, []).append((self._count, key))

    def lookup(self, name: str) -> dict[str, PKey] | None:
        matches = list(self._plain.get(name, ()))
        if self._hashed and not name.startswith("|1|"):
            matches += [
                (order, key) for order, hashed, key in self._hashed if _hash_matches(name, hashed)
            ]
        if not matches:
            return None
        keys: dict[str, PKey] = {}
        for _, key in sorted(matches, key=lambda match: match[0]):
            keys.setdefault(key.get_name(), key)
        return keys


def _hash_matches(name: str, hashed: str) -> bool:
    """Whether a ``|1|salt|hash`` known_hosts name is ``name`` hashed."""
    try:
        return hmac.compare_digest(HostKeys.hash_host(name, hashed), hashed)
    except (ValueError, TypeError):  # a malformed salt or a non-ASCII line: not this name
        return False


def _recorded_keys(transport: SshTransport, name: str) -> dict[str, PKey] | None:
    """The run's recorded keys for the known_hosts ``name``, by type.

    Raises:
        _Failed: a known_hosts file cannot be read.
    """
    try:
        return transport.host_keys.lookup(name)
    except OSError as exc:
        raise _Failed(
            Phase.CONNECT,
            f"cannot read the known_hosts file {exc.filename or transport.known_hosts}: "
            f"{exc.strerror or exc}",
        ) from None


class _HostKeyPolicy(MissingHostKeyPolicy):
    """Checks a host key paramiko's client has no record of against the run's known_hosts.

    A client is given only its own host's recorded keys (see ``SshTransport._login``),
    so this sees the hosts that had none when it was made: an unknown key is refused
    with the fix, or recorded when new keys are accepted. Should another host's
    connection have recorded one since, it is checked as paramiko would: a key of
    another value (or only of other types) is refused as changed.
    """

    def __init__(self, transport: SshTransport, endpoint: _Endpoint) -> None:
        self._transport = transport
        self._endpoint = endpoint

    def missing_host_key(self, client: SSHClient, hostname: str, key: PKey) -> None:
        """Called by paramiko with the server's key during the handshake.

        Raises:
            BadHostKeyException: the host's recorded key differs.
            _Failed: the key is unknown and new keys are not accepted, or it could not
                be recorded.
        """
        del client
        transport = self._transport
        recorded = _recorded_keys(transport, hostname)
        if recorded is not None:
            expected = recorded.get(key.get_name())
            if expected != key:
                raise BadHostKeyException(hostname, key, expected or next(iter(recorded.values())))
            return
        known_hosts = transport.known_hosts
        if not transport.accept_new_host_keys:
            raise _Failed(
                Phase.CONNECT,
                f"host key of {self._endpoint.label} is not in {_tilde(known_hosts)}: "
                "verify it, then re-run with --accept-new-host-keys "
                "(adds it, like OpenSSH's accept-new)",
            )
        try:
            transport.host_keys.record(hostname, key)
        except OSError as exc:
            raise _Failed(
                Phase.CONNECT,
                f"cannot record the host key of {self._endpoint.label} in "
                f"{_tilde(known_hosts)}: {exc.strerror or exc}",
            ) from None


def append_known_host(path: Path, name: str, key: PKey) -> None:
    """Add ``name``'s ``key`` to the known_hosts file ``path``, atomically.

    The file is rewritten to a temporary name and renamed over the old one, so a
    reader never sees half a line; a missing file is created 0600 (its folder 0700).

    Raises:
        OSError: the file or its folder cannot be written.
    """
    line = HostKeyEntry([name], key).to_line()
    if line is None:  # paramiko gives None only for an entry without a key
        raise OSError(f"no key to record for {name}")
    with _KNOWN_HOSTS_LOCK:
        target = path.resolve() if path.is_symlink() else path
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            old = target.read_bytes()
            mode = stat.S_IMODE(target.stat().st_mode)
        except FileNotFoundError:
            old, mode = b"", 0o600
        if old and not old.endswith(b"\n"):
            old += b"\n"
        write_atomic(target, old + line.encode(), mode=mode)


@dataclass
class _Run:
    """What one remote command gave."""

    status: int | None  # None: the deadline passed first
    stdout: bytes
    stderr: bytes

    def last_stderr_line(self) -> str:
        lines = [ln.strip() for ln in self.stderr.decode("utf-8", "replace").splitlines()]
        lines = [ln for ln in lines if ln]
        return lines[-1] if lines else ""


def _execute(
    client: SSHClient, command: str, deadline: float, lines: ProgressLines = KEEP_ALL
) -> _Run:
    """Run ``command`` on the host; read stdout fully and keep stderr's tail (``lines`` read).

    The thread sleeps until the channel has something for it (data on either stream,
    EOF, the exit status, a close) or the deadline passes: with hundreds of hosts at
    once, waking every few milliseconds to look would cost the controller its CPU.

    Raises:
        SSHException: the session could not be opened.
    """
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        raise SSHException("the connection is closed")
    channel = transport.open_session(timeout=max(deadline - time.monotonic(), 0.1))
    stdout = bytearray()
    stderr = bytearray()
    try:
        channel.exec_command(command)
        # paramiko's pipe for the channel is readable while either stream holds data,
        # and for good once EOF or a close arrives. poll, not select: no FD_SETSIZE limit.
        ready = select.poll()
        ready.register(channel.fileno(), select.POLLIN)
        while True:
            busy = False
            if channel.recv_ready():
                stdout += channel.recv(1 << 16)
                if len(stdout) > AGENT_OUTPUT_LIMIT:
                    # More than any agent prints: stop holding it (agent_facts names it).
                    return _Run(0, bytes(stdout), bytes(stderr))
                busy = True
            if channel.recv_stderr_ready():
                stderr += lines.split(channel.recv_stderr(1 << 16))
                del stderr[:-STDERR_KEEP]
                busy = True
            if busy:
                continue
            left = deadline - time.monotonic()
            # EOF covers both streams; the exit status may come before or after it (a
            # close without one sets the event too, and reads as -1).
            if channel.eof_received or channel.closed:
                stderr += lines.rest()  # a last line without its newline
                if channel.status_event.wait(max(left, 0.0)):
                    return _Run(channel.recv_exit_status(), bytes(stdout), bytes(stderr))
                return _Run(None, bytes(stdout), bytes(stderr))
            if left <= 0:
                return _Run(None, bytes(stdout), bytes(stderr))
            ready.poll(max(1, math.ceil(left * 1000)))
    finally:
        channel.close()


class _Transport(Transport):
    """paramiko's transport, whose close wakes its thread to the socket's end, not its timeout.

    Every close goes through here, paramiko's own on a failed login included.
    """

    def close(self) -> None:
        if isinstance(self.sock, socket.socket):
            with contextlib.suppress(OSError):  # never connected, or the peer went first
                self.sock.shutdown(socket.SHUT_RDWR)
        super().close()


class _PublicKeys(AuthStrategy):
    """Public keys only, in a fixed order; paramiko never asks for a password or passphrase.

    paramiko's own key_filename path reports a wrong key as a key-parsing error
    (it keeps the last exception of its key-type loop), so keys are loaded here.
    """

    def __init__(self, sources: list[AuthSource]) -> None:
        super().__init__(ssh_config=SSHConfig())
        self._sources = sources

    def get_sources(self) -> Iterator[AuthSource]:
        """The inventory's or ssh config's key files, then ssh-agent, then ~/.ssh/id_*."""
        yield from self._sources


def _key_sources(endpoint: _Endpoint, agent: Agent | None) -> list[AuthSource]:
    """What to offer the server, loaded now so a bad key file gets its own message.

    Raises:
        _Failed: the inventory's key file is missing, unreadable or passphrase-protected.
    """
    sources: list[AuthSource] = []
    strict = not endpoint.use_default_keys  # the inventory named this key: it must work
    for named in endpoint.key_files:
        key = _load_key(Path(named), endpoint, strict=strict)
        if key is not None:
            sources.append(OnDiskPrivateKey(endpoint.user, "python-config", Path(named), key))
    if not endpoint.use_default_keys:
        return sources
    if agent is not None:
        with contextlib.suppress(SSHException, OSError):
            sources += [InMemoryPrivateKey(endpoint.user, key) for key in agent.get_keys()]
    for name in _DEFAULT_KEYS:
        default = Path.home() / ".ssh" / name
        key = _load_key(default, endpoint, strict=False) if default.is_file() else None
        if key is not None:
            sources.append(OnDiskPrivateKey(endpoint.user, "implicit-home", default, key))
    return sources


def _load_key(path: Path, endpoint: _Endpoint, *, strict: bool) -> PKey | None:
    """The private key at ``path``; None when it cannot be used and ``strict`` is off.

    Messages name the file, never its content.

    Raises:
        _Failed: ``strict`` and the key cannot be used.
    """
    who = f"{endpoint.user}@{endpoint.label}"
    try:
        return PKey.from_path(path)
    # cryptography raises TypeError for an encrypted PEM key read without a password.
    except (PasswordRequiredException, TypeError):
        why = "is passphrase-protected: load it into ssh-agent (ssh-add) and leave it unset"
    except FileNotFoundError:
        why = "does not exist: check ansible_ssh_private_key_file"
    except (SSHException, OSError, ValueError):
        why = "is not a private key that can be read: check ansible_ssh_private_key_file"
    if strict:
        raise _Failed(Phase.CONNECT, f"the key file {path} for {who} {why}")
    return None


class SshTransport:
    """Runs the node agent on a host over SSH, caching the agent in the user's cache dir.

    Args:
        ssh_config: an OpenSSH client config to read (HostName, Port, User,
            IdentityFile, ProxyJump, HostKeyAlias); default ``~/.ssh/config``
            when it exists. Inventory values win over it.
        known_hosts: the user's known_hosts file; new keys are added here.
        accept_new_host_keys: record unknown host keys instead of refusing
            (OpenSSH's ``accept-new``); a changed key is refused regardless.
        connect_timeout_s: TCP connect, SSH banner and authentication limit.
        cache_dir: where the agent is kept on each host (``~`` is the remote user's home).
        system_known_hosts: also trusted, never written.
    """

    name = "ssh"

    def __init__(
        self,
        *,
        ssh_config: Path | None = None,
        known_hosts: Path | None = None,
        accept_new_host_keys: bool = False,
        connect_timeout_s: float = 10.0,
        cache_dir: str = DEFAULT_CACHE_DIR,
        system_known_hosts: Path | None = SYSTEM_KNOWN_HOSTS,
    ) -> None:
        default_config = Path.home() / ".ssh" / "config"
        self.ssh_config = ssh_config if ssh_config is not None else default_config
        self.known_hosts = known_hosts or Path.home() / ".ssh" / "known_hosts"
        self.accept_new_host_keys = accept_new_host_keys
        self.connect_timeout_s = connect_timeout_s
        self.cache_dir = cache_dir
        self.system_known_hosts = system_known_hosts
        self.host_keys = KnownHosts(self.known_hosts, system_known_hosts)
        self._lock = threading.Lock()
        self._config: SSHConfig | None = None
        self._uploads = 0

    @property
    def uploads(self) -> int:
        """How many times the agent was sent to a host (cache misses) by this transport."""
        with self._lock:
            return self._uploads

    def run_agent(
        self, host: HostSpec, request: AgentRequest, timeout_s: float, progress: Progress
    ) -> AgentOutcome:
        """Connect, ship the agent when the host lacks it, run it, parse its facts.

        Never raises for anything the host, the network or the agent does.
        """
        started = time.monotonic()
        deadline = started + timeout_s
        clients: list[SSHClient] = []
        phase = Phase.CONNECT
        run: _Run | None = None
        progress.phase(host.name, Phase.CONNECT)
        try:
            bundle = build_agent()
            clients = self._connect(host, deadline)
            phase = Phase.UPLOAD
            cache, present = self._probe(clients[-1], host, bundle, deadline)
            path = f"{cache}/{bundle.filename}"
            if not present:
                progress.phase(host.name, Phase.UPLOAD)
                self._upload(clients[-1], host, bundle, cache, path)
            phase = Phase.RUN
            progress.phase(host.name, Phase.RUN)
            # The agent cuts its burn-in to end within what is left, less the trip.
            left = agent_deadline(deadline - time.monotonic())
            extra, lines = agent_lines(request, progress, host.name)
            argv = [host.python, path, *request.arguments(host, left), *extra]
            run = _execute(clients[-1], quoted(argv), deadline + overrun_s(timeout_s), lines)
            facts = self._facts(host, run, timeout_s)
        except _Failed as failure:
            progress.phase(host.name, Phase.FAILED)
            return AgentOutcome(
                host=host.name,
                facts=None,
                error=failure.message,
                stderr=_stderr_text(run),
                phase=failure.phase,
                elapsed_s=time.monotonic() - started,
            )
        except GpureadyError as exc:  # the agent could not be built here
            progress.phase(host.name, Phase.FAILED)
            return AgentOutcome(
                host=host.name,
                facts=None,
                error=str(exc),
                phase=phase,
                elapsed_s=time.monotonic() - started,
            )
        except (SSHException, EOFError, OSError) as exc:  # the connection broke mid-way
            progress.phase(host.name, Phase.FAILED)
            return AgentOutcome(
                host=host.name,
                facts=None,
                error=f"lost the SSH connection to {_label(host)} during {phase}: {one_line(exc)}",
                stderr=_stderr_text(run),
                phase=phase,
                elapsed_s=time.monotonic() - started,
            )
        finally:
            for client in reversed(clients):
                client.close()
        progress.phase(host.name, Phase.DONE)
        return AgentOutcome(
            host=host.name,
            facts=facts,
            stderr=_stderr_text(run),
            phase=Phase.DONE,
            elapsed_s=time.monotonic() - started,
        )

    # -- connecting ---------------------------------------------------------------------

    def _ssh_config(self) -> SSHConfig:
        with self._lock:
            if self._config is None:
                if self.ssh_config.is_file():
                    try:
                        self._config = SSHConfig.from_path(str(self.ssh_config))
                    except (OSError, SSHException, ValueError) as exc:
                        raise _Failed(
                            Phase.CONNECT,
                            f"cannot read the ssh config {_tilde(self.ssh_config)}: "
                            f"{one_line(exc)}",
                        ) from None
                else:
                    self._config = SSHConfig()
            return self._config

    def _endpoints(self, host: HostSpec) -> list[_Endpoint]:
        """The jump hosts (in order), then the target, with ssh config applied."""
        config = self._ssh_config()
        entry = config.lookup(host.address)
        target = self._endpoint(
            config,
            label=_label(host),
            name=host.address,
            port=host.port,
            user=host.user,
            key_file=host.key_file,
        )
        hops: list[_Endpoint] = []
        jump = str(entry.get("proxyjump", "none"))
        if jump.lower() != "none":
            for spec in jump.split(","):
                user, name, port = _parse_jump(spec)
                hop_entry = config.lookup(name)
                hop_keys = hop_entry.get("identityfile")
                hops.append(
                    self._endpoint(
                        config,
                        label=f"jump host {name}",
                        name=name,
                        port=port,
                        user=user,
                        # A bastion usually takes the same key as the hosts behind it.
                        key_file=None if hop_keys else host.key_file,
                    )
                )
        return [*hops, target]

    def _endpoint(
        self,
        config: SSHConfig,
        *,
        label: str,
        name: str,
        port: int | None,
        user: str | None,
        key_file: str | None,
    ) -> _Endpoint:
        entry = config.lookup(name)
        if port is None:
            port = _port(str(entry.get("port", _SSH_PORT)), f"Port of {name} in the ssh config")
        if key_file:
            keys: tuple[str, ...] = (os.path.expanduser(key_file),)
        else:
            keys = tuple(os.path.expanduser(str(p)) for p in entry.get("identityfile", []))
        alias = entry.get("hostkeyalias")
        return _Endpoint(
            label=label,
            hostname=str(entry.get("hostname", name)),
            port=port,
            user=user or str(entry.get("user") or getpass.getuser()),
            key_files=keys,
            use_default_keys=not key_file,
            key_alias=str(alias) if alias else None,
        )

    def _connect(self, host: HostSpec, deadline: float) -> list[SSHClient]:
        """Log in to every hop and the target; the target's client comes last.

        Raises:
            _Failed: any hop could not be reached or refused us.
        """
        endpoints = self._endpoints(host)
        clients: list[SSHClient] = []
        try:
            for index, endpoint in enumerate(endpoints):
                via = f" via {endpoints[index - 1].label}" if index else ""
                timeout = min(self.connect_timeout_s, deadline - time.monotonic())
                if timeout <= 0:
                    raise _Failed(
                        Phase.CONNECT, f"no time left to connect to {endpoint.label}{via}"
                    )
                try:
                    sock = self._socket(clients[-1] if clients else None, endpoint, timeout)
                    client = SSHClient()
                    clients.append(client)
                    self._login(client, endpoint, sock, timeout)
                except _Failed:
                    raise
                except (SSHException, EOFError, OSError, ValueError) as exc:
                    # ValueError: paramiko's answer to a key file it cannot read.
                    raise _Failed(
                        Phase.CONNECT, _connect_error(exc, endpoint, via, timeout)
                    ) from None
        except BaseException:
            for client in reversed(clients):
                client.close()
            raise
        return clients

    @staticmethod
    def _socket(
        previous: SSHClient | None, endpoint: _Endpoint, timeout: float
    ) -> socket.socket | object:
        """A TCP connection to the endpoint, or a tunnel through the previous hop."""
        if previous is None:
            return socket.create_connection((endpoint.hostname, endpoint.port), timeout)
        transport = previous.get_transport()
        if transport is None:
            raise SSHException("the jump host's connection is closed")
        return transport.open_channel(
            "direct-tcpip", (endpoint.hostname, endpoint.port), ("127.0.0.1", 0), timeout=timeout
        )

    def _login(self, client: SSHClient, endpoint: _Endpoint, sock: object, timeout: float) -> None:
        """Log in to one endpoint over ``sock``, its host key checked against known_hosts.

        Raises:
            _Failed: known_hosts cannot be read, or the policy refused the key.
            SSHException: the handshake or authentication failed (a changed key included).
        """
        # With an alias, paramiko must look the key up under the alias alone.
        name, port = (
            (endpoint.key_alias, _SSH_PORT)
            if endpoint.key_alias
            else (endpoint.hostname, endpoint.port)
        )
        # paramiko offers a known host's recorded key type first only when its client
        # holds that host's keys; without them it negotiates its own first choice, so a
        # host recorded only as RSA would show its ed25519 key and look changed. So the
        # client gets this host's keys from the files read once for the run (under the
        # name paramiko files it by) and checks them itself; the policy takes the rest.
        known_as = name if port == _SSH_PORT else f"[{name}]:{port}"
        recorded = _recorded_keys(self, known_as)
        if recorded is not None:
            client_keys = client.get_host_keys()
            for key_type, key in recorded.items():
                client_keys.add(known_as, key_type, key)
        client.set_missing_host_key_policy(_HostKeyPolicy(self, endpoint))
        agent = Agent() if endpoint.use_default_keys and os.environ.get("SSH_AUTH_SOCK") else None
        try:
            client.connect(
                name,
                port=port,
                username=endpoint.user,
                sock=sock,  # type: ignore[arg-type]  # a socket or a paramiko Channel
                # Past the banner timeout, so a silent port reports the banner, not a
                # half-made session.
                timeout=timeout + 1.0,
                banner_timeout=timeout,
                auth_timeout=timeout,
                channel_timeout=timeout,
                auth_strategy=_PublicKeys(_key_sources(endpoint, agent)),
                # The stubs' Transport lacks gss_kex and gss_deleg_creds; paramiko's has them.
                transport_factory=_Transport,  # type: ignore[arg-type,unused-ignore]
            )
        finally:
            if agent is not None:
                agent.close()
        transport = client.get_transport()
        if transport is not None:
            transport.sock.settimeout(_IDLE_CHECK_S)

    # -- shipping and running -----------------------------------------------------------

    def _probe(
        self, client: SSHClient, host: HostSpec, bundle: AgentBundle, deadline: float
    ) -> tuple[str, bool]:
        """The host's cache dir (created) and whether the agent is already in it.

        Raises:
            _Failed: no usable Python on the host.
        """
        argv = [host.python, "-c", _PROBE, self.cache_dir, bundle.filename, str(len(bundle.data))]
        probe = _execute(client, quoted(argv), deadline)
        where = _label(host)
        if probe.status is None:
            raise _Failed(Phase.UPLOAD, f"probing {where} with {host.python} timed out")
        lines = probe.stdout.decode("utf-8", "replace").splitlines()
        version = _VERSION.match(lines[0].strip()) if lines else None
        if probe.status == 127 or (version is None and probe.status != 0):
            detail = probe.last_stderr_line() or f"exit status {probe.status}"
            raise _Failed(
                Phase.UPLOAD,
                f"cannot run {host.python} on {where} ({detail}): "
                "install Python 3.9+ or set ansible_python_interpreter",
            )
        if version is None:
            raise _Failed(Phase.UPLOAD, f"{host.python} on {where} did not report its version")
        found = (int(version.group(1)), int(version.group(2)))
        if found < MIN_PYTHON:
            raise _Failed(
                Phase.UPLOAD,
                f"{host.python} on {where} is {found[0]}.{found[1]}: the agent needs "
                f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer; set ansible_python_interpreter",
            )
        if probe.status != 0 or len(lines) < 3:
            detail = probe.last_stderr_line() or f"exit status {probe.status}"
            raise _Failed(
                Phase.UPLOAD, f"cannot prepare the cache dir {self.cache_dir} on {where}: {detail}"
            )
        return lines[1], lines[2].strip() == "present"

    def _upload(
        self, client: SSHClient, host: HostSpec, bundle: AgentBundle, cache: str, path: str
    ) -> None:
        """Send the agent over SFTP to a temporary name, then rename it into place.

        Raises:
            _Failed: the upload or the rename failed.
        """
        temporary = f"{cache}/.{bundle.filename}.{uuid.uuid4().hex}.tmp"
        try:
            sftp = client.open_sftp()
        except (SSHException, OSError, EOFError) as exc:
            raise _Failed(
                Phase.UPLOAD, f"cannot open SFTP on {_label(host)}: {one_line(exc)}"
            ) from None
        try:
            sftp.putfo(io.BytesIO(bundle.data), temporary, file_size=len(bundle.data))
            try:
                sftp.posix_rename(temporary, path)
            except OSError:
                # No posix-rename extension: plain rename, which fails only if a
                # concurrent run already put the same agent there.
                sftp.rename(temporary, path)
        except (SSHException, OSError, EOFError) as exc:
            # Best effort: the temporary name never collides with a real agent.
            with contextlib.suppress(SSHException, OSError, EOFError):
                sftp.remove(temporary)
            raise _Failed(
                Phase.UPLOAD, f"cannot upload the agent to {_label(host)}:{path}: {one_line(exc)}"
            ) from None
        finally:
            sftp.close()
        with self._lock:
            self._uploads += 1

    @staticmethod
    def _facts(host: HostSpec, run: _Run, timeout_s: float) -> NodeFacts:
        """The agent's facts from its exit status and stdout.

        Raises:
            _Failed: it timed out, failed or printed something that is not NodeFacts.
        """
        where = _label(host)
        if run.status is None:
            raise _Failed(
                Phase.RUN,
                f"the agent on {where} timed out: no result within {timeout_s:g}s (session closed)",
            )
        if run.status == -1:
            raise _Failed(Phase.RUN, f"the connection to {where} closed while the agent ran")
        if run.status != 0:
            raise _Failed(
                Phase.RUN,
                run.last_stderr_line()
                or f"the agent on {where} exited with status {run.status} and said nothing",
            )
        try:
            return agent_facts(run.stdout)
        except SchemaError as exc:
            raise _Failed(
                Phase.PARSE, f"facts from {where} do not fit the model: {one_line(exc)}"
            ) from None
        except ValueError as exc:
            raise _Failed(
                Phase.PARSE, f"the agent on {where} printed no valid JSON: {one_line(exc)}"
            ) from None


def _label(host: HostSpec) -> str:
    return host.name if host.address == host.name else f"{host.name} ({host.address})"


def _stderr_text(run: _Run | None) -> str:
    return run.stderr.decode("utf-8", "replace") if run is not None else ""


def _connect_error(
    exc: SSHException | EOFError | OSError | ValueError,
    endpoint: _Endpoint,
    via: str,
    timeout: float,
) -> str:
    """One line for a failed login, naming the host and the way to fix it; never a secret."""
    if isinstance(exc, SSHException):
        return _ssh_error(exc, endpoint, via, timeout)
    label = endpoint.label
    address = f"{endpoint.hostname}:{endpoint.port}"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"timed out connecting to {label} ({address}){via} after {timeout:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {label} ({address}){via}: is sshd running on that port?"
    if isinstance(exc, socket.gaierror):
        return (
            f"{endpoint.hostname} does not resolve{via} ({exc.strerror}): check ansible_host "
            "or the ssh config's HostName"
        )
    if isinstance(exc, EOFError):
        return f"{label} ({address}){via} closed the connection during the SSH handshake"
    # NoValidConnectionsError is an OSError whose own message is the useful part.
    plain = isinstance(exc, OSError) and not isinstance(exc, NoValidConnectionsError)
    detail = exc.strerror if plain and isinstance(exc, OSError) and exc.strerror else exc
    return f"cannot connect to {label} ({address}){via}: {one_line(detail)}"


def _ssh_error(exc: SSHException, endpoint: _Endpoint, via: str, timeout: float) -> str:
    """One line for an SSH-level refusal: host key, authentication, protocol."""
    label = endpoint.label
    keys = ", ".join(endpoint.key_files)
    if isinstance(exc, BadHostKeyException):
        name = endpoint.known_hosts_name
        return (
            f"host key of {label} CHANGED since it was recorded for {name}: possible "
            "man-in-the-middle; if the host was reinstalled, remove the old key with "
            f"ssh-keygen -R {quoted([name])} and re-run with --accept-new-host-keys"
        )
    if isinstance(exc, AuthenticationException):
        tried = f" (tried {keys})" if keys else " (tried ssh-agent and ~/.ssh/id_*)"
        return (
            f"authentication failed for {endpoint.user}@{label}{via}{tried}: check the key / "
            "ansible_ssh_private_key_file"
        )
    address = f"{endpoint.hostname}:{endpoint.port}"
    if isinstance(exc, ChannelException):  # only a jump host opens channels for us here
        return (
            f"{via.removeprefix(' via ')} would not open a tunnel to {label} ({address}): "
            f"{one_line(exc.text)}; check AllowTcpForwarding there and the address"
        )
    text = one_line(exc)
    if "banner" in text.lower() or text == "No existing session":
        return (
            f"no SSH greeting from {label} ({address}){via} within {timeout:g}s: "
            "is it an SSH server?"
        )
    return f"SSH to {label} ({address}){via} failed: {text}"


__all__ = ["DEFAULT_CACHE_DIR", "KnownHosts", "SshTransport", "append_known_host", "quiet_paramiko"]
