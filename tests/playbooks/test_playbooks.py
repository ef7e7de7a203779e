"""Static checks of the provisioning playbooks (playbooks/site.yml and its roles).

The roles are run for real by the end-to-end tests against test hosts; here they are
linted, syntax-checked, parsed and held to the project's rules (named tasks,
role-prefixed variables, only ansible.builtin modules, probes safe in check mode), and
their computed defaults (package names, repository paths) are rendered with Ansible's
own templating for the distributions and driver branches they must handle.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible_trust import trusted
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
# The stack's other pins, as certify reads them back (policy host.pins, templated from the
# roles' nccl_version and dcgm_version).
STACK_PINS = {"gpuready_host"}
# gpuready_* variables of the group vars that only provisioning reads (validator.ansible_inventory).
PROVISION_ONLY = {"gpuready_driver_source"}
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


def _site_roles(play: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The play's roles in run order: ``roles:`` entries, then ``include_role`` tasks."""
    entries = [(entry["role"], entry) for entry in play.get("roles", [])]
    for task in play.get("tasks", []) or []:
        include = task.get("ansible.builtin.include_role")
        if include:
            entries.append((include["name"], task))
    return entries


def test_site_runs_every_role_in_order_with_verify_last() -> None:
    plays = _load(PLAYBOOKS / "site.yml")
    entries = [pair for play in plays for pair in _site_roles(play)]
    roles = [name for name, _ in entries]
    assert [role for role in roles if role in ROLES] == list(ROLES)
    assert roles[-1] == "gpu_verify"
    by_name = dict(entries)
    assert "always" in by_name["gpu_preflight"]["tags"]
    assert "container_toolkit_enabled" in by_name["container_toolkit"]["when"]
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
    pins = {
        key: value
        for key, value in data.items()
        if key.startswith("gpuready_") and key not in PROVISION_ONLY
    }
    assert set(pins) == PINS | STACK_PINS
    assert data["gpuready_driver_source"] == "nvidia"
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
    from validator.error_tree import PolicyError
    from validator.judge.policy import policy_from_mapping

    with pytest.raises(PolicyError, match="nvidia_driver_flavour"):
        policy_from_mapping({"nvidia_driver_flavour": "open"}, "group_vars")


def test_example_inventory_loads_through_the_certify_reader() -> None:
    from validator.ansible_inventory import load_hosts

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
    # NCCL's and DCGM's pins reach certify rendered, merged into the host section.
    from validator.ansible_inventory import policy_for
    from validator.judge.host_policy import HostPolicy
    from validator.judge.policy import Policy

    wanted = {"nccl": pins["nccl_version"], "dcgm": pins["dcgm_version"]}
    assert hosts[0].vars["gpuready_host"] == {"pins": wanted}
    base = Policy(host=HostPolicy(swap_allowed=False))
    host_policy = policy_for(hosts[0], base).host
    assert dict(host_policy.pins) == wanted
    assert host_policy.swap_allowed is False  # the base's other host keys stay
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


def _render(role: str, name: str, **variables: Any) -> Any:
    """A role default rendered by Ansible with the role's other defaults and ``variables``."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    scope: dict[str, Any] = {}
    for other in (role, "gpu_preflight", "nvidia_driver"):
        scope = {**trusted(_load(ROLES_DIR / other / "defaults" / "main.yml")), **scope}
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


# ---------------------------------------------------------------- per-distribution package maps
# The facts these hold to come from /work/shared/reference/nvidia-packages.md (§ cited).

_SOURCE_MARKERS = ("§", "idx:", "GDC@", "provisioning.md", "README")


def _vars_file(role: str, facts: Mapping[str, str]) -> Path:
    """The file tasks/main.yml's first_found picks for ``facts`` (same candidate order)."""
    candidates = [
        f"{facts['distribution']}-{facts['distribution_major_version']}.yml",
        f"{facts['distribution']}.yml",
        f"{facts['os_family']}-{facts['distribution_major_version']}.yml",
        f"{facts['os_family']}.yml",
    ]
    for name in candidates:
        path = ROLES_DIR / role / "vars" / name
        if path.is_file():
            return path
    raise AssertionError(f"{role}: no vars file among {candidates}")


def _scope(role: str, facts: Mapping[str, str], **variables: Any) -> dict[str, Any]:
    """Defaults, the distribution's vars file, vars/main.yml, facts and ``variables``."""
    scope: dict[str, Any] = {}
    for other in ("gpu_preflight", "nvidia_driver", role):
        scope.update(trusted(_load(ROLES_DIR / other / "defaults" / "main.yml")))
    if (ROLES_DIR / role / "vars").is_dir() and any(
        path.name != "main.yml" for path in (ROLES_DIR / role / "vars").glob("*.yml")
    ):
        scope.update(trusted(_load(_vars_file(role, facts))))
    main = ROLES_DIR / role / "vars" / "main.yml"
    if main.is_file():
        scope.update(trusted(_load(main)))
    scope.update(trusted(_load(GROUP_VARS)))
    scope["ansible_facts"] = dict(facts)
    scope.update(variables)
    return scope


def _template(expression: Any, scope: Mapping[str, Any]) -> Any:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    return Templar(loader=DataLoader(), variables=dict(scope)).template(trusted(expression))


def _driver(facts: Mapping[str, str], name: str, version: str, **variables: Any) -> Any:
    branch = version.split(".", maxsplit=1)[0]
    pins = {"gpuready_driver_version": version, "gpuready_driver_branch": branch}
    scope = _scope("nvidia_driver", facts, **pins, **variables)
    return _template(scope[name], scope)


