"""gpuready_driver_source: the driver from NVIDIA's CUDA repository or the distribution's archive.

The role's own templates rendered by Ansible, as tasks/main.yml loads them: the
distribution's vars file, then (source ``distribution``) Debian's archive map over it on
Debian, or Canonical's precompiled map on Ubuntu. What the real Debian packages do on a
real host (their module name, their DKMS build) is tests/e2e/test_provision_debian_driver.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.ansible_trust import trusted
from tests.playbooks.test_playbooks import (
    DEBIAN_12,
    ROCKY_9,
    ROLES_DIR,
    UBUNTU_2404,
    _debian_task,
    _facts,
    _load,
    _scope,
    _template,
    _with_task_vars,
)

_USER_SPACE = ["nvidia-smi", "libcuda1", "libnvidia-ml1"]
_VARS = ROLES_DIR / "nvidia_driver" / "vars"
_MAIN_TASKS = ROLES_DIR / "nvidia_driver" / "tasks" / "main.yml"
# `apt-cache madison nvidia-kernel-dkms libcuda1` against Debian 12's own archive (with
# contrib, non-free and non-free-firmware), 2026-12-06.
_DEBIAN_MADISON = [
    "nvidia-kernel-dkms | 535.261.03-1 | http://deb.debian.org/debian bookworm/non-free amd64 "
    "Packages",
    "  libcuda1 | 535.261.03-1 | http://deb.debian.org/debian bookworm/non-free amd64 Packages",
]


def _source_scope(
    facts: Mapping[str, str], version: str, source: str, **variables: Any
) -> dict[str, Any]:
    """The driver role's scope for ``source``, with the maps tasks/main.yml loads over."""
    branch = version.split(".", maxsplit=1)[0]
    pins = {
        "gpuready_driver_version": version,
        "gpuready_driver_branch": branch,
        "gpuready_driver_source": source,
    }
    scope = _scope("nvidia_driver", facts, **pins, **variables)
    if _template(scope["nvidia_driver_precompiled"], scope):
        scope.update(trusted(_load(_VARS / "Ubuntu-precompiled.yml")))
    if _template(scope["nvidia_driver_debian_archive"], scope):
        scope.update(trusted(_load(_VARS / "Debian-distribution.yml")))
    scope.update(trusted(variables))
    return scope


def _main_task(name: str) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = _load(_MAIN_TASKS)
    return next(task for task in tasks if task["name"] == name)


def test_the_source_defaults_to_nvidia_and_is_asserted() -> None:
    scope = _scope("nvidia_driver", DEBIAN_12)
    assert _template(scope["nvidia_driver_source"], scope) == "nvidia"
    check = _main_task("Assert the driver settings are valid")["ansible.builtin.assert"]
    assert "nvidia_driver_source in ['nvidia', 'distribution']" in check["that"]
    scope["nvidia_driver_source"] = "debian"
    assert "gpuready_driver_source must be nvidia or distribution (got debian)" in _template(
        check["fail_msg"], scope
    )


def test_main_loads_debians_archive_map_only_for_the_distribution_source_on_debian() -> None:
    task = _main_task("Load Debian's own archive map over the CUDA repository's")
    assert task["ansible.builtin.include_vars"]["file"] == (
        "{{ role_path }}/vars/Debian-distribution.yml"
    )
    assert task["when"] == "nvidia_driver_debian_archive | bool"
    for facts, source, expected in [
        (DEBIAN_12, "distribution", True),
        (_facts("Debian", "13"), "distribution", True),
        (DEBIAN_12, "nvidia", False),
        (UBUNTU_2404, "distribution", False),
    ]:
        scope = _scope("nvidia_driver", facts, gpuready_driver_source=source)
        assert _template(scope["nvidia_driver_debian_archive"], scope) is expected, (facts, source)


@pytest.mark.parametrize(
    ("flavour", "package_set", "packages", "module"),
    [
        ("proprietary", "compute", ["nvidia-kernel-dkms", *_USER_SPACE], "nvidia-current"),
        ("open", "compute", ["nvidia-open-kernel-dkms", *_USER_SPACE], "nvidia-current-open"),
        ("proprietary", "full", ["nvidia-driver", "nvidia-kernel-dkms"], "nvidia-current"),
        ("open", "full", ["nvidia-driver", "nvidia-open-kernel-dkms"], "nvidia-current-open"),
    ],
)  # fmt: skip
def test_debians_archive_installs_its_own_names_at_any_debian_revision(
    flavour: str, package_set: str, packages: list[str], module: str
) -> None:
    scope = _source_scope(
        DEBIAN_12,
        "535.261.03",
        "distribution",
        nvidia_driver_flavour=flavour,
        nvidia_driver_package_set=package_set,
    )
    assert _template(scope["nvidia_driver_packages"], scope) == packages
    # §0: Debian's revisions (-1 in a point release, -1~deb12u1 in an update) both match.
    assert _template(scope["nvidia_driver_package_specs"], scope) == [
        f"{name}=535.261.03-*" for name in packages
    ]
    assert _template(scope["nvidia_driver_unversioned_packages"], scope) == ["nvidia-persistenced"]
    assert _template(scope["nvidia_driver_module_name"], scope) == module
    assert _template(scope["nvidia_driver_archive_checked"], scope) is True
    assert _template(scope["nvidia_driver_pinning_spec"], scope) == ""
    # NVIDIA's own names never: §2c's naming trap, nvidia-kernel-open-dkms is the CUDA repo's.
    assert "nvidia-kernel-open-dkms" not in packages
    assert "nvidia-driver-cuda" not in packages


