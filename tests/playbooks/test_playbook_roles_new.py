"""Static checks of the dcgm, nccl and peermem roles and of how site.yml includes them.

The version strings the roles hand to apt and dnf are rendered with Ansible's own Templar
from the roles' defaults and vars, for both package managers, and the fact-building
expressions of their probes are rendered over recorded-shaped probe output (package facts,
``apt-mark showhold``, ``dnf versionlock list``). The peermem role, which needs no package
repository, runs for real on localhost against a fake sysfs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible_trust import is_true, trusted
from tests.conftest import REPO_ROOT

PLAYBOOKS = REPO_ROOT / "playbooks"
ROLES_DIR = PLAYBOOKS / "roles"
GROUP_VARS = REPO_ROOT / "inventory" / "group_vars" / "all.yml"
NEW_ROLES = ("dcgm", "nccl", "peermem")
# The optional roles site.yml includes dynamically, with the default of each switch.
OPTIONAL: dict[str, tuple[str, bool | str]] = {
    "dcgm": ("dcgm_enabled", True),
    "nccl": ("nccl_enabled", True),
    "peermem": ("peermem_enabled", "auto"),
    "container_toolkit": ("container_toolkit_enabled", False),
}
_BLOCK_KEYS = ("block", "rescue", "always")
_COMMAND = "ansible.builtin.command"


def _load(path: Path) -> Any:
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _walk(tasks: list[dict[str, Any]] | None) -> Iterator[dict[str, Any]]:
    for task in tasks or []:
        yield task
        for key in _BLOCK_KEYS:
            yield from _walk(task.get(key))


def _role_tasks(role: str) -> list[tuple[str, dict[str, Any]]]:
    files = sorted((ROLES_DIR / role / "tasks").glob("*.yml"))
    files += sorted((ROLES_DIR / role / "handlers").glob("*.yml"))
    assert files, role
    return [
        (f"{path.relative_to(ROLES_DIR)}", task) for path in files for task in _walk(_load(path))
    ]


def _task(role: str, file: str, name: str) -> dict[str, Any]:
    for task in _walk(_load(ROLES_DIR / role / "tasks" / file)):
        if task.get("name") == name:
            return task
    raise AssertionError(f"{role}/tasks/{file}: no task {name!r}")


# ---------------------------------------------------------------- structure and style


@pytest.mark.parametrize("role", NEW_ROLES)
def test_role_has_the_house_layout(role: str) -> None:
    for part in ("tasks/main.yml", "defaults/main.yml", "meta/main.yml", "README.md"):
        assert (ROLES_DIR / role / part).is_file(), f"{role}/{part}"
    assert _load(ROLES_DIR / role / "meta" / "main.yml")["galaxy_info"]["role_name"] == role


@pytest.mark.parametrize("role", NEW_ROLES)
def test_defaults_and_vars_carry_the_role_prefix(role: str) -> None:
    for kind in ("defaults", "vars"):
        path = ROLES_DIR / role / kind / "main.yml"
        if not path.exists():
            continue
        names = list(_load(path) or {})
        assert names, path
        assert [n for n in names if not n.startswith(role + "_")] == [], path


@pytest.mark.parametrize("role", NEW_ROLES)
def test_every_task_is_named_and_its_variables_prefixed(role: str) -> None:
    for label, task in _role_tasks(role):
        assert task.get("name"), f"{label}: unnamed task"
        names = [task["register"]] if "register" in task else []
        names += list(task.get("ansible.builtin.set_fact", {}) or {})
        names += list(task.get("vars", {}) or {})
        assert [n for n in names if not n.startswith(role + "_")] == [], label


@pytest.mark.parametrize("role", NEW_ROLES)
def test_only_builtin_modules_and_commands_are_safe_probes(role: str) -> None:
    from ansible.playbook.task import Task

    keywords = set(Task.fattributes) | set(_BLOCK_KEYS) | {"listen"}
    commands = 0
    for label, task in _role_tasks(role):
        assert "ignore_errors" not in task, label
        if any(key in task for key in _BLOCK_KEYS):
            continue
        (module,) = [key for key in task if key not in keywords]
        assert module.startswith("ansible.builtin."), f"{label}: {module}"
        assert module != "ansible.builtin.shell", label
        if module != _COMMAND:
            continue
        commands += 1
        assert "argv" in task[module], f"{label}: give the command as argv"
        assert "changed_when" in task, f"{label}: say when it changes something"
        if task["changed_when"] is False:
            # A probe steers the later tasks: it must run in check mode too.
            assert task.get("check_mode") is False, label
    assert commands > 0


def test_probes_are_the_read_only_commands() -> None:
    """The package and lock listings are probes; the holds and locks are changes."""
    probes = {
        ("dcgm", "debian.yml", "List the held packages"),
        ("dcgm", "redhat.yml", "List the installed DCGM packages"),
        ("dcgm", "redhat.yml", "List the version locks"),
        ("nccl", "debian.yml", "List the held packages"),
        ("nccl", "redhat.yml", "List the version locks"),
    }
    for role, file, name in probes:
        task = _task(role, file, name)
        assert task["changed_when"] is False, name
        assert task["check_mode"] is False, name
    for role, file, name in [
        ("dcgm", "debian.yml", "Hold the DCGM packages"),
        ("dcgm", "redhat.yml", "Lock the DCGM packages"),
        ("nccl", "debian.yml", "Hold the NCCL packages"),
        ("nccl", "redhat.yml", "Lock the NCCL packages"),
    ]:
        assert _task(role, file, name)["changed_when"] is not False, name


# ---------------------------------------------------------------- pins


def test_pins_sit_in_group_vars_and_match_the_role_defaults() -> None:
    pins = _load(GROUP_VARS)
    assert pins["dcgm_version"] == "4.4.1"
    assert pins["nccl_version"] == "2.23.4"
    assert _load(ROLES_DIR / "dcgm" / "defaults" / "main.yml")["dcgm_version"] == "4.4.1"
    assert _load(ROLES_DIR / "nccl" / "defaults" / "main.yml")["nccl_version"] == "2.23.4"


def test_new_pins_are_not_certify_policy_keys() -> None:
    """Certify reads no DCGM or NCCL version: a gpuready_ name would be refused by it."""
    from validator.error_tree import PolicyError
    from validator.judge.policy import policy_from_mapping

    pins = _load(GROUP_VARS)
    assert not {"gpuready_dcgm_version", "gpuready_nccl_version"} & set(pins)
    with pytest.raises(PolicyError, match="dcgm_version"):
        policy_from_mapping({"dcgm_version": "4.4.1"}, "group_vars")


def test_example_inventory_still_loads_through_the_certify_reader() -> None:
    from validator.ansible_inventory import load_hosts

    hosts = load_hosts([str(REPO_ROOT / "inventory" / "hosts.example.ini")])
    assert hosts
    assert all("dcgm_version" not in host.vars for host in hosts)


# ---------------------------------------------------------------- rendered values


def _facts(family: str) -> dict[str, str]:
    return {"os_family": family, "architecture": "x86_64", "kernel": "6.1.0-18-amd64"}


def _scope(role: str, family: str = "Debian", **variables: Any) -> dict[str, Any]:
    """The role's defaults and vars, the pins of group_vars, facts, then ``variables``."""
    pins = {k: v for k, v in _load(GROUP_VARS).items() if k.startswith("gpuready_")}
    scope: dict[str, Any] = {**pins, "ansible_facts": _facts(family)}
    for kind in ("defaults", "vars"):
        path = ROLES_DIR / role / kind / "main.yml"
        if path.exists():
            scope.update(trusted(_load(path)))
    scope.update(variables)
    return scope


