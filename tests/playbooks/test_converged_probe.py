"""The converged probe (playbooks/library/gpuready_converged.py) and its inputs digest.

Pure logic from fake dpkg/rpm output and a temporary root; one real ansible-playbook
run on localhost (record, probe, change a file, probe); and a static check that every
file the install roles write is covered by the module's managed-file globs.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.ansible_trust import trusted

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
PLAYBOOKS = REPO_ROOT / "playbooks"
ROLES_DIR = PLAYBOOKS / "roles"
INSTALL_ROLES = (
    "cuda_repository",
    "nvidia_driver",
    "cuda_toolkit",
    "cudnn",
    "fabric_manager",
    "dcgm",
    "nccl",
    "peermem",
    "container_toolkit",
)
PIN = "550.90.07"
DIGEST = "d" * 64
BOOT = "0f1e2d3c-aaaa-bbbb-cccc-000000000001"


def _load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cv = _load_module(PLAYBOOKS / "library" / "gpuready_converged.py", "gpuready_converged")
td = _load_module(PLAYBOOKS / "lookup_plugins" / "gpuready_tree_digest.py", "gpuready_tree_digest")

DPKG = (
    "libnccl2\t2.23.4-1+cuda12.4\thold ok installed\n"
    "nvidia-dkms-550-open\t550.90.07-0ubuntu1\thold ok installed\n"
    "cuda-keyring\t1.1-1\tinstall ok installed\n"
    "bash\t5.2.15-2\tinstall ok installed\n"
    "nvidia-driver-535\t535.183.06-0ubuntu1\tdeinstall ok config-files\n"
)
RPM = (
    "nvidia-driver-cuda\t3\t550.90.07\t1.el9\tx86_64\n"
    "libnccl\t0\t2.23.4\t1+cuda12.4\tx86_64\n"
    "kernel\t0\t5.14.0\t427.el9\tx86_64\n"
)
VERSIONLOCK = (
    "# Added by dnf versionlock\n"
    "nvidia-driver-cuda-3:550.90.07-1.el9.*\n"
    "!libnccl-0:2.21.5-1+cuda12.4.*\n"
)


class Host:
    """A temporary root shaped like a provisioned host, with a fake dpkg-query."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dpkg = DPKG
        self.write("/etc/apt/preferences.d/gpuready-nvidia-driver", "Pin: version 550.90.07-*\n")
        self.write("/etc/modprobe.d/gpuready-nvidia.conf", "options nvidia NVreg_X=1\n")
        self.write("/proc/sys/kernel/random/boot_id", BOOT + "\n")
        self.state = str(root / "var/lib/gpuready/provisioned.json")
        self.marker = str(root / "var/lib/gpuready/reboot-required")

    def write(self, path: str, text: str) -> None:
        """Write ``path`` (a host path) under the root."""
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    def read(self, package_manager: str = "apt") -> Any:
        """The host as the module reads it."""
        output = {"apt": self.dpkg, "dnf": RPM}[package_manager]
        return cv.read_host(
            lambda argv: output,
            package_manager,
            pattern=cv.PACKAGE_PATTERN,
            globs=list(cv.MANAGED_FILES),
            versionlock_list="/etc/dnf/plugins/versionlock.list",
            root=str(self.root),
        )

    def record(self, package_manager: str = "apt") -> None:
        """What a full run's record task writes."""
        assert cv.write_state(self.state, self.read(package_manager).to_dict(DIGEST))

    def probe(
        self, *, digest: str = DIGEST, reboot_skipped: bool = False, package_manager: str = "apt"
    ) -> tuple[bool, list[str], list[str]]:
        """The probe's answer for this host now."""
        result: tuple[bool, list[str], list[str]] = cv.probe(
            self.state,
            self.read(package_manager),
            inputs_digest=digest,
            driver_version=PIN,
            marker_path=self.marker,
            current_boot=cv.boot_id(str(self.root)),
            reboot_skipped=reboot_skipped,
        )
        return result


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


# ---------------------------------------------------------------- parsers


