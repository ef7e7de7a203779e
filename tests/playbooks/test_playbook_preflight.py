"""gpu_preflight: Secure Boot before anything is installed, NVLink5 detection, the facts.

The parsers are the role's filter plugin (roles/gpu_preflight/filter_plugins/
gpu_preflight_probes.py), tested on mokutil's own answers. The role itself is run with
Ansible on localhost against a fake sysfs tree and a fake mokutil, so neither EFI nor an
InfiniBand device is needed. No real VPD dump was found; the VPD blob below is built in
the PCI VPD layout (large-resource ID string, then a VPD-R block) with the SW_MNG marker
that nvidia-packages.md §3 names as the NVLink5 signal.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.localhost_playbook import run_localhost_playbook

ROLES_DIR = Path(os.environ.get("GPUREADY_TEST_ROLES_DIR", REPO_ROOT / "playbooks" / "roles"))
PLUGIN = ROLES_DIR / "gpu_preflight" / "filter_plugins" / "gpu_preflight_probes.py"
# The four answers of `mokutil --sb-state` (the last two on hosts it cannot read).
SB_ENABLED = "SecureBoot enabled"
SB_DISABLED = "SecureBoot disabled"
SB_UNSUPPORTED = "This system doesn't support Secure Boot"
SB_NO_EFIVARS = "EFI variables are not supported on this system"
# efivarfs: 4 attribute bytes (NV|BS|RT = 0x06), then the value byte.
EFIVAR_ON = base64.b64encode(b"\x06\x00\x00\x00\x01").decode()
EFIVAR_OFF = base64.b64encode(b"\x06\x00\x00\x00\x00").decode()
# PCI VPD: 0x82 ID string, 0x90 VPD-R with keywords, 0x78 end tag.
VPD_SW_MNG = b"\x82\x1a\x00Nvidia ConnectX-7 NVSwitch\x90\x20\x00PNa\x05MCX7SW_MNG\x01\x00\x78"
VPD_NIC = b"\x82\x12\x00Nvidia ConnectX-7 NIC\x90\x10\x00PN\x0aMCX755106A\x78"


def _plugin() -> ModuleType:
    if not PLUGIN.is_file():
        pytest.fail(f"{PLUGIN} is missing: gpu_preflight has no probe parsers")
    spec = importlib.util.spec_from_file_location("gpu_preflight_probes", PLUGIN)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- parsers


@pytest.mark.parametrize(
    ("output", "efivar", "listed", "state"),
    [
        (SB_ENABLED, None, True, "enabled"),
        (SB_DISABLED, None, True, "disabled"),
        (SB_UNSUPPORTED, None, True, "unsupported"),
        # mokutil cannot read the variables: the efivar decides, else nothing can.
        (SB_NO_EFIVARS, EFIVAR_ON, True, "enabled"),
        (SB_NO_EFIVARS, EFIVAR_OFF, True, "disabled"),
        (SB_NO_EFIVARS, None, False, "unknown"),
        (SB_NO_EFIVARS, None, True, "unknown"),
        # mokutil not installed.
        (None, EFIVAR_ON, True, "enabled"),
        (None, EFIVAR_OFF, True, "disabled"),
        (None, None, True, "unsupported"),
        (None, None, False, "unknown"),
        # mokutil's answer on stderr after a warning, in another case.
        ("WARNING: something\nSECUREBOOT ENABLED", None, True, "enabled"),
    ],
)
def test_secure_boot_state_under_uefi(
    output: str | None, efivar: str | None, listed: bool, state: str
) -> None:
    plugin = _plugin()
    assert plugin.gpu_preflight_secure_boot_state(output, True, True, efivar, listed) == state


def test_no_efi_directory_means_legacy_bios_only_where_sysfs_is_visible() -> None:
    plugin = _plugin()
    # sysfs present, no /sys/firmware/efi: a BIOS boot, so no Secure Boot.
    assert plugin.gpu_preflight_secure_boot_state(None, False, True) == "legacy_bios"
    # No /sys/firmware at all (container, test root): nothing can be concluded.
    assert plugin.gpu_preflight_secure_boot_state(None, False, False) == "unknown"
    assert plugin.gpu_preflight_secure_boot_state(SB_DISABLED, False, False) == "unknown"


@pytest.mark.parametrize(
    ("output", "enrolled"),
    [
        ("/var/lib/dkms/mok.pub is already enrolled", True),
        ("/var/lib/dkms/mok.pub is not enrolled", False),
        ("/var/lib/dkms/mok.pub is already in the enrollment request", False),
        ("", False),
        (None, False),
    ],
)
def test_key_enrolled(output: str | None, enrolled: bool) -> None:
    assert _plugin().gpu_preflight_key_enrolled(output) is enrolled


def test_vpd_marker_is_found_in_binary_vpd() -> None:
    plugin = _plugin()
    sw = base64.b64encode(VPD_SW_MNG).decode()
    nic = base64.b64encode(VPD_NIC).decode()
    assert plugin.gpu_preflight_vpd_has_marker(sw) is True
    assert plugin.gpu_preflight_vpd_has_marker(nic) is False
    assert plugin.gpu_preflight_vpd_has_marker("") is False
    results = [{"source": "/a/vpd", "content": nic}, {"source": "/b/vpd", "content": sw}, {}]
    assert plugin.gpu_preflight_vpd_sources_with_marker(results, "SW_MNG") == ["/b/vpd"]


# ---------------------------------------------------------------- the role, run


def _tree(tmp_path: Path, name: str, *, efi: bool, firmware: bool = True) -> Path:
    root = tmp_path / name
    if firmware:
        (root / "firmware").mkdir(parents=True)
    if efi:
        (root / "firmware" / "efi" / "efivars").mkdir(parents=True)
    (root / "infiniband").mkdir(parents=True)
    return root


def _mokutil(tmp_path: Path, name: str, sb_state: str, test_key: str) -> Path:
    tool = tmp_path / f"mokutil-{name}"
    tool.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --sb-state) echo "{sb_state}";; --test-key) echo "$2 {test_key}";; esac\n',
        encoding="utf-8",
    )
    tool.chmod(0o755)
    return tool


def _run(tmp_path: Path, cases: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Run gpu_preflight once per case (a block each); return each case's facts or failure."""
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not installed")
    facts = [
        "gpu_preflight_secure_boot",
        "gpu_preflight_secure_boot_text",
        "gpu_preflight_secure_boot_enabled",
        "gpu_preflight_secure_boot_key_enrolled",
        "gpu_preflight_precompiled_modules",
        "gpu_preflight_gpu_present",
        "gpu_preflight_gpu_count",
        "gpu_preflight_nvswitch_present",
        "gpu_preflight_nvswitch_count",
        "gpu_preflight_nvlink5_present",
        "gpu_preflight_nvlink5_ports",
    ]
    tasks: list[dict[str, Any]] = []
    for name, variables in cases.items():
        record = {f: "{{ " + f + " | default('undefined') }}" for f in facts}
        tasks.append(
            {
                "name": f"case {name}",
                "block": [
                    {
                        "name": f"preflight {name}",
                        "ansible.builtin.include_role": {"name": "gpu_preflight"},
                        "vars": variables,
                    },
                    {
                        "name": f"record {name}",
                        "ansible.builtin.set_fact": {f"outcome_{name}": {"ok": True, **record}},
                    },
                ],
                "rescue": [
                    {
                        "name": f"record failure {name}",
                        "ansible.builtin.set_fact": {
                            f"outcome_{name}": {
                                "ok": False,
                                "msg": "{{ ansible_failed_result.msg | default('') }}",
                                "task": "{{ ansible_failed_task.name | default('') }}",
                            }
                        },
                    }
                ],
            }
        )
    out = tmp_path / "outcomes.json"
    pairs = ", ".join(f"'{n}': outcome_{n}" for n in cases)
    tasks.append(
        {
            "name": "write outcomes",
            "ansible.builtin.copy": {
                "dest": str(out),
                "content": "{{ {" + pairs + "} | to_json }}",
                "mode": "0644",
            },
        }
    )
    play = {
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": True,
        "gather_subset": ["min"],
        "vars": {
            "gpuready_driver_version": "580.65.06",
            "gpuready_driver_branch": "580",
            "gpuready_nvcc_version": "13.0",
            "gpuready_cudnn_version": "9.10.2",
            "gpu_preflight_require_gpus": False,
            # This machine's own distribution, whatever it is.
            "gpu_preflight_supported_distributions": [
                "{{ ansible_facts.distribution }} {{ ansible_facts.distribution_version }}",
                "{{ ansible_facts.distribution }} {{ ansible_facts.distribution_major_version }}",
            ],
            "gpu_preflight_supported_architectures": ["{{ ansible_facts.architecture }}"],
            "gpu_preflight_dkms_mok_pub": str(tmp_path / "mok.pub"),
            "gpu_preflight_nvswitch_devices_file": str(tmp_path / "no-nvswitch"),
            "gpu_preflight_pci_devices_dir": str(tmp_path / "no-pci"),
        },
        "tasks": tasks,
    }
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(yaml.safe_dump([play]), encoding="utf-8")
    run_localhost_playbook(playbook, timeout_s=600)
    result: dict[str, dict[str, Any]] = json.loads(out.read_text(encoding="utf-8"))
    return result


