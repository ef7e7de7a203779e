"""Interconnect: what joins the GPUs copies as fast as the SKU's, and as fast as its siblings.

Checks (``facts.interconnect``, measured after the burn-in or read from a bundle):

* ``interconnect.h2d`` / ``interconnect.d2h`` / ``interconnect.hbm``, per GPU: pinned host
  memory to the GPU and back over PCIe, and a copy within the GPU's own memory;
* ``interconnect.peer_access``: every ordered pair of GPUs can reach each other directly
  (required where the SKU joins its GPUs by NVLink);
* ``interconnect.p2p``: each pair's one-direction copy bandwidth, diagnosed by row and
  column: a GPU slow to most of its peers, as source and as destination, is one finding
  for that GPU (its links), not one per pair; a pair slow on its own is that pair;
* ``interconnect.all_reduce``: NCCL all-reduce over every GPU of the node, busbw at the
  largest size measured, which must be 1 GiB or more (smaller sizes have not reached the
  plateau), and no wrong element (per size, or counted over the whole run);
* ``interconnect.run``: the interconnect could not be measured, or was not measured where
  it is required (:func:`interconnect_required`).

Each figure is held to a floor, the policy's threshold where set, else the catalog's
(``Sku.*_min_gbs``), and to the node's own median: a GPU or pair below
``interconnect_sibling_min`` of the median fails even above the floor. A median needs
:data:`MIN_SIBLINGS` figures to mean something: with two, their median is their mean,
which a slow one drags down and which cannot tell the slow one from the fast one, so two
GPUs are judged against the floor alone (and say so). Without a floor and without a
median nothing judges a figure: UNKNOWN, not blocking, naming the policy key to set.
Peer copies are held to their median only where every pair crosses one fabric (an
NVSwitch, or a superchip's NVLink switch trays); elsewhere (PCIe switches, bridges, a
partial mesh) pairs differ by design and only a floor judges them.

A GPU the idle gate found still busy (``Interconnect.busy_gpus``) may be slow for that
reason: its low figure, and a low pair touching it, is UNKNOWN (measure again with it
idle), never a FAIL, and neither is in the node median, so a busy GPU does not lower the
bar for its siblings. Simulated figures are judged like measured ones.

The all-reduce must cover every GPU that answered (a bundle's ``all_reduce_perf -g 2``
on an 8-GPU node says nothing of the other six): else UNKNOWN. Where neither the policy
nor the catalog has a floor for its GPU count and the GPUs share an NVSwitch, busbw is
held to :data:`DERIVED_ALL_REDUCE_SHARE` of the node's own median peer copy: a healthy
NVSwitch all-reduces at 0.9x (without NVLink SHARP) to 1.2x (with it) its one-direction
peer bandwidth, a degraded one well below.

What to do: a slow host copy is the GPU's PCIe path: reseat or replace the riser or cable
(the message names a link trained below the SKU's); slow HBM is the chip (drain and RMA);
a GPU slow to every peer, or without peer access, is its NVLinks, fixed as
:func:`~validator.judge.checks.nvlink.link_repair` says for the board; all-reduce slow
while every pair copies at speed is the NVSwitch fabric: the fabric manager where a GPU's
registration is not completed, else the baseboard; a wrong all-reduce result is data
corruption (drain and RMA).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    gpu_finding,
    gpu_list,
    node_finding,
    readable_gpus,
    why_not,
    with_action,
)
from validator.judge.checks.interconnect_actions import (
    BASEBOARD_SOURCE,
    FABRIC_SOURCE,
    HBM_SOURCE,
    PCIE_SOURCE,
    PeerCopies,
    all_reduce_action,
    fabric_unfinished,
    peer_copies,
)
from validator.judge.checks.interconnect_figures import (
    Pair,
    figure_of,
    gbs,
    majority_of_peers,
    pairs_words,
    partners_of,
    span,
)
from validator.judge.checks.nvlink import link_repair
from validator.judge.policy import Policy
from validator.model import (
    Action,
    AllReduce,
    AllReducePoint,
    Finding,
    GpuCopyBandwidth,
    GpuFacts,
    Interconnect,
    Measured,
    NodeFacts,
    PeerBandwidth,
    Reason,
    Unavailable,
    measured_gb_s,
)
from validator.safe_text import size_words

RUN = "interconnect.run"
H2D = "interconnect.h2d"
D2H = "interconnect.d2h"
HBM = "interconnect.hbm"
PEER_ACCESS = "interconnect.peer_access"
P2P = "interconnect.p2p"
ALL_REDUCE = "interconnect.all_reduce"

# Fewer figures than this make no median worth the name (see the module doc).
MIN_SIBLINGS = 3
# busbw is judged from 1 GiB: below it the sweep has not reached its plateau (the 8x A100
# capture: 202 GB/s at 128 MiB, 230 at 1 GiB, 235 at 8 GiB).
MIN_ALL_REDUCE_BYTES = 1 << 30
# Busbw floor on an NVSwitch without one for the GPU count: this share of the node's median
# one-direction peer copy. Healthy 8x H100: busbw ~477 GB/s against P2P ~395 (1.2x, NVLink
# SHARP), ~0.9x without it; a degraded NVSwitch (~200 GB/s) falls well below 0.75x.
DERIVED_ALL_REDUCE_SHARE = 0.75

RERUN_SOURCE = "gpuready: the interconnect could not be measured; measure it again"
BUSY_SOURCE = "gpuready: the GPU was busy when measured; measure it again with the GPU idle"
CORRUPTION_SOURCE = "gpuready: NCCL all-reduce returned wrong values: data corruption"

# Libraries the measurement found missing, as the finders say so ("<name> not found"),
# and how to install them. The name alone decides nothing: every CUDA error the
# measurement reports names the runtime that did load.
_MISSING_LIBRARIES: tuple[tuple[str, str], ...] = (
    ("libnccl.so.2 not found", "install NCCL (gpuready provision installs it with the nccl role)"),
    ("libcudart", "install the CUDA runtime (gpuready provision, the cuda_toolkit role)"),
)
# CUDA runtime statuses (cudaError_t, "(status N)" in the measurement's errors), the
# closest to a working GPU first: several runtimes may have been tried, and the one that
# reached the driver tells most. Each: the advice and its action.
_CUDA_STATUSES: tuple[tuple[int, str, Action], ...] = (
    (
        100,  # cudaErrorNoDevice
        "CUDA sees no GPU although the driver lists them: check CUDA_VISIBLE_DEVICES and "
        "that the driver is loaded (nvidia-smi), then reboot",
        Action.REBOOT,
    ),
    (
        3,  # cudaErrorInitializationError
        "CUDA could not initialise the driver: reboot",
        Action.REBOOT,
    ),
    (
        999,  # cudaErrorUnknown
        "CUDA failed in the driver: reboot",
        Action.REBOOT,
    ),
    (
        35,  # cudaErrorInsufficientDriver
        "the NVIDIA driver is older than the CUDA runtime: install a driver for it, or a "
        "runtime the driver supports (gpuready provision pins both)",
        Action.FIX_SOFTWARE,
    ),
    (
        34,  # cudaErrorStubLibrary
        "libcuda.so is the CUDA toolkit's stub, not the driver's: install the NVIDIA driver's "
        "CUDA library (gpuready provision) and keep the stubs off the loader's path",
        Action.FIX_SOFTWARE,
    ),
)
# A CUDA runtime call's failure ("cudaGetDeviceCount failed: ... (status 100)"); NCCL's
# own ("ncclAllReduce failed: ... (status 3)") numbers another enum.
_STATUS = re.compile(r"\bcuda\w+ failed: [^;]*?\(status (-?\d+)\)")


def interconnect_required(policy: Policy, sku: Sku | None, facts: NodeFacts) -> bool:
    """Whether the interconnect must be measured for the node to be certified.

    ``interconnect: true`` always, ``false`` never; left unset (None), where two or more
    GPUs of a SKU joined by NVLink on the board (the catalog's ``nvlinks`` is set) have
    something between them to measure. It is the agent's ``--interconnect auto`` rule
    (:func:`validator.node.bandwidth.wanted`) seen from the catalog: a node of one GPU
    (a 1x H100 SXM cloud instance) is neither measured nor required.
    """
    if policy.interconnect is not None:
        return policy.interconnect
    return sku is not None and sku.nvlinks is not None and len(facts.gpus) >= 2


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge the node's host, HBM and peer copies and its all-reduce; see the module doc."""
    measured = facts.interconnect
    required = interconnect_required(policy, sku, facts)
    if measured is None:
        return [_not_measured(policy, sku)] if required else []
    if measured.error:
        return [_could_not_run(measured.error, required)]
    node = _Node.of(facts, measured, policy, sku, required)
    findings = _copies(node, measured)
    peers = _peers(node, measured)
    return findings + peers + _all_reduce(node, measured, peers)


# ---------------------------------------------------------------- the node and its bars


@dataclass(frozen=True)
class _Node:
    """What every part of the check needs to know about the node being judged."""

    facts: NodeFacts
    policy: Policy
    sku: Sku | None
    required: bool
    gpus: tuple[GpuFacts, ...]  # the GPUs that answered, which the figures are judged for
    busy: frozenset[int]

    @classmethod
    def of(
        cls,
        facts: NodeFacts,
        measured: Interconnect,
        policy: Policy,
        sku: Sku | None,
        required: bool,
    ) -> _Node:
        return cls(
            facts,
            policy,
            sku,
            required,
            tuple(readable_gpus(facts)),
            frozenset(measured.busy_gpus),
        )

    @property
    def indexes(self) -> list[int]:
        return [gpu.index for gpu in self.gpus]

    def gpu(self, index: int) -> GpuFacts:
        return next(gpu for gpu in self.gpus if gpu.index == index)

    def floor(self, policy_value: float | None, sku_value: float | None) -> _Floor:
        """The policy's floor where set, else the catalog's, else none (and why)."""
        if policy_value is not None:
            return _Floor(policy_value, "the policy")
        if self.sku is None:
            return _Floor(None, "the GPU model is not in the catalog")
        if sku_value is not None:
            return _Floor(sku_value, self.sku.label)
        return _Floor(None, self.sku.label)

    def no_floor_words(self, floor: _Floor) -> str:
        if self.sku is None:
            return f"no floor is known: {floor.origin}"
        return f"no floor is known for {self.sku.label}"


@dataclass(frozen=True)
class _Floor:
    value: float | None
    origin: str  # the policy / the SKU's label / why there is none / how it was derived
    derived: bool = False  # from the node's own figures, not from the policy or catalog


@dataclass(frozen=True)
class _Bar:
    """What one kind of figure is held to: a floor, and a share of the node's median."""

    floor: _Floor
    median: float | None  # None: no median judges (why_no_median says why)
    share: float
    count: int  # how many figures the median is of
    why_no_median: str = ""

    @classmethod
    def of(cls, floor: _Floor, values: Sequence[float], share: float, *, siblings: bool) -> _Bar:
        """The bar for ``values``; ``siblings`` False: they differ by design, no median."""
        if not siblings:
            return cls(floor, None, share, len(values), "pairs that differ by design")
        if len(values) < MIN_SIBLINGS:
            too_few = f"{_count(len(values), 'figure')}, too few for a node median"
            return cls(floor, None, share, len(values), too_few)
        return cls(floor, statistics.median(values), share, len(values))

    @property
    def judges(self) -> bool:
        return self.floor.value is not None or self.median is not None

    def shortfalls(self, value: float) -> list[str]:
        """How ``value`` falls short, in words; empty when it meets the bar."""
        found = []
        if self.floor.value is not None and value < self.floor.value:
            found.append(f"below the floor of {self.floor.value:g} GB/s")
        if self.median is not None and value < self.share * self.median:
            found.append(f"below {self.share:.0%} of the node median {gbs(self.median)}")
        return found

    def context(self, shortfalls: Sequence[str], no_floor: str) -> str:
        """The part of the bar the shortfall did not name, for the parentheses."""
        parts = []
        if self.floor.value is None:
            parts.append(no_floor)
        elif not any(s.startswith("below the floor") for s in shortfalls):
            parts.append(f"floor {self.floor.value:g} GB/s")
        if self.median is None:
            parts.append(self.why_no_median)
        elif not any("node median" in s for s in shortfalls):
            parts.append(f"node median {gbs(self.median)}")
        return ", ".join(parts)

    def expected(self) -> str:
        parts = []
        if self.floor.value is not None:
            parts.append(f">= {self.floor.value:g} GB/s ({self.floor.origin})")
        if self.median is not None:
            parts.append(f">= {self.share:.0%} of the node median ({gbs(self.median)})")
        return " and ".join(parts) or "a floor, or three figures for a node median"


def _count(count: int, noun: str) -> str:
    """'1 figure', '2 figures'."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _aside(text: str) -> str:
    """' (text)', or nothing for no text."""
    return f" ({text})" if text else ""


def _busy_words(indexes: Iterable[int]) -> str:
    named = gpu_list(indexes)
    verb = "was" if named.startswith("GPU ") else "were"
    return f"{named} {verb} still busy when measured (the idle gate gave up waiting)"


# ---------------------------------------------------------------- interconnect.run


def _not_measured(policy: Policy, sku: Sku | None) -> Finding:
    if policy.interconnect:
        why = "the policy asks for it (interconnect: true)"
    else:
        label = sku.label if sku is not None else "these"
        why = f"{label} GPUs are joined by NVLink, so their PCIe, HBM, peer and all-reduce "
        why += "bandwidth are required"
    finding = node_finding(
        RUN,
        UNKNOWN,
        f"The interconnect was not measured: {why}; certify with --interconnect (or set "
        "interconnect: false in the policy to certify without it)",
        observed="not measured",
        expected="measured",
    )
    return with_action(finding, Action.RERUN, "gpuready: measure it (certify --interconnect)")


def _missing_library(detail: str) -> str | None:
    """How to install the library ``detail`` says was not found, or None."""
    for said, fix in _MISSING_LIBRARIES:
        if said in detail and (said.endswith(" not found") or " not found in " in detail):
            return fix
    return None


def _repair_for(detail: str) -> tuple[str, Action, str]:
    """The fix to append to a reason, its action and the action's source.

    By the CUDA status the measurement reported where it reported one; by a library the
    finders did not find; else: measure it again.
    """
    statuses = {int(code) for code in _STATUS.findall(detail)}
    for status, advice, action in _CUDA_STATUSES:
        if status in statuses:
            return f"; {advice}", action, f"gpuready: CUDA status {status}: {advice}"
    install = _missing_library(detail)
    if install is not None:
        return f"; {install}", Action.FIX_SOFTWARE, f"gpuready: a library is missing: {install}"
    return "; measure it again", Action.RERUN, RERUN_SOURCE


def _could_not_run(error: str, required: bool) -> Finding:
    fix, action, source = _repair_for(error)
    finding = node_finding(
        RUN,
        UNKNOWN,
        f"The interconnect could not be measured: {error}{fix}",
        observed="could not run",
        expected="measured",
        required=required,
    )
    return with_action(finding, action, source)


def _part_not_measured(check_id: str, what: str, why: Unavailable, required: bool) -> Finding:
    text = why_not(why)
    fix, action, source = _repair_for(text)
    finding = node_finding(
        check_id,
        UNKNOWN,
        f"{what} was not measured: {text}{fix}",
        observed=why,
        expected="measured",
        required=required,
    )
    return with_action(finding, action, source)


# ---------------------------------------------------------------- host and HBM copies


@dataclass(frozen=True)
class _Copy:
    check: str
    words: str  # as messages name the copy
    part: str  # the GpuCopyBandwidth field
    threshold: str  # the policy threshold
    catalog: str  # the Sku field


_COPIES = (
    _Copy(H2D, "host-to-device", "h2d", "h2d_min_gbs", "h2d_min_gbs"),
    _Copy(D2H, "device-to-host", "d2h", "d2h_min_gbs", "d2h_min_gbs"),
    _Copy(HBM, "HBM copy", "hbm", "hbm_min_gbs", "hbm_copy_min_gbs"),
)


def _copies(node: _Node, measured: Interconnect) -> list[Finding]:
    entries = measured.gpus
    if isinstance(entries, Unavailable):
        return [
            _part_not_measured(
                copy.check, f"The {copy.words} bandwidth of the GPUs", entries, node.required
            )
            for copy in _COPIES
        ]
    by_index = {entry.index: entry for entry in entries}
    findings: list[Finding] = []
    for copy in _COPIES:
        findings += _copy_findings(node, copy, by_index)
    return findings


def _copy_findings(
    node: _Node, copy: _Copy, by_index: dict[int, GpuCopyBandwidth]
) -> list[Finding]:
    figures: dict[int, Measured[float]] = {}
    for index in node.indexes:
        entry = by_index.get(index)
        figures[index] = (
            figure_of(getattr(entry, copy.part))
            if entry is not None
            else Unavailable(Reason.NOT_MEASURED, "the interconnect results hold no entry for it")
        )
    values = [
        value
        for index, value in figures.items()
        if isinstance(value, float) and index not in node.busy
    ]
    floor = node.floor(
        getattr(node.policy.thresholds, copy.threshold),
        getattr(node.sku, copy.catalog) if node.sku is not None else None,
    )
    bar = _Bar.of(floor, values, node.policy.thresholds.interconnect_sibling_min, siblings=True)
    return [
        _copy_finding(node, copy, node.gpu(index), value, bar) for index, value in figures.items()
    ]


def _copy_finding(
    node: _Node, copy: _Copy, gpu: GpuFacts, value: Measured[float], bar: _Bar
) -> Finding:
    subject = f"GPU {gpu.index} {copy.words} bandwidth"
    if isinstance(value, Unavailable):
        finding = gpu_finding(
            copy.check,
            UNKNOWN,
            gpu,
            f"{subject} was not measured: {why_not(value)}",
            observed=value,
            expected=bar.expected(),
            required=node.required,
        )
        return with_action(finding, Action.RERUN, RERUN_SOURCE)
    no_floor = node.no_floor_words(bar.floor)
    if not bar.judges:
        return gpu_finding(
            copy.check,
            UNKNOWN,
            gpu,
            f"{subject} {gbs(value)} cannot be judged: {no_floor}, and "
            f"{_count(bar.count, 'figure')} {'is' if bar.count == 1 else 'are'} too few for a "
            f"node median; set {copy.threshold} in the policy's thresholds",
            observed=gbs(value),
            expected=bar.expected(),
            required=False,
        )
    shortfalls = bar.shortfalls(value)
    context = bar.context(shortfalls, no_floor)
    if not shortfalls:
        return gpu_finding(
            copy.check,
            PASS,
            gpu,
            f"{subject} {gbs(value)}{_aside(context)}",
            observed=gbs(value),
            expected=bar.expected(),
        )
    text = f"{subject} {gbs(value)} is {' and '.join(shortfalls)}{_aside(context)}"
    if copy.part == "hbm":
        failure = (text, Action.DRAIN_RMA, HBM_SOURCE)
    else:
        failure = (text + _link_below(gpu, node), Action.RESEAT_CABLE_RISER, PCIE_SOURCE)
    return _busy_or_fail(
        node,
        _Low(copy.check, text, gbs(value), bar.expected(), gpu),
        node.busy.intersection([gpu.index]),
        "measure it again with the GPU idle",
        failure,
    )


@dataclass(frozen=True)
class _Low:
    """A figure below its bar, as its finding says it."""

    check: str
    text: str  # what is low, and against what
    observed: str
    expected: str
    gpu: GpuFacts | None = None  # None: a finding about the node (a pair, the fabric)


def _busy_or_fail(
    node: _Node,
    low: _Low,
    busy: Collection[int],
    again: str,
    failure: tuple[str, Action, str],
) -> Finding:
    """UNKNOWN where a GPU ``low`` depends on was ``busy`` (measure ``again``), else FAIL.

    ``failure``: the FAIL's message, its action and the action's source.
    """
    if busy:
        severity, required = UNKNOWN, node.required
        message = f"{low.text}, but {_busy_words(busy)}: {again}"
        observed, action, source = f"{low.observed} (busy)", Action.RERUN, BUSY_SOURCE
    else:
        severity, required = FAIL, True
        message, action, source = failure
        observed = low.observed
    finding = gpu_finding(
        low.check,
        severity,
        low.gpu,
        message,
        observed=observed,
        expected=low.expected,
        required=required,
    )
    return with_action(finding, action, source)


def _link_below(gpu: GpuFacts, node: _Node) -> str:
    """'; its PCIe link trained at x8 of x16' where the link is below the SKU's (or policy's)."""
    policy, sku = node.policy, node.sku
    want_gen = policy.min_pcie_gen if policy.min_pcie_gen is not None else None
    want_width = policy.min_pcie_width if policy.min_pcie_width is not None else None
    if sku is not None:
        want_gen = want_gen if want_gen is not None else sku.pcie_gen
        want_width = want_width if want_width is not None else sku.pcie_width
    # The maximum generation, as pcie.gen judges it: the current one drops at idle.
    gen, width = gpu.pcie_gen_max, gpu.pcie_width_current
    low_gen = isinstance(gen, int) and want_gen is not None and gen < want_gen
    low_width = isinstance(width, int) and want_width is not None and width < want_width
    if low_gen and low_width:
        return f"; its PCIe link trained at Gen{gen} x{width} of Gen{want_gen} x{want_width}"
    if low_width:
        return f"; its PCIe link trained at x{width} of x{want_width}"
    if low_gen:
        return f"; its PCIe link trained at Gen{gen} of Gen{want_gen}"
    return ""


# ---------------------------------------------------------------- the peer matrix


def _uniform_fabric(node: _Node) -> bool:
    """True where every GPU pair crosses one fabric, so every pair should copy alike."""
    switches = node.facts.pci_nvswitch_count
    if isinstance(switches, int) and switches > 0:
        return True
    sku = node.sku
    if sku is None:
        return False
    return sku.nvswitch or (sku.form_factor == "superchip" and sku.nvlinks is not None)


def _has_nvlink(node: _Node) -> bool:
    return node.sku is not None and node.sku.nvlinks is not None


def _peers(node: _Node, measured: Interconnect) -> list[Finding]:
    indexes = node.indexes
    if len(indexes) < 2:
        return []  # one GPU has no peer
    peers = measured.peers
    if isinstance(peers, Unavailable):
        return [_part_not_measured(P2P, "The GPU peer matrix", peers, node.required)]
    by_pair = {(peer.src, peer.dst): peer for peer in peers}
    pairs = [(src, dst) for src in indexes for dst in indexes if src != dst]
    matrix = {pair: by_pair.get(pair) for pair in pairs}
    access = _access(node, matrix)
    denied = {pair for pair, peer in matrix.items() if peer is not None and peer.access is False}
    judged = {
        pair: peer for pair, peer in matrix.items() if not (_has_nvlink(node) and pair in denied)
    }
    return access + _bandwidth(node, judged)


def _diagnose(pairs: set[Pair], indexes: list[int]) -> tuple[dict[int, list[Pair]], list[Pair]]:
    """The GPUs slow to most peers (as source and as destination), and the pairs left over.

    Each GPU found takes all its pairs in ``pairs`` not taken by a GPU before it.
    """
    matrix = [(src, dst) for src in indexes for dst in indexes if src != dst]
    by_gpu: dict[int, list[Pair]] = {}
    taken: set[Pair] = set()
    for gpu in indexes:
        if majority_of_peers(gpu, pairs, matrix):
            mine = sorted(pair for pair in pairs if gpu in pair and pair not in taken)
            # The GPUs before it may have taken all its pairs (a matrix measured for none).
            if mine:
                by_gpu[gpu] = mine
                taken.update(mine)
    return by_gpu, sorted(pairs - taken)


def _pair_groups(pairs: Sequence[Pair]) -> list[tuple[Pair, ...]]:
    """Ordered pairs grouped by their two GPUs: both directions of a pair go together."""
    groups: dict[tuple[int, int], list[Pair]] = {}
    for src, dst in pairs:
        groups.setdefault((min(src, dst), max(src, dst)), []).append((src, dst))
    return [tuple(group) for _, group in sorted(groups.items())]


def _peer_count(partners: set[int], indexes: list[int], every: str = "every peer") -> str:
    """'every peer', or '5 of its 7 peers'."""
    others = len(indexes) - 1
    if len(partners) == others:
        return every
    return f"{len(partners)} of its {others} peers"


def _links_of(node: _Node) -> str:
    """Where a GPU's peer links run, in words, for the board."""
    sku = node.sku
    if sku is None:
        return "its NVLinks or its PCIe path"
    if sku.nvswitch:
        return "its NVLinks or its NVSwitch port"
    if sku.form_factor == "superchip" and sku.nvlinks is not None:
        return "its NVLinks to the rack's NVLink switch trays"
    if sku.nvlinks is not None:
        return "its NVLinks"
    return "its NVLink bridge or its PCIe path"


