"""NVLink: every link the SKU has is up at its speed, and no link's errors grew in the burn.

``nvlink.links`` judges each GPU's links against the catalog: the count the board fixes
(``Sku.nvlinks``) and each link's speed as ``nvidia-smi nvlink -s`` prints it
(``Sku.nvlink_speed_gbs``). A link down, a link missing, or a link slower than the SKU's
FAILs naming the GPU and the links. SKUs without a fixed count (cards with optional
bridges, or no NVLink at all) are not judged here.

``nvlink.errors`` compares each link's CRC (flit and data), replay and recovery error
counters read before and after the burn-in (``GpuBurn.counters_before`` / ``_after``):
growth above the policy's limits FAILs naming the GPU, the link and the figures. The
counters count since the driver loaded, so one reading says nothing; only growth under
load is judged. Without a burn there is nothing to compare (``burn.run`` says so).

What to do (:func:`link_repair`, which drift uses too, so certify and drift give one
action for one fault): NVLink on an SXM baseboard runs through the module's mezzanine
connector and the baseboard's traces, with no cable or bridge a technician can reseat in
the field; a link that is down, slow or collecting errors there is fixed by the vendor (a
module or baseboard swap), so the node is drained for an RMA. On a superchip (GB200,
GH200) the links nvidia-smi lists leave the compute tray: over its rear connectors and
the rack's NVLink cable cartridges (the spine) to the NVLink switch trays, so reseating the
tray at the spine is the first step (the C2C link between Grace and the GPU is on the
module, but nvidia-smi nvlink does not list it). A PCIe card's links run over a bridge
a technician can reseat. An unknown SKU gets the milder step.
"""

from __future__ import annotations

from collections.abc import Iterable

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    gpu_finding,
    readable_gpus,
    unknown_gpu,
    why_not,
    with_action,
)
from validator.judge.policy import Policy
from validator.model import (
    Action,
    BurnStatus,
    Finding,
    GpuBurn,
    GpuFacts,
    NodeFacts,
    NvLinkErrorCounts,
    NvLinkState,
    Reason,
    Severity,
    Unavailable,
)

LINKS = "nvlink.links"
ERRORS = "nvlink.errors"

# nvidia-smi prints the speed rounded (25, 26.562, 53.125): a link within this share of
# the SKU's figure runs at it; a link trained at a lower rate is far below (half or less).
# Drift holds a link to its certified speed with the same figure.
SPEED_TOLERANCE = 0.01

# The counters judged, with the words findings use and the policy limit each takes.
_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("crc_flit", "CRC flit", "nvlink_crc_growth_max"),
    ("crc_data", "CRC data", "nvlink_crc_growth_max"),
    ("replay", "replay", "nvlink_replay_growth_max"),
    ("recovery", "recovery", "nvlink_recovery_growth_max"),
)


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge each GPU's NVLinks against the SKU, and their error counters over the burn."""
    gpus = readable_gpus(facts)
    findings: list[Finding] = []
    if sku is not None and sku.nvlinks is not None:
        findings += [_links(gpu, sku, sku.nvlinks) for gpu in gpus]
    findings += _errors(facts, gpus, policy, sku)
    return findings


def _has_nvlink(sku: Sku | None) -> bool:
    return sku is not None and sku.nvlinks is not None


def link_repair(sku: Sku | None) -> tuple[Action, str]:
    """What fixes a bad NVLink on this SKU, and why: the action and its source.

    The one answer for ``nvlink.*`` in certify and ``drift.nvlink*`` in drift (see the
    module doc): drain and RMA on an SXM baseboard, reseat first elsewhere.
    """
    form_factor = sku.form_factor if sku is not None else None
    if form_factor == "sxm":
        return (
            Action.DRAIN_RMA,
            "gpuready: NVLink on an SXM baseboard has no part to reseat in the field",
        )
    if form_factor == "superchip":
        return (
            Action.RESEAT_CABLE_RISER,
            "gpuready: a superchip's NVLinks leave the tray over the rack's NVLink cable "
            "cartridges: reseat the tray at the spine first",
        )
    return (
        Action.RESEAT_CABLE_RISER,
        "gpuready: the link leaves the board over a cable or bridge: reseat or replace it first",
    )


# Why an UNKNOWN here is "run it again": the reading failed, not the link.
RERUN_SOURCE = "gpuready: the link state or counters could not be read; read them again"


def _rerun(finding: Finding) -> Finding:
    return with_action(finding, Action.RERUN, RERUN_SOURCE)


# ---------------------------------------------------------------- nvlink.links