UBUNTU_2204 = _facts("Ubuntu", "22.04")
UBUNTU_2404 = _facts("Ubuntu", "24.04")
DEBIAN_12 = _facts("Debian", "12")
ROCKY_9 = _facts("Rocky", "9.4")
RHEL_10 = _facts("RedHat", "10.0")
_FLAVOURS_SETS = [(f, s) for f in ("open", "proprietary") for s in ("compute", "full")]


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (UBUNTU_2204, "Ubuntu.yml"),
        (UBUNTU_2404, "Ubuntu.yml"),
        (DEBIAN_12, "Debian.yml"),
        (_facts("Debian", "13"), "Debian.yml"),
        (_facts("Rocky", "8.10"), "RedHat-8.yml"),
        (ROCKY_9, "RedHat-9.yml"),
        (_facts("AlmaLinux", "9.4"), "RedHat-9.yml"),
        (RHEL_10, "RedHat-10.yml"),
    ],
)
def test_driver_vars_file_per_distribution(facts: Mapping[str, str], expected: str) -> None:
    assert _vars_file("nvidia_driver", facts).name == expected


@pytest.mark.parametrize("path", sorted((ROLES_DIR / "nvidia_driver" / "vars").glob("*.yml")))
def test_every_driver_map_entry_carries_its_source(path: Path) -> None:
    """Each top-level key's block (its comments and value) cites where the fact is from."""
    if path.name == "main.yml":
        pytest.skip("derived values, no facts")
    blocks: list[tuple[str, str]] = []
    pending: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        key = re.match(r"^(nvidia_driver_[a-z0-9_]+):", line)
        if key:
            blocks.append((key.group(1), "\n".join([*pending, line])))
            pending = []
        elif blocks and line.startswith((" ", "\t")):
            name, text = blocks[-1]
            blocks[-1] = (name, text + "\n" + line)
        else:
            pending.append(line)
    assert blocks, path
    unsourced = [name for name, text in blocks if not any(m in text for m in _SOURCE_MARKERS)]
    assert unsourced == [], f"{path.name}: no source comment for {unsourced}"


@pytest.mark.parametrize(
    "version", ["535.183.01", "550.90.07", "580.105.08", "590.48.01", "595.91.07"]
)
@pytest.mark.parametrize("facts", [UBUNTU_2204, UBUNTU_2404], ids=["22.04", "24.04"])
def test_ubuntu_driver_versions_end_in_0ubuntu1(version: str, facts: Mapping[str, str]) -> None:
    """§0: Ubuntu CUDA-repo driver packages are <ver>-0ubuntu1 (never the old =<ver>-1)."""
    for flavour, package_set in _FLAVOURS_SETS:
        variables = {"nvidia_driver_flavour": flavour, "nvidia_driver_package_set": package_set}
        specs = _driver(facts, "nvidia_driver_package_specs", version, **variables)
        assert specs, (flavour, package_set)
        for spec in specs:
            name, _, pinned = spec.partition("=")
            if name.startswith("cuda-drivers"):
                # §7: the cuda-drivers* revision is unconfirmed; matched as <ver>-*.
                assert pinned == f"{version}-*", spec
            else:
                assert pinned == f"{version}-0ubuntu1", spec
        pinning = _driver(facts, "nvidia_driver_pinning_spec", version, **variables)
        if int(version.split(".", maxsplit=1)[0]) >= 590:
            assert pinning == f"nvidia-driver-pinning-{version}={version}-0ubuntu1"
        else:
            assert pinning == ""


@pytest.mark.parametrize(
    ("version", "flavour", "package_set", "names"),
    [
        # §2a 535/550 row, compute-only (Inference) and full.
        (
            "550.90.07",
            "open",
            "compute",
            [
                "libnvidia-compute-550",
                "nvidia-dkms-550-open",
                "nvidia-utils-550",
                "nvidia-compute-utils-550",
            ],
        ),
        ("550.90.07", "open", "full", ["nvidia-driver-550-open"]),
        (
            "580.105.08",
            "proprietary",
            "compute",
            [
                "libnvidia-compute-580",
                "nvidia-dkms-580",
                "nvidia-utils-580",
                "nvidia-compute-utils-580",
            ],
        ),
        ("580.105.08", "proprietary", "full", ["nvidia-driver-580"]),
        # §2a >= 590 row: branch-free names.
        ("590.48.01", "open", "compute", ["libnvidia-compute", "nvidia-dkms-open"]),
        ("590.48.01", "open", "full", ["nvidia-open"]),
        ("595.91.07", "proprietary", "compute", ["libnvidia-compute", "nvidia-dkms"]),
        ("595.91.07", "proprietary", "full", ["cuda-drivers"]),
    ],
)
def test_ubuntu_driver_package_sets(
    version: str, flavour: str, package_set: str, names: list[str]
) -> None:
    variables = {"nvidia_driver_flavour": flavour, "nvidia_driver_package_set": package_set}
    assert _driver(UBUNTU_2404, "nvidia_driver_packages", version, **variables) == names