# ---------------------------------------------------------------- interconnect.peer_access


def _fabric_words(unfinished: Sequence[tuple[int, str]]) -> str:
    states = ", ".join(f"GPU {index} ({state})" for index, state in unfinished)
    return (
        f"the fabric manager has not completed the NVSwitch registration of {states}: start "
        "nvidia-fabricmanager (systemctl enable --now nvidia-fabricmanager)"
    )


def _link_action(node: _Node, indexes: Iterable[int]) -> tuple[str, Action, str]:
    """The cause to name and what to do for slow or denied links of ``indexes``."""
    unfinished = fabric_unfinished(node.gpus, set(indexes))
    if unfinished:
        return _fabric_words(unfinished), Action.FIX_SOFTWARE, FABRIC_SOURCE
    action, source = link_repair(node.sku)
    return "", action, source


def _access(node: _Node, matrix: dict[Pair, PeerBandwidth | None]) -> list[Finding]:
    unread = {
        pair
        for pair, peer in matrix.items()
        if peer is None or isinstance(peer.access, Unavailable)
    }
    denied = {pair for pair, peer in matrix.items() if peer is not None and peer.access is False}
    findings: list[Finding] = []
    if denied and node.sku is not None and node.sku.nvlinks is not None:
        findings += _denied(node, denied, node.sku)
    elif denied:
        findings.append(_denied_not_judged(node, denied, len(matrix)))
    findings += _unread_access(node, unread, matrix)
    if not findings:
        findings.append(
            node_finding(
                PEER_ACCESS,
                PASS,
                f"All {len(matrix)} GPU pairs have peer access",
                observed=f"{len(matrix)} of {len(matrix)}",
                expected="every pair" if _has_nvlink(node) else "not judged",
            )
        )
    return findings


