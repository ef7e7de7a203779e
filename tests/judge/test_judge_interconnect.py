"""The interconnect checks: host, HBM and peer copies, peer access and NCCL all-reduce.

Facts are built with the model's dataclasses on the healthy 8x H100 node of
tests/judge/test_judge_healthy.py; the H100 figures sit where real HGX H100 boards measure
(Gen5 x16 host copies of ~54 GB/s, above Azure's 48 floor and near its README's 52; peer
copies of ~372 GB/s, above Azure's 335; all-reduce ~481 GB/s, near the ~480 nccl-tests'
maintainer quotes for 8x H100 with NVLink SHARP). Where a real output exists the test
reads it in place from ../shared/captures (nvbandwidth's README matrix, the 8x A100 and
8x H200 nccl-tests runs).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.interconnect_samples import (
    PEER,
    copies,
    healthy_interconnect,
    peers,
    sweep,
)
from tests.judge.test_judge_healthy import healthy_burn, healthy_node, with_gpu
from validator.judge import Policy, judge_node
from validator.judge.catalog import Sku, load_catalog
from validator.judge.checks import interconnect as checks
from validator.judge.checks.interconnect import check, interconnect_required
from validator.judge.policy import Thresholds
from validator.model import (
    Action,
    AllReduce,
    AllReducePoint,
    Bandwidth,
    Finding,
    Interconnect,
    NodeFacts,
    PeerBandwidth,
    Reason,
    Severity,
    Unavailable,
    Verdict,
)

PASS, FAIL, UNKNOWN = Severity.PASS, Severity.FAIL, Severity.UNKNOWN
MiB, GiB = 1 << 20, 1 << 30
H100 = load_catalog().get("h100-sxm")

# ---------------------------------------------------------------- builders


def unmeasured() -> NodeFacts:
    """The healthy node with no interconnect facts: not asked for and not recorded."""
    return healthy_node(interconnect=None)


def node(**changes: object) -> NodeFacts:
    return healthy_node(interconnect=healthy_interconnect(**changes))


def judged(facts: NodeFacts, policy: Policy | None = None, sku: Sku | None = H100) -> list[Finding]:
    return check(facts, policy if policy is not None else Policy(), sku)


def of(findings: list[Finding], check_id: str) -> list[Finding]:
    return [f for f in findings if f.check == check_id]


def not_passed(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is not PASS]


def one(findings: list[Finding], check_id: str, severity: Severity | None = None) -> Finding:
    found = [f for f in of(findings, check_id) if severity is None or f.severity is severity]
    assert len(found) == 1, found
    return found[0]


def thresholds(**limits: float) -> Policy:
    return Policy(thresholds=Thresholds(**limits))  # type: ignore[arg-type]


# ---------------------------------------------------------------- required or not


def one_gpu(interconnect: Interconnect | None = None) -> NodeFacts:
    """A healthy 1x H100 SXM cloud instance: an NVLink SKU with nothing to link to."""
    facts = healthy_node()
    assert facts.burn is not None
    return dataclasses.replace(
        facts,
        gpus=facts.gpus[:1],
        pci_gpu_count=1,
        pci_nvswitch_count=0,
        burn=healthy_burn(gpus=facts.burn.gpus[:1]),
        interconnect=interconnect,
    )


@pytest.mark.parametrize(
    ("interconnect", "sku_id", "gpus", "required"),
    [
        (None, "h100-sxm", 8, True),  # NVLink on the board
        (None, "gb200", 8, True),
        (None, "h100-sxm", 2, True),
        (None, "h100-sxm", 1, False),  # one GPU: nothing between GPUs to measure
        (None, "l40s", 8, False),  # no NVLink
        (None, "h100-nvl", 8, False),  # optional bridges: no fixed count
        (True, "l40s", 8, True),
        (True, "h100-sxm", 1, True),
        (False, "h100-sxm", 8, False),
    ],
)
def test_required_by_the_policy_or_where_two_gpus_of_the_board_have_nvlink(
    interconnect: bool | None, sku_id: str, gpus: int, required: bool
) -> None:
    sku = load_catalog().get(sku_id)
    facts = healthy_node()
    facts = dataclasses.replace(facts, gpus=facts.gpus[:gpus])
    assert interconnect_required(Policy(interconnect=interconnect), sku, facts) is required
    assert interconnect_required(Policy(), None, facts) is False


def test_one_gpu_of_an_nvlink_sku_is_certified_without_its_interconnect() -> None:
    # As certify runs it (interconnect: null, --interconnect auto): one GPU is not measured.
    result = judge_node(one_gpu(), Policy())
    assert result.verdict is Verdict.CERTIFIED, result.summary
    assert [f for f in result.findings if f.check.startswith("interconnect.")] == []
    # Measured (--interconnect on): its own copies, nothing between GPUs.
    measured = one_gpu(
        healthy_interconnect(
            gpus=copies(count=1),
            peers=Unavailable(Reason.NOT_SUPPORTED, "one GPU"),
            all_reduce=Unavailable(Reason.NOT_SUPPORTED, "one GPU"),
        )
    )
    result = judge_node(measured, Policy())
    assert result.verdict is Verdict.CERTIFIED, result.summary
    assert sorted(f.check for f in result.findings if f.check.startswith("interconnect.")) == [
        checks.D2H,
        checks.H2D,
        checks.HBM,
    ]


def test_not_measured_where_required_blocks_and_says_how_to_measure() -> None:
    finding = one(judged(unmeasured()), checks.RUN)
    assert finding.severity is UNKNOWN
    assert finding.required
    assert finding.message == (
        "The interconnect was not measured: H100 SXM5 80GB GPUs are joined by NVLink, so "
        "their PCIe, HBM, peer and all-reduce bandwidth are required; certify with "
        "--interconnect (or set interconnect: false in the policy to certify without it)"
    )
    assert finding.action is Action.RERUN
    asked = one(
        judged(unmeasured(), Policy(interconnect=True), load_catalog().get("l40s")), checks.RUN
    )
    assert asked.message.startswith(
        "The interconnect was not measured: the policy asks for it (interconnect: true); "
    )


def test_not_required_and_not_measured_says_nothing() -> None:
    assert judged(unmeasured(), sku=load_catalog().get("l40s")) == []
    assert judged(unmeasured(), Policy(interconnect=False)) == []
    assert judged(unmeasured(), sku=None) == []


def test_measured_where_not_required_is_judged_without_blocking_on_unknowns() -> None:
    facts = node(gpus=Unavailable(Reason.ERROR, "no time left for the copies"))
    findings = judged(facts, Policy(interconnect=False))
    unknown = one(findings, checks.H2D)
    assert unknown.severity is UNKNOWN
    assert not unknown.required
    assert one(findings, checks.ALL_REDUCE).severity is PASS


@pytest.mark.parametrize(
    ("error", "fix", "action"),
    [
        # The measurement's own texts, as it reported them with the real libraries
        # (tests/realnv/test_cuda_errors.py makes them live): no runtime found anywhere,
        (
            "no CUDA runtime can run: libcudart.so.13/libcudart.so.12/libcudart.so.11 not "
            "found in /usr/lib/x86_64-linux-gnu: install the CUDA toolkit (gpuready provision)",
            "install the CUDA runtime (gpuready provision, the cuda_toolkit role)",
            Action.FIX_SOFTWARE,
        ),
        # PyPI's CUDA 13 runtime over Debian's 535 driver (CUDA 12.2),
        (
            "no CUDA runtime can run: CUDA 13 (/site-packages/nvidia/cu13/lib/libcudart.so.13):"
            " cudaGetDeviceCount failed: CUDA driver version is insufficient for CUDA runtime "
            "version (status 35)",
            "the NVIDIA driver is older than the CUDA runtime: install a driver for it, or a "
            "runtime the driver supports (gpuready provision pins both)",
            Action.FIX_SOFTWARE,
        ),
        # and that runtime beside CUDA 12's, which reached the driver and found no GPU,
        (
            "no CUDA runtime can run: CUDA 13 (/site-packages/nvidia/cu13/lib/libcudart.so.13):"
            " cudaGetDeviceCount failed: CUDA driver version is insufficient for CUDA runtime "
            "version (status 35); CUDA 12 (/site-packages/nvidia/cuda_runtime/lib/"
            "libcudart.so.12): cudaGetDeviceCount failed: no CUDA-capable device is detected "
            "(status 100)",
            "CUDA sees no GPU although the driver lists them: check CUDA_VISIBLE_DEVICES and "
            "that the driver is loaded (nvidia-smi), then reboot",
            Action.REBOOT,
        ),
        # and a failure with no status, or NCCL's own status (3 is ncclInternalError, not
        # cudaErrorInitializationError): measure again.
        ("an all-reduce of 8 GPUs timed out", "measure it again", Action.RERUN),
        ("ncclAllReduce failed: internal error (status 3)", "measure it again", Action.RERUN),
    ],
)
def test_could_not_run_gives_the_facts_own_reason_and_its_fix(
    error: str, fix: str, action: Action
) -> None:
    findings = judged(healthy_node(interconnect=Interconnect(source="cuda", error=error)))
    assert len(findings) == 1
    finding = findings[0]
    assert (finding.check, finding.severity, finding.required) == (checks.RUN, UNKNOWN, True)
    assert finding.message == f"The interconnect could not be measured: {error}; {fix}"
    assert finding.action is action


def test_all_reduce_without_nccl_says_install_nccl() -> None:
    facts = node(all_reduce=Unavailable(Reason.NOT_SUPPORTED, "libnccl.so.2 not found"))
    finding = one(judged(facts), checks.ALL_REDUCE)
    assert finding.severity is UNKNOWN
    assert finding.required
    assert finding.message == (
        "NCCL all-reduce was not measured: not supported: libnccl.so.2 not found; install "
        "NCCL (gpuready provision installs it with the nccl role)"
    )
    assert finding.action is Action.FIX_SOFTWARE


# ---------------------------------------------------------------- healthy


def test_a_healthy_h100_node_passes_every_interconnect_check() -> None:
    findings = judged(node())
    assert not_passed(findings) == []
    assert {f.check for f in findings} == {
        checks.H2D,
        checks.D2H,
        checks.HBM,
        checks.PEER_ACCESS,
        checks.P2P,
        checks.ALL_REDUCE,
    }
    for check_id in (checks.H2D, checks.D2H, checks.HBM):
        assert [f.gpu_index for f in of(findings, check_id)] == list(range(8))
    h2d = of(findings, checks.H2D)[0]
    assert (
        h2d.message
        == "GPU 0 host-to-device bandwidth 53.8 GB/s (floor 48 GB/s, node median 54.0 GB/s)"
    )
    assert h2d.expected == ">= 48 GB/s (H100 SXM5 80GB) and >= 85% of the node median (54.0 GB/s)"
    assert h2d.gpu_uuid == "GPU-00000000-aaaa-bbbb-cccc-000000000000"
    assert of(findings, checks.HBM)[2].message == (
        "GPU 2 HBM copy bandwidth 2545 GB/s (floor 1905 GB/s, node median 2540 GB/s)"
    )
    assert one(findings, checks.PEER_ACCESS).message == "All 56 GPU pairs have peer access"
    assert one(findings, checks.P2P).message == (
        "All 56 GPU pairs copy at 372 GB/s (floor 335 GB/s, node median 372 GB/s)"
    )
    assert one(findings, checks.ALL_REDUCE).message == (
        "NCCL all-reduce busbw 481 GB/s at 4 GiB over 8 GPUs (floor 460 GB/s)"
    )


def test_the_healthy_node_with_its_interconnect_is_certified() -> None:
    result = judge_node(node(), Policy())
    assert result.verdict is Verdict.CERTIFIED, result.summary
    assert {f.check for f in result.findings if f.check.startswith("interconnect.")} >= {
        checks.P2P,
        checks.ALL_REDUCE,
    }


def test_the_same_node_without_its_interconnect_is_not_certified() -> None:
    result = judge_node(unmeasured(), Policy())
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert "could not be judged: interconnect.run" in result.summary


def test_simulated_figures_are_judged_like_measured_ones() -> None:
    slow = copies({3: (27.0, 27.5, 2540.0)})
    real = judged(node(gpus=slow))
    simulated = judged(node(gpus=slow, source="simulate", simulated=True))
    assert simulated == real
    assert one(simulated, checks.H2D, FAIL).gpu_index == 3


# ---------------------------------------------------------------- host copies


def test_a_riser_at_x8_fails_the_host_copies_naming_the_link() -> None:
    facts = with_gpu(node(gpus=copies({3: (27.0, 27.5, 2540.0)})), 3, pcie_width_current=8)
    findings = judged(facts)
    h2d = one(findings, checks.H2D, FAIL)
    assert h2d.gpu_index == 3
    assert h2d.message == (
        "GPU 3 host-to-device bandwidth 27.0 GB/s is below the floor of 48 GB/s and below "
        "85% of the node median 54.0 GB/s; its PCIe link trained at x8 of x16"
    )
    assert (h2d.observed, h2d.action) == ("27.0 GB/s", Action.RESEAT_CABLE_RISER)
    assert "PCIe path" in h2d.action_source
    d2h = one(findings, checks.D2H, FAIL)
    assert d2h.message.endswith("; its PCIe link trained at x8 of x16")
    # Every other GPU still passes: one riser is one GPU.
    assert [f.gpu_index for f in not_passed(findings)] == [3, 3]


def test_the_link_is_named_only_where_it_is_below_the_skus() -> None:
    slow = node(gpus=copies({1: (27.0, 55.0, 2540.0), 2: (27.0, 55.0, 2540.0)}))
    facts = with_gpu(with_gpu(slow, 1, pcie_gen_max=4), 2, pcie_gen_max=4, pcie_width_current=8)
    findings = of(judged(facts), checks.H2D)
    messages = {f.gpu_index: f.message for f in findings if f.severity is FAIL}
    assert messages[1].endswith("; its PCIe link trained at Gen4 of Gen5")
    assert messages[2].endswith("; its PCIe link trained at Gen4 x8 of Gen5 x16")
    # A full link: the message names no link (the riser or slot is still the step).
    plain = judged(node(gpus=copies({4: (30.0, 55.0, 2540.0)})))
    assert one(plain, checks.H2D, FAIL).message == (
        "GPU 4 host-to-device bandwidth 30.0 GB/s is below the floor of 48 GB/s and below "
        "85% of the node median 54.0 GB/s"
    )


def test_the_policys_floor_overrides_the_catalogs() -> None:
    findings = of(judged(node(), thresholds(h2d_min_gbs=54.05)), checks.H2D)
    failed = [f.gpu_index for f in findings if f.severity is FAIL]
    assert failed == [0, 1, 3, 4, 6]
    assert findings[0].message == (
        "GPU 0 host-to-device bandwidth 53.8 GB/s is below the floor of 54.05 GB/s "
        "(node median 54.0 GB/s)"
    )
    assert findings[0].expected.startswith(">= 54.05 GB/s (the policy)")
    # A lower floor from the policy passes what the catalog's would have failed.
    lenient = judged(
        node(gpus=copies({3: (40.0, 55.0, 2540.0)}, count=8)), thresholds(h2d_min_gbs=30)
    )
    assert one(lenient, checks.H2D, FAIL).message == (
        "GPU 3 host-to-device bandwidth 40.0 GB/s is below 85% of the node median 54.0 GB/s "
        "(floor 30 GB/s)"
    )


# ---------------------------------------------------------------- HBM and the sibling rule


def test_slow_hbm_above_the_floor_fails_by_the_sibling_rule() -> None:
    findings = judged(node(gpus=copies({5: (54.1, 55.2, 2100.0)})))
    hbm = one(findings, checks.HBM, FAIL)
    assert hbm.gpu_index == 5
    assert hbm.message == (
        "GPU 5 HBM copy bandwidth 2100 GB/s is below 85% of the node median 2540 GB/s "
        "(floor 1905 GB/s)"
    )
    assert hbm.action is Action.DRAIN_RMA
    assert not_passed(findings) == [hbm]


def test_hbm_below_the_floor_fails() -> None:
    hbm = one(judged(node(gpus=copies({0: (53.8, 55.0, 1800.0)}))), checks.HBM, FAIL)
    assert hbm.message == (
        "GPU 0 HBM copy bandwidth 1800 GB/s is below the floor of 1905 GB/s and below 85% of "
        "the node median 2540 GB/s"
    )


def _two_gpus(h2d: tuple[float, float]) -> NodeFacts:
    facts = healthy_node()
    facts = dataclasses.replace(facts, gpus=facts.gpus[:2], burn=None, pci_gpu_count=2)
    measured = healthy_interconnect(
        gpus=copies({0: (h2d[0], 55.0, 2540.0), 1: (h2d[1], 55.0, 2540.0)}, count=2),
        peers=peers(count=2),
        all_reduce=sweep(ranks=2),
    )
    return dataclasses.replace(facts, interconnect=measured)


def test_two_gpus_are_judged_against_the_floor_alone() -> None:
    # 49 is far below 98, but two figures cannot say which one is wrong: the floor judges.
    findings = of(judged(_two_gpus((49.0, 98.0))), checks.H2D)
    assert [f.severity for f in findings] == [PASS, PASS]
    assert findings[0].message == (
        "GPU 0 host-to-device bandwidth 49.0 GB/s (floor 48 GB/s, 2 figures, too few for a "
        "node median)"
    )
    assert findings[0].expected == ">= 48 GB/s (H100 SXM5 80GB)"
    failed = of(judged(_two_gpus((40.0, 54.0))), checks.H2D)
    assert [f.severity for f in failed] == [FAIL, PASS]


def test_two_gpus_without_a_floor_are_not_judged_and_do_not_block() -> None:
    gb200 = load_catalog().get("gb200")  # NVLink-C2C to Grace: no PCIe floor
    findings = of(judged(_two_gpus((49.0, 98.0)), sku=gb200), checks.H2D)
    assert [(f.severity, f.required) for f in findings] == [(UNKNOWN, False)] * 2
    assert findings[0].message == (
        f"GPU 0 host-to-device bandwidth 49.0 GB/s cannot be judged: no floor is known for "
        f"{gb200.label}, and 2 figures are too few for a node median; set h2d_min_gbs in the "
        "policy's thresholds"
    )


def test_without_a_floor_the_node_median_judges_and_says_no_floor_is_known() -> None:
    gb200 = load_catalog().get("gb200")
    findings = of(judged(node(gpus=copies({2: (30.0, 55.0, 4800.0)})), sku=gb200), checks.H2D)
    assert findings[0].message == (
        f"GPU 0 host-to-device bandwidth 53.8 GB/s (no floor is known for {gb200.label}, "
        "node median 54.0 GB/s)"
    )
    failed = [f for f in findings if f.severity is FAIL]
    assert [f.message for f in failed] == [
        "GPU 2 host-to-device bandwidth 30.0 GB/s is below 85% of the node median 54.0 GB/s "
        f"(no floor is known for {gb200.label})"
    ]


def test_an_unmeasured_copy_is_a_blocking_unknown_with_its_reason() -> None:
    broken = list(copies())
    broken[4] = dataclasses.replace(
        broken[4],
        hbm=Bandwidth(gb_s=Unavailable(Reason.ERROR, "cudaMemcpy: an illegal memory access")),
    )
    findings = judged(node(gpus=tuple(broken[:7] + broken[7:])))
    hbm = one(findings, checks.HBM, UNKNOWN)
    assert (hbm.gpu_index, hbm.required, hbm.action) == (4, True, Action.RERUN)
    assert hbm.message == (
        "GPU 4 HBM copy bandwidth was not measured: error: cudaMemcpy: an illegal memory access"
    )
    # A GPU missing from the results entirely is not measured either.
    missing = judged(node(gpus=copies()[:7]))
    assert [f.message for f in not_passed(missing)] == [
        f"GPU 7 {what} bandwidth was not measured: not measured: the interconnect results "
        "hold no entry for it"
        for what in ("host-to-device", "device-to-host", "HBM copy")
    ]


def test_copies_not_measured_at_all_are_one_unknown_per_check() -> None:
    findings = judged(node(gpus=Unavailable(Reason.ERROR, "no time left for the copies")))
    unknown = not_passed(findings)
    assert [(f.check, f.gpu_index) for f in unknown] == [
        (checks.H2D, None),
        (checks.D2H, None),
        (checks.HBM, None),
    ]
    assert unknown[0].message == (
        "The host-to-device bandwidth of the GPUs was not measured: error: no time left for "
        "the copies; measure it again"
    )


# ---------------------------------------------------------------- busy GPUs


def test_a_busy_gpus_low_figure_is_unknown_not_a_fail() -> None:
    facts = node(gpus=copies({3: (27.0, 27.5, 2540.0), 5: (54.1, 55.2, 2541.0)}), busy_gpus=(3, 5))
    findings = judged(facts)
    h2d = one(findings, checks.H2D, UNKNOWN)
    assert h2d.message == (
        "GPU 3 host-to-device bandwidth 27.0 GB/s is below the floor of 48 GB/s and below 85% "
        "of the node median 54.0 GB/s, but GPU 3 was still busy when measured (the idle gate "
        "gave up waiting): measure it again with the GPU idle"
    )
    assert (h2d.required, h2d.action, h2d.observed) == (True, Action.RERUN, "27.0 GB/s (busy)")
    assert of(findings, checks.H2D)[5].severity is PASS  # busy, yet fast enough: it passes
    assert [f for f in findings if f.severity is FAIL] == []


def test_a_busy_gpu_slow_to_its_peers_is_unknown() -> None:
    facts = node(peers=peers(lambda s, d: 150.0 if 6 in (s, d) else PEER), busy_gpus=(6,))
    p2p = one(judged(facts), checks.P2P)
    assert p2p.severity is UNKNOWN
    assert p2p.message == (
        "GPU 6 is slow to every peer: 150 GB/s against a node median of 372 GB/s, floor 335 "
        "GB/s, but GPU 6 was still busy when measured (the idle gate gave up waiting): "
        "measure it again with the GPU idle"
    )


def test_busy_gpus_are_left_out_of_the_copy_median() -> None:
    # Four busy GPUs at 30 GB/s would pull the median to 37 and let GPU 7's 44 pass.
    slow = dict.fromkeys(range(4), (30.0, 55.0, 2540.0)) | {7: (44.0, 55.0, 2540.0)}
    facts = node(gpus=copies(slow), busy_gpus=(0, 1, 2, 3))
    findings = of(judged(facts, thresholds(h2d_min_gbs=20)), checks.H2D)
    assert [(f.gpu_index, f.severity) for f in findings if f.severity is not PASS] == [
        (0, UNKNOWN),
        (1, UNKNOWN),
        (2, UNKNOWN),
        (3, UNKNOWN),
        (7, FAIL),
    ]
    assert findings[7].message == (
        "GPU 7 host-to-device bandwidth 44.0 GB/s is below 85% of the node median 54.0 GB/s "
        "(floor 20 GB/s)"
    )


def test_pairs_touching_busy_gpus_are_left_out_of_the_peer_median() -> None:
    busy = (0, 1, 2, 3)
    slow = {(4, 5): 300.0, (5, 4): 300.0}

    def copy(src: int, dst: int) -> float:
        return 150.0 if {src, dst} & set(busy) else slow.get((src, dst), PEER)

    findings = of(
        judged(node(peers=peers(copy), busy_gpus=busy), thresholds(p2p_min_gbs=100)), checks.P2P
    )
    failed = [f for f in findings if f.severity is FAIL]
    assert [f.message for f in failed] == [
        "GPUs 4 and 5 copy to each other at 300 GB/s, below 85% of the node median 372 GB/s "
        "(floor 100 GB/s): the link between them"
    ]
    # The busy GPUs' pairs are theirs, UNKNOWN: GPU 4 is not slow for being paired with them.
    unknown = [f for f in findings if f.severity is UNKNOWN]
    assert [f.gpu_index for f in unknown] == [0, 1, 2, 3]
    assert all("still busy when measured" in f.message for f in unknown)
    assert unknown[0].message.startswith(
        "GPU 0 is slow to every peer: 150 GB/s against a node median of 372 GB/s"
    )


# ---------------------------------------------------------------- the peer matrix


def _slow_gpu_six(src: int, dst: int) -> float:
    """GPU 6 with an NVLink tray down: 121-130 GB/s to and from every peer."""
    if 6 not in (src, dst):
        return PEER
    other = dst if src == 6 else src
    return 121.0 + other + (2.0 if src == 6 else 0.0)


def test_one_gpu_slow_to_every_peer_is_one_finding_for_that_gpu() -> None:
    findings = judged(node(peers=peers(_slow_gpu_six)))
    p2p = of(findings, checks.P2P)
    assert len(p2p) == 1  # not 14 pair findings
    finding = p2p[0]
    assert (finding.severity, finding.gpu_index) == (FAIL, 6)
    assert finding.message == (
        "GPU 6 is slow to every peer: 121-130 GB/s against a node median of 372 GB/s, floor "
        "335 GB/s: its NVLinks or its NVSwitch port"
    )
    assert finding.observed == "121-130 GB/s to 7 peers"
    # NVLink on an SXM baseboard: nothing to reseat (checks.nvlink.link_repair).
    assert finding.action is Action.DRAIN_RMA
    assert "SXM baseboard" in finding.action_source


def test_a_gpu_slow_to_most_peers_is_still_the_gpu() -> None:
    slow = {(6, d) for d in (0, 1, 2, 3, 4)} | {(s, 6) for s in (1, 2, 3, 4, 5)}
    findings = of(
        judged(node(peers=peers(lambda s, d: 200.0 if (s, d) in slow else PEER))), checks.P2P
    )
    assert [(f.gpu_index, f.message.split(":")[0]) for f in findings] == [
        (6, "GPU 6 is slow to 6 of its 7 peers")
    ]


def test_a_superchips_slow_gpu_is_reseated_at_the_spine() -> None:
    gb200 = load_catalog().get("gb200")
    finding = one(judged(node(peers=peers(_slow_gpu_six)), sku=gb200), checks.P2P)
    assert finding.message == (
        "GPU 6 is slow to every peer: 121-130 GB/s against a node median of 372 GB/s, no floor "
        f"is known for {gb200.label}: its NVLinks to the rack's NVLink switch trays"
    )
    assert finding.action is Action.RESEAT_CABLE_RISER


def test_an_isolated_slow_pair_is_the_pair() -> None:
    facts = node(peers=peers(lambda s, d: {(2, 5): 150.0, (5, 2): 152.0}.get((s, d), PEER)))
    p2p = one(judged(facts), checks.P2P)
    assert (p2p.severity, p2p.gpu_index) == (FAIL, None)
    assert p2p.message == (
        "GPUs 2 and 5 copy to each other at 150-152 GB/s, below the floor of 335 GB/s and "
        "below 85% of the node median 372 GB/s: the link between them"
    )
    assert p2p.action is Action.DRAIN_RMA


def test_one_slow_direction_is_that_direction() -> None:
    facts = node(peers=peers(lambda s, d: 300.0 if (s, d) == (2, 5) else PEER))
    assert one(judged(facts), checks.P2P).message == (
        "GPU 2 -> GPU 5 copies at 300 GB/s, below the floor of 335 GB/s and below 85% of the "
        "node median 372 GB/s: the link between them"
    )


def test_a_pair_above_the_policys_floor_still_fails_below_its_siblings() -> None:
    facts = node(peers=peers(lambda s, d: 300.0 if (s, d) == (2, 5) else PEER))
    p2p = one(judged(facts, thresholds(p2p_min_gbs=200)), checks.P2P)
    assert p2p.message == (
        "GPU 2 -> GPU 5 copies at 300 GB/s, below 85% of the node median 372 GB/s (floor "
        "200 GB/s): the link between them"
    )
    assert p2p.expected == ">= 200 GB/s (the policy) and >= 85% of the node median (372 GB/s)"
    # Just above 85% of the median passes.
    near = node(peers=peers(lambda s, d: 317.0 if (s, d) == (2, 5) else PEER))
    assert one(judged(near, thresholds(p2p_min_gbs=200)), checks.P2P).severity is PASS


def test_every_pair_slow_is_the_fabric_not_eight_gpus() -> None:
    facts = node(peers=peers(lambda s, d: 250.0 + s))
    p2p = one(judged(facts), checks.P2P)
    assert p2p.message == (
        "56 of 56 GPU pairs are slow across the node: 250-257 GB/s against a node median of "
        "254 GB/s, floor 335 GB/s: the NVLink fabric the pairs share"
    )


def test_every_pair_slow_while_every_gpu_is_busy_is_one_unknown() -> None:
    facts = node(peers=peers(lambda s, d: 250.0 + s), busy_gpus=tuple(range(8)))
    p2p = one(judged(facts), checks.P2P)
    assert (p2p.severity, p2p.required, p2p.action) == (UNKNOWN, True, Action.RERUN)
    # No idle pair to take a median of: the floor alone judges.
    assert p2p.message == (
        "56 of 56 GPU pairs are slow across the node: 250-257 GB/s against floor 335 GB/s, "
        "but GPUs 0, 1, 2, 3, 4, 5, 6, 7 were still busy when measured (the idle gate gave up "
        "waiting): measure them again idle"
    )


def test_unmeasured_pairs_of_one_gpu_are_one_unknown() -> None:
    failed = Unavailable(Reason.ERROR, "cudaMemcpyPeerAsync: peer access is not supported")
    matrix = [
        dataclasses.replace(p, unidirectional=Bandwidth(gb_s=failed)) if 5 in (p.src, p.dst) else p
        for p in peers()
    ]
    findings = of(judged(node(peers=tuple(matrix))), checks.P2P)
    assert [(f.severity, f.gpu_index, f.required) for f in findings] == [
        (UNKNOWN, 5, True),
        (PASS, None, True),
    ]
    assert findings[0].message == (
        "GPU 5 peer copies to and from every peer were not measured: error: "
        "cudaMemcpyPeerAsync: peer access is not supported"
    )
    assert (
        findings[1].message
        == "All 42 GPU pairs copy at 372 GB/s (floor 335 GB/s, node median 372 GB/s)"
    )


def test_the_peer_matrix_not_measured_is_one_unknown() -> None:
    facts = node(peers=Unavailable(Reason.ERROR, "no time left for the peer matrix"))
    finding = one(judged(facts), checks.P2P)
    assert (finding.severity, finding.required) == (UNKNOWN, True)
    assert finding.message == (
        "The GPU peer matrix was not measured: error: no time left for the peer matrix; "
        "measure it again"
    )


def _matrix(text: str) -> dict[tuple[int, int], float]:
    """nvbandwidth's GPU(row) <- GPU(column) matrix, off the diagonal."""
    values: dict[tuple[int, int], float] = {}
    for line in text.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit() and all(re.fullmatch(r"\d+\.\d+", c) for c in cells[1:]):
            row = int(cells[0])
            values |= {(row, col): float(v) for col, v in enumerate(cells[1:]) if col != row}
    return values


