"""The host family's checks (validator.judge.checks.host_health), healthy and faulty."""

from __future__ import annotations

import dataclasses
import json
from functools import cache

import pytest

from tests.collecting import collect_simulated
from validator.cli.main import main
from validator.judge import Policy, judge_node, load_catalog
from validator.judge.checks import host_health
from validator.judge.policy import policy_from_mapping
from validator.model import (
    Action,
    Finding,
    MountSpace,
    NodeFacts,
    NvmeDrive,
    Reason,
    ServiceState,
    Severity,
    SmartHealth,
    Unavailable,
    Verdict,
)


@cache
def healthy() -> NodeFacts:
    return collect_simulated("healthy-8x-h100-sxm", interconnect="off")


def host_findings(facts: NodeFacts, policy: Policy) -> list[Finding]:
    return host_health.check(facts, policy, None)


def by_check(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def with_host(facts: NodeFacts, **changes: object) -> NodeFacts:
    assert facts.host is not None
    return dataclasses.replace(facts, host=dataclasses.replace(facts.host, **changes))


STRICT = policy_from_mapping(
    {
        "host": {
            "cpu_cores": 112,
            "cpu_model": r"Xeon\(R\) Platinum 8480C",
            "memory_gib": 1900,
            "swap_allowed": False,
            "nvme_count": 10,
            "mounts": [{"path": "/raid", "min_free_gib": 1000}],
            "kernel_params": {"iommu": "pt", "nouveau.modeset": 0},
            "sysctl": {"kernel.numa_balancing": 0},
            "services": ["nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm"],
            "pins": {"nccl": "2.23.4", "dcgm": "4.4.1", "container_toolkit": "1.19.1"},
        }
    },
    "test policy",
)


def test_the_healthy_node_passes_every_host_check_under_a_strict_policy() -> None:
    findings = host_findings(healthy(), STRICT)
    assert {f.severity for f in findings} == {Severity.PASS}
    checks = {f.check for f in findings}
    assert checks == {
        "host.cpu",
        "host.memory",
        "host.swap",
        "host.nvme_count",
        "host.nvme_smart",
        "host.mounts",
        "host.kernel_params",
        "host.services",
        "host.stack_versions",
    }
    [drives] = by_check(findings, "host.nvme_smart")  # ten healthy drives: one PASS
    assert drives.message.startswith("10 NVMe drives: SMART healthy: nvme0, nvme1")
    assert all(f.required for f in findings)


def test_no_host_facts_no_finding() -> None:
    assert host_findings(dataclasses.replace(healthy(), host=None), STRICT) == []


def test_cpu_memory_swap_and_drive_count_short_of_the_policy_fail() -> None:
    facts = with_host(
        healthy(),
        cpu_cores=96,
        memory_kib=1024**3,
        swap_kib=8 * 1024**2,
        nvme=healthy().host.nvme[:9],  # type: ignore[union-attr]
    )
    findings = host_findings(facts, STRICT)
    failed = {f.check: f for f in findings if f.severity is Severity.FAIL}
    assert set(failed) == {"host.cpu", "host.memory", "host.swap", "host.nvme_count"}
    assert "96 CPU cores" in failed["host.cpu"].message
    # swap only WARNs where the policy does not say
    [swap] = by_check(host_findings(facts, Policy()), "host.swap")
    assert swap.severity is Severity.WARN


def test_each_smart_fault_fails_the_drive_and_wear_warns() -> None:
    base = SmartHealth(
        passed=True,
        critical_warning=0,
        percentage_used=1,
        media_errors=0,
        available_spare=100,
        available_spare_threshold=10,
    )
    cases = {
        "verdict": dataclasses.replace(base, passed=False),
        "warning": dataclasses.replace(base, critical_warning=4),
        "media": dataclasses.replace(base, media_errors=1),
        "worn": dataclasses.replace(base, percentage_used=100),
        "spare": dataclasses.replace(base, available_spare=5),
    }
    for name, smart in cases.items():
        facts = with_host(healthy(), nvme=(NvmeDrive("nvme0", "M", "S", smart),))
        [finding] = by_check(host_findings(facts, Policy()), "host.nvme_smart")
        assert finding.severity is Severity.FAIL, name
    facts = with_host(
        healthy(),
        nvme=(NvmeDrive("nvme0", "M", "S", dataclasses.replace(base, percentage_used=95)),),
    )
    [finding] = by_check(host_findings(facts, Policy()), "host.nvme_smart")
    assert finding.severity is Severity.WARN
    unread = Unavailable(Reason.ERROR, "smartctl /dev/nvme0: Permission denied")
    facts = with_host(healthy(), nvme=(NvmeDrive("nvme0", smart=unread),))
    [finding] = by_check(host_findings(facts, Policy()), "host.nvme_smart")
    assert finding.severity is Severity.UNKNOWN
    assert finding.required


def test_mounts_kernel_settings_services_and_pins_that_differ_fail() -> None:
    assert healthy().host is not None
    facts = with_host(
        healthy(),
        mounts=(MountSpace("/raid", "/dev/md1", 2 * 1024**3, 10 * 1024**2),),
        cmdline="BOOT_IMAGE=/boot/vmlinuz ro quiet",
        services=(
            ServiceState("nvidia-persistenced", "loaded", "active"),
            ServiceState("nvidia-fabricmanager", "loaded", "failed"),
            ServiceState("nvidia-dcgm", "not-found", "inactive"),
        ),
    )
    findings = host_findings(
        facts,
        dataclasses.replace(
            STRICT, host=dataclasses.replace(STRICT.host, pins=(("nccl", "2.21"),))
        ),
    )
    failed = [(f.check, f.observed) for f in findings if f.severity is Severity.FAIL]
    assert ("host.mounts", "10.0 GiB free of 2048.0 GiB (/dev/md1)") in failed
    assert any(check == "host.kernel_params" and "iommu=pt" in seen for check, seen in failed)
    assert ("host.services", "failed") in failed
    assert ("host.services", "not-found") in failed
    assert ("host.stack_versions", "2.23.4-1+cuda12.4") in failed
    assert {f.action for f in findings if f.severity is Severity.FAIL} == {
        Action.NONE
    }  # judge sets


def test_defaults_need_the_services_the_hardware_needs() -> None:
    facts = with_host(
        healthy(), services=(ServiceState("nvidia-persistenced", "loaded", "active"),)
    )
    [fm] = [
        f
        for f in by_check(host_findings(facts, Policy()), "host.services")
        if "fabricmanager" in f.message
    ]
    assert fm.severity is Severity.FAIL
    assert "NVSwitches" in fm.message
    # an A100 PCIe-like node without NVSwitches needs no fabric manager
    no_switch = dataclasses.replace(facts, pci_nvswitch_count=0)
    assert all(
        f.severity is Severity.PASS
        for f in by_check(host_findings(no_switch, Policy()), "host.services")
    )


def test_the_judge_gives_each_host_fault_its_action() -> None:
    facts = collect_simulated("nvme-smart-failing", interconnect="off")
    result = judge_node(facts, Policy(require_burn=False))
    assert result.verdict is Verdict.NOT_CERTIFIED
    [failing] = [f for f in result.findings if f.severity is Severity.FAIL]
    assert failing.check == "host.nvme_smart"
    assert failing.action is Action.DRAIN_RMA
    assert "nvme5" in failing.message
    assert "7 media and data integrity errors" in failing.message


def test_certify_simulate_nvme_smart_failing_in_the_terminal_and_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["certify", "--simulate", "nvme-smart-failing", "--burn", "0"])
    out = capsys.readouterr().out
    assert code != 0
    line = next(line for line in out.splitlines() if "host.nvme_smart" in line)
    assert line.split()[0] == "FAIL"
    assert "nvme5" in line
    assert "drain and RMA" in line
    code = main(
        [
            "certify",
            "--simulate",
            "nvme-smart-failing",
            "--burn",
            "0",
            "--json",
            "--json-form",
            "full",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    [node] = report["nodes"]
    assert node["verdict"] == "NOT_CERTIFIED"
    [finding] = [f for f in node["findings"] if f["severity"] == "FAIL"]
    assert (finding["check"], finding["action"]) == ("host.nvme_smart", "drain_and_rma")


def test_the_reference_system_is_judged_only_where_the_policy_asks() -> None:
    catalog = load_catalog()
    h100 = catalog.get("h100-sxm")
    assert h100.host is not None
    assert (h100.host.cpu_cores, h100.host.memory_gib) == (112, 2048.0)
    reference = policy_from_mapping({"host": {"reference_system": True}}, "test policy")
    checks = {f.check: f for f in host_health.check(healthy(), reference, h100)}
    assert checks["host.cpu"].severity is Severity.PASS
    assert checks["host.memory"].severity is Severity.PASS
    # Without the policy asking, the CPUs and memory are not held to a DGX
    assert "host.cpu" not in {f.check for f in host_health.check(healthy(), Policy(), h100)}
    # A node of other CPUs and half the memory fails against the reference
    other = with_host(healthy(), cpu_model="Intel(R) Xeon(R) Platinum 8470", memory_kib=1024**3)
    failed = {
        f.check for f in host_health.check(other, reference, h100) if f.severity is Severity.FAIL
    }
    assert failed == {"host.cpu", "host.memory"}
    a100 = catalog.get("a100-sxm4-80gb")
    facts = collect_simulated("healthy-8x-a100-80gb", interconnect="off")
    found = host_health.check(facts, reference, a100)
    assert {f.check for f in found} >= {"host.cpu", "host.memory"}
    assert {f.severity for f in found} == {Severity.PASS}