def _denied(node: _Node, denied: set[Pair], sku: Sku) -> list[Finding]:
    why = f"though {sku.label} GPUs are joined by NVLink"
    by_gpu, rest = _diagnose(denied, node.indexes)
    findings = []
    for gpu, pairs in by_gpu.items():
        partners = partners_of(gpu, pairs)
        cause, action, source = _link_action(node, [gpu])
        finding = gpu_finding(
            PEER_ACCESS,
            FAIL,
            node.gpu(gpu),
            f"GPU {gpu} has no peer access to {_peer_count(partners, node.indexes, 'any peer')} "
            f"({gpu_list(partners)}), {why}: {cause or _links_of(node)}",
            observed=f"no access to {len(partners)} peers",
            expected="peer access to every GPU",
        )
        findings.append(with_action(finding, action, source))
    for group in _pair_groups(rest):
        ends = sorted({index for pair in group for index in pair})
        cause, action, source = _link_action(node, ends)
        if len(group) == 2:
            subject = f"{pairs_words(group)} have no peer access to each other"
        else:
            subject = f"GPU {group[0][0]} has no peer access to GPU {group[0][1]}"
        finding = node_finding(
            PEER_ACCESS,
            FAIL,
            f"{subject}, {why}: {cause or 'the link between them'}",
            observed="no access",
            expected="peer access",
        )
        findings.append(with_action(finding, action, source))
    return findings


