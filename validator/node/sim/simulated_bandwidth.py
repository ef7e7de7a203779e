"""A simulated node's interconnect: a scenario's copy, peer and all-reduce figures.

A scenario's ``interconnect`` section gives the figures a healthy GPU of the node
reaches, and where the node departs from them::

    "interconnect": {
      "source": "where the figures come from (a recorded run)",
      "h2d_gb_s": 55.36,                # pinned host -> GPU, copy engine, per GPU
      "d2h_gb_s": 55.21,                # GPU -> pinned host
      "hbm_gb_s": 2880.0,               # a copy within the GPU, bytes read + written
      "p2p_gb_s": 395.1,                # one GPU to another, every ordered pair
      "p2p_bidirectional_gb_s": 387.0,  # the same while the reverse copy runs too
      "all_reduce_busbw_gb_s": 477.0,   # NCCL all-reduce busbw where it levels off, or
      "all_reduce_curve": [[1048576, 24.5], [8589934592, 235.3]],  # busbw by size
      "all_reduce_latency_us": 70.0,    # the fixed cost that bounds small messages
      "all_reduce_error": "ncclSystemError: ...",  # the all-reduce fails: NCCL's words
      "all_reduce_wrong": 0,            # elements wrong in every checked result
      "nccl_version": "2.21.5",
      "jitter": 0.005,                  # each repeat within +-0.5% of its figure
      "seed": 14,                       # the same repeats on every run
      "busy_gpus": [3],                 # the idle gate gave up waiting for these GPUs
      "peer_access_off": ["2-5"],       # cudaDeviceCanAccessPeer says no
      "gpu_overrides": {"2": {"h2d_gb_s": 27.6, "d2h_gb_s": 27.5}},  # also hbm_gb_s,
                                        # numa_node and error (its copies fail so)
      "link_overrides": {"6-*": {"p2p_gb_s": 131.7}}  # also p2p_bidirectional_gb_s, error
    }

The four copy figures and one of ``all_reduce_busbw_gb_s`` / ``all_reduce_curve`` are
required (the all-reduce figure may be left out where ``all_reduce_error`` is given).
A pair is written ``A-B`` (both directions), ``A->B`` (that direction only) or ``A-*``
(GPU A to and from every peer: one slow GPU shows as its row and column). A pair takes
its figures from its most specific entry: ``A->B``, then ``A-B``, then the lower of
``A-*`` and ``B-*``.

Each copy is repeated ``config.repeats`` times; every repeat lies within ``jitter`` of
its figure, drawn from a generator seeded with ``seed`` and the copy's name, so every
run gives the same repeats and the median stays on the figure. The all-reduce sweep has
a point per ``config.all_reduce_sizes``: a fixed latency plus the bytes at the figure's
speed, so small messages are latency-bound and busbw levels off near the figure from a
few hundred MiB, as nccl-tests' real sweeps do (busbw = algbw x 2(n-1)/n).

A GPU's ``numa_node`` is where its pinned host buffer sits: by default the first half of
the GPUs on node 0 and the rest on node 1, as an HGX board's two sockets hold them.
A GPU that did not answer NVML has no figures (it is lost, or in error) and no pairs.
A scenario without the section has nothing to simulate: its Interconnect says so in
``error``, so a node asked to measure it is not judged as measured (fail closed).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import random
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from validator.fields import excerpt, is_int, is_number, lacks, must_be, quoted, unknown
from validator.model import (
    AllReduce,
    AllReducePoint,
    Bandwidth,
    GpuCopyBandwidth,
    GpuFacts,
    GpuStatus,
    Interconnect,
    Measured,
    NodeFacts,
    PeerBandwidth,
    Reason,
    Unavailable,
)
from validator.node.bandwidth.bandwidth_config import InterconnectConfig


class ScenarioDocument(Protocol):
    """What is read of a loaded scenario (validator.node.sim.scenario.Scenario): its document.

    A protocol rather than the class: the scenario module imports this one to check its
    ``interconnect`` section, and nothing here imports it back.
    """

    @property
    def data(self) -> Mapping[str, Any]:
        """The scenario's whole (validated) document."""
        ...

