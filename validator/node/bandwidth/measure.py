"""The measurement loops: copies timed with CUDA events, the peer matrix, NCCL all-reduce.

Everything here talks to the device through :class:`~validator.node.burnin.cuda_libs.CudaApi`
and :class:`~validator.node.bandwidth.nccl_lib.NcclApi`, so the tests run it against fake
libraries with the same signatures. Each figure is timed on the device (an event recorded
before and after a loop of back-to-back copies on the same stream, as nvbandwidth's loop
count does, so the host's queuing gap before the first copy is a sliver of the time),
repeated, and the median kept; GB/s are 10^9 bytes per second, as nvbandwidth and
nccl-tests print them.

A measurement that fails becomes that figure's reason (:func:`failed`), and the caller goes
on with the next. :class:`Budget` keeps the whole run inside its deadline: a measurement
whose estimate (from the rates measured so far) does not fit is not started.
"""

from __future__ import annotations

import array
import ctypes
import dataclasses
import functools
import math
import statistics
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from validator.model import (
    AllReduce,
    AllReducePoint,
    Bandwidth,
    Measured,
    Reason,
    Unavailable,
)
from validator.node import stop_request
from validator.node.bandwidth.bandwidth_config import InterconnectConfig
from validator.node.bandwidth.nccl_lib import NcclApi
from validator.node.burnin.cuda_libs import (
    MEMCPY_DEVICE_TO_DEVICE,
    MEMCPY_DEVICE_TO_HOST,
    MEMCPY_HOST_TO_DEVICE,
    STREAM_NON_BLOCKING,
    CudaApi,
)

T = TypeVar("T")
Clock = Callable[[], float]

NO_TIME = "no time left within the deadline"
# Before anything is measured, a copy is assumed to move this many bytes a second (well
# below any PCIe Gen3 x16 link), so the first estimate errs on the long side.
FIRST_GUESS_BYTES_PER_S = 5e9
# ncclCommInitAll on an 8-GPU node takes a second or two; this much must be left.
NCCL_INIT_GUESS_S = 5.0
# All-reduce buffers may take this share of the smallest free device memory.
ALL_REDUCE_MEMORY_SHARE = 0.8
FLOAT32 = 4
# A timed repeat runs copies back to back for at least this long: queuing one copy costs
# the host 5-10 us, which is several percent of one 256 MiB copy within an H200 (~110 us).
REPEAT_MIN_S = 0.005
# ... but never more copies than this in one repeat (small copies would be host-bound).
MAX_COPY_LOOPS = 128
# The all-reduce's results are checked at the smallest size (NCCL's small-message
# protocols) and at the largest of the sweep up to this one (its large-message protocol).
LARGE_CHECK_BYTES = 256 << 20
# Results are compared with the expected bytes this much at a time.
CHECK_CHUNK_BYTES = 4 << 20


class MeasureError(RuntimeError):
    """A timing that cannot be a measurement (an event pair that gives no time)."""


def failed(exc: BaseException) -> Unavailable:
    """The reason a measurement has no figure: the exception's own words."""
    return Unavailable(Reason.ERROR, str(exc) or type(exc).__name__)


def no_time() -> Unavailable:
    """The reason of a measurement the deadline, or a stop signal, left no time for."""
    if stop_request.requested():
        return Unavailable(Reason.NOT_MEASURED, stop_request.reason())
    return Unavailable(Reason.ERROR, NO_TIME)


def gb_per_s(counted_bytes: int, elapsed_ms: float) -> float:
    """GB/s (10^9 bytes a second) of ``counted_bytes`` in ``elapsed_ms``.

    Raises:
        MeasureError: no time elapsed (the events were not ordered around the copy).
    """
    if not elapsed_ms > 0:
        raise MeasureError(f"the events around the copy gave {elapsed_ms} ms")
    return counted_bytes / (elapsed_ms / 1e3) / 1e9