def _denied_not_judged(node: _Node, denied: set[Pair], total: int) -> Finding:
    gpus = sorted({index for pair in denied for index in pair})
    board = node.sku.label if node.sku is not None else "this node"
    return node_finding(
        PEER_ACCESS,
        PASS,
        f"{len(denied)} of {total} GPU pairs have no peer access ({gpu_list(gpus)}): not judged, "
        f"{board} has no NVLink the board fixes, and PCIe peer access depends on the platform",
        observed=f"{total - len(denied)} of {total}",
        expected="not judged",
        required=False,
    )


def _unread_access(
    node: _Node, unread: set[Pair], matrix: dict[Pair, PeerBandwidth | None]
) -> list[Finding]:
    if not unread:
        return []
    by_gpu, rest = _diagnose(unread, node.indexes)
    first = matrix.get(min(unread))
    why = (
        why_not(first.access)
        if first is not None and isinstance(first.access, Unavailable)
        else "not in the peer matrix"
    )
    groups = [
        f"GPU {gpu} (to and from {len(partners_of(gpu, pairs))} peers)"
        for gpu, pairs in by_gpu.items()
    ]
    groups += [pairs_words(group) for group in _pair_groups(rest)]
    finding = node_finding(
        PEER_ACCESS,
        UNKNOWN,
        f"Peer access of {_count(len(unread), 'GPU pair')} could not be read: "
        f"{', '.join(groups)}: {why}",
        observed=f"{len(unread)} pairs not read",
        expected="peer access read for every pair",
        required=node.required and _has_nvlink(node),
    )
    return [with_action(finding, Action.RERUN, RERUN_SOURCE)]