SOURCE = "simulate"
NO_SECTION = "the scenario has no interconnect section"
DEFAULT_JITTER = 0.005  # nvbandwidth's repeats of one copy agree within a fraction of 1%
DEFAULT_SEED = 14
# Fitted on a real sweep: 8x A100 all_reduce_perf (microsoft/superbenchmark's
# nccl_allreduce.log) takes 74.8 us at 1 MiB, of which
# ~8 us is the bytes at its 134 GB/s algbw.
DEFAULT_LATENCY_US = 70.0
DEFAULT_NCCL_VERSION = "2.21.5"

_RATE_LIMIT = 100_000.0  # GB/s: an HBM copy of B200 is ~8,000; beyond this is a typo
_MAX_GPUS = 64
_MAX_TEXT = 500
_MAX_CURVE = 64
_MAX_WRONG = 10**15

# ---------------------------------------------------------------- the section's keys


@dataclass(frozen=True)
class _Rule:
    """What one key's value must be: a test, and how messages say it."""

    fits: Callable[[object], bool]
    wanted: str


def _rate(value: object) -> bool:
    return is_number(value) and 0.0 < float(str(value)) <= _RATE_LIMIT


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip()) and len(value) <= _MAX_TEXT


def _bounded(low: float, high: float) -> Callable[[object], bool]:
    def fits(value: object) -> bool:
        return is_number(value) and low <= float(str(value)) <= high

    return fits


def _whole(low: int, high: int) -> Callable[[object], bool]:
    def fits(value: object) -> bool:
        return is_int(value) and low <= int(str(value)) <= high

    return fits


def _version(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)*", value) is not None


_RATE = _Rule(_rate, f"GB/s above 0 up to {_RATE_LIMIT:g}")
_TEXT = _Rule(_text, f"a non-empty text of at most {_MAX_TEXT} characters")
_COPY_KEYS = ("h2d_gb_s", "d2h_gb_s", "hbm_gb_s")
_LINK_KEYS = ("p2p_gb_s", "p2p_bidirectional_gb_s")
REQUIRED_KEYS = (*_COPY_KEYS, *_LINK_KEYS)
_PLATEAU, _CURVE, _FAILURE = "all_reduce_busbw_gb_s", "all_reduce_curve", "all_reduce_error"

SCALAR_RULES: dict[str, _Rule] = {
    "source": _TEXT,
    **dict.fromkeys(REQUIRED_KEYS, _RATE),
    _PLATEAU: _RATE,
    "all_reduce_latency_us": _Rule(_bounded(0.0, 1e6), "microseconds from 0 up to 1000000"),
    _FAILURE: _TEXT,
    "all_reduce_wrong": _Rule(_whole(0, _MAX_WRONG), "a count from 0 to 1e15"),
    "nccl_version": _Rule(_version, "a version like '2.21.5'"),
    "jitter": _Rule(_bounded(0.0, 0.2), "a share from 0 up to 0.2"),
    "seed": _Rule(_whole(0, 2**63), "a whole number from 0"),
}
GPU_RULES: dict[str, _Rule] = {
    **dict.fromkeys(_COPY_KEYS, _RATE),
    "numa_node": _Rule(_whole(0, 1023), "a NUMA node number 0-1023"),
    "error": _TEXT,
}
LINK_RULES: dict[str, _Rule] = {**dict.fromkeys(_LINK_KEYS, _RATE), "error": _TEXT}
SECTION_KEYS = (
    *SCALAR_RULES,
    _CURVE,
    "busy_gpus",
    "peer_access_off",
    "gpu_overrides",
    "link_overrides",
)

# ASCII digits only: str.isdigit() and \d take '²' or '٣', which int() refuses or reads.
_GPU_NUMBER = re.compile(r"[0-9]{1,4}")
_ONE_WAY = re.compile(r"([0-9]{1,2})->([0-9]{1,2})")
_BOTH_WAYS = re.compile(r"([0-9]{1,2})-([0-9]{1,2})")
_EVERY_PEER = re.compile(r"([0-9]{1,2})-\*")
_PAIR_WANTED = "'A-B' (both directions), 'A->B' (one) or 'A-*' (GPU A and every peer)"


# ---------------------------------------------------------------- checking


