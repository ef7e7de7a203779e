"""A bundle's measurement files must describe the node its nvidia-smi files list.

Real outputs from ../shared/captures and tests/fixtures, combined under tmp_path: each file
recorded on another machine is a source conflict, never a PASS or a figure of this node.
"""

from __future__ import annotations

import re
from pathlib import Path

from validator.model import DcgmOutcome, DcgmTestResult, GpuFacts
from validator.node.capture.bundle_agreement import (
    NodeGpus,
    NvLinkBlock,
    dcgm_conflicts,
    kernel_log_conflicts,
    nvlink_conflicts,
    same_host,
)
from validator.node.capture.bundle_consistency import bundle_conflicts, query_view
from validator.node.capture.capture_replay import CaptureSystem
from validator.node.parsers.smi_query import parse_smi_query

A10_Q = "nvidia-smi-q/gls-A10-550.90.12.txt"
JOURNAL = (
    Path(__file__).parent.parent
    / "fixtures"
    / "kernel-log"
    / "gpu-operator1146-rminitadapter-journal.log"
)
NCCL_H200 = (
    "nccl-tests/WEAKPROV-codeidx-19124581599-8xh200-ndv5-nccl2.19.3-all_reduce_perf-8G-single-size"
    "-pass.txt"
)


def _node(count: int, *, whole: bool = True) -> NodeGpus:
    gpus = tuple(
        GpuFacts(index=i, uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000") for i in range(count)
    )
    return NodeGpus("nvidia-smi-q.txt", gpus, whole=whole)


def _bundle(directory: Path, files: dict[str, str]) -> CaptureSystem:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return CaptureSystem(directory)


def test_host_names_compare_short_against_fqdn() -> None:
    assert same_host("worker4", "WORKER4.cluster.example")
    assert not same_host("worker4", "worker5.cluster.example")


def test_the_real_journal_of_worker4_agrees_with_worker4_only() -> None:
    text = JOURNAL.read_text(encoding="utf-8")
    assert kernel_log_conflicts("dmesg.txt", text, "worker4.example", "meta.json") == []
    (conflict,) = kernel_log_conflicts("dmesg.txt", text, "gpu-node-07", "meta.json")
    assert conflict.what == "hostname"
    assert "worker4" in conflict.detail
    assert "gpu-node-07" in conflict.detail
    # A bundle naming no host compares nothing.
    assert kernel_log_conflicts("dmesg.txt", text, None, "hostname.txt") == []


def test_a_real_one_host_nccl_run_on_another_8_gpu_host(tmp_path: Path, captures_dir: Path) -> None:
    system = _bundle(
        tmp_path / "b",
        {
            "nvidia-smi-q.txt": (captures_dir / A10_Q).read_text(encoding="utf-8"),
            "all_reduce_perf.txt": (captures_dir / NCCL_H200).read_text(encoding="utf-8"),
            "hostname.txt": "a10-node\n",
        },
    )
    found = {conflict.what: conflict.detail for conflict in system.conflicts()}
    assert "ran ranks on GPUs of one host: 8" in found["gpu_count"]
    assert "test-h200-dsvm" in found["hostname"]
    assert "a10-node" in found["hostname"]


def test_nvlink_blocks_beyond_the_node_and_uuids_swapped() -> None:
    node = _node(2)
    uuids = [gpu.uuid for gpu in node.gpus]
    assert isinstance(uuids[0], str)
    assert isinstance(uuids[1], str)
    agree = [NvLinkBlock(0, uuids[0]), NvLinkBlock(1, uuids[1])]
    assert nvlink_conflicts("nvidia-smi-nvlink-s.txt", agree, node) == []
    swapped = [NvLinkBlock(0, uuids[1]), NvLinkBlock(1, uuids[0])]
    (moved,) = nvlink_conflicts("nvidia-smi-nvlink-s.txt", swapped, node)
    assert moved.what == "gpu_uuid"
    assert "GPU 0" in moved.detail
    assert "GPU 1" in moved.detail
    extra = [*agree, NvLinkBlock(2, None)]
    (count,) = nvlink_conflicts("nvidia-smi-nvlink-s.txt", extra, node)
    assert count.what == "gpu_count"
    foreign = [NvLinkBlock(0, "GPU-ffffffff-0000-0000-0000-000000000000")]
    assert [c.what for c in nvlink_conflicts("nvidia-smi-nvlink-s.txt", foreign, node)] == [
        "gpu_uuid"
    ]


def test_a_node_listing_cut_short_is_not_blamed_for_gpus_it_lacks() -> None:
    cut = _node(1, whole=False)
    results = [DcgmTestResult("memory", DcgmOutcome.PASS, gpu_index=i) for i in range(4)]
    assert dcgm_conflicts("dcgmi-diag.json", results, cut) == []
    blocks = [NvLinkBlock(i, None) for i in range(4)]
    assert nvlink_conflicts("nvidia-smi-nvlink-s.txt", blocks, cut) == []


def test_dcgm_gpus_the_node_lacks_and_one_gpu_twice() -> None:
    node = _node(1)
    beyond = [DcgmTestResult("memory", DcgmOutcome.PASS, gpu_index=i) for i in range(4)]
    (absent,) = dcgm_conflicts("dcgmi-diag.json", beyond, node)
    assert absent.what == "gpu_count"
    assert "GPU 1, 2, 3" in absent.detail
    twice = [
        DcgmTestResult("memory", DcgmOutcome.FAIL, gpu_index=0),
        DcgmTestResult("memory", DcgmOutcome.PASS, gpu_index=0),
    ]
    (dup,) = dcgm_conflicts("dcgmi-diag.json", twice, node)
    assert dup.what == "duplicate_gpu"
    assert "fail, pass" in dup.detail


def test_uuids_swapped_between_the_query_and_the_xml(captures_dir: Path) -> None:
    # Two views of the real 10-GPU A40 query, the second with GPUs 0 and 1's UUIDs swapped.
    text = (captures_dir / "nvidia-smi-q/gls-A40x10-550.127.05.txt").read_text(encoding="utf-8")
    uuids = re.findall(r"GPU UUID\s+: (GPU-[0-9a-f-]+)", text)
    swapped = text.replace(uuids[0], "SWAP").replace(uuids[1], uuids[0]).replace("SWAP", uuids[1])
    same = bundle_conflicts(
        [query_view("a.txt", parse_smi_query(text)), query_view("b.txt", parse_smi_query(text))]
    )
    assert same == ()
    views = [
        query_view("nvidia-smi-q.xml", parse_smi_query(swapped)),
        query_view("nvidia-smi-q.txt", parse_smi_query(text)),
    ]
    (conflict,) = bundle_conflicts(views)
    assert conflict.what == "gpu_uuid"
    assert uuids[1] in conflict.detail
    assert uuids[0] in conflict.detail
