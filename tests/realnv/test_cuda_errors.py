"""The interconnect measurement on the real CUDA runtimes, with a driver and no GPU.

The measurement runs as on a node (validator.node.bandwidth.live) against PyPI's real CUDA
12 and 13 runtimes and Debian's real libcuda (driver 535, CUDA 12.2), its NVML and device
list a simulated H100 node's. What the real runtimes return decides the advice: CUDA 13
refuses the older driver (status 35), CUDA 12 reaches it and finds no device (status 100).
The advice must follow the status, never the library's name in the path of the runtime
that did load.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from tests.collecting import collect_simulated
from tests.realnv.conftest import RealHost
from tests.realnv.software import PypiCuda
from validator.judge.policy import Policy
from validator.judge.verdict import judge_node
from validator.model import Action, Finding, Interconnect

MEASURE = """
import contextlib, json, sys
from validator.node.bandwidth import live
from validator.node.bandwidth.bandwidth_config import InterconnectConfig
from tests.collecting import collect_simulated
from validator.node.sim.scenario import load_scenario

facts = collect_simulated("healthy-8x-h100-sxm", interconnect="off")
fake = load_scenario("healthy-8x-h100-sxm").nvml()
seams = live.Seams(dirs=sys.argv[1:], nvml_session=lambda: contextlib.nullcontext(fake))
print(json.dumps(live.measure_live(facts, InterconnectConfig(), seams=seams).error))
"""


def _measured_error(host: RealHost, dirs: list[Path]) -> str:
    ran = host.run([sys.executable, "-c", MEASURE, *map(str, dirs)])
    assert ran.code == 0, ran.err
    error = json.loads(ran.out)
    assert isinstance(error, str)
    return error


def _judged(error: str) -> Finding:
    """The node's interconnect finding when its measurement said ``error``."""
    facts = collect_simulated("healthy-8x-h100-sxm", interconnect="off")
    facts = dataclasses.replace(facts, interconnect=Interconnect(source="cuda", error=error))
    result = judge_node(facts, Policy())
    (finding,) = [f for f in result.findings if f.check == "interconnect.run"]
    return finding


def test_a_runtime_newer_than_the_driver_says_install_a_driver_for_it(
    real_host: RealHost, pypi: PypiCuda
) -> None:
    error = _measured_error(real_host, [pypi.part("cu13") / "lib"])
    assert "(status 35)" in error  # the real CUDA 13 runtime, refused by the 535 driver
    finding = _judged(error)
    assert "the NVIDIA driver is older than the CUDA runtime" in finding.message
    assert "install the CUDA runtime" not in finding.message
    assert finding.action is Action.FIX_SOFTWARE


def test_a_runtime_that_reaches_the_driver_and_finds_no_gpu_says_so(
    real_host: RealHost, pypi: PypiCuda
) -> None:
    dirs = [pypi.part("cu13") / "lib", pypi.part("cuda_runtime") / "lib"]
    error = _measured_error(real_host, dirs)
    assert "(status 35)" in error
    assert "(status 100)" in error  # CUDA 12's: no CUDA-capable device is detected
    finding = _judged(error)
    assert "CUDA sees no GPU although the driver lists them" in finding.message
    assert finding.action is Action.REBOOT


def test_no_runtime_anywhere_says_install_it(real_host: RealHost, tmp_path: Path) -> None:
    error = _measured_error(real_host, [tmp_path])
    finding = _judged(error)
    assert "install the CUDA runtime" in finding.message
    assert finding.action is Action.FIX_SOFTWARE
