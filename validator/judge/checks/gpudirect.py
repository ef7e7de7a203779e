"""GPUDirect RDMA readiness: peermem or dma-buf, GPU<->NIC affinity, PCIe ACS, the IOMMU.

``gpudirect.peermem``: where an RDMA stack is present (an ib_core module, or a device
under /sys/class/infiniband), a NIC can reach GPU memory only through ``nvidia_peermem``
or dma-buf (a 5.12+ kernel with NVIDIA's open kernel module: NVIDIA recommends dma-buf
where it is supported). Without an RDMA stack the check does not apply: a PASS says so.

``gpudirect.nic_affinity``: each GPU's nearest NIC in ``nvidia-smi topo -m``, ranked as
NCCL ranks paths: PIX and PXB stay under a PCIe switch (good), PHB and NODE cross the
host bridge (slower: WARN unless the policy's ``required_affinity`` allows it), SYS
crosses the socket interconnect (FAIL). A GPU's NIC across the socket is a card in the
wrong slot (or a riser cabled to the other socket's root port): no BIOS setting moves a
device to another root complex, so the action is to move or reseat the card
(RESEAT_CABLE_RISER), not FIX_BIOS.

``gpudirect.acs``: NCCL's troubleshooting guide: on bare metal, ACS on the PCIe switches
redirects peer traffic to the CPU root complex, "causing a significant performance
reduction or even a hang", and must be disabled (a BIOS setting, or setpci at boot). In
a VM it isolates the guests and is expected (the policy's ``acs_allowed``, or a
hypervisor seen below the host).

``gpudirect.iommu``: the IOMMU's mode is reported; where it translates DMA on bare metal
(not passthrough), the same guide warns it can route peer traffic through the root
complex: a WARN that does not block (``iommu=pt`` keeps it on for the host, off the path).

The policy's ``gpudirect.required: false`` (a node with no RDMA fabric to certify) keeps
every finding in the reports (a fault as a WARN) but lets none of them block certification.
"""

from __future__ import annotations

import dataclasses

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    gpu_finding,
    node_finding,
    why_not,
    with_action,
)
from validator.judge.policy import Policy
from validator.model import (
    TOPO_LINKS,
    AcsPort,
    Action,
    Finding,
    GpudirectFacts,
    GpuFacts,
    GpuNicLink,
    Measured,
    NodeFacts,
    TopoMatrix,
    Unavailable,
    dmabuf_usable,
)

PEERMEM = "gpudirect.peermem"
AFFINITY = "gpudirect.nic_affinity"
ACS = "gpudirect.acs"
IOMMU = "gpudirect.iommu"

