"""Drift of the measured bandwidths, paired with :mod:`validator.judge.checks.interconnect`.

Each figure the certificate holds, against the same now. The certificate (schema 3,
:data:`~validator.certificate.BANDWIDTH_SCHEMA_VERSION`) holds each GPU's H2D, D2H and
HBM copy medians, each ordered pair's unidirectional peer copy and the node's all-reduce
busbw at its largest size. A drift run measured with ``--interconnect``
(``facts.interconnect`` set) compares each with the same figure now; without it there is
nothing to compare and this check says nothing, as a drift run without a burn-in says
nothing of speed.

Decisions:

* A figure that fell more than ``thresholds.drift_interconnect_drop`` (default 0.15)
  below the certificate is drift (FAIL), with what the certify checks would do about
  it (:func:`validator.judge.checks.interconnect_actions.figure_action`): H2D or D2H the
  riser, HBM the chip, a pair its links (the fabric manager first where a GPU's NVSwitch
  registration is not completed now), the all-reduce the links where pairs fell too, the
  NVSwitch fabric only where every certified pair held, and the links first where the
  pairs were not compared (not measured now, busy, none certified), as
  ``interconnect.all_reduce`` says.
* An all-reduce with wrong elements now (at a size, or counted over the whole run:
  ``AllReduce.wrong``) is corruption: FAIL, drain and RMA, its busbw not compared.
* Pairs are diagnosed by row and column, as ``interconnect.p2p`` does: a GPU whose
  copies to and from most of its certified peers fell is one finding for that GPU (its
  links); most GPUs so, one finding for the node's fabric; the rest pair by pair (both
  directions of a pair in one finding). A pair certified with peer access that has
  none now is drift too.
* A fall measured while the GPU was busy (the idle gate gave up) may be that: UNKNOWN,
  required, never FAIL.
* A certified figure not measured now is UNKNOWN: required when the measurement failed
  (an error, a lost GPU, no time left), not required when nobody asked for it
  (``Reason.NOT_MEASURED``: a bundle without that file, peers or all-reduce turned off),
  as ``drift.dcgm`` treats a test that did not run against one absent from a lower
  level. The measurement failing as a whole (``Interconnect.error``) is one required
  UNKNOWN.
* A GPU swapped or removed since is left to its own finding (``drift.gpu_swapped``,
  ``drift.gpu_removed``): its figures and its pairs are not compared.
* A certificate older than the bandwidth figures (schema 2 or 1), or one issued without
  them (not measured at certification), is no baseline: one UNKNOWN that does not block,
  where something was measured now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from validator.certificate import (
    BANDWIDTH_SCHEMA_VERSION,
    Certificate,
    CertifiedAllReduce,
    CertifiedPeer,
)
from validator.drift.drift_helpers import DriftInputs, Pair
from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    GpuRef,
    gpu_finding,
    node_finding,
    why_not,
    with_action,
)
from validator.judge.checks.interconnect import CORRUPTION_SOURCE
from validator.judge.checks.interconnect_actions import PeerCopies, figure_action, peer_copies
from validator.judge.checks.interconnect_figures import (
    figure_of,
    gbs,
    majority_of_peers,
    pairs_words,
    partners_of,
    span,
)
from validator.judge.fleet import FIGURES
from validator.model import (
    Action,
    AllReduce,
    AllReducePoint,
    CheckFamily,
    DriftCheck,
    Finding,
    GpuCopyBandwidth,
    GpuFacts,
    Interconnect,
    Measured,
    PeerBandwidth,
    Reason,
    Unavailable,
    measured_gb_s,
)
from validator.safe_text import size_words

FAMILY = CheckFamily.INTERCONNECT
CHECK = DriftCheck.INTERCONNECT
COPIES = ("h2d", "d2h", "hbm")
Link = tuple[int, int]  # (src, dst) NVML indices now


@dataclass(frozen=True)
class _Context:
    """What every comparison needs: the share a figure may fall, the SKU, the busy GPUs."""

    drop: float
    sku: Sku | None
    busy: frozenset[int]
    gpus: tuple[GpuFacts, ...]

    def floor(self, was: float) -> float:
        """The least a figure certified at ``was`` may measure now."""
        return was * (1.0 - self.drop)

    def expected(self, was: float) -> str:
        """The expected words of a figure certified at ``was``."""
        return f">= {gbs(self.floor(was))} ({gbs(was)} certified, -{self.drop:.0%})"


def _share(now: float, was: float) -> str:
    return f"{now / was:.0%} of the certified {gbs(was)}"


def _required(why: Unavailable) -> bool:
    """A figure missing for a failure blocks; one nobody asked for (NOT_MEASURED) does not."""
    return why.reason is not Reason.NOT_MEASURED


def _measured_now(interconnect: Interconnect) -> bool:
    """True when some part of the interconnect was measured now."""
    parts: tuple[Measured[object], ...] = (
        interconnect.gpus,
        interconnect.peers,
        interconnect.all_reduce,
    )
    return interconnect.error is None and any(not isinstance(part, Unavailable) for part in parts)


def _no_baseline(cert: Certificate) -> Finding:
    if not cert.holds_bandwidth:
        text = (
            f"The {cert.label} predates drift's bandwidth check (certificate schema "
            f"{cert.schema_version}): not compared; certify the node again to record it"
        )
        observed = f"certificate schema {cert.schema_version}"
        expected = f"certificate schema {BANDWIDTH_SCHEMA_VERSION} or newer"
    else:
        text = (
            "The interconnect was measured now, but the certificate holds no bandwidth "
            "figure (not measured when the node was certified): nothing to compare with"
        )
        observed, expected = "no certified figure", "bandwidth figures in the certificate"
    return node_finding(CHECK, UNKNOWN, text, observed=observed, expected=expected, required=False)


def _part_unmeasured(what: str, why: Unavailable, certified: int) -> Finding:
    return node_finding(
        CHECK,
        UNKNOWN,
        f"{what} not measured now: {why_not(why)}; the {certified} certified figures are "
        "not compared",
        observed=why_not(why),
        expected=f"{certified} figures as certified",
        required=_required(why),
    )


# ------------------------------------------------------------------ per GPU


def _copy_figure(
    figure: str, was: float, now: GpuCopyBandwidth | None, gpu: GpuFacts, context: _Context
) -> Finding | None:
    """One certified copy figure against now; None when it is as certified."""
    name = FIGURES[figure]
    expected = context.expected(was)
    value = (
        figure_of(getattr(now, figure))
        if now is not None
        else Unavailable(Reason.ERROR, "the GPU is missing from the measurement")
    )
    if isinstance(value, Unavailable):
        return _unmeasured(gpu, f"{name} was certified at {gbs(was)}", value, expected)
    if value >= context.floor(was):
        return None
    text = f"GPU {gpu.index}: {name} {gbs(value)}, {_share(value, was)}"
    if gpu.index in context.busy:
        return gpu_finding(
            CHECK,
            UNKNOWN,
            gpu,
            f"{text}, but the GPU was busy when measured: measure it again with it idle",
            observed=f"{name} {gbs(value)} (busy)",
            expected=expected,
        )
    finding = gpu_finding(
        CHECK,
        FAIL,
        gpu,
        f"{text} (more than {context.drop:.0%} below)",
        observed=f"{name} {gbs(value)}",
        expected=expected,
    )
    return with_action(finding, *figure_action(figure, context.sku, context.gpus))


def _unmeasured(gpu: GpuFacts, certified: str, why: Unavailable, expected: str) -> Finding:
    return gpu_finding(
        CHECK,
        UNKNOWN,
        gpu,
        f"GPU {gpu.index}: {certified} and was not measured now: {why_not(why)}",
        observed=why_not(why),
        expected=expected,
        required=_required(why),
    )


def _copies_kept(
    gpu: GpuFacts, figures: Sequence[str], now: GpuCopyBandwidth, context: _Context
) -> Finding:
    """The PASS of a GPU whose every certified copy figure holds."""
    words = ", ".join(
        f"{FIGURES[figure]} {gbs(measured_gb_s(getattr(now, figure)) or 0.0)}" for figure in figures
    )
    return gpu_finding(
        CHECK,
        PASS,
        gpu,
        f"GPU {gpu.index}: {words} within {context.drop:.0%} of the certificate",
        observed=words,
        expected=f"within {context.drop:.0%} of the certified figures",
    )


def _copy_drift(
    pairs: Sequence[Pair], interconnect: Interconnect, context: _Context
) -> list[Finding]:
    """Each GPU's certified H2D, D2H and HBM against now: its drifts, else one PASS."""
    certified = [
        (
            gpu,
            [
                (figure, value)
                for figure in COPIES
                if (value := getattr(was, f"{figure}_gb_s")) is not None
            ],
        )
        for was, gpu in pairs
    ]
    certified = [(gpu, figures) for gpu, figures in certified if figures]
    if not certified:
        return []
    if isinstance(interconnect.gpus, Unavailable):
        total = sum(len(figures) for _, figures in certified)
        return [_part_unmeasured("The GPUs' copies were", interconnect.gpus, total)]
    now = {copy.index: copy for copy in interconnect.gpus}
    findings: list[Finding] = []
    for gpu, figures in certified:
        copy = now.get(gpu.index)
        found = [_copy_figure(figure, value, copy, gpu, context) for figure, value in figures]
        moved = [finding for finding in found if finding is not None]
        if moved or copy is None:
            findings += moved
        else:
            findings.append(_copies_kept(gpu, [figure for figure, _ in figures], copy, context))
    return findings