def _links(gpu: GpuFacts, sku: Sku, count: int) -> Finding:
    expected = _expected(sku)
    links = gpu.nvlinks
    if isinstance(links, Unavailable):
        return _rerun(unknown_gpu(LINKS, gpu, "NVLink state", links, expected=expected))
    problems = _link_problems(links, sku, count)
    if problems:
        action, source = link_repair(sku)
        active = sum(1 for link in links if link.active)
        finding = gpu_finding(
            LINKS,
            FAIL,
            gpu,
            f"GPU {gpu.index} NVLinks: {'; '.join(problems)} ({sku.label} has {sku.nvlinks}"
            f"{_at(sku)}); check nvidia-smi nvlink -s -i {gpu.index}",
            observed=f"{active} of {len(links)} up",
            expected=expected,
        )
        return with_action(finding, action, source)
    unread = [link.link for link in links if link.active and not _speed_known(link)]
    if unread and sku.nvlink_speed_gbs is not None:
        finding = gpu_finding(
            LINKS,
            UNKNOWN,
            gpu,
            f"GPU {gpu.index} has all {sku.nvlinks} NVLinks up, but the speed of "
            f"{_links_named(unread)} could not be read; run nvidia-smi nvlink -s -i {gpu.index}",
            observed=f"{len(links)} up, speed not read",
            expected=expected,
            required=False,
        )
        return _rerun(finding)
    return gpu_finding(
        LINKS,
        PASS,
        gpu,
        f"GPU {gpu.index} has all {sku.nvlinks} NVLinks up{_at(sku)}",
        observed=f"{sum(1 for link in links if link.active)} up{_at(sku)}",
        expected=expected,
    )


def _expected(sku: Sku) -> str:
    return f"{sku.nvlinks} up{_at(sku)}"


def _at(sku: Sku) -> str:
    return f" at {sku.nvlink_speed_gbs:g} GB/s" if sku.nvlink_speed_gbs is not None else ""


def _speed_known(link: NvLinkState) -> bool:
    return not isinstance(link.speed_gb_s, Unavailable)


def _link_problems(links: tuple[NvLinkState, ...], sku: Sku, count: int) -> list[str]:
    """Each way the links fall short of the SKU's ``count`` links, in words naming them."""
    problems = []
    down = [link.link for link in links if not link.active]
    if down:
        problems.append(f"{_links_named(down)} down")
    up = sum(1 for link in links if link.active)
    if up < count:
        missing = count - len(links)
        listed = f", {missing} not listed at all" if missing > 0 else ""
        problems.append(f"{up} of {count} up{listed}")
    wanted = sku.nvlink_speed_gbs
    if wanted is not None:
        slow = [
            (link.link, link.speed_gb_s)
            for link in links
            if link.active
            and isinstance(link.speed_gb_s, float)
            and link.speed_gb_s < wanted * (1 - SPEED_TOLERANCE)
        ]
        if slow:
            speeds = ", ".join(f"link {number} at {speed:g} GB/s" for number, speed in slow)
            problems.append(f"{speeds}, below {wanted:g} GB/s")
    return problems


def _links_named(numbers: Iterable[int]) -> str:
    items = sorted(numbers)
    if len(items) == 1:
        return f"link {items[0]}"
    return "links " + ", ".join(str(number) for number in items)


# ---------------------------------------------------------------- nvlink.errors


def _errors(
    facts: NodeFacts, gpus: list[GpuFacts], policy: Policy, sku: Sku | None
) -> list[Finding]:
    burn = facts.burn
    if burn is None or burn.error:
        return []  # nothing ran to compare across; burn.run says why
    readable = {gpu.index for gpu in gpus}
    findings = []
    for gpu in burn.gpus:
        if gpu.index not in readable:
            continue  # inventory reports a GPU that does not answer
        finding = _gpu_errors(gpu, policy, sku)
        if finding is not None:
            findings.append(finding)
    return findings


def _gpu_errors(gpu: GpuBurn, policy: Policy, sku: Sku | None) -> Finding | None:
    before, after = gpu.counters_before.nvlink_errors, gpu.counters_after.nvlink_errors
    if isinstance(before, Unavailable):
        return _not_compared(gpu, sku, before)
    if isinstance(after, Unavailable):
        return _not_compared(gpu, sku, after)
    return _judge_growth(gpu, before, after, policy, sku)


