"""The real driver installed and not loaded: what every node shows between install and reboot.

Debian's libnvidia-ml1, libcuda1 and nvidia-smi (535.261.03) with no kernel module: the
real NVML returns NVML_ERROR_DRIVER_NOT_LOADED, the real nvidia-smi exits 9 saying it
"couldn't communicate with the NVIDIA driver", the real libcuda's cuInit returns 100. The
texts are recorded here as they came, and gpuready must read them as one clear finding:
the driver is installed and not loaded, reboot (or modprobe).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.realnv.conftest import RealHost
from validator.error_tree import ExitCode

# What the real software said, recorded on this machine's run of it (no GPU, no module).
SMI_NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def test_the_real_nvidia_smi_says_it_cannot_reach_the_driver_and_exits_9(
    bare_driver_host: RealHost,
) -> None:
    ran = bare_driver_host.run(["nvidia-smi"])
    assert ran.code == 9
    assert ran.out.strip() == SMI_NO_DRIVER


def test_the_real_nvml_and_libcuda_say_driver_not_loaded_and_no_device(
    bare_driver_host: RealHost,
) -> None:
    probe = (
        "import ctypes\n"
        "nvml = ctypes.CDLL('libnvidia-ml.so.1')\n"
        "nvml.nvmlErrorString.restype = ctypes.c_char_p\n"
        "code = nvml.nvmlInit_v2()\n"
        "cuda = ctypes.CDLL('libcuda.so.1')\n"
        "text = ctypes.c_char_p()\n"
        "status = cuda.cuInit(0)\n"
        "cuda.cuGetErrorString(status, ctypes.byref(text))\n"
        "print(code, nvml.nvmlErrorString(code).decode(), status, text.value.decode(), sep='|')\n"
    )
    ran = bare_driver_host.run(["python3", "-c", probe])
    assert ran.code == 0, ran.err
    assert ran.out.strip() == "9|Driver Not Loaded|100|no CUDA-capable device is detected"


def test_certify_reads_it_as_one_finding_reboot_or_modprobe(
    bare_driver_host: RealHost, tmp_path: Path
) -> None:
    ran = bare_driver_host.gpuready(
        "certify", "--burn", "0", "--json", "--db", str(tmp_path / "h.db")
    )
    assert "Traceback" not in ran.err
    assert ran.code == ExitCode.COULD_NOT_RUN, ran.err  # nothing could be judged
    (node,) = json.loads(ran.out)["nodes"]
    findings = {f["check"]: f for f in node["findings"]}
    driver = findings["inventory.driver"]
    assert "the NVIDIA driver is installed but its kernel module is not loaded" in driver["message"]
    assert "reboot" in driver["message"]
    assert "modprobe nvidia" in driver["message"]
    assert driver["action"] == "reboot"
    # what the driver could not say is fixed by fixing the driver, not by asking again
    for check in ("versions.driver", "versions.cuda", "versions.kernel_module"):
        assert findings[check]["severity"] == "UNKNOWN", check
        assert findings[check]["action"] == "reboot", findings[check]
    assert node["facts"]["nvml_status"] == "driver_not_loaded"


def test_the_terminal_report_says_what_to_do(bare_driver_host: RealHost, tmp_path: Path) -> None:
    ran = bare_driver_host.gpuready("certify", "--burn", "0", "--db", str(tmp_path / "h.db"))
    assert "Traceback" not in ran.err
    lines = ran.out.splitlines()
    line = next(ln for ln in lines if "inventory.driver" in ln)
    assert "-> reboot" in line
    stack = [ln for ln in lines if "versions." in ln or "inventory." in ln]
    rerun = [ln for ln in stack if "run it again" in ln]
    assert not rerun, rerun


def test_with_gpus_on_the_bus_and_no_module_certify_says_so_in_one_line(
    unloaded_driver_host: RealHost, tmp_path: Path
) -> None:
    """The first run after install, before the reboot: the cause and the fix, nothing else."""
    db = tmp_path / "h.db"
    ran = unloaded_driver_host.gpuready("certify", "--burn", "0", "--json", "--db", str(db))
    assert ran.code == ExitCode.COULD_NOT_RUN, ran.err
    assert ran.out == ""  # no report
    (line,) = ran.err.splitlines()
    assert line.startswith("gpuready: error: 2 NVIDIA GPUs on the PCI bus (0000:18:00.0, "), line
    assert "no NVIDIA driver is loaded" in line
    assert "modprobe nvidia" in line
    assert not db.exists()  # nothing recorded
