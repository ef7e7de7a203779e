"""Compare a node's facts of now with its latest certificate, check by check.

Each check gives FAIL (drift), PASS (as certified) or UNKNOWN (could not be
measured now: never taken for "no drift"); WARN for a version that is new since.

Decisions:

* A value the certificate lacks (``None``: not measured at certification) has no
  baseline. Absent now as well: nothing to compare, no finding. Present now: a
  WARN for versions (something new appeared) and an UNKNOWN that does not block
  for numbers (nothing to measure growth against).
* A version measured at certification and ``not supported`` now (the tool is
  gone: no nvcc, no cuDNN header) is drift; any other reason it is missing now is
  UNKNOWN. A kernel module and user-space driver that disagree now (NVML's
  version mismatch) is drift: they agreed when the node was certified.
* When the driver gave no GPU facts at all, the GPUs cannot be compared: one
  UNKNOWN says so, rather than every certified GPU reported as removed.
* A hardware Xid (policy ``fail_xids``) with a time on or after the certificate's
  issue, or with no wall-clock time at all (dmesg without -T), is new: the node was
  certified with no hardware Xid in its window, so an undated one cannot be older.
  Xids are grouped as the judge groups them (:func:`group_xids`).
* DCGM: every test that passed at certification (per GPU, or for the node) and now
  fails, warns or is skipped is drift, with DCGM's own words and the judge's action
  for that test (:func:`validator.judge.checks.dcgm.action_for_result`, the one
  decision certify uses). Every failure or warning now that no certified pass covers
  (the certificate skipped the test, does not hold it, ran a lower level, or holds no
  DCGM run at all) is drift too: a fault now is never passed over for want of a
  baseline; only a warning the certificate held as the same warning is as certified.
  DCGM not run this time (``facts.dcgm`` None) is nothing to compare,
  as a drift run without a burn-in; a test DCGM listed but did not run is UNKNOWN; one
  absent from this run (a lower level) is an UNKNOWN that does not block; DCGM giving
  no results at all is UNKNOWN, required when the policy asks for DCGM.
* A certificate older than the interconnect and DCGM checks (schema 1) is no baseline
  for them: one note per check, UNKNOWN that does not block, where there is something
  to compare now (:func:`validator.drift.gpus.predates`).
* The measured bandwidths (``drift.interconnect``, drift run with ``--interconnect``):
  each figure the certificate holds against the same figure now
  (:mod:`validator.drift.bandwidth_drift`); a certificate older than them (schema 2 or 1)
  is noted once, not blocking.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from validator.certificate import Certificate, CertifiedDcgm, CertifiedDcgmTest
from validator.drift.bandwidth_drift import bandwidth_findings
from validator.drift.gpus import (
    Pair,
    burn_findings,
    compare_gpu,
    gpu_set,
    interconnect_findings,
    predates,
)
from validator.error_tree import PolicyError
from validator.judge.catalog import Sku, load_catalog
from validator.judge.checks.dcgm import action_for_result
from validator.judge.checks.errors import group_xids, parse_time, xid_finding, xid_meaning
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    GpuRef,
    driver_silent,
    node_finding,
    uuid_of,
    why_not,
    with_action,
)
from validator.judge.figure_ceilings import screen
from validator.judge.policy import Policy
from validator.judge.verdict import sort_findings
from validator.model import (
    Action,
    DcgmDiag,
    DcgmOutcome,
    DcgmTestResult,
    DriftCheck,
    Finding,
    Measured,
    NodeFacts,
    NvmlStatus,
    Reason,
    Unavailable,
    XidEvent,
)

# ------------------------------------------------------------------ versions


def _version(
    check: str, label: str, was: str | None, now: Measured[str], since: str
) -> Finding | None:
    if was is None:
        if isinstance(now, Unavailable):
            return None
        text = f"{label} {now} is present but was not found when the node was certified"
        return node_finding(
            check, WARN, text, observed=now, expected="not in the certificate", required=False
        )
    if isinstance(now, Unavailable) and now.reason is Reason.NOT_SUPPORTED:  # the tool is gone
        severity, observed = FAIL, f"not found: {why_not(now)}"
        text = f"{label} {was} was certified; now it is not found: {why_not(now)}"
    elif isinstance(now, Unavailable):
        severity, observed = UNKNOWN, why_not(now)
        text = f"{label} could not be read now: {why_not(now)}; certified was {was}"
    elif now != was:
        severity, observed = FAIL, now
        text = f"{label} changed from {was} to {now} since the certificate {since}"
    else:
        severity, observed, text = PASS, now, f"{label} {now} as certified"
    return node_finding(check, severity, text, observed=observed, expected=was)


def _mismatch(module: Finding | None, facts: NodeFacts) -> Finding | None:
    """The kernel module's finding; a FAIL when it and the user-space driver disagree now."""
    if facts.nvml_status is not NvmlStatus.DRIVER_MISMATCH:
        return module
    if module is not None and module.severity is FAIL:
        return module  # the module itself changed: that already says it
    loaded = facts.kernel_module_version
    return node_finding(
        DriftCheck.KERNEL_MODULE,
        FAIL,
        f"The loaded NVIDIA kernel module ({loaded}) and the user-space driver "
        f"({facts.driver_version}) differ now (Driver/library version mismatch): "
        "reboot or reload the nvidia kernel modules",
        observed=f"kernel module {loaded}, user space {facts.driver_version}",
        expected=module.expected if module is not None else "the same version",
    )


