"""Drift of the NVLinks, paired with :mod:`validator.judge.checks.nvlink`.

Certificate schema 2 holds each GPU's links and their error counters; an older
certificate predates them: one note per check, not blocking.

* A link active at certification that is down, missing or slower now (beyond the judge's
  :data:`~validator.judge.checks.nvlink.SPEED_TOLERANCE`) is drift (``drift.nvlink``);
  the action is the judge's for the same fault
  (:func:`validator.judge.checks.nvlink.link_repair`, by the certified SKU): drain and RMA
  on an SXM baseboard, reseat the tray or the bridge elsewhere.
* NVLink CRC flit and data, replay and recovery counters drift when they grew since
  certification beyond the policy's growth limits (the same figures as during the
  burn-in: the whole time since certification is held to them). The certified totals are
  those after the certification burn-in, whose own errors certify judged already
  (:mod:`validator.certificate`). A total below the certified one was reset
  (:func:`validator.drift.drift_helpers.growth`).
"""

from __future__ import annotations

from collections.abc import Sequence

from validator.certificate import CertifiedGpu, CertifiedLink, CertifiedLinkErrors
from validator.drift.drift_helpers import (
    DriftInputs,
    PredatedCheck,
    Reading,
    acted,
    growth,
    has,
    no_baseline,
    predated,
)
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    gpu_finding,
    unknown_gpu,
    why_not,
)
from validator.judge.checks.nvlink import SPEED_TOLERANCE, link_repair
from validator.judge.policy import Policy
from validator.model import (
    CheckFamily,
    DriftCheck,
    Finding,
    GpuFacts,
    NvLinkErrorCounts,
    NvLinkState,
    Reason,
    Unavailable,
)

FAMILY = CheckFamily.NVLINK
# A link is held to its certified speed with the judge's tolerance for the SKU's.
LINK_SPEED_TOLERANCE = SPEED_TOLERANCE
# What schema 2 added, by check: a schema-1 certificate predates them.
_PREDATES: tuple[PredatedCheck, ...] = (
    (DriftCheck.NVLINK, "NVLink state", lambda gpu: has(gpu.nvlinks)),
    (DriftCheck.NVLINK_ERRORS, "NVLink error counters", lambda gpu: has(gpu.nvlink_errors)),
)


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
        return no_baseline(check, gpu, "NVLink state", f"{len(now)} links")
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
        return no_baseline(check, gpu, "NVLink error counters", f"{len(now)} links")
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
    return growth(check, gpu, "NVLink error counters", counters, expected)


def compare_nvlink(inputs: DriftInputs) -> list[Finding]:
    """Each paired GPU's links (up and as fast as certified), and their error counters."""
    if not inputs.cert.holds_interconnect:
        return predated(inputs, _PREDATES)
    # Certify's answer for the certified SKU; one this catalog does not know (None) gets
    # the judge's answer for no SKU, the milder step.
    action = link_repair(inputs.sku)
    findings: list[Finding] = []
    for was, gpu in inputs.pairs:
        links = (_nvlinks(was, gpu), _nvlink_errors(was, gpu, inputs.policy))
        findings += [acted(finding, action) for finding in links if finding is not None]
    return findings


__all__ = ["FAMILY", "LINK_SPEED_TOLERANCE", "compare_nvlink"]
