"""A first run on a machine with nothing to certify: one line, exit 3, nothing written.

Run as the user runs it: ``python -m validator.cli.main certify`` in a child process,
its sysfs and /proc those of tests.node.sysfs_tree (set in the child before main runs)
or, where this machine has no NVIDIA GPU, the machine's own.
"""

from __future__ import annotations

import glob
import subprocess
import sys
from pathlib import Path

import pytest

from tests.node.sysfs_tree import H100, make_proc, make_sysfs
from validator.error_tree import CouldNotRunError
from validator.node.burnin.burn_config import BurnConfig
from validator.node.live import pci_bus
from validator.service.certify_service import CertifyRequest, run_certify
from validator.store import Store

REPO = Path(__file__).resolve().parents[2]
NO_GPU = "no NVIDIA GPU on this machine's PCI bus: nothing to certify"


def gpuready(
    tmp_path: Path, *argv: str, sysfs: Path | None = None, proc: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """gpuready in a child process, as typed; with this sysfs and /proc where given."""
    roots = ""
    if sysfs is not None and proc is not None:
        roots = (
            "from validator.node.live import pci_bus\n"
            f"pci_bus.SYSFS_ROOT = {str(sysfs)!r}\npci_bus.PROC_ROOT = {str(proc)!r}\n"
        )
    code = f"import sys\n{roots}from validator.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    command = (
        [sys.executable, "-c", code] if roots else [sys.executable, "-m", "validator.cli.main"]
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "HOME": str(tmp_path),
    }
    return subprocess.run(
        [*command, *argv], cwd=REPO, capture_output=True, text=True, timeout=120, env=env,
        check=False,
    )  # fmt: skip


def nothing_written(tmp_path: Path) -> None:
    """No history database, no report folder."""
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.db"))
    assert not (tmp_path / "reports").exists()


def test_a_machine_without_a_gpu_gets_one_line_and_exit_3(tmp_path: Path) -> None:
    sysfs, proc = make_sysfs(tmp_path), make_proc(tmp_path, nvidia_loaded=False)
    done = gpuready(
        tmp_path, "certify", "--burn", "0", "--report-dir", str(tmp_path / "reports"),
        sysfs=sysfs, proc=proc,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"gpuready: error: {NO_GPU} (run gpuready on a GPU node, or try it here with "
        "--simulate healthy-8x-h100-sxm)"
    ]
    nothing_written(tmp_path)


def test_gpus_and_no_driver_get_the_cause_and_the_fix(tmp_path: Path) -> None:
    sysfs = make_sysfs(tmp_path, {"0000:18:00.0": H100, "0000:2a:00.0": H100})
    proc = make_proc(tmp_path, nvidia_loaded=False)
    done = gpuready(tmp_path, "certify", "--burn", "5m", "--json", sysfs=sysfs, proc=proc)
    assert done.returncode == 3, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        "gpuready: error: 2 NVIDIA GPUs on the PCI bus (0000:18:00.0, 0000:2a:00.0) but no "
        "NVIDIA driver is loaded: install it (gpuready provision) or load it (modprobe nvidia)"
    )
    nothing_written(tmp_path)


def test_simulate_and_capture_do_not_look_at_this_machine(tmp_path: Path) -> None:
    sysfs, proc = make_sysfs(tmp_path), make_proc(tmp_path, nvidia_loaded=False)
    simulated = gpuready(
        tmp_path, "certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "1s",
        sysfs=sysfs, proc=proc,
    )  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr
    assert "CERTIFIED" in simulated.stdout
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "hostname.txt").write_text("captured-node\n")
    (bundle / "nvidia-smi.txt").write_text("No devices were found\n")
    captured = gpuready(tmp_path, "certify", "--capture", str(bundle), sysfs=sysfs, proc=proc)
    assert "captured-node" in captured.stdout, captured.stderr
    assert NO_GPU not in captured.stderr


