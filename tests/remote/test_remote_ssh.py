"""The ssh transport against real paramiko SSH servers running in this process.

Each server listens on 127.0.0.1, authenticates one public key, runs exec requests
with /bin/sh on this machine (HOME pointed at a temp dir, so the agent's cache
lands there), serves SFTP over the real filesystem and, when asked, forwards
direct-tcpip channels (a jump host). So the agent really uploads over SFTP and
really runs with this machine's Python.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import paramiko
import pytest
from paramiko import ECDSAKey, SFTPAttributes, SFTPHandle, SFTPServer, SFTPServerInterface
from paramiko.common import (
    AUTH_FAILED,
    AUTH_SUCCESSFUL,
    OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED,
    OPEN_SUCCEEDED,
)
from paramiko.hostkeys import HostKeyEntry, HostKeys
from paramiko.sftp import SFTP_OK

from validator.codec import unpack
from validator.model import HostSpec, NodeFacts, from_dict
from validator.node.sim.scenario import SCENARIO_DIR
from validator.packed import packed_facts
from validator.remote import ssh
from validator.remote.bundle import build_agent
from validator.remote.ssh import SshTransport, append_known_host
from validator.remote.transport import AgentOutcome, AgentRequest

SCENARIO = "healthy-8x-h100-sxm"


# -- the in-process SSH server ------------------------------------------------------------


class _Sftp(SFTPServerInterface):
    """SFTP straight onto this machine's filesystem (paths are absolute)."""

    def open(self, path: str, flags: int, attr: SFTPAttributes) -> Any:
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            return SFTPServer.convert_errno(exc.errno or errno.EIO)
        if flags & os.O_WRONLY:
            mode = "ab" if flags & os.O_APPEND else "wb"
        elif flags & os.O_RDWR:
            mode = "r+b"
        else:
            mode = "rb"
        handle = SFTPHandle(flags)
        stream = os.fdopen(fd, mode)
        handle.readfile = stream  # type: ignore[attr-defined]
        handle.writefile = stream  # type: ignore[attr-defined]
        return handle

    def stat(self, path: str) -> Any:
        try:
            return SFTPAttributes.from_stat(os.stat(path))
        except OSError as exc:
            return SFTPServer.convert_errno(exc.errno or errno.EIO)

    lstat = stat

    def remove(self, path: str) -> int:
        os.remove(path)
        return SFTP_OK

    def posix_rename(self, oldpath: str, newpath: str) -> int:
        os.replace(oldpath, newpath)
        return SFTP_OK

    def mkdir(self, path: str, attr: SFTPAttributes) -> int:
        os.mkdir(path)
        return SFTP_OK


def _pump(read: Any, write: Any) -> None:
    try:
        while True:
            data = read(1 << 16)
            if not data:
                break
            write(data)
    except (OSError, EOFError, paramiko.SSHException):
        pass