def check_interconnect_section(
    section: object, where: str, gpu_count: int | None = None
) -> list[str]:
    """Problems with a scenario's ``interconnect`` section, one line each (empty: fine).

    Args:
        section: the section's value.
        where: its key path (``interconnect``), which every problem names.
        gpu_count: the scenario's GPUs, when known: indexes must be below it.
    """
    base = tuple(where.split("."))
    if not isinstance(section, Mapping):
        return [must_be(base, "an object of interconnect figures", section)]
    checker = _Checker(base, gpu_count)
    checker.keys(section, SECTION_KEYS, ())
    checker.values(section, SCALAR_RULES, ())
    checker.required(section)
    if _CURVE in section:
        checker.curve(section[_CURVE])
    if "busy_gpus" in section:
        checker.indexes(section["busy_gpus"], ("busy_gpus",))
    if "peer_access_off" in section:
        checker.pair_list(section["peer_access_off"], ("peer_access_off",))
    if "gpu_overrides" in section:
        checker.overrides(section["gpu_overrides"], "gpu_overrides", GPU_RULES, checker.gpu_key)
    if "link_overrides" in section:
        checker.overrides(section["link_overrides"], "link_overrides", LINK_RULES, checker.pair)
    return checker.problems


class _Checker:
    """Collects the problems of one section, each naming its key path."""

    def __init__(self, base: tuple[str, ...], gpu_count: int | None) -> None:
        self.base = base
        self.gpu_count = gpu_count
        self.problems: list[str] = []

    def path(self, *parts: str | int) -> tuple[str | int, ...]:
        return (*self.base, *parts)

    def keys(self, data: Mapping[Any, Any], valid: Sequence[str], at: tuple[str, ...]) -> None:
        for key in data:
            if key not in valid:
                self.problems.append(unknown(self.path(*at, str(key)), list(valid)))

    def values(
        self, data: Mapping[Any, Any], rules: Mapping[str, _Rule], at: tuple[str, ...]
    ) -> None:
        for key, rule in rules.items():
            if key in data and not rule.fits(data[key]):
                self.problems.append(must_be(self.path(*at, key), rule.wanted, data[key]))

    def required(self, section: Mapping[str, Any]) -> None:
        for key in REQUIRED_KEYS:
            if key not in section:
                self.problems.append(lacks(self.path(key)))
        if _PLATEAU in section and _CURVE in section:
            self.problems.append(
                f"{quoted(self.path(_PLATEAU))} and {quoted(self.path(_CURVE))} are both "
                "given: keep one (null drops an inherited one)"
            )
        elif _PLATEAU not in section and _CURVE not in section and _FAILURE not in section:
            self.problems.append(
                f"{lacks(self.path(_PLATEAU))} (or {quoted(self.path(_CURVE))}, or "
                f"{quoted(self.path(_FAILURE))} for an all-reduce that fails)"
            )

    def curve(self, value: object) -> None:
        wanted = (
            f"a list of 2-{_MAX_CURVE} [size_bytes, busbw_gb_s] pairs, sizes rising, "
            f"busbw {_RATE.wanted}"
        )
        fits = isinstance(value, list) and 2 <= len(value) <= _MAX_CURVE
        points = value if isinstance(value, list) else []
        for point in points:
            fits = fits and (
                isinstance(point, list)
                and len(point) == 2
                and is_int(point[0])
                and 0 < point[0] <= 2**50
                and _rate(point[1])
            )
        if fits:
            sizes = [point[0] for point in points]
            fits = all(low < high for low, high in zip(sizes, sizes[1:]))
        if not fits:
            self.problems.append(must_be(self.path(_CURVE), wanted, value))

    def gpu_index(self, text: object) -> int | None:
        """A GPU index within the scenario's GPUs, or None."""
        if isinstance(text, str) and _GPU_NUMBER.fullmatch(text):
            index = int(text)
        elif is_int(text):
            index = int(str(text))
        else:
            return None
        limit = self.gpu_count if self.gpu_count is not None else _MAX_GPUS
        return index if 0 <= index < limit else None

    def _gpus_wanted(self) -> str:
        if self.gpu_count is None:
            return f"a GPU index 0-{_MAX_GPUS - 1}"
        if self.gpu_count == 0:
            return "a GPU index, and the scenario has no GPU"
        return f"a GPU index 0-{self.gpu_count - 1} (the scenario's GPUs)"

    def indexes(self, value: object, at: tuple[str, ...]) -> None:
        if not isinstance(value, list) or len(value) > _MAX_GPUS:
            self.problems.append(must_be(self.path(*at), "a list of GPU indexes", value))
            return
        for position, item in enumerate(value):
            if not is_int(item) or self.gpu_index(item) is None:
                self.problems.append(must_be(self.path(*at, position), self._gpus_wanted(), item))

    def gpu_key(self, key: str, at: tuple[str, ...]) -> bool:
        where = quoted(self.path(*at, key))
        index = self.gpu_index(key)
        if index is None:
            self.problems.append(f"{where} must be {self._gpus_wanted()}")
            return False
        if key != str(index):
            # The GPU is looked up as "2": an entry "02" would be accepted and never used.
            self.problems.append(
                f"{where} must be a GPU index written as it is numbered: write {index}, not {key}"
            )
            return False
        return True

    def pair(self, key: str, at: tuple[str, ...]) -> bool:
        """Whether the mapping key ``key`` is a pair of the scenario's GPUs."""
        return self.pair_at(key, (*at, key))

    def pair_at(self, value: object, path: tuple[str | int, ...]) -> bool:
        """Whether ``value`` (at ``path``) is a pair of two GPUs; a problem when not."""
        where = quoted(self.path(*path))
        parsed = parse_pair(value) if isinstance(value, str) else None
        if parsed is None:
            # A list item's path does not show it; a key's does.
            shown = "" if path[-1] == value else f", got {excerpt(value)}"
            self.problems.append(f"{where} is not a pair{shown}: write {_PAIR_WANTED}")
            return False
        src, dst, both = parsed
        written = _pair_text(src, dst, both)
        if value != written:
            # "02-5" would read as GPUs 2 and 5; one spelling a pair keeps scenarios plain.
            self.problems.append(
                f"{where} must name GPUs as they are numbered: write {written!r}, not {value!r}"
            )
            return False
        if src == dst:
            self.problems.append(f"{where} names GPU {src} twice: a pair joins two GPUs")
            return False
        for index in (src, dst):
            if index is not None and self.gpu_index(index) is None:
                self.problems.append(f"{where} names GPU {index}: give {self._gpus_wanted()}")
                return False
        return True

    def pair_list(self, value: object, at: tuple[str, ...]) -> None:
        if not isinstance(value, list) or len(value) > _MAX_GPUS * _MAX_GPUS:
            self.problems.append(must_be(self.path(*at), f"a list of pairs {_PAIR_WANTED}", value))
            return
        for position, item in enumerate(value):
            self.pair_at(item, (*at, position))

    def overrides(
        self,
        value: object,
        name: str,
        rules: Mapping[str, _Rule],
        key_fits: Callable[[str, tuple[str, ...]], bool],
    ) -> None:
        if not isinstance(value, Mapping):
            self.problems.append(must_be(self.path(name), "an object", value))
            return
        for key, spec in value.items():
            if not key_fits(str(key), (name,)):
                continue
            if not isinstance(spec, Mapping):
                self.problems.append(must_be(self.path(name, str(key)), "an object", spec))
                continue
            self.keys(spec, list(rules), (name, str(key)))
            self.values(spec, rules, (name, str(key)))