# ------------------------------------------------------------------ pairs


@dataclass(frozen=True)
class _Fallen:
    """A certified pair that fell: its figure now (None: peer access lost) and certified."""

    now: float | None
    was: float


def _now_links(cert: Certificate, pairs: Sequence[Pair]) -> dict[Link, CertifiedPeer]:
    """Each certified pair by its two GPUs' indices now, both boards as certified.

    A pair is named by its GPUs' UUIDs where the certificate has them, else by index;
    a pair with a GPU swapped or gone since is left out (its own finding says so).
    """
    by_uuid = {was.uuid: gpu.index for was, gpu in pairs if was.uuid is not None}
    indexes = {gpu.index for _, gpu in pairs}

    def now_index(index: int, uuid: str | None) -> int | None:
        if uuid is not None:
            return by_uuid.get(uuid)
        return index if index in indexes else None

    links: dict[Link, CertifiedPeer] = {}
    for peer in cert.peers or ():
        src, dst = now_index(peer.src, peer.src_uuid), now_index(peer.dst, peer.dst_uuid)
        if src is not None and dst is not None:
            links[(src, dst)] = peer
    return links


def _fallen_words(links: Sequence[Link], fallen: dict[Link, _Fallen]) -> str:
    """What ``links`` measure now against the certificate, in words."""
    measured = [fallen[link] for link in links if fallen[link].now is not None]
    lost = [fallen[link] for link in links if fallen[link].now is None]
    parts = []
    if measured:
        now = [pair.now for pair in measured if pair.now is not None]
        shares = [pair.now / pair.was for pair in measured if pair.now is not None]
        parts.append(
            f"{span(now)}, {span(shares, lambda share: f'{share:.0%}')} of the certified "
            f"{span(pair.was for pair in measured)}"
        )
    if lost:
        parts.append(
            f"no peer access now on {len(lost)} (certified at {span(p.was for p in lost)})"
        )
    return "; ".join(parts)