def _judge_growth(
    gpu: GpuBurn,
    before: tuple[NvLinkErrorCounts, ...],
    after: tuple[NvLinkErrorCounts, ...],
    policy: Policy,
    sku: Sku | None,
) -> Finding | None:
    grew, unread, compared = _growth(before, after, policy)
    if grew:
        action, source = link_repair(sku)
        finding = _burn_finding(
            FAIL,
            gpu,
            f"GPU {gpu.index} NVLink errors grew during the burn-in: {'; '.join(grew)}",
            observed="; ".join(grew),
            expected=_limits(policy),
        )
        return with_action(finding, action, source)
    if unread:
        return _rerun(
            _burn_finding(
                UNKNOWN,
                gpu,
                f"GPU {gpu.index} NVLink error counters could not be compared over the "
                f"burn-in: {'; '.join(unread)}",
                observed="; ".join(unread),
                expected=_limits(policy),
                required=_has_nvlink(sku),
            )
        )
    if not compared:
        if not _has_nvlink(sku) and not before and not after:
            return None  # no link, nothing to count
        # No link listed, or every counter one the driver does not offer: nothing compared.
        return _rerun(
            _burn_finding(
                UNKNOWN,
                gpu,
                f"GPU {gpu.index} NVLink errors could not be judged over the burn-in: "
                + (
                    "no link's counters were read"
                    if not after
                    else "the driver offers none of the CRC, replay and recovery counters"
                ),
                observed="nothing compared",
                expected=_limits(policy),
                required=_has_nvlink(sku) and not after,
            )
        )
    return _burn_finding(
        PASS,
        gpu,
        f"GPU {gpu.index} NVLink errors stayed within the limits on its {len(after)} links "
        "during the burn-in",
        observed="no growth above the limits",
        expected=_limits(policy),
    )


def _not_compared(gpu: GpuBurn, sku: Sku | None, missing: Unavailable) -> Finding | None:
    """UNKNOWN for counters not read before or after the burn; None where no link is expected."""
    if not _has_nvlink(sku):
        return None
    if gpu.status is not BurnStatus.COMPLETED:
        return None  # burn.status fails it; its counters were never the question
    offered = missing.reason is not Reason.NOT_SUPPORTED
    return _rerun(
        _burn_finding(
            UNKNOWN,
            gpu,
            f"GPU {gpu.index} NVLink error counters were not read before and after the "
            f"burn-in, so their growth cannot be judged: {why_not(missing)}",
            observed=missing,
            expected="read before and after",
            required=offered,
        )
    )


def _growth(
    before: tuple[NvLinkErrorCounts, ...], after: tuple[NvLinkErrorCounts, ...], policy: Policy
) -> tuple[list[str], list[str], int]:
    """Counters grown past their limit and counters not comparable, in words; how many compared.

    A counter the driver does not offer (NOT_SUPPORTED before or after) is neither.
    """
    old = {counts.link: counts for counts in before}
    new = {counts.link: counts for counts in after}
    grew: list[str] = []
    unread: list[str] = []
    compared = 0
    for link in sorted(set(old) | set(new)):
        if link not in old or link not in new:
            unread.append(f"link {link} read only {'after' if link in new else 'before'}")
            continue
        for name, words, limit_name in _COUNTERS:
            first, last = getattr(old[link], name), getattr(new[link], name)
            limit = getattr(policy.thresholds, limit_name)
            if isinstance(first, int) and isinstance(last, int):
                compared += 1
                if last < first:
                    unread.append(f"link {link} {words} count went back ({first} -> {last})")
                elif last - first > limit:
                    grew.append(
                        f"link {link} {words} errors +{last - first} ({first} -> {last}, "
                        f"limit {limit})"
                    )
                continue
            lacking = first if isinstance(first, Unavailable) else last
            if isinstance(lacking, Unavailable) and lacking.reason is not Reason.NOT_SUPPORTED:
                unread.append(f"link {link} {words} count: {why_not(lacking)}")
    return grew, unread, compared


def _limits(policy: Policy) -> str:
    limits = policy.thresholds
    return (
        f"growth <= {limits.nvlink_crc_growth_max} CRC (flit, data), "
        f"{limits.nvlink_replay_growth_max} replay, {limits.nvlink_recovery_growth_max} "
        "recovery per link"
    )


def _burn_finding(
    severity: Severity,
    gpu: GpuBurn,
    message: str,
    *,
    observed: object,
    expected: str,
    required: bool = True,
) -> Finding:
    return gpu_finding(
        ERRORS,
        severity,
        gpu,
        message,
        observed=observed,
        expected=expected,
        required=required,
    )


__all__ = ["ERRORS", "LINKS", "RERUN_SOURCE", "SPEED_TOLERANCE", "check", "link_repair"]