def _versions(cert: Certificate, facts: NodeFacts) -> list[Finding]:
    since = f"of {cert.issued_at}"
    found = [
        _version(DriftCheck.DRIVER, "Driver", cert.driver_version, facts.driver_version, since),
        _version(
            DriftCheck.CUDA,
            "CUDA driver version",
            cert.cuda_driver_version,
            facts.cuda_driver_version,
            since,
        ),
        _mismatch(
            _version(
                DriftCheck.KERNEL_MODULE,
                "NVIDIA kernel module",
                cert.kernel_module_version,
                facts.kernel_module_version,
                since,
            ),
            facts,
        ),
        _version(DriftCheck.NVCC, "nvcc", cert.nvcc_version, facts.tools.nvcc_version, since),
        _version(DriftCheck.CUDNN, "cuDNN", cert.cudnn_version, facts.tools.cudnn_version, since),
    ]
    return [finding for finding in found if finding is not None]


# ------------------------------------------------------------------ Xids


def _is_new(event: XidEvent, issued: datetime.datetime | None) -> bool:
    if issued is None or event.timestamp is None:
        return True  # see the module doc: an undated hardware Xid cannot predate the certificate
    moment = parse_time(event.timestamp)
    return moment is None or moment >= issued


def _xids(cert: Certificate, facts: NodeFacts, policy: Policy) -> list[Finding]:
    check = DriftCheck.XID
    expected = "no new hardware Xid"
    events = facts.kernel_log.events
    if isinstance(events, Unavailable):
        return [
            node_finding(
                check,
                UNKNOWN,
                f"The kernel log could not be read for Xids: {why_not(events)}",
                observed=why_not(events),
                expected=expected,
            )
        ]
    issued = parse_time(cert.issued_at)
    hardware = [
        event
        for event in events
        if not event.nvswitch and event.xid in policy.fail_xids and _is_new(event, issued)
    ]
    if not hardware:
        text = f"No hardware Xid since the certificate of {cert.issued_at}"
        return [node_finding(check, PASS, text, observed="none", expected=expected)]
    return [
        xid_finding(
            check,
            FAIL,
            group,
            f"Xid {group.xid} ({xid_meaning(group.xid)}) on {group.where}, {group.times} "
            f"since the certificate of {cert.issued_at}",
            expected=expected,
        )
        for group in group_xids(hardware, facts.gpus)
    ]


# ------------------------------------------------------------------ DCGM

_DRIFTED = (DcgmOutcome.FAIL, DcgmOutcome.WARN, DcgmOutcome.SKIP)
_WORST_FIRST = (DcgmOutcome.FAIL, DcgmOutcome.WARN, DcgmOutcome.SKIP, DcgmOutcome.NOT_RUN)


def _results_for(was: CertifiedDcgmTest, now: Sequence[DcgmTestResult]) -> list[DcgmTestResult]:
    """The results now of a test that passed at certification, for the same GPU or node.

    DCGM 3 and 4 (and their text output) give some tests per GPU in one version and for
    the node in another: a node's result is compared with every GPU's now, and a GPU's
    with the node's when no per-GPU one is given.
    """
    same_test = [result for result in now if result.test == was.test]
    exact = [result for result in same_test if result.gpu_index == was.gpu_index]
    if exact or was.gpu_index is None:
        return exact or same_test
    return [result for result in same_test if result.gpu_index is None]


def _worst(results: Sequence[DcgmTestResult]) -> DcgmTestResult | None:
    """The result that says most against the test (fail first), None when every one passed."""
    for outcome in _WORST_FIRST:
        for result in results:
            if result.outcome is outcome:
                return result
    return None


def _most_disruptive(actions: Sequence[tuple[Action, str]]) -> tuple[Action, str]:
    order = list(Action)
    return max(actions, key=lambda pair: order.index(pair[0]))