def _fallen_observed(links: Sequence[Link], fallen: dict[Link, _Fallen]) -> str:
    def now(link: Link) -> str:
        value = fallen[link].now
        return "no peer access" if value is None else gbs(value)

    if len(links) <= 2:
        return "; ".join(f"{pairs_words([link])} {now(link)}" for link in links)
    measured = [value for link in links if (value := fallen[link].now) is not None]
    lost = len(links) - len(measured)
    words = [f"{span(measured)} on {len(measured)} pairs"] if measured else []
    words += [f"no peer access on {lost}"] if lost else []
    return "; ".join(words)


def _fallen_finding(
    where: GpuRef | None,
    text: str,
    links: Sequence[Link],
    fallen: dict[Link, _Fallen],
    context: _Context,
) -> Finding:
    """One finding for ``links`` that fell: UNKNOWN where a GPU of theirs was busy."""
    ends = sorted({index for link in links for index in link})
    observed = _fallen_observed(links, fallen)
    expected = f"within {context.drop:.0%} of each certified pair"
    busy = sorted(context.busy.intersection(ends))
    measured_low = all(fallen[link].now is not None for link in links)
    action = None
    if busy and measured_low:
        gpus = ", ".join(str(index) for index in busy)
        severity = UNKNOWN
        text = f"{text}; but GPU {gpus} was busy when measured: measure again with it idle"
    else:
        severity = FAIL
        action = figure_action("p2p", context.sku, [g for g in context.gpus if g.index in ends])
    finding = gpu_finding(CHECK, severity, where, text, observed=observed, expected=expected)
    return finding if action is None else with_action(finding, *action)