def test_the_nvbandwidth_readme_matrix_passes_as_an_a100_node(captures_dir: Path) -> None:
    text = (
        captures_dir / "nvbandwidth/repo-NVIDIA-nvbandwidth-README-8xgpu-d2d-memcpy-write-ce-"
        "276GBps.txt"
    ).read_text(encoding="utf-8")
    matrix = _matrix(text)
    assert len(matrix) == 56
    a100 = load_catalog().get("a100-sxm4-40gb")
    # write_ce: row <- column, so the column is the source.
    facts = node(peers=peers(lambda s, d: matrix[(d, s)]))
    p2p = one(judged(facts, sku=a100), checks.P2P)
    assert p2p.severity is PASS
    assert (
        p2p.message
        == "All 56 GPU pairs copy at 275-277 GB/s (floor 234 GB/s, node median 276 GB/s)"
    )
    # The same matrix with row 6 and column 6 down to a third: GPU 6, once.
    slow = node(peers=peers(lambda s, d: matrix[(d, s)] / (3 if 6 in (s, d) else 1)))
    finding = one(judged(slow, sku=a100), checks.P2P)
    assert finding.gpu_index == 6
    assert finding.message.startswith(
        "GPU 6 is slow to every peer: 91.6-92.2 GB/s against a node median"
    )


