"""gpuready's commands on the real NVIDIA libraries with no device: each says what to do.

certify with every burn-in backend and the interconnect, capture, and the node agent run
on a host whose real driver libraries, nvidia-smi and PyPI CUDA wheels are installed and
whose kernel module is not loaded. None may print a traceback or die of a signal; each
exits as the README documents, and its findings say the driver's fix, not "run it again".
What capture records of the real nvidia-smi is replayed as a bundle and reads the same.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.collecting import collect_capture
from tests.realnv.conftest import RealHost
from validator.error_tree import ExitCode
from validator.judge.policy import Policy
from validator.judge.verdict import judge_node
from validator.model import Action, NvmlStatus

RECORDED = (
    Path(__file__).parent.parent
    / "fixtures"
    / "nvidia-smi-errors"
    / "debian12-nvidia-smi-535.261.03-driver-not-loaded.txt"
)


def _clean(ran_err: str, code: int) -> None:
    assert "Traceback" not in ran_err
    assert code >= 0, f"died of signal {-code}"


@pytest.mark.parametrize("backend", ["cublas", "numpy", "torch"])
def test_certify_with_each_backend_and_the_interconnect_says_fix_the_driver(
    real_host: RealHost, tmp_path: Path, backend: str
) -> None:
    ran = real_host.gpuready(
        "certify", "--burn", "2s", "--burn-backend", backend, "--interconnect", "--json",
        "--db", str(tmp_path / "h.db"),
    )  # fmt: skip
    _clean(ran.err, ran.code)
    assert ran.code == ExitCode.COULD_NOT_RUN, ran.err
    (node,) = json.loads(ran.out)["nodes"]
    by_check = {f["check"]: f for f in node["findings"]}
    for check in ("inventory.driver", "burn.run", "interconnect.run"):
        assert by_check[check]["action"] == "reboot", by_check[check]
    assert node["facts"]["burn"]["backend"] == backend


def test_capture_records_the_real_nvidia_smi_text_and_it_replays_the_same(
    real_host: RealHost, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    ran = real_host.gpuready("capture", str(bundle))
    _clean(ran.err, ran.code)
    assert ran.code == ExitCode.OK, ran.err
    recorded = (bundle / "nvidia-smi.txt").read_text(encoding="utf-8")
    assert recorded == RECORDED.read_text(encoding="utf-8")  # the fixture is still real
    facts = collect_capture(bundle)
    assert facts.nvml_status is NvmlStatus.DRIVER_NOT_LOADED
    result = judge_node(facts, Policy())
    (driver,) = [f for f in result.findings if f.check == "inventory.driver"]
    assert driver.action is Action.REBOOT
    assert "modprobe nvidia" in driver.message


def test_the_recorded_text_alone_reads_as_the_driver_not_loaded(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "nvidia-smi.txt").write_text(RECORDED.read_text(encoding="utf-8"))
    facts = collect_capture(bundle)
    assert facts.nvml_status is NvmlStatus.DRIVER_NOT_LOADED
    (driver,) = [f for f in judge_node(facts, Policy()).findings if f.check == "inventory.driver"]
    assert driver.action is Action.REBOOT


def test_the_agent_prints_facts_that_say_driver_not_loaded(real_host: RealHost) -> None:
    ran = real_host.run(
        [sys.executable, "-m", "validator.node.agent", "--burn", "2", "--interconnect", "on",
         "--deadline", "60"],
        timeout=120,
    )
    _clean(ran.err, ran.code)
    assert ran.code == ExitCode.OK, ran.err
    facts = json.loads(ran.out)
    assert facts["nvml_status"] == "driver_not_loaded"
    assert facts["burn"]["error"]
    assert facts["interconnect"]["error"]