def test_dpkg_parser_keeps_installed_managed_packages_with_their_holds() -> None:
    found = cv.parse_dpkg(DPKG, cv.PACKAGE_PATTERN)
    assert found == {
        "libnccl2": cv.Package("2.23.4-1+cuda12.4", held=True),
        "nvidia-dkms-550-open": cv.Package("550.90.07-0ubuntu1", held=True),
        "cuda-keyring": cv.Package("1.1-1", held=False),
    }


def test_rpm_parser_reads_epochs_and_versionlock_entries() -> None:
    locks = cv.versionlock_patterns(VERSIONLOCK)
    assert locks == ["nvidia-driver-cuda-3:550.90.07-1.el9.*"]
    found = cv.parse_rpm(RPM, cv.PACKAGE_PATTERN, locks)
    assert found == {
        "nvidia-driver-cuda": cv.Package("3:550.90.07-1.el9", held=True),
        "libnccl": cv.Package("2.23.4-1+cuda12.4", held=False),
    }


def test_rpm_lock_without_epoch_glob_counts_as_held() -> None:
    found = cv.parse_rpm(RPM, cv.PACKAGE_PATTERN, ["*nvidia*-550.90.07-*"])
    assert found["nvidia-driver-cuda"].held


@pytest.mark.parametrize(
    ("os_release", "expected"),
    [
        ('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n', "apt"),
        ("ID=debian\n", "apt"),
        ('ID="rocky"\nID_LIKE="rhel centos fedora"\n', "dnf"),
        ('ID="rhel"\n', "dnf"),
    ],
)
def test_package_manager_from_os_release(os_release: str, expected: str) -> None:
    assert cv.package_manager_of(os_release) == expected


def test_loaded_driver_from_proc(host: Host) -> None:
    assert cv.loaded_driver(str(host.root)) is None
    host.write(
        "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build\n",
    )
    assert cv.loaded_driver(str(host.root)) == "550.90.07"


# ---------------------------------------------------------------- probe


def test_converged_after_record(host: Host) -> None:
    host.record()
    assert host.probe() == (True, [], [])


def test_converged_on_dnf_with_versionlock(host: Host) -> None:
    host.write("/etc/dnf/plugins/versionlock.list", VERSIONLOCK)
    host.record("dnf")
    assert host.probe(package_manager="dnf")[0] is True
    host.write("/etc/dnf/plugins/versionlock.list", "")
    converged, reasons, _ = host.probe(package_manager="dnf")
    assert not converged
    assert "nvidia-driver-cuda no longer held" in reasons
    assert "/etc/dnf/plugins/versionlock.list changed" in reasons


def test_state_file_missing(host: Host) -> None:
    assert host.probe() == (False, ["state file missing"], [])


@pytest.mark.parametrize("content", ["{not json", "[]", '{"version": 99}'])
def test_state_file_that_does_not_parse(host: Host, content: str) -> None:
    host.write("/var/lib/gpuready/provisioned.json", content)
    converged, reasons, _ = host.probe()
    assert not converged
    assert reasons[0].startswith(("state file unreadable", "state file not in format"))


def test_pin_changed(host: Host) -> None:
    host.record()
    converged, reasons, _ = host.probe(digest="e" * 64)
    assert not converged
    assert reasons == ["pin changed (roles, playbook or host variables differ)"]


def test_package_at_another_version(host: Host) -> None:
    host.record()
    host.dpkg = DPKG.replace("2.23.4-1+cuda12.4", "2.26.5-1+cuda12.4")
    assert host.probe() == (
        False,
        ["libnccl2 at 2.26.5-1+cuda12.4, recorded 2.23.4-1+cuda12.4"],
        [],
    )


def test_package_removed(host: Host) -> None:
    host.record()
    host.dpkg = DPKG.replace("libnccl2\t2.23.4-1+cuda12.4\thold ok installed\n", "")
    assert host.probe()[1] == [
        "libnccl2 not installed or no longer held, recorded 2.23.4-1+cuda12.4"
    ]