def test_nvidias_repository_keeps_its_names_and_the_module_called_nvidia() -> None:
    scope = _source_scope(DEBIAN_12, "550.90.07", "nvidia", nvidia_driver_flavour="proprietary")
    assert _template(scope["nvidia_driver_package_specs"], scope) == [
        "nvidia-driver-cuda=550.90.07-1",
        "nvidia-kernel-dkms=550.90.07-1",
        "libcuda1=550.90.07-1",
    ]
    assert _template(scope["nvidia_driver_module_name"], scope) == "nvidia"
    assert _template(scope["nvidia_driver_archive_checked"], scope) is False


def test_ubuntus_distribution_source_is_canonicals_archive_with_signed_modules() -> None:
    facts = {**UBUNTU_2404, "kernel": "6.8.0-45-generic"}
    # No Secure Boot opt-in: the source alone chooses Canonical's archive.
    scope = _source_scope(
        facts, "580.95.05", "distribution", gpu_preflight_precompiled_modules=False
    )
    assert _template(scope["nvidia_driver_precompiled"], scope) is True
    assert _template(scope["nvidia_driver_packages"], scope) == ["nvidia-utils-580-server"]
    assert _template(scope["nvidia_driver_unversioned_packages"], scope) == [
        "linux-modules-nvidia-580-server-open-generic"
    ]
    assert _template(scope["nvidia_driver_module_name"], scope) == "nvidia"
    assert _template(scope["nvidia_driver_archive_checked"], scope) is True


def test_gpu_preflight_takes_canonicals_modules_for_ubuntus_distribution_source() -> None:
    tasks: list[dict[str, Any]] = _load(ROLES_DIR / "gpu_preflight" / "tasks" / "secure_boot.yml")
    task = next(t for t in tasks if t["name"] == "Record whether DKMS-built modules can load")
    value = task["ansible.builtin.set_fact"]["gpu_preflight_precompiled_modules"]
    assert value.rstrip().endswith("or gpu_preflight_canonical_driver | bool }}")
    for facts, source, expected in [
        (UBUNTU_2404, "distribution", True),
        (UBUNTU_2404, "nvidia", False),
        (DEBIAN_12, "distribution", False),
    ]:
        scope = _scope("gpu_preflight", facts, gpuready_driver_source=source)
        assert _template(scope["gpu_preflight_canonical_driver"], scope) is expected, (
            facts,
            source,
        )


def test_rhel_has_no_driver_of_its_own() -> None:
    check = _main_task("Refuse the distribution's driver where the distribution has none")
    scope = _scope("nvidia_driver", ROCKY_9, gpuready_driver_source="distribution")
    assert _template("{{ " + check["ansible.builtin.assert"]["that"][0] + " }}", scope) is False
    assert "set gpuready_driver_source: nvidia" in _template(
        check["ansible.builtin.assert"]["fail_msg"], scope
    )
    scope = _scope("nvidia_driver", DEBIAN_12, gpuready_driver_source="distribution")
    assert _template("{{ " + check["ansible.builtin.assert"]["that"][0] + " }}", scope) is True


@pytest.mark.parametrize(
    ("version", "unbuilt"),
    [("535.261.03", []), ("535.247.01", ["nvidia-kernel-dkms", "libcuda1"])],
)
def test_debians_archive_must_have_the_pinned_version(version: str, unbuilt: list[str]) -> None:
    ask = _debian_task("Ask the distribution's archive which builds of the driver packages it has")
    assert "nvidia_driver_archive_checked | bool" in ask["when"]
    record = _debian_task("Record which driver packages the archive has at the pinned version")
    scope = _source_scope(
        DEBIAN_12,
        version,
        "distribution",
        nvidia_driver_flavour="proprietary",
        nvidia_driver_packages=["nvidia-kernel-dkms", "libcuda1"],
    )
    state = {"nvidia_driver_madison": {"stdout_lines": _DEBIAN_MADISON}, "nvidia_driver_at_pin": []}
    scope = _with_task_vars(scope, record, **state)
    facts = record["ansible.builtin.set_fact"]
    assert _template(facts["nvidia_driver_precompiled_unbuilt"], scope) == unbuilt
    check = _debian_task("Assert the archive has the pinned driver version")[
        "ansible.builtin.assert"
    ]
    scope["nvidia_driver_madison_builds"] = _template(facts["nvidia_driver_madison_builds"], scope)
    scope["nvidia_driver_precompiled_unbuilt"] = unbuilt
    message = " ".join(_template(check["fail_msg"], scope).split())
    assert message.startswith(f"Debian's archive has no {version} build of")
    assert "nvidia-kernel-dkms=535.261.03-1" in message
    assert "non-free-firmware" in message
    assert "gpuready_driver_source: nvidia" in message


def test_the_boot_kernel_check_and_its_advice_name_the_packages_module() -> None:
    tasks: list[dict[str, Any]] = _load(ROLES_DIR / "nvidia_driver" / "tasks" / "reboot.yml")
    block = next(t for t in tasks if t["name"] == "Reboot for the NVIDIA driver")["block"]
    scope = _source_scope(
        DEBIAN_12, "535.261.03", "distribution", nvidia_driver_flavour="proprietary"
    )
    scope.update(
        nvidia_driver_boot_kernel="6.1.0-50-amd64",
        nvidia_driver_boot_module={"rc": 1, "stdout": ""},
    )
    argv = _template(block[0]["ansible.builtin.command"]["argv"], scope)
    assert argv == ["modinfo", "-k", "6.1.0-50-amd64", "-F", "version", "nvidia-current"]
    message = " ".join(_template(block[1]["ansible.builtin.assert"]["fail_msg"], scope).split())
    assert "has no nvidia-current module, not 535.261.03" in message
    assert "/var/lib/dkms/nvidia-current/*/build/make.log" in message