def test_ubuntu_590_leaves_the_pin_to_nvidias_pinning_package() -> None:
    """§2a: a priority-1000 pin of ours would tie with nvidia-driver-pinning-<ver>."""
    assert _driver(UBUNTU_2404, "nvidia_driver_os_apt_preferences", "590.48.01") is False
    assert _driver(UBUNTU_2404, "nvidia_driver_os_apt_preferences", "580.105.08") is True
    assert _driver(DEBIAN_12, "nvidia_driver_os_apt_preferences", "590.48.01") is True
    assert _driver(DEBIAN_12, "nvidia_driver_pinning_spec", "590.48.01") == ""
    # The >= 590 compute set adds the unconfirmed nvidia-smi package only where it exists.
    assert _driver(UBUNTU_2404, "nvidia_driver_optional_packages", "590.48.01") == [
        "nvidia-utils",
        "nvidia-persistenced",
    ]
    tasks = _load(ROLES_DIR / "nvidia_driver" / "tasks" / "debian.yml")
    by_name = {task["name"]: task for task in tasks}
    removal = by_name["Remove our driver pin where NVIDIA's pinning package pins"]
    assert removal["ansible.builtin.file"]["state"] == "absent"
    assert removal["when"] == "not nvidia_driver_os_apt_preferences | bool"
    # The pinning package goes in before the driver.
    names = [task["name"] for task in tasks]
    assert names.index("Install the NVIDIA driver branch pinning package") < names.index(
        "Install the NVIDIA driver at the pinned version"
    )


# ---------------------------------------------------------------- Secure Boot, precompiled modules
# §2b: under Secure Boot without an enrolled DKMS key, gpu_preflight's opt-in
# (gpu_preflight_precompiled_modules) switches the driver to Canonical's signed modules and
# -server user space, loaded from vars/Ubuntu-precompiled.yml over Ubuntu.yml, never mixed
# with the CUDA repo's names.

_PRECOMPILED_VARS = ROLES_DIR / "nvidia_driver" / "vars" / "Ubuntu-precompiled.yml"
_UBUNTU_KERNEL = "6.8.0-45-generic"
_PRECOMPILED_VERSIONS = ["535.183.01", "550.163.01", "580.95.05", "590.48.01", "595.91.07"]
_UBUNTUS = [
    {**UBUNTU_2204, "kernel": "5.15.0-119-generic"},
    {**UBUNTU_2404, "kernel": _UBUNTU_KERNEL},
]


def _precompiled_scope(
    facts: Mapping[str, str], version: str, opt_in: bool | None = True, **variables: Any
) -> dict[str, Any]:
    """The driver's scope as tasks/main.yml builds it, with gpu_preflight's fact ``opt_in``
    (None: gpu_preflight never set it): vars/Ubuntu-precompiled.yml goes over the
    distribution's map when nvidia_driver_precompiled renders true."""
    branch = version.split(".", maxsplit=1)[0]
    pins = {"gpuready_driver_version": version, "gpuready_driver_branch": branch}
    preflight = {} if opt_in is None else {"gpu_preflight_precompiled_modules": opt_in}
    scope = _scope("nvidia_driver", facts, **pins, **preflight, **variables)
    if _template(scope["nvidia_driver_precompiled"], scope):
        scope.update(trusted(_load(_PRECOMPILED_VARS)))
        scope.update(trusted(variables))
    return scope


def _requested(scope: Mapping[str, Any]) -> list[str]:
    """Every package name the role asks apt for on this scope (specs stripped of versions)."""
    names = list(_template(scope["nvidia_driver_packages"], scope))
    names += _template(scope["nvidia_driver_optional_packages"], scope)
    names += _template(scope["nvidia_driver_unversioned_packages"], scope)
    pinning = _template(scope["nvidia_driver_os_pinning_package"], scope)
    return names + ([pinning] if pinning else [])


def _is_canonical(name: str) -> bool:
    """§2b: Canonical's archive names carry -server (user space) or are its modules packages."""
    return name.endswith("-server") or name.startswith("linux-modules-nvidia-")


def test_main_loads_the_precompiled_map_over_the_distributions() -> None:
    """The helper above mirrors the role: the precompiled map comes right after the other."""
    tasks = _load(ROLES_DIR / "nvidia_driver" / "tasks" / "main.yml")
    names = [task["name"] for task in tasks]
    load = names.index("Load the package map of this distribution")
    task = tasks[load + 1]
    assert task["ansible.builtin.include_vars"]["file"] == (
        "{{ role_path }}/vars/Ubuntu-precompiled.yml"
    )
    assert task["when"] == "nvidia_driver_precompiled | bool"
    scope = _scope("nvidia_driver", UBUNTU_2404, gpu_preflight_precompiled_modules=True)
    assert _template(scope["nvidia_driver_precompiled"], scope) is True
    # gpu_preflight refuses the opt-in elsewhere; a stray fact changes nothing on Debian.
    scope = _scope("nvidia_driver", DEBIAN_12, gpu_preflight_precompiled_modules=True)
    assert _template(scope["nvidia_driver_precompiled"], scope) is False


