"""An old nvidia-smi table (R319) prints memory in "MB", which were MiB: read, not refused."""

from __future__ import annotations

from pathlib import Path

from validator.model import NvmlStatus, Unavailable
from validator.node.parsers.smi_banner import parse_banner

M2090 = (
    Path(__file__).parent.parent
    / "fixtures"
    / "nvidia-smi-banner"
    / "WEAKPROV-codeidx-8908100332-2xtesla-m2090-319.37-memory-in-MB.txt"
)


def test_memory_printed_in_mb_reads_as_mib() -> None:
    banner = parse_banner(M2090.read_text(encoding="utf-8"))
    assert banner.status is NvmlStatus.OK
    assert banner.driver_version == "319.37"
    assert [gpu.pci_bus_id for gpu in banner.gpus] == ["00000000:11:00.0", "00000000:14:00.0"]
    assert [(gpu.memory_used_mib, gpu.memory_total_mib) for gpu in banner.gpus] == [
        (6016, 6143),
        (6016, 6143),
    ]
    assert [gpu.power_draw_w for gpu in banner.gpus] == [145.0, 142.0]
    for gpu in banner.gpus:
        assert isinstance(gpu.power_cap_w, Unavailable)
        assert isinstance(gpu.temperature_gpu_c, Unavailable)


def test_other_memory_units_are_still_refused() -> None:
    text = M2090.read_text(encoding="utf-8").replace("6143MB", "6143GB", 1)
    banner = parse_banner(text)
    assert isinstance(banner.gpus[0].memory_total_mib, Unavailable)
    assert banner.gpus[1].memory_total_mib == 6143
