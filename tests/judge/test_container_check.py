"""The container checks: healthy and faulty nodes, required or not, measured or not."""

from __future__ import annotations

import dataclasses

import pytest

from tests.collecting import collect_simulated
from validator.judge.checks import container
from validator.judge.container_policy import ContainerPolicy
from validator.judge.policy import Policy
from validator.model import (
    Action,
    CdiSpec,
    ContainerFacts,
    ContainerRun,
    Finding,
    NodeFacts,
    Reason,
    RuntimeConfig,
    Severity,
    Unavailable,
)

DOCKER = RuntimeConfig("docker", True, True, "runtimes.nvidia", False, "/etc/docker/daemon.json")
REQUIRED = Policy(container=ContainerPolicy(required=True))
DEFAULT = Policy()


@pytest.fixture(scope="module")
def healthy() -> NodeFacts:
    return collect_simulated("healthy-8x-h100-sxm", interconnect="off")


def judged(facts: NodeFacts, found: ContainerFacts, policy: Policy = DEFAULT) -> list[Finding]:
    return container.check(dataclasses.replace(facts, container=found), policy, None)


def by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings if f.gpu_index is None}


def spec_of(facts: NodeFacts, *, drop: int | None = None, all_: bool = True) -> CdiSpec:
    gpus = [g for g in facts.gpus if g.index != drop]
    return CdiSpec(
        indexes=tuple(g.index for g in gpus),
        uuids=tuple(sorted(str(g.uuid) for g in gpus)),
        has_all=all_,
    )


def test_the_healthy_scenario_passes_every_container_check(healthy: NodeFacts) -> None:
    findings = container.check(healthy, Policy(), None)
    assert {f.check: f.severity for f in findings} == {
        "container.toolkit": Severity.PASS,
        "container.cdi": Severity.PASS,
        "container.runtime": Severity.PASS,
    }
    # Not asked: no container was run, no finding for it, and the PASS says so.
    assert "not asked: certify --container-image" in by_check(findings)["container.runtime"].message


def test_facts_without_container_facts_give_no_finding(healthy: NodeFacts) -> None:
    assert container.check(dataclasses.replace(healthy, container=None), Policy(), None) == []


def test_a_gpu_missing_from_the_spec_fails_with_regenerate(healthy: NodeFacts) -> None:
    found = ContainerFacts("1.17.8", spec_of(healthy, drop=7), (DOCKER,))
    fails = [f for f in judged(healthy, found) if f.severity is Severity.FAIL]
    assert [(f.check, f.gpu_index) for f in fails] == [("container.cdi", 7)]
    assert fails[0].action is Action.FIX_SOFTWARE
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in fails[0].message


def test_old_uuids_after_a_gpu_swap_fail_and_name_the_stale_one(healthy: NodeFacts) -> None:
    spec = spec_of(healthy)
    old = "GPU-20f8adb6-f7e2-5466-6cf5-d07abfe364a9"  # a UUID of another node's H100
    swapped = str(healthy.gpus[3].uuid)
    spec = dataclasses.replace(spec, uuids=tuple(sorted({*spec.uuids} - {swapped} | {old})))
    fails = [f for f in judged(healthy, ContainerFacts("1.17.8", spec, (DOCKER,)))
             if f.severity is Severity.FAIL]  # fmt: skip
    assert [(f.check, f.gpu_index) for f in fails] == [("container.cdi", 3)]
    assert old in fails[0].message
    assert "predates a change of GPUs" in fails[0].message


def test_a_spec_without_all_fails(healthy: NodeFacts) -> None:
    found = ContainerFacts("1.17.8", spec_of(healthy, all_=False), (DOCKER,))
    cdi = by_check(judged(healthy, found))["container.cdi"]
    assert cdi.severity is Severity.FAIL
    assert "nvidia.com/gpu=all" in cdi.message


def test_an_index_only_spec_of_an_older_toolkit_passes(healthy: NodeFacts) -> None:
    spec = CdiSpec(indexes=tuple(range(8)), has_all=True)
    cdi = by_check(judged(healthy, ContainerFacts("1.14.0", spec, (DOCKER,))))["container.cdi"]
    assert cdi.severity is Severity.PASS


