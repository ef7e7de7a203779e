"""The GPUDirect parsers on real outputs: ``nvidia-smi topo -m`` and ``lspci -vvv``.

The topology matrices are the shared corpus's (../shared/captures, read in place; two are
pastes cut short, named ``-TRUNCATED``); the lspci output is a real 8x H100 Dell server's
(tests/fixtures/lspci, see its SOURCES.md). This machine's own ``lspci -vvv`` is run too.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from validator.node.parsers.base import ParseError
from validator.node.parsers.lspci_acs import parse_acs_ports
from validator.node.parsers.smi_topo import parse_topo_matrix

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lspci"
DELL_H100 = FIXTURES / "gpud-dell-8xh100-cx7-pex890xx.txt"


def test_deepep_pcie_only_matrix_cut_after_four_rows(captures_dir: Path) -> None:
    text = (
        captures_dir / "nvidia-smi-topo/issue-deepep60-8gpu-topo-mp-pcie-only-14nics-TRUNCATED.txt"
    )
    matrix = parse_topo_matrix(text.read_text())
    assert matrix.gpus == tuple(f"GPU{i}" for i in range(8))
    assert len(matrix.nics) == 14
    assert matrix.nics[12] == "NIC12"
    nearest = {link.gpu: (link.nearest_nic, link.link) for link in matrix.links}
    assert nearest == {
        "GPU0": ("NIC0", "PIX"),
        "GPU1": ("NIC1", "PIX"),
        "GPU2": ("NIC2", "PIX"),
        "GPU3": ("NIC7", "PIX"),
    }
    # The rows of GPU4-7 were cut from the paste: not known, never guessed.
    assert matrix.missing_rows == ("GPU4", "GPU5", "GPU6", "GPU7")


def test_dgx2_matrix_names_nics_mlx5(captures_dir: Path) -> None:
    path = (
        captures_dir
        / "nvidia-smi-topo/issue-nccltests78-16xv100-dgx2-topo-m-NV6-mlx5-TRUNCATED.txt"
    )
    matrix = parse_topo_matrix(path.read_text())
    assert len(matrix.gpus) == 16
    assert matrix.nics == tuple(f"mlx5_{i}" for i in range(10))
    assert [(link.nearest_nic, link.link) for link in matrix.links] == [
        ("mlx5_0", "PIX"),
        ("mlx5_0", "PIX"),
        ("mlx5_1", "PIX"),
        ("mlx5_1", "PIX"),
    ]
    assert len(matrix.missing_rows) == 12


def test_single_gpu_matrices_have_no_nic(captures_dir: Path) -> None:
    # Newer drivers: tab separated, ANSI-underlined header, empty affinity cells.
    paths = sorted((captures_dir / "nvidia-smi-misc").glob("*__topo.txt"))
    read = 0
    for path in paths:
        text = path.read_text()
        if "Option -m is missing its value" in text:  # Windows 591 refused `topo -m`
            with pytest.raises(ParseError):
                parse_topo_matrix(text)
            continue
        matrix = parse_topo_matrix(text)
        assert matrix.gpus == ("GPU0",)
        assert matrix.nics == ()
        assert matrix.links[0].nearest_nic is None
        assert matrix.missing_rows == ()
        read += 1
    assert read == 9


def test_unknown_link_word_is_bad_input() -> None:
    text = "\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tFOO\t0-7\nNIC0\tFOO\t X \n"
    with pytest.raises(ParseError, match="FOO"):
        parse_topo_matrix(text)


def test_real_h100_server_has_acs_off_on_every_switch_port_above_gpus_and_nics() -> None:
    ports = parse_acs_ports(DELL_H100.read_text())
    assert len(ports) == 26
    assert sum(port.kind == "upstream" for port in ports) == 8
    assert all(port.readable and not port.acs_enabled for port in ports)
    by_address = {port.address: port for port in ports}
    assert by_address["17:01.0"].below == ("19:00.0",)  # GPU 0
    assert by_address["17:02.0"].below == ("1a:00.0",)  # its ConnectX-7
    assert by_address["17:01.0"].has_acs
    assert not by_address["16:00.0"].has_acs
    # ACS is on above the NVSwitches and at two root ports: neither is judged.
    assert "82:00.0" not in by_address
    assert "00:0c.0" not in by_address


def test_enabled_bits_are_read_from_the_real_lines() -> None:
    text = DELL_H100.read_text()
    block = text[text.index("82:00.0 PCI bridge") :]
    block = block[: block.index("\n\n") + 2]
    # The PMC-Sierra port's own real block, with an NVIDIA GPU put behind it.
    gpu = "83:00.0 3D controller: NVIDIA Corporation Device 2330 (rev a1)\n\n"
    (port,) = parse_acs_ports(block + gpu)
    assert port.kind == "downstream"
    assert port.below == ("83:00.0",)
    assert port.src_valid
    assert port.req_redir
    assert port.cmplt_redir
    assert port.acs_enabled


def test_access_denied_is_not_readable() -> None:
    text = (
        "03:05.0 PCI bridge: Advanced Micro Devices, Inc. [AMD] Matisse PCIe GPP Bridge\n"
        "\tBus: primary=03, secondary=09, subordinate=09, sec-latency=0\n"
        "\tCapabilities: <access denied>\n\n"
        "09:00.0 Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n\n"
    )
    (port,) = parse_acs_ports(text)
    assert not port.readable
    assert port.kind == "unknown"


def test_not_lspci_output_is_bad_input() -> None:
    with pytest.raises(ParseError):
        parse_acs_ports("hello\nworld\n")


@pytest.mark.skipif(shutil.which("lspci") is None, reason="pciutils is not installed")
def test_this_machines_lspci_vvv_parses() -> None:
    # Live: this machine has no NVIDIA GPU and no NIC, so no switch port is above one.
    out = subprocess.run(["lspci", "-vvv"], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0
    ports = parse_acs_ports(out.stdout)
    assert all(port.below for port in ports)
    assert ports == () or "NVIDIA" in out.stdout or "Mellanox" in out.stdout


def test_the_live_probe_on_this_machine() -> None:
    # Live, through the one System seam: real lspci (pciutils), no nvidia-smi, no HCA here.
    from validator.model import Unavailable
    from validator.node.gpudirect_probe import gpudirect_facts
    from validator.node.system import LiveSystem

    direct = gpudirect_facts(LiveSystem())
    if shutil.which("lspci") is not None:
        assert not isinstance(direct.acs_ports, Unavailable), direct.acs_ports
    if shutil.which("nvidia-smi") is None:
        assert isinstance(direct.topology, Unavailable)
        assert "not found" in direct.topology.detail
    assert not isinstance(direct.iommu, Unavailable) or direct.iommu.detail
