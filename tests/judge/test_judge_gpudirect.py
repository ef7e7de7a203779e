"""GPUDirect RDMA readiness: peermem or dma-buf, GPU<->NIC affinity, PCIe ACS, the IOMMU.

Healthy and faulty facts come from real shapes: the ACS ports parsed from a real 8x H100
server's ``lspci -vvv`` (tests/fixtures/lspci), the topology matrices of the built-in
scenarios (shaped on real ``nvidia-smi topo -m`` output) and of the shared corpus.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tests.judge.test_judge_healthy import healthy_node, judge, not_passed, only
from validator.judge import Policy
from validator.judge.gpudirect_policy import GpudirectPolicy
from validator.model import (
    Action,
    GpudirectFacts,
    IommuFacts,
    NodeFacts,
    Reason,
    Severity,
    Unavailable,
    Verdict,
)
from validator.node.parsers.lspci_acs import parse_acs_ports
from validator.node.parsers.smi_topo import parse_topo_matrix
from validator.node.sim.scenario import load_scenario

FAIL, PASS, UNKNOWN, WARN = Severity.FAIL, Severity.PASS, Severity.UNKNOWN, Severity.WARN
LSPCI = Path(__file__).resolve().parent.parent / "fixtures" / "lspci"
REAL_PORTS = parse_acs_ports((LSPCI / "gpud-dell-8xh100-cx7-pex890xx.txt").read_text())


def scenario_output(name: str, command: str) -> str:
    return load_scenario(name).system().run(command.split()).stdout


def healthy_direct(**changes: Any) -> GpudirectFacts:
    direct = GpudirectFacts(
        rdma_stack=True,
        rdma_devices=tuple(f"mlx5_{i}" for i in range(8)),
        peermem_loaded=True,
        open_kernel_module=False,
        virtualized=False,
        topology=parse_topo_matrix(scenario_output("healthy-8x-h100-sxm", "nvidia-smi topo -m")),
        acs_ports=REAL_PORTS,
        iommu=IommuFacts(mode="passthrough", group_types=("identity",), units=2),
    )
    return dataclasses.replace(direct, **changes)


def node(**changes: Any) -> NodeFacts:
    return healthy_node(gpudirect=healthy_direct(**changes))


def gpudirect_policy(**changes: Any) -> Policy:
    return Policy(gpudirect=GpudirectPolicy(**changes))


def test_healthy_node_passes_every_gpudirect_check() -> None:
    result = judge(node())
    assert result.verdict is Verdict.CERTIFIED
    assert not_passed(result, "gpudirect") == set()
    checks = {f.check for f in result.findings if f.check.startswith("gpudirect.")}
    assert checks == {
        "gpudirect.peermem",
        "gpudirect.nic_affinity",
        "gpudirect.acs",
        "gpudirect.iommu",
    }
    assert {f.gpu_index for f in only(result, "gpudirect.nic_affinity")} == set(range(8))
    assert "ACS is off on the 26 PCIe switch ports" in only(result, "gpudirect.acs")[0].message


def test_not_collected_gives_no_finding() -> None:
    result = judge(healthy_node())  # gpudirect None: an older agent's facts
    assert not [f for f in result.findings if f.check.startswith("gpudirect.")]


def test_no_rdma_stack_is_not_applicable() -> None:
    result = judge(node(rdma_stack=False, rdma_devices=(), peermem_loaded=False))
    (finding,) = only(result, "gpudirect.peermem")
    assert finding.severity is PASS
    assert "no RDMA stack" in finding.observed


def test_peermem_missing_fails_with_fix_software() -> None:
    result = judge(node(peermem_loaded=False))
    (finding,) = only(result, "gpudirect.peermem")
    assert finding.severity is FAIL
    assert finding.action is Action.FIX_SOFTWARE
    assert "modprobe nvidia_peermem" in finding.message
    assert result.verdict is Verdict.NOT_CERTIFIED


def test_dma_buf_stands_in_for_peermem_on_the_open_module_and_a_new_kernel() -> None:
    result = judge(node(peermem_loaded=False, open_kernel_module=True))  # kernel 5.15
    (finding,) = only(result, "gpudirect.peermem")
    assert finding.severity is PASS
    assert finding.observed == "dma-buf"
    old = healthy_node(
        kernel="5.4.0-150-generic",
        gpudirect=healthy_direct(peermem_loaded=False, open_kernel_module=True),
    )
    assert only(judge(old), "gpudirect.peermem")[0].severity is FAIL


def test_peermem_not_required_by_policy_warns() -> None:
    result = judge(node(peermem_loaded=False), gpudirect_policy(require_peermem=False))
    (finding,) = only(result, "gpudirect.peermem")
    assert finding.severity is WARN
    assert not finding.required


def test_unreadable_rdma_stack_is_unknown_never_pass() -> None:
    gone = Unavailable(Reason.NOT_MEASURED, "proc-modules.txt not in the capture")
    result = judge(node(rdma_stack=gone, peermem_loaded=gone))
    (finding,) = only(result, "gpudirect.peermem")
    assert finding.severity is UNKNOWN
    assert finding.required
    assert result.verdict is not Verdict.CERTIFIED


def test_gpus_across_the_socket_fail_with_reseat() -> None:
    topo = parse_topo_matrix(scenario_output("gpu-nic-across-socket", "nvidia-smi topo -m"))
    result = judge(node(topology=topo))
    failed = [f for f in only(result, "gpudirect.nic_affinity") if f.severity is FAIL]
    assert {f.gpu_index for f in failed} == {4, 5, 6, 7}
    assert all(f.action is Action.RESEAT_CABLE_RISER and "SYS" in f.observed for f in failed)
    assert result.verdict is Verdict.NOT_CERTIFIED


def test_node_link_warns_under_pxb_and_passes_under_node() -> None:
    # The healthy matrix with GPU 0's nearest NIC one step farther: across the host bridge.
    topo = parse_topo_matrix(scenario_output("healthy-8x-h100-sxm", "nvidia-smi topo -m"))
    links = list(topo.links)
    links[0] = dataclasses.replace(links[0], link="NODE")
    topo = dataclasses.replace(topo, links=tuple(links))
    warned = only(judge(node(topology=topo)), "gpudirect.nic_affinity")[0]
    assert warned.severity is WARN
    assert not warned.required
    allowed = only(
        judge(node(topology=topo), gpudirect_policy(required_affinity="node")),
        "gpudirect.nic_affinity",
    )
    assert allowed[0].severity is PASS


def test_cut_matrix_leaves_the_missing_gpus_unknown(captures_dir: Path) -> None:
    path = (
        captures_dir / "nvidia-smi-topo/issue-deepep60-8gpu-topo-mp-pcie-only-14nics-TRUNCATED.txt"
    )
    result = judge(node(topology=parse_topo_matrix(path.read_text())))
    findings = only(result, "gpudirect.nic_affinity")
    assert {f.gpu_index for f in findings if f.severity is PASS} == {0, 1, 2, 3}
    assert {f.gpu_index for f in findings if f.severity is UNKNOWN} == {4, 5, 6, 7}


def test_acs_enabled_on_bare_metal_fails_with_fix_bios() -> None:
    ports = parse_acs_ports(scenario_output("acs-enabled", "lspci -vvv"))
    result = judge(node(acs_ports=ports))
    (finding,) = only(result, "gpudirect.acs")
    assert finding.severity is FAIL
    assert finding.action is Action.FIX_BIOS
    assert "NCCL troubleshooting" in finding.action_source
    assert "4a:01.0 (SrcValid+ ReqRedir+ CmpltRedir+)" in finding.message


def test_acs_enabled_in_a_vm_or_allowed_by_policy_passes() -> None:
    ports = parse_acs_ports(scenario_output("acs-enabled", "lspci -vvv"))
    assert only(judge(node(acs_ports=ports, virtualized=True)), "gpudirect.acs")[0].severity is PASS
    allowed = judge(node(acs_ports=ports), gpudirect_policy(acs_allowed=True))
    assert only(allowed, "gpudirect.acs")[0].severity is PASS


def test_acs_access_denied_is_unknown() -> None:
    denied = tuple(dataclasses.replace(port, readable=False) for port in REAL_PORTS)
    (finding,) = only(judge(node(acs_ports=denied)), "gpudirect.acs")
    assert finding.severity is UNKNOWN
    assert "as root" in finding.message


def test_translating_iommu_on_bare_metal_warns_without_blocking() -> None:
    iommu = IommuFacts(
        mode="translated", group_types=("DMA-FQ",), units=2, cmdline=("intel_iommu=on",)
    )
    result = judge(node(iommu=iommu))
    (finding,) = only(result, "gpudirect.iommu")
    assert finding.severity is WARN
    assert not finding.required
    assert "iommu=pt" in finding.message
    assert result.verdict is Verdict.CERTIFIED
    in_vm = judge(node(iommu=iommu, virtualized=True))
    assert only(in_vm, "gpudirect.iommu")[0].severity is PASS


def test_findings_render_in_the_json_report() -> None:
    from validator.model import to_dict

    ports = parse_acs_ports(scenario_output("acs-enabled", "lspci -vvv"))
    data = to_dict(judge(node(acs_ports=ports)))
    acs = [f for f in data["findings"] if f["check"] == "gpudirect.acs"]
    assert acs[0]["severity"] == "FAIL"
    assert acs[0]["action"] == "fix_bios_setting"


def test_a_site_without_gpudirect_is_reported_and_never_blocked() -> None:
    gone = Unavailable(Reason.NOT_MEASURED, "lspci-vvv.txt not in the capture")
    facts = node(acs_ports=gone, peermem_loaded=False)
    assert judge(facts).verdict is not Verdict.CERTIFIED
    result = judge(facts, gpudirect_policy(required=False))
    findings = [f for f in result.findings if f.check.startswith("gpudirect.")]
    assert {f.check for f in findings if f.severity is not PASS} == {
        "gpudirect.acs",
        "gpudirect.peermem",
    }
    assert not any(f.required for f in findings)
    assert result.verdict is Verdict.CERTIFIED
