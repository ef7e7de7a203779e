"""Drift of the HCAs: a port that went down, a rate that fell, counters that grew, new firmware."""

from __future__ import annotations

import dataclasses

import pytest

from tests.collecting import collect_simulated
from tests.drift.test_drift import POLICY, baseline, quick_facts
from validator.certificate import certificate_from_json, certificate_to_json
from validator.drift.compare import compare
from validator.judge.policy import policy_from_mapping
from validator.model import (
    Finding,
    NetworkFacts,
    NodeFacts,
    PortCounter,
    Reason,
    Severity,
    Unavailable,
)


def _network(facts: NodeFacts) -> NetworkFacts:
    assert facts.network is not None
    return facts.network


def _edited(facts: NodeFacts, device: str, **port_changes: object) -> NodeFacts:
    """``facts`` with one HCA's port (or, with fw_ver, the HCA itself) changed."""
    network = _network(facts)
    assert not isinstance(network.hcas, Unavailable)
    hca_changes = {k: port_changes.pop(k) for k in ("fw_ver",) if k in port_changes}
    hcas = tuple(
        dataclasses.replace(
            hca,
            **hca_changes,
            ports=tuple(dataclasses.replace(p, **port_changes) for p in hca.ports),  # type: ignore[arg-type]
        )
        if hca.device == device
        else hca
        for hca in network.hcas
    )
    return dataclasses.replace(facts, network=dataclasses.replace(network, hcas=hcas))


def _network_findings(findings: tuple[Finding, ...]) -> list[Finding]:
    return [f for f in findings if f.check.startswith("drift.network")]


def test_the_certificate_keeps_every_port_and_reads_back() -> None:
    cert = baseline()
    assert cert.network is not None
    assert [(p.name, p.state, p.rate_gbps, p.fw_ver) for p in cert.network][:1] == [
        ("mlx5_0 port 1", "ACTIVE", 400.0, "28.39.2048")
    ]
    assert len(cert.network) == 8
    assert certificate_from_json(certificate_to_json(cert)) == cert


def test_a_certificate_without_the_network_keeps_its_bytes() -> None:
    cert = dataclasses.replace(baseline(), network=None)
    assert '"network"' not in certificate_to_json(cert)
    assert _network_findings(compare(cert, quick_facts(), POLICY)) == []


def test_unchanged_ports_pass() -> None:
    (finding,) = _network_findings(compare(baseline(), quick_facts(), POLICY))
    assert (finding.check, finding.severity) == ("drift.network", Severity.PASS)


@pytest.mark.parametrize(
    ("scenario", "says"),
    [
        ("ib-port-down", "mlx5_3 port 1 is DOWN (certified Active)"),
        ("ib-cable-polling", "mlx5_6 port 1 is DOWN (certified Active)"),
        ("ib-port-200g", "mlx5_5 port 1 rate fell from 400 to 200 Gb/s"),
    ],
)
def test_a_port_down_or_slower_drifts(scenario: str, says: str) -> None:
    facts = collect_simulated(scenario, interconnect="off")
    (finding,) = _network_findings(compare(baseline(), facts, POLICY))
    assert (finding.check, finding.severity, finding.message) == (
        "drift.network",
        Severity.FAIL,
        says,
    )
    assert finding.action.value == "reseat_or_replace_cable_or_riser"


def test_new_firmware_drifts() -> None:
    facts = _edited(quick_facts(), "mlx5_2", fw_ver="28.41.1000")
    (finding,) = _network_findings(compare(baseline(), facts, POLICY))
    assert finding.check == "drift.network_firmware"
    assert (
        finding.message
        == "mlx5_2 firmware changed from 28.39.2048 to 28.41.1000 since certification"
    )


def test_counters_that_grew_drift_and_a_reset_does_not() -> None:
    names = ("symbol_error", "link_downed", "port_rcv_errors", "excessive_buffer_overrun_errors",
             "link_error_recovery")  # fmt: skip
    grown = tuple(PortCounter(n, 40 if n == "link_downed" else 0) for n in names)
    (finding,) = _network_findings(
        compare(baseline(), _edited(quick_facts(), "mlx5_1", counters=grown), POLICY)
    )
    assert (finding.check, finding.observed) == ("drift.network_errors", "+40")
    allowed = policy_from_mapping({"network": {"error_growth_max": 50}}, "policy")
    (finding,) = _network_findings(
        compare(baseline(), _edited(quick_facts(), "mlx5_1", counters=grown), allowed)
    )
    assert finding.severity is Severity.PASS


def test_unread_hcas_are_unknown() -> None:
    facts = quick_facts()
    unread = dataclasses.replace(_network(facts), hcas=Unavailable(Reason.ERROR, "ibstat: boom"))
    (finding,) = _network_findings(
        compare(baseline(), dataclasses.replace(facts, network=unread), POLICY)
    )
    assert finding.severity is Severity.UNKNOWN


UNREAD = Unavailable(Reason.NO_PERMISSION, "permission denied")


@pytest.mark.parametrize(
    "changes",
    [
        {"state": UNREAD},  # never "is no permission": not read is not down
        {"rate_gbps": UNREAD},
        {"fw_ver": UNREAD},
        {"counters": UNREAD},
    ],
)
def test_what_could_not_be_read_now_is_unknown_never_as_certified(
    changes: dict[str, object],
) -> None:
    facts = _edited(quick_facts(), "mlx5_3", **changes)
    findings = _network_findings(compare(baseline(), facts, POLICY))
    assert [f.severity for f in findings] == [Severity.UNKNOWN], findings
    assert "mlx5_3" in findings[0].message
