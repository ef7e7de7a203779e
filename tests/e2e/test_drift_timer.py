"""The scheduled drift check without Slurm, end to end: playbooks/drift-timer.yml on a test host.

The test host (tests/hosts) gets this checkout's gpuready at the same absolute paths
as here: the repository (the editable install points into it), the virtual
environment and the Python installation the environment's interpreter links to,
each bind-mounted read-only into the host's root. sshd is restarted afterwards: the
machine's mounts are private, so a running sshd keeps the mount namespace it was
started with and its sessions would not see them. The inventory sets the
playbook's switches in ``group_vars`` as a site would: the units only written
(``drift_timer_manage_services: false``: the hosts run no systemd), gpuready where
the bind mounts put it, and ``--simulate`` the host's scenario file (its GPUs).

With the real ``ansible-playbook`` over SSH, the tests show that:

1. check mode on a bare host writes nothing; a run installs the units; a second run
   and check mode on the converged host change nothing;
2. the unit files, as written into the host's root, pass ``systemd-analyze verify
   --root=<the host's root>`` with nothing printed, which resolves ExecStart's
   executable inside the host (systemd's own units, which every systemd host has,
   are copied in beside them: the test hosts have no systemd); copies broken on
   purpose (a misspelt key, a misspelt executable, an executable only this machine
   has, a bad calendar) fail the same check;
3. the service's ExecStart, parsed from the unit file, run by hand inside the host
   in a service's bare environment: exit 3 and ``never_certified`` before any
   certificate, 0 and ``ok`` once the node is certified into the unit's ``--db``, 1
   (a success status of the unit: drift found) and ``drift.power_limit`` once a
   GPU's power limit is capped; the textfile is read back each time with
   prometheus_client's own parser, and no run writes where the unit's sandbox
   (ProtectSystem=full, ProtectHome=read-only) would refuse it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.hosts.testhosts import SCENARIO_PATH, TestHost, TestHostPool
from validator.model import DRIFT_CHECKS

pytestmark = pytest.mark.hosts

REPO_ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO_ROOT / "playbooks" / "drift-timer.yml"
# The gpuready of the Python running these tests: its environment's entry point.
GPUREADY = Path(sys.prefix) / "bin" / "gpuready"
UNIT_DIR = "/etc/systemd/system"
SERVICE = "gpuready-drift.service"
TIMER = "gpuready-drift.timer"
# What systemd gives a system service without User=: PATH and the locale, no HOME.
SERVICE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "LANG": "C.UTF-8"}  # fmt: skip
# Read-only for the service: ProtectSystem=full (/usr, /boot, /efi, /etc) and
# ProtectHome=read-only (/home, /root, /run/user).
SANDBOX_READ_ONLY = ("usr", "boot", "efi", "etc", "home", "root", "run/user")
_RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M
)


# ---------------------------------------------------------------- gpuready inside the host


def _trees_to_bind() -> list[Path]:
    """The directories gpuready needs at the same paths inside the host, outermost only."""
    interpreter = Path(os.path.realpath(sys.executable))
    candidates = {
        REPO_ROOT,
        Path(sys.prefix),
        # The venv's python is a link to the base installation, by its literal path.
        Path(sys.base_prefix),
        interpreter.parents[1],
    }
    trees: list[Path] = []
    for tree in sorted(candidates, key=lambda p: len(p.parts)):
        if not any(tree.is_relative_to(outer) for outer in trees):
            trees.append(tree)
    # Never over the host's own system directories (a venv of /usr/bin/python3 would).
    shallow = [tree for tree in trees if len(tree.parts) < 3]
    if shallow:
        pytest.fail(
            f"cannot bind {shallow} into a test host: run the tests from a virtual "
            "environment of a Python installed outside /usr (pyenv's, as CI does)"
        )
    return trees


def _umount(target: Path) -> None:
    if subprocess.run(["umount", str(target)], capture_output=True, check=False).returncode:
        # Busy (a process still in it): detach; the pool's teardown kills what holds it.
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


@dataclass
class DriftSite:
    """One test host with gpuready on it, and its inventory for the playbook."""

    host: TestHost
    inventory: Path
    env: Mapping[str, str]

    def playbook(self, *extra: str, check: bool = False) -> Playbook:
        """Run playbooks/drift-timer.yml against the host."""
        argv = [_tool("ansible-playbook"), "-i", str(self.inventory), str(PLAYBOOK)]
        argv += ["--check", "--diff"] if check else []
        proc = subprocess.run(
            [*argv, *extra],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env=dict(self.env),
            timeout=300,
            check=False,
        )
        recap = {
            m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)),
                         "unreachable": int(m.group(4)), "failed": int(m.group(5))}
            for m in _RECAP.finditer(proc.stdout)
        }  # fmt: skip
        return Playbook(proc.returncode, recap, proc.stdout + proc.stderr)

    def unit(self, name: str) -> Path:
        """A unit file the playbook wrote, seen from this machine."""
        return self.host.root / UNIT_DIR.lstrip("/") / name


@dataclass(frozen=True)
class Playbook:
    """One ansible-playbook run: exit status, recap of the host, what it printed."""

    rc: int
    recap: dict[str, dict[str, int]]
    output: str

    def changed(self, host: TestHost) -> int:
        """The host's changed count (fails the test when the recap lacks the host)."""
        assert host.name in self.recap, self.output[-3000:]
        return self.recap[host.name]["changed"]