@dataclass
class _DcgmTally:
    """One GPU's (or the node's) tests that passed at certification, by what they do now."""

    drifted: list[DcgmTestResult] = field(default_factory=list)
    # Failures and warnings now that no certified pass covers, with what the
    # certificate holds for them ("skip", "not in the certificate"...).
    new: list[tuple[DcgmTestResult, str]] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def add(self, was: CertifiedDcgmTest, now: Sequence[DcgmTestResult]) -> None:
        """Sort one certified pass by its results now."""
        results = _results_for(was, now)
        worst = _worst(results)
        if not results:
            self.missing.append(was.test)
        elif worst is None:
            self.kept.append(was.test)
        elif worst.outcome in _DRIFTED:
            self.drifted.append(worst)
        else:
            self.not_run.append(was.test)


_PAST = {DcgmOutcome.PASS.value: "passed"}


def _faults_now(tally: _DcgmTally) -> tuple[str, str, tuple[Action, str]]:
    """(observed, message, action) of a tally's failures now, certified passes first."""
    said = [(r, "passed when certified") for r in tally.drifted]
    said += [(r, f"{_PAST.get(was, was)} when certified") for r, was in tally.new]
    observed = ", ".join(f"{r.test} {r.outcome.value}" for r, _ in said)
    text = "; ".join(
        f"DCGM {r.test} {r.outcome.value} now ({was})" + (f": {r.message}" if r.message else "")
        for r, was in said
    )
    return observed, text, _most_disruptive([action_for_result(r) for r, _ in said])


def _dcgm_group(
    where: GpuRef | None, tally: _DcgmTally, levels: tuple[int | None, int | None]
) -> Finding:
    """The finding of one GPU's (or, ``where`` None, the node's) DCGM results."""
    label = "" if where is None else f"GPU {where.index}: "
    check, expected = DriftCheck.DCGM, "pass, as certified"
    severity, required, action = PASS, True, None
    if tally.drifted or tally.new:
        severity = FAIL
        observed, text, action = _faults_now(tally)
    elif tally.not_run:
        severity, observed = UNKNOWN, ", ".join(tally.not_run)
        text = f"DCGM did not run {observed} now (passed when certified)"
    elif tally.missing:
        severity, observed, required = UNKNOWN, ", ".join(tally.missing), False
        was, now = (level if level is not None else "?" for level in levels)
        text = (
            f"DCGM {observed} passed when certified (level {was}) and are not in this run "
            f"(level {now}): not compared"
        )
    else:
        observed = ", ".join(tally.kept)
        text = f"DCGM {observed} pass as certified"
    finding = node_finding(
        check, severity, label + text, observed=observed, expected=expected, required=required
    )
    if where is not None:  # as gpu_finding names a GPU
        finding = replace(finding, gpu_index=where.index, gpu_uuid=uuid_of(where))
    return finding if action is None else with_action(finding, *action)


def _dcgm_unmatched(cert: Certificate, diag: DcgmDiag, policy: Policy) -> list[Finding]:
    """What to say when the results cannot be compared test by test.

    The certificate predates DCGM in drift, DCGM was not run at certification, or it
    gave no results now (required when the policy asks for DCGM).
    """
    results = diag.results
    if not cert.holds_interconnect:
        measured = not isinstance(results, Unavailable)
        return [predates(cert, DriftCheck.DCGM, "DCGM")] if measured else []
    if cert.dcgm is None:
        if isinstance(results, Unavailable):
            return []
        return [
            node_finding(
                DriftCheck.DCGM,
                UNKNOWN,
                f"DCGM ran now (level {diag.level}), but not when the node was certified: "
                "no result to compare with",
                observed=f"{len(results)} results",
                expected="DCGM results in the certificate",
                required=False,
            )
        ]
    why = why_not(results) if isinstance(results, Unavailable) else "none"
    passed = sum(1 for r in cert.dcgm.results if r.outcome == DcgmOutcome.PASS.value)
    return [
        node_finding(
            DriftCheck.DCGM,
            UNKNOWN,
            f"DCGM gave no results now: {why}; the {passed} results that passed when the "
            "node was certified are not compared",
            observed=why,
            expected="DCGM results",
            required=policy.dcgm_level > 0,
        )
    ]


@dataclass(frozen=True)
class _IndexOnly:
    """A GPU DCGM names now that the facts of now do not hold."""

    index: int
    uuid: str | None = None


def _certified_as(certified: CertifiedDcgm | None, result: DcgmTestResult) -> str:
    """What the certificate holds for a result's test on its GPU (or the node)."""
    if certified is None:
        return "DCGM not run"
    for gpu in (result.gpu_index, None):
        for was in certified.results:
            if was.test == result.test and was.gpu_index == gpu:
                return was.outcome
    return "not in the certificate"


