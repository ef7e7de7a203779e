"""Drift of the GPUs themselves: which boards are there, and what moved on each.

GPUs are matched by index. A different UUID or serial at the same index is a
swapped GPU: its other facts belong to another board, so only the swap is
reported for it. A GPU that fell off the bus is reported as removed.

Counters (ECC uncorrected, row remaps, retired pages) drift when they grew.
Volatile ECC counters reset when the driver reloads, so a smaller value is no drift.
A value the certificate lacks (not measured then) has no baseline: an UNKNOWN
that does not block when there is a value now, nothing when there is none.

NVLinks, link error counters, PCIe replays and the recovery action (certificate
schema 2; an older certificate predates them, noted and not blocking):

* a link active at certification that is down, missing or slower now is drift
  (``drift.nvlink``); the action is the judge's for the same fault
  (:func:`validator.judge.checks.nvlink.link_repair`, by the certified SKU): drain and
  RMA on an SXM baseboard, reseat the tray or the bridge elsewhere;
* NVLink CRC flit and data, replay and recovery counters, and the PCIe replay counter,
  drift when they grew since certification beyond the policy's growth limits (the
  same figures as during the burn-in: the whole time since certification is held to
  them). The certified totals are those after the certification burn-in, whose own
  errors certify judged already (:mod:`validator.certificate`). They count since the
  driver loaded, so a total below the certified one was reset (a reboot or driver
  reload): everything it counts came after the certificate,
  so above the limit it is drift; within it, the growth before the reset is lost and
  cannot be judged: an UNKNOWN that does not block, saying so;
* a recovery action other than none is drift whatever the certificate holds (a flag
  set now, as a pending row remap), with the action NVIDIA's guide gives for it.

Every finding is built with the judge's constructors
(:mod:`validator.judge.checks.finding_helpers`): drift findings are findings.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from validator.certificate import (
    INTERCONNECT_SCHEMA_VERSION,
    Certificate,
    CertifiedGpu,
    CertifiedLink,
    CertifiedLinkErrors,
)
from validator.error_tree import PolicyError
from validator.judge.catalog import load_catalog
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    gpu_finding,
    node_finding,
    unknown_gpu,
    watts,
    why_not,
    with_action,
)
from validator.judge.checks.nvlink import SPEED_TOLERANCE, link_repair
from validator.judge.checks.pcie import REPLAY_REPAIR
from validator.judge.policy import Policy
from validator.judge.recovery import recovery_step
from validator.model import (
    Action,
    BurnResult,
    BurnStatus,
    DriftCheck,
    Finding,
    GpuFacts,
    GpuStatus,
    Measured,
    NodeFacts,
    NvLinkErrorCounts,
    NvLinkState,
    Reason,
    Unavailable,
)

# A power limit read back through NVML is in milliwatts rounded to watts by some
# readers; half a watt keeps rounding apart from a real change of the cap.
POWER_TOLERANCE_W = 0.5
# A link is held to its certified speed with the judge's tolerance for the SKU's.
LINK_SPEED_TOLERANCE = SPEED_TOLERANCE
# PCIe replays: the judge's action for the same fault.
PCIE_REPLAY_ACTION = REPLAY_REPAIR

Pair = tuple[CertifiedGpu, GpuFacts]  # a GPU as certified, and the same board now


# ------------------------------------------------------------------ which GPUs


def _identity(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    """The swap finding for one index: FAIL swapped, UNKNOWN unreadable, None when the same."""
    changed = []
    unreadable = []
    for label, before, now in (("UUID", was.uuid, gpu.uuid), ("serial", was.serial, gpu.serial)):
        if before is None:
            continue
        if isinstance(now, Unavailable):
            unreadable.append(f"{label}: {why_not(now)}")
        elif now != before:
            changed.append((label, before, now))
    if changed:
        observed = ", ".join(f"{label} {now}" for label, _, now in changed)
        expected = ", ".join(f"{label} {before}" for label, before, _ in changed)
        return gpu_finding(
            DriftCheck.GPU_SWAPPED,
            FAIL,
            gpu,
            f"GPU {gpu.index} is another board than certified ({observed}; was {expected}): "
            "certify the node again",
            observed=observed,
            expected=expected,
        )
    if unreadable:
        return gpu_finding(
            DriftCheck.GPU_SWAPPED,
            UNKNOWN,
            gpu,
            f"GPU {gpu.index}'s identity could not be read: {'; '.join(unreadable)}",
            observed="; ".join(unreadable),
            expected=f"UUID {was.uuid}, serial {was.serial}",
        )
    return None


def _gone(was: CertifiedGpu, gpu: GpuFacts | None) -> Finding | None:
    """FAIL for a certified GPU that is absent or lost now, UNKNOWN for one that errs."""
    expected = f"UUID {was.uuid}"
    if gpu is None:
        return gpu_finding(
            DriftCheck.GPU_REMOVED,
            FAIL,
            was,
            f"GPU {was.index} ({was.uuid}) was certified and is gone now",
            observed="absent",
            expected=expected,
        )
    detail = gpu.status_detail
    if gpu.status is GpuStatus.LOST:
        return gpu_finding(
            DriftCheck.GPU_REMOVED,
            FAIL,
            was,
            f"GPU {was.index} ({was.uuid}) stopped answering: {detail or 'lost'}",
            observed=f"lost: {detail}" if detail else "lost",
            expected=expected,
        )
    if gpu.status is GpuStatus.ERROR:
        return gpu_finding(
            DriftCheck.GPU_REMOVED,
            UNKNOWN,
            was,
            f"GPU {was.index} could not be read: {detail or 'error'}",
            observed=detail or "error",
            expected=expected,
        )
    return None


def gpu_set(cert: Certificate, facts: NodeFacts) -> tuple[list[Finding], list[Pair]]:
    """Added, removed and swapped GPUs; and the pairs whose facts compare one to one."""
    findings: list[Finding] = []
    pairs: list[Pair] = []
    now_by_index = {gpu.index: gpu for gpu in facts.gpus}
    for was in cert.gpus:
        gpu = now_by_index.get(was.index)
        gone = _gone(was, gpu)
        if gone is not None or gpu is None:
            findings += [gone] if gone is not None else []
            continue
        swap = _identity(was, gpu)
        if swap is not None:
            findings.append(swap)
            if swap.severity is FAIL:
                continue
        pairs.append((was, gpu))
    certified = {gpu.index for gpu in cert.gpus}
    for gpu in facts.gpus:
        if gpu.index not in certified:
            uuid = gpu.uuid if isinstance(gpu.uuid, str) else why_not(gpu.uuid)
            findings.append(
                gpu_finding(
                    DriftCheck.GPU_ADDED,
                    FAIL,
                    gpu,
                    f"GPU {gpu.index} ({uuid}) is new: the certificate has {len(cert.gpus)} GPUs",
                    observed=f"UUID {uuid}",
                    expected="absent",
                )
            )
    if not findings:
        findings.append(
            node_finding(
                DriftCheck.GPU_SWAPPED,
                PASS,
                f"The same {len(cert.gpus)} GPUs as certified, by UUID and serial",
                observed=f"{len(facts.gpus)} GPUs",
                expected=f"{len(cert.gpus)} GPUs",
            )
        )
    return findings, pairs


# ------------------------------------------------------------------ what moved on each


def _moved(
    check: str, gpu: GpuFacts, changed: str | None, kept: str, *, observed: object, expected: object
) -> Finding:
    """FAIL saying what ``changed`` when something did, else PASS saying what was ``kept``."""
    return gpu_finding(
        check,
        FAIL if changed is not None else PASS,
        gpu,
        f"GPU {gpu.index}: {changed if changed is not None else kept}",
        observed=observed,
        expected=expected,
    )


def _vbios(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    check, before, now = DriftCheck.VBIOS, was.vbios_version, gpu.vbios_version
    if before is None:
        return None
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, "VBIOS version", now, expected=before)
    changed = f"VBIOS changed from {before} to {now}" if now != before else None
    kept = f"VBIOS {now} as certified"
    return _moved(check, gpu, changed, kept, observed=now, expected=before)


def _power(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    check, before, now = (
        DriftCheck.POWER_LIMIT,
        was.power_limit_enforced_w,
        gpu.power_limit_enforced_w,
    )
    if before is None:
        return None
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, "power limit", now, expected=watts(before))
    changed = None
    if abs(now - before) > POWER_TOLERANCE_W:
        way = "lowered" if now < before else "raised"
        changed = f"power limit {way} from {watts(before)} to {watts(now)}"
    kept = f"power limit {watts(now)} as certified"
    return _moved(check, gpu, changed, kept, observed=watts(now), expected=watts(before))


def _pcie(
    check: str, label: str, gpu: GpuFacts, before: int | None, now: Measured[int]
) -> Finding | None:
    if before is None:
        return None
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, f"PCIe link {label}", now, expected=f">= {before}")
    changed = f"PCIe link {label} fell from {before} to {now}" if now < before else None
    kept = f"PCIe link {label} {now} as certified"
    return _moved(check, gpu, changed, kept, observed=now, expected=f">= {before}")


def _counters(
    check: str, what: str, gpu: GpuFacts, counters: Sequence[tuple[str, int | None, Measured[int]]]
) -> Finding | None:
    """One finding over a family of counters: FAIL when any grew."""
    grown = []
    unreadable = []
    compared = []
    no_baseline = []
    for label, before, now in counters:
        if before is None:
            if not isinstance(now, Unavailable):
                no_baseline.append(f"{label} {now}")
        elif isinstance(now, Unavailable):
            unreadable.append(f"{label}: {why_not(now)}")
        else:
            compared.append(f"{label} {now}")
            if now > before:
                grown.append((label, before, now))
    required, expected = True, "no growth"
    if grown:
        severity = FAIL
        text = "grew since certified: " + "; ".join(f"{k} {was} -> {now}" for k, was, now in grown)
        observed = ", ".join(f"{label} {now}" for label, _, now in grown)
        expected = ", ".join(f"{label} {before}" for label, before, _ in grown)
    elif unreadable:
        severity, observed = UNKNOWN, "; ".join(unreadable)
        text = f"could not be read now: {observed}"
    elif compared:
        severity, observed, text = PASS, ", ".join(compared), "as certified"
    elif no_baseline:
        severity, observed = UNKNOWN, ", ".join(no_baseline)
        text = "have no value in the certificate to compare with"
        required, expected = False, "a certified value"
    else:
        return None  # not supported then, not supported now: nothing to say
    return gpu_finding(
        check,
        severity,
        gpu,
        f"GPU {gpu.index}: {what} {text}",
        observed=observed,
        expected=expected,
        required=required,
    )


def _with_flags(
    check: str,
    counted: Finding | None,
    gpu: GpuFacts,
    what: str,
    flags: Sequence[tuple[str, Measured[bool]]],
) -> Finding | None:
    """The counters' finding, with the pending or failed flags that are set now.

    A flag set now is drift whatever the certificate says: it outweighs counters
    that did not grow, and joins those that did in one finding.
    """
    raised = ", ".join(label for label, value in flags if value is True)
    if not raised:
        return counted
    if counted is not None and counted.severity is FAIL:
        return dataclasses.replace(
            counted,
            message=f"{counted.message}; {raised}",
            observed=f"{counted.observed}, {raised}",
        )
    return gpu_finding(
        check, FAIL, gpu, f"GPU {gpu.index}: {what}: {raised}", observed=raised, expected="none"
    )


def _ecc(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    return _counters(
        DriftCheck.ECC,
        "uncorrected ECC errors",
        gpu,
        (
            ("volatile", was.ecc_volatile_uncorrected, gpu.ecc_volatile_uncorrected),
            ("aggregate", was.ecc_aggregate_uncorrected, gpu.ecc_aggregate_uncorrected),
        ),
    )


def _row_remap(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    counted = _counters(
        DriftCheck.ROW_REMAP,
        "remapped rows",
        gpu,
        (
            ("correctable", was.remapped_rows_correctable, gpu.remapped_rows_correctable),
            ("uncorrectable", was.remapped_rows_uncorrectable, gpu.remapped_rows_uncorrectable),
        ),
    )
    flags = (("remap pending", gpu.remap_pending), ("remap failed", gpu.remap_failure))
    return _with_flags(DriftCheck.ROW_REMAP, counted, gpu, "row remapping", flags)


def _retired_pages(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    counted = _counters(
        DriftCheck.RETIRED_PAGES,
        "retired pages",
        gpu,
        (
            ("single-bit", was.retired_pages_sbe, gpu.retired_pages_sbe),
            ("double-bit", was.retired_pages_dbe, gpu.retired_pages_dbe),
        ),
    )
    flags = (("retirement pending", gpu.retired_pages_pending),)
    return _with_flags(DriftCheck.RETIRED_PAGES, counted, gpu, "page retirement", flags)


def _persistence(was: CertifiedGpu, gpu: GpuFacts, policy: Policy) -> Finding | None:
    check, now = DriftCheck.PERSISTENCE, gpu.persistence_mode
    expected_on = was.persistence_mode is True or (
        was.persistence_mode is None and policy.persistence_mode_required
    )
    if not expected_on:
        return None
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, "persistence mode", now, expected="on")
    changed = (
        "persistence mode is off (it was on when certified); turn it on with nvidia-persistenced"
        if now is False
        else None
    )
    state = "off" if now is False else "on"
    return _moved(check, gpu, changed, "persistence mode on", observed=state, expected="on")


def compare_gpu(was: CertifiedGpu, gpu: GpuFacts, policy: Policy) -> list[Finding]:
    """What moved on one GPU that is the same board as certified."""
    found = (
        _vbios(was, gpu),
        _power(was, gpu),
        _pcie(DriftCheck.PCIE_GEN, "generation", gpu, was.pcie_gen_max, gpu.pcie_gen_max),
        _pcie(DriftCheck.PCIE_WIDTH, "width", gpu, was.pcie_width_current, gpu.pcie_width_current),
        _ecc(was, gpu),
        _row_remap(was, gpu),
        _retired_pages(was, gpu),
        _persistence(was, gpu, policy),
    )
    return [finding for finding in found if finding is not None]


# ------------------------------------------------------------------ NVLinks


def link_action(cert: Certificate) -> tuple[Action, str]:
    """What to do about a GPU's failing NVLink, and why: certify's answer for the certified SKU.

    A SKU this catalog does not know gets the judge's answer for no SKU (the milder step).
    """
    sku = None
    if cert.sku is not None:
        try:
            sku = load_catalog().get(cert.sku)
        except PolicyError:
            sku = None
    return link_repair(sku)


def _acted(finding: Finding, action: tuple[Action, str]) -> Finding:
    """``finding`` with the action to take, when it is drift."""
    return with_action(finding, *action) if finding.severity is FAIL else finding


def _speed(value: float) -> str:
    return f"{value:g} GB/s"


def _link_problem(was: CertifiedLink, now: NvLinkState | None) -> tuple[str | None, str | None]:
    """What went wrong with one link active at certification: (drift, unreadable)."""
    if now is None:
        return f"NVLink {was.link} missing", None
    if not now.active:
        return f"NVLink {was.link} down", None
    if was.speed_gb_s is None:
        return None, None
    if isinstance(now.speed_gb_s, Unavailable):
        return None, f"NVLink {was.link} speed: {why_not(now.speed_gb_s)}"
    if now.speed_gb_s < was.speed_gb_s * (1.0 - LINK_SPEED_TOLERANCE):
        slower = (
            f"NVLink {was.link} at {_speed(now.speed_gb_s)} (certified {_speed(was.speed_gb_s)})"
        )
        return slower, None
    return None, None


def _nvlinks(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    """Every link active at certification is still there, up and as fast."""
    check, before, now = DriftCheck.NVLINK, was.nvlinks, gpu.nvlinks
    if before is None:
        if isinstance(now, Unavailable) or not now:
            return None
        return _no_baseline(check, gpu, "NVLink state", f"{len(now)} links")
    active = [link for link in before if link.active]
    if not active:
        return None  # no link was up when certified: nothing to keep up
    if isinstance(now, Unavailable):
        expected = f"{len(active)} NVLinks active as certified"
        return unknown_gpu(check, gpu, "NVLink state", now, expected=expected)
    return _links_now(gpu, active, now)


def _links_now(
    gpu: GpuFacts, active: Sequence[CertifiedLink], now: Sequence[NvLinkState]
) -> Finding:
    """The links active at certification, against the links now."""
    check, expected = DriftCheck.NVLINK, f"{len(active)} NVLinks active as certified"
    by_link = {link.link: link for link in now}
    judged = [_link_problem(link, by_link.get(link.link)) for link in active]
    problems = [problem for problem, _ in judged if problem is not None]
    unreadable = [why for _, why in judged if why is not None]
    if problems:
        text = f"GPU {gpu.index}: {'; '.join(problems)} since certified ({len(active)} were active)"
        return gpu_finding(check, FAIL, gpu, text, observed=", ".join(problems), expected=expected)
    if unreadable:
        # The links are up; only their speed could not be read back (not every source
        # gives it): said, and not blocking.
        return gpu_finding(
            check,
            UNKNOWN,
            gpu,
            f"GPU {gpu.index}: {len(active)} NVLinks up as certified; their speed could not "
            f"be read now: {'; '.join(unreadable)}",
            observed="; ".join(unreadable),
            expected=expected,
            required=False,
        )
    return gpu_finding(
        check,
        PASS,
        gpu,
        f"GPU {gpu.index}: {expected}",
        observed=f"{len(active)} active",
        expected=expected,
    )


def _no_baseline(check: str, gpu: GpuFacts, what: str, now: str) -> Finding:
    """A fact measured now that the certificate lacks: nothing to compare, not blocking."""
    return gpu_finding(
        check,
        UNKNOWN,
        gpu,
        f"GPU {gpu.index}: {what} has no value in the certificate to compare with",
        observed=now,
        expected="a certified value",
        required=False,
    )


# ------------------------------------------------------------------ link and PCIe counters


@dataclass(frozen=True)
class Reading:
    """One error counter as certified and now, and the growth the policy allows."""

    label: str  # "NVLink 3 CRC flit", "PCIe replays"
    before: int | None
    now: Measured[int]
    limit: int


@dataclass
class _Tally:
    """Counters sorted by what can be said of each."""

    grown: list[str] = dataclasses.field(default_factory=list)
    grown_now: list[str] = dataclasses.field(default_factory=list)
    unreadable: list[str] = dataclasses.field(default_factory=list)
    reset: list[str] = dataclasses.field(default_factory=list)
    compared: list[str] = dataclasses.field(default_factory=list)
    no_baseline: list[str] = dataclasses.field(default_factory=list)

    def add(self, counter: Reading) -> None:
        """Sort one counter (see the module doc: a total below the certified one was reset)."""
        label, before, now, limit = counter.label, counter.before, counter.now, counter.limit
        if isinstance(now, Unavailable):
            if before is not None:
                self.unreadable.append(f"{label}: {why_not(now)}")
        elif before is None:
            self.no_baseline.append(f"{label} {now}")
        elif now < before:
            # Reset since (a reboot or driver reload): everything counted now came after.
            if now > limit:
                self.grown.append(f"{label} {now} since the counters were reset (max {limit})")
                self.grown_now.append(f"{label} {now}")
            else:
                self.reset.append(f"{label} {before} -> {now}")
        elif now - before > limit:
            self.grown.append(f"{label} +{now - before} ({before} -> {now}, max {limit})")
            self.grown_now.append(f"{label} {now}")
        else:
            self.compared.append(f"{label} {now}")


def _growth(
    check: str, gpu: GpuFacts, what: str, counters: Sequence[Reading], expected: str
) -> Finding | None:
    """One finding over a GPU's counters: FAIL when any grew beyond its limit."""
    tally = _Tally()
    for counter in counters:
        tally.add(counter)
    required = True
    if tally.grown:
        severity, observed = FAIL, ", ".join(tally.grown_now)
        text = f"grew since certified: {'; '.join(tally.grown)}"
    elif tally.unreadable:
        severity, observed = UNKNOWN, "; ".join(tally.unreadable)
        text = f"could not be read now: {observed}"
    elif tally.reset:
        severity, observed, required = UNKNOWN, "; ".join(tally.reset), False
        text = (
            f"were reset since certified (a reboot or driver reload: {observed}), so their "
            "growth cannot be judged; what they counted since is within the limits"
        )
    elif tally.compared:
        severity, observed = PASS, ", ".join(tally.compared)
        text = "within the limits since certified"
    elif tally.no_baseline:
        return _no_baseline(check, gpu, what, ", ".join(tally.no_baseline))
    else:
        return None  # not measured then, not measured now: nothing to say
    return gpu_finding(
        check,
        severity,
        gpu,
        f"GPU {gpu.index}: {what} {text}",
        observed=observed,
        expected=expected,
        required=required,
    )