def test_no_toolkit_is_not_applicable_unless_required(healthy: NodeFacts) -> None:
    absent = ContainerFacts(
        Unavailable(Reason.NOT_SUPPORTED, "nvidia-ctk --version not found"),
        Unavailable(Reason.NOT_SUPPORTED, "nvidia-ctk cdi list not found"),
        (),
    )
    [only] = judged(healthy, absent)
    assert (only.check, only.severity, only.required) == ("container.toolkit", Severity.PASS, False)
    assert "not applicable" in only.message
    required = by_check(judged(healthy, absent, REQUIRED))
    assert required["container.toolkit"].severity is Severity.FAIL
    assert required["container.toolkit"].action is Action.FIX_SOFTWARE
    assert required["container.runtime"].severity is Severity.FAIL


def test_a_runtime_installed_but_not_configured_fails(healthy: NodeFacts) -> None:
    bare = RuntimeConfig("docker", True, False)
    runtime = by_check(judged(healthy, ContainerFacts("1.17.8", spec_of(healthy), (bare,))))
    assert runtime["container.runtime"].severity is Severity.FAIL
    assert "nvidia-ctk runtime configure --runtime=docker" in runtime["container.runtime"].message


def test_a_daemon_json_that_does_not_parse_fails(healthy: NodeFacts) -> None:
    broken = RuntimeConfig(
        "docker", True, Unavailable(Reason.ERROR, "daemon.json is not JSON: Extra data"), "",
        False, "/etc/docker/daemon.json",
    )  # fmt: skip
    runtime = by_check(judged(healthy, ContainerFacts("1.17.8", spec_of(healthy), (broken,))))
    assert runtime["container.runtime"].severity is Severity.FAIL
    assert "/etc/docker/daemon.json does not parse" in runtime["container.runtime"].message


def test_a_capture_without_the_files_is_unknown_and_says_what_to_record(
    healthy: NodeFacts,
) -> None:
    gap = Unavailable(Reason.NOT_MEASURED, "nvidia-ctk-version.txt not in the capture")
    found = ContainerFacts(gap, gap, gap)
    findings = by_check(judged(healthy, found))
    toolkit = findings["container.toolkit"]
    assert (toolkit.severity, toolkit.action, toolkit.required) == (
        Severity.UNKNOWN,
        Action.MEASURE,
        False,
    )
    assert "nvidia-ctk --version > nvidia-ctk-version.txt" in toolkit.message
    assert "nvidia-ctk cdi list > nvidia-ctk-cdi-list.txt" in findings["container.cdi"].message
    # Where containers are required, what could not be read blocks certification.
    assert all(f.required for f in judged(healthy, found, REQUIRED))


def test_a_container_that_sees_every_gpu_passes_and_one_short_fails(healthy: NodeFacts) -> None:
    uuids = tuple(str(g.uuid) for g in healthy.gpus)
    argv = ("docker", "run", "--rm", "--gpus", "all", "img", "nvidia-smi", "-L")
    seen_all = ContainerRun("docker", "img", argv, uuids)
    found = ContainerFacts("1.17.8", spec_of(healthy), (DOCKER,), seen_all)
    visible = by_check(judged(healthy, found))["container.gpus_visible"]
    assert visible.severity is Severity.PASS
    short = dataclasses.replace(found, run=dataclasses.replace(seen_all, uuids=uuids[:7]))
    visible = by_check(judged(healthy, short))["container.gpus_visible"]
    assert visible.severity is Severity.FAIL
    assert uuids[7] in visible.message
    assert visible.action is Action.FIX_SOFTWARE


def test_a_container_that_could_not_run_is_unknown_never_pass(healthy: NodeFacts) -> None:
    why = Unavailable(Reason.ERROR, "docker run: Unable to find image 'img:latest' locally")
    run = ContainerRun("docker", "img", ("docker", "run"), why)
    found = ContainerFacts("1.17.8", spec_of(healthy), (DOCKER,), run)
    visible = by_check(judged(healthy, found))["container.gpus_visible"]
    assert visible.severity is Severity.UNKNOWN
    assert "Unable to find image" in visible.message
