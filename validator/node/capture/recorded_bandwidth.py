"""The interconnect a support bundle recorded: nvbandwidth's copies and nccl-tests' all-reduce.

A bundle may hold ``nvbandwidth.json`` (preferred) or ``nvbandwidth.txt``, and
``all_reduce_perf.txt``. Their figures become the same :class:`Interconnect` the live
measurement gives, so the judge reads them the same way:

* ``host_to_device_memcpy_ce`` -> each GPU's ``h2d``, ``device_to_host_memcpy_ce`` ->
  ``d2h`` (the ``_sm`` testcases where the CE one is absent, and the source says so);
* ``device_local_copy`` -> ``hbm``, doubled: nvbandwidth reports the bytes copied per
  second, the model bytes read plus bytes written (the datasheet's HBM bandwidth);
* ``device_to_device_memcpy_write_ce`` (else ``..._read_ce``) -> each ordered pair's
  ``unidirectional``, the bidirectional testcases -> ``bidirectional``, all as source ->
  destination (a write matrix's row is the source, a read matrix's row the destination);
* peer access from the matrices themselves: a measured pair had access (nvbandwidth
  copies only between pairs whose peer access it could enable), a pair left ``N/A`` in
  a testcase that ran had none, a waived peer testcase means no pair had any; otherwise
  not measured.

nvbandwidth numbers the GPUs as CUDA does; they are matched to NVML's by the bus ids its
device list gives (v0.6 to v0.8), else by order, and the source says so. A figure that
is not a measurement (``N/A``, an old build's ``0.00``, a testcase that failed, was cut
short or waived) is its reason, never a number. A multi-node nccl-tests or nvbandwidth
run (``mpirun`` over several hosts, nvbandwidth's ``multinode_*`` testcases) is no
figure of one node, and the source says it is one. Wrong data is never "not
measured": ``#wrong`` stays on each point; older nccl-tests' "Out of bounds values :
N FAILED" (or an ``error`` column beyond its tolerance) becomes
:attr:`AllReduce.wrong`, the figures kept, and the judge fails it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from validator.error_tree import CaptureError
from validator.model import (
    IMPLAUSIBLE,
    AllReduce,
    AllReducePoint,
    Bandwidth,
    GpuCopyBandwidth,
    GpuFacts,
    Interconnect,
    Measured,
    NodeFacts,
    PeerBandwidth,
    Reason,
    Unavailable,
)
from validator.node.parsers.base import ParseError
from validator.node.parsers.nccl_tests import NcclParsed, NcclRank, parse_all_reduce
from validator.node.parsers.nvbandwidth import (
    NvbMatrix,
    NvbParsed,
    NvbStatus,
    NvbTestcase,
    parse_nvbandwidth,
)
from validator.safe_text import bus_key

if TYPE_CHECKING:
    from validator.node.capture.capture_replay import CaptureSystem

T = TypeVar("T")

# No copy today's GPUs make comes near this (B200's HBM3e: 8 TB/s read plus write).
PLAUSIBLE_MAX_GB_S = 100_000.0

# Each per-GPU figure, by preference: the copy-engine testcase, then the kernel copy.
H2D_TESTCASES = ("host_to_device_memcpy_ce", "host_to_device_memcpy_sm")
D2H_TESTCASES = ("device_to_host_memcpy_ce", "device_to_host_memcpy_sm")
HBM_TESTCASES = ("device_local_copy", "device_local_copy_sm")
# (testcase, read or write), by preference.
UNIDIRECTIONAL_TESTCASES = (
    ("device_to_device_memcpy_write_ce", "write"),
    ("device_to_device_memcpy_read_ce", "read"),
    ("device_to_device_memcpy_write_sm", "write"),
    ("device_to_device_memcpy_read_sm", "read"),
)
BIDIRECTIONAL_TESTCASES = (
    ("device_to_device_bidirectional_memcpy_write_ce", "write"),
    ("device_to_device_bidirectional_memcpy_read_ce", "read"),
    ("device_to_device_bidirectional_memcpy_write_sm", "write"),
    ("device_to_device_bidirectional_memcpy_read_sm", "read"),
)
# The matrix of a bidirectional testcase (v0.6 on) whose cell (a, b) is the a -> b copy.
_SOURCE_ROW_PART = {"write": "write2", "read": "read2"}


def recorded_interconnect(system: CaptureSystem, facts: NodeFacts) -> Interconnect | None:
    """The interconnect the bundle recorded; None when it holds no such file.

    Args:
        system: the bundle.
        facts: the node's facts from the same bundle (its GPUs: NVML indices, UUIDs and
            bus ids the recorded CUDA devices are matched to).

    Raises:
        CaptureError: a file that does not parse (the bundle normally refuses it when
            it is opened).
    """
    nvbandwidth = system.nvbandwidth_output()
    all_reduce_file = system.all_reduce_output()
    if nvbandwidth is None and all_reduce_file is None:
        return None
    notes: list[str] = []
    names: list[str] = []
    missing = Unavailable(
        Reason.NOT_MEASURED,
        "the bundle has no nvbandwidth output (nvbandwidth.json or nvbandwidth.txt)",
    )
    gpus: Measured[tuple[GpuCopyBandwidth, ...]] = missing
    peers: Measured[tuple[PeerBandwidth, ...]] = missing
    all_reduce: Measured[AllReduce] = Unavailable(
        Reason.NOT_MEASURED, "the bundle has no all_reduce_perf.txt"
    )
    if nvbandwidth is not None:
        name, text = nvbandwidth
        names.append(name)
        parsed = _parse(system, name, text, lambda t: parse_nvbandwidth(t, name))
        if parsed.multi_node:
            gpus = peers = _multi_node(parsed, name)
            notes.append(f"{name} is a multi-node run")
        else:
            copies = _Copies(parsed, name)
            copies.match(facts)
            gpus, peers = copies.gpus(), copies.peers()
            notes.extend(copies.notes)
    if all_reduce_file is not None:
        name, text = all_reduce_file
        names.append(name)
        all_reduce = all_reduce_of(_parse(system, name, text, parse_all_reduce), name, facts, notes)
    source = ", ".join(names) + (f" ({'; '.join(notes)})" if notes else "")
    return Interconnect(source=source, gpus=gpus, peers=peers, all_reduce=all_reduce)


def _multi_node(parsed: NvbParsed, name: str) -> Unavailable:
    """Why a run across hosts (nvbandwidth's multinode testcases) gives no figure of one node."""
    widths = [
        len(row) for case in parsed.testcases for matrix in case.matrices for row in matrix.rows
    ]
    hosts = len(set(parsed.hosts))
    # -j lists only the first rank's host's devices (NVIDIA/nvbandwidth pull 54): the
    # matrices still span every rank.
    count = max(len(parsed.hosts) if hosts > 1 else 0, max(widths, default=0))
    across = f"{count} GPUs on {hosts} hosts" if hosts > 1 else f"{count} GPUs on several hosts"
    return Unavailable(
        Reason.NOT_MEASURED, f"{name}: multi-node run ({across}): not a one-node figure"
    )


def _parse(system: CaptureSystem, name: str, text: str, parse: Callable[[str], T]) -> T:
    try:
        return parse(text)
    except ParseError as exc:
        raise CaptureError(
            f"{system.directory / name}: {exc}; capture it again or remove the file"
        ) from None


# ---------------------------------------------------------------- GPU matching


def _bus_parts(bus_id: str) -> tuple[int | None, int, int | None] | None:
    """(domain, bus, device) of a bus id; old nccl-tests' ``0x18`` names the bus alone.

    NVML's ``00000000:18:00.0`` and nccl-tests' ``0000:18:00`` are validator.safe_text.bus_key's.
    """
    full = bus_key(bus_id)
    if full is not None:
        return full
    bus_only = re.fullmatch(r"0x([0-9A-Fa-f]{1,2})", bus_id.strip())
    return (None, int(bus_only.group(1), 16), None) if bus_only else None


def _same_board(wanted: tuple[int | None, int, int | None], gpu: GpuFacts) -> bool:
    if not isinstance(gpu.pci_bus_id, str):
        return False
    have = _bus_parts(gpu.pci_bus_id)
    if have is None:
        return False
    return all(w is None or w == h for w, h in zip(wanted, have))


def boards_by_bus(buses: dict[int, str], gpus: Sequence[GpuFacts]) -> dict[int, int]:
    """Each device (or rank) whose bus id names exactly one GPU -> that GPU's NVML index."""
    matched: dict[int, int] = {}
    for device, bus in buses.items():
        parts = _bus_parts(bus)
        found = [gpu.index for gpu in gpus if parts is not None and _same_board(parts, gpu)]
        if len(found) == 1:
            matched[device] = found[0]
    return matched


def match_by_bus(buses: dict[int, str], gpus: Sequence[GpuFacts]) -> dict[int, int] | None:
    """Device -> NVML index where every bus id names its own GPU; else None."""
    matched = boards_by_bus(buses, gpus)
    if len(matched) != len(buses) or len(set(matched.values())) != len(matched):
        return None
    return matched


def match_by_order(devices: Sequence[int], gpus: Sequence[GpuFacts]) -> dict[int, int]:
    """CUDA device i -> the i-th GPU by NVML index (the devices beyond the bundle's: none)."""
    ordered = sorted(gpus, key=lambda gpu: gpu.index)
    return {device: ordered[device].index for device in devices if device < len(ordered)}


# ---------------------------------------------------------------- nvbandwidth


def _measured(value: float | None, what: str, *, factor: float = 1.0) -> Measured[float]:
    """A figure nvbandwidth printed, or why it is none."""
    if value is None:
        return Unavailable(Reason.NOT_MEASURED, f"{what}: nvbandwidth printed N/A")
    if value == 0.0:
        # nvbandwidth's first releases print 0.00 where they copied nothing.
        return Unavailable(Reason.NOT_MEASURED, f"{what}: nvbandwidth printed 0.00 (no copy)")
    figure = value * factor
    if figure > PLAUSIBLE_MAX_GB_S:
        return Unavailable(
            Reason.ERROR,
            f"{IMPLAUSIBLE} {figure!r} for {what}, outside 0-{PLAUSIBLE_MAX_GB_S:g} GB/s",
        )
    return figure


def _bandwidth(figure: Measured[float]) -> Bandwidth:
    return Bandwidth(gb_s=figure)


@dataclass
class _Copies:
    """nvbandwidth's figures turned into the model's, GPU by GPU and pair by pair."""

    parsed: NvbParsed
    name: str
    notes: list[str] = field(default_factory=list)
    # CUDA device -> NVML index, and the GPUs (NVML index -> facts) to report.
    nvml_of: dict[int, int] = field(default_factory=dict)
    gpu_facts: dict[int, GpuFacts | None] = field(default_factory=dict)
    mismatch: str | None = None

    # ------------------------------------------------------------ matching

    def cuda_devices(self) -> list[int]:
        """The CUDA devices the output lists, else as many as its widest matrix."""
        if self.parsed.devices:
            return [device.index for device in self.parsed.devices]
        widths = [
            len(row)
            for case in self.parsed.testcases
            for matrix in case.matrices
            for row in matrix.rows
        ]
        return list(range(max(widths, default=0)))

    def match(self, facts: NodeFacts) -> None:
        """Map nvbandwidth's CUDA devices to the bundle's GPUs (module docstring)."""
        devices = self.cuda_devices()
        gpus = sorted(facts.gpus, key=lambda gpu: gpu.index)
        if not gpus:
            self.nvml_of = {device: device for device in devices}
            self.gpu_facts = dict.fromkeys(devices)
            self.notes.append(
                "the bundle lists no GPUs: nvbandwidth's CUDA device numbers taken as GPU indices"
            )
            return
        self.gpu_facts = {gpu.index: gpu for gpu in gpus}
        buses = {d.index: d.pci_bus_id for d in self.parsed.devices if d.pci_bus_id}
        known = [gpu for gpu in gpus if isinstance(gpu.pci_bus_id, str)]
        if buses and len(buses) == len(devices) and known:
            self.match_by_bus(buses, known)
            return
        why = "nvbandwidth printed no bus ids" if not buses else "the bundle gives no bus ids"
        self.nvml_of = match_by_order(devices, gpus)
        self.notes.append(f"{self.name}: CUDA devices matched to GPUs by order ({why})")
        if len(devices) != len(gpus):
            self.notes.append(
                f"{self.name}: nvbandwidth saw {len(devices)} GPUs, the bundle {len(gpus)}"
            )

    def match_by_bus(self, buses: dict[int, str], gpus: Sequence[GpuFacts]) -> None:
        """Match by bus id: each side may lack boards of the other, not both.

        A device the bundle lacks (a GPU fallen off the bus since) is left out and
        named; GPUs nvbandwidth did not see (``CUDA_VISIBLE_DEVICES``) are not measured.
        Boards missing on both sides mean another host's output: an error.
        """
        matched = boards_by_bus(buses, gpus)
        unseen = {gpu.index for gpu in gpus} - set(matched.values())
        both_sides = len(matched) < len(buses) and unseen
        if len(set(matched.values())) != len(matched) or both_sides:
            matched = {}  # two devices on one board, or two lists of other boards
        if not matched:
            listed = ", ".join(sorted(buses.values()))
            self.mismatch = (
                f"{self.name}: the bus ids nvbandwidth lists ({listed}) are not the "
                "bundle's GPUs' (another host's output?)"
            )
            return
        for device in sorted(set(buses) - set(matched)):
            self.notes.append(
                f"{self.name}: CUDA device {device} ({buses[device]}) is none of the bundle's GPUs"
            )
        self.nvml_of = matched

    # ------------------------------------------------------------ testcases

    def chosen(self, names: Sequence[str], what: str) -> NvbTestcase | None:
        """The first of ``names`` the output ran; a fallback is noted in the source."""
        for position, name in enumerate(names):
            case = self.parsed.testcase(name)
            if case is not None:
                if position:
                    self.notes.append(f"{what} from {name} (no {names[0]} in {self.name})")
                return case
        return None

    def unusable(self, case: NvbTestcase | None, names: Sequence[str]) -> Unavailable | None:
        """Why a testcase gives no figures; None when it passed."""
        if case is None:
            return Unavailable(Reason.NOT_MEASURED, f"{self.name} has no {names[0]}")
        if case.status is NvbStatus.PASSED:
            return None
        if case.status is NvbStatus.FAILED:
            return Unavailable(Reason.ERROR, f"nvbandwidth {case.name} failed: {case.error}")
        if case.status is NvbStatus.WAIVED:
            return Unavailable(Reason.NOT_SUPPORTED, f"nvbandwidth waived {case.name}")
        return Unavailable(Reason.NOT_MEASURED, f"{self.name} is cut short inside {case.name}")

    # ------------------------------------------------------------ per GPU

    def gpus(self) -> Measured[tuple[GpuCopyBandwidth, ...]]:
        """Each GPU's H2D, D2H and HBM figures, or why there are none."""
        if self.mismatch is not None:
            return Unavailable(Reason.ERROR, self.mismatch)
        cases = [
            (self.chosen(H2D_TESTCASES, "h2d"), H2D_TESTCASES, 1.0),
            (self.chosen(D2H_TESTCASES, "d2h"), D2H_TESTCASES, 1.0),
            # Bytes copied per second -> bytes read plus bytes written per second.
            (self.chosen(HBM_TESTCASES, "hbm"), HBM_TESTCASES, 2.0),
        ]
        if all(case is None for case, _, _ in cases):
            wanted = ", ".join(names[0] for _, names, _ in cases)
            return Unavailable(Reason.NOT_MEASURED, f"{self.name} has none of {wanted}")
        cuda_of = {index: device for device, index in self.nvml_of.items()}
        found = []
        for index, gpu in sorted(self.gpu_facts.items()):
            h2d, d2h, hbm = (
                self.gpu_figure(case, names, cuda_of.get(index), index, factor)
                for case, names, factor in cases
            )
            found.append(
                GpuCopyBandwidth(
                    index=index,
                    uuid=gpu.uuid if gpu is not None else Unavailable(Reason.NOT_MEASURED),
                    pci_bus_id=gpu.pci_bus_id
                    if gpu is not None
                    else Unavailable(Reason.NOT_MEASURED),
                    numa_node=Unavailable(Reason.NOT_MEASURED, "nvbandwidth does not say"),
                    h2d=h2d,
                    d2h=d2h,
                    hbm=hbm,
                )
            )
        return tuple(found)

    def gpu_figure(
        self,
        case: NvbTestcase | None,
        names: Sequence[str],
        device: int | None,
        index: int,
        factor: float,
    ) -> Bandwidth:
        why = self.unusable(case, names)
        if why is not None:
            return Bandwidth(gb_s=why)
        assert case is not None  # noqa: S101 - unusable() said it passed
        what = f"{case.name}, GPU {index}"
        if device is None:
            return Bandwidth(
                gb_s=Unavailable(Reason.NOT_MEASURED, f"{what}: nvbandwidth did not see this GPU")
            )
        matrix = case.matrix()
        if matrix is None or not matrix.covers(0, device):
            return Bandwidth(
                gb_s=Unavailable(Reason.NOT_MEASURED, f"{what}: not in nvbandwidth's matrix")
            )
        return _bandwidth(_measured(matrix.value(0, device), what, factor=factor))

    # ------------------------------------------------------------ pairs

    def peers(self) -> Measured[tuple[PeerBandwidth, ...]]:
        """Every ordered pair's access and copy bandwidths, or why there are none."""
        if self.mismatch is not None:
            return Unavailable(Reason.ERROR, self.mismatch)
        uni = self.chosen_pair_case(UNIDIRECTIONAL_TESTCASES, "unidirectional")
        bidi = self.chosen_pair_case(BIDIRECTIONAL_TESTCASES, "bidirectional")
        if uni is None and bidi is None:
            return Unavailable(Reason.NOT_MEASURED, f"{self.name} has no device_to_device testcase")
        cuda_of = {index: device for device, index in self.nvml_of.items()}
        indices = sorted(self.gpu_facts)
        return tuple(
            self.pair(src, dst, cuda_of.get(src), cuda_of.get(dst), uni, bidi)
            for src in indices
            for dst in indices
            if src != dst
        )

    def chosen_pair_case(
        self, options: Sequence[tuple[str, str]], what: str
    ) -> tuple[NvbTestcase, str] | None:
        names = [name for name, _ in options]
        case = self.chosen(names, what)
        if case is None:
            return None
        return case, dict(options)[case.name]

    def pair(
        self,
        src: int,
        dst: int,
        a: int | None,
        b: int | None,
        uni: tuple[NvbTestcase, str] | None,
        bidi: tuple[NvbTestcase, str] | None,
    ) -> PeerBandwidth:
        what = f"GPU {src} -> GPU {dst}"
        if a is None or b is None:
            unseen = Unavailable(Reason.NOT_MEASURED, f"{what}: nvbandwidth did not see both GPUs")
            return PeerBandwidth(src, dst, unseen, Bandwidth(gb_s=unseen), Bandwidth(gb_s=unseen))
        return PeerBandwidth(
            src=src,
            dst=dst,
            access=self.access(a, b),
            unidirectional=self.pair_figure(uni, a, b, what, bidirectional=False),
            bidirectional=self.pair_figure(bidi, a, b, what, bidirectional=True),
        )

    def pair_figure(
        self,
        chosen: tuple[NvbTestcase, str] | None,
        a: int,
        b: int,
        what: str,
        *,
        bidirectional: bool,
    ) -> Bandwidth:
        """The a -> b copy of a pair testcase (module docstring: the matrices' axes)."""
        options = BIDIRECTIONAL_TESTCASES if bidirectional else UNIDIRECTIONAL_TESTCASES
        case, kind = chosen if chosen is not None else (None, "write")
        why = self.unusable(case, [name for name, _ in options])
        if why is not None:
            return Bandwidth(gb_s=why)
        assert case is not None  # noqa: S101 - unusable() said it passed
        matrix, source_is_row = _pair_matrix(case, kind)
        row, column = (a, b) if source_is_row else (b, a)
        if matrix is None or not matrix.covers(row, column):
            return Bandwidth(
                gb_s=Unavailable(Reason.NOT_MEASURED, f"{case.name}, {what}: not in its matrix")
            )
        return _bandwidth(_measured(matrix.value(row, column), f"{case.name}, {what}"))

    def access(self, a: int, b: int) -> Measured[bool]:
        """Could CUDA device a reach b's memory, as the peer testcases show it."""
        ran = [
            case
            for name, _ in (*UNIDIRECTIONAL_TESTCASES, *BIDIRECTIONAL_TESTCASES)
            if (case := self.parsed.testcase(name)) is not None
        ]
        cells = [
            matrix.value(a, b)
            for case in ran
            if case.status is NvbStatus.PASSED
            for matrix in case.matrices
            if matrix.covers(a, b)
        ]
        if any(cell is not None and cell > 0 for cell in cells):
            return True
        if any(cell is None for cell in cells):
            return False  # nvbandwidth leaves N/A only where it could not enable access
        if ran and all(case.status is NvbStatus.WAIVED for case in ran):
            return False  # its filter: no pair of GPUs has peer access
        return Unavailable(Reason.NOT_MEASURED, "nvbandwidth does not say")


def _pair_matrix(case: NvbTestcase, kind: str) -> tuple[NvbMatrix | None, bool]:
    """(the matrix of the a -> b copy, whether a is its row).

    A write matrix's row is the source; a read matrix's row the destination. A
    bidirectional testcase of v0.6 on has per-direction matrices: ``write2``/``read2``
    hold the row -> column copy. Earlier ones measured one copy: a write's row -> column,
    a read's column -> row.
    """
    part = case.matrix(_SOURCE_ROW_PART[kind])
    if part is not None:
        return part, True
    if len(case.matrices) == 1:
        return case.matrices[0], kind == "write"
    return None, True


# ---------------------------------------------------------------- nccl-tests


def all_reduce_of(
    parsed: NcclParsed, name: str, facts: NodeFacts, notes: list[str]
) -> Measured[AllReduce]:
    """The node's all-reduce from ``all_reduce_perf`` output, or why it is none.

    Args:
        parsed: the output.
        name: its file name (the all-reduce's source).
        facts: the bundle's GPUs, to name the ranks' GPUs.
        notes: where a doubt about the figures is added for the source.
    """
    ranks, hosts = parsed.ranks, parsed.hosts
    if parsed.multi_node:
        return Unavailable(
            Reason.NOT_MEASURED,
            f"multi-node run ({len(ranks)} ranks on {len(hosts)} hosts): not a one-node figure",
        )
    if not ranks:
        return Unavailable(
            Reason.NOT_MEASURED,
            f"{name} lists no ranks ('# Using devices'): the number of GPUs is unknown",
        )
    if not parsed.complete:
        notes.append(f"{name} is cut short (no 'Out of bounds values' line)")
    gpu_indices = _rank_gpus(ranks, facts, name, notes)
    return AllReduce(
        ranks=len(ranks),
        source=name,
        nccl_version=parsed.nccl_version
        or Unavailable(Reason.NOT_MEASURED, "the output does not say"),
        dtype=parsed.rows[0].dtype if parsed.rows else "float",
        points=_points(parsed, name),
        gpu_indices=gpu_indices,
        wrong=_run_wrong(parsed),
    )


def _points(parsed: NcclParsed, name: str) -> Measured[tuple[AllReducePoint, ...]]:
    """The sweep's points; a zero-byte all-reduce moves nothing and is no point."""
    rows = [row for row in parsed.rows if row.size_bytes > 0]
    if not rows:
        return Unavailable(
            Reason.ERROR, f"{name} holds no result row (the run stopped before its first size)"
        )
    figures = [
        f for row in rows for f in (row.busbw_gb_s, row.algbw_gb_s, row.in_place_busbw_gb_s) if f
    ]
    if any(figure > PLAUSIBLE_MAX_GB_S for figure in figures):
        return Unavailable(
            Reason.ERROR,
            f"{IMPLAUSIBLE} {max(figures)!r} for the all-reduce's bandwidth, outside "
            f"0-{PLAUSIBLE_MAX_GB_S:g} GB/s",
        )
    return tuple(
        AllReducePoint(
            size_bytes=row.size_bytes,
            time_us=row.time_us,
            algbw_gb_s=row.algbw_gb_s,
            busbw_gb_s=row.busbw_gb_s,
            busbw_in_place_gb_s=row.in_place_busbw_gb_s,
            wrong=_wrong(row.wrong, row.in_place_wrong),
        )
        for row in rows
    )


def _run_wrong(parsed: NcclParsed) -> int | None:
    """Wrong results the output counts only over the whole run; None where it does not.

    The ``#wrong`` layout counts per row (the points carry it): only a footer the rows
    do not account for is the run's. The older ``error`` layout counts in its footer the
    results whose error is beyond nccl-tests' tolerance; a run cut before the footer
    still shows them in its error column. Either way wrong data, never "not measured".
    """
    rows = parsed.rows
    footer = parsed.out_of_bounds or 0
    counts = [w for row in rows for w in (row.wrong, row.in_place_wrong) if w is not None]
    if counts:
        return footer if footer > sum(counts) else None
    beyond = [row.out_of_bounds for row in rows if row.out_of_bounds is not None]
    if not beyond and not footer:
        return None  # nothing was checked (validation 0, N/A), or nothing says
    return max(footer, sum(beyond))


def _wrong(out_of_place: int | None, in_place: int | None) -> int | None:
    if out_of_place is None and in_place is None:
        return None
    return (out_of_place or 0) + (in_place or 0)


def _rank_gpus(
    ranks: Sequence[NcclRank], facts: NodeFacts, name: str, notes: list[str]
) -> tuple[int, ...]:
    """The NVML index of each rank's GPU: by bus id where unique, else by device number."""
    gpus = sorted(facts.gpus, key=lambda gpu: gpu.index)
    if not gpus:
        return ()
    by_bus = match_by_bus({rank.rank: rank.bus for rank in ranks}, gpus)
    if by_bus is not None:
        return tuple(by_bus[rank.rank] for rank in ranks)
    by_order = match_by_order([rank.device for rank in ranks], gpus)
    if len(by_order) != len({rank.device for rank in ranks}):
        notes.append(f"{name}: its ranks' devices are not all the bundle's GPUs")
        return ()
    notes.append(f"{name}: ranks matched to GPUs by CUDA device number (bus ids not unique)")
    return tuple(by_order[rank.device] for rank in ranks)


__all__: Sequence[str] = (
    "BIDIRECTIONAL_TESTCASES",
    "D2H_TESTCASES",
    "H2D_TESTCASES",
    "HBM_TESTCASES",
    "PLAUSIBLE_MAX_GB_S",
    "UNIDIRECTIONAL_TESTCASES",
    "all_reduce_of",
    "boards_by_bus",
    "match_by_bus",
    "match_by_order",
    "recorded_interconnect",
)