def bandwidth(repeats: Sequence[float], size_bytes: int) -> Bandwidth:
    """The median of the repeats (GB/s), each kept, rounded as nvbandwidth prints them."""
    return Bandwidth(
        gb_s=round(statistics.median(repeats), 2),
        repeats_gb_s=tuple(round(value, 2) for value in repeats),
        size_bytes=size_bytes,
    )


def unmeasured(why: Unavailable, size_bytes: int | None = None) -> Bandwidth:
    """A copy with no figure, and why."""
    return Bandwidth(gb_s=why, size_bytes=size_bytes)


def bus_bandwidth(algbw_gb_s: float, ranks: int) -> float:
    """nccl-tests' busbw of an all-reduce: algbw x 2(n-1)/n (8 ranks: x 1.75)."""
    return algbw_gb_s * 2 * (ranks - 1) / ranks


# ------------------------------------------------------------------ time


def copy_loops(copy_s: float) -> int:
    """Copies in one timed repeat: enough to last ``REPEAT_MIN_S``, at most ``MAX_COPY_LOOPS``."""
    if not copy_s > 0:
        return MAX_COPY_LOOPS
    # A hair below the ratio first: 5 ms of 1 ms copies is 5, not 6 by a rounding error.
    return max(1, min(MAX_COPY_LOOPS, math.ceil(REPEAT_MIN_S / copy_s * (1 - 1e-9))))


@dataclass
class Tally:
    """The bytes a measurement queued, for the budget to learn its rate from."""

    moved: int = 0


@dataclass
class Budget:
    """The deadline, and how fast each kind of measurement went so far.

    Args:
        until: the deadline on ``clock``'s scale; None for none.
        clock: seconds, monotonic (``time.monotonic`` outside tests).
    """

    until: float | None
    clock: Clock
    rates: dict[str, list[float]] = field(default_factory=dict)  # kind -> bytes per wall second

    def left(self) -> float | None:
        """Seconds to the deadline (None: no deadline)."""
        return None if self.until is None else self.until - self.clock()

    def estimate(self, kind: str, moved_bytes: int, *, latest: bool = False) -> float:
        """Seconds ``moved_bytes`` of ``kind`` should take, from the rates seen so far.

        The slowest rate of the kind (``latest``: its last one, for a sweep whose rate
        grows with size); without one, the slowest of any kind; without any, a guess.
        """
        own = self.rates.get(kind)
        if own:
            rate = own[-1] if latest else min(own)
        else:
            seen = [rate for rates in self.rates.values() for rate in rates]
            rate = min(seen) if seen else FIRST_GUESS_BYTES_PER_S
        return moved_bytes / rate

    def allows(self, seconds: float) -> bool:
        """Whether something taking ``seconds`` ends before the deadline (never once stopped)."""
        if stop_request.requested():
            return False
        left = self.left()
        return left is None or seconds <= left

    def fits(self, kind: str, moved_bytes: int, *, latest: bool = False) -> bool:
        """Whether ``moved_bytes`` of ``kind`` should end before the deadline."""
        return self.allows(self.estimate(kind, moved_bytes, latest=latest))

    def copy_seconds(self, kind: str, step_bytes: int, config: InterconnectConfig) -> float:
        """Seconds a copy measurement should take: its warm-up, then each repeat's loop.

        ``step_bytes``: what one step of the loop moves (one copy; both of a pair's).
        """
        step_s = self.estimate(kind, step_bytes)
        loops = copy_loops(step_s)
        return step_s * (max(1, config.warmup) + config.repeats * loops)

    def fits_copies(self, kind: str, step_bytes: int, config: InterconnectConfig) -> bool:
        """Whether a copy measurement should end before the deadline."""
        return self.allows(self.copy_seconds(kind, step_bytes, config))

    def timed(self, kind: str, moved: int | Tally, measure: Callable[[], T]) -> T:
        """Run ``measure`` and learn the kind's rate from its wall time (even if it fails).

        ``moved``: the bytes it moves, or the tally it counts them in as it goes.
        """
        start = self.clock()
        try:
            return measure()
        finally:
            elapsed = self.clock() - start
            moved_bytes = moved.moved if isinstance(moved, Tally) else moved
            if elapsed > 0 and moved_bytes > 0:
                self.rates.setdefault(kind, []).append(moved_bytes / elapsed)


