"""Certifying from a support bundle: real captured outputs laid out as a capture directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.collecting import collect_capture
from validator.cli.main import main
from validator.error_tree import CaptureError, ExitCode
from validator.model import NvmlStatus, Reason, Unavailable
from validator.node.capture.capture_replay import write_capture
from validator.node.sim.scenario import load_scenario


def bundle(tmp_path: Path, captures: Path, files: dict[str, str]) -> Path:
    """A capture directory holding corpus files (copied at test time, under tmp_path)."""
    target = tmp_path / "bundle"
    target.mkdir()
    for name, source in files.items():
        shutil.copyfile(captures / source, target / name)
    return target


def test_h100_query_text_bundle(tmp_path: Path, captures_dir: Path) -> None:
    directory = bundle(
        tmp_path,
        captures_dir,
        {
            "nvidia-smi-q.txt": "nvidia-smi-q/gls-H100SXMx8-565.57.01.txt",
            "nvidia-smi.txt": "nvidia-smi-banner/gls-H100SXMx8-565.57.01.txt",
        },
    )
    facts = collect_capture(directory)
    assert facts.source == "capture"
    assert facts.nvml_status is NvmlStatus.OK
    assert facts.driver_version == "565.57.01"
    assert len(facts.gpus) == 8
    assert {gpu.name for gpu in facts.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert facts.gpus[0].memory_total_mib == 81559
    assert facts.gpus[0].uuid == "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"
    assert facts.tools.nvidia_smi_driver_version == "565.57.01"
    # What the bundle lacks is "not measured", never a value.
    assert isinstance(facts.tools.nvcc_version, Unavailable)
    assert facts.tools.nvcc_version.reason is Reason.NOT_MEASURED
    assert isinstance(facts.kernel_log.events, Unavailable)


def test_xml_bundle_is_preferred_over_banner(tmp_path: Path, captures_dir: Path) -> None:
    directory = bundle(
        tmp_path,
        captures_dir,
        {
            "nvidia-smi-q.xml": "nvidia-smi-xml/telegraf-tesla-t4.xml",
            "nvcc.txt": "nvcc/repo-ngc-test-nvcc-11.6.55.txt",
        },
    )
    facts = collect_capture(directory)
    assert [gpu.name for gpu in facts.gpus] == ["Tesla T4"]
    assert facts.tools.nvcc_version == "11.6.55"


def test_certify_capture_cli_exit_codes(
    tmp_path: Path, captures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = bundle(
        tmp_path, captures_dir, {"nvidia-smi-q.txt": "nvidia-smi-q/gls-H100SXMx8-565.57.01.txt"}
    )
    code = main(["certify", "--capture", str(directory), "--json"])
    document = json.loads(capsys.readouterr().out)
    # nvcc, cuDNN and the kernel log were not captured: could-not-measure never passes.
    assert code == ExitCode.NOT_CERTIFIED
    unknown = {f["check"] for f in document["nodes"][0]["findings"] if f["severity"] == "UNKNOWN"}
    assert {"versions.nvcc", "versions.cudnn", "errors.xid"} <= unknown


def test_error_text_instead_of_table_becomes_the_fact(tmp_path: Path) -> None:
    directory = tmp_path / "bundle"
    directory.mkdir()
    (directory / "nvidia-smi.txt").write_text(
        "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.54\n"
    )
    facts = collect_capture(directory)
    assert facts.nvml_status is NvmlStatus.DRIVER_MISMATCH
    assert facts.gpus == ()
    # The message names the user-space side; the CUDA version stays unknown.
    assert facts.driver_version == "550.54"
    assert facts.tools.nvidia_smi_driver_version == "550.54"
    assert isinstance(facts.cuda_driver_version, Unavailable)


@pytest.mark.parametrize("text", ["", "\n\n"])
def test_empty_dmesg_is_not_a_clean_kernel_log(tmp_path: Path, text: str) -> None:
    directory = tmp_path / "bundle"
    directory.mkdir()
    (directory / "dmesg.txt").write_text(text)
    events = collect_capture(directory).kernel_log.events
    assert isinstance(events, Unavailable)
    assert events.reason is Reason.ERROR
    assert "dmesg.txt shows no log line" in events.detail


def test_truncated_xml_is_bad_input(tmp_path: Path, captures_dir: Path) -> None:
    text = (captures_dir / "nvidia-smi-xml/telegraf-tesla-t4.xml").read_text()
    directory = tmp_path / "bundle"
    directory.mkdir()
    (directory / "nvidia-smi-q.xml").write_text(text[: len(text) // 2])
    with pytest.raises(CaptureError, match=r"nvidia-smi-q\.xml"):
        collect_capture(directory)


def test_empty_directory_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["certify", "--capture", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT
    assert "holds no capture files" in err
    assert err.count("\n") == 1


def test_write_capture_round_trip(tmp_path: Path) -> None:
    scenario = load_scenario("row-remap-pending")
    outcome = write_capture(tmp_path / "bundle", scenario.system())
    assert outcome["nvidia-smi.txt"] == "written"
    assert outcome["meta.json"] == "written"
    facts = collect_capture(tmp_path / "bundle")
    simulated = scenario.system()
    assert facts.hostname == simulated.hostname()
    assert facts.tools.nvcc_version == "12.4.131"
    assert not isinstance(facts.kernel_log.events, Unavailable)
    assert 63 in {event.xid for event in facts.kernel_log.events}
    assert not list((tmp_path / "bundle").glob(".*.tmp"))