def _link_counters(
    was: CertifiedLinkErrors | None, now: NvLinkErrorCounts | None, policy: Policy
) -> list[Reading]:
    limits = policy.thresholds
    if was is None or now is None:
        return []
    label = f"NVLink {was.link}"
    return [
        Reading(f"{label} CRC flit", was.crc_flit, now.crc_flit, limits.nvlink_crc_growth_max),
        Reading(f"{label} CRC data", was.crc_data, now.crc_data, limits.nvlink_crc_growth_max),
        Reading(f"{label} replay", was.replay, now.replay, limits.nvlink_replay_growth_max),
        Reading(f"{label} recovery", was.recovery, now.recovery, limits.nvlink_recovery_growth_max),
    ]


def _nvlink_errors(was: CertifiedGpu, gpu: GpuFacts, policy: Policy) -> Finding | None:
    check, before, now = DriftCheck.NVLINK_ERRORS, was.nvlink_errors, gpu.nvlink_errors
    limits = policy.thresholds
    expected = (
        f"per link at most +{limits.nvlink_crc_growth_max} CRC flit and data, "
        f"+{limits.nvlink_replay_growth_max} replay, +{limits.nvlink_recovery_growth_max} recovery"
    )
    if before is None:
        if isinstance(now, Unavailable) or not now:
            return None
        return _no_baseline(check, gpu, "NVLink error counters", f"{len(now)} links")
    if not before:
        return None  # no link counted when certified
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, "NVLink error counters", now, expected=expected)
    by_link = {counts.link: counts for counts in now}
    counters: list[Reading] = []
    for counts in before:
        current = by_link.get(counts.link)
        if current is None:
            # A link certified with counters that reports none now cannot be shown
            # clean: unreadable (drift.nvlink says whether the link itself is gone).
            missing = Unavailable(Reason.NOT_MEASURED, "not reported now")
            counters.append(Reading(f"NVLink {counts.link}", 0, missing, 0))
        counters += _link_counters(counts, current, policy)
    return _growth(check, gpu, "NVLink error counters", counters, expected)