def _diagnosed(
    fallen: dict[Link, _Fallen], certified: Sequence[Link], context: _Context
) -> list[Finding]:
    """Findings for the pairs that fell, by GPU (row and column), node, or pair."""
    below = f"more than {context.drop:.0%} below the certificate"
    gpus = {gpu.index: gpu for gpu in context.gpus}
    indexes = sorted({index for link in certified for index in link})
    slow = [g for g in indexes if majority_of_peers(g, fallen, certified)]
    if len(slow) * 2 > len(indexes):
        links = sorted(fallen)
        text = (
            f"P2P fell on {len(fallen)} of the {len(certified)} certified GPU pairs, across "
            f"the node ({below}): {_fallen_words(links, fallen)}: the links the pairs share"
        )
        return [_fallen_finding(None, text, links, fallen, context)]
    findings: list[Finding] = []
    taken: set[Link] = set()
    for index in slow:
        mine = sorted(link for link in fallen if index in link and link not in taken)
        if not mine:  # the slow GPUs before it named all its links, as the check's do
            continue
        taken.update(mine)
        peers = partners_of(index, mine)
        others = partners_of(index, [link for link in certified if index in link])
        count = f"all {len(others)}" if peers == others else f"{len(peers)} of the {len(others)}"
        text = (
            f"GPU {index}: P2P to and from {count} of its peers fell ({below}): "
            f"{_fallen_words(mine, fallen)}: its links"
        )
        findings.append(_fallen_finding(gpus.get(index), text, mine, fallen, context))
    by_pair: dict[Link, list[Link]] = {}
    for link in sorted(set(fallen) - taken):
        by_pair.setdefault((min(link), max(link)), []).append(link)
    for group in by_pair.values():
        both = " both ways" if len(group) == 2 else ""
        text = f"P2P {pairs_words(group)}{both} fell ({below}): {_fallen_words(group, fallen)}"
        findings.append(_fallen_finding(None, text, group, fallen, context))
    return findings