def _render(role: str, expression: Any, family: str = "Debian", **variables: Any) -> Any:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    scope = _scope(role, family, **variables)
    templar = Templar(loader=DataLoader(), variables=scope)
    return templar.template(trusted(expression))


def _var(role: str, name: str, family: str = "Debian", **variables: Any) -> Any:
    return _render(role, _scope(role, family, **variables)[name], family, **variables)


def test_dcgm_versions_carry_the_epoch_on_deb_only() -> None:
    assert _var("dcgm", "dcgm_deb_version") == "1:4.4.1-1"
    assert _var("dcgm", "dcgm_rpm_version", "RedHat") == "4.4.1-1"
    assert _var("dcgm", "dcgm_deb_version", dcgm_version="4.5.2") == "1:4.5.2-1"


def test_dcgm_install_names_render_per_package_manager() -> None:
    install = _task("dcgm", "debian.yml", "Install DCGM at the pinned version")
    names = _render(
        "dcgm",
        install["ansible.builtin.apt"]["name"],
        dcgm_deb_wanted=["datacenter-gpu-manager-4-core"],
    )
    assert names == ["datacenter-gpu-manager-4-core=1:4.4.1-1"]
    install = _task("dcgm", "redhat.yml", "Install DCGM at the pinned version")
    names = _render(
        "dcgm",
        install["ansible.builtin.dnf"]["name"],
        "RedHat",
        dcgm_rpm_wanted=["datacenter-gpu-manager-4-cuda12"],
    )
    assert names == ["datacenter-gpu-manager-4-cuda12-4.4.1-1"]


