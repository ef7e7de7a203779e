"""Every capture in the corpus parses, and agrees with what the file itself says.

The expected values here come from simple regular expressions over each file,
independent of the parsers. Odd files (TRUNCATED, MIG, Windows, trimmed XML)
are covered like the rest; where a check needs a different rule, the rule and
the reason are written next to it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import captures_root
from validator.model import NvmlStatus, Reason, Unavailable
from validator.node.parsers.cudnn import parse_cudnn_header, parse_cudnn_packages
from validator.node.parsers.kernel_log import parse_xid_events
from validator.node.parsers.nvcc import parse_nvcc_version
from validator.node.parsers.smi_banner import parse_banner
from validator.node.parsers.smi_query import parse_smi_query
from validator.node.parsers.smi_xml import parse_smi_xml


def _files(folder: str, pattern: str = "*") -> list[str]:
    root = captures_root()
    if root is None:
        return ["<captures absent>"]  # the test body skips through the fixture
    names = sorted(p.name for p in (root / folder).glob(pattern) if p.is_file())
    assert names, f"no files in captures/{folder}"
    return names


def _read(captures_dir: Path, folder: str, name: str) -> str:
    return (captures_dir / folder / name).read_text(encoding="utf-8")


def _unmeasured(value: object) -> bool:
    return isinstance(value, Unavailable) and value.reason == Reason.NOT_MEASURED


# ---------------------------------------------------------------- nvidia-smi -q


@pytest.mark.parametrize("name", _files("nvidia-smi-q"))
def test_every_query_text(name: str, captures_dir: Path) -> None:
    text = _read(captures_dir, "nvidia-smi-q", name)
    result = parse_smi_query(text)
    assert result.status == NvmlStatus.OK
    # GPU-level keys sit at four spaces; MIG Device sections have no Product Name.
    names = re.findall(r"^ {4}Product Name\s+: (.*?)\s*$", text, re.M)
    headers = re.findall(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$", text, re.M)
    totals = re.findall(r"^ {4}FB Memory Usage\s*\n\s+Total\s+: (\d+) MiB", text, re.M)
    assert len(result.gpus) == len(names) == len(headers)
    assert [gpu.name for gpu in result.gpus] == names
    assert [gpu.pci_bus_id for gpu in result.gpus] == [h.upper() for h in headers]
    # The TRUNCATED file stops before FB Memory Usage: its GPU has no total.
    measured = [g.memory_total_mib for g in result.gpus if not _unmeasured(g.memory_total_mib)]
    assert measured == [int(t) for t in totals]
    if "TRUNCATED" in name:
        assert len(totals) == 0
        assert _unmeasured(result.gpus[0].memory_total_mib)
    attached = re.search(r"^Attached GPUs\s+: (\d+)", text, re.M)
    assert attached is not None
    assert result.attached_gpus == int(attached.group(1))
    # R610 marks "Driver Version" deprecated and adds "KMD Version": we report the KMD one.
    kmd = re.search(r"^KMD Version\s+: (\S+)", text, re.M)
    driver = re.search(r"^Driver Version\s+: (\S+)", text, re.M)
    assert driver is not None
    assert result.driver_version == (kmd or driver).group(1)
    cuda = re.search(r"^CUDA (?:UMD )?Version\s+: (\d+\.\d+)\s*$", text, re.M) or re.search(
        r"^CUDA Version\s+: (\S+)", text, re.M
    )
    assert cuda is not None
    assert result.cuda_version == cuda.group(1)


# ---------------------------------------------------------------- nvidia-smi -q -x


@pytest.mark.parametrize("name", _files("nvidia-smi-xml", "*.xml"))
def test_every_query_xml(name: str, captures_dir: Path) -> None:
    text = _read(captures_dir, "nvidia-smi-xml", name)
    result = parse_smi_xml(text)
    assert result.status == NvmlStatus.OK
    gpu_ids = re.findall(r'<gpu id="([^"]+)"', text)
    names = re.findall(r"<product_name>\s*(.*?)\s*</product_name>", text)
    assert len(result.gpus) == len(gpu_ids) == len(names)
    assert [gpu.name for gpu in result.gpus] == names
    assert [gpu.pci_bus_id for gpu in result.gpus] == [g.upper() for g in gpu_ids]
    # MIG devices carry their own <fb_memory_usage>; the GPU's is outside <mig_devices>.
    outside_mig = re.sub(r"<mig_devices>.*?</mig_devices>", "", text, flags=re.S)
    totals = re.findall(r"<fb_memory_usage>\s*<total>\s*(\d+) MiB", outside_mig)
    if "<fb_memory_usage>" not in outside_mig:
        # netdata-rtx-pro-6000 was trimmed to a few elements by its author: no memory to read.
        assert all(_unmeasured(gpu.memory_total_mib) for gpu in result.gpus)
    else:
        assert [gpu.memory_total_mib for gpu in result.gpus] == [int(t) for t in totals]
    driver = re.search(r"<driver_version>(.*?)</driver_version>", text)
    if driver is None:
        # Trimmed by the fixture's author (SOURCES.md): no driver line to compare.
        assert _unmeasured(result.driver_version)
    else:
        assert result.driver_version == driver.group(1).strip()
    attached = re.search(r"<attached_gpus>\s*(\d+)\s*</attached_gpus>", text)
    if attached is None:
        assert _unmeasured(result.attached_gpus)
    else:
        # telegraf-a100-sxm4-v12 says 4 but kept one <gpu>: the parser reports both facts.
        assert result.attached_gpus == int(attached.group(1))


# ---------------------------------------------------------------- plain nvidia-smi


@pytest.mark.parametrize("name", _files("nvidia-smi-banner"))
def test_every_banner(name: str, captures_dir: Path) -> None:
    text = _read(captures_dir, "nvidia-smi-banner", name)
    result = parse_banner(text)
    assert result.status == NvmlStatus.OK
    gpu_table = re.split(r"^\|\s*(?:MIG devices|Processes):", text, flags=re.M)[0]
    rows = re.findall(
        r"^\|\s+(\d+)\s+(.+?)\s+(On|Off|WDDM|TCC|N/A)\s*\|\s+([0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d)",
        gpu_table,
        re.M,
    )
    memory = re.findall(r"\|\s+(\d+)MiB /\s+(\d+)MiB\s+\|", gpu_table)
    assert len(result.gpus) == len(rows) == len(memory)
    for gpu, row, (used, total) in zip(result.gpus, rows, memory):
        assert gpu.index == int(row[0])
        assert gpu.name == row[1]
        assert gpu.pci_bus_id == row[3]
        assert (gpu.memory_used_mib, gpu.memory_total_mib) == (int(used), int(total))
        if row[2] in ("WDDM", "TCC"):
            assert isinstance(gpu.persistence_mode, Unavailable)
        else:
            assert gpu.persistence_mode == (row[2] == "On")
    driver = re.search(r"(?:Driver|KMD) Version:\s+(\S+)", text)
    assert driver is not None
    assert result.driver_version == driver.group(1)
    if "-mig-" in name:
        assert all(gpu.mig_mode is True for gpu in result.gpus)


# ---------------------------------------------------------------- nvcc, cuDNN


@pytest.mark.parametrize("name", _files("nvcc"))
def test_every_nvcc(name: str, captures_dir: Path) -> None:
    text = _read(captures_dir, "nvcc", name)
    match = re.search(r"release \d+\.\d+, V(\d+\.\d+\.\d+)", text)
    assert match is not None
    assert parse_nvcc_version(text) == match.group(1)


@pytest.mark.parametrize("name", _files("cudnn"))
def test_every_cudnn(name: str, captures_dir: Path) -> None:
    text = _read(captures_dir, "cudnn", name)
    if "#define CUDNN_MAJOR" in text:
        keys = ("MAJOR", "MINOR", "PATCHLEVEL")
        parts = [re.search(rf"#define CUDNN_{key}\s+(\d+)", text) for key in keys]
        assert all(parts)
        expected = ".".join(p.group(1) for p in parts if p)
        assert parse_cudnn_header(text) == expected
    else:
        # Not a header: every other cuDNN capture is a package listing.
        line = re.search(r"^ii\s+libcudnn\d+\s+(\d+\.\d+\.\d+)\.\d+-\S*?cuda(\d+)", text, re.M)
        assert line is not None, f"{name} is neither a header nor a dpkg listing"
        assert parse_cudnn_packages(text) == (line.group(1), int(line.group(2)))


# ---------------------------------------------------------------- kernel log


@pytest.mark.parametrize("name", _files("xid", "*.log"))
def test_every_xid_log(name: str, captures_dir: Path) -> None:
    text = _read(captures_dir, "xid", name)
    events = parse_xid_events(text)
    codes = [int(code) for code in re.findall(r"\bS?Xid \(PCI:[^)]+\): (\d+)", text)]
    assert [event.xid for event in events] == codes
    assert [event.nvswitch for event in events] == [
        bool(re.search(r"\bSXid \(", line)) for line in text.splitlines() if "Xid (PCI:" in line
    ]
