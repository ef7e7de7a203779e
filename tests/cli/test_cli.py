"""The command line end to end: exit codes, one-line errors, outputs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from validator.cli.main import main
from validator.error_tree import ExitCode

SCHEMA = (
    Path(__file__).resolve().parent.parent.parent / "validator" / "report" / "report.schema.json"
)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def certify_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    if not any(arg == "--burn" for arg in args):
        args = ("--burn", "0", *args)
    code, out, err = run(capsys, "certify", "--json", *args)
    assert err == "" or "error" not in err, err
    return code, json.loads(out)


def failing_checks(document: dict) -> set[tuple[str, int | None]]:
    node = document["nodes"][0]
    return {(f["check"], f["gpu_index"]) for f in node["findings"] if f["severity"] == "FAIL"}


def test_scenarios_lists_names_first(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "scenarios")
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    assert "healthy-8x-h100-sxm" in names
    assert "healthy-8x-a100-80gb" in names
    assert len(names) >= 11
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("scenario", ["healthy-8x-h100-sxm", "healthy-8x-a100-80gb"])
def test_healthy_scenarios_certify(capsys: pytest.CaptureFixture[str], scenario: str) -> None:
    code, document = certify_json(capsys, "--simulate", scenario, "--burn", "2s")
    node = document["nodes"][0]
    assert node["verdict"] == "CERTIFIED", [f for f in node["findings"] if f["severity"] != "PASS"]
    assert code == ExitCode.OK
    assert len(node["facts"]["gpus"]) == 8
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(document)


@pytest.mark.parametrize(
    ("scenario", "expected_fail"),
    [
        ("one-gpu-power-capped", ("power.limit", 3)),
        ("mixed-hbm-40gb-in-80gb-node", ("memory.capacity", 5)),
        ("row-remap-pending", ("errors.row_remap", 2)),
        ("gpu-fallen-off-bus", ("inventory.gpu_status", 6)),
        ("one-gpu-thermal-throttling", ("thermal.throttle", 4)),
    ],
)
def test_fault_scenarios_fail_their_check(
    capsys: pytest.CaptureFixture[str], scenario: str, expected_fail: tuple[str, int]
) -> None:
    code, document = certify_json(capsys, "--simulate", scenario)
    assert code == ExitCode.NOT_CERTIFIED
    assert document["nodes"][0]["verdict"] == "NOT_CERTIFIED"
    assert expected_fail in failing_checks(document)


def test_driver_mismatch_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = certify_json(capsys, "--simulate", "driver-mismatch")
    assert code == ExitCode.NOT_CERTIFIED
    assert any(check.startswith("versions.kernel_module") for check, _ in failing_checks(document))


def test_cudnn_missing_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = certify_json(capsys, "--simulate", "cudnn-missing")
    assert code == ExitCode.NOT_CERTIFIED
    assert any(check.startswith("versions.cudnn") for check, _ in failing_checks(document))


def test_nvcc_off_pin_fails_against_a_pinning_policy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("nvcc_version: '12.4'\n")
    code, document = certify_json(capsys, "--simulate", "nvcc-off-pin", "--policy", str(policy))
    assert code == ExitCode.NOT_CERTIFIED
    assert any(check.startswith("versions.nvcc") for check, _ in failing_checks(document))
    # The same node passes the nvcc check when nothing is pinned.
    code, document = certify_json(capsys, "--simulate", "nvcc-off-pin")
    assert not any(check.startswith("versions.nvcc") for check, _ in failing_checks(document))


def test_no_driver_says_so_and_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "certify", "--simulate", "no-gpu-driver", "--no-color", "--burn", "1s"
    )
    assert code == ExitCode.COULD_NOT_RUN
    assert "no usable NVIDIA driver" in out


@pytest.mark.skipif(
    Path("/proc/driver/nvidia").exists(), reason="this machine has an NVIDIA driver"
)
def test_live_certify_on_a_machine_without_gpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.node.sysfs_tree import make_proc, make_sysfs
    from validator.node.live import pci_bus

    monkeypatch.setattr(pci_bus, "SYSFS_ROOT", str(make_sysfs(tmp_path)))
    monkeypatch.setattr(pci_bus, "PROC_ROOT", str(make_proc(tmp_path, nvidia_loaded=False)))
    code, out, err = run(capsys, "certify", "--no-color", "--burn", "1s")
    assert code == ExitCode.COULD_NOT_RUN
    assert out == ""  # one line, no report of the tools around a GPU that is not there
    assert err.splitlines() == [err.strip()]
    assert "no NVIDIA GPU on this machine's PCI bus: nothing to certify" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("certify", "--simulate", "no-such-scenario"), "unknown scenario 'no-such-scenario'"),
        (("certify", "--capture", "/nonexistent/bundle"), "/nonexistent/bundle does not exist"),
        (("certify", "--simulate", "healthy-8x-h100-sxm", "--capture", "/tmp"), "exclusive"),
        (("certify", "--bogus-flag"), "No such option"),
        (("certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "soon"), "not a duration"),
        (("certify", "--burn-dtype", "int4"), "int4"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    code, out, err = run(capsys, *args)
    assert code == ExitCode.BAD_INPUT
    assert needle in err
    assert "Traceback" not in err + out
    assert [line for line in err.splitlines() if line.strip()] == [err.strip()]
    assert err.startswith("gpuready: error: ")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("thresholds:\n  powr_limit_min_ratio: 0.5\n", "powr_limit_min_ratio"),
        ("expected_gpu_count: eight\n", "expected_gpu_count"),
        ("expected_gpu_count: [8\n", "line"),
        ("- 1\n- 2\n", "mapping"),
    ],
)
def test_bad_policy_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, needle: str
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(content)
    code, out, err = run(
        capsys, "certify", "--simulate", "healthy-8x-h100-sxm", "--policy", str(policy)
    )
    assert code == ExitCode.BAD_INPUT
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert str(policy) in lines[0] or "policy" in lines[0]
    assert out == ""


def test_report_dir_gets_three_reports(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "out"
    code, _, _ = run(
        capsys,
        "certify",
        "--simulate",
        "one-gpu-power-capped",
        "--burn",
        "0",
        "--report-dir",
        str(target),
    )
    assert code == ExitCode.NOT_CERTIFIED
    assert sorted(p.name for p in target.iterdir()) == ["junit.xml", "report.html", "report.json"]
    document = json.loads((target / "report.json").read_text())
    assert document["nodes"][0]["verdict"] == "NOT_CERTIFIED"
    assert "NOT_CERTIFIED" in (target / "report.html").read_text()


def test_terminal_report_names_the_failure(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "certify", "--simulate", "one-gpu-power-capped", "--no-color", "--burn", "0"
    )
    assert code == ExitCode.NOT_CERTIFIED
    assert "NOT_CERTIFIED" in out
    assert "power.limit" in out
    assert "\x1b[" not in out


def test_console_script_runs_as_a_process(tmp_path: Path) -> None:
    exe = shutil.which("gpuready")
    argv = [exe] if exe else [sys.executable, "-m", "validator.cli.main"]
    done = subprocess.run(
        [*argv, "certify", "--simulate", "healthy-8x-h100-sxm", "--json", "--burn", "2s"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nodes"][0]["verdict"] == "CERTIFIED"


def test_certify_records_history_and_issues_a_verifiable_certificate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    key = tmp_path / "key"
    key.write_text("a shared secret\n")
    db = tmp_path / "history.db"
    out = tmp_path / "out"
    code, _, err = run(
        capsys, "certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "1s",
        "--db", str(db), "--sign-key", str(key), "--report-dir", str(out),
    )  # fmt: skip
    assert code == ExitCode.OK, err
    (certificate,) = (out / "certificates").iterdir()
    code, out_text, _ = run(capsys, "verify-cert", str(certificate), "--sign-key", str(key))
    assert code == ExitCode.OK
    assert "is intact: HMAC matches the shared key: anyone holding that key" in out_text
    tampered = tmp_path / "tampered.json"
    tampered.write_text(certificate.read_text().replace("550.90.07", "550.90.08"))
    code, _, err = run(capsys, "verify-cert", str(tampered), "--sign-key", str(key))
    assert code == ExitCode.NOT_CERTIFIED  # read whole, and its seal does not hold
    assert err.count("\n") == 1
    code, history_json, _ = run(capsys, "history", "--db", str(db), "--json")
    rows = json.loads(history_json)
    assert [(row["kind"], row["verdict"], row["status"]) for row in rows] == [
        ("certify", "CERTIFIED", "complete")
    ]


def test_a_failed_node_gets_no_certificate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    code, _, _ = run(
        capsys, "certify", "--simulate", "one-gpu-power-capped", "--burn", "0",
        "--db", str(tmp_path / "h.db"), "--report-dir", str(out),
    )  # fmt: skip
    assert code == ExitCode.NOT_CERTIFIED
    assert not (out / "certificates").exists()