# ------------------------------------------------------------------ resources


class Cleanup:
    """What to release, released in reverse order; a failing release does not stop the rest."""

    def __init__(self) -> None:
        self._steps: list[Callable[[], None]] = []
        self.errors: list[str] = []

    def add(self, step: Callable[[], None]) -> None:
        """Release this later."""
        self._steps.append(step)

    def run(self) -> None:
        """Release everything added, newest first."""
        while self._steps:
            step = self._steps.pop()
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - every release is attempted
                self.errors.append(str(exc))


@dataclass
class Device:
    """One CUDA device's stream, event pair and copy buffers (``size`` bytes each)."""

    ordinal: int
    size: int
    stream: int = 0
    start: int = 0
    end: int = 0
    send: int = 0
    recv: int = 0


def open_device(api: CudaApi, ordinal: int, size: int, cleanup: Cleanup) -> Device:
    """A stream that ignores stream 0, two events and two device buffers on ``ordinal``."""
    device = Device(ordinal=ordinal, size=size)
    api.set_device(ordinal)
    device.stream = api.stream_create(STREAM_NON_BLOCKING)
    cleanup.add(_on(api, ordinal, api.stream_destroy, device.stream))
    device.start = api.event_create()
    cleanup.add(_on(api, ordinal, api.event_destroy, device.start))
    device.end = api.event_create()
    cleanup.add(_on(api, ordinal, api.event_destroy, device.end))
    device.send = api.malloc(size)
    cleanup.add(_on(api, ordinal, api.free, device.send))
    device.recv = api.malloc(size)
    cleanup.add(_on(api, ordinal, api.free, device.recv))
    return device


# ------------------------------------------------------------------ copies


def _loop(enqueue: Callable[[], None], copies: int, tally: Tally | None, step_bytes: int) -> None:
    for _ in range(copies):
        enqueue()
    if tally is not None:
        tally.moved += step_bytes * copies


def _time_loop(
    api: CudaApi,
    device: Device,
    enqueue: Callable[[], None],
    copies: int,
    tally: Tally | None,
    step_bytes: int,
) -> float:
    """Milliseconds the device took for ``copies`` back-to-back copies on its stream."""
    api.set_device(device.ordinal)
    api.event_record(device.start, device.stream)
    _loop(enqueue, copies, tally, step_bytes)
    api.event_record(device.end, device.stream)
    api.event_synchronize(device.end)
    return api.event_elapsed_ms(device.start, device.end)


def _per_copy_s(elapsed_ms: float, copies: int) -> float:
    """Seconds one warm-up copy took, for the loop count."""
    if not elapsed_ms > 0:
        raise MeasureError(f"the events around the warm-up gave {elapsed_ms} ms")
    return elapsed_ms / 1e3 / copies


def timed_copies(
    api: CudaApi,
    device: Device,
    enqueue: Callable[[], None],
    counted_bytes: int,
    config: InterconnectConfig,
    tally: Tally | None = None,
) -> Bandwidth:
    """A timed warm-up, then ``config.repeats`` timed loops of copies: their median.

    The warm-up (``config.warmup`` copies, at least one) gives one copy's time, and so
    each repeat's loop count (:func:`copy_loops`); a repeat's figure is its copies' bytes
    over the loop's device time.

    Args:
        api: the runtime.
        device: whose stream the copies run on (its events time them).
        enqueue: queues one copy on ``device.stream`` (its device is current).
        counted_bytes: the bytes one copy counts for (2 x size for a copy within HBM).
        config: warm-up and repeats.
        tally: where the bytes queued are counted (for the deadline's estimates).
    """
    warmup = max(1, config.warmup)
    loops = copy_loops(
        _per_copy_s(_time_loop(api, device, enqueue, warmup, tally, counted_bytes), warmup)
    )
    repeats = [
        gb_per_s(
            counted_bytes * loops, _time_loop(api, device, enqueue, loops, tally, counted_bytes)
        )
        for _ in range(config.repeats)
    ]
    return bandwidth(repeats, counted_bytes)