def _tool(name: str) -> str:
    """A command from the running environment, else from PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


@pytest.fixture
def site(test_hosts: TestHostPool, tmp_path: Path) -> Iterator[DriftSite]:
    """A healthy 8-GPU test host with this checkout's gpuready, and its inventory."""
    if not GPUREADY.is_file():
        pytest.fail(f"{GPUREADY} is missing: install the checkout (pip install -e .) first")
    (host,) = test_hosts.start(["healthy-8x-h100-sxm"])
    mounted: list[Path] = []
    try:
        for tree in _trees_to_bind():
            target = host.root / str(tree).lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["mount", "--bind", "-o", "ro", str(tree.resolve()), str(target)],
                check=True,
                capture_output=True,
            )
            mounted.append(target)
        # Read-only: nothing run in the host can touch this checkout.
        rc, _, _ = host.run(shlex.join(["test", "-w", str(REPO_ROOT)]))
        assert rc != 0, f"{REPO_ROOT} is writable inside the host"
        host.stop_sshd()
        host.start_sshd()

        known_hosts = test_hosts.known_hosts(tmp_path / "known_hosts")
        ssh_args = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
        inventory_dir = tmp_path / "inventory"
        (inventory_dir / "group_vars").mkdir(parents=True)
        # Where a site sets them: the inventory's group_vars, not -e on each run.
        switches = {
            "drift_timer_manage_services": False,
            "gpuready_agent_enabled": False,  # the checkout's gpuready is bound in
            "drift_timer_gpuready": str(GPUREADY),
            "drift_timer_extra_args": ["--simulate", SCENARIO_PATH],
        }
        (inventory_dir / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump(switches))
        inventory = test_hosts.write_inventory(
            inventory_dir / "hosts.ini", extra_vars={"ansible_ssh_common_args": f'"{ssh_args}"'}
        )
        env = {
            **os.environ,
            "ANSIBLE_NOCOLOR": "1",
            # Modules sent over the SSH session itself: half the round trips.
            "ANSIBLE_PIPELINING": "1",
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp"),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        }
        yield DriftSite(host, inventory, env)
    finally:
        host.stop_sshd()  # nothing may hold the mounts
        for target in reversed(mounted):
            _umount(target)


# ---------------------------------------------------------------- unit files


def unit_settings(text: str) -> dict[tuple[str, str], list[str]]:
    """(section, key) -> values, in file order, of a systemd unit file."""
    settings: dict[tuple[str, str], list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        assert not line.endswith("\\"), f"continued lines are not read here: {line!r}"
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, _, value = line.partition("=")
        settings.setdefault((section, key.strip()), []).append(value.strip())
    return settings


def exec_start(unit: Path) -> list[str]:
    """The service's one ExecStart as argv, as systemd splits it."""
    (command,) = unit_settings(unit.read_text())[("Service", "ExecStart")]
    # shlex splits as systemd does only without systemd's own expansions; refuse them.
    assert command.startswith("/"), f"ExecStart has a prefix or a relative path: {command}"
    unescaped = command.replace("%%", "")
    assert "%" not in unescaped, f"ExecStart has a specifier systemd would expand: {command}"
    assert "$" not in command, f"ExecStart has a variable systemd would expand: {command}"
    assert "\\" not in command, f"ExecStart has an escape systemd would decode: {command}"
    return shlex.split(command.replace("%%", "%"))


def option(argv: list[str], name: str) -> str:
    """The value of ``name VALUE`` in argv."""
    assert argv.count(name) == 1, f"{name} is not given exactly once in {argv}"
    return argv[argv.index(name) + 1]


def success_statuses(unit: Path) -> set[int]:
    """The exit statuses systemd counts as the service's success."""
    statuses = {0}
    for value in unit_settings(unit.read_text()).get(("Service", "SuccessExitStatus"), []):
        statuses |= {int(word) for word in value.split() if word.isdigit()}
    return statuses


def install_systemd_units(host: TestHost) -> None:
    """This machine's systemd units (sysinit.target, timers.target...) into the host's root.

    What every systemd host has and the test hosts lack; the host's own units are kept.
    They come from the same systemd as the systemd-analyze that checks against them.
    """
    source = Path("/usr/lib/systemd/system")
    if not (source / "sysinit.target").is_file():
        pytest.skip(f"{source} has no sysinit.target: systemd is not installed here")
    target = host.root / "usr/lib/systemd/system"

    def copy_new(src: str, dst: str) -> None:
        if not os.path.lexists(dst):
            shutil.copy2(src, dst, follow_symlinks=False)

    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True, copy_function=copy_new)


def systemd_verify(root: Path, *units: str) -> str:
    """What ``systemd-analyze verify --root=ROOT`` says of the units; "" when they pass.

    A unit passes when the exit status is 0 and nothing is printed: systemd-analyze
    exits 0 on a misspelt key (it warns "Unknown key ... ignoring" and drops it).
    """
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed on this machine")
    proc = subprocess.run(
        [analyze, "verify", f"--root={root}", "--man=no", *units],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    said = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        return f"exit {proc.returncode}: {said}"
    return said


# ---------------------------------------------------------------- the textfile


def upper_files(host: TestHost) -> dict[str, tuple[int, int]]:
    """Every file the host's overlay holds of its own: path -> (mtime ns, size)."""
    upper = host.host_dir / "upper"
    found: dict[str, tuple[int, int]] = {}
    for path in upper.rglob("*"):
        if path.is_file() or path.is_symlink():
            info = path.lstat()
            found["/" + str(path.relative_to(upper))] = (info.st_mtime_ns, info.st_size)
    return found


@dataclass(frozen=True)
class ServiceRun:
    """ExecStart run once by hand in the host: its exit status and the textfile after it."""

    rc: int
    output: str
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]
    mode: int
    started: float
    finished: float

    def value(self, name: str, **labels: str) -> float:
        """One sample's value (fails the test when the textfile lacks it)."""
        key = (name, frozenset(labels.items()))
        assert key in self.samples, f"no {name}{labels} in the textfile: {sorted(self.samples)}"
        return self.samples[key]

    def statuses(self, host: str) -> dict[str, float]:
        """gpuready_drift_status of the host: status -> 0/1."""
        return {
            dict(labels)["status"]: value
            for (name, labels), value in self.samples.items()
            if name == "gpuready_drift_status" and dict(labels)["host"] == host
        }

    def findings(self, host: str) -> dict[str, float]:
        """gpuready_drift_findings of the host: check -> count."""
        return {
            dict(labels)["check"]: value
            for (name, labels), value in self.samples.items()
            if name == "gpuready_drift_findings" and dict(labels)["host"] == host
        }


def run_service(host: TestHost, argv: list[str]) -> ServiceRun:
    """Run the unit's ExecStart once inside the host as systemd would, and read the textfile.

    From /, in a service's environment; afterwards nothing may have been written
    where the unit's sandbox makes the filesystem read-only.
    """
    prom = option(argv, "--prom-file")
    before = upper_files(host)
    env = [f"{key}={value}" for key, value in SERVICE_ENV.items()]
    started = time.time()
    rc, out, err = host.run(shlex.join(["cd", "/"]) + " && " + shlex.join(
        ["exec", "env", "-i", *env, *argv]
    ), timeout=120)  # fmt: skip
    finished = time.time()
    after = upper_files(host)
    written = sorted(path for path, stamp in after.items() if before.get(path) != stamp)
    refused = [
        path
        for path in written
        if any(path == f"/{d}" or path.startswith(f"/{d}/") for d in SANDBOX_READ_ONLY)
    ]
    assert refused == [], f"the unit's sandbox would refuse these writes: {refused}"
    target = host.root / prom.lstrip("/")
    assert target.is_file(), f"exit {rc}, no textfile at {prom}: {out}{err}"
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(target.read_text())
        for sample in family.samples
    }
    return ServiceRun(rc, out + err, samples, target.stat().st_mode & 0o777, started, finished)


