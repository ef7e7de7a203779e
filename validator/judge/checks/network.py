"""The network cards (HCAs): the compute fabric's ports up, at rate, on one firmware and PKey.

What the ports must be comes from the catalog (the reference system: 8 x 400 Gb/s NDR
InfiniBand on an H100/H200/B200 SXM node, 8 x 200 HDR on an A100 SXM node) under the
policy's ``network:`` (validator.judge.network_policy). The *fabric ports* are those on the
expected link layer (all ports where none is expected); the node's other ports (a storage
or management NIC in Ethernet mode) are listed, not judged.

* ``network.ports``: at least the expected number of fabric ports Active, LinkUp, at the
  expected rate. Where ports are expected and no HCA is there, "no InfiniBand device"
  fails: a driver (mlx5_ib) not loaded or a card not seated, never a pass.
* ``network.port_state``: each fabric port Active and LinkUp. ``Polling`` is a port that
  sees no link partner: the cable or transceiver (reseat it, then replace it). A port
  Disabled by its administrator fails only where the node is short of ports. ``Init`` or
  ``Armed`` is a link up that the subnet manager has not activated.
* ``network.rate``: each Active fabric port at the expected rate; slower is a cable or
  transceiver of a lower class, or a marginal one that trained down.
* ``network.link_layer``: too few ports on the expected link layer while others run the
  other one: the port type is set wrong (mlxconfig LINK_TYPE_P1).
* ``network.firmware``: one firmware version and one PSID per HCA model across the node.
* ``network.pkey``: every fabric port on one PKey (the policy's, where it names one).
* ``network.errors``: error counters since the driver loaded (WARN, not required); their
  growth during the burn-in, ``network.error_growth``, fails beyond the policy's allowance.
* ``network.link_flaps``: interfaces whose link went down in the kernel log.
* ``network.sources``: where ibstat or ibv_devinfo disagreed with sysfs.

The link layer, PKey, counters, their growth and the flaps pass quietly: their PASS is
said in ``network.ports``' PASS message, so a healthy node's report stays small.
"""

from __future__ import annotations

import dataclasses

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    node_finding,
    why_not,
    with_action,
)
from validator.judge.checks.network_counters import counter_findings
from validator.judge.network_policy import NetworkExpectation, expected
from validator.judge.policy import Policy
from validator.model import (
    Action,
    Finding,
    Hca,
    HcaPort,
    NodeFacts,
    Severity,
    Unavailable,
)

PORTS = "network.ports"
PORT_STATE = "network.port_state"
RATE = "network.rate"
LINK_LAYER = "network.link_layer"

CABLE = (
    Action.RESEAT_CABLE_RISER,
    "gpuready: the port sees no link partner (Polling) or trained slow: reseat the cable and "
    "transceiver, then replace them",
)
NO_DEVICE_FIX = (
    Action.FIX_SOFTWARE,
    "gpuready: load mlx5_core and mlx5_ib (rdma-core) or seat the HCAs; a site without an "
    "RDMA fabric states network: none in the policy",
)
SUBNET_MANAGER = (
    Action.FIX_SOFTWARE,
    "gpuready: the link is up but the subnet manager (opensm / UFM) has not activated the port",
)
LINK_TYPE_FIX = (
    Action.FIX_SOFTWARE,
    "gpuready: set the ports' type (mlxconfig LINK_TYPE_P1) to the fabric's link layer",
)


def _expectation(policy: Policy, sku: Sku | None) -> NetworkExpectation | None:
    return expected(None if sku is None else sku.network, policy.network)


def _fabric(hcas: tuple[Hca, ...], want: NetworkExpectation | None) -> list[HcaPort]:
    layer = None if want is None else want.link_layer
    return [
        port
        for hca in hcas
        for port in hca.ports
        if layer is None or isinstance(port.link_layer, Unavailable) or port.link_layer == layer
    ]


def _up(port: HcaPort, rate: float | None) -> bool:
    at_rate = rate is None or (
        not isinstance(port.rate_gbps, Unavailable) and port.rate_gbps >= rate
    )
    return port.state == "ACTIVE" and port.phys_state == "LinkUp" and at_rate


def _port_unread(port: HcaPort, rate: float | None) -> bool:
    """A port whose state (or, where a rate is wanted, rate) could not be read."""
    fields: tuple[object, ...] = (port.state, port.phys_state)
    if rate is not None:
        fields += (port.rate_gbps,)
    return any(isinstance(value, Unavailable) for value in fields)