def host_to_device(
    api: CudaApi, device: Device, host: int, config: InterconnectConfig, tally: Tally | None = None
) -> Bandwidth:
    """Pinned host memory to the device, on the copy engine."""
    size = device.size

    def copy() -> None:
        api.memcpy_async(device.recv, host, size, MEMCPY_HOST_TO_DEVICE, device.stream)

    return timed_copies(api, device, copy, size, config, tally)


def device_to_host(
    api: CudaApi, device: Device, host: int, config: InterconnectConfig, tally: Tally | None = None
) -> Bandwidth:
    """The device to pinned host memory, on the copy engine."""
    size = device.size

    def copy() -> None:
        api.memcpy_async(host, device.send, size, MEMCPY_DEVICE_TO_HOST, device.stream)

    return timed_copies(api, device, copy, size, config, tally)


def within_device(
    api: CudaApi, device: Device, config: InterconnectConfig, tally: Tally | None = None
) -> Bandwidth:
    """A copy within the device's memory, counted as bytes read plus written (2 x size)."""
    size = device.size

    def copy() -> None:
        api.memcpy_async(device.recv, device.send, size, MEMCPY_DEVICE_TO_DEVICE, device.stream)

    return timed_copies(api, device, copy, 2 * size, config, tally)


def peer_unidirectional(
    api: CudaApi, src: Device, dst: Device, config: InterconnectConfig, tally: Tally | None = None
) -> Bandwidth:
    """``src`` to ``dst`` alone, timed on the source's stream."""
    size = src.size

    def copy() -> None:
        api.memcpy_peer_async(dst.recv, dst.ordinal, src.send, src.ordinal, size, src.stream)

    return timed_copies(api, src, copy, size, config, tally)


@dataclass
class _Rounds:
    """Each device's events for the rounds of a copy both ways: when each began and ended."""

    began: dict[int, list[int]] = field(default_factory=dict)  # ordinal -> event per round
    ended: dict[int, list[int]] = field(default_factory=dict)


def _round_events(
    api: CudaApi, devices: Sequence[Device], rounds: int, cleanup: Cleanup
) -> _Rounds:
    events = _Rounds()
    for device in devices:
        api.set_device(device.ordinal)
        for marks in (events.began, events.ended):
            own = marks.setdefault(device.ordinal, [])
            for _ in range(rounds):
                event = api.event_create()
                cleanup.add(_on(api, device.ordinal, api.event_destroy, event))
                own.append(event)
    return events


def peer_bidirectional(
    api: CudaApi, a: Device, b: Device, config: InterconnectConfig, tally: Tally | None = None
) -> tuple[Bandwidth, Bandwidth]:
    """``a`` to ``b`` and ``b`` to ``a`` at once, each on its source's stream.

    Both directions must start together, or one's first copies (and the other's last) run
    alone and faster. So each round of loops is queued behind the last: ``a``'s stream
    waits for ``b``'s previous round to end and marks its start; ``b``'s stream waits for
    that mark (``cudaStreamWaitEvent``). The first round is untimed: it keeps the streams
    busy while the host queues the timed rounds, so none of them begins with a queue gap.

    Returns:
        The a->b copy's own bandwidth and the b->a copy's, each timed by its own events.
    """
    size = a.size

    def forward() -> None:
        api.memcpy_peer_async(b.recv, b.ordinal, a.send, a.ordinal, size, a.stream)

    def backward() -> None:
        api.memcpy_peer_async(a.recv, a.ordinal, b.send, b.ordinal, size, b.stream)

    warmup = max(1, config.warmup)
    loops = copy_loops(
        _per_copy_s(_both_warmup(api, a, b, forward, backward, warmup, tally), warmup)
    )
    rounds = config.repeats + 1
    cleanup = Cleanup()
    try:
        marks = _round_events(api, (a, b), rounds, cleanup)
        for number in range(rounds):
            _queue_round(api, (a, forward), (b, backward), marks, number, loops, tally)
        for device in (a, b):
            api.set_device(device.ordinal)
            api.event_synchronize(marks.ended[device.ordinal][-1])
        there = _round_figures(api, a, marks, size * loops)
        back = _round_figures(api, b, marks, size * loops)
    finally:
        cleanup.run()
    return bandwidth(there, size), bandwidth(back, size)