@pytest.mark.parametrize(
    ("cuda", "family", "dev", "packages"),
    [
        (
            "12.4",
            "Debian",
            False,
            ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"],
        ),
        (
            "13.0",
            "Debian",
            True,
            [
                "datacenter-gpu-manager-4-core",
                "datacenter-gpu-manager-4-cuda13",
                "datacenter-gpu-manager-4-dev",
            ],
        ),
        (
            "12.9",
            "RedHat",
            True,
            [
                "datacenter-gpu-manager-4-core",
                "datacenter-gpu-manager-4-cuda12",
                "datacenter-gpu-manager-4-devel",
            ],
        ),
    ],
)
def test_dcgm_packages_follow_the_cuda_major_of_the_pin(
    cuda: str, family: str, dev: bool, packages: list[str]
) -> None:
    rendered = _var(
        "dcgm", "dcgm_requested", family, gpuready_cuda_version=cuda, dcgm_install_dev=dev
    )
    assert rendered == packages


def test_nccl_versions_carry_the_cuda_build_on_both_managers() -> None:
    assert _var("nccl", "nccl_deb_version") == "2.23.4-1+cuda12.4"
    assert _var("nccl", "nccl_rpm_version", "RedHat") == "2.23.4-1+cuda12.4"
    # The toolkit pin may name a patch; NCCL builds are per major.minor.
    assert _var("nccl", "nccl_deb_version", gpuready_nvcc_version="12.6.3") == "2.23.4-1+cuda12.6"
    assert _var(
        "nccl", "nccl_deb_version", nccl_version="2.28.9", gpuready_nvcc_version="13.0"
    ) == ("2.28.9-1+cuda13.0")


def test_nccl_install_names_render_per_package_manager() -> None:
    install = _task("nccl", "debian.yml", "Install NCCL at the pinned version")
    names = _render("nccl", install["ansible.builtin.apt"]["name"], nccl_install_dev=True)
    assert names == ["libnccl2=2.23.4-1+cuda12.4", "libnccl-dev=2.23.4-1+cuda12.4"]
    install = _task("nccl", "redhat.yml", "Install NCCL at the pinned version")
    names = _render("nccl", install["ansible.builtin.dnf"]["name"], "RedHat", nccl_install_dev=True)
    assert names == ["libnccl-2.23.4-1+cuda12.4", "libnccl-devel-2.23.4-1+cuda12.4"]


# ---------------------------------------------------------------- probe expressions


def _set_facts(role: str, file: str, name: str, family: str, **variables: Any) -> dict[str, Any]:
    """What a set_fact task would set, rendered with its own task vars in scope."""
    task = _task(role, file, name)
    scope = {**trusted(task.get("vars", {})), **variables}
    return {
        key: _render(role, value, family, **scope)
        for key, value in task["ansible.builtin.set_fact"].items()
    }


def _apt_packages(**versions: str) -> dict[str, list[dict[str, str]]]:
    return {name: [{"name": name, "version": v}] for name, v in versions.items()}