# ---------------------------------------------------------------- interconnect.p2p


def _bandwidth(node: _Node, matrix: dict[Pair, PeerBandwidth | None]) -> list[Finding]:
    figures: dict[Pair, Measured[float]] = {
        pair: figure_of(peer.unidirectional)
        if peer is not None
        else Unavailable(Reason.NOT_MEASURED, "not in the peer matrix")
        for pair, peer in matrix.items()
    }
    values = {pair: value for pair, value in figures.items() if isinstance(value, float)}
    floor = node.floor(
        node.policy.thresholds.p2p_min_gbs,
        node.sku.p2p_min_gbs if node.sku is not None else None,
    )
    uniform = _uniform_fabric(node)
    bar = _Bar.of(
        floor,
        _idle_values(node, values),
        node.policy.thresholds.interconnect_sibling_min,
        siblings=uniform,
    )
    findings = _unmeasured_pairs(node, figures)
    if not values:
        return findings
    if not bar.judges:
        return [*findings, _pairs_not_judged(node, values, bar, uniform)]
    slow = {pair for pair, value in values.items() if bar.shortfalls(value)}
    if not slow:
        return [*findings, _pairs_pass(node, values, bar)]
    return findings + _slow_pairs(node, slow, values, bar)


def _bar_words(bar: _Bar, node: _Node) -> str:
    """'a node median of 372 GB/s, floor 335 GB/s': what the slow pairs are set against."""
    parts = []
    if bar.median is not None:
        parts.append(f"a node median of {gbs(bar.median)}")
    if bar.floor.value is not None:
        parts.append(f"floor {bar.floor.value:g} GB/s")
    else:
        parts.append(node.no_floor_words(bar.floor))
    return ", ".join(parts)