def test_pcie_peers_without_a_floor_are_not_judged_by_their_median() -> None:
    # PCIe cards: pairs under one switch copy faster than pairs across sockets, by design.
    l40s = load_catalog().get("l40s")
    matrix = peers(lambda s, d: 50.0 if s // 4 == d // 4 else 20.0, lambda s, d: s // 4 == d // 4)
    facts = dataclasses.replace(node(peers=matrix), pci_nvswitch_count=0)
    findings = judged(facts, Policy(interconnect=True), l40s)
    p2p = one(findings, checks.P2P)
    assert (p2p.severity, p2p.required) == (UNKNOWN, False)
    assert p2p.message == (
        "56 GPU pairs copy at 20.0-50.0 GB/s, not judged: no floor is known for L40S, and the "
        "pairs do not all cross one fabric (PCIe switches, bridges or a partial mesh), so they "
        "differ by design and no median judges them; set p2p_min_gbs in the policy's "
        "thresholds to judge them"
    )
    access = one(findings, checks.PEER_ACCESS)
    assert access.severity is PASS
    assert access.message == (
        "32 of 56 GPU pairs have no peer access (GPUs 0, 1, 2, 3, 4, 5, 6, 7): not judged, "
        "L40S has no NVLink the board fixes, and PCIe peer access depends on the platform"
    )
    # A floor from the policy judges them.
    floored = one(judged(facts, thresholds(p2p_min_gbs=15), l40s), checks.P2P)
    assert floored.message == (
        "All 56 GPU pairs copy at 20.0-50.0 GB/s (floor 15 GB/s, pairs that differ by design)"
    )
    # ... and only it: a pair at a third of its siblings passes a floor it meets.
    slower = dataclasses.replace(
        node(peers=peers(lambda s, d: 17.0 if (s, d) == (0, 1) else 50.0)), pci_nvswitch_count=0
    )
    assert one(judged(slower, thresholds(p2p_min_gbs=15), l40s), checks.P2P).severity is PASS


# ---------------------------------------------------------------- peer access


def test_a_gpu_without_peer_access_where_the_board_has_nvlink_fails_once() -> None:
    facts = node(peers=peers(access=lambda s, d: 4 not in (s, d)))
    access = one(judged(facts), checks.PEER_ACCESS)
    assert (access.severity, access.gpu_index) == (FAIL, 4)
    assert access.message == (
        "GPU 4 has no peer access to any peer (GPUs 0, 1, 2, 3, 5, 6, 7), though H100 SXM5 "
        "80GB GPUs are joined by NVLink: its NVLinks or its NVSwitch port"
    )
    assert access.action is Action.DRAIN_RMA
    # Its pairs are judged here, not again as slow copies.
    assert one(judged(facts), checks.P2P).severity is PASS


def test_one_pair_without_peer_access_is_the_pair() -> None:
    facts = node(peers=peers(access=lambda s, d: (s, d) != (1, 2)))
    assert one(judged(facts), checks.PEER_ACCESS).message == (
        "GPU 1 has no peer access to GPU 2, though H100 SXM5 80GB GPUs are joined by NVLink: "
        "the link between them"
    )


def test_no_peer_access_while_the_fabric_manager_has_not_registered_is_software() -> None:
    facts = with_gpu(
        node(peers=peers(access=lambda s, d: 4 not in (s, d))), 4, fabric_state="in_progress"
    )
    access = one(judged(facts), checks.PEER_ACCESS)
    assert access.message.endswith(
        "joined by NVLink: the fabric manager has not completed the NVSwitch registration of "
        "GPU 4 (in_progress): start nvidia-fabricmanager (systemctl enable --now "
        "nvidia-fabricmanager)"
    )
    assert access.action is Action.FIX_SOFTWARE


def test_unread_peer_access_is_unknown() -> None:
    unread = Unavailable(Reason.ERROR, "cudaDeviceCanAccessPeer failed")
    matrix = tuple(
        dataclasses.replace(p, access=unread) if p.src == 3 and p.dst == 0 else p for p in peers()
    )
    access = one(judged(node(peers=matrix)), checks.PEER_ACCESS)
    assert (access.severity, access.required) == (UNKNOWN, True)
    assert access.message == (
        "Peer access of 1 GPU pair could not be read: GPU 3 -> GPU 0: error: "
        "cudaDeviceCanAccessPeer failed"
    )


# ---------------------------------------------------------------- all-reduce


def test_a_degraded_nvswitch_fails_all_reduce_while_p2p_passes() -> None:
    findings = judged(node(all_reduce=sweep(busbw=300.0)))
    assert one(findings, checks.P2P).severity is PASS
    all_reduce = one(findings, checks.ALL_REDUCE)
    assert all_reduce.severity is FAIL
    assert all_reduce.message == (
        "NCCL all-reduce busbw 300 GB/s at 4 GiB over 8 GPUs is below the floor of 460 GB/s: "
        "every GPU pair copies at speed, so the NVSwitch fabric on the baseboard"
    )
    assert all_reduce.action is Action.DRAIN_RMA
    assert all_reduce.action_source == checks.BASEBOARD_SOURCE


def test_slow_all_reduce_with_an_unregistered_fabric_is_the_fabric_manager() -> None:
    facts = with_gpu(node(all_reduce=sweep(busbw=300.0)), 2, fabric_state="not_started")
    all_reduce = one(judged(facts), checks.ALL_REDUCE)
    assert all_reduce.message.endswith(
        "the fabric manager has not completed the NVSwitch registration of GPU 2 "
        "(not_started): start nvidia-fabricmanager (systemctl enable --now nvidia-fabricmanager)"
    )
    assert all_reduce.action is Action.FIX_SOFTWARE


def test_slow_all_reduce_with_a_slow_gpu_is_its_links() -> None:
    findings = judged(node(peers=peers(_slow_gpu_six), all_reduce=sweep(busbw=300.0)))
    all_reduce = one(findings, checks.ALL_REDUCE)
    assert all_reduce.message.endswith(
        ": the failing peer links (interconnect.p2p, interconnect.peer_access) explain it"
    )
    assert all_reduce.action is one(findings, checks.P2P).action is Action.DRAIN_RMA


def test_wrong_elements_are_data_corruption() -> None:
    all_reduce = one(judged(node(all_reduce=sweep(wrong=12))), checks.ALL_REDUCE)
    assert all_reduce.severity is FAIL
    assert all_reduce.message == (
        "NCCL all-reduce over 8 GPUs returned 12 wrong elements (at 1 GiB): data corruption "
        "on a GPU or on the links between them"
    )
    assert all_reduce.action is Action.DRAIN_RMA


def test_a_sweep_that_stops_below_1_gib_is_too_short() -> None:
    all_reduce = one(
        judged(node(all_reduce=sweep(busbw=402.0, largest=512 * MiB))), checks.ALL_REDUCE
    )
    assert (all_reduce.severity, all_reduce.required) == (UNKNOWN, True)
    assert all_reduce.message == (
        "NCCL all-reduce sweep too short: its largest size is 512 MiB, and busbw is judged at "
        "1 GiB or more, where it levels off (402 GB/s at 512 MiB over 8 GPUs); measure up to "
        "1 GiB or more"
    )
    # Exactly 1 GiB counts.
    assert one(judged(node(all_reduce=sweep(largest=GiB))), checks.ALL_REDUCE).severity is PASS


def test_no_floor_for_the_gpu_count_without_an_nvswitch_is_not_judged() -> None:
    # V100 SXM2: a hybrid cube mesh, no NVSwitch to derive a floor from, none in the catalog.
    v100 = load_catalog().get("v100-sxm2-16gb")
    facts = dataclasses.replace(node(), pci_nvswitch_count=0)
    finding = one(judged(facts, sku=v100), checks.ALL_REDUCE)
    assert (finding.severity, finding.required) == (UNKNOWN, False)
    assert finding.message == (
        "NCCL all-reduce busbw 481 GB/s at 4 GiB over 8 GPUs cannot be judged: no floor is "
        "known for 8x V100 SXM2 16GB; set all_reduce_min_gbs in the policy's thresholds to "
        "judge it"
    )


def _four_gpus(busbw: float) -> NodeFacts:
    facts = healthy_node()
    measured = healthy_interconnect(
        gpus=copies(count=4), peers=peers(count=4), all_reduce=sweep(busbw=busbw, ranks=4)
    )
    return dataclasses.replace(facts, gpus=facts.gpus[:4], burn=None, interconnect=measured)


def test_an_nvswitch_without_a_catalog_floor_is_judged_against_its_own_p2p() -> None:
    b200 = load_catalog().get("b200")  # all_reduce_min_gbs: null
    derived = (
        ">= 279 GB/s busbw (0.75x the node's median P2P 372 GB/s: derived from its own peer copies)"
    )
    healthy = one(judged(node(all_reduce=sweep(busbw=477.0)), sku=b200), checks.ALL_REDUCE)
    assert (healthy.severity, healthy.expected) == (PASS, derived)
    assert healthy.message == (
        "NCCL all-reduce busbw 477 GB/s at 4 GiB over 8 GPUs (floor 279 GB/s, 0.75x the node's "
        "median P2P 372 GB/s: derived from its own peer copies)"
    )
    # Without NVLink SHARP busbw runs ~0.9x P2P: still above 0.75x.
    assert (
        one(judged(node(all_reduce=sweep(busbw=335.0)), sku=b200), checks.ALL_REDUCE).severity
        is PASS
    )
    degraded = one(judged(node(all_reduce=sweep(busbw=200.0)), sku=b200), checks.ALL_REDUCE)
    assert (degraded.severity, degraded.expected) == (FAIL, derived)
    assert degraded.message == (
        "NCCL all-reduce busbw 200 GB/s at 4 GiB over 8 GPUs is below the floor of 279 GB/s "
        "(0.75x the node's median P2P 372 GB/s: derived from its own peer copies): every GPU "
        "pair copies at speed, so the NVSwitch fabric on the baseboard"
    )
    assert degraded.action is Action.DRAIN_RMA
    # The count of GPUs the catalog has no floor for, on an NVSwitch SKU: derived too.
    four = one(judged(_four_gpus(busbw=200.0)), checks.ALL_REDUCE)
    assert four.severity is FAIL
    assert four.expected == derived
    # An NVSwitch the PCI bus shows, on a SKU the catalog does not mark: derived too.
    gb200 = load_catalog().get("gb200")
    assert (
        one(judged(node(all_reduce=sweep(busbw=200.0)), sku=gb200), checks.ALL_REDUCE).severity
        is FAIL
    )


def test_an_nvswitch_without_a_floor_or_p2p_figures_is_a_blocking_unknown() -> None:
    b200 = load_catalog().get("b200")
    facts = node(
        peers=Unavailable(Reason.ERROR, "no time left for the peer matrix"),
        all_reduce=sweep(busbw=200.0),
    )
    finding = one(judged(facts, sku=b200), checks.ALL_REDUCE)
    assert (finding.severity, finding.required) == (UNKNOWN, True)
    assert finding.message == (
        "NCCL all-reduce busbw 200 GB/s at 4 GiB over 8 GPUs cannot be judged: no floor is "
        "known for 8x B200 (HGX, 1000 W), and no peer copy was measured to derive one from "
        "(0.75x the node's median P2P); measure the peer matrix again, or set "
        "all_reduce_min_gbs in the policy's thresholds"
    )
    not_required = one(judged(facts, Policy(interconnect=False), b200), checks.ALL_REDUCE)
    assert not_required.required is False


@pytest.mark.parametrize(
    ("ranks", "indices", "covered"),
    [
        (2, (0, 1), 2),  # a bundle's all_reduce_perf -g 2 on an 8-GPU node
        (4, (), 4),  # the ranks' GPUs not named: their count says it
        (8, (0, 1, 2, 3, 4, 5, 6, 6), 7),  # a GPU twice, GPU 7 left out
    ],
)
def test_an_all_reduce_that_does_not_cover_every_gpu_is_a_blocking_unknown(
    ranks: int, indices: tuple[int, ...], covered: int
) -> None:
    partial = dataclasses.replace(sweep(ranks=ranks), gpu_indices=indices)
    finding = one(judged(node(all_reduce=partial)), checks.ALL_REDUCE)
    assert (finding.severity, finding.required) == (UNKNOWN, True)
    assert finding.message == (
        f"NCCL all-reduce covered {covered} of 8 GPUs: run all_reduce_perf -g 8 (or -np 8)"
    )
    assert finding.action is Action.RERUN
    # Not required by the policy: still UNKNOWN, not blocking.
    loose = one(judged(node(all_reduce=partial), Policy(interconnect=False)), checks.ALL_REDUCE)
    assert (loose.severity, loose.required) == (UNKNOWN, False)
    # Through the judge the node is not certified on it.
    assert judge_node(node(all_reduce=partial), Policy()).verdict is Verdict.NOT_CERTIFIED


def test_wrong_elements_counted_over_the_whole_run_are_data_corruption() -> None:
    counted = dataclasses.replace(sweep(wrong=None), wrong=7)
    all_reduce = one(judged(node(all_reduce=counted)), checks.ALL_REDUCE)
    assert all_reduce.severity is FAIL
    assert all_reduce.message == (
        "NCCL all-reduce over 8 GPUs returned 7 wrong elements: data corruption on a GPU or "
        "on the links between them"
    )
    assert (all_reduce.action, all_reduce.action_source) == (
        Action.DRAIN_RMA,
        checks.CORRUPTION_SOURCE,
    )
    # Counted so even where the rows were not read, and on a sweep of some GPUs only.
    unread = dataclasses.replace(counted, points=Unavailable(Reason.ERROR, "no rows"))
    assert one(judged(node(all_reduce=unread)), checks.ALL_REDUCE).severity is FAIL
    zero = dataclasses.replace(sweep(), wrong=0)
    assert one(judged(node(all_reduce=zero)), checks.ALL_REDUCE).severity is PASS


def test_the_policys_all_reduce_floor_overrides_the_catalogs() -> None:
    all_reduce = one(judged(node(), thresholds(all_reduce_min_gbs=500)), checks.ALL_REDUCE)
    assert all_reduce.severity is FAIL
    assert all_reduce.message.startswith(
        "NCCL all-reduce busbw 481 GB/s at 4 GiB over 8 GPUs is below the floor of 500 GB/s"
    )
    assert all_reduce.expected == ">= 500 GB/s busbw (the policy)"


def test_a_slow_all_reduce_with_a_busy_gpu_is_unknown() -> None:
    all_reduce = one(judged(node(all_reduce=sweep(busbw=300.0), busy_gpus=(1,))), checks.ALL_REDUCE)
    assert all_reduce.severity is UNKNOWN
    assert all_reduce.message.endswith(
        ", but GPU 1 was still busy when measured (the idle gate gave up waiting): measure it "
        "again with the GPUs idle"
    )


def _sweep_from(text: str, ranks: int) -> AllReduce:
    """nccl-tests' rows (old and new layouts) as our points."""
    points = []
    for line in text.splitlines():
        cells = line.split()
        if len(cells) < 10 or not cells[0].isdigit() or cells[2] != "float":
            continue
        has_root = cells[4] == "-1"
        time_at = 5 if has_root else 4
        wrong = cells[time_at + 3]
        points.append(
            AllReducePoint(
                size_bytes=int(cells[0]),
                time_us=float(cells[time_at]),
                algbw_gb_s=float(cells[time_at + 1]),
                busbw_gb_s=float(cells[time_at + 2]),
                busbw_in_place_gb_s=float(cells[time_at + 6]),
                wrong=None if wrong == "N/A" else int(wrong),
            )
        )
    return AllReduce(ranks=ranks, source="all_reduce_perf.txt", points=tuple(points))


def test_the_real_a100_and_h200_sweeps_pass_their_floors(captures_dir: Path) -> None:
    a100_text = (
        captures_dir / "nccl-tests/repo-microsoft-superbenchmark-8xa100-sxm4-40gb-all_reduce_perf"
        "-8G-old-format-pass.txt"
    ).read_text(encoding="utf-8")
    a100 = _sweep_from(a100_text, ranks=8)
    assert isinstance(a100.points, tuple)
    assert len(a100.points) == 34
    finding = one(
        judged(node(all_reduce=a100), sku=load_catalog().get("a100-sxm4-40gb")), checks.ALL_REDUCE
    )
    assert finding.message == "NCCL all-reduce busbw 235 GB/s at 8 GiB over 8 GPUs (floor 200 GB/s)"
    h200_text = (
        captures_dir / "nccl-tests/WEAKPROV-codeidx-19124581599-8xh200-ndv5-nccl2.19.3-"
        "all_reduce_perf-8G-single-size-pass.txt"
    ).read_text(encoding="utf-8")
    h200 = one(
        judged(
            node(all_reduce=_sweep_from(h200_text, ranks=8)), sku=load_catalog().get("h200-sxm")
        ),
        checks.ALL_REDUCE,
    )
    assert h200.message == "NCCL all-reduce busbw 477 GB/s at 8 GiB over 8 GPUs (floor 431 GB/s)"
    # The same H200 run judged against H100's Azure floor (460) still passes; at 0.9x it fails.
    slowed = _sweep_from(h200_text.replace("476.72", "429.05"), ranks=8)
    assert (
        one(
            judged(node(all_reduce=slowed), sku=load_catalog().get("h200-sxm")), checks.ALL_REDUCE
        ).severity
        is FAIL
    )


def test_one_gpu_has_no_peers_and_no_all_reduce() -> None:
    facts = healthy_node()
    facts = dataclasses.replace(
        facts,
        gpus=facts.gpus[:1],
        interconnect=healthy_interconnect(
            gpus=copies(count=1),
            peers=Unavailable(Reason.NOT_SUPPORTED, "one GPU"),
            all_reduce=Unavailable(Reason.NOT_SUPPORTED, "one GPU"),
        ),
    )
    findings = judged(facts)
    assert {f.check for f in findings} == {checks.H2D, checks.D2H, checks.HBM}
    # One figure makes no median: the floor alone judges it.
    assert one(findings, checks.H2D).message == (
        "GPU 0 host-to-device bandwidth 53.8 GB/s (floor 48 GB/s, 1 figure, too few for a "
        "node median)"
    )


# ---------------------------------------------------------------- through the judge: actions


def test_each_fault_leaves_the_judge_with_its_action() -> None:
    def action_of(facts: NodeFacts, check_id: str) -> tuple[Action, str]:
        result = judge_node(facts, Policy())
        found = [f for f in result.findings if f.check == check_id and f.severity is not PASS]
        assert len(found) == 1, found
        return found[0].action, found[0].action_source

    riser = with_gpu(node(gpus=copies({3: (27.0, 27.5, 2540.0)})), 3, pcie_width_current=8)
    assert action_of(riser, checks.H2D)[0] is Action.RESEAT_CABLE_RISER
    assert (
        action_of(node(gpus=copies({5: (54.1, 55.2, 2100.0)})), checks.HBM)[0] is Action.DRAIN_RMA
    )
    assert action_of(node(peers=peers(_slow_gpu_six)), checks.P2P)[0] is Action.DRAIN_RMA
    assert action_of(node(all_reduce=sweep(busbw=300.0)), checks.ALL_REDUCE) == (
        Action.DRAIN_RMA,
        checks.BASEBOARD_SOURCE,
    )
    assert action_of(node(all_reduce=sweep(wrong=3)), checks.ALL_REDUCE)[0] is Action.DRAIN_RMA
    # Not asked for: a rerun as it was would not measure it either (issue 33).
    assert action_of(unmeasured(), checks.RUN)[0] is Action.MEASURE
    missing = healthy_node(interconnect=Interconnect(source="cuda", error="libnccl.so.2 not found"))
    assert action_of(missing, checks.RUN)[0] is Action.FIX_SOFTWARE
    busy = node(gpus=copies({3: (27.0, 27.5, 2540.0)}), busy_gpus=(3,))
    assert judge_node(busy, Policy()).verdict is Verdict.NOT_CERTIFIED  # UNKNOWN blocks


def test_a_peer_matrix_measured_for_no_pair_names_every_pair_without_crashing() -> None:
    # A 1-GPU nvbandwidth output beside an 8-GPU query (issue 30): every pair unseen.
    # GPU 7's pairs are all taken by the GPUs diagnosed before it: no pair is left to it.
    unseen = Unavailable(Reason.NOT_MEASURED, "nvbandwidth did not see both GPUs")
    blank = tuple(
        PeerBandwidth(src, dst, unseen, Bandwidth(gb_s=unseen), Bandwidth(gb_s=unseen))
        for src in range(8)
        for dst in range(8)
        if src != dst
    )
    findings = of(judged(node(peers=blank)), "interconnect.p2p")
    assert findings
    assert all(f.severity is UNKNOWN for f in findings)
    assert all(f.required for f in findings)
    # GPU 0 takes its 14 pairs, GPU 1 the 12 left of its own ... GPU 6 its last 2: all 56.
    assert [f.gpu_index for f in findings] == list(range(7))
    assert "every peer" in findings[0].message
    assert "1 of its 7 peers" in findings[-1].message