def _layout(want: NetworkExpectation) -> str:
    parts = [f"{want.ports} ports" if want.ports is not None else "ports"]
    if want.rate_gbps is not None:
        parts.append(f"at {want.rate_gbps:g} Gb/s")
    if want.link_layer:
        parts.append(want.link_layer)
    return " ".join(parts)


def _ports(
    hcas: tuple[Hca, ...], fabric: list[HcaPort], want: NetworkExpectation | None
) -> Finding:
    if want is None or want.ports is None:
        found = sum(len(hca.ports) for hca in hcas)
        what = f"{len(hcas)} HCA(s) with {found} port(s)" if hcas else "no RDMA device"
        return node_finding(
            PORTS,
            PASS,
            f"{what}; no fabric layout is expected for this system (state network: in the "
            "policy to require one)",
            observed=what,
            required=False,
        )
    if not hcas:
        finding = node_finding(
            PORTS,
            FAIL,
            f"no InfiniBand device: /sys/class/infiniband lists no HCA, and {_layout(want)} "
            "are expected",
            observed="no InfiniBand device",
            expected=_layout(want),
        )
        return with_action(finding, *NO_DEVICE_FIX)
    up = [port for port in fabric if _up(port, want.rate_gbps)]
    good = len(up) >= want.ports
    unread = [port for port in fabric if _port_unread(port, want.rate_gbps)]
    if not good and len(up) + len(unread) >= want.ports:
        # Short only by ports that could not be read: not measured, never a failed link.
        return node_finding(
            PORTS,
            UNKNOWN,
            f"{len(up)} of {len(fabric)} fabric port(s) Active at rate; "
            f"{len(unread)} could not be read ({', '.join(p.name for p in unread[:4])})",
            observed=f"{len(up)} up, {len(unread)} unread",
            expected=f">= {want.ports}",
        )
    finding = node_finding(
        PORTS,
        PASS if good else FAIL,
        f"{len(up)} of {len(fabric)} fabric port(s) Active at rate"
        + ("" if good else f", short of the {_layout(want)} expected"),
        observed=f"{len(up)} up",
        expected=f">= {want.ports}",
    )
    return finding if good else with_action(finding, *CABLE)


def _port_state(port: HcaPort, short: bool) -> Finding | None:
    state, phys = port.state, port.phys_state
    if isinstance(state, Unavailable) or isinstance(phys, Unavailable):
        why = state if isinstance(state, Unavailable) else phys
        detail = why_not(why) if isinstance(why, Unavailable) else "unread"
        return node_finding(PORT_STATE, UNKNOWN, f"{port.name} state could not be read: {detail}")
    if state == "ACTIVE" and phys == "LinkUp":
        return None
    seen = f"{state}/{phys}"
    text = f"{port.name} is {state.lower()} (physical state {phys})"
    if phys == "Polling":
        finding = node_finding(
            PORT_STATE,
            FAIL,
            f"{text}: no link partner, a cable or transceiver fault",
            observed=seen,
            expected="ACTIVE/LinkUp",
        )
        return with_action(finding, *CABLE)
    if phys == "Disabled":
        finding = node_finding(
            PORT_STATE,
            FAIL if short else WARN,
            f"{text}: disabled" + (", and the node is short of fabric ports" if short else ""),
            observed=seen,
            expected="ACTIVE/LinkUp",
            required=short,
        )
        return with_action(finding, *CABLE)
    if phys == "LinkUp":
        finding = node_finding(
            PORT_STATE,
            FAIL,
            f"{text}: the link is up, the port not activated",
            observed=seen,
            expected="ACTIVE/LinkUp",
        )
        return with_action(finding, *SUBNET_MANAGER)
    finding = node_finding(PORT_STATE, FAIL, text, observed=seen, expected="ACTIVE/LinkUp")
    return with_action(finding, *CABLE)


def _states(fabric: list[HcaPort], short: bool) -> list[Finding]:
    bad = [f for f in (_port_state(port, short) for port in fabric) if f is not None]
    if bad or not fabric:
        return bad
    return [
        node_finding(
            PORT_STATE,
            PASS,
            f"all {len(fabric)} fabric port(s) Active and LinkUp",
            observed=f"{len(fabric)} ACTIVE/LinkUp",
        )
    ]


