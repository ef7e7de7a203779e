"""Drift of GPUDirect RDMA readiness: peermem gone, ACS turned on, a GPU's nearest NIC moved.

The baseline is a real certificate issued on the healthy H100 scenario (sealed, then read
back from its JSON); the facts of now are the fault scenarios' as a drift run collects them.
"""

from __future__ import annotations

import dataclasses
from functools import cache

import pytest

from tests.collecting import collect_simulated
from validator.certificate import (
    Certificate,
    CertificateError,
    certificate_from_json,
    certificate_to_json,
    issue_certificate,
    verify_digest,
)
from validator.drift import compare
from validator.judge import Policy, judge_node
from validator.model import (
    Action,
    DriftCheck,
    Finding,
    NodeFacts,
    Reason,
    Severity,
    Unavailable,
    Verdict,
)
from validator.node.burnin.burn_config import BurnConfig

POLICY = Policy()
CHECK = DriftCheck.GPUDIRECT.value


@cache
def baseline() -> Certificate:
    facts = collect_simulated("healthy-8x-h100-sxm", burn=BurnConfig(duration_s=1.0))
    result = judge_node(facts, POLICY)
    assert result.verdict is Verdict.CERTIFIED, result.summary
    return certificate_from_json(certificate_to_json(issue_certificate(result)))


def gpudirect_drift(facts: NodeFacts, cert: Certificate | None = None) -> list[Finding]:
    return [f for f in compare(cert or baseline(), facts, POLICY) if f.check == CHECK]


def failed(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.FAIL]


def test_the_certificate_holds_the_summary_and_its_seal_covers_it() -> None:
    cert = baseline()
    assert cert.gpudirect is not None
    assert cert.gpudirect.peermem == "nvidia_peermem"
    assert cert.gpudirect.acs_enabled is False
    assert cert.gpudirect.affinity is not None
    assert cert.gpudirect.affinity[0] == "GPU0 mlx5_0 PIX"
    assert cert.gpudirect.iommu_mode == "passthrough"
    verify_digest(cert)
    # The digest covers the summary: an edited one no longer matches it.
    edited = dataclasses.replace(
        cert, gpudirect=dataclasses.replace(cert.gpudirect, acs_enabled=True)
    )
    with pytest.raises(CertificateError):
        verify_digest(edited)


def test_unchanged_node_passes() -> None:
    findings = gpudirect_drift(collect_simulated("healthy-8x-h100-sxm"))
    assert len(findings) == 3
    assert {f.severity for f in findings} == {Severity.PASS}


def test_peermem_went_missing() -> None:
    (finding,) = failed(gpudirect_drift(collect_simulated("peermem-missing")))
    assert finding.action is Action.FIX_SOFTWARE
    assert "certified with nvidia_peermem" in finding.message


def test_acs_got_enabled() -> None:
    (finding,) = failed(gpudirect_drift(collect_simulated("acs-enabled")))
    assert finding.action is Action.FIX_BIOS
    assert finding.observed == "ACS enabled"


def test_affinity_changed() -> None:
    (finding,) = failed(gpudirect_drift(collect_simulated("gpu-nic-across-socket")))
    assert finding.action is Action.RESEAT_CABLE_RISER
    assert "GPU4 mlx5_4 PIX" in finding.expected
    assert "GPU4 mlx5_0 SYS" in finding.observed


def test_no_summary_in_the_certificate_or_no_facts_now_gives_nothing() -> None:
    older = dataclasses.replace(baseline(), gpudirect=None)
    assert gpudirect_drift(collect_simulated("acs-enabled"), older) == []
    assert (
        gpudirect_drift(dataclasses.replace(collect_simulated("acs-enabled"), gpudirect=None)) == []
    )


def test_not_measured_now_is_unknown_never_as_certified() -> None:
    facts = collect_simulated("healthy-8x-h100-sxm")
    assert facts.gpudirect is not None
    unread = Unavailable(Reason.NOT_MEASURED, "lspci-vvv.txt not in the capture")
    facts = dataclasses.replace(
        facts, gpudirect=dataclasses.replace(facts.gpudirect, acs_ports=unread)
    )
    findings = gpudirect_drift(facts)
    assert [f.severity for f in findings if "ACS" in f.message] == [Severity.UNKNOWN]