@pytest.mark.parametrize("version", _PRECOMPILED_VERSIONS)
@pytest.mark.parametrize("facts", _UBUNTUS, ids=["22.04", "24.04"])
@pytest.mark.parametrize("flavour", ["open", "proprietary"])
def test_precompiled_opt_in_installs_signed_modules_and_server_user_space(
    version: str, facts: Mapping[str, str], flavour: str
) -> None:
    """§2b: the signed modules meta gpu_preflight named plus nvidia-utils-<br>-server at
    Canonical's <ver>-0ubuntu0*, and nothing of the CUDA repo's DKMS set."""
    branch = version.split(".", maxsplit=1)[0]
    kernel_flavour = facts["kernel"].rsplit("-", maxsplit=1)[1]
    scope = _precompiled_scope(facts, version, nvidia_driver_flavour=flavour)
    open_suffix = "-open" if flavour == "open" else ""
    modules = f"linux-modules-nvidia-{branch}-server{open_suffix}-{kernel_flavour}"
    # The name is gpu_preflight's own fact, not a second derivation of it.
    assert _template(scope["gpu_preflight_precompiled_modules_package"], scope).strip() == modules
    assert _template(scope["nvidia_driver_unversioned_packages"], scope) == [modules]
    assert _template(scope["nvidia_driver_packages"], scope) == [f"nvidia-utils-{branch}-server"]
    assert _template(scope["nvidia_driver_optional_packages"], scope) == [
        f"libnvidia-compute-{branch}-server",
        f"nvidia-compute-utils-{branch}-server",
    ]
    requested = _requested(scope)
    assert [name for name in requested if "dkms" in name] == []
    cuda_repo = set(_requested(_precompiled_scope(facts, version, opt_in=False)))
    for flavour_set in _FLAVOURS_SETS:
        variables = dict(zip(("nvidia_driver_flavour", "nvidia_driver_package_set"), flavour_set))
        cuda_repo |= set(_requested(_precompiled_scope(facts, version, False, **variables)))
    assert cuda_repo.isdisjoint(requested), cuda_repo & set(requested)
    # Canonical's revision, matched by the upstream version; never the CUDA repo's -0ubuntu1.
    specs = _template(scope["nvidia_driver_package_specs"], scope)
    assert specs == [f"nvidia-utils-{branch}-server={version}-0ubuntu0*"]
    assert _template(scope["nvidia_driver_apt_pin_version"], scope) == f"{version}-0ubuntu0*"
    assert _template(scope["nvidia_driver_pinning_spec"], scope) == ""
    assert _template(scope["nvidia_driver_os_apt_preferences"], scope) is True
    assert _template(scope["nvidia_driver_os_build_packages"], scope) == []
    full = _precompiled_scope(
        facts, version, nvidia_driver_flavour=flavour, nvidia_driver_package_set="full"
    )
    assert _template(full["nvidia_driver_packages"], full) == [
        f"{name}-{branch}-server"
        for name in (
            "nvidia-utils",
            "libnvidia-decode",
            "libnvidia-extra",
            "libnvidia-encode",
            "libnvidia-gl",
            "libnvidia-fbc1",
        )
    ]


@pytest.mark.parametrize("version", _PRECOMPILED_VERSIONS)
@pytest.mark.parametrize("opt_in", [False, None], ids=["declined", "no-preflight"])
def test_without_the_opt_in_the_cuda_repo_set_is_unchanged(
    version: str, opt_in: bool | None
) -> None:
    for flavour, package_set in _FLAVOURS_SETS:
        variables = {"nvidia_driver_flavour": flavour, "nvidia_driver_package_set": package_set}
        scope = _precompiled_scope(UBUNTU_2404, version, opt_in, **variables)
        for name in (
            "nvidia_driver_packages",
            "nvidia_driver_optional_packages",
            "nvidia_driver_package_specs",
            "nvidia_driver_pinning_spec",
            "nvidia_driver_os_apt_preferences",
            "nvidia_driver_os_build_packages",
        ):
            assert _template(scope[name], scope) == _driver(UBUNTU_2404, name, version, **variables)
        assert _template(scope["nvidia_driver_unversioned_packages"], scope) == []
        assert _template(scope["nvidia_driver_apt_pin_version"], scope) == f"{version}-*"
        assert not any(_is_canonical(name) for name in _requested(scope))


@pytest.mark.parametrize("version", _PRECOMPILED_VERSIONS)
@pytest.mark.parametrize("opt_in", [True, False])
def test_canonical_and_cuda_repo_driver_sets_are_never_requested_together(
    version: str, opt_in: bool
) -> None:
    """§2b: "Do not mix the Canonical and CUDA-repo names on one host"."""
    for facts in _UBUNTUS:
        for flavour, package_set in _FLAVOURS_SETS:
            variables = {"nvidia_driver_flavour": flavour, "nvidia_driver_package_set": package_set}
            requested = _requested(_precompiled_scope(facts, version, opt_in, **variables))
            kinds = {_is_canonical(name) for name in requested}
            assert kinds == {opt_in}, (flavour, package_set, requested)


def _debian_task(name: str) -> dict[str, Any]:
    """The task of nvidia_driver's tasks/debian.yml named ``name``."""
    tasks: list[dict[str, Any]] = _load(ROLES_DIR / "nvidia_driver" / "tasks" / "debian.yml")
    return next(task for task in tasks if task["name"] == name)


def _with_task_vars(scope: dict[str, Any], task: Mapping[str, Any], **state: Any) -> dict[str, Any]:
    """``scope`` with the task's own vars and the registered results in ``state``."""
    return {**scope, **trusted(task.get("vars", {})), **state}