NCCL_ACS_SOURCE = (
    "NCCL troubleshooting guide, PCI Access Control Services (ACS): disable ACS on bare "
    "metal (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html)"
)
NCCL_IOMMU_SOURCE = (
    "NCCL troubleshooting guide: the IOMMU can redirect PCI peer traffic to the CPU root "
    "complex (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html)"
)
PEERMEM_SOURCE = (
    "NVIDIA GPUDirect RDMA: load nvidia_peermem, or use dma-buf (kernel 5.12+, open kernel "
    "module) (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-rdma.html)"
)
AFFINITY_SOURCE = (
    "gpuready: a GPU's NIC belongs under its PCIe switch (PIX/PXB, as NCCL ranks paths); "
    "move the NIC to the slot that shares the GPU's switch, or reseat its riser cable"
)
_ALLOWED = {"pix": "PIX", "pxb": "PXB", "node": "NODE"}


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge GPUDirect RDMA readiness; nothing where it was not collected or no GPU shows."""
    direct = facts.gpudirect
    if direct is None or not facts.gpus:
        return []
    findings = [
        _peermem(direct, facts.kernel, policy),
        *_affinity(direct, facts.gpus, policy),
        _acs(direct, policy),
        _iommu(direct),
    ]
    if not policy.gpudirect.required:  # the site says: no GPUDirect RDMA on this node
        return [_optional(finding) for finding in findings]
    return findings


def _optional(finding: Finding) -> Finding:
    """A finding that never blocks: not required, and a fault a warning."""
    severity = WARN if finding.severity is FAIL else finding.severity
    return dataclasses.replace(finding, severity=severity, required=False)


def _unknown(check_id: str, what: str, value: Unavailable, required: bool = True) -> Finding:
    return node_finding(
        check_id,
        UNKNOWN,
        f"{what} could not be read: {why_not(value)}",
        observed=why_not(value),
        required=required,
    )


def _peermem(direct: GpudirectFacts, kernel: Measured[str], policy: Policy) -> Finding:
    stack = direct.rdma_stack
    if isinstance(stack, Unavailable):
        return _unknown(PEERMEM, "Whether an RDMA stack is present", stack)
    if not stack:
        return node_finding(
            PEERMEM,
            PASS,
            "No RDMA stack (no ib_core module, no /sys/class/infiniband device): GPUDirect "
            "RDMA does not apply",
            observed="no RDMA stack",
        )
    if direct.peermem_loaded is True:
        return node_finding(PEERMEM, PASS, "nvidia_peermem is loaded", observed="nvidia_peermem")
    if dmabuf_usable(kernel, direct.open_kernel_module):
        return node_finding(
            PEERMEM,
            PASS,
            f"dma-buf is usable for GPUDirect RDMA (kernel {kernel}, open kernel module)",
            observed="dma-buf",
        )
    if isinstance(direct.peermem_loaded, Unavailable):
        return _unknown(PEERMEM, "Whether nvidia_peermem is loaded", direct.peermem_loaded)
    devices = ", ".join(direct.rdma_devices) or "ib_core loaded"
    finding = node_finding(
        PEERMEM,
        FAIL if policy.gpudirect.require_peermem else WARN,
        f"An RDMA stack is present ({devices}) but nvidia_peermem is not loaded and dma-buf "
        "is not usable (it needs kernel 5.12+ and the open kernel module): NICs cannot "
        "reach GPU memory directly; modprobe nvidia_peermem (and load it at boot)",
        observed="nvidia_peermem not loaded",
        expected="nvidia_peermem or dma-buf",
        required=policy.gpudirect.require_peermem,
    )
    return with_action(finding, Action.FIX_SOFTWARE, PEERMEM_SOURCE)


def _affinity(direct: GpudirectFacts, gpus: tuple[GpuFacts, ...], policy: Policy) -> list[Finding]:
    topology = direct.topology
    if isinstance(topology, Unavailable):
        return [_unknown(AFFINITY, "The GPU<->NIC topology (nvidia-smi topo -m)", topology)]
    if not topology.nics:
        if direct.rdma_devices:
            return [
                node_finding(
                    AFFINITY,
                    UNKNOWN,
                    f"RDMA devices are present ({', '.join(direct.rdma_devices)}) but "
                    "nvidia-smi topo -m shows no NIC: the GPU<->NIC paths are unknown",
                    observed="no NIC in the topology matrix",
                )
            ]
        return [
            node_finding(
                AFFINITY,
                PASS,
                "No NIC in the topology matrix: no GPU<->NIC path to judge",
                observed="no NIC",
            )
        ]
    by_index = {gpu.index: gpu for gpu in gpus}
    allowed = _ALLOWED[policy.gpudirect.required_affinity]
    findings = [_link(link, by_index.get(link.index), allowed) for link in topology.links]
    findings += _cut_rows(topology, by_index)
    return findings


def _link(link: GpuNicLink, gpu: GpuFacts | None, allowed: str) -> Finding:
    expected = f"a NIC at {'/'.join(TOPO_LINKS[: TOPO_LINKS.index(allowed) + 1])}"
    if link.link is None or link.nearest_nic is None:
        return gpu_finding(
            AFFINITY,
            UNKNOWN,
            gpu,
            f"{link.gpu}'s row shows no link to any NIC",
            observed="no NIC link",
            expected=expected,
        )
    said = f"{link.gpu}'s nearest NIC is {link.nearest_nic} at {link.link}"
    if TOPO_LINKS.index(link.link) <= TOPO_LINKS.index(allowed):
        return gpu_finding(AFFINITY, PASS, gpu, said, observed=link.link, expected=expected)
    across = link.link == "SYS"
    finding = gpu_finding(
        AFFINITY,
        FAIL if across else WARN,
        gpu,
        f"{said}"
        + (
            ": across the CPU sockets, so GPUDirect RDMA crosses the socket interconnect"
            if across
            else ": through the CPU's host bridge, slower than under a PCIe switch"
        )
        + "; move the NIC to the slot under this GPU's PCIe switch",
        observed=f"{link.nearest_nic} {link.link}",
        expected=expected,
        required=across,
    )
    return with_action(finding, Action.RESEAT_CABLE_RISER, AFFINITY_SOURCE)


def _cut_rows(topology: TopoMatrix, by_index: dict[int, GpuFacts]) -> list[Finding]:
    findings = []
    for name in topology.missing_rows:
        index = int(name[3:])
        findings.append(
            gpu_finding(
                AFFINITY,
                UNKNOWN,
                by_index.get(index),
                f"nvidia-smi topo -m was cut short before {name}'s row: its nearest NIC is "
                "not known",
                observed="row missing",
            )
        )
    return findings


def _acs(direct: GpudirectFacts, policy: Policy) -> Finding:
    ports = direct.acs_ports
    if isinstance(ports, Unavailable):
        return _unknown(ACS, "The PCIe switches' ACS settings (lspci -vvv)", ports)
    denied = [port.address for port in ports if not port.readable]
    if denied:
        return node_finding(
            ACS,
            UNKNOWN,
            f"lspci -vvv could not read the capabilities of {_listed(denied)} (access "
            "denied): run it as root to read their ACS settings",
            observed="access denied",
        )
    enabled = [port for port in ports if port.acs_enabled]
    if not enabled:
        return node_finding(
            ACS,
            PASS,
            f"ACS is off on the {len(ports)} PCIe switch ports above the GPUs and NICs"
            if ports
            else "No PCIe switch port above a GPU or NIC: no ACS to judge",
            observed="disabled",
            expected="disabled",
        )
    said = _enabled_text(enabled)
    if policy.gpudirect.acs_allowed or direct.virtualized is True:
        why = "the policy allows it" if policy.gpudirect.acs_allowed else "this host is a VM"
        return node_finding(ACS, PASS, f"{said}; {why}", observed="enabled", expected="allowed")
    metal = "" if direct.virtualized is False else " (no hypervisor was detected)"
    finding = node_finding(
        ACS,
        FAIL,
        f"{said}: on bare metal{metal} it sends GPU and NIC peer traffic through the CPU "
        "root complex (slow, or a hang); disable ACS in the BIOS (or set "
        "gpudirect.acs_allowed: true in a VM)",
        observed="enabled",
        expected="disabled",
    )
    return with_action(finding, Action.FIX_BIOS, NCCL_ACS_SOURCE)


def _enabled_text(enabled: list[AcsPort]) -> str:
    names = [f"{port.address} ({_bits(port)})" for port in enabled]
    ports = "port" if len(enabled) == 1 else "ports"
    return (
        f"ACS is on at {len(enabled)} PCIe switch {ports} above the GPUs and NICs: {_listed(names)}"
    )


def _bits(port: AcsPort) -> str:
    bits = (
        ("SrcValid+", port.src_valid),
        ("ReqRedir+", port.req_redir),
        ("CmpltRedir+", port.cmplt_redir),
    )
    return " ".join(name for name, on in bits if on)


def _listed(items: list[str], most: int = 4) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def _iommu(direct: GpudirectFacts) -> Finding:
    iommu = direct.iommu
    if isinstance(iommu, Unavailable):
        return _unknown(IOMMU, "The IOMMU mode", iommu, required=False)
    args = f" ({' '.join(iommu.cmdline)})" if iommu.cmdline else ""
    said = f"The IOMMU is {iommu.mode}{args}"
    if iommu.mode in ("translated", "mixed") and direct.virtualized is not True:
        finding = node_finding(
            IOMMU,
            WARN,
            f"{said}: it translates device DMA on bare metal, which can send GPUDirect peer "
            "traffic through the CPU root complex; boot with iommu=pt (or turn the IOMMU off "
            "in the BIOS) unless the host needs it",
            observed=iommu.mode,
            expected="passthrough or off",
            required=False,
        )
        return with_action(finding, Action.FIX_SOFTWARE, NCCL_IOMMU_SOURCE)
    return node_finding(IOMMU, PASS, said, observed=iommu.mode, required=False)


__all__ = ["ACS", "AFFINITY", "IOMMU", "PEERMEM", "check"]
