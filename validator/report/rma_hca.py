"""The RMA evidence of an HCA: one plain-text file per network card that failed for hardware.

An HCA port that is Polling, trained slow, flapping or whose error counters grew under
load sends a technician to its cable and transceiver, and, where that does not clear
it, the card to its vendor. The file holds what the vendor's support asks for first:
the host, the card's identity (device, model, firmware, PSID, node GUID, interfaces),
the failing findings with what to do, each port's state, rate and error counters
before and after the burn-in, the link flaps of its interfaces, and the digest of the
facts this run judged (validator.report.rma.evidence_digest).

Named ``rma/<host>-hca-<device>-<guid>.txt`` beside the GPUs' files;
:class:`~validator.report.rma.RmaFile`'s ``gpu_index`` is -1 for them (no GPU).
"""

from __future__ import annotations

import re
from typing import Callable, TypeVar

from validator.model import (
    HARDWARE_ACTIONS,
    Finding,
    Hca,
    HcaPort,
    Measured,
    NodeFacts,
    NodeResult,
    PortCounter,
    Report,
    Severity,
    Unavailable,
)
from validator.report import shared
from validator.report.partial import safe_stem

T = TypeVar("T")
# validator.report.rma.evidence_digest, handed in (that module builds on this one).
Digest = Callable[[NodeFacts], str]
NOT_A_GPU = -1
_LONGEST = 100


def failed_hcas(node: NodeResult) -> dict[str, list[Finding]]:
    """HCA device to the network FAILs naming it, where one of them is a hardware action."""
    network = node.facts.network
    if network is None or isinstance(network.hcas, Unavailable):
        return {}
    named: dict[str, list[Finding]] = {}
    for finding in node.findings:
        if finding.severity is not Severity.FAIL or not finding.check.startswith("network."):
            continue
        for hca in network.hcas:
            # A port's findings name its device; a link flap names its interface.
            if any(_names(finding.message, name) for name in (hca.device, *hca.netdevs)):
                named.setdefault(hca.device, []).append(finding)
    return {
        device: findings
        for device, findings in named.items()
        if any(f.action in HARDWARE_ACTIONS for f in findings)
    }


def _names(message: str, name: str) -> bool:
    return re.search(rf"(?<![\w.@-]){re.escape(name)}(?![\w.@-])", message) is not None


def file_name(hostname: str, hca: Hca) -> str:
    """``<host>-hca-<device>-<guid>.txt``, each part escaped; ``_`` for no GUID."""
    guid = hca.node_guid if isinstance(hca.node_guid, str) else "_"
    host = safe_stem(hostname, longest=_LONGEST)
    device, guid = (safe_stem(p, dash=False, longest=_LONGEST) for p in (hca.device, guid))
    return f"{host}-hca-{device}-{guid}.txt"


def _text(value: Measured[object]) -> str:
    return f"unknown ({value})" if isinstance(value, Unavailable) else str(value)


def _counts(counters: Measured[tuple[PortCounter, ...]]) -> str:
    if isinstance(counters, Unavailable):
        return f"not read ({counters})"
    return ", ".join(f"{c.name} {_text(c.value)}" for c in counters)


def _port(port: HcaPort) -> list[str]:
    return [
        f"  {port.name}: {_text(port.state)} / {_text(port.phys_state)}, "
        f"{port.rate_text or _text(port.rate_gbps)}, {_text(port.link_layer)}, "
        f"PKey {_text(port.pkey)}",
        f"    counters before the burn-in: {_counts(port.counters)}",
        f"    counters after the burn-in:  {_counts(port.counters_after)}",
    ]


def render(
    node: NodeResult, hca: Hca, findings: list[Finding], generated: str, digest: Digest
) -> str:
    """One HCA's evidence file."""
    lines = [
        f"gpuready RMA evidence: HCA {hca.device} of {node.hostname}",
        generated,
        "",
        "== the card",
        f"device: {hca.device}",
        f"model (hca_type): {_text(hca.hca_type)}",
        f"firmware: {_text(hca.fw_ver)}",
        f"PSID (board_id): {_text(hca.board_id)}",
        f"node GUID: {_text(hca.node_guid)}",
        f"interfaces: {', '.join(hca.netdevs) or 'none listed'}",
        "",
        "== findings",
        *(
            f"{f.severity.value} {f.check}: {f.message} -> {shared.ACTION_WORDS[f.action]}"
            for f in findings
        ),
        "",
        "== ports",
        *(line for port in hca.ports for line in _port(port)),
    ]
    lines += ["", "== link flaps in the kernel log", *_flaps(node, hca)]
    lines += ["", f"facts digest (sha256): {digest(node.facts)}"]
    return "\n".join(shared.clean(line) for line in lines) + "\n"


def _flaps(node: NodeResult, hca: Hca) -> list[str]:
    """Each of the HCA's interfaces that went down: its port, its counts, the kernel's lines."""
    network = node.facts.network
    flaps = () if network is None or isinstance(network.flaps, Unavailable) else network.flaps
    mine = [f for f in flaps if f.interface in hca.netdevs]
    if not mine:
        return ["  none of its interfaces went down"]
    # A netdev is one port's; where the card has several, sysfs does not say which here.
    port = hca.ports[0].name if len(hca.ports) == 1 else f"{hca.device} (one of its ports)"
    lines = []
    for flap in mine:
        lines.append(f"  {flap.interface} ({flap.pci_address}), {port}: {flap.downs} down, "
                     f"{flap.ups} up")  # fmt: skip
        lines += [f"    {line}" for line in flap.lines]  # escaped with the rest (clean)
    return lines


def hca_files(node: NodeResult, generated: str, digest: Digest) -> list[tuple[str, str]]:
    """(file name, text) of each HCA of ``node`` that failed with a hardware action."""
    network = node.facts.network
    failed = failed_hcas(node)
    if network is None or isinstance(network.hcas, Unavailable) or not failed:
        return []
    return [
        (file_name(node.hostname, hca), render(node, hca, failed[hca.device], generated, digest))
        for hca in network.hcas
        if hca.device in failed
    ]


def hca_rma_files(
    report: Report, generated: str, make: Callable[[str, int, str, str], T], digest: Digest
) -> list[T]:
    """Every HCA evidence file of a report, node by node, each made by ``make`` (RmaFile)."""
    return [
        make(node.hostname, NOT_A_GPU, name, text)
        for node in report.nodes
        for name, text in hca_files(node, generated, digest)
    ]


__all__ = ["NOT_A_GPU", "failed_hcas", "file_name", "hca_files", "hca_rma_files", "render"]
