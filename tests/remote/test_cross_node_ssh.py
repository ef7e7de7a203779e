"""The stage's steps over SSH, against the in-process paramiko servers of test_remote_ssh.

Each server stands for one host: it runs what it is asked with /bin/sh on this machine,
the stand-ins (tests/fixtures/standins) first on its PATH and its own host name in
GPUREADY_STEP_HOST. As sshd does for a command without a terminal, a closed channel
does not end the command here: a step that is still running is ended only by the
runner's kill by process id.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from paramiko import ECDSAKey

from tests.interrupting import ctrl_c_after
from tests.remote.test_remote_ssh import SshBox, _pump
from tests.standins import STANDINS
from validator.model import HostSpec, NodeFacts, NodeResult, NvmlStatus, Verdict
from validator.remote import cross_node_ssh
from validator.remote.cross_node_runner import HostPlan, LaunchError, plan_from_mapping
from validator.remote.cross_node_ssh import _KILL_RECORDED, _WITH_PID, ssh_runner, step_command
from validator.remote.ssh import SshTransport
from validator.remote.transport import quoted
from validator.service.cross_node_service import run_cross_node_stage


class StandinBox(SshBox):
    """One host: the stand-ins on PATH, its name, the fabric's map; commands outlive channels."""

    def __init__(self, home: Path, key: ECDSAKey, name: str, table: Path) -> None:
        self.name = name
        self.table = table
        self.processes: list[subprocess.Popen[bytes]] = []
        self.mute_stdout = False  # a channel whose output never comes (the step's id included)
        self.hang_on = ""  # a command naming this runs `sleep 30` instead (a host that hangs)
        super().__init__(home, key)

    def execute(self, channel: paramiko.Channel, command: str) -> None:
        path = (
            f"{STANDINS}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        )
        env = {
            "HOME": str(self.home), "PATH": path, "LANG": "C.UTF-8",
            "GPUREADY_STEP_HOST": self.name, "GPUREADY_STANDIN_MAP": str(self.table),
        }  # fmt: skip
        hangs = bool(self.hang_on) and self.hang_on in command
        process = subprocess.Popen(
            ["/bin/sh", "-c", "sleep 30" if hangs else command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=self.home,
            start_new_session=True,
        )
        self.processes.append(process)
        send = (lambda data: None) if self.mute_stdout else channel.sendall
        assert process.stdout is not None
        assert process.stderr is not None
        pumps = [
            threading.Thread(
                target=_pump,
                args=(functools.partial(os.read, process.stdout.fileno()), send),
            ),
            threading.Thread(
                target=_pump,
                args=(functools.partial(os.read, process.stderr.fileno()), channel.sendall_stderr),
            ),
        ]
        for pump in pumps:
            pump.start()
        process.wait()
        for pump in pumps:
            pump.join(5)
        if not channel.closed:
            channel.send_exit_status(process.returncode)
            channel.shutdown_write()
            channel.close()


class Fleet:
    def __init__(self, tmp_path: Path, names: list[str], table: dict[str, object]) -> None:
        key = ECDSAKey.generate()
        key_path = tmp_path / "id_ecdsa"
        key.write_private_key_file(str(key_path))
        map_path = tmp_path / "fabric.json"
        map_path.write_text(json.dumps(table))
        self.boxes = {name: StandinBox(tmp_path / name, key, name, map_path) for name in names}
        known = tmp_path / "known_hosts"
        known.write_text("".join(box.known_hosts_line() + "\n" for box in self.boxes.values()))
        self.transport = SshTransport(
            ssh_config=tmp_path / "no-ssh-config",
            known_hosts=known,
            system_known_hosts=None,
            connect_timeout_s=5.0,
        )
        self.hosts = {
            name: HostSpec(name, "127.0.0.1", port=box.port, user="root", key_file=str(key_path))
            for name, box in self.boxes.items()
        }
        # Peers reach a host by its name: the stand-in reads the server's name from the client.
        self.plan = plan_from_mapping(
            {name: {"hcas": ["mlx5_0"]} for name in names},
            duration_s=1, listen_wait_s=2.0, step_margin_s=3.0,
        )  # fmt: skip

    def stop(self) -> None:
        for box in self.boxes.values():
            box.stop()

    def nothing_left(self) -> None:
        for box in self.boxes.values():
            for process in box.processes:
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pytest.fail(f"{box.name}: a step still runs: {box.commands}")
                with pytest.raises(ProcessLookupError):
                    os.killpg(process.pid, 0)


@pytest.fixture
def fleet_of(tmp_path: Path) -> Iterator[object]:
    made: list[Fleet] = []

    def make(names: list[str], table: dict[str, object]) -> Fleet:
        made.append(Fleet(tmp_path, names, table))
        return made[-1]

    yield make
    for fleet in made:
        fleet.stop()


def test_a_healthy_pair_is_measured_with_quoted_commands(fleet_of: object) -> None:
    fleet: Fleet = fleet_of(["gpu01", "gpu02"], {"default": "healthy"})  # type: ignore[operator]
    runner, launcher = ssh_runner(fleet.transport, fleet.hosts)
    try:
        found = runner.rdma_round([("gpu01", "gpu02")], fleet.plan, time.monotonic() + 60)
    finally:
        launcher.close()
    bw, back, lat = found[("gpu01", "gpu02")]
    assert bw.completed, bw.detail
    assert back.completed, back.detail
    assert (back.server.host, back.client.host) == ("gpu02", "gpu01")  # the other way
    assert bw.bw_average_gbit_s == 392.34
    assert (bw.server.host, bw.client.host, bw.client.gpu) == ("gpu01", "gpu02", 0)
    assert lat.completed
    assert lat.lat_typical_us == 1.47
    client_argv = ["ib_write_bw", "-d", "mlx5_0", "-p", "18515", "--report_gbits", "-D", "1",
                   "--use_cuda=0", "gpu01"]  # fmt: skip
    client = next(c for c in fleet.boxes["gpu02"].commands if c.endswith(quoted(client_argv)))
    record = _record_of(client)
    assert client == step_command(client_argv, {}, record)
    assert record[0].startswith("gpuready-steps-")
    assert any(c.startswith(f"env sh -c {quoted([_WITH_PID])} gpuready-step {record[0]} ")
               and " ib_write_bw -d mlx5_0 -p 18515 " in c
               for c in fleet.boxes["gpu01"].commands)  # fmt: skip
    assert not (Path(tempfile.gettempdir()) / record[0]).exists()  # closed: its ids are gone
    fleet.nothing_left()


def test_a_dead_node_is_named_over_ssh(fleet_of: object) -> None:
    names = ["gpu01", "gpu02", "gpu03", "gpu04"]
    table = {"default": "healthy", "hosts": {"gpu04": "dead-node"}}
    fleet: Fleet = fleet_of(names, table)  # type: ignore[operator]
    runner, launcher = ssh_runner(fleet.transport, fleet.hosts)
    results = [_certified(name) for name in names]
    try:
        judged, stage = run_cross_node_stage(
            results, runner, ("rdma", "nccl"), "ndr-400-ib", fleet.plan,
            deadline=time.monotonic() + 120,
        )  # fmt: skip
    finally:
        launcher.close()
    rdma, nccl = stage.outcome("rdma"), stage.outcome("nccl")
    assert rdma is not None
    assert [named.hosts for named in rdma.unreachable] == [("gpu04",)]
    assert rdma.good == ("gpu01", "gpu02", "gpu03")
    assert nccl is not None
    assert nccl.skipped.startswith("NCCL across nodes needs Slurm or mpirun")
    verdicts = {result.hostname: result.verdict for result in judged}
    assert verdicts["gpu04"] is Verdict.NOT_CERTIFIED
    fleet.nothing_left()


def test_a_hanging_server_is_killed_by_its_pid_at_its_timeout(fleet_of: object) -> None:
    table = {"default": "healthy", "hosts": {"gpu02": "hang"}}
    fleet: Fleet = fleet_of(["gpu01", "gpu02"], table)  # type: ignore[operator]
    runner, launcher = ssh_runner(fleet.transport, fleet.hosts)
    started = time.monotonic()
    try:
        found = runner.rdma_round([("gpu02", "gpu01")], fleet.plan, time.monotonic() + 60)
    finally:
        launcher.close()
    assert time.monotonic() - started < 30
    for record in found[("gpu02", "gpu01")]:
        assert not record.completed
        if record.server.host == "gpu02":  # the hanging side as the server never listens
            assert "did not listen on port 18515 in time" in record.detail
        else:  # and as the client, it is stopped at its time limit
            assert "no result from gpu02 within its time limit" in record.detail
    assert any("gpuready-kill" in command for command in fleet.boxes["gpu02"].commands)
    fleet.nothing_left()


def test_an_unreachable_host_is_a_result_that_says_so(fleet_of: object, tmp_path: Path) -> None:
    fleet: Fleet = fleet_of(["gpu01", "gpu02"], {"default": "healthy"})  # type: ignore[operator]
    fleet.boxes["gpu02"].stop()
    hosts = dict(fleet.hosts)
    runner, launcher = ssh_runner(fleet.transport, hosts)
    try:
        found = runner.rdma_round([("gpu01", "gpu02")], fleet.plan, time.monotonic() + 30)
    finally:
        launcher.close()
    for record in found[("gpu01", "gpu02")]:
        assert not record.completed
        assert "\n" not in record.detail
        assert record.detail
    fleet.nothing_left()


def _record_of(command: str) -> tuple[str, str]:
    """The step's id file (directory, step) named in its command line."""
    found = re.search(r" gpuready-step (gpuready-steps-[0-9a-f]{16}) ([0-9]+) ", command)
    assert found is not None, command
    return found[1], found[2]


def _certified(name: str) -> NodeResult:
    facts = NodeFacts(name, source="simulate", nvml_status=NvmlStatus.OK)
    return NodeResult(name, Verdict.CERTIFIED, facts, (), sku=None, summary="alone")


def test_ctrl_c_ends_every_remote_step_by_its_pid(fleet_of: object) -> None:
    table = {"default": "hang"}
    fleet: Fleet = fleet_of(["gpu01", "gpu02", "gpu03", "gpu04"], table)  # type: ignore[operator]
    plan = dataclasses.replace(fleet.plan, listen_wait_s=60.0)
    runner, launcher = ssh_runner(fleet.transport, fleet.hosts)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt), ctrl_c_after(1.5):
            runner.rdma_round([("gpu01", "gpu02"), ("gpu03", "gpu04")], plan, started + 120)
    finally:
        launcher.close()
    assert time.monotonic() - started < 30
    for server in ("gpu01", "gpu03"):
        assert any("gpuready-kill" in command for command in fleet.boxes[server].commands)
    fleet.nothing_left()




def test_nccl_groups_go_through_mpirun_with_the_ib_only_variant(
    fleet_of: object, tmp_path: Path
) -> None:
    mpirun = STANDINS / "mpirun-for-tests"
    table = {"default": "healthy", "pairs": {"gpu03,gpu04": "slow-link"}}
    fleet: Fleet = fleet_of(["gpu01", "gpu02", "gpu03", "gpu04"], table)  # type: ignore[operator]
    runner, launcher = ssh_runner(fleet.transport, fleet.hosts, mpirun=str(mpirun))
    assert runner.nccl_unavailable() is None
    try:
        found = runner.nccl_round(
            [("gpu01", "gpu02"), ("gpu03", "gpu04")], fleet.plan, time.monotonic() + 60
        )
    finally:
        launcher.close()
    healthy = {(r.collective, r.variant): r for r in found[("gpu01", "gpu02")]}
    assert set(healthy) == {
        ("all_reduce", "default"), ("all_reduce", "ib_only"),
        ("alltoall", "default"), ("alltoall", "ib_only"),
    }  # fmt: skip
    assert healthy[("all_reduce", "ib_only")].largest_busbw_gb_s == 469.21
    assert healthy[("alltoall", "default")].largest_busbw_gb_s == 35.90
    slow = {(r.collective, r.variant): r for r in found[("gpu03", "gpu04")]}
    assert slow[("all_reduce", "ib_only")].largest_busbw_gb_s == 4.32
    commands = fleet.boxes["gpu01"].commands
    assert any(
        "-np 16 -H gpu01:8,gpu02:8 -x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1 all_reduce_perf"
        in command
        for command in commands
    )
    assert not fleet.boxes["gpu02"].commands  # the group starts on its first host
    fleet.nothing_left()


def test_a_dead_host_holds_up_no_other_host_and_fails_once_a_round(
    fleet_of: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet: Fleet = fleet_of(["gpu01"], {"default": "healthy"})  # type: ignore[operator]
    # It listens and never accepts: the TCP handshake is done, and no SSH banner ever comes.
    silent = socket.create_server(("127.0.0.1", 0))
    fleet.transport.connect_timeout_s = 2.5
    hosts = {**fleet.hosts, "dead": HostSpec("dead", "127.0.0.1", port=silent.getsockname()[1])}
    tried: list[str] = []
    connect = fleet.transport.connect

    def counted(spec: HostSpec, deadline: float) -> list[paramiko.SSHClient]:
        tried.append(spec.name)
        return connect(spec, deadline)

    monkeypatch.setattr(fleet.transport, "connect", counted)
    runner, launcher = ssh_runner(fleet.transport, hosts)
    dead, healthy = HostPlan("dead", "127.0.0.1", (), ()), fleet.plan.host("gpu01")
    failed: list[tuple[float, str]] = []

    def to_dead() -> None:
        with pytest.raises(LaunchError) as caught:
            launcher.start(dead, ["true"], {})
        failed.append((time.monotonic(), str(caught.value)))

    both = [threading.Thread(target=to_dead) for _ in range(2)]
    try:
        for thread in both:
            thread.start()
        time.sleep(0.3)  # the dead host's connect is under way
        step = launcher.start(healthy, ["echo", "up"], {})
        assert step.wait(5.0) == 0
        step.kill()
        healthy_done = time.monotonic()
        for thread in both:
            thread.join(10)
        assert len(failed) == 2
        assert healthy_done < min(when for when, _ in failed), "gpu01 waited for the dead host"
        assert tried.count("dead") == 1  # the second step waited for the first one's connect
        assert failed[0][1] == failed[1][1]
        assert "\n" not in failed[0][1]
        started = time.monotonic()
        with pytest.raises(LaunchError) as again:
            launcher.start(dead, ["true"], {})
        assert time.monotonic() - started < 0.5  # the round's failure, not a new timeout
        assert str(again.value) == failed[0][1]
        # The next round tries it again (refused now: no second wait).
        silent.close()
        runner.rdma_round([], fleet.plan, time.monotonic() + 10)
        with pytest.raises(LaunchError):
            launcher.start(dead, ["true"], {})
        assert tried.count("dead") == 2
    finally:
        launcher.close()
        silent.close()
    fleet.nothing_left()


def _running(session: int, name: str) -> bool:
    """Whether a process named ``name`` runs in the session that ``session`` leads."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            comm, rest = stat.read_text().split(" (", 1)[1].rsplit(") ", 1)
        except (OSError, IndexError, ValueError):
            continue
        fields = rest.split()
        if comm == name and fields[0] != "Z" and int(fields[3]) == session:
            return True
    return False


def test_a_step_whose_id_line_never_came_is_ended_by_its_recorded_id(fleet_of: object) -> None:
    fleet: Fleet = fleet_of(["gpu01"], {"default": "healthy"})  # type: ignore[operator]
    box = fleet.boxes["gpu01"]
    box.mute_stdout = True  # the id line never reaches us
    _, launcher = ssh_runner(fleet.transport, fleet.hosts)
    try:
        step = launcher.start(fleet.plan.host("gpu01"), ["sleep", "30"], {})
        end = time.monotonic() + 5
        while not (box.processes and _running(box.processes[0].pid, "sleep")):
            assert time.monotonic() < end, "the step did not start"
            time.sleep(0.05)
        assert step.pid is None
        started = time.monotonic()
        step.kill()
        assert time.monotonic() - started < 5
        assert step.wait(0) is not None
    finally:
        launcher.close()
    assert any("gpuready-kill" in command for command in box.commands)
    fleet.nothing_left()


def _sh(script: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp)}
    return subprocess.run(
        ["sh", "-c", script, "gpuready-test", *args],
        env=env, capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip


def test_a_step_stopped_before_it_started_never_starts(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    assert _sh(_KILL_RECORDED, tmp_path, "gpuready-steps-a", "1").returncode == 0
    started = _sh(_WITH_PID, tmp_path, "gpuready-steps-a", "1", "touch", str(ran))
    assert started.returncode == 125
    assert "stopped before it started" in started.stderr
    assert not ran.exists()
    assert (tmp_path / "gpuready-steps-a").stat().st_mode & 0o777 == 0o700


def test_a_step_ids_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "gpuready-steps-b").symlink_to(elsewhere)
    started = _sh(_WITH_PID, tmp_path, "gpuready-steps-b", "1", "true")
    assert started.returncode == 125
    assert "not a directory of our own" in started.stderr
    assert not list(elsewhere.iterdir())
    stopped = _sh(_KILL_RECORDED, tmp_path, "gpuready-steps-b", "1")
    assert not list(elsewhere.iterdir())
    assert stopped.returncode == 125


def test_closing_waits_once_for_hosts_whose_cleanup_hangs(
    fleet_of: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each step's wait used to run one after another at close: 3 hung hosts cost the
    # shared wait and then a whole wait more each, holding up the end of the run (Ctrl-C too).
    monkeypatch.setattr(cross_node_ssh, "_KILL_WAIT_S", 2.0)
    names = ["gpu01", "gpu02", "gpu03"]
    fleet: Fleet = fleet_of(names, {"default": "healthy"})  # type: ignore[operator]
    _, launcher = ssh_runner(fleet.transport, fleet.hosts)
    try:
        for name in names:
            step = launcher.start(fleet.plan.host(name), ["true"], {})
            assert step.wait(10) == 0
            step.kill()
        for box in fleet.boxes.values():
            box.hang_on = "gpuready-clean"
        started = time.monotonic()
        launcher.close()
        assert time.monotonic() - started < 2.0 * 2.5  # once (2 s), not 2 + 3 * 2 s
    finally:
        for box in fleet.boxes.values():
            for process in box.processes:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