# ---------------------------------------------------------------- tests


def test_check_mode_install_and_second_run_change_nothing(site: DriftSite) -> None:
    host = site.host
    dry = site.playbook(check=True)
    assert dry.rc == 0, dry.output[-3000:]
    assert dry.changed(host) > 0  # it says what it would do ...
    assert not site.unit(SERVICE).exists()  # ... and does none of it
    assert not site.unit(TIMER).exists()
    assert not (host.root / "var/lib/gpuready").exists()
    assert not (host.root / "var/lib/node_exporter").exists()

    first = site.playbook()
    assert first.rc == 0, first.output[-3000:]
    assert first.changed(host) > 0
    assert site.unit(SERVICE).is_file()
    assert site.unit(TIMER).is_file()
    assert (site.unit(SERVICE).stat().st_mode & 0o777) == 0o644
    db_dir = host.root / "var/lib/gpuready"
    assert (db_dir.stat().st_mode & 0o777) == 0o750

    again = site.playbook()
    assert again.rc == 0, again.output[-3000:]
    assert again.changed(host) == 0, again.output[-3000:]

    converged = site.playbook(check=True)
    assert converged.rc == 0, converged.output[-3000:]
    assert converged.changed(host) == 0, converged.output[-3000:]


def test_units_pass_systemd_analyze_verify_and_broken_copies_fail(site: DriftSite) -> None:
    host = site.host
    run = site.playbook("-e", "drift_timer_schedule=*:0/15")
    assert run.rc == 0, run.output[-3000:]
    service, timer = site.unit(SERVICE), site.unit(TIMER)
    assert unit_settings(timer.read_text())[("Timer", "OnCalendar")] == ["*:0/15"]
    assert exec_start(service)[0] == str(GPUREADY)
    install_systemd_units(host)
    units = (f"{UNIT_DIR}/{SERVICE}", f"{UNIT_DIR}/{TIMER}")
    assert systemd_verify(host.root, *units) == ""

    # Each broken copy, put where the unit is, must fail the very same check.
    here_only = shutil.which("systemd-analyze")
    assert here_only is not None
    assert not (host.root / here_only.lstrip("/")).exists()
    good = {path: path.read_text() for path in (service, timer)}
    breakages = [
        (service, "ExecStart=", "ExecStrat="),
        (service, "Nice=", "Nicee="),  # only warned about: caught by "nothing printed"
        (service, f"{GPUREADY} ", f"{GPUREADY.with_name('gpuredy')} "),
        (service, f"{GPUREADY} ", f"{here_only} "),  # exists here, not in the host
        (timer, "OnCalendar=*:0/15", "OnCalendar=*:0/15x"),
    ]
    try:
        for path, old, new in breakages:
            assert old in good[path], f"{old!r} is not in {path.name}"
            path.write_text(good[path].replace(old, new, 1))
            said = systemd_verify(host.root, *units)
            assert said != "", f"{path.name} with {new!r} for {old!r} passed"
            path.write_text(good[path])
    finally:
        for path, text in good.items():
            path.write_text(text)
    assert systemd_verify(host.root, *units) == ""


