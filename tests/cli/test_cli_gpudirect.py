"""certify on the GPUDirect fault scenarios, as a user types it: the finding and its action."""

from __future__ import annotations

import json

import pytest

from validator.cli.main import main
from validator.error_tree import ExitCode


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, _ = capsys.readouterr()
    return code, out


def test_acs_enabled_in_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "certify", "--simulate", "acs-enabled", "--burn", "0", "--no-color")
    assert code == ExitCode.NOT_CERTIFIED
    line = next(line for line in out.splitlines() if "gpudirect.acs" in line)
    assert "FAIL" in line
    assert "ACS is on at 4 PCIe switch ports" in line
    assert "fix the BIOS setting" in line


def test_acs_enabled_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "certify", "--simulate", "acs-enabled", "--burn", "0", "--json")
    assert code == ExitCode.NOT_CERTIFIED
    node = json.loads(out)["nodes"][0]
    failed = [f for f in node["findings"] if f["severity"] == "FAIL"]
    assert [(f["check"], f["action"]) for f in failed] == [("gpudirect.acs", "fix_bios_setting")]
    assert "NCCL troubleshooting" in failed[0]["action_source"]
    assert node["facts"]["gpudirect"]["virtualized"] is False


@pytest.mark.parametrize(
    ("scenario", "check", "gpus", "action"),
    [
        (
            "gpu-nic-across-socket",
            "gpudirect.nic_affinity",
            {4, 5, 6, 7},
            "reseat_or_replace_cable_or_riser",
        ),
        ("peermem-missing", "gpudirect.peermem", {None}, "fix_software_stack"),
    ],
)
def test_other_gpudirect_faults(
    capsys: pytest.CaptureFixture[str],
    scenario: str,
    check: str,
    gpus: set[int | None],
    action: str,
) -> None:
    code, out = run(capsys, "certify", "--simulate", scenario, "--burn", "0", "--json")
    assert code == ExitCode.NOT_CERTIFIED
    failed = [f for f in json.loads(out)["nodes"][0]["findings"] if f["severity"] == "FAIL"]
    assert {f["check"] for f in failed} == {check}
    assert {f["gpu_index"] for f in failed} == gpus
    assert {f["action"] for f in failed} == {action}