def _peer_drift(
    cert: Certificate, pairs: Sequence[Pair], interconnect: Interconnect, context: _Context
) -> list[Finding]:
    """The certified pairs' findings (what they say explains a slow all-reduce or not)."""
    links = _now_links(cert, pairs)
    if not links:
        return []
    if isinstance(interconnect.peers, Unavailable):
        return [_part_unmeasured("The GPU pairs' copies were", interconnect.peers, len(links))]
    now: dict[Link, PeerBandwidth] = {(p.src, p.dst): p for p in interconnect.peers}
    fallen: dict[Link, _Fallen] = {}
    unmeasured: list[tuple[Link, Unavailable]] = []
    for link, peer in sorted(links.items()):
        was = peer.unidirectional_gb_s
        current = now.get(link)
        if current is None:
            unmeasured.append((link, Unavailable(Reason.ERROR, "missing from the measurement")))
        elif current.access is False:
            fallen[link] = _Fallen(None, was)
        elif isinstance(current.access, Unavailable):
            unmeasured.append((link, current.access))
        elif isinstance(value := figure_of(current.unidirectional), Unavailable):
            unmeasured.append((link, value))
        elif value < context.floor(was):
            fallen[link] = _Fallen(value, was)
    findings = _diagnosed(fallen, sorted(links), context) if fallen else []
    findings += _pairs_unmeasured(unmeasured)
    if not findings:
        findings.append(
            node_finding(
                CHECK,
                PASS,
                f"P2P of the {len(links)} certified GPU pairs within {context.drop:.0%} of the "
                "certificate",
                observed=f"{len(links)} pairs",
                expected=f"within {context.drop:.0%} of each certified pair",
            )
        )
    return findings


def _pairs_unmeasured(unmeasured: Sequence[tuple[Link, Unavailable]]) -> list[Finding]:
    """One UNKNOWN for the certified pairs not measured now; required if one failed."""
    if not unmeasured:
        return []
    words = "; ".join(f"{pairs_words([link])}: {why_not(why)}" for link, why in unmeasured)
    return [
        node_finding(
            CHECK,
            UNKNOWN,
            f"P2P of {len(unmeasured)} certified GPU pairs was not measured now: {words}",
            observed=words,
            expected="each certified pair measured",
            required=any(_required(why) for _, why in unmeasured),
        )
    ]


# ------------------------------------------------------------------ all-reduce


def _all_reduce_drift(
    was: CertifiedAllReduce, interconnect: Interconnect, context: _Context, peers: PeerCopies
) -> Finding:
    """The all-reduce at its certified size and rank count, against its certified busbw."""
    size = size_words(was.size_bytes)
    at = f"at {size} over {was.ranks} GPUs"
    run = interconnect.all_reduce
    if isinstance(run, Unavailable):
        return _part_unmeasured(f"The all-reduce {at} was", run, 1)
    if isinstance(run.points, Unavailable):
        return _part_unmeasured(f"The all-reduce {at} was", run.points, 1)
    if run.ranks != was.ranks:
        return node_finding(
            CHECK,
            UNKNOWN,
            f"The all-reduce ran over {run.ranks} GPUs now, {was.ranks} when certified: "
            "not compared",
            observed=f"{run.ranks} GPUs",
            expected=f"{was.ranks} GPUs",
            required=False,
        )
    # A sum with wrong elements is corruption whatever its speed, and no speed to compare;
    # old nccl-tests count them only over the whole run (AllReduce.wrong).
    wrong = (run.wrong or 0) + sum(point.wrong or 0 for point in run.points)
    if wrong > 0:
        finding = node_finding(
            CHECK,
            FAIL,
            f"The all-reduce over {run.ranks} GPUs returned {wrong} wrong elements now: "
            "data corruption on a GPU or on the links between them",
            observed=f"{wrong} wrong",
            expected="0 wrong",
        )
        return with_action(finding, Action.DRAIN_RMA, CORRUPTION_SOURCE)
    return _busbw_drift(was, run, run.points, context, peers)


# Why a slow all-reduce is slow, from what the certified pairs say now.
_CAUSES = {
    PeerCopies.FAILED: "the pairs that fell explain it",
    PeerCopies.AT_SPEED: "the fabric the GPUs share",
    PeerCopies.NOT_JUDGED: "the pairs were not compared now, so the links or the fabric",
}