def test_precompiled_path_installs_no_headers_or_dkms_and_resolves_the_install_list() -> None:
    installed = {"linux-image-generic": [{"version": "6.8.0-45.45"}], "bash": [{"version": "5.2"}]}
    state = {
        "ansible_facts": {**_UBUNTUS[1], "packages": installed},
        "nvidia_driver_boot_kernel": _UBUNTU_KERNEL,
        "nvidia_driver_optional_found": ["libnvidia-compute-580-server"],
    }
    needs = _debian_task("Work out what the driver pin needs")
    scope = _with_task_vars(_precompiled_scope(_UBUNTUS[1], "580.95.05"), needs, **state)
    facts = needs["ansible.builtin.set_fact"]
    assert _template(facts["nvidia_driver_build_wanted"], scope) == []
    assert "linux-modules-nvidia-580-server-open-generic" in _template(
        facts["nvidia_driver_kernel_candidates"], scope
    )
    scope["nvidia_driver_at_pin"] = []
    missing = _debian_task("Record which driver packages are missing")["ansible.builtin.set_fact"]
    assert _template(missing["nvidia_driver_missing"], scope) == [
        "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-open-generic",
    ]
    install = _debian_task("Install the NVIDIA driver at the pinned version")
    assert _template(install["ansible.builtin.apt"]["name"], scope) == [
        "nvidia-utils-580-server=580.95.05-0ubuntu0*",
        "libnvidia-compute-580-server=580.95.05-0ubuntu0*",
        "linux-modules-nvidia-580-server-open-generic",
    ]
    # The default path still builds with DKMS and the headers (unchanged).
    default = _with_task_vars(_precompiled_scope(_UBUNTUS[1], "580.95.05", False), needs, **state)
    assert _template(facts["nvidia_driver_build_wanted"], default)[0] == "dkms"
    assert _template(install["ansible.builtin.apt"]["name"], default) == [
        "libnvidia-compute-580=580.95.05-0ubuntu1",
        "nvidia-dkms-580-open=580.95.05-0ubuntu1",
        "nvidia-utils-580=580.95.05-0ubuntu1",
        "nvidia-compute-utils-580=580.95.05-0ubuntu1",
        "libnvidia-compute-580-server=580.95.05-0ubuntu1",
    ]


def test_precompiled_apt_preferences_pin_canonicals_revision() -> None:
    content = _debian_task("Pin the driver packages to the exact version")["ansible.builtin.copy"][
        "content"
    ]
    scope = _precompiled_scope(_UBUNTUS[1], "580.95.05")
    assert "Pin: version 580.95.05-0ubuntu0*\n" in _template(content, scope)
    default = _precompiled_scope(_UBUNTUS[1], "580.95.05", None)
    assert "Pin: version 580.95.05-*\n" in _template(content, default)


_MADISON = [
    " nvidia-utils-580-server | 580.95.05-0ubuntu0.24.04.2 | http://archive.ubuntu.com/ubuntu "
    "noble-updates/restricted amd64 Packages",
    " nvidia-utils-580-server | 580.65.06-0ubuntu0.24.04.1 | http://archive.ubuntu.com/ubuntu "
    "noble/restricted amd64 Packages",
    "libnvidia-compute-580-server | 580.95.05-0ubuntu0.24.04.2 | http://archive.ubuntu.com/ubuntu "
    "noble-updates/restricted amd64 Packages",
]


@pytest.mark.parametrize(
    ("version", "unbuilt", "found"),
    [
        ("580.95.05", [], ["libnvidia-compute-580-server"]),
        ("580.65.06", [], []),
        ("580.105.08", ["nvidia-utils-580-server"], []),
    ],
)
def test_precompiled_pin_must_have_a_build_in_canonicals_archive(
    version: str, unbuilt: list[str], found: list[str]
) -> None:
    record = _debian_task("Record which driver packages the archive has at the pinned version")
    state = {"nvidia_driver_madison": {"stdout_lines": _MADISON}, "nvidia_driver_at_pin": []}
    scope = _with_task_vars(_precompiled_scope(_UBUNTUS[1], version), record, **state)
    facts = record["ansible.builtin.set_fact"]
    assert _template(facts["nvidia_driver_precompiled_unbuilt"], scope) == unbuilt
    assert _template(facts["nvidia_driver_optional_found"], scope) == found
    check = _debian_task("Assert the archive has the pinned driver version")[
        "ansible.builtin.assert"
    ]
    scope["nvidia_driver_madison_builds"] = _template(facts["nvidia_driver_madison_builds"], scope)
    scope["nvidia_driver_precompiled_unbuilt"] = unbuilt
    message = _template(check["fail_msg"], scope)
    assert "nvidia-utils-580-server=580.95.05-0ubuntu0.24.04.2" in message
    assert "gpuready_driver_version" in message
    assert "mokutil --import" in message


def test_precompiled_path_refuses_installed_dkms_packages() -> None:
    task = _debian_task("Refuse DKMS driver packages on the signed precompiled path")
    assert task["when"] == "nvidia_driver_precompiled | bool"
    installed = {"nvidia-dkms-580-open": [{"version": "580.95.05-0ubuntu1"}], "bash": [{}]}
    scope = _with_task_vars(
        _precompiled_scope(_UBUNTUS[1], "580.95.05"),
        task,
        ansible_facts={**_UBUNTUS[1], "packages": installed},
    )
    assert _template(task["vars"]["nvidia_driver_dkms_installed"], scope) == [
        "nvidia-dkms-580-open"
    ]
    assert "apt-get purge nvidia-dkms-580-open" in _template(
        task["ansible.builtin.assert"]["fail_msg"], scope
    )