def parse_pair(text: str) -> tuple[int, int | None, bool] | None:
    """``(src, dst, both_ways)`` of a pair key; dst None for ``A-*``; None when not a pair."""
    for pattern, both in ((_ONE_WAY, False), (_BOTH_WAYS, True)):
        match = pattern.fullmatch(text)
        if match:
            return int(match.group(1)), int(match.group(2)), both
    match = _EVERY_PEER.fullmatch(text)
    return (int(match.group(1)), None, True) if match else None


def _pair_text(src: int, dst: int | None, both_ways: bool) -> str:
    """The one spelling of a pair: ``2-5``, ``2->5`` or ``2-*``."""
    if dst is None:
        return f"{src}-*"
    return f"{src}-{dst}" if both_ways else f"{src}->{dst}"


# ---------------------------------------------------------------- simulating


def simulated_interconnect(
    facts: NodeFacts, scenario: ScenarioDocument, config: InterconnectConfig
) -> Interconnect:
    """What the scenario's ``interconnect`` section gives this node's GPUs.

    Args:
        facts: the simulated node's facts (its GPUs: which answered, their ids).
        scenario: the loaded (validated) scenario.
        config: copy size, repeats and the all-reduce sweep's sizes and iterations.
    """
    started_at = _scenario_clock(scenario, facts)
    section = scenario.data.get("interconnect")
    if not isinstance(section, Mapping):
        return Interconnect(source=SOURCE, simulated=True, started_at=started_at, error=NO_SECTION)
    answering = [gpu for gpu in facts.gpus if gpu.status is GpuStatus.OK]
    if not answering:
        return Interconnect(
            source=SOURCE,
            simulated=True,
            started_at=started_at,
            error="no GPU answered NVML: there is nothing to copy to or between",
        )
    node = _Node(section, config, len(facts.gpus))
    gpus = tuple(node.gpu(gpu) for gpu in facts.gpus)
    peers = node.peers(answering)
    all_reduce = node.all_reduce([gpu.index for gpu in answering])
    busy = tuple(sorted(int(index) for index in section.get("busy_gpus", ())))
    idle_wait_s = config.idle_timeout_s if busy else config.idle_poll_s
    return Interconnect(
        source=SOURCE,
        simulated=True,
        started_at=started_at,
        elapsed_s=round(idle_wait_s + node.busy_s, 3),
        idle_wait_s=idle_wait_s,
        busy_gpus=busy,
        gpus=gpus,
        peers=peers,
        all_reduce=all_reduce,
    )


