"""Static checks of the provisioning playbooks (playbooks/site.yml and its roles).

The roles are run for real by the end-to-end tests against test hosts; here they are
linted, syntax-checked, parsed and held to the project's rules (named tasks,
role-prefixed variables, only ansible.builtin modules, probes safe in check mode), and
their computed defaults (package names, repository paths) are rendered with Ansible's
own templating for the distributions and driver branches they must handle.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO_ROOT

PLAYBOOKS = REPO_ROOT / "playbooks"
ROLES_DIR = PLAYBOOKS / "roles"
INVENTORY = REPO_ROOT / "inventory" / "hosts.example.ini"
GROUP_VARS = REPO_ROOT / "inventory" / "group_vars" / "all.yml"
ROLES = (
    "gpu_preflight",
    "cuda_repository",
    "nvidia_driver",
    "cuda_toolkit",
    "cudnn",
    "fabric_manager",
    "container_toolkit",
    "gpu_verify",
)
PINS = {
    "gpuready_driver_version",
    "gpuready_driver_branch",
    "gpuready_cuda_version",
    "gpuready_nvcc_version",
    "gpuready_cudnn_version",
}
# Task keys that are not the module: Ansible's own task attributes plus block keys.
_BLOCK_KEYS = {"block", "rescue", "always"}
_COMMANDS = {"ansible.builtin.command", "ansible.builtin.shell"}
# Modules that only read: a probe task with one of these never changes the host.
_READ_ONLY = {
    "ansible.builtin.assert",
    "ansible.builtin.debug",
    "ansible.builtin.set_fact",
    "ansible.builtin.stat",
    "ansible.builtin.slurp",
    "ansible.builtin.find",
    "ansible.builtin.package_facts",
    "ansible.builtin.include_tasks",
    "ansible.builtin.meta",
    "ansible.builtin.command",  # only with changed_when: false, checked separately
}


def _task_keywords() -> frozenset[str]:
    from ansible.playbook.task import Task

    return frozenset(Task.fattributes) | _BLOCK_KEYS | {"listen"}


def _load(path: Path) -> Any:
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _walk(tasks: list[dict[str, Any]] | None) -> Iterator[dict[str, Any]]:
    """Every task and block in a task list, blocks' children included."""
    for task in tasks or []:
        yield task
        for key in _BLOCK_KEYS:
            yield from _walk(task.get(key))


def _task_files() -> list[Path]:
    files = sorted(ROLES_DIR.glob("*/tasks/*.yml")) + sorted(ROLES_DIR.glob("*/handlers/*.yml"))
    assert files, f"no task files under {ROLES_DIR}"
    return files


def _all_tasks() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, task) for path in _task_files() for task in _walk(_load(path))]


def _module(task: Mapping[str, Any]) -> str | None:
    """The module a task calls, or None for a block."""
    if any(key in task for key in _BLOCK_KEYS):
        return None
    candidates = [key for key in task if key not in _task_keywords()]
    assert len(candidates) == 1, (
        f"task {task.get('name')!r}: cannot tell its module from {candidates}"
    )
    return str(candidates[0])


def _label(path: Path, task: Mapping[str, Any]) -> str:
    return f"{path.relative_to(REPO_ROOT)}: {task.get('name', '<unnamed>')!r}"


# ---------------------------------------------------------------- external tools