@pytest.mark.parametrize("version", ["550.90.07", "580.105.08", "590.48.01", "595.91.07"])
def test_debian_map_never_names_a_branch_suffixed_package(version: str) -> None:
    """§0 key fact 3: Debian's CUDA repo has never used branch-suffixed driver names."""
    branch = version.split(".", maxsplit=1)[0]
    for flavour, package_set in _FLAVOURS_SETS:
        variables = {"nvidia_driver_flavour": flavour, "nvidia_driver_package_set": package_set}
        names = _driver(DEBIAN_12, "nvidia_driver_packages", version, **variables)
        names += _driver(DEBIAN_12, "nvidia_driver_optional_packages", version, **variables)
        for name in names:
            assert branch not in name, name
            assert not re.search(r"-[0-9]{3}(-open)?$", name), name
            assert not name.startswith("nvidia-driver-5"), name
        for spec in _driver(DEBIAN_12, "nvidia_driver_package_specs", version, **variables):
            assert spec.endswith(f"={version}-1"), spec
    compute = _driver(DEBIAN_12, "nvidia_driver_packages", version)
    # §2c compute-only, open (idx:61202362552); the Debian archive's nvidia-open-kernel-dkms never.
    assert compute == ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "libcuda1"]


@pytest.mark.parametrize(
    ("facts", "release", "stream"),
    [
        (_facts("Rocky", "8.10"), "el8", "580-open"),
        (ROCKY_9, "el9", "580-open"),
        (RHEL_10, "el10", ""),
    ],
)
def test_rhel_specs_carry_epoch_3_and_the_el_release(
    facts: Mapping[str, str], release: str, stream: str
) -> None:
    """§0: epoch 3 and -1.el<N>; §2d/§2e: streams on 8/9, versionlock only on 10."""
    version = "580.105.08"
    specs = _driver(facts, "nvidia_driver_package_specs", version)
    assert "kmod-nvidia-open-dkms-3:580.105.08-1." + release in specs
    assert all(spec.endswith(f"-3:{version}-1.{release}") for spec in specs), specs
    assert "nvidia-driver" not in _driver(facts, "nvidia_driver_packages", version)  # no X driver
    assert _driver(facts, "nvidia_driver_os_module_stream", version) == stream
    proprietary = {"nvidia_driver_flavour": "proprietary"}
    assert _driver(facts, "nvidia_driver_os_module_stream", version, **proprietary) == (
        "580-dkms" if stream else ""
    )
    assert "kmod-nvidia-latest-dkms" in _driver(
        facts, "nvidia_driver_packages", version, **proprietary
    )
    assert _driver(facts, "nvidia_driver_os_versionlock_patterns", version) == [
        f"*nvidia*-{version}-*"
    ]


def test_driver_installs_without_recommends() -> None:
    defaults = _load(ROLES_DIR / "nvidia_driver" / "defaults" / "main.yml")
    assert defaults["nvidia_driver_install_recommends"] is False
    assert defaults["nvidia_driver_package_set"] == "compute"
    installs = 0
    for path in sorted((ROLES_DIR / "nvidia_driver" / "tasks").glob("*.yml")):
        for task in _walk(_load(path)):
            if task.get("name", "").startswith("Install the NVIDIA driver at"):
                args = task.get("ansible.builtin.apt") or task.get("ansible.builtin.dnf") or {}
                key = "install_recommends" if "ansible.builtin.apt" in task else "install_weak_deps"
                assert "nvidia_driver_install_recommends" in args[key], _label(path, task)
                installs += 1
    assert installs == 2


@pytest.mark.parametrize(
    ("facts", "kernel", "meta"),
    [
        (UBUNTU_2204, "5.15.0-100-generic", "linux-headers-generic"),
        (UBUNTU_2404, "6.8.0-1015-aws", "linux-headers-aws"),
        (UBUNTU_2404, "6.18.44-fc-v1045", "linux-headers-generic"),
        (DEBIAN_12, "6.1.0-18-amd64", "linux-headers-amd64"),
        (DEBIAN_12, "6.1.0-18-cloud-amd64", "linux-headers-cloud-amd64"),
        (_facts("Debian", "12", "aarch64"), "6.18.44-fc-v1045", "linux-headers-arm64"),
    ],
)
def test_kernel_headers_meta_per_distribution(
    facts: Mapping[str, str], kernel: str, meta: str
) -> None:
    facts = {**facts, "kernel": kernel}
    assert _driver(facts, "nvidia_driver_os_headers_meta", "550.90.07") == meta


def test_rhel_never_installs_kernel_devel_matched() -> None:
    """On EL9 kernel-devel-matched pulls the newest kernel: devel for the two kernels instead."""
    for facts in (_facts("Rocky", "8.10"), ROCKY_9, RHEL_10):
        assert "kernel-devel-matched" not in _driver(
            facts, "nvidia_driver_os_build_packages", "550.90.07"
        )
    tasks = {t["name"]: t for t in _load(ROLES_DIR / "nvidia_driver" / "tasks" / "redhat.yml")}
    names = tasks["Install kernel headers and DKMS"]["ansible.builtin.dnf"]["name"]
    assert "'kernel-devel-' ~ ansible_facts.kernel" in names
    assert "'kernel-devel-' ~ nvidia_driver_boot_kernel" in names


def test_default_boot_kernel_is_the_newest_installed_on_debian() -> None:
    tasks = {t["name"]: t for t in _load(ROLES_DIR / "nvidia_driver" / "tasks" / "main.yml")}
    task = tasks["Record the default boot kernel"]
    files = ["6.1.0-9-amd64", "6.1.0-18-amd64", "6.1.0-17-amd64"]
    scope = _scope(
        "nvidia_driver",
        DEBIAN_12,
        nvidia_driver_boot_images={"files": [{"path": f"/boot/vmlinuz-{k}"} for k in files]},
    )
    scope.update({key: _template(value, scope) for key, value in task["vars"].items()})
    rendered = _template(task["ansible.builtin.set_fact"]["nvidia_driver_boot_kernel"], scope)
    assert rendered.strip() == "6.1.0-18-amd64"
    empty = _scope("nvidia_driver", DEBIAN_12, nvidia_driver_boot_images={"files": []})
    empty.update({key: _template(value, empty) for key, value in task["vars"].items()})
    fallback = _template(task["ansible.builtin.set_fact"]["nvidia_driver_boot_kernel"], empty)
    assert fallback.strip() == DEBIAN_12["kernel"]