def test_exec_start_writes_the_textfile_and_reports_drift(site: DriftSite) -> None:
    host = site.host
    run = site.playbook()
    assert run.rc == 0, run.output[-3000:]
    service = site.unit(SERVICE)
    argv = exec_start(service)
    succeeded = success_statuses(service)
    db = option(argv, "--db")

    never = run_service(host, argv)
    # The unit fails: nothing can be judged without a certificate.
    assert never.rc == 3, never.output
    assert 3 not in succeeded
    assert never.statuses(host.name) == {
        "ok": 0.0, "drift": 0.0, "unknown": 0.0, "never_certified": 1.0, "not_certified": 0.0
    }  # fmt: skip

    # The node certified into the unit's database, as the playbook's header says.
    rc, out, err = host.run(
        shlex.join([argv[0], "certify", "--simulate", SCENARIO_PATH, "--db", db, "--burn", "1s"]),
        timeout=120,
    )
    assert rc == 0, out + err

    clean = run_service(host, argv)
    assert clean.rc == 0, clean.output
    assert clean.rc in succeeded
    assert clean.mode == 0o644  # node_exporter reads it as its own user
    assert clean.value("gpuready_certified", host=host.name) == 1.0
    assert clean.statuses(host.name) == {
        "ok": 1.0, "drift": 0.0, "unknown": 0.0, "never_certified": 0.0, "not_certified": 0.0
    }  # fmt: skip
    assert clean.findings(host.name) == dict.fromkeys(DRIFT_CHECKS, 0.0)
    checked = clean.value("gpuready_last_check_timestamp_seconds", host=host.name)
    assert clean.started - 1 <= checked <= clean.finished + 1

    host.set_scenario("one-gpu-power-capped")  # someone ran nvidia-smi -pl 500 on GPU 3
    drifted = run_service(host, argv)
    # 1 is "drift found": a success status of the unit, the textfile carries the drift.
    assert drifted.rc == 1, drifted.output
    assert drifted.rc in succeeded
    assert drifted.value("gpuready_certified", host=host.name) == 0.0
    assert drifted.statuses(host.name) == {
        "ok": 0.0, "drift": 1.0, "unknown": 0.0, "never_certified": 0.0, "not_certified": 0.0
    }  # fmt: skip
    assert drifted.findings(host.name) == {
        **dict.fromkeys(DRIFT_CHECKS, 0.0), "drift.power_limit": 1.0
    }  # fmt: skip
    later = drifted.value("gpuready_last_check_timestamp_seconds", host=host.name)
    assert later > checked