def _both_warmup(
    api: CudaApi,
    a: Device,
    b: Device,
    forward: Callable[[], None],
    backward: Callable[[], None],
    copies: int,
    tally: Tally | None,
) -> float:
    """Milliseconds ``copies`` steps both ways took, on ``a``'s events."""
    size = a.size
    api.set_device(a.ordinal)
    api.event_record(a.start, a.stream)
    api.set_device(b.ordinal)
    api.stream_wait_event(b.stream, a.start)
    for device, copy in ((a, forward), (b, backward)):
        api.set_device(device.ordinal)
        _loop(copy, copies, tally, size)
    api.set_device(a.ordinal)
    api.event_record(a.end, a.stream)
    for device in (a, b):
        api.set_device(device.ordinal)
        api.stream_synchronize(device.stream)
    api.set_device(a.ordinal)
    return api.event_elapsed_ms(a.start, a.end)


def _round_figures(api: CudaApi, device: Device, marks: _Rounds, round_bytes: int) -> list[float]:
    """GB/s of each timed round (all but the first) of ``device``'s direction."""
    api.set_device(device.ordinal)
    began, ended = marks.began[device.ordinal], marks.ended[device.ordinal]
    return [
        gb_per_s(round_bytes, api.event_elapsed_ms(start, end))
        for start, end in zip(began[1:], ended[1:])
    ]


def _queue_round(
    api: CudaApi,
    first: tuple[Device, Callable[[], None]],
    second: tuple[Device, Callable[[], None]],
    marks: _Rounds,
    number: int,
    loops: int,
    tally: Tally | None,
) -> None:
    """Queue one round: both loops, starting together once both streams' last round ended."""
    (a, forward), (b, backward) = first, second
    size = a.size
    api.set_device(a.ordinal)
    if number:
        api.stream_wait_event(a.stream, marks.ended[b.ordinal][number - 1])
    go = marks.began[a.ordinal][number]
    api.event_record(go, a.stream)
    api.set_device(b.ordinal)
    api.stream_wait_event(b.stream, go)
    api.event_record(marks.began[b.ordinal][number], b.stream)
    for device, copy in ((a, forward), (b, backward)):
        api.set_device(device.ordinal)
        _loop(copy, loops, tally, size)
        api.event_record(marks.ended[device.ordinal][number], device.stream)


# ------------------------------------------------------------------ peer access