# ---------------------------------------------------------------- reboot decided by state


def _reboot_decision(**state: Any) -> dict[str, Any]:
    """The facts tasks/reboot.yml's first task sets, for a given host state."""
    task = _load(ROLES_DIR / "nvidia_driver" / "tasks" / "reboot.yml")[0]
    scope = _scope("nvidia_driver", DEBIAN_12)
    scope.update(
        {
            "nvidia_driver_install": {"changed": False},
            "nvidia_driver_options": {"changed": False},
            "nvidia_driver_blacklist": {"changed": False},
            "nvidia_driver_nouveau_loaded": {"stat": {"exists": False}},
            "nvidia_driver_marker": {},
            "nvidia_driver_loaded_version": "none",
            "gpu_preflight_gpu_count": 0,
            "inventory_hostname": "gpu-01",
        }
    )
    scope.update(state)
    for key, value in task["vars"].items():
        scope[key] = _template(value, scope)
    return {key: _template(value, scope) for key, value in task["ansible.builtin.set_fact"].items()}


def test_gpu_host_with_another_module_loaded_needs_a_reboot_without_any_change() -> None:
    """A run that installed the driver and failed later: the next run still reboots."""
    decided = _reboot_decision(gpu_preflight_gpu_count=8, nvidia_driver_loaded_version="535.183.01")
    assert decided["nvidia_driver_reboot_reasons"] == [
        "loaded NVIDIA module is 535.183.01, pinned 550.90.07"
    ]


def test_converged_gpu_host_needs_no_reboot() -> None:
    decided = _reboot_decision(gpu_preflight_gpu_count=8, nvidia_driver_loaded_version="550.90.07")
    assert decided["nvidia_driver_reboot_reasons"] == []
    assert decided["nvidia_driver_initramfs_pending"] is False


def test_package_change_on_a_host_without_gpu_stays_marked_until_a_reboot() -> None:
    first = _reboot_decision(nvidia_driver_install={"changed": True})
    assert first["nvidia_driver_reboot_reasons"] == ["driver packages changed"]
    # Next run, same boot: nothing changed now, the marker keeps it pending.
    marker = {"boot_id": "b1", "pending": first["nvidia_driver_pending_changes"]}
    again = _reboot_decision(nvidia_driver_marker=marker)
    assert again["nvidia_driver_reboot_reasons"] == ["driver packages changed"]
    # A GPU host judges packages by the loaded module, not by the change.
    gpu = _reboot_decision(
        gpu_preflight_gpu_count=8,
        nvidia_driver_loaded_version="550.90.07",
        nvidia_driver_install={"changed": True},
    )
    assert gpu["nvidia_driver_reboot_reasons"] == []


def test_module_options_change_needs_initramfs_and_reboot_even_where_the_pin_runs() -> None:
    decided = _reboot_decision(
        gpu_preflight_gpu_count=8,
        nvidia_driver_loaded_version="550.90.07",
        nvidia_driver_options={"changed": True},
    )
    assert decided["nvidia_driver_reboot_reasons"] == ["nvidia module options changed"]
    assert decided["nvidia_driver_initramfs_pending"] is True
    nouveau = _reboot_decision(
        gpu_preflight_gpu_count=1,
        nvidia_driver_loaded_version="550.90.07",
        nvidia_driver_nouveau_loaded={"stat": {"exists": True}},
    )
    assert nouveau["nvidia_driver_reboot_reasons"] == ["nouveau is loaded"]


def test_marker_from_an_earlier_boot_is_discarded() -> None:
    tasks = {t["name"]: t for t in _load(ROLES_DIR / "nvidia_driver" / "tasks" / "main.yml")}
    task = tasks["Record the loaded module and what is pending from earlier runs of this boot"]
    marker = '{"boot_id": "old", "pending": ["driver packages changed"], "initramfs": true}'
    for boot, expected in (("old", ["driver packages changed"]), ("new", None)):
        scope = _scope(
            "nvidia_driver",
            DEBIAN_12,
            nvidia_driver_marker_content={"content": base64.b64encode(marker.encode()).decode()},
            nvidia_driver_boot_id_file={"content": base64.b64encode(f"{boot}\n".encode()).decode()},
            nvidia_driver_proc_version={"content": ""},
        )
        scope.update({key: _template(value, scope) for key, value in task["vars"].items()})
        kept = _template(task["ansible.builtin.set_fact"]["nvidia_driver_marker"], scope)
        assert kept.get("pending") == expected, boot


def test_reboot_is_a_task_with_a_boot_kernel_check_and_an_hgx_timeout() -> None:
    defaults = _load(ROLES_DIR / "nvidia_driver" / "defaults" / "main.yml")
    assert defaults["nvidia_driver_reboot_timeout"] == 1800
    assert defaults["nvidia_driver_reboot_marker"] == "/var/lib/gpuready/reboot-required"
    handlers = _load(ROLES_DIR / "nvidia_driver" / "handlers" / "main.yml")
    assert not any(_module(h) == "ansible.builtin.reboot" for h in handlers)
    reboot = _load(ROLES_DIR / "nvidia_driver" / "tasks" / "reboot.yml")
    block = next(task for task in reboot if task["name"] == "Reboot for the NVIDIA driver")
    modules = [_module(task) for task in block["block"]]
    # The boot kernel's module is checked before the reboot, never after.
    assert modules.index("ansible.builtin.assert") < modules.index("ansible.builtin.reboot")
    assert block["block"][0]["ansible.builtin.command"]["argv"][:2] == ["modinfo", "-k"]
    marks = [t for t in reboot if t["name"] == "Mark the host for a reboot"]
    assert marks
    assert "nvidia_driver_reboot_marker" in marks[0]["ansible.builtin.copy"]["dest"]