def _scenario_clock(scenario: ScenarioDocument, facts: NodeFacts) -> str:
    """The scenario's clock (``now``), UTC, as the facts' own times are written."""
    text = scenario.data.get("now")
    if not isinstance(text, str):
        return facts.collected_at
    when = datetime.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc).isoformat(timespec="seconds")


class _Jitter:
    """Repeats around a figure: the same ones for the same seed and name, every run."""

    def __init__(self, seed: int, share: float) -> None:
        self.seed = seed
        self.share = share

    def repeats(self, figure: float, name: str, count: int) -> tuple[float, ...]:
        # A string seed is hashed with SHA-512, not hash(): stable across processes.
        draw = random.Random(f"{self.seed}/{name}")  # noqa: S311 - a simulation, not a secret
        return tuple(
            round(figure * (1.0 + self.share * draw.uniform(-1.0, 1.0)), 2) for _ in range(count)
        )


class _Node:
    """One section's figures, turned into measurements; counts the time they would take."""

    def __init__(
        self, section: Mapping[str, Any], config: InterconnectConfig, gpu_count: int
    ) -> None:
        self.section = section
        self.gpu_count = gpu_count
        self.config = config
        self.jitter = _Jitter(
            int(section.get("seed", DEFAULT_SEED)), float(section.get("jitter", DEFAULT_JITTER))
        )
        self.busy_s = 0.0
        self.gpu_overrides: Mapping[str, Mapping[str, Any]] = section.get("gpu_overrides", {})
        self.links = _LinkTable(
            section.get("link_overrides", {}), section.get("peer_access_off", ())
        )

    def copy(self, figure: float, name: str) -> Bandwidth:
        """One copy of ``config.copy_size_bytes``, repeated; its median and its repeats."""
        size = self.config.copy_size_bytes
        repeats = self.jitter.repeats(figure, name, max(1, self.config.repeats))
        rounds = max(1, self.config.repeats) + max(0, self.config.warmup)
        self.busy_s += rounds * size / (figure * 1e9)
        return Bandwidth(
            gb_s=round(statistics.median(repeats), 2), repeats_gb_s=repeats, size_bytes=size
        )

    def gpu(self, gpu: GpuFacts) -> GpuCopyBandwidth:
        """A GPU's host copies and HBM copy: the node's figures or the GPU's own."""
        own = self.gpu_overrides.get(str(gpu.index), {})
        spec = {**self.section, **own}
        ids = GpuCopyBandwidth(index=gpu.index, uuid=gpu.uuid, pci_bus_id=gpu.pci_bus_id)
        if gpu.status is not GpuStatus.OK:
            reason = Reason.GPU_LOST if gpu.status is GpuStatus.LOST else Reason.ERROR
            gone = Bandwidth(gb_s=Unavailable(reason, f"GPU {gpu.index} did not answer NVML"))
            return dataclasses.replace(ids, h2d=gone, d2h=gone, hbm=gone)
        # An HGX board hangs half its GPUs off each socket (nvidia-smi topo -m: GPU0-3
        # on NUMA 0, GPU4-7 on NUMA 1), unless the scenario places a GPU itself.
        numa = spec.get("numa_node", 0 if gpu.index < self.gpu_count / 2 else 1)
        placed = dataclasses.replace(ids, numa_node=int(numa))
        if "error" in own:
            failed = Bandwidth(gb_s=Unavailable(Reason.ERROR, str(own["error"])))
            return dataclasses.replace(placed, h2d=failed, d2h=failed, hbm=failed)
        return dataclasses.replace(
            placed,
            h2d=self.copy(float(spec["h2d_gb_s"]), f"h2d/{gpu.index}"),
            d2h=self.copy(float(spec["d2h_gb_s"]), f"d2h/{gpu.index}"),
            hbm=self.copy(float(spec["hbm_gb_s"]), f"hbm/{gpu.index}"),
        )

    def peers(self, gpus: Sequence[GpuFacts]) -> Measured[tuple[PeerBandwidth, ...]]:
        """Every ordered pair of the GPUs that answered, as its link's entry says."""
        if not self.config.peers:
            return Unavailable(Reason.NOT_MEASURED, "peer matrix not asked for")
        return tuple(
            self.pair(src.index, dst.index)
            for src in gpus
            for dst in gpus
            if src.index != dst.index
        )

    def pair(self, src: int, dst: int) -> PeerBandwidth:
        if not self.links.access(src, dst):
            why = f"GPU {src} cannot access GPU {dst} as a peer (cudaDeviceCanAccessPeer 0)"
            none = Bandwidth(gb_s=Unavailable(Reason.NOT_SUPPORTED, why))
            return PeerBandwidth(src, dst, access=False, unidirectional=none, bidirectional=none)
        spec = {**{key: self.section[key] for key in _LINK_KEYS}, **self.links.spec(src, dst)}
        if "error" in spec:
            failed = Bandwidth(gb_s=Unavailable(Reason.ERROR, str(spec["error"])))
            return PeerBandwidth(src, dst, access=True, unidirectional=failed, bidirectional=failed)
        return PeerBandwidth(
            src,
            dst,
            access=True,
            unidirectional=self.copy(float(spec["p2p_gb_s"]), f"p2p/{src}/{dst}"),
            bidirectional=self.copy(float(spec["p2p_bidirectional_gb_s"]), f"bidir/{src}/{dst}"),
        )

    def all_reduce(self, indices: Sequence[int]) -> Measured[AllReduce]:
        """NCCL all-reduce across the GPUs that answered: the sweep, or NCCL's error."""
        if not self.config.all_reduce:
            return Unavailable(Reason.NOT_MEASURED, "all-reduce not asked for")
        if len(indices) < 2:
            return Unavailable(Reason.NOT_SUPPORTED, "fewer than two GPUs: nothing to all-reduce")
        run = AllReduce(
            ranks=len(indices),
            source=SOURCE,
            nccl_version=str(self.section.get("nccl_version", DEFAULT_NCCL_VERSION)),
            gpu_indices=tuple(indices),
        )
        failure = self.section.get(_FAILURE)
        if failure is not None:
            return dataclasses.replace(
                run, points=Unavailable(Reason.ERROR, f"NCCL error: {failure}")
            )
        points = tuple(self.point(size, len(indices)) for size in self.config.all_reduce_sizes)
        rounds = self.config.all_reduce_iterations + self.config.all_reduce_warmup
        self.busy_s += sum(2 * rounds * point.time_us for point in points) / 1e6  # and in place
        return dataclasses.replace(run, points=points)

    def point(self, size: int, ranks: int) -> AllReducePoint:
        """One size of the sweep, as nccl-tests would print its row."""
        busbw = busbw_at(self.section, size, ranks)
        algbw = busbw * ranks / (2 * (ranks - 1))
        in_place = self.jitter.repeats(busbw, f"in_place/{size}", 1)[0]
        wrong = self.section.get("all_reduce_wrong", 0)
        return AllReducePoint(
            size_bytes=size,
            time_us=round(size / (algbw * 1e3), 1),
            algbw_gb_s=round(algbw, 2),
            busbw_gb_s=round(busbw, 2),
            busbw_in_place_gb_s=in_place,
            wrong=int(wrong),
        )


