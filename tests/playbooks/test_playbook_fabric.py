"""Fabric manager and NVLink fabric state: package names per branch, and the fabric wait.

The wait in gpu_verify (tasks/fabric.yml) parses ``nvidia-smi -q`` with the role's filter
plugin (roles/gpu_verify/filter_plugins/gpu_verify_fabric.py). It is checked here on every
real recorded ``nvidia-smi -q`` in ../shared/captures, and the role's own tasks are run
with Ansible on localhost against a fake ``nvidia-smi`` that prints those captures, so a
GPU is never needed. No capture shows a fabric still registering; that case is derived
from a real capture by changing only its State/Status lines to the shape a public report
of a stuck HGX shows ("State : In Progress", "Status : N/A").
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.ansible_trust import trusted
from tests.conftest import REPO_ROOT
from tests.localhost_playbook import run_localhost_playbook

# GPUREADY_TEST_ROLES_DIR points the tests at another copy of the roles (to show a test
# fails on an older tree).
ROLES_DIR = Path(os.environ.get("GPUREADY_TEST_ROLES_DIR", REPO_ROOT / "playbooks" / "roles"))
PLUGIN = ROLES_DIR / "gpu_verify" / "filter_plugins" / "gpu_verify_fabric.py"
H100_X8 = "nvidia-smi-q/gls-H100SXMx8-565.57.01.txt"
# The one GPU of nge-linux-h100-80gb-hbm3-590.48.01__q-idle.txt.
BUS_ID_590 = "00000000:00:09.0"


def _plugin() -> ModuleType:
    if not PLUGIN.is_file():
        pytest.fail(f"{PLUGIN} is missing: gpu_verify has no fabric parser")
    spec = importlib.util.spec_from_file_location("gpu_verify_fabric", PLUGIN)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _in_progress(text: str, gpus: int | None = None) -> str:
    """A real capture with its fabric still registering (the first ``gpus`` GPUs, or all)."""
    done = "State                             : Completed"
    count = text.count(done) if gpus is None else gpus
    text = text.replace(done, "State                             : In Progress", count)
    return text.replace(
        "Status                            : Success",
        "Status                            : N/A",
        count,
    )


# ---------------------------------------------------------------- parser on real captures


def _captures(captures_dir: Path) -> list[Path]:
    files = sorted((captures_dir / "nvidia-smi-q").glob("*.txt"))
    assert len(files) > 20
    return files


def test_every_real_capture_reads_as_completed_or_not_supported(captures_dir: Path) -> None:
    plugin = _plugin()
    seen: set[str] = set()
    for path in _captures(captures_dir):
        text = path.read_text(encoding="utf-8", errors="replace")
        states = plugin.gpu_verify_fabric_states(text)
        # One Fabric section per GPU header ("GPU 00000000:17:00.0").
        headers = [line for line in text.splitlines() if line.startswith("GPU 0")]
        if "\n    Fabric\n" in text or "\r\n    Fabric" in text:
            assert len(states) == len(headers), path.name
        for state in states:
            assert state["state"] in ("Completed", "Not supported"), (path.name, state)
            assert state["gpu"] != "?", (path.name, state)
            seen.add(state["state"])
        summary = plugin.gpu_verify_fabric_summary(text)
        assert summary["settled"], path.name
    assert seen == {"Completed", "Not supported"}


@pytest.mark.parametrize(
    ("capture", "count", "seen"),
    [
        # HGX H100 8-GPU (NVSwitch): registered.
        (H100_X8, 8, ["Completed/Success"]),
        ("nvidia-smi-q/gpud-8x-h100-535.161.08.txt", 8, ["Completed/Success"]),
        ("nvidia-smi-q/nge-linux-h200-590.48.01__q-idle.txt", 1, ["Completed/Success"]),
        # A100 SXM4 x4 and a PCIe L40S print N/A: no fabric state, nothing to wait for.
        ("nvidia-smi-q/gls-A100SXMx4-555.42.02.txt", 4, ["Not supported/N/A"]),
        ("nvidia-smi-q/gls-L40S-550.127.05.txt", 1, ["Not supported/N/A"]),
    ],
)
def test_real_captures_settle_ok(
    captures_dir: Path, capture: str, count: int, seen: list[str]
) -> None:
    summary = _plugin().gpu_verify_fabric_summary((captures_dir / capture).read_text("utf-8"))
    assert summary == {
        "settled": True,
        "ok": True,
        "pending": [],
        "failed": [],
        "seen": seen,
        "count": count,
    }


def test_a_driver_without_fabric_reporting_is_settled_but_not_ok(captures_dir: Path) -> None:
    """470 prints no Fabric section: nothing to wait for, and nothing proves the fabric up."""
    text = (captures_dir / "nvidia-smi-q/gls-GTX680-470.256.02.txt").read_text("utf-8")
    summary = _plugin().gpu_verify_fabric_summary(text)
    assert (summary["settled"], summary["ok"], summary["count"]) == (True, False, 0)


def test_a_fabric_still_registering_is_pending_with_its_gpus(captures_dir: Path) -> None:
    text = _in_progress((captures_dir / H100_X8).read_text("utf-8"), gpus=2)
    summary = _plugin().gpu_verify_fabric_summary(text)
    assert summary["settled"] is False
    assert summary["ok"] is False
    assert summary["pending"] == ["00000000:18:00.0 In Progress", "00000000:2A:00.0 In Progress"]
    assert summary["seen"] == ["Completed/Success", "In Progress/N/A"]


def test_a_completed_fabric_with_an_error_status_fails(captures_dir: Path) -> None:
    text = (captures_dir / H100_X8).read_text("utf-8")
    text = text.replace(
        "Status                            : Success",
        "Status                            : NV_ERR_INSUFFICIENT_RESOURCES",
        1,
    )
    summary = _plugin().gpu_verify_fabric_summary(text)
    assert (summary["settled"], summary["ok"]) == (True, False)
    assert summary["failed"] == ["00000000:18:00.0 Completed/NV_ERR_INSUFFICIENT_RESOURCES"]


def test_health_subfields_and_crlf_do_not_confuse_the_parser(captures_dir: Path) -> None:
    """590 adds a Health block (with "Route Recovery in progress : N/A") under Fabric."""
    text = (captures_dir / "nvidia-smi-q/nge-linux-h100-80gb-hbm3-590.48.01__q-idle.txt").read_text(
        "utf-8"
    )
    plugin = _plugin()
    assert "Route Recovery in progress" in text
    states = plugin.gpu_verify_fabric_states(text)
    assert states == [{"gpu": BUS_ID_590, "state": "Completed", "status": "Success"}]
    assert plugin.gpu_verify_fabric_states(text.replace("\n", "\r\n")) == states


# ---------------------------------------------------------------- the role's tasks, run


def _fake_bin(tmp_path: Path) -> Path:
    """A bin directory whose nvidia-smi prints the captures listed in $FAKE_SMI_SEQ in turn."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'n=$(cat "$FAKE_SMI_SEQ.count" 2>/dev/null || echo 0); n=$((n + 1))\n'
        'echo "$n" > "$FAKE_SMI_SEQ.count"\n'
        'file=$(sed -n "${n}p" "$FAKE_SMI_SEQ")\n'
        '[ -n "$file" ] || file=$(tail -n 1 "$FAKE_SMI_SEQ")\n'
        'cat "$file"\n',
        encoding="utf-8",
    )
    systemctl = bin_dir / "systemctl"
    systemctl.write_text('#!/bin/sh\necho "${FAKE_FM_STATE:-active}"\n', encoding="utf-8")
    for tool in (smi, systemctl):
        tool.chmod(0o755)
    return bin_dir