def _pcie_replays(was: CertifiedGpu, gpu: GpuFacts, policy: Policy) -> Finding | None:
    limit = policy.thresholds.pcie_replay_growth_max
    counters = (Reading("PCIe replays", was.pcie_replay_count, gpu.pcie_replay_count, limit),)
    return _growth(DriftCheck.PCIE_REPLAY, gpu, "PCIe replays", counters, f"at most +{limit}")


# ------------------------------------------------------------------ recovery action


def _recovery_action(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    """Anything but "none" now is drift, whatever the certificate holds.

    A certified node had none (``state.recovery_action`` fails any other), and the
    driver asking for a reset or reboot needs no baseline to be acted on.
    """
    check, now = DriftCheck.RECOVERY_ACTION, gpu.recovery_action
    if isinstance(now, Unavailable):
        if was.recovery_action is None:
            return None  # not read then (a driver before R575), not read now
        return unknown_gpu(check, gpu, "recovery action", now, expected="none")
    if now == "none":
        text = f"GPU {gpu.index}: no recovery action needed"
        return gpu_finding(check, PASS, gpu, text, observed=now, expected="none")
    step = recovery_step(now)
    certified = f" (certified with {was.recovery_action})" if was.recovery_action else ""
    finding = gpu_finding(
        check,
        FAIL,
        gpu,
        f"GPU {gpu.index}: the driver asks for recovery action {now}; "
        f"{step.words.format(index=gpu.index)}{certified}",
        observed=now,
        expected="none",
    )
    return with_action(finding, step.action, f"NVML GPU recovery action: {now}")


# ------------------------------------------------------------------ the interconnect checks


def _has(value: Measured[object]) -> bool:
    """True for a value measured now that is not an empty list of links."""
    return not isinstance(value, Unavailable) and value != ()


# What schema 2 added, by check: a schema-1 certificate predates them.
_PREDATES: tuple[tuple[DriftCheck, str, Callable[[GpuFacts], bool]], ...] = (
    (DriftCheck.NVLINK, "NVLink state", lambda gpu: _has(gpu.nvlinks)),
    (DriftCheck.NVLINK_ERRORS, "NVLink error counters", lambda gpu: _has(gpu.nvlink_errors)),
    (DriftCheck.PCIE_REPLAY, "PCIe replay", lambda gpu: _has(gpu.pcie_replay_count)),
)


def predates(cert: Certificate, check: str, what: str) -> Finding:
    """A note that the certificate is older than a check: not drift, not blocking."""
    return node_finding(
        check,
        UNKNOWN,
        f"The {cert.label} predates drift's {what} check (certificate schema "
        f"{cert.schema_version}): not compared; certify the node again to record it",
        observed=f"certificate schema {cert.schema_version}",
        expected=f"certificate schema {INTERCONNECT_SCHEMA_VERSION} or newer",
        required=False,
    )


def interconnect_findings(
    cert: Certificate, pairs: Sequence[Pair], policy: Policy
) -> list[Finding]:
    """NVLink state and errors, PCIe replays and the recovery action of each GPU.

    A certificate older than these checks is noted once per check where there is
    something to compare now; the recovery action needs no baseline and is judged.
    """
    findings: list[Finding] = [
        finding for was, gpu in pairs if (finding := _recovery_action(was, gpu)) is not None
    ]
    if not cert.holds_interconnect:
        findings += [
            predates(cert, check, what)
            for check, what, measured in _PREDATES
            if any(measured(gpu) for _, gpu in pairs)
        ]
        return findings
    action = link_action(cert)
    for was, gpu in pairs:
        links = (_nvlinks(was, gpu), _nvlink_errors(was, gpu, policy))
        findings += [_acted(finding, action) for finding in links if finding is not None]
        replays = _pcie_replays(was, gpu, policy)
        if replays is not None:
            findings.append(_acted(replays, PCIE_REPLAY_ACTION))
    return findings


# ------------------------------------------------------------------ burn-in speed


def _burned(was: CertifiedGpu, gpu: GpuFacts, burn: BurnResult, policy: Policy) -> Finding:
    """One GPU's burn-in speed against its certified figure."""
    check = DriftCheck.BURN
    if was.burn_tflops is None:
        return gpu_finding(
            check,
            UNKNOWN,
            gpu,
            f"GPU {gpu.index}: the certificate holds no burn-in speed to compare with",
            expected="a certified TFLOPS figure",
            required=False,
        )
    drop = policy.thresholds.drift_burn_drop
    floor = was.burn_tflops * (1.0 - drop)
    expected = f">= {floor:.1f} TFLOPS ({was.burn_tflops:.1f} certified, -{drop:.0%})"
    ran = next((g for g in burn.gpus if g.index == gpu.index), None)
    if burn.error is not None or ran is None or ran.status is not BurnStatus.COMPLETED:
        why = burn.error or (ran.detail or ran.status.value if ran else "not burned")
        text = f"the burn-in gave no speed: {why}"
        return gpu_finding(
            check, UNKNOWN, gpu, f"GPU {gpu.index}: {text}", observed=why, expected=expected
        )
    tflops = ran.tflops
    if isinstance(tflops, Unavailable) or not math.isfinite(tflops):
        why = why_not(tflops) if isinstance(tflops, Unavailable) else str(tflops)
        text = f"no burn-in speed: {why}"
        return gpu_finding(
            check, UNKNOWN, gpu, f"GPU {gpu.index}: {text}", observed=why, expected=expected
        )
    if tflops < floor:
        share = 1.0 - tflops / was.burn_tflops
        severity = FAIL
        text = (
            f"burn-in {tflops:.1f} TFLOPS is {share:.0%} below the certified {was.burn_tflops:.1f}"
        )
    else:
        severity, text = PASS, f"burn-in {tflops:.1f} TFLOPS"
    return gpu_finding(
        check,
        severity,
        gpu,
        f"GPU {gpu.index}: {text}",
        observed=f"{tflops:.1f} TFLOPS",
        expected=expected,
    )


def burn_findings(pairs: Sequence[Pair], facts: NodeFacts, policy: Policy) -> list[Finding]:
    """Each GPU's burn-in speed against its certified figure; none without a burn-in."""
    burn = facts.burn
    if burn is None:
        return []  # a quick drift check runs no burn-in: nothing to compare
    return [_burned(was, gpu, burn, policy) for was, gpu in pairs]


__all__ = [
    "LINK_SPEED_TOLERANCE",
    "PCIE_REPLAY_ACTION",
    "POWER_TOLERANCE_W",
    "Pair",
    "Reading",
    "burn_findings",
    "compare_gpu",
    "gpu_set",
    "interconnect_findings",
    "link_action",
    "predates",
]