def busbw_at(section: Mapping[str, Any], size: int, ranks: int) -> float:
    """The all-reduce busbw (GB/s) the section gives a message of ``size`` bytes.

    From ``all_reduce_curve``: interpolated in log(size), flat beyond its ends. From the
    plateau: time = latency + size at the plateau's algbw, busbw = size/time x 2(n-1)/n,
    so busbw rises with size and reaches ~95% of the plateau by 256 MiB on 8 GPUs.
    """
    curve = section.get(_CURVE)
    if curve:
        return _interpolated(curve, size)
    plateau = float(section[_PLATEAU])
    latency_us = float(section.get("all_reduce_latency_us", DEFAULT_LATENCY_US))
    peak_algbw = plateau * ranks / (2 * (ranks - 1))
    time_us = latency_us + size / (peak_algbw * 1e3)
    return size / (time_us * 1e3) * 2 * (ranks - 1) / ranks


def _interpolated(curve: Sequence[Sequence[float]], size: int) -> float:
    points = [(math.log(float(at)), float(busbw)) for at, busbw in curve]
    where = math.log(float(size))
    if where <= points[0][0]:
        return points[0][1]
    for (low, low_bw), (high, high_bw) in zip(points, points[1:]):
        if where <= high:
            return low_bw + (high_bw - low_bw) * (where - low) / (high - low)
    return points[-1][1]