def _run_cases(tmp_path: Path, cases: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Run gpu_verify's fabric tasks once per case; return each case's outcome."""
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not installed")
    bin_dir = _fake_bin(tmp_path)
    tasks: list[dict[str, Any]] = []
    for name, case in cases.items():
        seq = tmp_path / f"{name}.seq"
        seq.write_text("\n".join(str(p) for p in case["outputs"]) + "\n", encoding="utf-8")
        tasks.append(
            {
                "name": f"case {name}",
                "environment": {
                    "PATH": f"{bin_dir}:{os.environ['PATH']}",
                    "FAKE_SMI_SEQ": str(seq),
                    "FAKE_FM_STATE": case.get("fm", "active"),
                },
                "block": [
                    {
                        "name": f"run {name}",
                        "ansible.builtin.include_role": {
                            "name": "gpu_verify",
                            "tasks_from": "fabric",
                        },
                        "vars": {
                            "gpu_verify_fabric_timeout_s": case.get("timeout", 3),
                            "gpu_verify_fabric_poll_s": 1,
                        },
                    },
                    {
                        "name": f"record {name}",
                        "ansible.builtin.set_fact": {
                            f"outcome_{name}": {
                                "ok": True,
                                "attempts": "{{ gpu_verify_fabric_q.attempts | default(1) }}",
                            }
                        },
                    },
                ],
                "rescue": [
                    {
                        "name": f"record failure {name}",
                        "ansible.builtin.set_fact": {
                            f"outcome_{name}": {
                                "ok": False,
                                "msg": "{{ ansible_failed_result.msg | default('') }}",
                                "attempts": "{{ gpu_verify_fabric_q.attempts | default(1) }}",
                            }
                        },
                    }
                ],
            }
        )
    out = tmp_path / "outcomes.json"
    tasks.append(
        {
            "name": "write outcomes",
            "ansible.builtin.copy": {
                "dest": str(out),
                "content": "{{ {"
                + ", ".join(f"'{n}': outcome_{n}" for n in cases)
                + "} | to_json }}",
                "mode": "0644",
            },
        }
    )
    playbook = tmp_path / "fabric.yml"
    playbook.write_text(
        yaml.safe_dump(
            [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}]
        ),
        encoding="utf-8",
    )
    run_localhost_playbook(playbook)
    result: dict[str, dict[str, Any]] = json.loads(out.read_text(encoding="utf-8"))
    return result


def test_gpu_verify_waits_for_the_fabric_and_names_what_it_saw(
    tmp_path: Path, captures_dir: Path
) -> None:
    completed = captures_dir / H100_X8
    registering = tmp_path / "in-progress.txt"
    registering.write_text(_in_progress(completed.read_text("utf-8")), encoding="utf-8")
    outcomes = _run_cases(
        tmp_path,
        {
            "completed": {"outputs": [completed]},
            "not_supported": {
                "outputs": [captures_dir / "nvidia-smi-q/gls-A100SXMx4-555.42.02.txt"]
            },
            # Registration finishes on the third poll: the wait must outlast it.
            "settles": {"outputs": [registering, registering, completed], "timeout": 20},
            "stuck": {"outputs": [registering], "timeout": 2},
            "fm_down": {"outputs": [completed], "fm": "inactive"},
        },
    )
    assert outcomes["completed"]["ok"] is True
    assert outcomes["not_supported"]["ok"] is True
    assert outcomes["settles"] == {"ok": True, "attempts": 3}
    stuck = outcomes["stuck"]
    assert stuck["ok"] is False
    assert "still not registered" in stuck["msg"]
    assert "00000000:18:00.0 In Progress" in stuck["msg"]
    assert "gpu_verify_fabric_timeout_s=2" in stuck["msg"]
    assert "error 802" in stuck["msg"]
    assert stuck["attempts"] == 3  # the first poll and two retries, one second apart
    assert outcomes["fm_down"]["ok"] is False
    assert "inactive" in outcomes["fm_down"]["msg"]


# ---------------------------------------------------------------- package names


def _load(path: Path) -> Any:
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _render(role: str, name: str, **variables: Any) -> Any:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    scope = {k: trusted(v) for k, v in _load(ROLES_DIR / role / "defaults" / "main.yml").items()}
    scope.update(variables)
    return Templar(loader=DataLoader(), variables=scope).template(scope[name])


@pytest.mark.parametrize(
    ("branch", "deb", "rpm", "nscq", "nvsdm"),
    [
        # nvidia-packages.md §3: the suffix goes at 580, not after 570.
        (
            "550",
            "nvidia-fabricmanager-550",
            "nvidia-fabric-manager",
            "libnvidia-nscq-550",
            "libnvsdm-550",
        ),
        (
            "570",
            "nvidia-fabricmanager-570",
            "nvidia-fabric-manager",
            "libnvidia-nscq-570",
            "libnvsdm-570",
        ),
        (
            "575",
            "nvidia-fabricmanager-575",
            "nvidia-fabric-manager",
            "libnvidia-nscq-575",
            "libnvsdm-575",
        ),
        ("580", "nvidia-fabricmanager", "nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm"),
        ("590", "nvidia-fabricmanager", "nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm"),
    ],
)
def test_fabric_manager_package_names_change_at_580(
    branch: str, deb: str, rpm: str, nscq: str, nvsdm: str
) -> None:
    pins = {"gpuready_driver_version": f"{branch}.10.01", "gpuready_driver_branch": branch}
    assert _render("fabric_manager", "fabric_manager_deb_package", **pins) == deb
    assert _render("fabric_manager", "fabric_manager_rpm_package", **pins) == rpm
    assert _render("fabric_manager", "fabric_manager_nscq_package", **pins) == nscq
    assert _render("fabric_manager", "fabric_manager_nvsdm_package", **pins) == nvsdm


def test_fabric_manager_pins_the_exact_driver_version_and_holds() -> None:
    defaults = _load(ROLES_DIR / "fabric_manager" / "defaults" / "main.yml")
    assert defaults["fabric_manager_deb_revision"] == "1"
    assert defaults["fabric_manager_rpm_release"] == "1"
    assert defaults["fabric_manager_nscq"] is True
    assert defaults["fabric_manager_nvlink5_packages"] == ["nvlsm", "infiniband-diags"]
    assert "ib_umad" in defaults["fabric_manager_nvlink5_modules"]
    debian = (ROLES_DIR / "fabric_manager" / "tasks" / "debian.yml").read_text("utf-8")
    assert "'=' ~ fabric_manager_version ~ '-' ~ fabric_manager_deb_revision" in debian
    redhat = (ROLES_DIR / "fabric_manager" / "tasks" / "redhat.yml").read_text("utf-8")
    assert "'-' ~ fabric_manager_version ~ '-' ~ fabric_manager_rpm_release" in redhat


def test_fabric_manager_follows_nvswitch_and_nvlink5_detection() -> None:
    pins = {"gpuready_driver_version": "580.65.06", "gpuready_driver_branch": "580"}
    assert _render("fabric_manager", "fabric_manager_enabled", **pins) is False
    assert _render("fabric_manager", "fabric_manager_nvlink5", **pins) is False
    assert (
        _render(
            "fabric_manager", "fabric_manager_nvlink5", gpu_preflight_nvlink5_present=True, **pins
        )
        is True
    )


def test_fabric_wait_is_a_runtime_check_with_a_bounded_timeout() -> None:
    """Test hosts turn runtime checks off; the wait lives there, bounded and configurable."""
    runtime = _load(ROLES_DIR / "gpu_verify" / "tasks" / "runtime.yml")
    includes = [t for t in runtime if t.get("ansible.builtin.include_tasks") == "fabric.yml"]
    assert len(includes) == 1
    main = (ROLES_DIR / "gpu_verify" / "tasks" / "main.yml").read_text("utf-8")
    assert "include_tasks: runtime.yml" in main
    assert "when: gpu_verify_driver_runtime | bool" in main
    defaults = _load(ROLES_DIR / "gpu_verify" / "defaults" / "main.yml")
    assert defaults["gpu_verify_fabric_timeout_s"] == 600
    assert defaults["gpu_verify_fabric_poll_s"] == 10
    fabric = _load(ROLES_DIR / "gpu_verify" / "tasks" / "fabric.yml")
    wait = fabric[0]
    assert wait["retries"] == "{{ gpu_verify_fabric_retries }}"
    assert "gpu_verify_fabric_summary" in wait["until"]