def _this_machine_has_an_nvidia_gpu() -> bool:
    """Read apart from the code under test: any NVIDIA display or 3D controller in sysfs."""
    for device in glob.glob("/sys/bus/pci/devices/*"):
        try:
            vendor = Path(device, "vendor").read_text().strip()
            device_class = Path(device, "class").read_text().strip()
        except OSError:
            continue
        if vendor == "0x10de" and device_class[:6] in ("0x0300", "0x0302"):
            return True
    return False


@pytest.mark.skipif(
    not Path("/sys/bus/pci/devices").is_dir() or _this_machine_has_an_nvidia_gpu(),
    reason="this machine has an NVIDIA GPU (or no sysfs): its first run is not this one",
)
def test_this_machine_without_a_gpu_as_the_user_runs_it(tmp_path: Path) -> None:
    done = gpuready(tmp_path, "certify", "--burn", "0")
    assert done.returncode == 3, done.stderr
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1
    assert NO_GPU in done.stderr
    nothing_written(tmp_path)


def test_the_service_records_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pci_bus, "SYSFS_ROOT", str(make_sysfs(tmp_path)))
    monkeypatch.setattr(pci_bus, "PROC_ROOT", str(make_proc(tmp_path, nvidia_loaded=False)))
    request = CertifyRequest(burn=BurnConfig(duration_s=0), report_dir=str(tmp_path / "reports"))
    with Store.open(tmp_path / "h.db", defer_create=True) as store:
        with pytest.raises(CouldNotRunError, match=NO_GPU):
            run_certify(request, store)
        assert not store.take_notices()
    assert not (tmp_path / "h.db").exists()
    assert not (tmp_path / "reports").exists()


def test_a_fleet_host_without_a_gpu_is_its_own_clear_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The controller has no GPU either: a fleet is not this machine, and is certified.
    monkeypatch.setattr(pci_bus, "SYSFS_ROOT", str(make_sysfs(tmp_path)))
    monkeypatch.setattr(pci_bus, "PROC_ROOT", str(make_proc(tmp_path, nvidia_loaded=False)))
    from tests.remote.test_deadline import write_inventory
    from validator.model import Action, TransportName, Verdict
    from validator.service.collect_and_judge import Reach

    inventory = write_inventory(
        tmp_path / "hosts.yml",
        {
            "gpu-a": {"gpuready_simulate": "healthy-8x-h100-sxm"},
            "cpu-b": {"gpuready_simulate": "no-gpu-driver"},
        },
    )
    request = CertifyRequest(
        reach=Reach(inventories=(str(inventory),), transport=TransportName.LOCAL),
        burn=BurnConfig(duration_s=1.0),
    )
    with Store.open(tmp_path / "h.db") as store:
        outcome = run_certify(request, store)
    nodes = {node.hostname: node for node in outcome.report.nodes}
    assert nodes["gpu-a"].verdict is Verdict.CERTIFIED
    cpu = nodes["cpu-b"]
    assert cpu.verdict is Verdict.UNKNOWN
    assert cpu.summary.startswith("no NVIDIA GPU on the PCI bus: nothing to certify (")
    assert [f.check for f in cpu.findings if f.action is Action.RERUN] == []
    assert outcome.exit_code != 0  # a host that could not be judged is never a pass


def test_a_fleet_as_the_user_runs_it(tmp_path: Path) -> None:
    sysfs, proc = make_sysfs(tmp_path), make_proc(tmp_path, nvidia_loaded=False)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    cpu-b:\n      gpuready_simulate: no-gpu-driver\n")
    done = gpuready(
        tmp_path, "certify", "-i", str(inventory), "--transport", "local", "--burn", "1s",
        "--no-color", sysfs=sysfs, proc=proc,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "cpu-b" in done.stdout
    assert "no NVIDIA GPU on the PCI bus: nothing to certify" in done.stdout
    assert "Traceback" not in done.stderr