class _LinkTable:
    """The section's link overrides and peer-access gaps, looked up by ordered pair."""

    def __init__(
        self, overrides: Mapping[str, Mapping[str, Any]], access_off: Sequence[str]
    ) -> None:
        self.one_way: dict[tuple[int, int], Mapping[str, Any]] = {}
        self.both_ways: dict[frozenset[int], Mapping[str, Any]] = {}
        self.every_peer: dict[int, Mapping[str, Any]] = {}
        for key, spec in overrides.items():
            self._add(key, spec)
        self.no_access: set[tuple[int, int]] = set()
        self.no_access_gpus: set[int] = set()
        for key in access_off:
            parsed = parse_pair(key)
            if parsed is None:
                continue
            src, dst, both = parsed
            if dst is None:
                self.no_access_gpus.add(src)
                continue
            self.no_access.add((src, dst))
            if both:
                self.no_access.add((dst, src))

    def _add(self, key: str, spec: Mapping[str, Any]) -> None:
        parsed = parse_pair(key)
        if parsed is None:
            return
        src, dst, both = parsed
        if dst is None:
            self.every_peer[src] = spec
        elif both:
            self.both_ways[frozenset((src, dst))] = spec
        else:
            self.one_way[(src, dst)] = spec

    def access(self, src: int, dst: int) -> bool:
        """Whether ``src`` can reach ``dst`` directly."""
        if src in self.no_access_gpus or dst in self.no_access_gpus:
            return False
        return (src, dst) not in self.no_access

    def spec(self, src: int, dst: int) -> Mapping[str, Any]:
        """The most specific entry for the pair; the lower figures where two GPUs' meet."""
        exact = self.one_way.get((src, dst)) or self.both_ways.get(frozenset((src, dst)))
        if exact is not None:
            return exact
        ends = [self.every_peer[gpu] for gpu in (src, dst) if gpu in self.every_peer]
        if len(ends) < 2:
            return ends[0] if ends else {}
        merged: dict[str, Any] = {**ends[1], **ends[0]}
        for key in _LINK_KEYS:
            given = [float(end[key]) for end in ends if key in end]
            if given:
                merged[key] = min(given)
        return merged


__all__ = [
    "NO_SECTION",
    "SECTION_KEYS",
    "busbw_at",
    "check_interconnect_section",
    "parse_pair",
    "simulated_interconnect",
]