def _add_new_faults(
    tallies: dict[int | None, _DcgmTally],
    certified: CertifiedDcgm | None,
    results: Sequence[DcgmTestResult],
) -> None:
    """File every failure or warning now that no certified pass covers (fail closed)."""
    covered = {id(result) for tally in tallies.values() for result in tally.drifted}
    for result in results:
        if result.outcome not in (DcgmOutcome.FAIL, DcgmOutcome.WARN) or id(result) in covered:
            continue
        # A certified pass whose tally reported a worse result of the test (a node's
        # pass failing now on two GPUs) leaves this one to be told here.
        was = _certified_as(certified, result)
        if result.outcome is DcgmOutcome.WARN and was == DcgmOutcome.WARN.value:
            continue  # the same warning as when certified: nothing moved
        tallies.setdefault(result.gpu_index, _DcgmTally()).new.append((result, was))


def _dcgm_tests(
    certified: CertifiedDcgm | None,
    diag: DcgmDiag,
    results: Sequence[DcgmTestResult],
    facts: NodeFacts,
    pairs: Sequence[Pair],
) -> list[Finding]:
    """Each GPU's (and the node's) certified passes, and faults now, against the results."""
    paired = {gpu.index: gpu for _, gpu in pairs}
    tallies: dict[int | None, _DcgmTally] = {}
    for was in certified.results if certified is not None else ():
        if was.outcome != DcgmOutcome.PASS.value:
            continue
        if was.gpu_index is not None and was.gpu_index not in paired:
            continue  # gone or swapped: its own finding says so
        tallies.setdefault(was.gpu_index, _DcgmTally()).add(was, results)
    _add_new_faults(tallies, certified, results)
    now: dict[int, GpuRef] = {gpu.index: gpu for gpu in facts.gpus}
    now.update(paired)
    levels = (certified.level if certified is not None else None, diag.level)
    return [
        _dcgm_group(None if index is None else now.get(index, _IndexOnly(index)), tally, levels)
        for index, tally in tallies.items()
    ]


def _dcgm(
    cert: Certificate, facts: NodeFacts, pairs: Sequence[Pair], policy: Policy
) -> list[Finding]:
    """Every DCGM test that passed at certification, against this run's results.

    No DCGM run now (``facts.dcgm`` None) is nothing to compare, as a drift run without
    a burn-in has no speed to compare.
    """
    diag = facts.dcgm
    if diag is None:
        return []
    results = diag.results
    if isinstance(results, Unavailable):
        return _dcgm_unmatched(cert, diag, policy)
    if not cert.holds_interconnect or cert.dcgm is None:
        # No baseline to compare passes with; a fault now is still a fault.
        return _dcgm_unmatched(cert, diag, policy) + _dcgm_tests(None, diag, results, facts, pairs)
    return _dcgm_tests(cert.dcgm, diag, results, facts, pairs)


# ------------------------------------------------------------------ the comparison


def gpus_unreadable(facts: NodeFacts) -> bool:
    """True when the driver gave no GPU facts at all: the GPUs cannot be compared."""
    return not facts.gpus and driver_silent(facts) is not None


def _certified_sku(cert: Certificate) -> Sku | None:
    try:
        return load_catalog().get(cert.sku) if cert.sku else None
    except PolicyError:
        return None  # another catalog's SKU: the largest ceilings, the milder repair


def compare(cert: Certificate, facts: NodeFacts, policy: Policy) -> tuple[Finding, ...]:
    """Every drift finding of a node's facts against its certificate, sorted.

    Args:
        cert: the node's latest certificate (the baseline).
        facts: the node's facts now.
        policy: the rules now (hardware Xids, the burn-in drop, persistence).

    Returns:
        Findings with check ids ``drift.*``: FAIL for drift, PASS for unchanged,
        UNKNOWN for what could not be measured now.
    """
    # A figure beyond what the certified model can do is not measured now: never "unchanged".
    sku = _certified_sku(cert)
    facts, _ = screen(facts, sku, load_catalog())
    findings = _versions(cert, facts)
    if gpus_unreadable(facts):
        detail = facts.nvml_detail or facts.nvml_status.value
        findings.append(
            node_finding(
                DriftCheck.GPU_REMOVED,
                UNKNOWN,
                f"The driver gave no GPU facts ({detail}): the GPUs cannot be compared",
                observed=detail,
                expected=f"{len(cert.gpus)} GPUs",
            )
        )
        return sort_findings(findings)
    set_findings, pairs = gpu_set(cert, facts)
    findings += set_findings
    for was, gpu in pairs:
        findings += compare_gpu(was, gpu, policy)
    findings += interconnect_findings(cert, pairs, policy)
    findings += bandwidth_findings(cert, facts, pairs, policy, sku)
    findings += burn_findings(pairs, facts, policy)
    findings += _dcgm(cert, facts, pairs, policy)
    findings += _xids(cert, facts, policy)
    return sort_findings(findings)


__all__ = ["compare", "gpus_unreadable"]