def _busbw_drift(
    was: CertifiedAllReduce,
    run: AllReduce,
    points: Sequence[AllReducePoint],
    context: _Context,
    peers: PeerCopies,
) -> Finding:
    size = size_words(was.size_bytes)
    at = f"at {size} over {was.ranks} GPUs"
    expected = context.expected(was.busbw_gb_s)
    point = next((p for p in points if p.size_bytes == was.size_bytes), None)
    if point is None:
        why = Unavailable(Reason.ERROR, f"the sweep now has no {size} message")
        return _part_unmeasured(f"The all-reduce {at} was", why, 1)
    busbw = point.busbw_gb_s
    if busbw >= context.floor(was.busbw_gb_s):
        return node_finding(
            CHECK,
            PASS,
            f"All-reduce busbw {gbs(busbw)} {at}, within {context.drop:.0%} of the certified "
            f"{gbs(was.busbw_gb_s)}",
            observed=gbs(busbw),
            expected=expected,
        )
    text = f"All-reduce busbw {gbs(busbw)} {at}, {_share(busbw, was.busbw_gb_s)}"
    ranks = set(run.gpu_indices) or {gpu.index for gpu in context.gpus}
    if ranks & context.busy:
        return node_finding(
            CHECK,
            UNKNOWN,
            f"{text}, but a GPU was busy when measured: measure it again with the GPUs idle",
            observed=f"{gbs(busbw)} (busy)",
            expected=expected,
        )
    finding = node_finding(
        CHECK,
        FAIL,
        f"{text} (more than {context.drop:.0%} below): {_CAUSES[peers]}",
        observed=gbs(busbw),
        expected=expected,
    )
    return with_action(finding, *figure_action("all_reduce", context.sku, context.gpus, peers))


# ------------------------------------------------------------------ the check


def compare_interconnect(inputs: DriftInputs) -> list[Finding]:
    """Every certified bandwidth figure of the paired GPUs against the same now.

    Args:
        inputs: the verified baseline; the facts now (nothing is said without
            ``facts.interconnect``); the GPUs certified and the same boards now
            (:func:`~validator.drift.inventory_drift.gpu_set`); the policy, whose
            ``thresholds.drift_interconnect_drop`` is read; and the certified SKU's catalog
            row, as drift reads it for the screen (None: a SKU this catalog does not know,
            the milder repair).

    Returns:
        ``drift.interconnect`` findings (see the module doc).
    """
    cert, pairs, interconnect = inputs.cert, inputs.pairs, inputs.facts.interconnect
    if interconnect is None:
        return []  # not measured this time: nothing to compare
    if not cert.holds_bandwidth or cert.bandwidth_figures == 0:
        return [_no_baseline(cert)] if _measured_now(interconnect) else []
    if interconnect.error is not None:
        return [
            node_finding(
                CHECK,
                UNKNOWN,
                f"The interconnect could not be measured now: {interconnect.error}; the "
                f"{cert.bandwidth_figures} certified bandwidth figures are not compared",
                observed=interconnect.error,
                expected=f"{cert.bandwidth_figures} figures as certified",
            )
        ]
    context = _Context(
        drop=inputs.policy.thresholds.drift_interconnect_drop,
        sku=inputs.sku,
        busy=frozenset(interconnect.busy_gpus),
        gpus=tuple(gpu for _, gpu in pairs),
    )
    findings = _copy_drift(pairs, interconnect, context)
    peers = _peer_drift(cert, pairs, interconnect, context)
    findings += peers
    if cert.all_reduce is not None:
        said = peer_copies(peers, CHECK, CHECK)
        findings.append(_all_reduce_drift(cert.all_reduce, interconnect, context, said))
    return findings


__all__ = ["FAMILY", "compare_interconnect"]