def _pairs_pass(node: _Node, values: dict[Pair, float], bar: _Bar) -> Finding:
    return node_finding(
        P2P,
        PASS,
        f"All {len(values)} GPU pairs copy at {span(values.values())}"
        f"{_aside(bar.context([], node.no_floor_words(bar.floor)))}",
        observed=span(values.values()),
        expected=bar.expected(),
    )


def _pairs_not_judged(node: _Node, values: dict[Pair, float], bar: _Bar, uniform: bool) -> Finding:
    why = node.no_floor_words(bar.floor)
    if not uniform:
        why += ", and the pairs do not all cross one fabric (PCIe switches, bridges or a "
        why += "partial mesh), so they differ by design and no median judges them"
    else:
        why += f", and {_count(bar.count, 'figure')} are too few for a node median"
    return node_finding(
        P2P,
        UNKNOWN,
        f"{len(values)} GPU pairs copy at {span(values.values())}, not judged: {why}; set "
        "p2p_min_gbs in the policy's thresholds to judge them",
        observed=span(values.values()),
        expected=bar.expected(),
        required=False,
    )


def _unmeasured_pairs(node: _Node, figures: dict[Pair, Measured[float]]) -> list[Finding]:
    missing = {pair: why for pair, why in figures.items() if isinstance(why, Unavailable)}
    if not missing:
        return []
    by_gpu, rest = _diagnose(set(missing), node.indexes)
    findings = []
    for gpu, pairs in by_gpu.items():
        partners = partners_of(gpu, pairs)
        finding = gpu_finding(
            P2P,
            UNKNOWN,
            node.gpu(gpu),
            f"GPU {gpu} peer copies to and from {_peer_count(partners, node.indexes)} "
            f"were not measured: {why_not(missing[pairs[0]])}",
            observed=missing[pairs[0]],
            expected="measured",
            required=node.required,
        )
        findings.append(with_action(finding, Action.RERUN, RERUN_SOURCE))
    for group in _pair_groups(rest):
        finding = node_finding(
            P2P,
            UNKNOWN,
            f"{pairs_words(group)} peer copy was not measured: {why_not(missing[group[0]])}",
            observed=missing[group[0]],
            expected="measured",
            required=node.required,
        )
        findings.append(with_action(finding, Action.RERUN, RERUN_SOURCE))
    return findings


def _idle_values(node: _Node, values: dict[Pair, float]) -> list[float]:
    """The pairs' figures with neither GPU busy: what the node median is taken of."""
    return [value for pair, value in values.items() if not node.busy.intersection(pair)]


def _slow_pairs(
    node: _Node, slow: set[Pair], values: dict[Pair, float], bar: _Bar
) -> list[Finding]:
    """Slow pairs of idle GPUs diagnosed (GPU, pair or fabric); those of busy GPUs UNKNOWN."""
    waiting = {pair for pair in slow if node.busy.intersection(pair)}
    idle = slow - waiting
    by_gpu, rest = _diagnose(idle, node.indexes)
    if len(by_gpu) * 2 > len(node.indexes):
        findings = [_slow_fabric(node, idle, values, bar)]
    else:
        findings = [_slow_gpu(node, gpu, pairs, values, bar) for gpu, pairs in by_gpu.items()]
        findings += [_slow_pair(node, group, values, bar) for group in _pair_groups(rest)]
    by_busy = _by_busy_gpu(node, waiting)
    if len(by_busy) * 2 > len(node.indexes):
        return [*findings, _slow_fabric(node, waiting, values, bar)]
    return findings + [_slow_gpu(node, gpu, pairs, values, bar) for gpu, pairs in by_busy]


def _by_busy_gpu(node: _Node, pairs: set[Pair]) -> list[tuple[int, list[Pair]]]:
    """Each busy GPU with the pairs of ``pairs`` touching it that no GPU before it took."""
    grouped = []
    left = set(pairs)
    for gpu in sorted(node.busy):
        mine = sorted(pair for pair in left if gpu in pair)
        if mine:
            grouped.append((gpu, mine))
            left -= set(mine)
    return grouped