def test_hold_released(host: Host) -> None:
    host.record()
    host.dpkg = DPKG.replace(
        "libnccl2\t2.23.4-1+cuda12.4\thold", "libnccl2\t2.23.4-1+cuda12.4\tinstall"
    )
    assert host.probe()[1] == ["libnccl2 no longer held"]


def test_a_released_kernel_hold_is_seen(host: Host) -> None:
    # The driver role holds the kernel while the driver is pinned; the kernel's name is
    # outside the managed pattern, so only its hold makes the probe record it.
    held_kernel = "linux-image-6.1.0-18-amd64\t6.1.76-1\thold ok installed\n"
    host.dpkg = DPKG + held_kernel
    host.record()
    host.dpkg = DPKG + held_kernel.replace("\thold", "\tinstall")
    converged, reasons, _ = host.probe()
    assert not converged
    assert reasons == [
        "linux-image-6.1.0-18-amd64 not installed or no longer held, recorded 6.1.76-1"
    ]


def test_a_versionlocked_kernel_counts_as_held() -> None:
    found = cv.parse_rpm(RPM, cv.PACKAGE_PATTERN, ["kernel-0:5.14.0-427.el9.*"])
    assert found["kernel"] == cv.Package("5.14.0-427.el9", held=True)
    assert "kernel" not in cv.parse_rpm(RPM, cv.PACKAGE_PATTERN, [])


def test_new_managed_package(host: Host) -> None:
    host.record()
    host.dpkg = DPKG + "libnccl-dev\t2.23.4-1+cuda12.4\tinstall ok installed\n"
    assert host.probe()[1] == ["libnccl-dev 2.23.4-1+cuda12.4 installed since"]


def test_managed_file_changed(host: Host) -> None:
    host.record()
    host.write("/etc/apt/preferences.d/gpuready-nvidia-driver", "Pin: version 535.183.06-*\n")
    assert host.probe()[1] == ["/etc/apt/preferences.d/gpuready-nvidia-driver changed"]


def test_managed_file_removed(host: Host) -> None:
    host.record()
    (host.root / "etc/modprobe.d/gpuready-nvidia.conf").unlink()
    assert host.probe()[1] == ["/etc/modprobe.d/gpuready-nvidia.conf removed"]


def test_new_file_matching_the_globs(host: Host) -> None:
    host.record()
    host.write("/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list", "deb http://x /\n")
    assert host.probe()[1] == ["/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list appeared"]


def test_symlink_recorded_by_target(host: Host) -> None:
    (host.root / "etc/alternatives").mkdir(parents=True)
    os.symlink("/usr/local/cuda-12.4", host.root / "etc/alternatives/cuda")
    host.record()
    assert host.probe()[0]
    (host.root / "etc/alternatives/cuda").unlink()
    os.symlink("/usr/local/cuda-12.6", host.root / "etc/alternatives/cuda")
    assert host.probe()[1] == ["/etc/alternatives/cuda changed"]


def test_reboot_pending(host: Host) -> None:
    host.record()
    host.write("/var/lib/gpuready/reboot-required", json.dumps({"boot_id": BOOT}))
    assert host.probe()[1] == [f"reboot pending ({host.marker})"]


def test_reboot_pending_where_the_run_never_reboots_is_a_note(host: Host) -> None:
    host.record()
    host.write("/var/lib/gpuready/reboot-required", json.dumps({"boot_id": BOOT}))
    converged, reasons, notes = host.probe(reboot_skipped=True)
    assert (converged, reasons) == (True, [])
    assert len(notes) == 1
    assert "reboot still pending" in notes[0]


def test_reboot_marker_from_an_earlier_boot(host: Host) -> None:
    """The driver role runs once more after the reboot: it removes the marker, starts services."""
    host.record()
    host.write("/var/lib/gpuready/reboot-required", json.dumps({"boot_id": "older"}))
    reasons = host.probe(reboot_skipped=True)[1]
    assert reasons == [f"reboot marker {host.marker} from an earlier boot"]


