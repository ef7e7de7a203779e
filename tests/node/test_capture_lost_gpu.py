"""nvidia-smi saying a GPU is lost is a hardware fault on that GPU, not "no GPU found"."""

from __future__ import annotations

from pathlib import Path

from tests.collecting import collect_capture
from validator.judge import Policy, judge_node
from validator.model import Action, GpuStatus, Severity, Verdict

LOST = (
    Path(__file__).parent.parent / "fixtures" / "nvidia-smi-errors" / "issue-OWOD81-gpu-is-lost.txt"
)


def _bundle(directory: Path, name: str, text: str) -> Path:
    directory.mkdir()
    (directory / name).write_text(text, encoding="utf-8")
    return directory


def test_a_lost_gpu_in_the_banner_is_that_gpu_lost(tmp_path: Path) -> None:
    text = LOST.read_text(encoding="utf-8")
    for name in ("nvidia-smi.txt", "nvidia-smi-q.txt"):
        facts = collect_capture(_bundle(tmp_path / name, name, text))
        assert len(facts.gpus) == 1, name
        gpu = facts.gpus[0]
        assert gpu.status is GpuStatus.LOST
        assert gpu.pci_bus_id == "00000000:02:00.0"
        assert "GPU is lost" in gpu.status_detail
        result = judge_node(facts, Policy())
        assert result.verdict is Verdict.NOT_CERTIFIED
        assert "nothing to certify" not in result.summary
        lost = [f for f in result.findings if f.check == "inventory.gpu_status"]
        assert [f.severity for f in lost] == [Severity.FAIL]
        assert lost[0].gpu_index == 0
        assert lost[0].action is not Action.FIX_SOFTWARE
        assert all(
            f.action is not Action.FIX_SOFTWARE
            for f in result.findings
            if f.check == "inventory.driver"
        )


def test_an_unknown_error_on_a_handle_is_that_gpu_unreadable(tmp_path: Path) -> None:
    # Real text (NVIDIA/open-gpu-kernel-modules#387): the GPU answered nothing; not lost for sure.
    text = "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n"
    facts = collect_capture(_bundle(tmp_path / "b", "nvidia-smi.txt", text))
    assert [(g.status, g.pci_bus_id) for g in facts.gpus] == [(GpuStatus.ERROR, "00000000:0B:00.0")]
    result = judge_node(facts, Policy())
    assert result.verdict is not Verdict.CERTIFIED
    assert "nothing to certify" not in result.summary
