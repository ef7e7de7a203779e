"""Drift of the host around the GPUs (validator.drift.host_drift) against a real certificate."""

from __future__ import annotations

import dataclasses

from tests.collecting import collect_simulated
from tests.drift.test_drift import POLICY, baseline, quick_facts
from validator.certificate import certificate_from_json, certificate_to_json
from validator.drift import compare
from validator.model import Action, Finding, NodeFacts, ServiceState, Severity, StackVersion


def host_findings(facts: NodeFacts) -> list[Finding]:
    return [f for f in compare(baseline(), facts, POLICY) if f.check == "drift.host"]


def with_host(facts: NodeFacts, **changes: object) -> NodeFacts:
    assert facts.host is not None
    return dataclasses.replace(facts, host=dataclasses.replace(facts.host, **changes))


def test_the_certificate_holds_the_host_and_reads_it_back() -> None:
    cert = baseline()
    assert cert.host is not None
    assert cert.host.cpu_cores == 112
    assert cert.host.drives is not None
    assert len(cert.host.drives) == 10
    assert all(d.healthy for d in cert.host.drives)
    assert ("nvidia-fabricmanager", "active") in cert.host.services
    assert certificate_from_json(certificate_to_json(cert)).host == cert.host


def test_an_unchanged_host_is_one_pass() -> None:
    [finding] = host_findings(quick_facts())
    assert finding.severity is Severity.PASS


def test_a_drive_whose_smart_went_bad_is_drift_to_replace() -> None:
    facts = collect_simulated("nvme-smart-failing", interconnect="off")
    [finding] = host_findings(facts)
    assert finding.severity is Severity.FAIL
    assert finding.action is Action.DRAIN_RMA
    assert "nvme5" in finding.message
    assert "SMART" in finding.message


def test_memory_and_cpus_that_shrank_are_drift() -> None:
    facts = quick_facts()
    assert facts.host is not None
    assert isinstance(facts.host.memory_kib, int)
    smaller = with_host(facts, memory_kib=facts.host.memory_kib - 64 * 1024**2, cpu_cores=56)
    found = host_findings(smaller)
    assert {f.severity for f in found} == {Severity.FAIL}
    assert any("memory fell" in f.message for f in found)
    assert any("The CPUs changed" in f.message for f in found)
    # a few MiB less (another kernel's reservation) is no drift
    same = with_host(facts, memory_kib=facts.host.memory_kib - 4096)
    assert [f.severity for f in host_findings(same)] == [Severity.PASS]


def test_a_stopped_service_and_a_changed_version_are_drift() -> None:
    facts = quick_facts()
    assert facts.host is not None
    assert not isinstance(facts.host.versions, Exception)
    services = (
        ServiceState("nvidia-persistenced", "loaded", "active"),
        ServiceState("nvidia-fabricmanager", "loaded", "failed"),
        ServiceState("nvidia-dcgm", "loaded", "active"),
    )
    versions = tuple(
        StackVersion(
            v.component, v.package, "2.21.5-1+cuda12.2" if v.component == "nccl" else v.version
        )
        for v in facts.host.versions  # type: ignore[union-attr]
    )
    found = host_findings(with_host(facts, services=services, versions=versions))
    assert sorted((f.observed, f.action) for f in found) == [
        ("2.21.5-1+cuda12.2", Action.FIX_SOFTWARE),
        ("failed", Action.FIX_SOFTWARE),
    ]


def test_no_host_facts_now_or_in_the_certificate_is_no_finding() -> None:
    assert host_findings(dataclasses.replace(quick_facts(), host=None)) == []
    cert = dataclasses.replace(baseline(), host=None)
    assert [f for f in compare(cert, quick_facts(), POLICY) if f.check == "drift.host"] == []


def test_the_host_is_sealed_and_a_certificate_without_it_keeps_its_bytes() -> None:
    import json

    import pytest

    from validator.certificate import CertificateError, verify_digest

    cert = baseline()
    verify_digest(cert)
    data = json.loads(certificate_to_json(cert))
    data["host"]["cpu_cores"] = 224  # edited after issue
    with pytest.raises(CertificateError):
        verify_digest(certificate_from_json(json.dumps(data)))
    # no host (certified before the family): the field is left out, not written as null
    without = json.loads(certificate_to_json(dataclasses.replace(cert, host=None)))
    assert "host" not in without