class SshBox:
    """One SSH server: host key, accepted client key, home dir, and what it saw."""

    def __init__(
        self,
        home: Path,
        client_key: ECDSAKey,
        *,
        forward: bool = False,
        more_host_keys: tuple[paramiko.PKey, ...] = (),
    ) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.host_key = ECDSAKey.generate()
        self.more_host_keys = more_host_keys  # offered too, as sshd offers each HostKey
        self.client_key = client_key
        self.forward = forward
        self.commands: list[str] = []
        self.forwarded: list[tuple[str, int]] = []
        self.users: list[str] = []
        self._pending: dict[int, tuple[str, int]] = {}
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        self._transports: list[paramiko.Transport] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def known_hosts_line(self, key: paramiko.PKey | None = None) -> str:
        line = HostKeyEntry([f"[127.0.0.1]:{self.port}"], key or self.host_key).to_line()
        assert line is not None
        return line

    def stop(self) -> None:
        self._stopped.set()
        for transport in self._transports:
            transport.close()
        self._listener.close()

    def _serve(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        transport = paramiko.Transport(conn)
        self._transports.append(transport)
        transport.add_server_key(self.host_key)
        for key in self.more_host_keys:
            transport.add_server_key(key)
        transport.set_subsystem_handler("sftp", SFTPServer, _Sftp)
        try:
            transport.start_server(server=_Interface(self))
        except (paramiko.SSHException, EOFError, OSError):
            return
        while transport.is_active() and not self._stopped.is_set():
            channel = transport.accept(0.2)
            if channel is not None and channel.get_id() in self._pending:
                self._tunnel(channel, self._pending.pop(channel.get_id()))

    def _tunnel(self, channel: paramiko.Channel, destination: tuple[str, int]) -> None:
        upstream = socket.create_connection(destination)
        threading.Thread(target=_pump, args=(channel.recv, upstream.sendall), daemon=True).start()
        threading.Thread(target=_pump, args=(upstream.recv, channel.sendall), daemon=True).start()

    def execute(self, channel: paramiko.Channel, command: str) -> None:
        env = {"HOME": str(self.home), "PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
        process = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=self.home,
            start_new_session=True,
        )
        assert process.stdout is not None
        assert process.stderr is not None
        pumps = [
            threading.Thread(
                target=_pump,
                args=(functools.partial(os.read, process.stdout.fileno()), channel.sendall),
            ),
            threading.Thread(
                target=_pump,
                args=(functools.partial(os.read, process.stderr.fileno()), channel.sendall_stderr),
            ),
        ]
        for pump in pumps:
            pump.start()
        while process.poll() is None:
            if channel.closed:  # the client gave up: end the command like sshd would
                os.killpg(process.pid, signal.SIGKILL)
            time.sleep(0.02)
        for pump in pumps:
            pump.join(5)
        if not channel.closed:
            channel.send_exit_status(process.returncode)
            channel.shutdown_write()
            channel.close()


class _Interface(paramiko.ServerInterface):
    def __init__(self, box: SshBox) -> None:
        self.box = box

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        self.box.users.append(username)
        if key.get_base64() == self.box.client_key.get_base64():
            return AUTH_SUCCESSFUL
        return AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return OPEN_SUCCEEDED
        return OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_direct_tcpip_request(
        self, chanid: int, origin: tuple[str, int], destination: tuple[str, int]
    ) -> int:
        if not self.box.forward:
            return OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED
        self.box.forwarded.append(destination)
        self.box._pending[chanid] = destination
        return OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        text = command.decode()
        self.box.commands.append(text)
        threading.Thread(target=self.box.execute, args=(channel, text), daemon=True).start()
        return True


# -- fixtures -----------------------------------------------------------------------------


class Phases:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def phase(self, host: str, phase: str) -> None:
        self.seen.append((host, phase))

    def names(self) -> list[str]:
        return [phase for _, phase in self.seen]


@pytest.fixture
def client_key(tmp_path: Path) -> tuple[ECDSAKey, Path]:
    key = ECDSAKey.generate()
    path = tmp_path / "id_ecdsa"
    key.write_private_key_file(str(path))
    return key, path


@pytest.fixture
def box(tmp_path: Path, client_key: tuple[ECDSAKey, Path]) -> Any:
    server = SshBox(tmp_path / "home", client_key[0])
    yield server
    server.stop()


def _known(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text("".join(lines))
    return path


def _transport(tmp_path: Path, **options: Any) -> SshTransport:
    options.setdefault("known_hosts", tmp_path / "known_hosts")
    return SshTransport(
        ssh_config=options.pop("ssh_config", tmp_path / "no-ssh-config"),
        system_known_hosts=None,
        connect_timeout_s=options.pop("connect_timeout_s", 5.0),
        **options,
    )


def _host(box: SshBox, key: Path, **fields: Any) -> HostSpec:
    values: dict[str, Any] = {
        "name": "gpu07",
        "address": "127.0.0.1",
        "port": box.port,
        "user": "root",
        "key_file": str(key),
        "python": sys.executable,
        "simulate": SCENARIO,
    }
    values.update(fields)
    return HostSpec(**values)


def _run(
    transport: SshTransport, host: HostSpec, timeout_s: float = 30.0
) -> tuple[AgentOutcome, Phases]:
    phases = Phases()
    outcome = transport.run_agent(host, AgentRequest(), timeout_s, phases)
    return outcome, phases


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _assert_one_line(outcome: AgentOutcome) -> str:
    assert outcome.facts is None
    assert outcome.error
    assert "\n" not in outcome.error
    return outcome.error


# -- tests --------------------------------------------------------------------------------


def test_facts_come_back_and_the_second_run_hits_the_cache(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())
    transport = _transport(tmp_path)
    host = _host(box, client_key[1])

    first, phases = _run(transport, host)

    assert first.error is None, first.error
    assert first.facts is not None
    assert first.facts.source == "simulate"
    assert first.facts.source_detail == SCENARIO
    assert len(first.facts.gpus) == 8
    assert first.phase == "done"
    assert phases.names() == ["connect", "upload", "run", "done"]
    assert {host for host, _ in phases.seen} == {"gpu07"}
    # The facts come packed (a tenth of the bytes), and are kept as they came.
    assert "--packed" in box.commands[-1].split()
    assert from_dict(NodeFacts, json.loads(unpack(packed_facts(first.facts)))) == first.facts
    bundle = build_agent()
    cache = box.home / ".cache" / "gpuready"
    assert (cache / bundle.filename).read_bytes() == bundle.data
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    # No temp file left; beside the zip, the directory the agent unpacks itself into.
    assert sorted(p.name for p in cache.iterdir()) == [
        bundle.filename[: -len(".pyz")],
        bundle.filename,
    ]
    assert transport.uploads == 1
    assert box.users == ["root"]

    second, phases = _run(transport, host)

    assert second.facts is not None
    assert second.facts.hostname == first.facts.hostname
    assert len(second.facts.gpus) == 8
    assert second.error is None
    assert phases.names() == ["connect", "run", "done"]
    assert transport.uploads == 1


def test_the_run_command_quotes_every_part(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())
    folder = tmp_path / "my scenarios; touch pwned; $(touch pwned2)"
    folder.mkdir()
    scenario = folder / "node a;b.json"
    scenario.write_bytes((SCENARIO_DIR / f"{SCENARIO}.json").read_bytes())

    outcome, _ = _run(_transport(tmp_path), _host(box, client_key[1], simulate=str(scenario)))

    assert outcome.error is None, outcome.error
    assert outcome.facts is not None
    assert len(outcome.facts.gpus) == 8
    assert not (box.home / "pwned").exists()
    assert not (box.home / "pwned2").exists()
    assert "'" + str(scenario) + "'" in box.commands[-1]


def test_an_unknown_host_key_is_refused_with_the_fix(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    transport = _transport(tmp_path)

    outcome, phases = _run(transport, _host(box, client_key[1]))

    error = _assert_one_line(outcome)
    assert error.startswith("host key of gpu07 (127.0.0.1) is not in ")
    assert "--accept-new-host-keys" in error
    assert outcome.phase == "connect"
    assert phases.names() == ["connect", "failed"]
    assert box.commands == []
    assert not (tmp_path / "known_hosts").exists()


def test_accept_new_records_the_key_then_plain_runs_succeed(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    known_hosts = tmp_path / "ssh" / "known_hosts"
    host = _host(box, client_key[1])

    outcome, _ = _run(
        _transport(tmp_path, known_hosts=known_hosts, accept_new_host_keys=True), host
    )

    assert outcome.error is None, outcome.error
    assert known_hosts.read_text() == box.known_hosts_line()
    assert stat.S_IMODE(known_hosts.stat().st_mode) == 0o600
    again, _ = _run(_transport(tmp_path, known_hosts=known_hosts), host)
    assert again.error is None, again.error
    assert known_hosts.read_text() == box.known_hosts_line()


def test_a_changed_host_key_is_refused_even_with_accept_new(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    old = box.known_hosts_line(ECDSAKey.generate())
    known_hosts = _known(tmp_path, old)

    outcome, _ = _run(_transport(tmp_path, accept_new_host_keys=True), _host(box, client_key[1]))

    error = _assert_one_line(outcome)
    assert error.startswith("host key of gpu07 (127.0.0.1) CHANGED")
    assert "man-in-the-middle" in error
    assert f"ssh-keygen -R '[127.0.0.1]:{box.port}'" in error
    assert outcome.phase == "connect"
    assert known_hosts.read_text() == old
    assert box.commands == []


def test_a_wrong_client_key_is_one_line_without_key_material(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())
    wrong = ECDSAKey.generate()
    wrong_path = tmp_path / "wrong_key"
    wrong.write_private_key_file(str(wrong_path))

    outcome, _ = _run(_transport(tmp_path), _host(box, wrong_path))

    error = _assert_one_line(outcome)
    assert error.startswith("authentication failed for root@gpu07 (127.0.0.1)")
    assert "ansible_ssh_private_key_file" in error
    assert outcome.phase == "connect"
    private_body = "".join(wrong_path.read_text().splitlines()[1:-1])
    for secret in (private_body[:40], private_body[-40:], wrong.get_base64()[:40]):
        assert secret not in error
        assert secret not in outcome.stderr
    assert box.commands == []


def test_connection_refused_is_one_line_and_fast(
    tmp_path: Path, client_key: tuple[ECDSAKey, Path]
) -> None:
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    host = HostSpec(name="gpu09", address="127.0.0.1", port=port, key_file=str(client_key[1]))

    started = time.monotonic()
    outcome, phases = _run(_transport(tmp_path), host)

    error = _assert_one_line(outcome)
    assert time.monotonic() - started < 3
    assert error == (
        f"connection refused by gpu09 (127.0.0.1) (127.0.0.1:{port}): is sshd running on that port?"
    )
    assert phases.names() == ["connect", "failed"]


def test_a_silent_port_ends_with_no_ssh_greeting(
    tmp_path: Path, client_key: tuple[ECDSAKey, Path]
) -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts TCP, never speaks SSH
    try:
        port = silent.getsockname()[1]
        host = HostSpec(name="gpu10", address="127.0.0.1", port=port, key_file=str(client_key[1]))
        started = time.monotonic()
        outcome, _ = _run(_transport(tmp_path, connect_timeout_s=1.0), host)
    finally:
        silent.close()

    error = _assert_one_line(outcome)
    assert time.monotonic() - started < 5
    assert error.startswith("no SSH greeting from gpu10 (127.0.0.1)")
    assert outcome.phase == "connect"


def test_an_unresolvable_name_says_so(tmp_path: Path, client_key: tuple[ECDSAKey, Path]) -> None:
    host = HostSpec(name="gpu11", address="gpu11.invalid", key_file=str(client_key[1]))

    outcome, _ = _run(_transport(tmp_path), host)

    error = _assert_one_line(outcome)
    assert error.startswith("gpu11.invalid does not resolve")


def test_the_agents_own_error_line_becomes_the_error(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())

    outcome, phases = _run(
        _transport(tmp_path), _host(box, client_key[1], simulate="no-such-scenario")
    )

    error = _assert_one_line(outcome)
    assert error.startswith("gpuready-agent: error: ")
    assert "no-such-scenario" in error
    assert outcome.phase == "run"
    assert error in outcome.stderr
    assert phases.names()[-1] == "failed"


def test_a_command_timeout_ends_in_phase_run(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())
    # The probe (-c) gets the real Python; the agent itself hangs.
    python = _script(
        tmp_path,
        "hanging-python",
        f'if [ "$1" = "-c" ]; then exec {sys.executable} "$@"; fi\nsleep 30\n',
    )

    started = time.monotonic()
    outcome, phases = _run(_transport(tmp_path), _host(box, client_key[1], python=str(python)), 3)

    error = _assert_one_line(outcome)
    assert time.monotonic() - started < 8
    assert outcome.phase == "run"
    assert "timed out" in error
    assert "3s" in error
    assert phases.names() == ["connect", "upload", "run", "failed"]


def test_output_that_is_not_node_facts_is_a_parse_error(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())
    python = _script(
        tmp_path,
        "odd-python",
        f'if [ "$1" = "-c" ]; then exec {sys.executable} "$@"; fi\n'
        """echo '{"hostname": "gpu07", "source": 7}'\n""",
    )

    outcome, _ = _run(_transport(tmp_path), _host(box, client_key[1], python=str(python)))

    error = _assert_one_line(outcome)
    assert outcome.phase == "parse"
    assert error.startswith("facts from gpu07 (127.0.0.1) do not fit the model")
    assert "NodeFacts.source" in error


def test_a_too_old_python_is_named_with_the_fix(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())
    python = _script(tmp_path, "python3.6", "echo 3.6\n")
    transport = _transport(tmp_path)

    outcome, phases = _run(transport, _host(box, client_key[1], python=str(python)))

    error = _assert_one_line(outcome)
    assert error == (
        f"{python} on gpu07 (127.0.0.1) is 3.6: the agent needs 3.9 or newer; "
        "set ansible_python_interpreter"
    )
    assert "upload" not in phases.names()
    assert transport.uploads == 0


def test_a_missing_python_is_named(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())

    outcome, _ = _run(
        _transport(tmp_path), _host(box, client_key[1], python="/nonexistent/python3")
    )

    error = _assert_one_line(outcome)
    assert error.startswith("cannot run /nonexistent/python3 on gpu07 (127.0.0.1)")
    assert error.endswith("install Python 3.9+ or set ansible_python_interpreter")


def test_proxyjump_from_the_ssh_config_tunnels_through_the_jump_host(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    jump = SshBox(tmp_path / "jump-home", client_key[0], forward=True)
    try:
        config = tmp_path / "ssh_config"
        config.write_text(
            "Host gpu12\n"
            "    HostName 127.0.0.1\n"
            f"    Port {box.port}\n"
            "    User admin\n"
            f"    ProxyJump bastion-user@127.0.0.1:{jump.port}\n"
        )
        _known(tmp_path, box.known_hosts_line(), jump.known_hosts_line())
        host = HostSpec(
            name="gpu12",
            address="gpu12",
            key_file=str(client_key[1]),
            python=sys.executable,
            simulate=SCENARIO,
        )

        outcome, _ = _run(_transport(tmp_path, ssh_config=config), host)
    finally:
        jump.stop()

    assert outcome.error is None, outcome.error
    assert outcome.facts is not None
    assert jump.forwarded == [("127.0.0.1", box.port)]
    assert jump.users == ["bastion-user"]
    assert jump.commands == []
    assert box.users == ["admin"]
    assert len(box.commands) == 2  # the probe, then the agent


def test_a_jump_host_that_refuses_to_forward_is_named(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    jump = SshBox(tmp_path / "jump-home", client_key[0], forward=False)
    try:
        config = tmp_path / "ssh_config"
        config.write_text(
            f"Host gpu13\n    HostName 127.0.0.1\n    Port {box.port}\n"
            f"    ProxyJump 127.0.0.1:{jump.port}\n"
        )
        _known(tmp_path, box.known_hosts_line(), jump.known_hosts_line())
        host = HostSpec(name="gpu13", address="gpu13", key_file=str(client_key[1]))
        outcome, _ = _run(_transport(tmp_path, ssh_config=config), host)
    finally:
        jump.stop()

    error = _assert_one_line(outcome)
    assert error.startswith("jump host 127.0.0.1 would not open a tunnel to gpu13 (127.0.0.1:")
    assert "Administratively prohibited" in error
    assert outcome.phase == "connect"
    assert box.commands == []


def test_append_known_host_keeps_what_was_there(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text("old.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDummy")  # no newline
    path.chmod(0o644)
    key = ECDSAKey.generate()

    append_known_host(path, "[gpu07]:2222", key)

    lines = path.read_text().splitlines()
    assert lines[0] == "old.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDummy"
    assert lines[1] == f"[gpu07]:2222 {key.get_name()} {key.get_base64()}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["known_hosts"]


def test_ssh_config_identity_file_and_host_key_alias_are_used(
    tmp_path: Path,
    box: SshBox,
    client_key: tuple[ECDSAKey, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "controller-home"))  # no ~/.ssh/id_* to fall back on
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host gpu14\n"
        "    HostName 127.0.0.1\n"
        f"    Port {box.port}\n"
        "    User operator\n"
        f"    IdentityFile {client_key[1]}\n"
        "    HostKeyAlias gpu14-key\n"
    )
    line = HostKeyEntry(["gpu14-key"], box.host_key).to_line()
    assert line is not None
    _known(tmp_path, line)
    host = HostSpec(name="gpu14", address="gpu14", python=sys.executable, simulate=SCENARIO)

    outcome, _ = _run(_transport(tmp_path, ssh_config=config), host)

    assert outcome.error is None, outcome.error
    assert outcome.facts is not None
    assert box.users == ["operator"]


def test_a_passphrase_protected_key_is_named_without_its_secret(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())
    locked = tmp_path / "locked_key"
    passphrase = secrets.token_hex(8)
    client_key[0].write_private_key_file(str(locked), password=passphrase)

    outcome, _ = _run(_transport(tmp_path), _host(box, locked))

    error = _assert_one_line(outcome)
    assert error == (
        f"the key file {locked} for root@gpu07 (127.0.0.1) is passphrase-protected: "
        "load it into ssh-agent (ssh-add) and leave it unset"
    )
    assert passphrase not in error
    assert box.commands == []


# -- known_hosts read once per run, and the wait on the channel ----------------------------


def test_known_hosts_is_read_once_for_every_host_of_a_run(
    tmp_path: Path,
    box: SshBox,
    client_key: tuple[ECDSAKey, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[Path] = []
    real_read = ssh._KeyIndex.read

    def counted(path: Path) -> ssh._KeyIndex:
        reads.append(path)
        return real_read(path)

    monkeypatch.setattr(ssh._KeyIndex, "read", staticmethod(counted))
    known_hosts = _known(tmp_path, box.known_hosts_line())
    system = tmp_path / "ssh_known_hosts"
    system.write_text("")
    transport = _transport(tmp_path)
    transport.system_known_hosts = system
    transport.host_keys = ssh.KnownHosts(known_hosts, system)

    outcomes = [_run(transport, _host(box, client_key[1], name=f"gpu{i}"))[0] for i in range(3)]

    assert [outcome.error for outcome in outcomes] == [None, None, None]
    assert sorted(reads) == sorted([system, known_hosts])


def test_a_hashed_known_hosts_entry_is_matched(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    name = f"[127.0.0.1]:{box.port}"
    other = HostKeyEntry([HostKeys.hash_host("gpu99")], ECDSAKey.generate()).to_line()
    line = HostKeyEntry([HostKeys.hash_host(name)], box.host_key).to_line()
    assert line is not None
    assert other is not None
    _known(tmp_path, "# comment\n", other, line)

    outcome, _ = _run(_transport(tmp_path), _host(box, client_key[1]))

    assert outcome.error is None, outcome.error


def test_a_system_known_hosts_key_wins_over_the_users(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    _known(tmp_path, box.known_hosts_line())  # the right key, in the user's file
    system = tmp_path / "ssh_known_hosts"
    system.write_text(box.known_hosts_line(ECDSAKey.generate()))  # a stale one, in the system's
    transport = SshTransport(
        ssh_config=tmp_path / "no-ssh-config",
        known_hosts=tmp_path / "known_hosts",
        system_known_hosts=system,
        connect_timeout_s=5.0,
    )

    outcome, _ = _run(transport, _host(box, client_key[1]))

    assert _assert_one_line(outcome).startswith("host key of gpu07 (127.0.0.1) CHANGED")


def test_hosts_accepting_one_new_key_at_once_record_it_once(
    tmp_path: Path,
    box: SshBox,
    client_key: tuple[ECDSAKey, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    known_hosts = tmp_path / "ssh" / "known_hosts"
    transport = _transport(tmp_path, known_hosts=known_hosts, accept_new_host_keys=True)
    start = threading.Barrier(4)
    logged_in: list[str] = []
    # All four hold the same unknown key at the same moment, each past its own lookup.
    record = transport.host_keys.record
    together = threading.Barrier(4, timeout=30)

    def record_together(name: str, key: paramiko.PKey) -> None:
        together.wait()
        record(name, key)

    monkeypatch.setattr(transport.host_keys, "record", record_together)

    # The race is in the login (the host key checked and recorded), so each thread logs
    # in and leaves: four agents run at once as well only loaded the machine, and on a
    # busy CI one lost its session to the stub server.
    def log_in(index: int) -> None:
        start.wait()
        host = _host(box, client_key[1], name=f"gpu{index}")
        clients = transport.connect(host, time.monotonic() + 30.0)
        logged_in.append(host.name)
        for client in clients:
            client.close()

    threads = [threading.Thread(target=log_in, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(logged_in) == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert known_hosts.read_text() == box.known_hosts_line()
    again, _ = _run(_transport(tmp_path, known_hosts=known_hosts), _host(box, client_key[1]))
    assert again.error is None, again.error


def _rsa_box(tmp_path: Path, client_key: tuple[ECDSAKey, Path]) -> tuple[SshBox, paramiko.RSAKey]:
    """A host with an ECDSA and an RSA host key, like sshd with both HostKeys."""
    rsa = paramiko.RSAKey.generate(2048)
    return SshBox(tmp_path / "home", client_key[0], more_host_keys=(rsa,)), rsa


def test_a_host_known_only_by_its_rsa_key_connects(
    tmp_path: Path, client_key: tuple[ECDSAKey, Path]
) -> None:
    # As ssh-keyscan -t rsa or Ansible's known_hosts module record it. Without the
    # recorded key in the client, paramiko would negotiate ECDSA and see a mismatch.
    box, rsa = _rsa_box(tmp_path, client_key)
    try:
        known_hosts = _known(tmp_path, box.known_hosts_line(rsa))

        outcome, _ = _run(
            _transport(tmp_path, accept_new_host_keys=True), _host(box, client_key[1])
        )

        assert outcome.error is None, outcome.error
        assert known_hosts.read_text() == box.known_hosts_line(rsa)  # nothing added
    finally:
        box.stop()


def test_a_changed_rsa_key_is_refused_though_another_type_is_offered(
    tmp_path: Path, client_key: tuple[ECDSAKey, Path]
) -> None:
    box, _ = _rsa_box(tmp_path, client_key)
    try:
        old = box.known_hosts_line(paramiko.RSAKey.generate(2048))
        known_hosts = _known(tmp_path, old)

        outcome, _ = _run(
            _transport(tmp_path, accept_new_host_keys=True), _host(box, client_key[1])
        )

        assert _assert_one_line(outcome).startswith("host key of gpu07 (127.0.0.1) CHANGED")
        assert known_hosts.read_text() == old
        assert box.commands == []
    finally:
        box.stop()


def test_a_known_hosts_folder_holds_no_keys(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    (tmp_path / "known_hosts").mkdir()
    (tmp_path / "known_hosts" / "x").write_text("")
    outcome, _ = _run(_transport(tmp_path), _host(box, client_key[1]))
    # A folder holds no keys, as OpenSSH treats it: the host is unknown.
    assert "is not in" in _assert_one_line(outcome)


def _client(box: SshBox, key: ECDSAKey) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.get_host_keys().add(f"[127.0.0.1]:{box.port}", box.host_key.get_name(), box.host_key)
    client.connect(
        "127.0.0.1",
        port=box.port,
        username="root",
        pkey=key,
        look_for_keys=False,
        allow_agent=False,
        timeout=5,
    )
    return client


def test_a_command_is_waited_on_not_polled(
    box: SshBox, client_key: tuple[ECDSAKey, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    looks: list[float] = []
    real_ready = paramiko.Channel.recv_ready

    def counted(channel: paramiko.Channel) -> bool:
        looks.append(time.monotonic())
        return real_ready(channel)

    monkeypatch.setattr(paramiko.Channel, "recv_ready", counted)
    client = _client(box, client_key[0])
    try:
        run = ssh._execute(client, "sleep 1; echo done; echo said >&2", time.monotonic() + 10)
    finally:
        client.close()

    assert run.status == 0
    assert run.stdout == b"done\n"
    assert run.stderr == b"said\n"
    assert len(looks) < 20  # polling every 10 ms would look about 100 times in that second


def test_a_command_past_its_deadline_returns_without_a_status(
    box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    client = _client(box, client_key[0])
    try:
        started = time.monotonic()
        run = ssh._execute(client, "echo begun; sleep 10", started + 0.5)
        waited = time.monotonic() - started
    finally:
        client.close()

    assert run.status is None
    assert run.stdout == b"begun\n"
    assert 0.4 < waited < 3


def test_an_agent_that_prints_without_end_is_cut_at_the_bound_not_held_whole(
    box: SshBox, client_key: tuple[ECDSAKey, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A hostile or broken node's endless stdout: the controller holds a bounded amount,
    # stops reading, and the host fails with one line (limit made small for the test).
    monkeypatch.setattr(ssh, "AGENT_OUTPUT_LIMIT", 1 << 20)
    monkeypatch.setattr("validator.packed.AGENT_OUTPUT_LIMIT", 1 << 20)
    client = _client(box, client_key[0])
    try:
        started = time.monotonic()
        run = ssh._execute(client, "yes gpuready", started + 60)
        waited = time.monotonic() - started
    finally:
        client.close()
    assert (1 << 20) < len(run.stdout) <= (1 << 20) + (1 << 16)
    assert waited < 30
    with pytest.raises(ssh._Failed, match="1 MiB of output: no agent prints that much"):
        ssh.SshTransport._facts(HostSpec(name="n1", address="n1"), run, 60)


def _client_transports() -> list[paramiko.Transport]:
    """This process's client-side paramiko threads that are still running (not the box's)."""
    return [
        thread
        for thread in threading.enumerate()
        if isinstance(thread, paramiko.Transport) and not thread.server_mode
    ]


class _TimedPhases(Phases):
    """Phases, with when each was first entered."""

    def __init__(self) -> None:
        super().__init__()
        self.at: dict[str, float] = {}

    def phase(self, host: str, phase: str) -> None:
        super().phase(host, phase)
        self.at.setdefault(phase, time.monotonic())


def test_a_host_whose_agent_runs_long_wakes_no_thread_while_it_waits(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # paramiko's transport thread read its socket with a 0.1 s timeout, and ran its
    # keepalive check each time it passed: ten wake-ups a second for every host whose
    # agent is busy, which cost the controller about as much CPU as the handshakes.
    wakes: list[float] = []
    real_check = paramiko.packet.Packetizer._check_keepalive

    def counted(packetizer: paramiko.packet.Packetizer) -> None:
        thread = threading.current_thread()
        if isinstance(thread, paramiko.Transport) and not thread.server_mode:
            wakes.append(time.monotonic())
        real_check(packetizer)

    monkeypatch.setattr(paramiko.packet.Packetizer, "_check_keepalive", counted)
    _known(tmp_path, box.known_hosts_line())
    python = _script(  # the agent takes 1.5 s, as a busy host's would; the probe does not
        tmp_path, "slow-python", f'[ "$1" = "-c" ] || sleep 1.5\nexec {sys.executable} "$@"\n'
    )

    phases = _TimedPhases()

    outcome = _transport(tmp_path).run_agent(
        _host(box, client_key[1], python=str(python)), AgentRequest(), 30.0, phases
    )

    assert outcome.error is None, outcome.error
    assert outcome.facts is not None
    # Counted from the agent's start: a handshake slowed by a busy machine may still
    # wake on paramiko's own timing.
    started = phases.at["run"]
    assert len([when for when in wakes if when > started]) <= 1  # at 0.1 s, about 15


def test_closing_a_connection_ends_its_thread_at_once(
    tmp_path: Path, box: SshBox, client_key: tuple[ECDSAKey, Path]
) -> None:
    # The thread now looks at its socket only every few seconds; a close shuts the
    # socket down, so that the thread sees its end then, not seconds later.
    _known(tmp_path, box.known_hosts_line())
    before = set(_client_transports())

    outcome, _ = _run(_transport(tmp_path), _host(box, client_key[1]))
    closed = time.monotonic()
    while set(_client_transports()) - before and time.monotonic() - closed < 4:
        time.sleep(0.01)
    lingered = time.monotonic() - closed

    assert outcome.error is None, outcome.error
    assert not set(_client_transports()) - before
    assert lingered < 2  # without the shutdown: up to ssh._IDLE_CHECK_S (5 s)