def test_ansible_lint_production_profile_passes() -> None:
    if shutil.which("ansible-lint") is None:
        pytest.skip("ansible-lint is not installed")
    proc = subprocess.run(
        ["ansible-lint", "--profile", "production", "--nocolor", "playbooks/"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_site_playbook_passes_syntax_check() -> None:
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not installed")
    proc = subprocess.run(
        ["ansible-playbook", "--syntax-check", "-i", str(INVENTORY), str(PLAYBOOKS / "site.yml")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


# ---------------------------------------------------------------- structure


def test_site_runs_every_role_in_order_with_verify_last() -> None:
    plays = _load(PLAYBOOKS / "site.yml")
    roles = [entry["role"] for play in plays for entry in play.get("roles", [])]
    assert tuple(roles) == ROLES
    by_name = {entry["role"]: entry for play in plays for entry in play["roles"]}
    assert "always" in by_name["gpu_preflight"]["tags"]
    assert by_name["container_toolkit"]["when"] == "container_toolkit_enabled | bool"
    for role in ROLES:
        assert (ROLES_DIR / role / "tasks" / "main.yml").is_file(), role
        assert (ROLES_DIR / role / "defaults" / "main.yml").is_file(), role


def test_every_task_and_handler_is_named() -> None:
    unnamed = [_label(path, task) for path, task in _all_tasks() if not task.get("name")]
    assert unnamed == []


@pytest.mark.parametrize("role", ROLES)
def test_role_variables_carry_the_role_prefix(role: str) -> None:
    for kind in ("defaults", "vars"):
        path = ROLES_DIR / role / kind / "main.yml"
        if not path.exists():
            continue
        names = list(_load(path) or {})
        assert names, f"{path} is empty"
        stray = [name for name in names if not name.startswith(role + "_")]
        assert stray == [], f"{path}: {stray}"


def test_registered_and_set_variables_carry_the_role_prefix() -> None:
    stray = []
    for path, task in _all_tasks():
        role = path.relative_to(ROLES_DIR).parts[0]
        names = [task["register"]] if "register" in task else []
        names += list(task.get("ansible.builtin.set_fact", {}) or {})
        names += list(task.get("vars", {}) or {})
        stray += [f"{_label(path, task)}: {n}" for n in names if not n.startswith(role + "_")]
    assert stray == []


def test_only_ansible_builtin_modules_and_no_shell() -> None:
    modules = {
        _label(path, task): module
        for path, task in _all_tasks()
        if (module := _module(task)) is not None
    }
    assert len(modules) > 100  # the walk found the tasks inside blocks too
    foreign = {label: m for label, m in modules.items() if not m.startswith("ansible.builtin.")}
    assert foreign == {}
    # Every command is an argv list: nothing needs a shell.
    shells = [label for label, m in modules.items() if m == "ansible.builtin.shell"]
    assert shells == []


def test_no_task_ignores_errors() -> None:
    ignoring = [_label(path, task) for path, task in _all_tasks() if "ignore_errors" in task]
    assert ignoring == []
    for path in _task_files():
        assert "ignore_errors" not in path.read_text(encoding="utf-8"), path


def test_commands_declare_when_they_change_something() -> None:
    missing = []
    for path, task in _all_tasks():
        module = _module(task)
        if module not in _COMMANDS:
            continue
        args = task[module] if isinstance(task[module], dict) else {}
        if "changed_when" not in task and "creates" not in args and "removes" not in args:
            missing.append(_label(path, task))
        assert "argv" in args, f"{_label(path, task)}: give the command as argv"
    assert missing == []


def test_probes_run_in_check_mode() -> None:
    """A command that changes nothing must still run under --check (its result steers)."""
    unsafe = [
        _label(path, task)
        for path, task in _all_tasks()
        if _module(task) in _COMMANDS
        and task.get("changed_when") is False
        and task.get("check_mode") is not False
    ]
    assert unsafe == []


def test_verification_never_reports_a_change() -> None:
    for path in sorted((ROLES_DIR / "gpu_verify" / "tasks").glob("*.yml")):
        for task in _walk(_load(path)):
            module = _module(task)
            if module is None:
                continue
            assert module in _READ_ONLY, f"{_label(path, task)} uses {module}"
            if module in _COMMANDS:
                assert task.get("changed_when") is False, _label(path, task)


def test_roles_never_install_the_cuda_meta_package_or_use_apt_key() -> None:
    installs = 0
    for path, task in _all_tasks():
        module = _module(task)
        assert module != "ansible.builtin.apt_key", _label(path, task)
        if module in ("ansible.builtin.apt", "ansible.builtin.dnf"):
            names = task[module].get("name")
            listed = names if isinstance(names, list) else [names]
            assert "cuda" not in listed, _label(path, task)
            installs += 1
    assert installs >= 10


# ---------------------------------------------------------------- shared pins


def test_group_vars_pins_are_certify_policy_fields() -> None:
    from validator.judge.policy import policy_from_mapping

    data = _load(GROUP_VARS)
    pins = {key: value for key, value in data.items() if key.startswith("gpuready_")}
    assert set(pins) == PINS
    policy = policy_from_mapping(
        {key.removeprefix("gpuready_"): value for key, value in pins.items()}, str(GROUP_VARS)
    )
    assert policy.driver_version == "550.90.07"
    assert policy.driver_branch == "550"
    assert policy.nvcc_version == "12.4"
    assert policy.cudnn_version == "9.1.0"
    assert policy.cuda_version == "12.4"


def test_policy_reader_rejects_a_stray_gpuready_key() -> None:
    """The check above relies on policy_from_mapping refusing unknown keys."""
    from validator.errors import PolicyError
    from validator.judge.policy import policy_from_mapping

    with pytest.raises(PolicyError, match="nvidia_driver_flavour"):
        policy_from_mapping({"nvidia_driver_flavour": "open"}, "group_vars")


def test_example_inventory_loads_through_the_certify_reader() -> None:
    from validator.inventory import load_hosts

    hosts = load_hosts([str(INVENTORY)])
    assert [host.name for host in hosts] == [
        "gpu-h100-01",
        "gpu-h100-02",
        "gpu-a100-01",
        "gpu-l40s-01",
    ]
    pins = _load(GROUP_VARS)
    for host in hosts:
        for key in PINS:
            assert host.vars[key] == pins[key], (host.name, key)
    assert hosts[0].vars["gpuready_expected_model"] == "h100-sxm"
    assert hosts[3].vars["gpuready_expected_gpu_count"] == 4


def test_role_defaults_derive_from_the_pins() -> None:
    expected = {
        ("nvidia_driver", "nvidia_driver_version"): "{{ gpuready_driver_version }}",
        ("cuda_toolkit", "cuda_toolkit_version"): "{{ gpuready_nvcc_version }}",
        ("cudnn", "cudnn_version"): "{{ gpuready_cudnn_version }}",
        ("fabric_manager", "fabric_manager_version"): "{{ gpuready_driver_version }}",
        ("gpu_verify", "gpu_verify_driver_version"): "{{ gpuready_driver_version }}",
        ("gpu_verify", "gpu_verify_nvcc_version"): "{{ gpuready_nvcc_version }}",
        ("gpu_verify", "gpu_verify_cudnn_version"): "{{ gpuready_cudnn_version }}",
    }
    for (role, name), value in expected.items():
        assert _load(ROLES_DIR / role / "defaults" / "main.yml")[name] == value, name


def test_test_host_switches_exist_with_production_defaults() -> None:
    """The end-to-end tests flip these; production keeps the safe side."""
    defaults = {role: _load(ROLES_DIR / role / "defaults" / "main.yml") for role in ROLES}
    assert defaults["gpu_preflight"]["gpu_preflight_require_gpus"] is True
    assert defaults["nvidia_driver"]["nvidia_driver_skip_reboot"] is False
    assert defaults["nvidia_driver"]["nvidia_driver_manage_services"] is True
    assert defaults["nvidia_driver"]["nvidia_driver_rebuild_initramfs"] is True
    assert defaults["nvidia_driver"]["nvidia_driver_install_build_packages"] is True
    assert defaults["container_toolkit"]["container_toolkit_enabled"] is False
    # Runtime checks follow the GPU switch, so tests need not set them separately.
    assert "gpu_preflight_require_gpus" in defaults["gpu_verify"]["gpu_verify_driver_runtime"]


# ---------------------------------------------------------------- rendered defaults


def _trusted(value: Any) -> Any:
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    if isinstance(value, dict):
        return {key: _trusted(item) for key, item in value.items()}
    return value


def _render(role: str, name: str, **variables: Any) -> Any:
    """A role default rendered by Ansible with the role's other defaults and ``variables``."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    scope: dict[str, Any] = {}
    for other in (role, "gpu_preflight", "nvidia_driver"):
        scope = {**_trusted(_load(ROLES_DIR / other / "defaults" / "main.yml")), **scope}
    scope.update(variables)
    return Templar(loader=DataLoader(), variables=scope).template(scope[name])


def _facts(distribution: str, version: str, arch: str = "x86_64") -> dict[str, str]:
    family = "Debian" if distribution in ("Debian", "Ubuntu") else "RedHat"
    return {
        "distribution": distribution,
        "distribution_version": version,
        "distribution_major_version": version.split(".", maxsplit=1)[0],
        "os_family": family,
        "architecture": arch,
        "kernel": "6.1.0-18-amd64",
    }


@pytest.mark.parametrize(
    ("distribution", "version", "arch", "url"),
    [
        ("Debian", "12", "x86_64", "debian12/x86_64"),
        ("Ubuntu", "22.04", "x86_64", "ubuntu2204/x86_64"),
        ("Ubuntu", "24.04", "aarch64", "ubuntu2404/sbsa"),
        ("Rocky", "9.4", "x86_64", "rhel9/x86_64"),
        ("RedHat", "8.10", "x86_64", "rhel8/x86_64"),
    ],
)
def test_repository_url_per_distribution(
    distribution: str, version: str, arch: str, url: str
) -> None:
    facts = _facts(distribution, version, arch)
    rendered = _render("cuda_repository", "cuda_repository_url", ansible_facts=facts)
    assert rendered == f"https://developer.download.nvidia.com/compute/cuda/repos/{url}"


def test_repository_mirror_replaces_the_whole_url() -> None:
    facts = _facts("Ubuntu", "22.04")
    keyring = _render(
        "cuda_repository",
        "cuda_repository_keyring_url",
        ansible_facts=facts,
        cuda_repository_url="http://mirror.internal/cuda",
    )
    assert keyring == "http://mirror.internal/cuda/cuda-keyring_1.1-1_all.deb"


@pytest.mark.parametrize(
    ("branch", "flavour", "package"),
    [
        ("550", "open", "nvidia-driver-550-open"),
        ("550", "proprietary", "cuda-drivers-550"),
        ("580", "open", "nvidia-driver-580-open"),
        ("590", "open", "nvidia-open"),
        ("590", "proprietary", "cuda-drivers"),
    ],
)
def test_driver_package_per_branch_and_flavour(branch: str, flavour: str, package: str) -> None:
    rendered = _render(
        "nvidia_driver",
        "nvidia_driver_deb_package",
        gpuready_driver_version=f"{branch}.10.01",
        gpuready_driver_branch=branch,
        nvidia_driver_flavour=flavour,
    )
    assert rendered == package


@pytest.mark.parametrize(
    ("flavour", "stream", "kmod"),
    [
        ("open", "550-open", "kmod-nvidia-open-dkms"),
        ("proprietary", "550-dkms", "kmod-nvidia-latest-dkms"),
    ],
)
def test_dnf_module_stream_and_kernel_module_package(flavour: str, stream: str, kmod: str) -> None:
    pins = {
        "gpuready_driver_version": "550.90.07",
        "gpuready_driver_branch": "550",
        "nvidia_driver_flavour": flavour,
    }
    assert _render("nvidia_driver", "nvidia_driver_module_stream", **pins) == stream
    assert kmod in _render("nvidia_driver", "nvidia_driver_rpm_packages", **pins)


@pytest.mark.parametrize(
    ("distribution", "version", "packages"),
    [
        ("Ubuntu", "22.04", ["dkms", "linux-headers-6.1.0-18-amd64"]),
        ("Rocky", "8.9", ["dkms", "kernel-headers", "kernel-devel-6.1.0-18-amd64"]),
        ("Rocky", "9.4", ["dkms", "kernel-headers", "kernel-devel-matched"]),
    ],
)
def test_kernel_build_packages_per_distribution(
    distribution: str, version: str, packages: list[str]
) -> None:
    facts = _facts(distribution, version)
    assert _render("nvidia_driver", "nvidia_driver_build_packages", ansible_facts=facts) == packages


@pytest.mark.parametrize(
    ("branch", "deb", "rpm"),
    [
        ("550", "nvidia-fabricmanager-550", "nvidia-fabric-manager"),
        ("570", "nvidia-fabricmanager-570", "nvidia-fabric-manager"),
        ("580", "nvidia-fabricmanager", "nvidia-fabricmanager"),
    ],
)
def test_fabric_manager_package_per_branch(branch: str, deb: str, rpm: str) -> None:
    pins = {"gpuready_driver_version": f"{branch}.1.1", "gpuready_driver_branch": branch}
    assert _render("fabric_manager", "fabric_manager_deb_package", **pins) == deb
    assert _render("fabric_manager", "fabric_manager_rpm_package", **pins) == rpm


def test_fabric_manager_follows_nvswitch_detection() -> None:
    pins = {"gpuready_driver_version": "550.90.07", "gpuready_driver_branch": "550"}
    on = _render(
        "fabric_manager", "fabric_manager_enabled", gpu_preflight_nvswitch_present=True, **pins
    )
    off = _render(
        "fabric_manager", "fabric_manager_enabled", gpu_preflight_nvswitch_present=False, **pins
    )
    assert (on, off) == (True, False)


@pytest.mark.parametrize(
    ("nvcc", "package", "home"),
    [
        ("12.4", "cuda-toolkit-12-4", "/usr/local/cuda-12.4"),
        ("12.4.1", "cuda-toolkit-12-4", "/usr/local/cuda-12.4"),
        ("13.0", "cuda-toolkit-13-0", "/usr/local/cuda-13.0"),
    ],
)
def test_toolkit_package_is_never_the_cuda_meta_package(nvcc: str, package: str, home: str) -> None:
    assert _render("cuda_toolkit", "cuda_toolkit_package", gpuready_nvcc_version=nvcc) == package
    assert _render("cuda_toolkit", "cuda_toolkit_home", gpuready_nvcc_version=nvcc) == home


def test_cudnn_packages_follow_the_toolkit_major() -> None:
    rendered = _render(
        "cudnn", "cudnn_packages", gpuready_cudnn_version="9.1.0", gpuready_nvcc_version="12.4"
    )
    assert rendered == ["cudnn9-cuda-12", "libcudnn9-cuda-12"]
    family = _render(
        "cudnn",
        "cudnn_family_pattern",
        gpuready_cudnn_version="9.1.0",
        gpuready_nvcc_version="12.4",
    )
    assert re.match(family, "libcudnn9-dev-cuda-12")
    assert not re.match(family, "libcudnn9-cuda-11")