def test_preflight_secure_boot_and_nvlink5_on_fake_hosts(tmp_path: Path) -> None:
    (tmp_path / "mok.pub").write_text("fake key\n", encoding="utf-8")
    uefi = _tree(tmp_path, "uefi", efi=True)
    bios = _tree(tmp_path, "bios", efi=False)
    nosys = _tree(tmp_path, "nosys", efi=False, firmware=False)
    # An HGX B200-like host: a NIC and an NVSwitch management port under the IB class.
    for port, vpd in (("mlx5_0", VPD_NIC), ("mlx5_8", VPD_SW_MNG)):
        (bios / "infiniband" / port / "device").mkdir(parents=True)
        (bios / "infiniband" / port / "device" / "vpd").write_bytes(vpd)
    not_enrolled = _mokutil(tmp_path, "no", SB_ENABLED, "is not enrolled")
    enrolled = _mokutil(tmp_path, "yes", SB_ENABLED, "is already enrolled")
    disabled = _mokutil(tmp_path, "off", SB_DISABLED, "is not enrolled")

    def host(root: Path, mokutil: Path | None = None, **more: Any) -> dict[str, Any]:
        return {
            "gpu_preflight_firmware_dir": str(root / "firmware"),
            "gpu_preflight_infiniband_dir": str(root / "infiniband"),
            "gpu_preflight_mokutil": str(mokutil or tmp_path / "no-mokutil"),
            **more,
        }

    outcomes = _run(
        tmp_path,
        {
            "sb_no_key": host(uefi, not_enrolled),
            "sb_key": host(uefi, enrolled),
            "sb_off": host(uefi, disabled),
            "sb_precompiled_not_ubuntu": host(
                uefi, not_enrolled, gpu_preflight_secure_boot_precompiled=True
            ),
            "bios_nvlink5": host(bios),
            "nosys_gpu_host": host(nosys, gpu_preflight_secure_boot_unknown_fails=True),
            "nosys_test_host": host(nosys),
        },
    )
    failed = outcomes["sb_no_key"]
    assert failed["ok"] is False
    assert failed["task"] == "Refuse Secure Boot without an enrolled DKMS signing key"
    for fix in (
        "is not enrolled",
        "Nothing was installed",
        f"mokutil --import {tmp_path / 'mok.pub'}",
        "MOK manager",
        "disable Secure Boot",
        "gpu_preflight_secure_boot_precompiled: true",
        "linux-modules-nvidia-580-server-open-",
    ):
        assert fix in failed["msg"], fix
    assert outcomes["sb_key"]["ok"] is True
    assert outcomes["sb_key"]["gpu_preflight_secure_boot"] == "enabled"
    assert outcomes["sb_key"]["gpu_preflight_secure_boot_key_enrolled"] is True
    assert outcomes["sb_off"]["gpu_preflight_secure_boot"] == "disabled"
    precompiled = outcomes["sb_precompiled_not_ubuntu"]
    if precompiled["ok"] is False:  # everywhere but on an Ubuntu test machine
        assert "packaged only for Ubuntu" in precompiled["msg"]
    bios_host = outcomes["bios_nvlink5"]
    assert bios_host["ok"] is True
    assert bios_host["gpu_preflight_secure_boot"] == "legacy_bios"
    assert "legacy BIOS" in bios_host["gpu_preflight_secure_boot_text"]
    assert bios_host["gpu_preflight_nvlink5_present"] is True
    assert bios_host["gpu_preflight_nvlink5_ports"] == [str(bios / "infiniband/mlx5_8/device/vpd")]
    # No NVSwitch PCI device on NVLink5, yet the fabric manager is needed.
    assert bios_host["gpu_preflight_nvswitch_count"] == 0
    assert bios_host["gpu_preflight_nvswitch_present"] is True
    assert bios_host["gpu_preflight_gpu_present"] is False
    assert outcomes["sb_key"]["gpu_preflight_nvlink5_present"] is False
    assert outcomes["sb_key"]["gpu_preflight_nvswitch_present"] is False
    gpu_host = outcomes["nosys_gpu_host"]
    assert gpu_host["ok"] is False
    assert "cannot tell whether Secure Boot is enabled" in gpu_host["msg"]
    test_host = outcomes["nosys_test_host"]
    assert test_host["ok"] is True
    assert test_host["gpu_preflight_secure_boot"] == "unknown"


def test_secure_boot_is_refused_in_preflight_before_any_install() -> None:
    """The refusal is a preflight task, and preflight runs first (with any --tags)."""
    site = yaml.safe_load((REPO_ROOT / "playbooks" / "site.yml").read_text("utf-8"))
    roles = [entry["role"] for play in site for entry in play.get("roles", [])]
    assert roles[0] == "gpu_preflight"
    tasks = yaml.safe_load((ROLES_DIR / "gpu_preflight" / "tasks" / "secure_boot.yml").read_text())
    names = [task["name"] for task in tasks]
    assert "Refuse Secure Boot without an enrolled DKMS signing key" in names
    defaults = yaml.safe_load((ROLES_DIR / "gpu_preflight" / "defaults" / "main.yml").read_text())
    assert defaults["gpu_preflight_secure_boot_check"] is True
    assert defaults["gpu_preflight_secure_boot_precompiled"] is False
    assert defaults["gpu_preflight_dkms_mok_pub"] == "/var/lib/dkms/mok.pub"