# ---------------------------------------------------------------- repository, runtime: idempotence


def _task(role: str, file: str, name: str) -> dict[str, Any]:
    for task in _walk(_load(ROLES_DIR / role / "tasks" / file)):
        if task.get("name") == name:
            return task
    raise AssertionError(f"{role}/tasks/{file}: no task {name!r}")


@pytest.mark.parametrize(
    ("installed", "needed"),
    [(None, True), ("1.0-1", True), ("1.1-1", False), ("1.1-2", False), ("1.2-1", False)],
)
def test_keyring_is_installed_only_below_the_pinned_version(
    installed: str | None, needed: bool
) -> None:
    """`apt: deb=cuda-keyring_1.1-1` fails once apt has upgraded the keyring."""
    task = _task(
        "cuda_repository", "debian.yml", "Record whether the CUDA keyring must be installed"
    )
    packages = {"cuda-keyring": [{"version": installed}]} if installed else {}
    scope = _scope("cuda_repository", DEBIAN_12)
    scope["ansible_facts"]["packages"] = packages
    value = task["ansible.builtin.set_fact"]["cuda_repository_keyring_needed"]
    assert _template(value, scope) is needed
    block = _task("cuda_repository", "debian.yml", "Install the CUDA keyring package")
    assert block["when"] == "cuda_repository_keyring_needed | bool"
    assert any(
        "ansible.builtin.apt" in t and "deb" in t["ansible.builtin.apt"] for t in block["block"]
    )


def test_debian_12_enables_contrib() -> None:
    block = _task(
        "cuda_repository", "debian.yml", "Enable the contrib component in Debian's sources"
    )
    assert "ansible_facts.distribution == 'Debian'" in block["when"]
    regexps = [
        t["ansible.builtin.replace"]["regexp"]
        for t in block["block"]
        if "ansible.builtin.replace" in t
    ]
    one_line, deb822 = (re.compile(r, re.M) for r in regexps)
    text = "deb http://deb.debian.org/debian bookworm main\ndeb http://x bookworm main contrib\n"
    once = one_line.sub(r"\1 contrib", text)
    assert once.splitlines() == [
        "deb http://deb.debian.org/debian bookworm main contrib",
        "deb http://x bookworm main contrib",
    ]
    assert one_line.sub(r"\1 contrib", once) == once
    assert deb822.sub(r"\1 contrib", "Components: main\n") == "Components: main contrib\n"


def test_epel_is_fetched_only_where_it_is_not_installed() -> None:
    probe = _task("cuda_repository", "redhat.yml", "Check whether EPEL is installed")
    assert probe["ansible.builtin.command"]["argv"] == ["rpm", "-q", "epel-release"]
    assert probe["check_mode"] is False
    block = _task("cuda_repository", "redhat.yml", "Install EPEL (DKMS)")
    assert "cuda_repository_epel_rpm.rc | default(0) != 0" in block["when"]
    inner = {t["name"]: t for t in block["block"]}
    assert (
        inner["Install the EPEL release package"]["when"]
        == "cuda_repository_epel_mirror_url | length == 0"
    )
    mirror = inner["Configure the EPEL mirror"]["ansible.builtin.yum_repository"]
    assert mirror["baseurl"] == "{{ cuda_repository_epel_mirror_url }}"


def test_nvidia_ctk_names_the_config_and_restarts_only_on_a_new_digest() -> None:
    ctk = _task("container_toolkit", "main.yml", "Register the NVIDIA runtime")
    argv = ctk["ansible.builtin.command"]["argv"]
    assert "--config={{ container_toolkit_runtime_config }}" in argv
    assert "notify" not in ctk
    restart = _task(
        "container_toolkit",
        "main.yml",
        "Restart the container runtime when its configuration changed",
    )
    assert restart["notify"] == "Restart the container runtime"
    assert any("checksum" in condition for condition in restart["when"])


@pytest.mark.parametrize(
    ("facts", "packages"),
    [
        (DEBIAN_12, ["cudnn9-cuda-12", "libcudnn9-cuda-12"]),
        (UBUNTU_2404, ["cudnn9-cuda-12", "libcudnn9-cuda-12"]),
        (ROCKY_9, ["libcudnn9-cuda-12", "libcudnn9-devel-cuda-12"]),
    ],
)
def test_cudnn_packages_per_distribution_follow_the_toolkit_major(
    facts: Mapping[str, str], packages: list[str]
) -> None:
    """§4 cuDNN 9: deb meta + runtime; rpm runtime + devel (no rpm meta in the reference)."""
    scope = _scope("cudnn", facts, gpuready_cudnn_version="9.1.0", gpuready_nvcc_version="12.4")
    assert _template(scope["cudnn_packages"], scope) == packages
    family = _template(scope["cudnn_family_pattern"], scope)
    assert re.match(family, "libcudnn9-dev-cuda-12")
    assert re.match(family, "libcudnn9-devel-cuda-12")
    assert not re.match(family, "libcudnn9-cuda-11")
