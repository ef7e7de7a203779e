"""What a first run decides from the PCI bus: no GPU, GPUs and no driver, or go on."""

from __future__ import annotations

import os
from pathlib import Path

from tests.node.sysfs_tree import (
    H100,
    NVIDIA_AUDIO,
    NVSWITCH,
    VGA,
    add_device,
    make_proc,
    make_sysfs,
)
from validator.node.live import pci_bus
from validator.node.live.pci_bus import first_run_problem, nvidia_gpus_on_bus


def test_a_machine_without_an_nvidia_gpu_has_nothing_to_certify(tmp_path: Path) -> None:
    sysfs = make_sysfs(tmp_path)
    proc = make_proc(tmp_path, nvidia_loaded=False)
    assert nvidia_gpus_on_bus(str(sysfs)) == ()
    problem = first_run_problem(str(sysfs), str(proc))
    assert problem is not None
    assert problem.startswith("no NVIDIA GPU on this machine's PCI bus: nothing to certify")
    assert "--simulate" in problem  # what the user can do here instead
    assert "\n" not in problem


def test_nvidia_functions_that_are_not_gpus_are_not_counted(tmp_path: Path) -> None:
    # An NVSwitch (a bridge) and a GPU's HDMI audio function are NVIDIA's, and no GPU.
    sysfs = make_sysfs(tmp_path, {"0000:05:00.0": NVSWITCH, "0000:06:00.1": NVIDIA_AUDIO})
    assert nvidia_gpus_on_bus(str(sysfs)) == ()


def test_gpus_without_a_driver_get_the_cause_and_the_fix(tmp_path: Path) -> None:
    sysfs = make_sysfs(tmp_path, {"0000:18:00.0": H100, "0000:2a:00.0": VGA})
    proc = make_proc(tmp_path, nvidia_loaded=False)
    gpus = nvidia_gpus_on_bus(str(sysfs))
    assert gpus is not None
    assert [gpu.address for gpu in gpus] == ["0000:18:00.0", "0000:2a:00.0"]
    problem = first_run_problem(str(sysfs), str(proc))
    assert problem == (
        "2 NVIDIA GPUs on the PCI bus (0000:18:00.0, 0000:2a:00.0) but no NVIDIA driver is "
        "loaded: install it (gpuready provision) or load it (modprobe nvidia); see dmesg for "
        "why it did not load"
    )


def test_gpus_with_the_driver_loaded_are_certified(tmp_path: Path) -> None:
    sysfs = make_sysfs(tmp_path, {"0000:18:00.0": H100}, driver="nvidia")
    proc = make_proc(tmp_path, nvidia_loaded=True)
    assert first_run_problem(str(sysfs), str(proc)) is None


def test_a_gpu_held_by_nouveau_says_so(tmp_path: Path) -> None:
    sysfs = make_sysfs(tmp_path, {"0000:01:00.0": VGA}, driver="nouveau")
    proc = make_proc(tmp_path, nvidia_loaded=False)
    problem = first_run_problem(str(sysfs), str(proc))
    assert problem is not None
    assert problem.startswith("1 NVIDIA GPU on the PCI bus (0000:01:00.0) but held by nouveau")
    assert "blacklist nouveau" in problem


def test_many_gpus_are_named_up_to_four(tmp_path: Path) -> None:
    gpus = {f"0000:{bus:02x}:00.0": H100 for bus in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB)}
    sysfs = make_sysfs(tmp_path, gpus)
    problem = first_run_problem(str(sysfs), str(make_proc(tmp_path, nvidia_loaded=False)))
    assert problem is not None
    assert problem.startswith(
        "6 NVIDIA GPUs on the PCI bus (0000:18:00.0, 0000:2a:00.0, 0000:3a:00.0, "
        "0000:5d:00.0 and 2 more)"
    )


def test_a_bus_that_cannot_be_read_decides_nothing(tmp_path: Path) -> None:
    # No sysfs (a container without it): the run finds out what it can, as before.
    assert nvidia_gpus_on_bus(str(tmp_path / "absent")) is None
    assert first_run_problem(str(tmp_path / "absent"), str(tmp_path)) is None


def test_no_link_is_followed_out_of_sysfs(tmp_path: Path) -> None:
    sysfs = make_sysfs(tmp_path)
    # A planted device entry leading out of sysfs, to a folder that looks like a GPU's.
    outside = tmp_path / "elsewhere" / "0000:99:00.0"
    outside.mkdir(parents=True)
    (outside / "vendor").write_text("0x10de\n")
    (outside / "class").write_text("0x030200\n")
    os.symlink(outside, sysfs / "bus" / "pci" / "devices" / "0000:99:00.0")
    # A device whose vendor file is itself a link (sysfs never makes one).
    folder = add_device(sysfs, "0000:98:00.0", "0x8086", "0x030200")
    (folder / "vendor").unlink()
    (tmp_path / "vendor").write_text("0x10de\n")
    os.symlink(tmp_path / "vendor", folder / "vendor")
    assert nvidia_gpus_on_bus(str(sysfs)) == ()


def test_reads_are_bounded(tmp_path: Path) -> None:
    sysfs = make_sysfs(tmp_path)
    folder = add_device(sysfs, "0000:97:00.0", "0x10de", "0x030200")
    # A vendor file of a megabyte: only its first bytes are read. Read whole, its tail
    # would make it no vendor id at all; its head is NVIDIA's.
    (folder / "vendor").write_text("0x10de" + " " * 100 + "x" * (1 << 20))
    gpus = nvidia_gpus_on_bus(str(sysfs))
    assert gpus is not None
    assert [gpu.address for gpu in gpus] == ["0000:97:00.0"]


def test_the_defaults_are_the_module_roots(tmp_path: Path, monkeypatch: object) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    sysfs = make_sysfs(tmp_path, {"0000:18:00.0": H100})
    monkeypatch.setattr(pci_bus, "SYSFS_ROOT", str(sysfs))
    monkeypatch.setattr(pci_bus, "PROC_ROOT", str(make_proc(tmp_path, nvidia_loaded=False)))
    problem = first_run_problem()
    assert problem is not None
    assert problem.startswith("1 NVIDIA GPU on the PCI bus (0000:18:00.0)")