def _slow_gpu(
    node: _Node, gpu: int, pairs: list[Pair], values: dict[Pair, float], bar: _Bar
) -> Finding:
    partners = partners_of(gpu, pairs)
    figures = [values[pair] for pair in pairs]
    text = (
        f"GPU {gpu} is slow to {_peer_count(partners, node.indexes)}: {span(figures)} "
        f"against {_bar_words(bar, node)}"
    )
    cause, action, source = _link_action(node, [gpu])
    return _busy_or_fail(
        node,
        _Low(P2P, text, f"{span(figures)} to {len(partners)} peers", bar.expected(), node.gpu(gpu)),
        node.busy.intersection([gpu]),
        "measure it again with the GPU idle",
        (f"{text}: {cause or _links_of(node)}", action, source),
    )


def _slow_pair(
    node: _Node, group: tuple[Pair, ...], values: dict[Pair, float], bar: _Bar
) -> Finding:
    figures = [values[pair] for pair in group]
    shortfalls = bar.shortfalls(min(figures))
    ends = sorted({index for pair in group for index in pair})
    verb = "copy to each other at" if len(group) == 2 else "copies at"
    text = (
        f"{pairs_words(group)} {verb} {span(figures)}, {' and '.join(shortfalls)}"
        f"{_aside(bar.context(shortfalls, node.no_floor_words(bar.floor)))}"
    )
    cause, action, source = _link_action(node, ends)
    return _busy_or_fail(
        node,
        _Low(P2P, text, span(figures), bar.expected()),
        sorted(node.busy.intersection(ends)),
        "measure them again idle",
        (f"{text}: {cause or 'the link between them'}", action, source),
    )


def _slow_fabric(node: _Node, slow: set[Pair], values: dict[Pair, float], bar: _Bar) -> Finding:
    figures = [values[pair] for pair in slow]
    text = (
        f"{len(slow)} of {len(values)} GPU pairs are slow across the node: {span(figures)} "
        f"against {_bar_words(bar, node)}"
    )
    ends = {index for pair in slow for index in pair}
    cause, action, source = _link_action(node, node.indexes)
    return _busy_or_fail(
        node,
        _Low(P2P, text, f"{span(figures)} on {len(slow)} pairs", bar.expected()),
        sorted(node.busy.intersection(ends)),
        "measure them again idle",
        (f"{text}: {cause or 'the NVLink fabric the pairs share'}", action, source),
    )


# ---------------------------------------------------------------- interconnect.all_reduce


def _all_reduce(node: _Node, measured: Interconnect, peers: list[Finding]) -> list[Finding]:
    if len(node.indexes) < 2:
        return []  # a node of one GPU reduces nothing across GPUs
    result = measured.all_reduce
    if isinstance(result, Unavailable):
        return [_part_not_measured(ALL_REDUCE, "NCCL all-reduce", result, node.required)]
    points = _points(result)
    wrong = [p for p in points if (p.wrong or 0) > 0] if isinstance(points, tuple) else []
    if wrong or (result.wrong or 0) > 0:
        return [_corrupted(result, wrong)]
    if isinstance(points, Unavailable):
        return [_part_not_measured(ALL_REDUCE, "NCCL all-reduce", points, node.required)]
    partial = _partial(node, result)
    if partial is not None:
        return [partial]
    largest = max(points, key=lambda point: point.size_bytes)
    return [_busbw(node, measured, result, largest, peers)]


def _points(result: AllReduce) -> Measured[tuple[AllReducePoint, ...]]:
    """The sweep's rows, or why there are none."""
    if isinstance(result.points, tuple) and not result.points:
        return Unavailable(Reason.NOT_MEASURED, "the sweep holds no message size")
    return result.points


def _over(result: AllReduce) -> str:
    return f"over {result.ranks} GPUs"


def _corrupted(result: AllReduce, wrong: list[AllReducePoint]) -> Finding:
    by_size = sum(point.wrong or 0 for point in wrong)
    # A whole-run count (old nccl-tests' "Out of bounds values") already holds the sizes'.
    elements = max(by_size, result.wrong or 0)
    sizes = ", ".join(size_words(point.size_bytes) for point in wrong)
    finding = node_finding(
        ALL_REDUCE,
        FAIL,
        f"NCCL all-reduce {_over(result)} returned {elements} wrong elements"
        f"{_aside(f'at {sizes}' if sizes else '')}: data corruption on a GPU or on the links "
        "between them",
        observed=f"{elements} wrong",
        expected="0 wrong",
    )
    return with_action(finding, Action.DRAIN_RMA, CORRUPTION_SOURCE)


def _partial(node: _Node, result: AllReduce) -> Finding | None:
    """UNKNOWN where the ranks leave out a GPU that answered: the node's busbw is not known."""
    count = len(node.indexes)
    if result.gpu_indices:
        covered = len(set(node.indexes).intersection(result.gpu_indices))
    else:
        covered = min(result.ranks, count)
    if covered >= count:
        return None
    finding = node_finding(
        ALL_REDUCE,
        UNKNOWN,
        f"NCCL all-reduce covered {covered} of {count} GPUs: run all_reduce_perf -g {count} "
        f"(or -np {count})",
        observed=f"{covered} of {count} GPUs",
        expected=f"all {count} GPUs",
        required=node.required,
    )
    return with_action(finding, Action.RERUN, RERUN_SOURCE)


def _has_nvswitch(node: _Node) -> bool:
    switches = node.facts.pci_nvswitch_count
    if isinstance(switches, int) and switches > 0:
        return True
    return node.sku is not None and node.sku.nvswitch


def _median_p2p(node: _Node, measured: Interconnect) -> float | None:
    """The median one-direction copy of the pairs of idle GPUs that answered, if any."""
    if isinstance(measured.peers, Unavailable):
        return None
    indexes = set(node.indexes) - node.busy
    values = [
        value
        for peer in measured.peers
        if {peer.src, peer.dst} <= indexes and peer.src != peer.dst
        for value in [measured_gb_s(peer.unidirectional)]
        if value is not None
    ]
    return statistics.median(values) if values else None


