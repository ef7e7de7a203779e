"""Drift of the container runtime against the certificate's container summary."""

from __future__ import annotations

import dataclasses

from tests.collecting import collect_simulated
from tests.drift.test_drift import POLICY, baseline, drifted, not_passed, quick_facts
from validator.certificate import certificate_from_json, certificate_to_json
from validator.drift import compare
from validator.model import (
    ContainerFacts,
    NodeFacts,
    Reason,
    RuntimeConfig,
    Severity,
    Unavailable,
)


def with_container(facts: NodeFacts, **changes: object) -> NodeFacts:
    assert facts.container is not None
    return dataclasses.replace(facts, container=dataclasses.replace(facts.container, **changes))


def test_the_certificate_keeps_the_container_summary_through_json() -> None:
    cert = baseline()
    assert cert.container is not None
    assert cert.container.toolkit_version == "1.17.8"
    assert cert.container.cdi_indexes == tuple(range(8))
    assert len(cert.container.cdi_uuids) == 8
    assert cert.container.runtimes == (
        "docker: runtimes.nvidia, features.cdi, default-runtime nvidia",
    )
    assert certificate_from_json(certificate_to_json(cert)).container == cert.container


def test_the_same_node_has_no_container_drift() -> None:
    findings = [f for f in compare(baseline(), quick_facts(), POLICY) if "container" in f.check]
    assert {f.check: f.severity for f in findings} == {
        "drift.container_toolkit": Severity.PASS,
        "drift.container_cdi": Severity.PASS,
        "drift.container_runtime": Severity.PASS,
    }


def test_the_spec_that_lost_a_gpu_is_drift() -> None:
    stale = collect_simulated("cdi-spec-stale", interconnect="off")
    assert drifted(stale) == {("drift.container_cdi", None)}
    [finding] = [f for f in compare(baseline(), stale, POLICY) if f.check == "drift.container_cdi"]
    assert "nvidia.com/gpu=7" in finding.message
    assert "nvidia-ctk cdi generate" in finding.message


def test_a_toolkit_upgraded_or_removed_is_drift() -> None:
    assert drifted(with_container(quick_facts(), toolkit_version="1.18.0")) == {
        ("drift.container_toolkit", None)
    }
    gone = Unavailable(Reason.NOT_SUPPORTED, "nvidia-ctk --version not found")
    assert ("drift.container_toolkit", None) in drifted(
        with_container(quick_facts(), toolkit_version=gone)
    )


def test_the_runtime_config_changed_is_drift() -> None:
    plain = RuntimeConfig("docker", True, True, "runtimes.nvidia", False, "/etc/docker/daemon.json")
    assert drifted(with_container(quick_facts(), runtimes=(plain,))) == {
        ("drift.container_runtime", None)
    }
    unconfigured = RuntimeConfig("docker", True, False)
    assert drifted(with_container(quick_facts(), runtimes=(unconfigured,))) == {
        ("drift.container_runtime", None)
    }


def test_what_cannot_be_read_now_is_unknown() -> None:
    gap = Unavailable(Reason.NOT_MEASURED, "nvidia-ctk-cdi-list.txt not in the capture")
    assert ("UNKNOWN", "drift.container_cdi", None) in not_passed(
        with_container(quick_facts(), cdi=gap)
    )


def test_no_baseline_or_no_facts_gives_no_container_finding() -> None:
    old = dataclasses.replace(baseline(), container=None)
    findings = [f for f in compare(old, quick_facts(), POLICY) if "container" in f.check]
    # A toolkit found now that the certificate did not hold: a WARN that does not block.
    assert [(f.check, f.severity, f.required) for f in findings] == [
        ("drift.container_toolkit", Severity.WARN, False)
    ]
    uncollected = dataclasses.replace(quick_facts(), container=None)
    assert not [f for f in compare(baseline(), uncollected, POLICY) if "container" in f.check]
    absent = ContainerFacts(Unavailable(Reason.NOT_SUPPORTED, "nvidia-ctk --version not found"))
    never = dataclasses.replace(quick_facts(), container=absent)
    assert not [f for f in compare(old, never, POLICY) if "container" in f.check]