def test_loaded_module_is_not_the_pin(host: Host) -> None:
    host.record()
    host.write(
        "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.183.06  Release Build\n",
    )
    assert host.probe()[1] == [f"loaded NVIDIA module 535.183.06, pinned {PIN}"]


def test_module_no_longer_loaded(host: Host) -> None:
    host.write(
        "/proc/driver/nvidia/version",
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {PIN}  Release Build\n",
    )
    host.record()
    assert host.probe()[0]
    (host.root / "proc/driver/nvidia/version").unlink()
    assert host.probe()[1] == [f"NVIDIA module {PIN} no longer loaded"]


def test_write_state_in_check_mode_writes_nothing(host: Host) -> None:
    content = host.read().to_dict(DIGEST)
    assert cv.write_state(host.state, content, check=True) is True
    assert not Path(host.state).exists()
    assert cv.write_state(host.state, content) is True
    mode = Path(host.state).stat().st_mode & 0o777
    assert mode == 0o644
    assert cv.write_state(host.state, content) is False
    assert [p.name for p in Path(host.state).parent.iterdir()] == ["provisioned.json"]


# ---------------------------------------------------------------- inputs digest


def test_inputs_digest_follows_pins_and_role_variables_not_run_ids(tmp_path: Path) -> None:
    (tmp_path / "roles" / "nccl" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "nccl" / "tasks" / "main.yml").write_text("---\n", encoding="utf-8")
    (tmp_path / "site.yml").write_text("---\n", encoding="utf-8")
    base = {"gpuready_driver_version": PIN, "nccl_version": "2.23.4", "other": 1}
    digest = td.inputs_digest(str(tmp_path), base)
    same = {
        **base,
        "other": 2,
        "provision_run_id": "x",
        "provision_serial": 2,
        "provision_slurm_drain": True,
        "provision_force": True,
    }
    assert td.inputs_digest(str(tmp_path), same) == digest
    assert (
        td.inputs_digest(str(tmp_path), {**base, "gpuready_driver_version": "550.127.05"}) != digest
    )
    assert td.inputs_digest(str(tmp_path), {**base, "nccl_version": "2.26.5"}) != digest
    assert td.inputs_digest(str(tmp_path), {**base, "provision_state_file": "/x"}) != digest
    td._TREE_CACHE.clear()
    (tmp_path / "roles" / "nccl" / "tasks" / "main.yml").write_text("--- []\n", encoding="utf-8")
    assert td.inputs_digest(str(tmp_path), base) != digest


# ---------------------------------------------------------------- managed files


_SIMPLE_VAR = re.compile(r"^\{\{\s*([a-z0-9_]+)\s*\}\}$")
_WRITERS = ("template", "copy", "lineinfile", "blockinfile", "replace")