@dataclass
class PeerAccess:
    """Peer access as this run found it, enabled where the devices allow it, then restored."""

    api: CudaApi
    access: dict[tuple[int, int], Measured[bool]] = field(default_factory=dict)
    errors: dict[tuple[int, int], str] = field(default_factory=dict)  # enabling failed
    enabled: list[tuple[int, int]] = field(default_factory=list)  # by this run

    def enable(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Ask ``cudaDeviceCanAccessPeer`` for each ordered pair of ordinals; enable it there."""
        for src, dst in pairs:
            try:
                can = self.api.can_access_peer(src, dst)
            except Exception as exc:  # noqa: BLE001 - this pair's finding
                self.access[(src, dst)] = failed(exc)
                self.errors[(src, dst)] = str(exc)
                continue
            self.access[(src, dst)] = can
            if not can:
                continue
            try:
                self.api.set_device(src)
                if self.api.enable_peer_access(dst):
                    self.enabled.append((src, dst))
            except Exception as exc:  # noqa: BLE001 - this pair's finding
                self.errors[(src, dst)] = str(exc)

    def restore(self) -> None:
        """Disable what this run enabled; what was enabled before stays so."""
        while self.enabled:
            src, dst = self.enabled.pop()
            self.api.set_device(src)
            self.api.disable_peer_access(dst)


# ------------------------------------------------------------------ all-reduce


@dataclass
class Rank:
    """One GPU of the all-reduce: its CUDA device, stream, events and buffers."""

    ordinal: int
    stream: int
    start: int
    end: int
    comm: int = 0
    send: int = 0
    recv: int = 0


def _launch(nccl: NcclApi, ranks: Sequence[Rank], count: int, *, in_place: bool) -> None:
    """One all-reduce of ``count`` floats on every rank, launched as one group."""
    nccl.group_start()
    try:
        for rank in ranks:
            send = rank.recv if in_place else rank.send
            nccl.all_reduce(send, rank.recv, count, rank.comm, rank.stream)
    finally:
        nccl.group_end()


def _time_all_reduce(
    api: CudaApi,
    nccl: NcclApi,
    ranks: Sequence[Rank],
    count: int,
    iterations: int,
    warmup: int,
    *,
    in_place: bool,
) -> float:
    """Seconds per all-reduce: the slowest rank's event time over ``iterations``."""
    for _ in range(warmup):
        _launch(nccl, ranks, count, in_place=in_place)
    for rank in ranks:
        api.set_device(rank.ordinal)
        api.event_record(rank.start, rank.stream)
    for _ in range(iterations):
        _launch(nccl, ranks, count, in_place=in_place)
    for rank in ranks:
        api.set_device(rank.ordinal)
        api.event_record(rank.end, rank.stream)
    slowest = 0.0
    for rank in ranks:
        api.set_device(rank.ordinal)
        api.event_synchronize(rank.end)
        slowest = max(slowest, api.event_elapsed_ms(rank.start, rank.end))
    if not slowest > 0:
        raise MeasureError(f"the events around {iterations} all-reduces gave {slowest} ms")
    return slowest / 1e3 / iterations


def checked_sizes(sizes: Sequence[int]) -> tuple[int, ...]:
    """The sweep's sizes whose results are checked: the smallest, and the largest up to 256 MiB.

    The two meet NCCL's small- and large-message protocols; a larger check would hold as
    much host memory as the GPUs' buffers.
    """
    if not sizes:
        return ()
    smallest = min(sizes)
    large = max((size for size in sizes if size <= LARGE_CHECK_BYTES), default=smallest)
    return (smallest,) if large == smallest else (smallest, large)


def _fill(buffer: ctypes.Array[ctypes.c_char], pattern: bytes) -> None:
    """Repeat ``pattern`` over the whole buffer, a chunk at a time."""
    size = ctypes.sizeof(buffer)
    chunk = pattern * max(1, CHECK_CHUNK_BYTES // len(pattern))
    base = ctypes.addressof(buffer)
    for offset in range(0, size, len(chunk)):
        ctypes.memmove(base + offset, chunk, min(len(chunk), size - offset))


def count_wrong(buffer: ctypes.Array[ctypes.c_char], expected: float) -> int:
    """Float32 elements of ``buffer`` that are not ``expected`` (NaN is wrong).

    Compared as bytes a chunk at a time; only a chunk that differs is read as floats.
    """
    size = ctypes.sizeof(buffer)
    chunk_bytes = max(FLOAT32, CHECK_CHUNK_BYTES - CHECK_CHUNK_BYTES % FLOAT32)
    pattern = struct.pack("<f", expected) * (chunk_bytes // FLOAT32)
    base = ctypes.addressof(buffer)
    wrong = 0
    for offset in range(0, size, chunk_bytes):
        length = min(chunk_bytes, size - offset)
        got = ctypes.string_at(base + offset, length)
        if got == (pattern if length == chunk_bytes else pattern[:length]):
            continue
        values = array.array("f")
        values.frombytes(got)
        if sys.byteorder == "big":
            values.byteswap()
        wrong += len(values) - values.count(expected)
    return wrong


def check_all_reduce(api: CudaApi, nccl: NcclApi, ranks: Sequence[Rank], count: int) -> int:
    """Elements wrong after one all-reduce where rank r sends r+1 everywhere (nccl-tests' #wrong).

    Every element of every rank's result must be n(n+1)/2, exactly (small integers in float32).
    One host buffer of the message's size fills each rank's input and reads each result.
    """
    size = count * FLOAT32
    host = ctypes.create_string_buffer(size)
    for number, rank in enumerate(ranks):
        _fill(host, struct.pack("<f", number + 1.0))
        api.set_device(rank.ordinal)
        api.memcpy(rank.send, ctypes.addressof(host), size, MEMCPY_HOST_TO_DEVICE)
        # From pageable memory the copy returns once staged, on the legacy stream, which
        # the ranks' non-blocking streams do not wait for: wait for it here.
        api.synchronize()
    _launch(nccl, ranks, count, in_place=False)
    total = len(ranks) * (len(ranks) + 1) / 2
    wrong = 0
    for rank in ranks:
        api.set_device(rank.ordinal)
        api.stream_synchronize(rank.stream)
        api.memcpy(ctypes.addressof(host), rank.recv, size, MEMCPY_DEVICE_TO_HOST)
        wrong += count_wrong(host, total)
    return wrong


def _checked(api: CudaApi, nccl: NcclApi, ranks: Sequence[Rank], size: int, budget: Budget) -> int:
    """The check at ``size``, its pace learnt for the next (host copies and comparison)."""
    return budget.timed(
        "all_reduce_check",
        size * len(ranks),
        lambda: check_all_reduce(api, nccl, ranks, size // FLOAT32),
    )


def _sizes_that_fit(api: CudaApi, ranks: Sequence[Rank], sizes: Sequence[int]) -> list[int]:
    """The sweep's sizes whose two buffers fit in every rank's free memory."""
    smallest_free = None
    for rank in ranks:
        api.set_device(rank.ordinal)
        free, _ = api.mem_info()
        smallest_free = free if smallest_free is None else min(smallest_free, free)
    room = (smallest_free or 0) * ALL_REDUCE_MEMORY_SHARE / 2
    return [size for size in sizes if size % FLOAT32 == 0 and 0 < size <= room]


def _point(
    size: int, seconds: float, in_place_seconds: float | None, ranks: int, wrong: int | None
) -> AllReducePoint:
    algbw = size / seconds / 1e9
    in_place = (
        round(bus_bandwidth(size / in_place_seconds / 1e9, ranks), 2) if in_place_seconds else None
    )
    return AllReducePoint(
        size_bytes=size,
        time_us=round(seconds * 1e6, 2),
        algbw_gb_s=round(algbw, 2),
        busbw_gb_s=round(bus_bandwidth(algbw, ranks), 2),
        busbw_in_place_gb_s=in_place,
        wrong=wrong,
    )


def _open_ranks(
    api: CudaApi, nccl: NcclApi, ordinals: Sequence[int], cleanup: Cleanup
) -> list[Rank]:
    ranks = []
    for ordinal in ordinals:
        api.set_device(ordinal)
        stream = api.stream_create(STREAM_NON_BLOCKING)
        cleanup.add(_on(api, ordinal, api.stream_destroy, stream))
        start = api.event_create()
        cleanup.add(_on(api, ordinal, api.event_destroy, start))
        end = api.event_create()
        cleanup.add(_on(api, ordinal, api.event_destroy, end))
        ranks.append(Rank(ordinal=ordinal, stream=stream, start=start, end=end))
    comms = nccl.comm_init_all(list(ordinals))
    for rank, comm in zip(ranks, comms):
        rank.comm = comm
        cleanup.add(functools.partial(nccl.comm_destroy, comm))
    return ranks


def _on(
    api: CudaApi, ordinal: int, release: Callable[[int], None], handle: int
) -> Callable[[], None]:
    def step() -> None:
        api.set_device(ordinal)
        release(handle)

    return step


def all_reduce_sweep(
    api: CudaApi,
    nccl: NcclApi,
    ordinals: Sequence[int],
    gpu_indices: Sequence[int],
    config: InterconnectConfig,
    budget: Budget,
) -> AllReduce:
    """NCCL all-reduce (float32 sum) over every size of the sweep that fits memory and time.

    Per size: warm-up, then ``all_reduce_iterations`` timed on every rank's stream; the
    time is the slowest rank's; out of place, then in place. Results are checked
    (``wrong``) at the smallest size, first, and after timing the largest up to 256 MiB
    (:func:`checked_sizes`), where the deadline leaves time. Sizes the deadline leaves no
    time for are not run; the sweep stops there. An NCCL or CUDA failure leaves no
    points: its reason instead.
    """
    version: Measured[str]
    try:
        version = nccl.version()
    except Exception as exc:  # noqa: BLE001 - the version is one fact among many
        version = failed(exc)
    result = AllReduce(
        ranks=len(ordinals),
        source="nccl",
        nccl_version=version,
        gpu_indices=tuple(gpu_indices),
    )
    if not budget.allows(NCCL_INIT_GUESS_S):
        return _with_points(result, no_time())
    cleanup = Cleanup()
    try:
        ranks = _open_ranks(api, nccl, ordinals, cleanup)
        points = _sweep(api, nccl, ranks, config, budget, cleanup)
    except Exception as exc:  # noqa: BLE001 - the all-reduce's finding, the copies stand
        return _with_points(result, failed(exc))
    finally:
        cleanup.run()
    return _with_points(result, points)


def _with_points(result: AllReduce, points: Measured[tuple[AllReducePoint, ...]]) -> AllReduce:
    return dataclasses.replace(result, points=points)


def _sweep(
    api: CudaApi,
    nccl: NcclApi,
    ranks: Sequence[Rank],
    config: InterconnectConfig,
    budget: Budget,
    cleanup: Cleanup,
) -> Measured[tuple[AllReducePoint, ...]]:
    sizes = _sizes_that_fit(api, ranks, config.all_reduce_sizes)
    if not sizes:
        return Unavailable(
            Reason.ERROR, "no all-reduce size of the sweep fits twice in the GPUs' free memory"
        )
    largest = max(sizes)
    for rank in ranks:
        api.set_device(rank.ordinal)
        rank.send = api.malloc(largest)
        cleanup.add(_on(api, rank.ordinal, api.free, rank.send))
        rank.recv = api.malloc(largest)
        cleanup.add(_on(api, rank.ordinal, api.free, rank.recv))
    checks = checked_sizes(sizes)
    wrong = {checks[0]: _checked(api, nccl, ranks, checks[0], budget)}
    iterations, warmup = config.all_reduce_iterations, config.all_reduce_warmup
    points = []
    for size in sizes:
        moved = size * (warmup + iterations + 1 + iterations)
        if not budget.fits("all_reduce", moved, latest=True):
            break
        count = size // FLOAT32

        def measure(count: int = count) -> tuple[float, float]:
            out_of_place = _time_all_reduce(
                api, nccl, ranks, count, iterations, warmup, in_place=False
            )
            in_place = _time_all_reduce(api, nccl, ranks, count, iterations, 1, in_place=True)
            return out_of_place, in_place

        seconds, in_place_seconds = budget.timed("all_reduce", moved, measure)
        if (
            size in checks
            and size not in wrong
            and budget.fits("all_reduce_check", size * len(ranks), latest=True)
        ):
            wrong[size] = _checked(api, nccl, ranks, size, budget)
        points.append(_point(size, seconds, in_place_seconds, len(ranks), wrong.get(size)))
    if not points:
        return no_time()
    return tuple(points)
