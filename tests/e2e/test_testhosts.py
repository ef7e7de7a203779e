"""The test hosts themselves: real sshd in namespaces, reached over real SSH."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest

from tests.hosts import testhosts
from tests.hosts.testhosts import SCENARIO_PATH, TestHost, TestHostPool
from validator.node.sim.scenario import load_scenario

REPO_ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["healthy-8x-h100-sxm", "one-gpu-thermal-throttling", "row-remap-pending"]


def connect(host: TestHost, known_hosts: Path, timeout: float = 5.0) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        host.address,
        port=host.port,
        username=host.user,
        key_filename=str(host.key_file),
        timeout=timeout,
        banner_timeout=timeout,
        auth_timeout=timeout,
        look_for_keys=False,
        allow_agent=False,
    )
    return client


def ssh(client: paramiko.SSHClient, command: str) -> tuple[int, str]:
    _, out, err = client.exec_command(command, timeout=30)
    text = out.read().decode()
    rc = out.channel.recv_exit_status()
    assert rc == 0, err.read().decode()
    return rc, text


# ---------------------------------------------------------------- without hosts


def test_apt_mirror_read_from_apt_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUREADY_TESTHOSTS_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("# nothing\ndeb http://old.example/debian buster main\n")
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n\n"
        "Types: deb deb-src\n# a comment\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main contrib\n"
    )
    assert testhosts.apt_mirror("bookworm", tmp_path) == "http://mirror.example/debian"
    assert testhosts.apt_mirror("buster", tmp_path) == "http://old.example/debian"
    with pytest.raises(testhosts.HostsUnavailable, match="no apt source for trixie"):
        testhosts.apt_mirror("trixie", tmp_path)


def test_rootfs_key_follows_packages_and_suite() -> None:
    base = testhosts.rootfs_key(("python3", "openssh-server"), "bookworm")
    assert base == testhosts.rootfs_key(("openssh-server", "python3"), "bookworm")
    assert base != testhosts.rootfs_key(("python3", "openssh-server", "curl"), "bookworm")
    assert base != testhosts.rootfs_key(("python3", "openssh-server"), "trixie")


# ---------------------------------------------------------------- with hosts


def test_hosts_answer_over_ssh_with_own_name_python_and_scenario(
    test_hosts: TestHostPool, tmp_path: Path
) -> None:
    hosts = test_hosts.start(SCENARIOS)
    known = test_hosts.known_hosts(tmp_path / "known_hosts")
    assert len({h.address for h in hosts}) == 3
    for host, scenario in zip(hosts, SCENARIOS):
        client = connect(host, known)
        try:
            _, out = ssh(
                client,
                "python3 -c 'import socket, sys; print(socket.gethostname()); "
                "print(sys.version_info[0], sys.version_info[1])'",
            )
            name, version = out.splitlines()
            assert name == host.name
            assert tuple(int(part) for part in version.split()) >= (3, 9)
            _, numpy = ssh(client, "python3 -c 'import numpy; print(numpy.__name__)'")
            assert numpy.strip() == "numpy"
            with client.open_sftp() as sftp, sftp.open(SCENARIO_PATH) as remote:
                data = json.loads(remote.read().decode())
        finally:
            client.close()
        assert data["extends"] == scenario
        assert data["host"]["hostname"] == host.name
        # The agent loads it by path: the file must resolve against the built-ins.
        loaded = load_scenario(str(host.scenario_file()))
        assert loaded.data["host"]["hostname"] == host.name
        assert loaded.data["nvml"] == load_scenario(scenario).data["nvml"]


def test_known_hosts_accepts_then_rejects_a_rotated_key(
    test_hosts: TestHostPool, tmp_path: Path
) -> None:
    host = test_hosts.start(["healthy-8x-h100-sxm"])[0]
    known = test_hosts.known_hosts(tmp_path / "known_hosts")
    connect(host, known).close()
    old_line = host.host_key_line
    host.rotate_host_key()
    assert host.host_key_line != old_line
    with pytest.raises(paramiko.BadHostKeyException):
        connect(host, known)
    # A fresh known_hosts trusts the new key again.
    connect(host, test_hosts.known_hosts(tmp_path / "known_hosts2")).close()


def test_stopped_sshd_refuses_then_comes_back(test_hosts: TestHostPool, tmp_path: Path) -> None:
    host = test_hosts.start(["healthy-8x-h100-sxm"])[0]
    known = test_hosts.known_hosts(tmp_path / "known_hosts")
    host.stop_sshd()
    started = time.monotonic()
    with pytest.raises(paramiko.ssh_exception.NoValidConnectionsError) as caught:
        connect(host, known)
    assert time.monotonic() - started < 1.0
    assert "Unable to connect to port 22" in str(caught.value)
    host.start_sshd()
    client = connect(host, known)
    try:
        assert ssh(client, "hostname")[1].strip() == host.name
    finally:
        client.close()


def test_unreachable_host_fails_within_seconds(test_hosts: TestHostPool, tmp_path: Path) -> None:
    live, dead = test_hosts.start(["healthy-8x-h100-sxm", None])
    assert not dead.reachable
    assert ipaddress.IPv4Address(dead.address) in test_hosts.network
    assert dead.address != live.address
    known = test_hosts.known_hosts(tmp_path / "known_hosts")
    started = time.monotonic()
    with pytest.raises((paramiko.ssh_exception.NoValidConnectionsError, socket.timeout)):
        connect(dead, known, timeout=5.0)
    assert time.monotonic() - started < 6.0
    with pytest.raises(testhosts.HostsError, match="unreachable"):
        dead.run("true")


def test_run_inside_host_and_custom_scenario(test_hosts: TestHostPool) -> None:
    host = test_hosts.start(["healthy-8x-h100-sxm"])[0]
    rc, out, _ = host.run("hostname; cat /proc/net/route")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == host.name
    # Only the pool's /24 is routed in a host: no default route, nothing leaves the machine.
    network = socket.inet_aton(str(test_hosts.network.network_address))[::-1].hex().upper()
    assert [line.split()[:2] for line in lines[2:]] == [["eth0", network]]
    assert host.run("exit 3")[0] == 3
    host.set_scenario({"name": "custom", "extends": "gpu-fallen-off-bus"})
    rc, out, _ = host.run(f"cat {SCENARIO_PATH}")
    assert json.loads(out) == {"name": "custom", "extends": "gpu-fallen-off-bus"}


def test_inventory_and_ssh_config_work_with_real_clients(
    test_hosts: TestHostPool, tmp_path: Path
) -> None:
    hosts = test_hosts.start(["healthy-8x-h100-sxm", "no-gpu-driver", None])
    inventory = test_hosts.write_inventory(tmp_path / "hosts.ini", extra_vars={"gpuready_x": 1})
    text = inventory.read_text()
    assert f"node01 ansible_host={hosts[0].address} ansible_port=22 ansible_user=root" in text
    assert f"ansible_ssh_private_key_file={test_hosts.key_file}" in text
    assert "gpuready_simulate=/etc/gpuready/scenario.json" in text
    assert "gpuready_x=1" in text
    if shutil.which("ansible-inventory"):
        listed = subprocess.run(
            ["ansible-inventory", "-i", str(inventory), "--list"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        meta = json.loads(listed.stdout)["_meta"]["hostvars"]
        assert sorted(meta) == ["node01", "node02", "node03"]
        assert meta["node03"]["ansible_host"] == hosts[2].address
        assert meta["node02"]["ansible_python_interpreter"] == "/usr/bin/python3"
    if shutil.which("ssh"):
        config = test_hosts.ssh_config(tmp_path / "ssh_config")
        done = subprocess.run(
            ["ssh", "-F", str(config), "-o", "BatchMode=yes", "node02", "hostname"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert (done.returncode, done.stdout.strip()) == (0, "node02"), done.stderr


def _slot_state(pool: TestHostPool) -> tuple[list[str], list[str], list[str]]:
    namespaces = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout
    ours = [
        line.split()[0] for line in namespaces.splitlines() if line.startswith(f"grt{pool.slot}h")
    ]
    links = [name for name in os.listdir("/sys/class/net") if name.startswith(f"grt{pool.slot}")]
    return ours, testhosts.mounts_under(pool.run_dir), links


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_close_leaves_no_namespace_mount_or_process(test_rootfs: Path, tmp_path: Path) -> None:
    del test_rootfs
    pool = TestHostPool()
    try:
        hosts = pool.start(["healthy-8x-h100-sxm", "healthy-8x-h100-sxm", None])
        known = pool.known_hosts(tmp_path / "known_hosts")
        # A session left running must not outlive the pool either.
        client = connect(hosts[0], known)
        client.exec_command("sleep 300")
        time.sleep(0.3)
        namespaces, mounts, links = _slot_state(pool)
        assert len(namespaces) == 2
        assert len(mounts) >= 2 * 4
        assert f"grt{pool.slot}br" in links
        pids = [pid for group in testhosts.pids_in_netns(namespaces).values() for pid in group]
        assert len(pids) >= 3  # two listeners and the session's sshd at least
        client.close()
    finally:
        pool.close()
    assert _slot_state(pool) == ([], [], [])
    assert not pool.run_dir.exists()
    assert [pid for pid in pids if _alive(pid)] == []


def test_leftovers_of_a_killed_run_are_cleaned(test_rootfs: Path) -> None:
    del test_rootfs
    code = (
        "from tests.hosts.testhosts import TestHostPool\n"
        "pool = TestHostPool()\n"
        "pool.start(['healthy-8x-h100-sxm'])\n"
        "print(pool.slot, pool.run_dir, flush=True)\n"
        "import time; time.sleep(120)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        slot_text, run_dir = child.stdout.readline().split()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    slot = int(slot_text)
    assert any(name.startswith(f"grt{slot}h") for name in os.listdir("/run/netns"))
    assert testhosts.mounts_under(Path(run_dir))
    cleaned = testhosts.cleanup_stale()
    assert cleaned.get(slot) == []
    assert not any(name.startswith(f"grt{slot}h") for name in os.listdir("/run/netns"))
    assert testhosts.mounts_under(Path(run_dir)) == []
    assert not Path(run_dir).exists()


# ---------------------------------------------------------------- shapes


def test_host_shapes_write_ubuntus_release_files() -> None:
    shape = testhosts.SHAPES["ubuntu2404"]
    files = shape.release_files()
    assert 'VERSION_ID="24.04"' in files["/etc/os-release"]
    assert "VERSION_CODENAME=noble" in files["/etc/os-release"]
    assert "ID=ubuntu\nID_LIKE=debian\n" in files["/etc/os-release"]
    assert files["/usr/lib/os-release"] == files["/etc/os-release"]
    assert "DISTRIB_RELEASE=24.04" in files["/etc/lsb-release"]
    assert testhosts.SHAPES["debian12"].release_files() == {}
    with pytest.raises(testhosts.HostsError, match="unknown host shape 'rocky9'"):
        testhosts.host_shape("rocky9")


@pytest.mark.skipif(shutil.which("ansible") is None, reason="ansible is not installed")
def test_ansible_facts_over_ssh_say_ubuntu_on_a_shaped_host(
    test_hosts: TestHostPool, tmp_path: Path
) -> None:
    # One pool, two shapes, one cached Debian root filesystem under both.
    debian = test_hosts.start(["healthy-8x-h100-sxm"])[0]
    ubuntu = test_hosts.start(["healthy-8x-h100-sxm"], shape="ubuntu2404")[0]
    assert test_hosts.rootfs_for(ubuntu.shape) == test_hosts.rootfs_for(debian.shape)
    assert not (test_hosts.rootfs / "etc/lsb-release").exists()  # the cache stays Debian's
    known = test_hosts.known_hosts(tmp_path / "known_hosts")
    ssh_args = f"-o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes"
    inventory = test_hosts.write_inventory(
        tmp_path / "hosts.ini", extra_vars={"ansible_ssh_common_args": f'"{ssh_args}"'}
    )
    proc = subprocess.run(
        ["ansible", "-i", str(inventory), "all", "-m", "ansible.builtin.setup"],
        capture_output=True,
        text=True,
        timeout=180,
        # The minimal callback: "NAME | SUCCESS => {json}" per host.
        env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "minimal", "ANSIBLE_NOCOLOR": "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    facts: dict[str, dict[str, object]] = {}
    decoder = json.JSONDecoder()
    for match in re.finditer(r"^(\S+) \| SUCCESS => ", proc.stdout, re.M):
        result, _ = decoder.raw_decode(proc.stdout, match.end())
        facts[match.group(1)] = result["ansible_facts"]
    got = {
        name: (
            f["ansible_distribution"],
            f["ansible_distribution_version"],
            f["ansible_distribution_release"],
            f["ansible_os_family"],
        )
        for name, f in facts.items()
    }
    assert got[ubuntu.name] == ("Ubuntu", "24.04", "noble", "Debian"), got
    assert got[debian.name][0] == "Debian", got
    assert got[debian.name][3] == "Debian", got
    assert facts[ubuntu.name]["ansible_distribution_major_version"] == "24"