def _all_reduce_floor(node: _Node, measured: Interconnect, ranks: int) -> _Floor:
    """The policy's floor, else the catalog's, else on an NVSwitch one from the node's P2P."""
    floor = node.floor(
        node.policy.thresholds.all_reduce_min_gbs,
        node.sku.all_reduce_floor(ranks) if node.sku is not None else None,
    )
    if floor.value is not None or not _has_nvswitch(node):
        return floor
    p2p = _median_p2p(node, measured)
    if p2p is None:
        return floor
    origin = (
        f"{DERIVED_ALL_REDUCE_SHARE:g}x the node's median P2P {gbs(p2p)}: derived from its "
        "own peer copies"
    )
    return _Floor(round(DERIVED_ALL_REDUCE_SHARE * p2p, 1), origin, derived=True)


def _busbw(
    node: _Node,
    measured: Interconnect,
    result: AllReduce,
    largest: AllReducePoint,
    peers: list[Finding],
) -> Finding:
    if largest.size_bytes < MIN_ALL_REDUCE_BYTES:
        return _too_short(node, result, largest)
    floor = _all_reduce_floor(node, measured, result.ranks)
    at = f"at {size_words(largest.size_bytes)} {_over(result)}"
    busbw = largest.busbw_gb_s
    if floor.value is None:
        return _no_all_reduce_floor(node, result, floor, busbw, at)
    expected = f">= {floor.value:g} GB/s busbw ({floor.origin})"
    origin = f", {floor.origin}" if floor.derived else ""
    if busbw >= floor.value:
        return node_finding(
            ALL_REDUCE,
            PASS,
            f"NCCL all-reduce busbw {gbs(busbw)} {at} (floor {floor.value:g} GB/s{origin})",
            observed=gbs(busbw),
            expected=expected,
        )
    text = (
        f"NCCL all-reduce busbw {gbs(busbw)} {at} is below the floor of {floor.value:g} GB/s"
        f"{_aside(floor.origin if floor.derived else '')}"
    )
    cause, action, source = _fabric_cause(node, peers)
    return _busy_or_fail(
        node,
        _Low(ALL_REDUCE, text, gbs(busbw), expected),
        sorted(node.busy),
        "measure it again with the GPUs idle",
        (f"{text}: {cause}", action, source),
    )


def _no_all_reduce_floor(
    node: _Node, result: AllReduce, floor: _Floor, busbw: float, at: str
) -> Finding:
    """No floor at all: not judged; on an NVSwitch (no P2P to derive one) a blocking UNKNOWN."""
    board = f"{result.ranks}x {node.sku.label}" if node.sku is not None else ""
    why = f"no floor is known for {board}" if board else node.no_floor_words(floor)
    subject = f"NCCL all-reduce busbw {gbs(busbw)} {at} cannot be judged"
    if not _has_nvswitch(node):
        return node_finding(
            ALL_REDUCE,
            UNKNOWN,
            f"{subject}: {why}; set all_reduce_min_gbs in the policy's thresholds to judge it",
            observed=gbs(busbw),
            expected="a floor",
            required=False,
        )
    finding = node_finding(
        ALL_REDUCE,
        UNKNOWN,
        f"{subject}: {why}, and no peer copy was measured to derive one from "
        f"({DERIVED_ALL_REDUCE_SHARE:g}x the node's median P2P); measure the peer matrix "
        "again, or set all_reduce_min_gbs in the policy's thresholds",
        observed=gbs(busbw),
        expected="a floor, or peer copies to derive one from",
        required=node.required,
    )
    return with_action(finding, Action.RERUN, RERUN_SOURCE)


def _too_short(node: _Node, result: AllReduce, largest: AllReducePoint) -> Finding:
    size = size_words(largest.size_bytes)
    finding = node_finding(
        ALL_REDUCE,
        UNKNOWN,
        f"NCCL all-reduce sweep too short: its largest size is {size}, and busbw is judged "
        f"at {size_words(MIN_ALL_REDUCE_BYTES)} or more, where it levels off "
        f"({gbs(largest.busbw_gb_s)} at {size} {_over(result)}); measure up to 1 GiB or more",
        observed=f"largest {size}",
        expected=f">= {size_words(MIN_ALL_REDUCE_BYTES)}",
        required=node.required,
    )
    return with_action(finding, Action.RERUN, RERUN_SOURCE)


def _fabric_cause(node: _Node, peers: list[Finding]) -> tuple[str, Action, str]:
    """Why a node's all-reduce is slow, from what the peer matrix says: words and action."""
    action, source = all_reduce_action(node.sku, node.gpus, peer_copies(peers, P2P, PEER_ACCESS))
    unfinished = fabric_unfinished(node.gpus, set(node.indexes))
    if unfinished:
        return _fabric_words(unfinished), action, source
    if source == BASEBOARD_SOURCE:
        return (
            "every GPU pair copies at speed, so the NVSwitch fabric on the baseboard",
            action,
            source,
        )
    state = peer_copies(peers, P2P, PEER_ACCESS)
    if state is PeerCopies.FAILED:
        explained = "the failing peer links (interconnect.p2p, interconnect.peer_access) explain it"
        return explained, action, source
    if state is PeerCopies.AT_SPEED:
        return "every GPU pair copies at speed, so the links NCCL's rings share", action, source
    return "the peer copies were not judged, so the links or the fabric", action, source


__all__ = [
    "ALL_REDUCE",
    "BASEBOARD_SOURCE",
    "BUSY_SOURCE",
    "CORRUPTION_SOURCE",
    "D2H",
    "DERIVED_ALL_REDUCE_SHARE",
    "FABRIC_SOURCE",
    "H2D",
    "HBM",
    "HBM_SOURCE",
    "MIN_ALL_REDUCE_BYTES",
    "MIN_SIBLINGS",
    "P2P",
    "PCIE_SOURCE",
    "PEER_ACCESS",
    "RERUN_SOURCE",
    "RUN",
    "check",
    "interconnect_required",
]