def test_dcgm_pin_pulls_installed_companions_and_purges_dcgm3() -> None:
    packages = _apt_packages(
        **{
            "datacenter-gpu-manager": "1:3.3.9",
            "datacenter-gpu-manager-4-core": "1:4.3.0-1",
            "datacenter-gpu-manager-4-cuda12": "1:4.3.0-1",
            "datacenter-gpu-manager-4-multinode-cuda12": "1:4.3.0-1",
            "bash": "5.2.15-2+b2",
        }
    )
    facts = _set_facts(
        "dcgm",
        "debian.yml",
        "Work out what the DCGM pin needs",
        "Debian",
        ansible_facts={**_facts("Debian"), "packages": packages},
        dcgm_showhold={
            "stdout_lines": ["datacenter-gpu-manager", "datacenter-gpu-manager-4-core", "bash"]
        },
    )
    assert facts["dcgm_deb_wanted"] == [
        "datacenter-gpu-manager-4-core",
        "datacenter-gpu-manager-4-cuda12",
        "datacenter-gpu-manager-4-multinode-cuda12",
    ]
    assert facts["dcgm_install_needed"] is True
    assert facts["dcgm_legacy_installed"] == ["datacenter-gpu-manager"]
    # Only the DCGM holds are released, never another package's.
    assert facts["dcgm_release"] == ["datacenter-gpu-manager", "datacenter-gpu-manager-4-core"]


def test_dcgm_settled_host_needs_nothing() -> None:
    packages = _apt_packages(
        **{
            "datacenter-gpu-manager-4-core": "1:4.4.1-1",
            "datacenter-gpu-manager-4-cuda12": "1:4.4.1-1",
        }
    )
    facts = _set_facts(
        "dcgm",
        "debian.yml",
        "Work out what the DCGM pin needs",
        "Debian",
        ansible_facts={**_facts("Debian"), "packages": packages},
        dcgm_showhold={"stdout_lines": list(packages)},
    )
    assert facts["dcgm_install_needed"] is False
    assert facts["dcgm_release"] == []
    hold = _task("dcgm", "debian.yml", "Hold the DCGM packages")
    unheld = _render(
        "dcgm",
        hold["vars"]["dcgm_unheld"],
        ansible_facts={**_facts("Debian"), "packages": packages},
        dcgm_showhold={"stdout_lines": ["datacenter-gpu-manager-4-core"]},
        dcgm_release=[],
    )
    assert unheld == ["datacenter-gpu-manager-4-cuda12"]


def test_dcgm_without_epoch_or_with_another_revision_is_not_settled() -> None:
    packages = _apt_packages(
        **{
            "datacenter-gpu-manager-4-core": "4.4.1-1",
            "datacenter-gpu-manager-4-cuda12": "1:4.4.1-2",
        }
    )
    facts = _set_facts(
        "dcgm",
        "debian.yml",
        "Work out what the DCGM pin needs",
        "Debian",
        ansible_facts={**_facts("Debian"), "packages": packages},
        dcgm_showhold={"stdout_lines": []},
    )
    assert facts["dcgm_install_needed"] is True


def test_dcgm_dnf_locks_are_read_per_package() -> None:
    facts = _set_facts(
        "dcgm",
        "redhat.yml",
        "Work out what the DCGM pin needs",
        "RedHat",
        dcgm_rpm_query={
            "stdout_lines": [
                "datacenter-gpu-manager 3.3.9-1",
                "datacenter-gpu-manager-4-core 4.4.1-1",
                "datacenter-gpu-manager-4-proprietary 4.4.1-1",
            ]
        },
        dcgm_locks={
            "stdout_lines": [
                "datacenter-gpu-manager-1:3.3.9-1.*",
                "datacenter-gpu-manager-4-core-1:4.4.1-1.*",
                "datacenter-gpu-manager-4-cuda12-1:4.3.0-1.*",
                "libnccl-0:2.23.4-1+cuda12.4.*",
            ]
        },
    )
    assert facts["dcgm_rpm_wanted"] == [
        "datacenter-gpu-manager-4-core",
        "datacenter-gpu-manager-4-cuda12",
        "datacenter-gpu-manager-4-proprietary",
    ]
    assert facts["dcgm_legacy_installed"] == ["datacenter-gpu-manager"]
    assert facts["dcgm_stale_locks"] == [
        "datacenter-gpu-manager-1:3.3.9-1.*",
        "datacenter-gpu-manager-4-cuda12-1:4.3.0-1.*",
    ]
    assert facts["dcgm_unlocked"] == [
        "datacenter-gpu-manager-4-cuda12",
        "datacenter-gpu-manager-4-proprietary",
    ]


