"""bench/gpu_check.sh and its summary: targets, exit codes and the single-GPU policy, no GPU.

The reports are real `gpuready certify --simulate ... --json` output (made once per module),
edited where a test needs another figure, so they keep the report's real shape.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from validator import trace
from validator.judge import judge_node
from validator.judge.policy import Policy, load_policy
from validator.model import (
    AllReduce,
    AllReducePoint,
    Bandwidth,
    GpuBurn,
    GpuCopyBandwidth,
    Interconnect,
    NodeFacts,
    PeerBandwidth,
    Reason,
    Unavailable,
    from_dict,
    to_dict,
)

REPO = Path(__file__).resolve().parent.parent.parent
BENCH = REPO / "bench"
SCRIPT = BENCH / "gpu_check.sh"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


summary = _load("gpu_check_summary")
reference_mod = _load("burn_reference")

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real JSON report of a simulated healthy 8x H100 node with a 3 s burn."""
    where = tmp_path_factory.mktemp("template")
    done = subprocess.run(
        [sys.executable, "-m", "validator.cli.main", "certify", "--simulate",
         "healthy-8x-h100-sxm", "--burn", "3s", "--json", "--db", str(where / "h.db")],
        capture_output=True, text=True, cwd=REPO, check=False,
        env={**os.environ, "XDG_STATE_HOME": str(where)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def node(report: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = report["nodes"][0]
    return result


def burn_gpus(report: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = node(report)["facts"]["burn"]["gpus"]
    return result


def facts_gpus(report: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = node(report)["facts"]["gpus"]
    return result


def measured(template: dict[str, Any], duty: float = 0.99) -> dict[str, Any]:
    """The template with duty measured, as a real (not simulated) burn has it."""
    report = copy.deepcopy(template)
    for gpu in burn_gpus(report):
        gpu["duty"] = duty
    return report


def single_gpu(report: dict[str, Any], name: str = H200) -> dict[str, Any]:
    """The report cut down to GPU 0, named ``name``."""
    report = copy.deepcopy(report)
    facts = node(report)["facts"]
    facts["gpus"] = facts["gpus"][:1]
    facts["gpus"][0]["name"] = name
    facts["burn"]["gpus"] = facts["burn"]["gpus"][:1]
    node(report)["findings"] = [f for f in node(report)["findings"] if f["gpu_index"] in (None, 0)]
    return report


def finding(check: str, severity: str, gpu_index: int | None, message: str) -> dict[str, Any]:
    return {"check": check, "severity": severity, "message": message, "observed": "",
            "expected": "", "gpu_index": gpu_index, "gpu_uuid": None, "required": True}  # fmt: skip


class OutDir:
    """What bench/gpu_check.sh leaves behind, written by hand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[str, str] = {}
        self.settings = {"started_epoch": "0", "burn_s": "60", "peak_bf16": "989"}

    def step(self, name: str, rc: int = 0, stdout: str = "", stderr: str = "",
             note: str = "") -> None:  # fmt: skip
        (self.path / f"{name}.stdout").write_text(stdout)
        (self.path / f"{name}.stderr").write_text(stderr)
        (self.path / f"{name}.rc").write_text(f"{rc}\n")
        self.rows[name] = f"{name}\tran\t{rc}\t100.0\t101.5\t15\t{note}"

    def skip(self, name: str, why: str) -> None:
        (self.path / f"{name}.stdout").unlink(missing_ok=True)
        self.rows[name] = f"{name}\tskipped\t\t\t\t\t{why}"

    def run(self) -> tuple[dict[str, Any], str, int]:
        header = "name\tstatus\trc\tstart\tend\ttimeout_s\tnote"
        (self.path / "steps.tsv").write_text("\n".join([header, *self.rows.values()]) + "\n")
        (self.path / "settings.tsv").write_text(
            "".join(f"{k}\t{v}\n" for k, v in self.settings.items())
        )
        code = summary.main(["summarize", str(self.path)])
        document = json.loads((self.path / "gpu_check.json").read_text())
        text = (self.path / "summary.txt").read_text()
        assert document["exit_code"] == code
        assert "n/a" not in text
        return document, text, code


def reference_json(report: dict[str, Any], median: float | list[float]) -> str:
    gpus = []
    for position, gpu in enumerate(facts_gpus(report)):
        value = median[position] if isinstance(median, list) else median
        gpus.append({"index": gpu["index"], "name": "NVIDIA H100 80GB HBM3",
                     "pci_bus_id": gpu["pci_bus_id"], "windows": 54, "median_tflops": value,
                     "p10_tflops": value - 5, "p90_tflops": value + 3,
                     "best_tflops": value + 6, "tflops": value})  # fmt: skip
    return json.dumps({"size": 8192, "dtype": "bf16", "warmup_s": 6, "seconds": 54,
                       "window_s": 1.0, "torch_version": "2.5.1", "gpus": gpus})  # fmt: skip


def machine(
    tmp_path: Path,
    report: dict[str, Any],
    *,
    name: str = H100,
    reference: float | list[float] = 740.0,
    torch_report: dict[str, Any] | None = None,
) -> OutDir:
    """A complete, healthy run: every probe answered, both backends burned."""
    out = OutDir(tmp_path)
    count = len(facts_gpus(report))
    out.step("nvidia-smi-L", stdout="".join(
        f"GPU {i}: {name} (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)\n" for i in range(count)
    ))  # fmt: skip
    out.step("nvidia-smi-name", stdout=f"{name}\n" * count)
    out.step("nvidia-smi-info", stdout="".join(
        f"{i}, {g['pci_bus_id']}, 550.90.07, 700.00 W, 1980 MHz\n"
        for i, g in enumerate(facts_gpus(report))
    ))  # fmt: skip
    out.step("import-validator", note="python3 -c 'import validator.cli.main' (repository)")
    out.step("import-pynvml", stdout="/usr/lib/python3/dist-packages/pynvml.py\n")
    torch = {"version": "2.5.1", "cuda": "12.4", "cuda_available": True, "device_count": count}
    out.step("torch-info", stdout=json.dumps(torch))
    out.step("reference", stdout=reference_json(report, reference))
    out.step("certify-cublas", stdout=json.dumps(on_backend(report, "cublas")))
    out.step("certify-torch", stdout=json.dumps(on_backend(torch_report or report, "torch")))
    return out


def on_backend(report: dict[str, Any], backend: str) -> dict[str, Any]:
    """The report as a burn on ``backend`` writes it (a simulated burn says numpy)."""
    report = copy.deepcopy(report)
    if isinstance(node(report)["facts"]["burn"], dict):
        node(report)["facts"]["burn"]["backend"] = backend
    return report


def checks(document: dict[str, Any], name: str, status: str | None = None) -> list[dict[str, Any]]:
    return [
        c for c in document["checks"]
        if c["name"] == name and (status is None or c["status"] == status)
    ]  # fmt: skip


# ------------------------------------------------------------------ targets and ratios


def test_healthy_h100_meets_every_target(tmp_path: Path, template: dict[str, Any]) -> None:
    report = measured(template)
    document, text, code = machine(tmp_path, report).run()
    assert code == 0, document["missing"] + document["missed"]
    assert document["outcome"] == "PASS"
    tflops = burn_gpus(report)[0]["tflops"]
    gpu = document["burn"]["cublas"]["gpus"][0]
    assert gpu["tflops"] == tflops
    assert gpu["vs_reference"] == round(tflops / 740.0, 4)
    assert gpu["vs_peak"] == round(tflops / 989.0, 4)
    assert gpu["peak_target"] == 0.70
    assert gpu["model"] == "h100-sxm"
    assert gpu["duty"] == 0.99
    ratio = checks(document, "vs_reference")[0]
    assert (ratio["status"], ratio["target"]) == ("pass", ">= 0.95")
    assert len(checks(document, "vs_peak", "pass")) == 16  # 8 GPUs x 2 backends
    assert len(checks(document, "duty", "pass")) == 8  # cublas has the target
    assert len(checks(document, "duty", "no target")) == 8  # torch's is reported
    assert document["reference"]["gpus"][0]["vs_peak"] == round(740.0 / 989.0, 4)
    tele = gpu["telemetry"]
    assert tele["samples_under_load"] > 0
    assert tele["power_limit_w"] == 700.0
    assert tele["median_power_w"] is not None
    assert tele["p5_sm_clock_mhz"] is not None
    assert tele["max_temperature_gpu_c"] is not None
    assert document["burn"]["cublas"]["verdict"] == "CERTIFIED"
    assert document["machine"]["driver_version"] == "550.90.07"
    assert document["machine"]["torch"]["version"] == "2.5.1"
    assert document["machine"]["pynvml"]["importable"] is True
    assert "PASS (exit 0)" in text
    assert "vs reference 0.973 [ok >= 0.95]" in text


def test_h200_needs_075_of_peak(tmp_path: Path, template: dict[str, Any]) -> None:
    document, text, code = machine(tmp_path, measured(template), name=H200).run()
    # 720 TFLOPS is 0.728 of 989: enough for an H100 SXM, not for an H200.
    assert code == 1
    missed = checks(document, "vs_peak", "fail")
    assert len(missed) == 16
    assert missed[0]["target"] == ">= 0.75"
    assert document["burn"]["cublas"]["gpus"][0]["model"] == "h200-sxm"
    assert "TARGET MISSED (exit 1)" in text


def test_unknown_model_reports_the_ratio_without_a_target(
    tmp_path: Path, template: dict[str, Any]
) -> None:
    document, text, code = machine(tmp_path, measured(template), name="NVIDIA A100-SXM4-80GB").run()
    assert code == 0
    ratios = checks(document, "vs_peak")
    assert {c["status"] for c in ratios} == {"no target"}
    assert ratios[0]["value"] == round(720.0 / 989.0, 4)
    assert "unknown model" in ratios[0]["detail"]
    assert "unknown model, ratio to peak reported without a target" in text


def test_burn_below_the_reference_misses(tmp_path: Path, template: dict[str, Any]) -> None:
    refs = [740.0] * 7 + [800.0]  # GPU 7's reference is faster than its burn by 10%
    document, _, code = machine(tmp_path, measured(template), reference=refs).run()
    assert code == 1
    missed = checks(document, "vs_reference", "fail")
    assert [c["subject"] for c in missed] == ["cublas gpu7", "torch gpu7"]
    assert missed[0]["value"] == round(720.0 / 800.0, 4)


def test_reference_is_matched_by_bus_id(tmp_path: Path, template: dict[str, Any]) -> None:
    report = measured(template)
    out = machine(tmp_path, report)
    data = json.loads(reference_json(report, 740.0))
    data["gpus"].reverse()  # other indexes, same boards
    for position, gpu in enumerate(data["gpus"]):
        gpu["index"] = position
    data["gpus"][0]["median_tflops"] = 700.0  # the board of burn GPU 7
    out.step("reference", stdout=json.dumps(data))
    document, _, _ = out.run()
    by_gpu = {g["index"]: g for g in document["burn"]["cublas"]["gpus"]}
    assert by_gpu[7]["reference_median_tflops"] == 700.0
    assert by_gpu[0]["reference_median_tflops"] == 740.0


def test_low_duty_misses_for_cublas(tmp_path: Path, template: dict[str, Any]) -> None:
    document, _, code = machine(tmp_path, measured(template, duty=0.95)).run()
    assert code == 1
    assert {c["subject"].split()[0] for c in checks(document, "duty", "fail")} == {"cublas"}


def test_mismatches_miss(tmp_path: Path, template: dict[str, Any]) -> None:
    report = measured(template)
    burn_gpus(report)[3]["mismatched_elements"] = 12
    document, _, code = machine(tmp_path, report).run()
    assert code == 1
    assert [c["subject"] for c in checks(document, "mismatched_elements", "fail")] == [
        "cublas gpu3", "torch gpu3"
    ]  # fmt: skip


def test_a_fail_finding_is_listed_and_counted(tmp_path: Path, template: dict[str, Any]) -> None:
    report = measured(template)
    node(report)["findings"].append(finding("pcie.width", "FAIL", 2, "GPU 2 runs at x8"))
    node(report)["findings"].append(finding("thermal.margin", "WARN", 1, "GPU 1 is warm"))
    document, text, code = machine(tmp_path, report).run()
    assert code == 1
    listed = document["burn"]["cublas"]["findings_not_pass"]
    assert [(f["check"], f["severity"], f["counted"]) for f in listed] == [
        ("pcie.width", "FAIL", True), ("thermal.margin", "WARN", False)
    ]  # fmt: skip
    assert "FAIL pcie.width gpu2 [counted]: GPU 2 runs at x8" in text
    assert "WARN thermal.margin gpu1 [not blocking]" in text


# ------------------------------------------------------------------ single GPU


def test_single_gpu_nvlink_finding_is_not_counted(tmp_path: Path, template: dict[str, Any]) -> None:
    report = single_gpu(measured(template))
    node(report)["findings"].append(finding("nvlink.links", "FAIL", 0, "0 of 18 NVLinks"))
    document, text, code = machine(tmp_path, report, name=H200).run()
    listed = document["burn"]["cublas"]["findings_not_pass"]
    assert listed[-1]["check"] == "nvlink.links"
    assert listed[-1]["counted"] is False
    assert "no peer GPU" in listed[-1]["not_counted_because"]
    assert checks(document, "findings")[0]["status"] == "pass"
    assert "NOT COUNTED" in text
    assert code == 1  # only for the speed: 720 TFLOPS is 0.728 of 989 on an H200
    assert {c["name"] for c in document["checks"] if c["status"] == "fail"} == {"vs_peak"}


def test_single_gpu_fabric_finding_still_counts(tmp_path: Path, template: dict[str, Any]) -> None:
    # The single-GPU policy settles Fabric Manager; a fabric FAIL left is a real one.
    report = single_gpu(measured(template), name=H100)
    node(report)["findings"].append(finding("state.fabric", "FAIL", 0, "not registered"))
    document, _, code = machine(tmp_path, report).run()
    assert code == 1
    assert checks(document, "findings")[0]["status"] == "fail"


def test_nvlink_finding_counts_on_eight_gpus(tmp_path: Path, template: dict[str, Any]) -> None:
    report = measured(template)
    node(report)["findings"].append(finding("nvlink.links", "FAIL", 4, "12 of 18 NVLinks"))
    document, _, code = machine(tmp_path, report).run()
    assert code == 1
    assert document["burn"]["cublas"]["findings_not_pass"][0]["counted"] is True


def test_single_gpu_policy_file_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "single-gpu-policy.yaml"
    assert summary.main(["write-policy", str(path)]) == 0
    policy = load_policy(str(path))
    assert policy == dataclasses.replace(Policy(), require_fabric_manager=False)
    assert "legitimate" in path.read_text()


def test_single_gpu_policy_settles_fabric_for_one_gpu(
    tmp_path: Path, template: dict[str, Any]
) -> None:
    facts_data = single_gpu(template)["nodes"][0]["facts"]
    facts_data["pci_nvswitch_count"] = {"unavailable": "not_measured"}
    facts_data["gpus"][0]["fabric_state"] = "not_started"  # no Fabric Manager in the guest
    facts_data["gpus"][0]["fabric_status"] = {"unavailable": "not_measured"}
    facts = from_dict(NodeFacts, facts_data)
    path = tmp_path / "policy.yaml"
    summary.write_policy(path)

    def fabric(policy: Policy) -> set[str]:
        result = judge_node(facts, policy)
        return {f.severity.value for f in result.findings if f.check == "state.fabric"}

    assert fabric(Policy()) == {"FAIL"}  # the H200 SXM row says NVSwitch board
    assert fabric(load_policy(str(path))) == {"PASS"}


# ------------------------------------------------------------------ what is missing: exit 2


def test_simulated_duty_is_missing(tmp_path: Path, template: dict[str, Any]) -> None:
    # A simulated burn books its speed: duty is "not measured", never a pass.
    document, text, code = machine(tmp_path, template).run()
    assert code == 2
    missing = checks(document, "duty", "missing")
    assert [c["subject"] for c in missing] == [f"cublas gpu{i}" for i in range(8)]
    assert "not_measured" in missing[0]["detail"]
    assert "NOT MEASURED (exit 2)" in text


def test_missing_wins_over_a_missed_target(tmp_path: Path, template: dict[str, Any]) -> None:
    _, _, code = machine(tmp_path, template, reference=900.0).run()
    assert code == 2


def test_no_report_is_missing(tmp_path: Path, template: dict[str, Any]) -> None:
    out = machine(tmp_path, measured(template))
    out.step("certify-cublas", rc=124, stderr="Terminated\n")
    document, text, code = out.run()
    assert code == 2
    assert "timed out" in document["burn"]["cublas"]["error"]
    assert "cublas burn: NOT MEASURED: no report" in text


def test_no_burn_is_missing(tmp_path: Path, template: dict[str, Any]) -> None:
    report = measured(template)
    node(report)["facts"]["burn"] = None
    document, _, code = machine(tmp_path, report, torch_report=measured(template)).run()
    assert code == 2
    assert any(m.startswith("cublas burn") for m in document["missing"])


def test_a_gpu_without_tflops_is_missing(tmp_path: Path, template: dict[str, Any]) -> None:
    report = measured(template)
    burn_gpus(report)[5]["tflops"] = {"unavailable": "not_measured", "detail": "worker died"}
    document, _, code = machine(tmp_path, report).run()
    assert code == 2
    missing = checks(document, "burn_tflops", "missing")
    assert [c["subject"] for c in missing] == ["cublas gpu5", "torch gpu5"]
    assert "worker died" in missing[0]["detail"]


def test_a_gpu_absent_from_the_burn_is_missing(tmp_path: Path, template: dict[str, Any]) -> None:
    report = measured(template)
    node(report)["facts"]["burn"]["gpus"] = burn_gpus(report)[:7]
    document, _, code = machine(tmp_path, report).run()
    assert code == 2
    assert "cublas gpu7 burn_tflops: GPU absent from the burn" in document["missing"]


def test_torch_not_installed(tmp_path: Path, template: dict[str, Any]) -> None:
    out = machine(tmp_path, measured(template))
    out.step("torch-info", rc=1, stderr="ModuleNotFoundError: No module named 'torch'\n")
    out.skip("reference", "torch not installed")
    out.skip("certify-torch", "torch not installed")
    document, text, code = out.run()
    assert code == 2  # no reference: the 0.95 target cannot be judged
    assert document["machine"]["torch"]["version"] == "not installed"
    assert "torch not installed" in text
    assert "torch burn: SKIPPED: torch not installed" in text
    # the cuBLAS burn is still judged against what needs no torch
    assert checks(document, "vs_peak", "pass")
    assert checks(document, "vs_reference", "missing")


def test_gpuready_that_does_not_import(tmp_path: Path, template: dict[str, Any]) -> None:
    out = machine(tmp_path, measured(template))
    out.step("import-validator", rc=1, note="python3 -c 'import validator.cli.main' (repository)",
             stderr="Traceback...\nModuleNotFoundError: No module named 'click'\n")  # fmt: skip
    out.skip("certify-cublas", "gpuready does not import here")
    out.skip("certify-torch", "gpuready does not import here")
    document, text, code = out.run()
    assert code == 2
    assert document["machine"]["validator_import"]["error"] == (
        "ModuleNotFoundError: No module named 'click'"
    )
    assert "No module named 'click'" in text


def test_no_nvidia_smi_is_missing(tmp_path: Path, template: dict[str, Any]) -> None:
    out = machine(tmp_path, measured(template))
    out.step("nvidia-smi-L", rc=127, stderr="timeout: failed to run command 'nvidia-smi'\n")
    document, _, code = out.run()
    assert code == 2
    assert document["missing"][0].startswith("machine gpus: nvidia-smi -L listed no GPU")


def test_a_broken_summary_input_still_leaves_a_verdict(tmp_path: Path) -> None:
    (tmp_path / "steps.tsv").write_text("name\tstatus\trc\tstart\tend\ttimeout_s\tnote\n")
    assert summary.main(["summarize", str(tmp_path)]) == 2
    assert json.loads((tmp_path / "gpu_check.json").read_text())["exit_code"] == 2


# ------------------------------------------------------------------ model -> target


@pytest.mark.parametrize(
    ("name", "model", "ratio"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm", 0.70),
        ("NVIDIA H100 SXM5 64GB", "h100-sxm", 0.70),
        ("NVIDIA H200", "h200-sxm", 0.75),
        ("NVIDIA H200 NVL", None, None),
        ("NVIDIA GH200 480GB", None, None),
        ("NVIDIA H100 PCIe", None, None),
        ("NVIDIA H100 NVL", None, None),
        ("NVIDIA A100-SXM4-80GB", None, None),
        ("", None, None),
    ],
)
def test_model_to_target(name: str, model: str | None, ratio: float | None) -> None:
    assert summary.model_of(name) == model
    target = summary.target_for(name)
    assert (target.min_ratio if target else None) == ratio
    if target:
        assert target.peak_tflops == 989.0


# ------------------------------------------------------------------ held together


def test_under_load_rule_matches_validator_trace(template: dict[str, Any]) -> None:
    assert summary.LOAD_UTILIZATION_MIN_PCT == trace.LOAD_UTILIZATION_MIN_PCT
    assert summary.LOW_PERCENTILE == trace.LOW_PERCENTILE
    for data in burn_gpus(template):
        gpu = from_dict(GpuBurn, data)
        ours = summary.under_load(data)
        assert [s["t_s"] for s in ours] == [s.t_s for s in trace.under_load(gpu)]
        clocks = trace.numbers(trace.under_load(gpu), lambda s: s.sm_clock_mhz)
        assert summary.percentile(clocks, 5.0) == trace.percentile(clocks, 5.0)
    values = [3.0, 1.0, 2.0, 10.0]
    assert reference_mod.percentile(values, 10.0) == trace.percentile(values, 10.0)


def test_reference_window_statistics() -> None:
    stats = reference_mod.window_stats([700.0, 720.0, 710.0, 690.0, 730.0])
    assert stats == {"windows": 5, "median_tflops": 710.0, "p10_tflops": 694.0,
                     "p90_tflops": 726.0, "best_tflops": 730.0}  # fmt: skip
    assert reference_mod.window_stats([])["median_tflops"] is None
    assert reference_mod.parse_devices("all", 2) == [0, 1]
    assert reference_mod.parse_devices("1", 2) == [1]
    with pytest.raises(ValueError, match="not one of the 2 devices"):
        reference_mod.parse_devices("2", 2)


def test_reference_without_torch_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    assert reference_mod.main(["--seconds", "1", "--warmup", "0"]) == 3
    assert "torch is not installed" in json.loads(capsys.readouterr().out)["error"]


# ------------------------------------------------------------------ the script itself


def test_script_parses() -> None:
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_shellcheck() -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    done = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


def _run_script(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("this machine has nvidia-smi: the script would run a real burn")
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, check=False, timeout=120,
        env={**os.environ, "OUT": str(out), "PYTHON": sys.executable, **env},
    )  # fmt: skip
    return done, out


def test_script_without_a_gpu_fails_closed(tmp_path: Path) -> None:
    done, out = _run_script(tmp_path)
    assert done.returncode == 2, done.stderr
    document = json.loads((out / "gpu_check.json").read_text())
    assert document["exit_code"] == 2
    assert (out / "summary.txt").read_text() == done.stdout
    names = {s["name"] for s in document["steps"]}
    assert {"nvidia-smi-L", "import-validator", "torch-info", "interconnect",
            "certify-cublas"} <= names  # fmt: skip
    # the interconnect ran the agent's own measurement, said why it measured nothing
    interconnect = document["interconnect"]
    assert interconnect["exit_code"] == 2
    assert interconnect["missing"] == ["interconnect: no GPU answered NVML: nothing to measure"]
    assert json.loads((out / "interconnect.json").read_text()) == interconnect
    assert "interconnect: NOT MEASURED (exit 2)" in done.stdout
    step = next(s for s in document["steps"] if s["name"] == "interconnect")
    assert step["timeout_s"] == 60.0
    for name in ("nvidia-smi-L", "import-pynvml", "certify-cublas"):
        assert (out / f"{name}.stdout").exists()
        assert (out / f"{name}.stderr").exists()
        assert (out / f"{name}.rc").exists()
    assert document["machine"]["gpu_count"] == 0
    assert "n/a" not in done.stdout


def test_script_skips_what_the_deadline_leaves_no_time_for(tmp_path: Path) -> None:
    done, out = _run_script(tmp_path, DEADLINE_S="1")
    assert done.returncode == 2
    steps = {s["name"]: s for s in json.loads((out / "gpu_check.json").read_text())["steps"]}
    assert steps["certify-cublas"]["status"] == "skipped"
    assert steps["certify-cublas"]["note"] == "no time left before the deadline"
    assert steps["interconnect"]["status"] == "skipped"


# ------------------------------------------------------------------ the interconnect


def copies(index: int, h2d: float, d2h: float, hbm: float, numa: int = 0) -> GpuCopyBandwidth:
    def bw(value: float) -> Bandwidth:
        return Bandwidth(gb_s=value, repeats_gb_s=(value,) * 5, size_bytes=256 << 20)

    return GpuCopyBandwidth(index=index, numa_node=numa, h2d=bw(h2d), d2h=bw(d2h), hbm=bw(hbm))


ONE_GPU = Unavailable(Reason.NOT_SUPPORTED, "one GPU: no peer to copy to")


def interconnect_dir(
    tmp_path: Path, facts: Interconnect | None, *, names: list[str], exit_code: int = 0
) -> Path:
    """What the script leaves for its step 7: the step's row, names, figures, the summary."""
    out = tmp_path / "out"
    out.mkdir()
    rc = 0 if facts is not None and facts.error is None else 3
    (out / "steps.tsv").write_text(
        "name\tstatus\trc\tstart\tend\ttimeout_s\tnote\n"
        f"interconnect\tran\t{rc}\t100.0\t112.0\t60\t\n"
    )
    (out / "nvidia-smi-name.stdout").write_text("".join(f"{name}\n" for name in names))
    (out / "interconnect.stdout").write_text(
        json.dumps(to_dict(facts)) if facts is not None else "Traceback ...\n"
    )
    (out / "interconnect.stderr").write_text("" if facts else "ImportError: no validator\n")
    outcome = {0: "PASS", 1: "TARGET MISSED", 2: "NOT MEASURED"}[exit_code]
    document = {"exit_code": exit_code, "outcome": outcome, "missing": []}
    (out / "gpu_check.json").write_text(json.dumps(document))
    (out / "summary.txt").write_text("the burn's summary\n")
    return out


def report(out: Path) -> tuple[dict[str, Any], dict[str, Any], str, int]:
    done = subprocess.run(
        ["bash", str(SCRIPT), "--interconnect-report", str(out)], capture_output=True, text=True,
        check=False, timeout=60, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert done.stderr == "", done.stderr
    own = json.loads((out / "interconnect.json").read_text())
    document = json.loads((out / "gpu_check.json").read_text())
    assert document["interconnect"] == own
    assert (out / "summary.txt").read_text() == "the burn's summary\n" + done.stdout
    return own, document, done.stdout, done.returncode


def test_pcie_gen5_x16_per_direction() -> None:
    # 32 GT/s x 16 lanes, 128b/130b encoding, 8 bits a byte
    assert round(32 * 16 * 128 / 130 / 8, 2) == 63.02
    assert "63.02 GB/s per direction" in SCRIPT.read_text()


def test_one_h200_against_the_datasheet(tmp_path: Path) -> None:
    facts = Interconnect(
        source="cuda", idle_wait_s=0.0, gpus=(copies(0, 55.0, 56.5, 4200.0, numa=1),),
        peers=ONE_GPU,
        all_reduce=Unavailable(Reason.NOT_SUPPORTED, "one GPU: an all-reduce needs two or more"),
    )  # fmt: skip
    own, document, text, code = report(interconnect_dir(tmp_path, facts, names=[H200]))
    assert code == 0
    assert document["exit_code"] == 0
    assert own["datasheet"] == {"model": "H200", "hbm_gb_s": 4800.0, "pcie": "Gen5 x16",
                                "pcie_gb_s": 63.02}  # fmt: skip
    (gpu,) = own["gpus"]
    assert (gpu["h2d_gb_s"], gpu["h2d_ratio"]) == (55.0, 0.873)
    assert (gpu["d2h_gb_s"], gpu["d2h_ratio"]) == (56.5, 0.897)
    assert (gpu["hbm_gb_s"], gpu["hbm_ratio"]) == (4200.0, 0.875)
    assert gpu["numa_node"] == 1
    assert "gpu0 HBM   4200.00 GB/s  0.875 of the datasheet's 4800 GB/s" in text
    assert "gpu0 H2D     55.00 GB/s  0.873 of PCIe Gen5 x16 (63.02 GB/s)" in text
    assert own["needs_several_gpus"] == ["peer matrix", "NCCL all-reduce"]
    assert "peer matrix: needs two or more GPUs (this machine has 1)" in text
    assert "NCCL all-reduce: needs two or more GPUs (this machine has 1)" in text
    assert "interconnect: measured" in text


def test_eight_gpus_summarise_the_peer_matrix_and_all_reduce(tmp_path: Path) -> None:
    gpus = tuple(copies(i, 55.0, 55.0, 4100.0) for i in range(8))
    slow = {(3, i) for i in range(8)} | {(i, 3) for i in range(8)}
    peers = tuple(
        PeerBandwidth(
            src=s, dst=d, access=True,
            unidirectional=Bandwidth(gb_s=120.0 if (s, d) in slow else 390.0),
            bidirectional=Bandwidth(gb_s=110.0 if (s, d) in slow else 370.0),
        )
        for s in range(8) for d in range(8) if s != d
    )  # fmt: skip
    point = AllReducePoint(size_bytes=4 << 30, time_us=15690.0, algbw_gb_s=273.74,
                           busbw_gb_s=479.05, busbw_in_place_gb_s=480.1)  # fmt: skip
    small = dataclasses.replace(point, size_bytes=1 << 20, wrong=0)
    reduce = AllReduce(ranks=8, source="nccl", nccl_version="2.21.5", points=(small, point))
    facts = Interconnect(source="cuda", gpus=gpus, peers=peers, all_reduce=reduce)
    own, _, text, code = report(interconnect_dir(tmp_path, facts, names=[H200] * 8))
    assert code == 0
    assert own["peers"]["unidirectional"] == {"pairs": 56, "min_gb_s": 120.0,
                                              "median_gb_s": 390.0, "max_gb_s": 390.0}  # fmt: skip
    assert own["all_reduce"]["busbw_gb_s"] == 479.05
    assert own["all_reduce"]["wrong"] == 0
    assert "all-reduce: 8 ranks, busbw 479.05 GB/s at 4294967296 B, wrong 0" in text
    assert "needs_several_gpus" not in own


def test_a_missing_interconnect_figure_makes_the_run_not_measured(tmp_path: Path) -> None:
    gpus = (copies(0, 55.0, 55.0, 4100.0), copies(1, 55.0, 55.0, 4100.0))
    cut = Unavailable(Reason.ERROR, "no time left within the deadline")
    gpus = (gpus[0], dataclasses.replace(gpus[1], hbm=Bandwidth(gb_s=cut)))
    facts = Interconnect(source="cuda", gpus=gpus, peers=cut, all_reduce=cut)
    own, document, text, code = report(
        interconnect_dir(tmp_path, facts, names=[H100] * 2, exit_code=1)
    )
    assert code == 2
    assert (document["exit_code"], document["outcome"]) == (2, "NOT MEASURED")
    assert "interconnect gpu1 hbm: error: no time left within the deadline" in document["missing"]
    assert own["datasheet"]["model"] == "H100 SXM"
    assert "gpu1 HBM: NOT MEASURED: error: no time left within the deadline" in text
    assert "interconnect: NOT MEASURED (exit 2)" in text


def test_no_interconnect_output_is_not_measured(tmp_path: Path) -> None:
    own, document, _, code = report(interconnect_dir(tmp_path, None, names=[H200]))
    assert code == 2
    assert own["missing"] == [
        "interconnect: no figures (step ran, rc 3): ImportError: no validator"
    ]
    assert document["exit_code"] == 2


def test_an_unknown_model_gets_figures_without_ratios(tmp_path: Path) -> None:
    facts = Interconnect(source="cuda", gpus=(copies(0, 25.0, 26.0, 900.0),), peers=ONE_GPU,
                         all_reduce=ONE_GPU)  # fmt: skip
    own, _, text, code = report(
        interconnect_dir(tmp_path, facts, names=["NVIDIA GeForce RTX 4090"])
    )
    assert code == 0
    assert "datasheet" not in own
    assert own["gpus"][0]["h2d_ratio"] is None
    assert "no datasheet figures here for NVIDIA GeForce RTX 4090" in text