def _rates(fabric: list[HcaPort], want: NetworkExpectation | None) -> list[Finding]:
    if want is None or want.rate_gbps is None:
        return []
    floor = want.rate_gbps
    findings: list[Finding] = []
    active = [port for port in fabric if port.state == "ACTIVE"]
    for port in active:
        rate = port.rate_gbps
        if isinstance(rate, Unavailable):
            findings.append(
                node_finding(RATE, UNKNOWN, f"{port.name} rate could not be read: {why_not(rate)}")
            )
        elif rate < floor:
            finding = node_finding(
                RATE,
                FAIL,
                f"{port.name} runs at {rate:g} Gb/s ({port.rate_text or 'as read'}), below the "
                f"{floor:g} Gb/s expected",
                observed=f"{rate:g} Gb/s",
                expected=f">= {floor:g} Gb/s",
            )
            findings.append(with_action(finding, *CABLE))
    if active and not findings:
        findings.append(
            node_finding(
                RATE,
                PASS,
                f"all {len(active)} active fabric port(s) at {floor:g} Gb/s or faster",
                observed=f">= {floor:g} Gb/s",
                expected=f">= {floor:g} Gb/s",
            )
        )
    return findings


def _link_layer(
    hcas: tuple[Hca, ...], fabric: list[HcaPort], want: NetworkExpectation | None
) -> list[Finding]:
    if want is None or want.link_layer is None or want.ports is None or not hcas:
        return []
    others = [port for hca in hcas for port in hca.ports if port not in fabric]
    if len(fabric) >= want.ports or not others:
        return [
            node_finding(
                LINK_LAYER,
                PASS,
                f"{len(fabric)} port(s) on {want.link_layer}"
                + (f" ({len(others)} other port(s) not judged)" if others else ""),
                observed=want.link_layer,
                expected=want.link_layer,
            )
        ]
    named = ", ".join(f"{p.name} ({p.link_layer})" for p in others[:8])
    finding = node_finding(
        LINK_LAYER,
        FAIL,
        f"only {len(fabric)} port(s) run {want.link_layer}, {want.ports} expected; the others "
        f"run another link layer: {named}",
        observed=f"{len(fabric)} {want.link_layer}",
        expected=f"{want.ports} {want.link_layer}",
    )
    return [with_action(finding, *LINK_TYPE_FIX)]


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge the node's HCAs against the system's expected fabric (nothing where not read)."""
    network = facts.network
    if network is None:
        return []
    want = _expectation(policy, sku)
    if want is not None and want.none:
        return [
            node_finding(
                PORTS,
                PASS,
                "the policy states no RDMA fabric (network: none)",
                observed="not judged",
                required=False,
            )
        ]
    hcas = network.hcas
    if isinstance(hcas, Unavailable):
        return [_unread(hcas, want)]
    fabric = _fabric(hcas, want)
    ports = _ports(hcas, fabric, want)
    findings = [ports]
    if not hcas:
        return findings
    findings += _states(fabric, short=ports.severity is FAIL)
    findings += _rates(fabric, want)
    findings += _link_layer(hcas, fabric, want)
    findings += counter_findings(network, hcas, fabric, want)
    return _quiet(findings)


# Checks whose PASS is said in network.ports' PASS, not as findings of their own: a
# healthy node's report stays small (a fleet's JUnit: 10 KB a node), the facts no less.
_QUIET = {
    LINK_LAYER: "link layer as expected",
    "network.pkey": "one PKey",
    "network.errors": "no port error counted",
    "network.error_growth": "no counter grew during the burn-in",
    "network.link_flaps": "no link flap",
}


def _quiet(findings: list[Finding]) -> list[Finding]:
    said = [_QUIET[f.check] for f in findings if f.check in _QUIET and f.severity is Severity.PASS]
    kept = [f for f in findings if f.check not in _QUIET or f.severity is not Severity.PASS]
    return [
        dataclasses.replace(f, message=f"{f.message}; {', '.join(said)}")
        if f.check == PORTS and f.severity is Severity.PASS and said
        else f
        for f in kept
    ]


def _unread(hcas: Unavailable, want: NetworkExpectation | None) -> Finding:
    """UNKNOWN: the HCAs were not read (a capture's gap is named by the advice)."""
    needed = want is not None and want.ports is not None
    return node_finding(
        PORTS,
        UNKNOWN,
        f"the HCAs could not be read, so the network cannot be judged: {why_not(hcas)}",
        observed=hcas,
        expected=_layout(want) if needed and want is not None else "",
        required=needed,
    )


__all__ = ["PORTS", "check"]