def _tasks(items: Any) -> Iterator[dict[str, Any]]:
    for task in items or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def _written_paths(role: str) -> list[tuple[str, str]]:
    defaults: dict[str, Any] = (
        yaml.safe_load((ROLES_DIR / role / "defaults" / "main.yml").read_text("utf-8")) or {}
    )
    found = []
    for path in sorted((ROLES_DIR / role / "tasks").glob("*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text("utf-8"))):
            for writer in _WRITERS:
                args = task.get(f"ansible.builtin.{writer}") or task.get(writer)
                if not isinstance(args, dict):
                    continue
                dest = str(args.get("dest") or args.get("path"))
                match = _SIMPLE_VAR.match(dest)
                if match:
                    dest = str(defaults[match.group(1)])
                found.append((f"{path.relative_to(ROLES_DIR)}: {task['name']}", dest))
    return found


def test_every_file_the_install_roles_write_is_covered_by_the_globs() -> None:
    written = [pair for role in INSTALL_ROLES for pair in _written_paths(role)]
    assert len(written) >= 15  # the walk found the writers inside blocks too
    # nvidia_driver's reboot marker has its own rule in the probe (marker_reason).
    marker = yaml.safe_load((ROLES_DIR / "nvidia_driver" / "defaults" / "main.yml").read_text())[
        "nvidia_driver_reboot_marker"
    ]
    uncovered = [
        f"{where} -> {dest}"
        for where, dest in written
        if dest != marker and not any(fnmatch.fnmatchcase(dest, g) for g in cv.MANAGED_FILES)
    ]
    assert uncovered == []


def test_yum_repository_files_are_covered() -> None:
    """yum_repository writes /etc/yum.repos.d/<file>.repo: those names are covered too."""
    for role in ("cuda_repository", "container_toolkit"):
        for path in (ROLES_DIR / role / "tasks").glob("*.yml"):
            for task in _tasks(yaml.safe_load(path.read_text("utf-8"))):
                args = task.get("ansible.builtin.yum_repository")
                if not isinstance(args, dict):
                    continue
                name = str(args.get("file") or args["name"])
                match = _SIMPLE_VAR.match(name)
                if match:
                    defaults = yaml.safe_load(
                        (ROLES_DIR / role / "defaults" / "main.yml").read_text()
                    )
                    name = str(defaults[match.group(1)])
                dest = f"/etc/yum.repos.d/{name}.repo"
                if name == "gpuready-epel" or "epel" in name:
                    continue  # EPEL's own repository, not NVIDIA's
                assert any(fnmatch.fnmatchcase(dest, g) for g in cv.MANAGED_FILES), dest


# ---------------------------------------------------------------- real ansible on localhost


def _play(tmp_path: Path, state: Path, files: Path) -> Path:
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n"
        "  connection: local\n"
        "  gather_facts: false\n"
        "  module_defaults:\n"
        "    gpuready_converged:\n"
        "      package_manager: apt\n"
        f"      state_file: {state}\n"
        f"      files: ['{files}/*']\n"
        f"      reboot_marker: {tmp_path / 'reboot-required'}\n"
        "  tasks:\n"
        "    - name: Record\n"
        "      gpuready_converged:\n"
        "        action: record\n"
        "        inputs_digest: \"{{ lookup('gpuready_tree_digest') }}\"\n"
        "      when: do_record | default(false) | bool\n"
        "    - name: Probe\n"
        "      gpuready_converged:\n"
        "        inputs_digest: \"{{ lookup('gpuready_tree_digest') }}\"\n"
        "      register: probe\n"
        "    - name: Show\n"
        "      ansible.builtin.debug:\n"
        '        msg: "PROBE={{ probe | to_json }}"\n',
        encoding="utf-8",
    )
    return playbook


def _ansible(playbook: Path, *extra: str) -> dict[str, Any]:
    env = {
        **os.environ,
        "ANSIBLE_LIBRARY": str(PLAYBOOKS / "library"),
        "ANSIBLE_LOOKUP_PLUGINS": str(PLAYBOOKS / "lookup_plugins"),
        "ANSIBLE_NOCOLOR": "1",
    }
    proc = subprocess.run(
        [
            "ansible-playbook",
            "-i",
            "localhost,",
            str(playbook),
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    match = re.search(r'"msg": "PROBE=(.*)"\n', proc.stdout)
    assert match, proc.stdout[-4000:]
    result: dict[str, Any] = json.loads(match.group(1).encode().decode("unicode_escape"))
    return result


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query")
@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-playbook")
def test_record_then_probe_on_localhost(tmp_path: Path) -> None:
    files = tmp_path / "etc"
    files.mkdir()
    (files / "gpuready-nvidia.conf").write_text("options nvidia X=1\n", encoding="utf-8")
    state = tmp_path / "provisioned.json"
    playbook = _play(tmp_path, state, files)

    check = _ansible(playbook, "-e", "do_record=true", "--check")
    assert not state.exists()  # record in check mode writes nothing
    assert check["reasons"] == ["state file missing"]

    assert _ansible(playbook, "-e", "do_record=true")["converged"] is True
    assert json.loads(state.read_text("utf-8"))["files"]
    assert _ansible(playbook)["converged"] is True

    (files / "gpuready-nvidia.conf").write_text("options nvidia X=2\n", encoding="utf-8")
    changed = _ansible(playbook)
    assert changed["converged"] is False
    assert changed["reasons"] == [f"{files}/gpuready-nvidia.conf changed"]

    pin = _ansible(playbook, "-e", "gpuready_driver_version=550.127.05")
    assert "pin changed (roles, playbook or host variables differ)" in pin["reasons"]


# ---------------------------------------------------------------- --force


def test_force_reaches_the_play_as_provision_force() -> None:
    from click.testing import CliRunner

    from validator.cli.provision import provision
    from validator.error_tree import BadInputError
    from validator.service.provision_service import ProvisionRequest, _extravars

    assert _extravars(ProvisionRequest(inventories=("h,",), force=True))["provision_force"] is True
    assert "provision_force" not in _extravars(ProvisionRequest(inventories=("h,",)))
    with pytest.raises(BadInputError, match="--force and -e provision_force disagree"):
        _extravars(
            ProvisionRequest(inventories=("h,",), force=True, extra_vars={"provision_force": False})
        )
    assert "--force" in CliRunner().invoke(provision, ["--help"]).output


# ---------------------------------------------------------------- site.yml


def test_site_probes_before_the_drain_and_skips_only_the_install_roles() -> None:
    (play,) = yaml.safe_load((PLAYBOOKS / "site.yml").read_text("utf-8"))
    names = [task["name"] for task in play["pre_tasks"]]
    probe = names.index("Probe whether this host is still as the last full run left it")
    assert probe < names.index("Drain this batch's Slurm nodes before anything can reboot them")
    assert play["pre_tasks"][probe]["check_mode"] is False
    assert "always" in play["pre_tasks"][probe]["tags"]
    assert [entry["role"] for entry in play["roles"]] == ["gpu_preflight"]
    guard = "not (provision_converged | default(false) | bool)"
    expected_tags = {
        "cuda_repository": ["repository"],
        "nvidia_driver": ["driver"],
        "cuda_toolkit": ["toolkit", "cuda"],
        "cudnn": ["cudnn"],
        "fabric_manager": ["fabric_manager"],
        "dcgm": ["dcgm"],
        "nccl": ["nccl"],
        "peermem": ["peermem"],
        "container_toolkit": ["container_toolkit"],
        "gpu_verify": ["verify"],
    }
    includes = {t["ansible.builtin.include_role"]["name"]: t for t in play["tasks"]}
    assert list(includes) == list(expected_tags)
    for role, tags in expected_tags.items():
        task = includes[role]
        assert task["tags"] == tags, role
        assert task["ansible.builtin.include_role"]["apply"]["tags"] == tags, role
        if role == "gpu_verify":
            assert "when" not in task  # verified on every run, converged or not
        else:
            assert str(task["when"]).startswith(guard), role
    record = play["post_tasks"][-1]
    assert record["gpuready_converged"]["action"] == "record"
    assert "not ansible_check_mode" in record["when"]
    assert "ansible_skip_tags | length == 0" in record["when"]


@pytest.mark.parametrize(
    ("probe", "force", "run_tags", "converged"),
    [
        ({"converged": True}, False, ["all"], True),
        ({"converged": False}, False, ["all"], False),
        ({"converged": True}, True, ["all"], False),
        ({"converged": True}, False, ["driver"], False),
        (None, False, ["all"], False),
    ],
)
def test_converged_switch(
    probe: dict[str, bool] | None, force: bool, run_tags: list[str], converged: bool
) -> None:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    (play,) = yaml.safe_load((PLAYBOOKS / "site.yml").read_text("utf-8"))
    scope: dict[str, object] = {"provision_force": force, "ansible_run_tags": run_tags}
    if probe is not None:
        scope["provision_probe"] = probe
    templar = Templar(loader=DataLoader(), variables=scope)
    value = templar.template(trusted(play["vars"]["provision_converged"]))
    assert str(value).strip() == str(converged)