def test_nccl_pin_without_the_cuda_build_is_not_settled() -> None:
    needed = _set_facts(
        "nccl",
        "debian.yml",
        "Work out what the NCCL pin needs",
        "Debian",
        ansible_facts={**_facts("Debian"), "packages": _apt_packages(libnccl2="2.23.4-1+cuda12.6")},
        nccl_showhold={"stdout_lines": ["libnccl2"]},
    )
    assert needed == {"nccl_install_needed": True, "nccl_release": ["libnccl2"]}
    settled = _set_facts(
        "nccl",
        "debian.yml",
        "Work out what the NCCL pin needs",
        "Debian",
        ansible_facts={**_facts("Debian"), "packages": _apt_packages(libnccl2="2.23.4-1+cuda12.4")},
        nccl_showhold={"stdout_lines": ["libnccl2"]},
    )
    assert settled == {"nccl_install_needed": False, "nccl_release": []}


def test_nccl_dnf_locks_are_read_per_package() -> None:
    facts = _set_facts(
        "nccl",
        "redhat.yml",
        "Work out what the NCCL pin needs",
        "RedHat",
        nccl_install_dev=True,
        nccl_locks={
            "stdout_lines": [
                "libnccl-0:2.23.4-1+cuda12.4.*",
                "libnccl-devel-0:2.21.5-1+cuda12.4.*",
            ]
        },
    )
    assert facts["nccl_stale_locks"] == ["libnccl-devel-0:2.21.5-1+cuda12.4.*"]
    assert facts["nccl_unlocked"] == ["libnccl-devel"]


# ---------------------------------------------------------------- site.yml


def _site_play() -> Mapping[str, Any]:
    plays = _load(PLAYBOOKS / "site.yml")
    assert len(plays) == 1
    play: Mapping[str, Any] = plays[0]
    return play


def test_site_includes_the_new_roles_after_fabric_manager_and_verify_last() -> None:
    play = _site_play()
    roles = [entry["role"] for entry in play["roles"]]
    included = [
        task["ansible.builtin.include_role"]["name"]
        for task in play["tasks"]
        if "ansible.builtin.include_role" in task
    ]
    # Only preflight is static: every install role is an include the converged probe skips.
    assert roles == ["gpu_preflight"]
    assert included == [
        "cuda_repository",
        "nvidia_driver",
        "cuda_toolkit",
        "cudnn",
        "fabric_manager",
        "dcgm",
        "nccl",
        "peermem",
        "container_toolkit",
        "gpu_verify",
    ]
    # A when on a role entry is evaluated on every task of the role.
    assert all("when" not in entry for entry in play["roles"])


@pytest.mark.parametrize("role", sorted(OPTIONAL))
def test_optional_switch_default_in_site_matches_the_role(role: str) -> None:
    switch, default = OPTIONAL[role]
    assert _load(ROLES_DIR / role / "defaults" / "main.yml")[switch] == default
    (task,) = [
        t for t in _site_play()["tasks"] if t["ansible.builtin.include_role"]["name"] == role
    ]
    assert f"{switch} | default(" in task["when"]
    expected = str(default).lower() if isinstance(default, bool) else f"'{default}'"
    assert f"{switch} | default({expected})" in task["when"], task["when"]


@pytest.mark.parametrize(
    ("value", "included"),
    [
        (None, True),
        ("auto", True),
        (True, True),
        (False, False),
        ("false", False),
        ("False", False),
    ],
)
def test_peermem_include_condition(value: object, included: bool) -> None:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    (task,) = [
        t for t in _site_play()["tasks"] if t["ansible.builtin.include_role"]["name"] == "peermem"
    ]
    scope = {} if value is None else {"peermem_enabled": value}
    templar = Templar(loader=DataLoader(), variables=scope)
    assert is_true(templar, task["when"]) is included


