"""Drift of the interconnect and DCGM: NVLinks, link and PCIe error counters, recovery action.

The baseline is the healthy H100 scenario certified with what a schema-2 certificate
records besides: 18 NVLinks per GPU at 26.562 GB/s (``nvidia-smi nvlink -s`` on an H100
SXM prints it so), their CRC, replay and recovery counters, the PCIe replay count, the
recovery action and a DCGM level-3 run (DCGM 4 test names, and the failure and skip
messages of the recorded 4-GPU run in ``../shared/captures/dcgmi/``). Then one change
at a time, each giving exactly its drift; and a certificate written before schema 2
(``tests/fixtures/certificates/``, issued and signed by gpuready 0.1.0 at commit
ddd4f48) still verifies and judges, saying what it predates.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import parser

from tests.drift.test_drift import ISSUED, POLICY, certified_facts, quick_facts
from validator.certificate import (
    CERTIFICATE_SCHEMA_VERSION,
    Certificate,
    CertificateError,
    canonical_bytes,
    certificate_from_json,
    certificate_to_json,
    issue_certificate,
    sign,
    verify_certificate,
)
from validator.cli.main import main
from validator.drift import compare, drift_node, nhc_line
from validator.judge import Policy, Thresholds, judge_node, load_catalog
from validator.judge.actions import rule_for
from validator.judge.checks.nvlink import link_repair
from validator.judge.checks.pcie import REPLAY_REPAIR
from validator.model import (
    Action,
    DcgmDiag,
    DcgmOutcome,
    DcgmTestResult,
    DriftCheck,
    Finding,
    GpuFacts,
    NodeFacts,
    NvLinkErrorCounts,
    NvLinkState,
    Reason,
    Severity,
    Unavailable,
    Verdict,
    counters_of,
)
from validator.report.drift_text import render_drift_text
from validator.report.prometheus import render_prometheus
from validator.store import Store, pack

FIXTURE = (
    Path(__file__).parent.parent / "fixtures" / "certificates" / "schema1-h100-node-01-signed.json"
)
FIXTURE_KEY = b"schema-1-test-key"
LINKS = 18
SPEED = 26.562  # GB/s per direction, per link, as nvidia-smi nvlink -s prints an H100's
NEW_CHECKS = {
    DriftCheck.NVLINK.value,
    DriftCheck.NVLINK_ERRORS.value,
    DriftCheck.PCIE_REPLAY.value,
    DriftCheck.RECOVERY_ACTION.value,
    DriftCheck.DCGM.value,
}
# Real DCGM 4 messages (the 4-GPU run with pass, skip and fail).
SM_STRESS_FAIL = (
    "Max stress level of 1096.5 did not exceed desired stress level of 3000.0 for GPU 2"
)
MEMORY_SKIP = (
    'ECC memory on GPU 0 is not currently active. Please use "nvidia-smi -i 0 -e 1" '
    "to enable and reboot."
)


# ------------------------------------------------------------------ the baseline


def link_counts(link: int, **changes: int) -> NvLinkErrorCounts:
    # A few CRC errors at certification, as a long-running board has: growth is judged.
    base = {"crc_flit": 5 if link == 2 else 0, "crc_data": 0, "replay": 0, "recovery": 0}
    base.update(changes)
    return NvLinkErrorCounts(link=link, **base)


def wired(gpu: GpuFacts) -> GpuFacts:
    return dataclasses.replace(
        gpu,
        nvlinks=tuple(NvLinkState(link, True, SPEED) for link in range(LINKS)),
        nvlink_errors=tuple(link_counts(link) for link in range(LINKS)),
        pcie_replay_count=3,
        recovery_action="none",
    )


def dcgm_results(level_3: bool = True, **outcomes: Any) -> DcgmDiag:
    """A level-3 run: a deployment check for the node, four tests per GPU.

    ``outcomes`` maps ``<test>_<gpu>`` to a replacement DcgmTestResult (or None: absent).
    """
    results = [DcgmTestResult("persistence_mode", DcgmOutcome.PASS, "deployment")]
    tests: tuple[tuple[str, str], ...] = (
        ("memory", "hardware"),
        ("pcie", "integration"),
        ("sm_stress", "stress"),
    )
    if level_3:
        tests += (("targeted_power", "stress"),)
    for gpu in range(8):
        for test, category in tests:
            result = DcgmTestResult(test, DcgmOutcome.PASS, category, gpu)
            results.append(outcomes.get(f"{test}_{gpu}", result))
    kept = tuple(r for r in results if r is not None)
    return DcgmDiag(
        level=3 if level_3 else 2, source="dcgmi diag -r 3 -j", version="4.2.3", results=kept
    )


def interconnected(facts: NodeFacts) -> NodeFacts:
    """``facts`` wired; a burn-in's counters read before and after it as the GPUs' own."""
    gpus = tuple(wired(gpu) for gpu in facts.gpus)
    burn = facts.burn
    if burn is not None:
        counters = {gpu.index: counters_of(gpu) for gpu in gpus}
        burn = dataclasses.replace(
            burn,
            gpus=tuple(
                dataclasses.replace(
                    ran, counters_before=counters[ran.index], counters_after=counters[ran.index]
                )
                for ran in burn.gpus
            ),
        )
    return dataclasses.replace(facts, gpus=gpus, burn=burn, dcgm=dcgm_results())


@cache
def baseline() -> Certificate:
    """The certificate of the healthy node with its interconnect and DCGM facts."""
    result = judge_node(certified_facts(), POLICY)
    assert result.verdict is Verdict.CERTIFIED, result.summary
    # The facts certified are the judged ones plus the interconnect's: the certificate
    # records facts, whichever checks are registered to judge them.
    return issue_certificate(
        dataclasses.replace(result, facts=interconnected(result.facts)), now=ISSUED
    )


@cache
def now_facts() -> NodeFacts:
    """What a drift run collects: the same node, no burn-in, with DCGM run again."""
    return interconnected(quick_facts())


def with_gpu(facts: NodeFacts, index: int, **changes: Any) -> NodeFacts:
    gpus = tuple(
        dataclasses.replace(gpu, **changes) if gpu.index == index else gpu for gpu in facts.gpus
    )
    return dataclasses.replace(facts, gpus=gpus)


def with_link(index: int, link: int, **changes: Any) -> NodeFacts:
    gpu = now_facts().gpus[index]
    assert isinstance(gpu.nvlinks, tuple)
    links = tuple(dataclasses.replace(s, **changes) if s.link == link else s for s in gpu.nvlinks)
    return with_gpu(now_facts(), index, nvlinks=links)


def with_counts(index: int, link: int, **changes: int) -> NodeFacts:
    counts = tuple(link_counts(n, **(changes if n == link else {})) for n in range(LINKS))
    return with_gpu(now_facts(), index, nvlink_errors=counts)


def findings(
    facts: NodeFacts, cert: Certificate | None = None, policy: Policy = POLICY
) -> tuple[Finding, ...]:
    return compare(cert or baseline(), facts, policy)


def not_passed(
    facts: NodeFacts, cert: Certificate | None = None, policy: Policy = POLICY
) -> set[tuple[str, str, int | None]]:
    return {
        (f.severity.value, f.check, f.gpu_index)
        for f in findings(facts, cert, policy)
        if f.severity is not Severity.PASS
    }


def only(facts: NodeFacts, check: str, policy: Policy = POLICY) -> Finding:
    (finding,) = [
        f for f in findings(facts, policy=policy) if f.check == check and f.severity is not PASS
    ]
    return finding


PASS = Severity.PASS


# ------------------------------------------------------------------ the certificate


def test_the_certificate_records_the_interconnect_and_dcgm() -> None:
    cert = baseline()
    assert cert.schema_version == CERTIFICATE_SCHEMA_VERSION >= 2
    assert cert.holds_interconnect
    gpu = cert.gpus[4]
    assert gpu.nvlinks is not None
    assert len(gpu.nvlinks) == LINKS
    assert (gpu.nvlinks[7].link, gpu.nvlinks[7].active, gpu.nvlinks[7].speed_gb_s) == (
        7,
        True,
        SPEED,
    )
    assert gpu.nvlink_errors is not None
    assert (gpu.nvlink_errors[2].crc_flit, gpu.nvlink_errors[2].replay) == (5, 0)
    assert (gpu.pcie_replay_count, gpu.recovery_action) == (3, "none")
    assert cert.dcgm is not None
    assert (cert.dcgm.level, cert.dcgm.version, len(cert.dcgm.results)) == (3, "4.2.3", 33)
    assert cert.dcgm.results[0] == type(cert.dcgm.results[0])("persistence_mode", "pass", None)


def test_a_schema_2_certificate_round_trips_and_verifies() -> None:
    for cert in (baseline(), sign(baseline(), b"k")):
        text = certificate_to_json(cert)
        back = certificate_from_json(text)
        assert back == cert
        assert certificate_to_json(back) == text
        verify_certificate(back, b"k" if cert.signature else None)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('"pcie_replay_count": 3', '"pcie_replay_count": 0'),
        ('"recovery_action": "none"', '"recovery_action": "gpu_reset"'),
        ('"crc_flit": 5', '"crc_flit": 0'),
        ('"speed_gb_s": 26.562', '"speed_gb_s": 53.125'),
        ('"outcome": "fail"', '"outcome": "pass"'),
    ],
)
def test_editing_the_new_fields_fails_verification(old: str, new: str) -> None:
    cert = baseline()
    if old == '"outcome": "fail"':
        # One GPU's sm_stress failed at certification: flipping it to pass is an edit.
        failed = dcgm_results(sm_stress_1=DcgmTestResult("sm_stress", DcgmOutcome.FAIL, "", 1))
        result = judge_node(certified_facts(), POLICY)
        facts = dataclasses.replace(interconnected(result.facts), dcgm=failed)
        cert = issue_certificate(dataclasses.replace(result, facts=facts), now=ISSUED)
    text = certificate_to_json(cert)
    assert old in text
    edited = certificate_from_json(text.replace(old, new, 1))
    with pytest.raises(CertificateError, match="edited after issue"):
        verify_certificate(edited, None)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["dcgm"]["results"][0].update(outcome="passed"),
            "certificate: 'dcgm.results[0].outcome' must be one of pass, fail, warn, skip, "
            "not_run, got 'passed' (str)",
        ),
        (
            lambda d: d["gpus"][1]["nvlinks"][3].update(active="yes"),
            "certificate: 'gpus[1].nvlinks[3].active' must be true or false, got 'yes' (str)",
        ),
        (
            lambda d: d["gpus"][0].update(pcie_replay_count=-1),
            "certificate: 'gpus[0].pcie_replay_count' must be a whole number >= 0, got -1 (int)",
        ),
        (
            lambda d: d["gpus"][0]["nvlink_errors"][0].pop("replay"),
            "certificate: lacks the field 'gpus[0].nvlink_errors[0].replay'",
        ),
    ],
)
def test_bad_new_fields_are_one_line(change: Callable[[Any], None], message: str) -> None:
    data = json.loads(certificate_to_json(baseline()))
    change(data)
    with pytest.raises(CertificateError) as caught:
        certificate_from_json(json.dumps(data))
    assert str(caught.value) == message


# ------------------------------------------------------------------ nothing changed


def test_unchanged_facts_give_no_drift_and_every_new_check_passes() -> None:
    found = findings(now_facts())
    assert not_passed(now_facts()) == set()
    passed = {f.check for f in found if f.severity is PASS}
    assert passed >= NEW_CHECKS
    per_gpu = {(f.check, f.gpu_index) for f in found if f.check in NEW_CHECKS}
    assert {(DriftCheck.NVLINK.value, i) for i in range(8)} <= per_gpu
    assert (DriftCheck.DCGM.value, None) in per_gpu  # the node's deployment check
    result = drift_node(now_facts(), baseline(), POLICY)
    assert result.verdict is Verdict.CERTIFIED, result.summary


def test_a_drift_run_without_dcgm_compares_no_dcgm_test() -> None:
    # As a drift run without a burn-in has no speed to compare: nothing, not UNKNOWN.
    facts = dataclasses.replace(now_facts(), dcgm=None)
    assert DriftCheck.DCGM.value not in {f.check for f in findings(facts)}
    assert drift_node(facts, baseline(), POLICY).verdict is Verdict.CERTIFIED


# ------------------------------------------------------------------ NVLinks


def test_a_link_down_is_drift_naming_the_gpu_and_the_link() -> None:
    facts = with_link(3, 5, active=False)
    assert not_passed(facts) == {("FAIL", "drift.nvlink", 3)}
    finding = only(facts, "drift.nvlink")
    assert finding.message == "GPU 3: NVLink 5 down since certified (18 were active)"
    assert (finding.observed, finding.expected) == (
        "NVLink 5 down",
        "18 NVLinks active as certified",
    )
    # An H100 SXM's links run through the baseboard: no cable to reseat.
    assert finding.action is Action.DRAIN_RMA
    assert "SXM baseboard" in finding.action_source
    result = drift_node(facts, baseline(), POLICY)
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert (
        result.summary == "drift since the certificate of 2026-01-01T12:00:00+00:00: nvlink (GPU 3)"
    )
    (kept,) = [f for f in result.findings if f.check == "drift.nvlink" and f.gpu_index == 3]
    assert kept.action is Action.DRAIN_RMA  # the drift's own action survives assign_actions


def test_a_missing_or_slower_link_is_drift() -> None:
    gpu = now_facts().gpus[6]
    assert isinstance(gpu.nvlinks, tuple)
    missing = with_gpu(now_facts(), 6, nvlinks=gpu.nvlinks[:-1])
    assert only(missing, "drift.nvlink").message == (
        "GPU 6: NVLink 17 missing since certified (18 were active)"
    )
    slower = with_link(1, 0, speed_gb_s=13.281)
    assert only(slower, "drift.nvlink").message == (
        "GPU 1: NVLink 0 at 13.281 GB/s (certified 26.562 GB/s) since certified (18 were active)"
    )


def test_a_speed_read_back_rounded_is_not_drift() -> None:
    assert not_passed(with_link(1, 0, speed_gb_s=26.56)) == set()
    # Faster than certified, or a link up now that was down then: not drift either.
    assert not_passed(with_link(1, 0, speed_gb_s=53.125)) == set()


def test_a_link_speed_unreadable_now_is_said_and_does_not_block() -> None:
    facts = with_link(2, 4, speed_gb_s=Unavailable(Reason.NOT_SUPPORTED, "no nvlink -s"))
    assert not_passed(facts) == {("UNKNOWN", "drift.nvlink", 2)}
    finding = only(facts, "drift.nvlink")
    assert not finding.required
    assert finding.message == (
        "GPU 2: 18 NVLinks up as certified; their speed could not be read now: "
        "NVLink 4 speed: not supported: no nvlink -s"
    )
    assert drift_node(facts, baseline(), POLICY).verdict is Verdict.CERTIFIED


def test_link_state_unreadable_now_is_unknown_and_blocks() -> None:
    facts = with_gpu(now_facts(), 0, nvlinks=Unavailable(Reason.ERROR, "NVML error 999"))
    assert not_passed(facts) == {("UNKNOWN", "drift.nvlink", 0)}
    assert drift_node(facts, baseline(), POLICY).verdict is Verdict.UNKNOWN


def test_a_pcie_cards_link_is_a_bridge_to_reseat() -> None:
    cert = dataclasses.replace(baseline(), sku="h100-nvl")
    (finding,) = [
        f for f in findings(with_link(3, 5, active=False), cert) if f.severity is Severity.FAIL
    ]
    assert finding.action is Action.RESEAT_CABLE_RISER
    assert "bridge" in finding.action_source


@pytest.mark.parametrize("sku", ["gb200", "h100-sxm", "h100-nvl", "no-such-sku"])
def test_drift_gives_a_link_the_action_certify_gives_it(sku: str) -> None:
    # One answer for one fault: a GB200 link down is a reseat in certify and in drift.
    cert = dataclasses.replace(baseline(), sku=sku)
    (finding,) = [
        f for f in findings(with_link(3, 5, active=False), cert) if f.severity is Severity.FAIL
    ]
    known = load_catalog().get(sku) if sku != "no-such-sku" else None
    assert (finding.action, finding.action_source) == link_repair(known)


def test_drift_gives_pcie_replays_the_action_certify_gives_them() -> None:
    finding = only(with_gpu(now_facts(), 2, pcie_replay_count=3 + 81), "drift.pcie_replay")
    assert (finding.action, finding.action_source) == REPLAY_REPAIR


# ------------------------------------------------------------------ NVLink error counters


def test_crc_growth_beyond_the_limit_is_drift_naming_gpu_and_link() -> None:
    facts = with_counts(4, 2, crc_flit=5 + 101)
    assert not_passed(facts) == {("FAIL", "drift.nvlink_errors", 4)}
    finding = only(facts, "drift.nvlink_errors")
    assert finding.message == (
        "GPU 4: NVLink error counters grew since certified: "
        "NVLink 2 CRC flit +101 (5 -> 106, max 100)"
    )
    assert finding.observed == "NVLink 2 CRC flit 106"
    assert finding.action is Action.DRAIN_RMA
    summary = drift_node(facts, baseline(), POLICY).summary
    assert summary.endswith(": nvlink_errors (GPU 4)")


def test_crc_growth_within_the_limit_is_not_drift() -> None:
    assert not_passed(with_counts(4, 2, crc_flit=5 + 100, crc_data=100)) == set()


def test_any_replay_or_recovery_growth_is_drift_by_default() -> None:
    facts = with_counts(7, 11, replay=1, recovery=2)
    assert only(facts, "drift.nvlink_errors").message == (
        "GPU 7: NVLink error counters grew since certified: NVLink 11 replay +1 (0 -> 1, max 0); "
        "NVLink 11 recovery +2 (0 -> 2, max 0)"
    )
    lenient = Policy(
        thresholds=Thresholds(nvlink_replay_growth_max=5, nvlink_recovery_growth_max=5)
    )
    assert not_passed(facts, policy=lenient) == set()


def test_counters_reset_since_certified_are_noted_not_drift() -> None:
    # 5 certified, 2 now: the driver reloaded (a reboot); what came before is lost.
    facts = with_counts(4, 2, crc_flit=2)
    assert not_passed(facts) == {("UNKNOWN", "drift.nvlink_errors", 4)}
    finding = only(facts, "drift.nvlink_errors")
    assert not finding.required
    assert finding.message == (
        "GPU 4: NVLink error counters were reset since certified (a reboot or driver reload: "
        "NVLink 2 CRC flit 5 -> 2), so their growth cannot be judged; what they counted since "
        "is within the limits"
    )
    assert drift_node(facts, baseline(), POLICY).verdict is Verdict.CERTIFIED


def test_counters_reset_and_beyond_the_limit_since_is_drift() -> None:
    cert = dataclasses.replace(
        baseline(),
        gpus=tuple(
            dataclasses.replace(
                gpu,
                nvlink_errors=tuple(
                    dataclasses.replace(c, crc_data=500) if c.link == 9 else c
                    for c in gpu.nvlink_errors or ()
                ),
            )
            if gpu.index == 5
            else gpu
            for gpu in baseline().gpus
        ),
    )
    facts = with_counts(5, 9, crc_data=150)  # below 500: reset; 150 since, above 100
    (finding,) = [f for f in findings(facts, cert) if f.severity is not PASS]
    assert (finding.severity, finding.check, finding.gpu_index) == (
        Severity.FAIL,
        "drift.nvlink_errors",
        5,
    )
    assert finding.message.endswith("NVLink 9 CRC data 150 since the counters were reset (max 100)")


def test_counters_unreadable_now_are_unknown() -> None:
    facts = with_gpu(now_facts(), 1, nvlink_errors=Unavailable(Reason.NOT_SUPPORTED, "vGPU"))
    assert not_passed(facts) == {("UNKNOWN", "drift.nvlink_errors", 1)}
    assert drift_node(facts, baseline(), POLICY).verdict is Verdict.UNKNOWN


# ------------------------------------------------------------------ PCIe replays


def test_pcie_replays_beyond_the_limit_are_drift() -> None:
    facts = with_gpu(now_facts(), 2, pcie_replay_count=3 + 81)
    assert not_passed(facts) == {("FAIL", "drift.pcie_replay", 2)}
    finding = only(facts, "drift.pcie_replay")
    assert (
        finding.message
        == "GPU 2: PCIe replays grew since certified: PCIe replays +81 (3 -> 84, max 80)"
    )
    assert finding.action is Action.RESEAT_CABLE_RISER
    assert not_passed(with_gpu(now_facts(), 2, pcie_replay_count=3 + 80)) == set()
    lenient = Policy(thresholds=Thresholds(pcie_replay_growth_max=200))
    assert not_passed(facts, policy=lenient) == set()


def test_pcie_replays_reset_are_noted_not_drift() -> None:
    facts = with_gpu(now_facts(), 2, pcie_replay_count=0)
    assert not_passed(facts) == {("UNKNOWN", "drift.pcie_replay", 2)}
    assert not only(facts, "drift.pcie_replay").required


# ------------------------------------------------------------------ recovery action


@pytest.mark.parametrize(
    ("now", "action", "words"),
    [
        ("gpu_reset", Action.RESET_GPU, "stop every process on it and reset it"),
        ("node_reboot", Action.REBOOT, "reboot the node"),
        ("drain_p2p", Action.RESET_GPU, "stop the processes doing peer-to-peer traffic"),
        ("drain_and_reset", Action.RESET_GPU, "stop the processes doing peer-to-peer traffic"),
    ],
)
def test_a_recovery_action_now_is_drift_spelled_out(now: str, action: Action, words: str) -> None:
    facts = with_gpu(now_facts(), 6, recovery_action=now)
    assert not_passed(facts) == {("FAIL", "drift.recovery_action", 6)}
    finding = only(facts, "drift.recovery_action")
    assert finding.message.startswith(f"GPU 6: the driver asks for recovery action {now}; {words}")
    assert finding.message.endswith("(certified with none)")
    assert (finding.action, finding.action_source) == (action, f"NVML GPU recovery action: {now}")


def test_recovery_action_unreadable_now_is_unknown() -> None:
    facts = with_gpu(now_facts(), 6, recovery_action=Unavailable(Reason.ERROR, "NVML error 3"))
    assert not_passed(facts) == {("UNKNOWN", "drift.recovery_action", 6)}


# ------------------------------------------------------------------ DCGM


def test_a_dcgm_test_passed_then_failed_now_is_drift_with_dcgms_words() -> None:
    failed = DcgmTestResult(
        "sm_stress", DcgmOutcome.FAIL, "stress", 2, message=SM_STRESS_FAIL, error_id=50
    )
    facts = dataclasses.replace(now_facts(), dcgm=dcgm_results(sm_stress_2=failed))
    assert not_passed(facts) == {("FAIL", "drift.dcgm", 2)}
    finding = only(facts, "drift.dcgm")
    assert finding.message == (
        f"GPU 2: DCGM sm_stress fail now (passed when certified): {SM_STRESS_FAIL}"
    )
    assert (finding.observed, finding.expected) == ("sm_stress fail", "pass, as certified")
    # The judge's action for the same test: drift and certify say the same thing.
    assert (finding.action, finding.action_source) == (
        Action.CHECK_COOLING_POWER,
        "gpuready: DCGM test sm_stress",
    )
    result = drift_node(facts, baseline(), POLICY)
    assert result.summary.endswith(": dcgm (GPU 2)")


def test_a_dcgm_test_skipped_or_warned_now_is_drift() -> None:
    skipped = DcgmTestResult("memory", DcgmOutcome.SKIP, "hardware", 0, message=MEMORY_SKIP)
    warned = DcgmTestResult("pcie", DcgmOutcome.WARN, "integration", 5, message="replays")
    facts = dataclasses.replace(now_facts(), dcgm=dcgm_results(memory_0=skipped, pcie_5=warned))
    assert not_passed(facts) == {("FAIL", "drift.dcgm", 0), ("FAIL", "drift.dcgm", 5)}
    by_gpu = {f.gpu_index: f for f in findings(facts) if f.severity is Severity.FAIL}
    assert (
        by_gpu[0].message == f"GPU 0: DCGM memory skip now (passed when certified): {MEMORY_SKIP}"
    )
    assert by_gpu[0].action is Action.RERUN  # DCGM declined to run it: fix that, run again
    assert by_gpu[5].action is rule_for("dcgm.pcie").fail


def test_a_dcgm_test_not_run_now_is_unknown() -> None:
    not_run = DcgmTestResult("targeted_power", DcgmOutcome.NOT_RUN, "stress", 4)
    facts = dataclasses.replace(now_facts(), dcgm=dcgm_results(targeted_power_4=not_run))
    assert not_passed(facts) == {("UNKNOWN", "drift.dcgm", 4)}
    assert drift_node(facts, baseline(), POLICY).verdict is Verdict.UNKNOWN


def test_a_lower_dcgm_level_now_leaves_its_tests_uncompared_without_blocking() -> None:
    facts = dataclasses.replace(now_facts(), dcgm=dcgm_results(level_3=False))
    assert not_passed(facts) == {("UNKNOWN", "drift.dcgm", gpu) for gpu in range(8)}
    finding = next(f for f in findings(facts) if f.gpu_index == 0 and f.check == "drift.dcgm")
    assert finding.message == (
        "GPU 0: DCGM targeted_power passed when certified (level 3) and are not in this run "
        "(level 2): not compared"
    )
    assert not finding.required
    assert drift_node(facts, baseline(), POLICY).verdict is Verdict.CERTIFIED


@pytest.mark.parametrize(("level", "blocks"), [(3, True), (0, False)])
def test_dcgm_giving_no_results_now_is_unknown(level: int, blocks: bool) -> None:
    gone = DcgmDiag(3, "dcgmi diag -r 3 -j", results=Unavailable(Reason.NOT_SUPPORTED, "no dcgmi"))
    facts = dataclasses.replace(now_facts(), dcgm=gone)
    policy = Policy(dcgm_level=level)
    assert not_passed(facts, policy=policy) == {("UNKNOWN", "drift.dcgm", None)}
    (finding,) = [f for f in findings(facts, policy=policy) if f.check == "drift.dcgm"]
    assert finding.message == (
        "DCGM gave no results now: not supported: no dcgmi; the 33 results that passed when "
        "the node was certified are not compared"
    )
    assert finding.required is blocks


def test_a_node_result_then_is_compared_with_each_gpus_now() -> None:
    # DCGM 3 gives a deployment check for the node; a later version gives it per GPU.
    per_gpu = tuple(
        DcgmTestResult(
            "persistence_mode", DcgmOutcome.FAIL if i == 3 else DcgmOutcome.PASS, "deployment", i
        )
        for i in range(8)
    )
    diag = dcgm_results()
    assert isinstance(diag.results, tuple)
    results = per_gpu + diag.results[1:]
    facts = dataclasses.replace(now_facts(), dcgm=dataclasses.replace(diag, results=results))
    finding = only(facts, "drift.dcgm")
    assert (finding.gpu_index, finding.observed) == (None, "persistence_mode fail")
    assert finding.action is rule_for("dcgm.software").fail  # a deployment check: software


def test_dcgm_now_without_dcgm_at_certification_has_no_baseline() -> None:
    cert = dataclasses.replace(baseline(), dcgm=None)
    assert not_passed(now_facts(), cert) == {("UNKNOWN", "drift.dcgm", None)}
    assert drift_node(now_facts(), cert, POLICY).verdict is Verdict.CERTIFIED


# ------------------------------------------------------------------ a certificate from before


def old_text() -> str:
    return FIXTURE.read_text()


def test_an_old_certificate_still_verifies_with_its_seal_unchanged() -> None:
    text = old_text()
    old = certificate_from_json(text)
    assert old.schema_version == 1
    assert not old.holds_interconnect
    assert old.gpus[0].nvlinks is None
    assert old.dcgm is None
    verify_certificate(old, FIXTURE_KEY)
    sealed = json.loads(text)
    assert old.digest == sealed["digest"] == hashlib.sha256(canonical_bytes(old)).hexdigest()
    # Written back exactly as issued: no field it never had.
    # Written back as issued: no field it never had, every number in its own form (the
    # file's layout has changed since, not what it says).
    assert _as_written(certificate_to_json(old)) == _as_written(text)


def test_an_old_certificate_given_a_new_field_fails_verification() -> None:
    data = json.loads(old_text())
    data["gpus"][0]["pcie_replay_count"] = 0
    with pytest.raises(CertificateError, match="edited after issue"):
        verify_certificate(certificate_from_json(json.dumps(data)), FIXTURE_KEY)
    # A null there says nothing the certificate did not: the seal still holds.
    data["gpus"][0]["pcie_replay_count"] = None
    verify_certificate(certificate_from_json(json.dumps(data)), FIXTURE_KEY)


def test_an_old_certificate_judges_and_says_what_it_predates() -> None:
    old = certificate_from_json(old_text())
    result = drift_node(now_facts(), old, POLICY)
    assert result.verdict is Verdict.CERTIFIED, result.summary
    notes = {f.check: f for f in result.findings if f.severity is Severity.UNKNOWN}
    assert set(notes) == NEW_CHECKS - {DriftCheck.RECOVERY_ACTION.value}
    assert all(not f.required and f.gpu_index is None for f in notes.values())
    assert notes["drift.nvlink"].message == (
        "The certificate of h100-node-01 issued 2026-01-01T12:00:00+00:00 predates drift's "
        "NVLink state check (certificate schema 1): not compared; certify the node again to "
        "record it"
    )
    # The recovery action needs no baseline: it is judged against an old certificate too.
    reset = drift_node(with_gpu(now_facts(), 2, recovery_action="gpu_reset"), old, POLICY)
    assert reset.verdict is Verdict.NOT_CERTIFIED
    assert reset.summary.endswith(": recovery_action (GPU 2)")


def test_an_old_certificate_notes_only_what_there_is_to_compare_now() -> None:
    # NVLink state read now, but no counters, replays, recovery action or DCGM.
    unread = Unavailable(Reason.NOT_SUPPORTED, "an older driver")
    gpus = tuple(
        dataclasses.replace(
            gpu, nvlink_errors=unread, pcie_replay_count=unread, recovery_action=unread
        )
        for gpu in now_facts().gpus
    )
    facts = dataclasses.replace(now_facts(), gpus=gpus, dcgm=None)
    old = certificate_from_json(old_text())
    found = [f for f in compare(old, facts, POLICY) if f.check in NEW_CHECKS]
    assert [(f.check, f.severity, f.required) for f in found] == [
        ("drift.nvlink", Severity.UNKNOWN, False)
    ]


def test_an_old_certificate_in_the_store_is_a_baseline_for_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A history database written by the older gpuready: its row holds the schema-1 text.
    db = tmp_path / "history.db"
    result = judge_node(certified_facts(), POLICY)
    with Store.open(db) as store:
        run = store.start_run("certify", 1, result.policy_digest)
        store.record_result(run, result, issue_certificate(result, now=ISSUED))
        store.finish_run(run)
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE certificates SET json_packed = ?", (pack(old_text()),))
    raw.close()
    key = tmp_path / "key"
    key.write_bytes(FIXTURE_KEY + b"\n")
    args = ["drift", "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--sign-key", str(key)]
    code = main(args)
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out.startswith("h100-node-01  NO DRIFT  no drift since the certificate of ")


# ------------------------------------------------------------------ the outputs


def drifted_link() -> NodeFacts:
    return with_link(3, 5, active=False)


def test_prometheus_counts_the_new_checks() -> None:
    result = drift_node(drifted_link(), baseline(), POLICY)
    text = render_prometheus([result], now=ISSUED)
    counts = {
        s.labels["check"]: s.value
        for family in parser.text_string_to_metric_families(text)
        if family.name == "gpuready_drift_findings"
        for s in family.samples
    }
    assert set(counts) >= NEW_CHECKS
    assert counts["drift.nvlink"] == 1.0
    assert {counts[check] for check in NEW_CHECKS - {"drift.nvlink"}} == {0.0}


def test_terminal_and_nhc_name_the_check_and_what_to_do() -> None:
    result = drift_node(with_gpu(now_facts(), 6, recovery_action="gpu_reset"), baseline(), POLICY)
    (line,) = [line for line in render_drift_text([result]).splitlines() if "FAIL" in line]
    assert line.split()[:3] == ["FAIL", "drift.recovery_action", "gpu6"]
    assert line.endswith("(certified with none)  -> reset the GPU")
    code, nhc = nhc_line([result])
    assert code == 1
    assert nhc.endswith(": recovery_action (GPU 6)")
    link = drift_node(drifted_link(), baseline(), POLICY)
    assert any(line.endswith("-> drain and RMA") for line in render_drift_text([link]).splitlines())


# ------------------------------------------------------------------ DCGM: faults with no baseline


def dcgm_cert(*results: tuple[str, str, int | None], level: int | None = 2) -> Certificate:
    """The baseline with the given DCGM results (test, outcome, GPU) in its certificate."""
    from validator.certificate import CertifiedDcgm, CertifiedDcgmTest

    held = tuple(CertifiedDcgmTest(test, outcome, gpu) for test, outcome, gpu in results)
    return dataclasses.replace(baseline(), dcgm=CertifiedDcgm(level, "4.2.3", held))


def dcgm_now(*results: DcgmTestResult) -> NodeFacts:
    return dataclasses.replace(now_facts(), dcgm=DcgmDiag(3, "dcgmi diag -r 3 -j", results=results))


TARGETED_POWER_FAIL = DcgmTestResult(
    "targeted_power", DcgmOutcome.FAIL, "stress", 0, "power not reached"
)


def test_a_failure_now_of_a_test_the_certificate_skipped_or_lacks_is_drift() -> None:
    from validator.judge.checks.dcgm import action_for_result

    cert = dcgm_cert(("memory", "pass", 0), ("memory", "skip", 1))
    memory_fail = DcgmTestResult("memory", DcgmOutcome.FAIL, "hardware", 1, "4 faulty elements")
    memory_pass = DcgmTestResult("memory", DcgmOutcome.PASS, "hardware", 0)
    facts = dcgm_now(memory_pass, memory_fail, TARGETED_POWER_FAIL)
    assert not_passed(facts, cert) == {("FAIL", "drift.dcgm", 0), ("FAIL", "drift.dcgm", 1)}
    by_gpu = {f.gpu_index: f for f in findings(facts, cert) if f.severity is Severity.FAIL}
    assert by_gpu[1].message == (
        "GPU 1: DCGM memory fail now (skip when certified): 4 faulty elements"
    )
    assert (by_gpu[1].action, by_gpu[1].action_source) == action_for_result(memory_fail)
    assert by_gpu[1].action is Action.DRAIN_RMA
    assert by_gpu[0].message == (
        "GPU 0: DCGM targeted_power fail now (not in the certificate when certified): "
        "power not reached"
    )
    assert by_gpu[0].action is Action.CHECK_COOLING_POWER
    assert drift_node(facts, cert, POLICY).verdict is not Verdict.CERTIFIED


def test_a_warning_now_is_drift_unless_the_certificate_held_the_same_warning() -> None:
    warned = DcgmTestResult("pcie", DcgmOutcome.WARN, "integration", 2, "replays")
    assert not_passed(dcgm_now(warned), dcgm_cert(("pcie", "warn", 2))) == set()
    assert not_passed(dcgm_now(warned), dcgm_cert(("pcie", "skip", 2))) == {
        ("FAIL", "drift.dcgm", 2)
    }


def test_a_failure_now_without_dcgm_in_the_certificate_is_still_drift() -> None:
    cert = dataclasses.replace(baseline(), dcgm=None)
    facts = dcgm_now(TARGETED_POWER_FAIL)
    assert not_passed(facts, cert) == {("UNKNOWN", "drift.dcgm", None), ("FAIL", "drift.dcgm", 0)}
    failed = only_in(facts, cert, Severity.FAIL)
    assert failed.message == (
        "GPU 0: DCGM targeted_power fail now (DCGM not run when certified): power not reached"
    )


def test_a_node_pass_then_failing_on_two_gpus_now_names_both() -> None:
    cert = dcgm_cert(("persistence_mode", "pass", None))
    facts = dcgm_now(
        *(DcgmTestResult("persistence_mode", DcgmOutcome.FAIL, "deployment", gpu) for gpu in (2, 3))
    )
    assert not_passed(facts, cert) == {("FAIL", "drift.dcgm", None), ("FAIL", "drift.dcgm", 3)}


@pytest.mark.parametrize(
    "result",
    [
        DcgmTestResult("sm_stress", DcgmOutcome.FAIL, "stress", 1, SM_STRESS_FAIL, 50),
        DcgmTestResult(
            "memory",
            DcgmOutcome.FAIL,
            "hardware",
            1,
            "GPU 1 has uncorrectable memory errors and row remappings are pending",
        ),
        DcgmTestResult("memory", DcgmOutcome.FAIL, "hardware", 1, "pending", 85),
        DcgmTestResult("memory", DcgmOutcome.FAIL, "hardware", 1, "Thermal violations found"),
        DcgmTestResult("context_create", DcgmOutcome.FAIL, "", 1, "context failed"),
    ],
)
def test_drift_and_certify_give_the_same_action_for_a_dcgm_fault(result: DcgmTestResult) -> None:
    from validator.judge.checks import dcgm as dcgm_check

    certify_policy = dataclasses.replace(POLICY, dcgm_level=3)
    facts_now = dcgm_now(result)
    (certified,) = [
        f for f in dcgm_check.check(facts_now, certify_policy, None) if f.gpu_index == 1
    ]
    cert = dcgm_cert((result.test, "pass", 1))
    drifted = only_in(facts_now, cert, Severity.FAIL)
    assert (drifted.action, drifted.action_source) == (certified.action, certified.action_source)


def only_in(facts: NodeFacts, cert: Certificate, severity: Severity) -> Finding:
    (finding,) = [
        f for f in findings(facts, cert) if f.check == "drift.dcgm" and f.severity is severity
    ]
    return finding


def _as_written(text: str) -> str:
    """A certificate file's values, whatever its layout: 700 and 700.0 stay apart."""
    return json.dumps(json.loads(text), indent=2, sort_keys=True)
