"""Drift of the HCAs, paired with :mod:`validator.judge.checks.network`.

Compared with the certificate's ``network`` (each port's state, rate, firmware and error
counters at certification); a certificate without it (older, or HCAs not read then) gives
nothing to compare, and neither do facts without the network (an older agent).

* ``drift.network``: a certified Active port that is gone or no longer Active, or whose
  rate fell (the judge's action: reseat the cable and transceiver, then replace them).
* ``drift.network_firmware``: an HCA's firmware changed since certification (FAIL: what was
  certified is not what runs; certify again after a deliberate update).
* ``drift.network_errors``: a port's error counters grew since certification beyond the
  policy's ``network.error_growth_max`` (default 0); a count below the certified one was
  reset (the driver reloaded or the host rebooted) and is not growth.
"""

from __future__ import annotations

from validator.certificate import CertifiedPort
from validator.drift.drift_helpers import DriftInputs
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    node_finding,
    why_not,
    with_action,
)
from validator.judge.checks.network import CABLE
from validator.judge.checks.network_counters import FIRMWARE_FIX, GROWTH_ACTIONS
from validator.model import (
    IB_ERROR_COUNTERS,
    NOT_MEASURED,
    CheckFamily,
    DriftCheck,
    Finding,
    HcaPort,
    Measured,
    PortCounter,
    Unavailable,
)

FAMILY = CheckFamily.NETWORK


def _now_ports(
    inputs: DriftInputs,
) -> dict[tuple[str, int], tuple[HcaPort, Measured[str]]] | None:
    network = inputs.facts.network
    if network is None or isinstance(network.hcas, Unavailable):
        return None
    return {
        (port.device, port.port): (port, hca.fw_ver) for hca in network.hcas for port in hca.ports
    }


def _unread_now(was: CertifiedPort, now: HcaPort, fw: Measured[str]) -> str | None:
    """What of a certified port could not be read now: never taken for "as certified"."""
    unread = [
        what
        for what, value, certified in (
            ("state", now.state, was.state),
            ("rate", now.rate_gbps, was.rate_gbps),
            ("firmware", fw, was.fw_ver),
        )
        if certified is not None and isinstance(value, Unavailable)
    ]
    counters = now.counters
    if isinstance(counters, Unavailable) or not any(isinstance(c.value, int) for c in counters):
        unread.append("error counters")
    return f"{was.name}: {', '.join(unread)} not read" if unread else None


def _link(was: CertifiedPort, now: HcaPort | None) -> str | None:
    if was.state != "ACTIVE":
        return None
    if now is None:
        return f"{was.name} is gone (certified Active)"
    if now.state != "ACTIVE":
        return f"{was.name} is {now.state} (certified Active)"
    rate = now.rate_gbps
    if was.rate_gbps is not None and isinstance(rate, float) and rate < was.rate_gbps:
        return f"{was.name} rate fell from {was.rate_gbps:g} to {rate:g} Gb/s"
    return None


def _grown(was: CertifiedPort, now: HcaPort, limit: int) -> list[Finding]:
    counters: tuple[PortCounter, ...] | Unavailable = now.counters
    if isinstance(counters, Unavailable):
        return []
    findings: list[Finding] = []
    for counter in counters:
        before = was.counter(counter.name)
        if before is None or not isinstance(counter.value, int) or counter.value < before:
            continue
        grew = counter.value - before
        if grew > limit:
            finding = node_finding(
                DriftCheck.NETWORK_ERRORS,
                FAIL,
                f"{was.name} {counter.name} grew by {grew:,} since certification "
                f"({before:,} to {counter.value:,})",
                observed=f"+{grew:,}",
                expected=f"at most +{limit}",
            )
            findings.append(with_action(finding, *GROWTH_ACTIONS[counter.name]))
    return findings


def compare_network(inputs: DriftInputs) -> list[Finding]:
    """Each certified port's state, rate, firmware and counters against now."""
    certified = inputs.cert.network
    if certified is None or inputs.facts.network is None:
        return []
    now = _now_ports(inputs)
    if now is None:
        hcas = inputs.facts.network.hcas
        why = why_not(hcas) if isinstance(hcas, Unavailable) else "not read"
        return [
            node_finding(
                DriftCheck.NETWORK,
                UNKNOWN,
                f"the HCAs could not be read, so their drift is unknown: {why}",
            )
        ]
    allowed = None if inputs.policy.network is None else inputs.policy.network.error_growth_max
    limit = 0 if allowed is None else allowed
    findings: list[Finding] = []
    unread: list[str] = []
    for was in certified:
        port, fw = now.get((was.device, was.port), (None, NOT_MEASURED))
        missing = None if port is None else _unread_now(was, port, fw)
        if missing is not None:
            unread.append(missing)
        if port is not None and isinstance(port.state, Unavailable):
            continue  # its state not read: not "down", nor anything else to compare
        changed = _link(was, port)
        if changed is not None:
            finding = node_finding(DriftCheck.NETWORK, FAIL, changed, expected="as certified")
            findings.append(with_action(finding, *CABLE))
        if was.fw_ver is not None and isinstance(fw, str) and fw != was.fw_ver:
            finding = node_finding(
                DriftCheck.NETWORK_FIRMWARE,
                FAIL,
                f"{was.device} firmware changed from {was.fw_ver} to {fw} since certification",
                observed=fw,
                expected=was.fw_ver,
            )
            findings.append(with_action(finding, *FIRMWARE_FIX))
        if port is not None:
            findings += _grown(was, port, limit)
    if unread and not findings:
        return [
            node_finding(
                DriftCheck.NETWORK,
                UNKNOWN,
                f"drift unknown where the HCAs could not be read now: {'; '.join(unread[:4])}",
            )
        ]
    if not findings:
        findings.append(
            node_finding(
                DriftCheck.NETWORK,
                PASS,
                f"{len(certified)} HCA port(s) as certified: state, rate, firmware and "
                f"error counters ({len(IB_ERROR_COUNTERS)} each)",
            )
        )
    return findings


__all__ = ["FAMILY", "compare_network"]