def test_site_playbook_lists_the_tags(tmp_path: Path) -> None:
    """--tags dcgm selects the dcgm include and its tasks, and nothing of nccl."""
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not installed")
    proc = subprocess.run(
        [
            "ansible-playbook",
            "--list-tags",
            "-i",
            str(REPO_ROOT / "inventory" / "hosts.example.ini"),
            str(PLAYBOOKS / "site.yml"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    listed = set(re.findall(r"[\w-]+", proc.stdout.split("TASK TAGS:")[-1]))
    assert {"dcgm", "nccl", "peermem", "container_toolkit", "verify"} <= listed


# ---------------------------------------------------------------- peermem on localhost


def _run_peermem(
    tmp_path: Path, *extra: str, check: bool = False
) -> subprocess.CompletedProcess[str]:
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n"
        "  connection: local\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - name: Run the peermem role\n"
        "      ansible.builtin.include_role:\n"
        "        name: peermem\n",
        encoding="utf-8",
    )
    argv = [
        "ansible-playbook",
        "-i",
        "localhost,",
        str(playbook),
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-e",
        "gpuready_driver_version=550.90.07",
        "-e",
        f"peermem_modules_load_file={tmp_path / 'modules-load.d' / 'nvidia-peermem.conf'}",
        "-e",
        f"peermem_memlock_file={tmp_path / 'limits.d' / 'memlock.conf'}",
        "-e",
        f"peermem_mlx5_sysfs={tmp_path / 'sys' / 'module' / 'mlx5_core'}",
        "-e",
        f"peermem_rdma_sysfs={tmp_path / 'sys' / 'class' / 'infiniband'}",
        *(["--check"] if check else []),
        *extra,
    ]
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(ROLES_DIR), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env)


def _needs_root() -> None:
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not installed")
    if os.geteuid() != 0:
        pytest.skip("the role writes root-owned files")


def test_peermem_skips_with_one_message_where_there_is_no_rdma(tmp_path: Path) -> None:
    _needs_root()
    proc = _run_peermem(tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "no RDMA stack (mlx5_core not loaded" in proc.stdout
    assert "changed=0" in proc.stdout
    assert not (tmp_path / "modules-load.d").exists()
    assert not (tmp_path / "limits.d").exists()


def test_peermem_loads_at_boot_and_lifts_memlock_where_rdma_is_present(tmp_path: Path) -> None:
    _needs_root()
    (tmp_path / "sys" / "class" / "infiniband" / "mlx5_0").mkdir(parents=True)
    check = _run_peermem(tmp_path, check=True)
    assert check.returncode == 0, check.stdout[-4000:] + check.stderr[-4000:]
    assert not (tmp_path / "modules-load.d" / "nvidia-peermem.conf").exists()
    proc = _run_peermem(tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "no RDMA stack" not in proc.stdout
    conf = (tmp_path / "modules-load.d" / "nvidia-peermem.conf").read_text(encoding="utf-8")
    assert conf.splitlines()[-1] == "nvidia-peermem"
    limits = (tmp_path / "limits.d" / "memlock.conf").read_text(encoding="utf-8").splitlines()
    assert limits[-2:] == ["* soft memlock unlimited", "* hard memlock unlimited"]
    # No pinned driver module is loaded here: nothing is modprobed.
    assert "Load nvidia-peermem now" in proc.stdout
    again = _run_peermem(tmp_path)
    assert again.returncode == 0
    assert "changed=0" in again.stdout, again.stdout[-3000:]


def test_peermem_memlock_is_switchable(tmp_path: Path) -> None:
    _needs_root()
    (tmp_path / "sys" / "module" / "mlx5_core").mkdir(parents=True)
    proc = _run_peermem(tmp_path, "-e", "peermem_memlock_limits=false")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert (tmp_path / "modules-load.d" / "nvidia-peermem.conf").is_file()
    assert not (tmp_path / "limits.d").exists()
