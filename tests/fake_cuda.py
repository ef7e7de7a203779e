"""A node of CUDA devices and its NCCL, in Python, timed by a fake clock.

The libraries are objects whose attributes behave like a ``ctypes.CDLL``'s functions:
each must be given its ``argtypes``/``restype`` before it is called, and every argument
must be one its declared C type accepts (``from_param``, as ctypes itself checks), so a
call marshalled wrongly fails here as it would on a real library. Results are written
through the pointers the caller passed.

Time: each stream runs its queued work in order; a copy moves its bytes at the link's
speed (GB/s, 10^9 bytes/s) from the speed tables, so every bandwidth the measurement
computes is exact. Work runs when the host waits for it (a stream, event or device
synchronize, or a blocking copy); the host clock (:class:`FakeClock`, also the
measurement's wall clock) then moves to when that work ended. Queuing costs the host
``call_s`` seconds a call (default 0), and work cannot start before it was queued, so a
host gap inside a timing shows in its figure. A peer copy moves at the pair's
bidirectional speed only while a copy the other way is moving at the same moment, and
alone at its unidirectional speed, so two directions that do not start together show
too; ``cudaStreamWaitEvent`` holds a stream until the event's recording has happened.
A peer copy without peer access enabled goes through the host at ``staged_gb_s``.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

# cudaError_t values the fake returns
SUCCESS = 0
INVALID_VALUE = 1
MEMORY_ALLOCATION = 2
INVALID_DEVICE = 101
INVALID_RESOURCE_HANDLE = 400
PEER_ACCESS_UNSUPPORTED = 217
PEER_ACCESS_ALREADY_ENABLED = 704
PEER_ACCESS_NOT_ENABLED = 705


def value_of(arg: Any) -> Any:
    """An int from what was passed for a pointer or handle."""
    if isinstance(arg, ctypes.c_void_p):
        return arg.value or 0
    return arg


class FakeFunction:
    """Stands in for a ctypes function pointer: checks its declaration and its arguments."""

    def __init__(
        self, name: str, impl: Callable[..., Any], calls: list[tuple[str, tuple[Any, ...]]]
    ) -> None:
        self.name = name
        self.impl = impl
        self.calls = calls
        self.argtypes: Any = None
        self.restype: Any = None

    def __call__(self, *args: Any) -> Any:
        assert self.argtypes is not None, f"{self.name} called before its signature was declared"
        assert len(args) == len(self.argtypes), f"{self.name}: {len(args)} arguments"
        for position, (arg, ctype) in enumerate(zip(args, self.argtypes)):
            try:
                ctype.from_param(arg)
            except TypeError as exc:
                raise AssertionError(
                    f"{self.name} argument {position}: {arg!r} as {ctype}"
                ) from exc
        self.calls.append((self.name, args))
        return self.impl(*args)


class FakeLib:
    """A library object: attribute access like ctypes.CDLL, functions from ``impl``."""

    def __init__(self, impl: Any, missing: Sequence[str] = ()) -> None:
        self._impl = impl
        self._missing = set(missing)
        self._functions: dict[str, FakeFunction] = {}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> FakeFunction:
        if name.startswith("_") or name in self._missing:
            raise AttributeError(name)
        if name not in self._functions:
            self._functions[name] = FakeFunction(name, getattr(self._impl, name), self.calls)
        return self._functions[name]

    def names(self) -> list[str]:
        """The functions called, in order."""
        return [name for name, _ in self.calls]


Speeds = dict[Any, Any]  # key -> GB/s, or a list of GB/s taken one per copy (the last stays)


def _take(table: Speeds, key: Any, default: float) -> float:
    value = table.get(key, default)
    if isinstance(value, list):
        return float(value.pop(0) if len(value) > 1 else value[0])
    return float(value)


class FakeClock:
    """The host's clock, in seconds; sleeping moves it."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Op:
    """Work queued on a stream."""

    stream: int
    nbytes: int = 0
    kind: str = "event"  # event | wait | h2d | d2h | d2d | peer | nccl
    src: int = -1  # devices of a peer copy
    dst: int = -1
    seconds: float | None = None  # fixed duration (nccl)
    queued_at: float = 0.0
    after: Op | None = None  # a wait: the event recording it waits for
    start: float | None = None  # set when it started
    end: float | None = None  # set when it ended
    left: float = 0.0  # bytes (seconds for nccl) still to go while it runs
    speeds: dict[bool, float] = field(default_factory=dict)  # concurrent? -> GB/s, as taken


@dataclass
class Stream:
    device: int
    cursor: float = 0.0
    queue: list[Op] = field(default_factory=list)


class FakeNode:
    """CUDA devices in ordinal order, each with its PCI bus id and its links' speeds.

    Args:
        bus_ids: the runtime's bus id of each CUDA ordinal ("0000:19:00.0").
        clock: the host clock.
        h2d, d2h: GB/s per ordinal (default 50); a list gives one figure per copy.
        hbm: GB/s of a copy within the device counted as read + written (default 4000).
        peer: GB/s of a peer copy alone, per (src, dst) ordinal pair (default 400).
        both: GB/s of each direction of a pair copying both ways at once (default 380).
        no_access: ordered pairs cudaDeviceCanAccessPeer says no for.
        staged_gb_s: a peer copy without peer access.
        call_s: host seconds each queued call (copy, event, wait, collective) costs.
    """

    def __init__(
        self,
        bus_ids: Sequence[str],
        clock: FakeClock,
        *,
        h2d: Speeds | None = None,
        d2h: Speeds | None = None,
        hbm: Speeds | None = None,
        peer: Speeds | None = None,
        both: Speeds | None = None,
        no_access: Sequence[tuple[int, int]] = (),
        staged_gb_s: float = 10.0,
        free_bytes: int = 1 << 34,
        call_s: float = 0.0,
    ) -> None:
        self.bus_ids = list(bus_ids)
        self.clock = clock
        self.h2d = h2d or {}
        self.d2h = d2h or {}
        self.hbm = hbm or {}
        self.peer = peer or {}
        self.both = both or {}
        self.no_access = set(no_access)
        self.staged_gb_s = staged_gb_s
        self.free_bytes = free_bytes
        self.call_s = call_s
        self.current = 0
        self.memory: dict[int, tuple[int, bytearray]] = {}  # address -> (device, bytes)
        self.pinned: dict[int, Any] = {}  # address -> ctypes buffer
        self.next_address = 0x7F0000000000
        self.streams: dict[int, Stream] = {}
        self.next_stream = 0x5000
        self.events: dict[int, tuple[int, Op | None]] = {}  # event -> (device, last recording)
        self.next_event = 1
        self.peer_enabled: set[tuple[int, int]] = set()  # (from device, to device)
        self.last_error = SUCCESS
        self.failures: dict[str, int] = {}  # function -> status of every call
        self.peer_failures: dict[tuple[int, int], int] = {}  # (src, dst) -> status of the copy
        self.host_allocs: list[int] = []  # size of each pinned allocation
        self.on_host_alloc: Callable[[], None] | None = None  # called at each cudaHostAlloc
        self.copies: list[tuple[str, int, int, int]] = []  # (kind, src, dst, bytes), as run
        self.ran: list[Op] = []  # every copy, as it ran (its start and end)
        # devices a blocking pageable H2D copy may still be landing on (legacy stream)
        self.in_flight: set[int] = set()

    # --- bookkeeping ----------------------------------------------------------------

    def _fail(self, name: str) -> int:
        return self.failures.get(name, SUCCESS)

    def live(self) -> dict[str, int]:
        """What is allocated or created and not yet released."""
        return {
            "device memory": len(self.memory),
            "pinned memory": len(self.pinned),
            "streams": len(self.streams),
            "events": len(self.events),
            "peer access": len(self.peer_enabled),
        }

    def device_of(self, address: int, size: int) -> int:
        for base, (device, block) in self.memory.items():
            if base <= address and address + size <= base + len(block):
                return device
        raise AssertionError(f"device access out of bounds: {address:#x}+{size}")

    def block(self, address: int, size: int) -> tuple[bytearray, int]:
        for base, (_, block) in self.memory.items():
            if base <= address and address + size <= base + len(block):
                return block, address - base
        raise AssertionError(f"device access out of bounds: {address:#x}+{size}")

    def is_pinned(self, address: int, size: int) -> bool:
        return any(
            base <= address and address + size <= base + len(buffer)
            for base, buffer in self.pinned.items()
        )

    def _stream(self, stream: Any) -> Stream:
        key = value_of(stream)
        assert key in self.streams, f"unknown stream {key:#x}"
        found = self.streams[key]
        assert found.device == self.current, (
            f"stream of device {found.device} used with device {self.current} current"
        )
        return found

    def queue(self, stream: Any, op: Op) -> Op:
        target = self._stream(stream)
        self.clock.now += self.call_s  # the host's own time to queue it
        op.stream = value_of(stream)
        op.queued_at = self.clock.now
        target.queue.append(op)
        return op

    # --- time ---------------------------------------------------------------------------

    def _speed(self, op: Op, concurrent: bool) -> float:
        """GB/s of this copy now; taken from the tables once per copy and mode."""
        if concurrent not in op.speeds:
            op.speeds[concurrent] = self._take_speed(op, concurrent)
        return op.speeds[concurrent]

    def _take_speed(self, op: Op, concurrent: bool) -> float:
        if op.kind == "h2d":
            return _take(self.h2d, op.dst, 50.0)
        if op.kind == "d2h":
            return _take(self.d2h, op.src, 50.0)
        if op.kind == "d2d":
            return _take(self.hbm, op.src, 4000.0) / 2  # read and written: half the counted rate
        if op.kind == "peer":
            pair = (op.src, op.dst)
            direct = pair in self.peer_enabled or (op.dst, op.src) in self.peer_enabled
            if not direct:
                return self.staged_gb_s
            if concurrent:
                return _take(self.both, pair, 380.0)
            return _take(self.peer, pair, 400.0)
        raise AssertionError(op.kind)

    def _rate(self, op: Op, running: Sequence[Op]) -> float:
        """Bytes a second of a running copy (seconds a second for a collective)."""
        if op.seconds is not None:
            return 1.0
        concurrent = op.kind == "peer" and any(
            other.kind == "peer" and (other.src, other.dst) == (op.dst, op.src) for other in running
        )
        return self._speed(op, concurrent) * 1e9

    @staticmethod
    def _ready(stream: Stream, op: Op) -> float | None:
        """When the stream's next op may start; None while it waits for an event to happen."""
        at = max(stream.cursor, op.queued_at)
        if op.kind == "wait" and op.after is not None:
            if op.after.end is None:
                return None
            at = max(at, op.after.end)
        return at

    def _start_ready(self, at: float, running: dict[int, Op]) -> None:
        """Start every stream's next op that may start by ``at`` (events end at once)."""
        started = True
        while started:
            started = False
            for key, stream in self.streams.items():
                if key in running or not stream.queue:
                    continue
                head = stream.queue[0]
                ready = self._ready(stream, head)
                if ready is None or ready > at:
                    continue
                stream.queue.pop(0)
                head.start = at
                started = True
                if head.kind in ("event", "wait"):
                    head.end = stream.cursor = at
                    continue
                head.left = head.seconds if head.seconds is not None else float(head.nbytes)
                running[key] = head
                if head.kind != "nccl":
                    self.copies.append((head.kind, head.src, head.dst, head.nbytes))

    def _next_ready(self, after: float, running: dict[int, Op]) -> float | None:
        times = [
            ready
            for key, stream in self.streams.items()
            if key not in running and stream.queue
            for ready in [self._ready(stream, stream.queue[0])]
            if ready is not None and ready > after
        ]
        return min(times) if times else None

    def run_all(self) -> None:
        """Run everything queued; the host clock moves to when the last of it ended.

        Time moves from one change to the next (an op starting or ending); in between,
        each running copy moves at its rate of that moment.
        """
        running: dict[int, Op] = {}
        heads = [
            ready
            for stream in self.streams.values()
            if stream.queue
            for ready in [self._ready(stream, stream.queue[0])]
            if ready is not None
        ]
        at = min(heads) if heads else self.clock.now
        latest = self.clock.now
        while True:
            self._start_ready(at, running)
            latest = max(latest, at)
            coming = self._next_ready(at, running)
            if not running:
                if coming is None:
                    break
                at = coming
                continue
            ops = list(running.values())
            rates = {key: self._rate(op, ops) for key, op in running.items()}
            finish = {key: at + running[key].left / rates[key] for key in running}
            step = min(finish.values())
            if coming is not None:
                step = min(step, coming)
            for key in list(running):
                op = running[key]
                if finish[key] <= step:
                    op.end = self.streams[key].cursor = step
                    self.ran.append(op)
                    del running[key]
                else:
                    op.left -= rates[key] * (step - at)
            at = step
        stuck = [stream for stream in self.streams.values() if stream.queue]
        assert not stuck, "a stream waits for an event that never happens"
        self.clock.now = latest

    # --- the runtime -----------------------------------------------------------------------

    def cudaGetDeviceCount(self, count: Any) -> int:
        count._obj.value = len(self.bus_ids)
        return self._fail("cudaGetDeviceCount")

    def cudaSetDevice(self, device: int) -> int:
        if not 0 <= device < len(self.bus_ids):
            return INVALID_DEVICE
        self.current = device
        return self._fail("cudaSetDevice")

    def cudaDeviceGetPCIBusId(self, text: Any, length: int, device: int) -> int:
        if not 0 <= device < len(self.bus_ids):
            return INVALID_DEVICE
        text.value = self.bus_ids[device].encode()[: length - 1]
        return SUCCESS

    def cudaMemGetInfo(self, free: Any, total: Any) -> int:
        free._obj.value = self.free_bytes
        total._obj.value = self.free_bytes * 2
        return SUCCESS

    def cudaMalloc(self, pointer: Any, size: int) -> int:
        status = self._fail("cudaMalloc")
        if status:
            return status
        address = self.next_address
        self.next_address += size + 4096
        self.memory[address] = (self.current, bytearray(size))
        pointer._obj.value = address
        return SUCCESS

    def cudaFree(self, pointer: Any) -> int:
        address = value_of(pointer)
        if address not in self.memory:
            return INVALID_VALUE
        del self.memory[address]
        return SUCCESS

    def cudaHostAlloc(self, pointer: Any, size: int, flags: int) -> int:
        status = self._fail("cudaHostAlloc")
        if status:
            return status
        if self.on_host_alloc is not None:
            self.on_host_alloc()
        buffer = ctypes.create_string_buffer(size)
        address = ctypes.addressof(buffer)
        self.pinned[address] = buffer
        self.host_allocs.append(size)
        pointer._obj.value = address
        return SUCCESS

    def cudaFreeHost(self, pointer: Any) -> int:
        address = value_of(pointer)
        if address not in self.pinned:
            return INVALID_VALUE
        del self.pinned[address]
        return SUCCESS

    def cudaMemcpy(self, dst: Any, src: Any, size: int, kind: int) -> int:
        """Blocking: runs everything queued, then the copy (data really moves)."""
        self.run_all()
        dst, src = value_of(dst), value_of(src)
        if kind == 1:
            block, offset = self.block(dst, size)
            block[offset : offset + size] = ctypes.string_at(src, size)
            if not self.is_pinned(src, size):
                # returned once staged: the DMA lands when the device is synchronized
                self.in_flight.add(self.device_of(dst, size))
        elif kind == 2:
            block, offset = self.block(src, size)
            ctypes.memmove(dst, bytes(block[offset : offset + size]), size)
        else:
            raise AssertionError(f"blocking memcpy kind {kind}")
        return SUCCESS

    def cudaMemcpyAsync(self, dst: Any, src: Any, size: int, kind: int, stream: Any) -> int:
        status = self._fail("cudaMemcpyAsync")
        if status:
            return status
        dst, src = value_of(dst), value_of(src)
        if kind == 1:
            assert self.is_pinned(src, size), "H2D from pageable memory"
            device = self.device_of(dst, size)
            op = Op(0, size, "h2d", src=-1, dst=device)
        elif kind == 2:
            assert self.is_pinned(dst, size), "D2H into pageable memory"
            device = self.device_of(src, size)
            op = Op(0, size, "d2h", src=device, dst=-1)
        elif kind == 3:
            device = self.device_of(src, size)
            assert self.device_of(dst, size) == device, "D2D across devices"
            op = Op(0, size, "d2d", src=device, dst=device)
        else:
            raise AssertionError(f"memcpy kind {kind}")
        assert self.streams[value_of(stream)].device == device, "copy on another device's stream"
        self.queue(stream, op)
        return SUCCESS

    def cudaMemcpyPeerAsync(
        self, dst: Any, dst_device: int, src: Any, src_device: int, size: int, stream: Any
    ) -> int:
        status = self.peer_failures.get((src_device, dst_device), self._fail("cudaMemcpyPeerAsync"))
        if status:
            return status
        assert self.device_of(value_of(dst), size) == dst_device, "dst is not on dstDevice"
        assert self.device_of(value_of(src), size) == src_device, "src is not on srcDevice"
        self.queue(stream, Op(0, size, "peer", src=src_device, dst=dst_device))
        return SUCCESS

    def cudaDeviceSynchronize(self) -> int:
        self.run_all()
        self.in_flight.discard(self.current)
        return SUCCESS

    def cudaStreamCreateWithFlags(self, stream: Any, flags: int) -> int:
        status = self._fail("cudaStreamCreateWithFlags")
        if status:
            return status
        assert flags == 1, "the copies need a non-blocking stream"
        key = self.next_stream
        self.next_stream += 0x10
        self.streams[key] = Stream(device=self.current, cursor=self.clock.now)
        stream._obj.value = key
        return SUCCESS

    def cudaStreamDestroy(self, stream: Any) -> int:
        key = value_of(stream)
        if key not in self.streams:
            return INVALID_RESOURCE_HANDLE
        self.run_all()
        del self.streams[key]
        return SUCCESS

    def cudaStreamSynchronize(self, stream: Any) -> int:
        self._stream(stream)
        self.run_all()
        return SUCCESS

    def cudaStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> int:
        """Later work on ``stream`` waits for the event's latest recording (of any device)."""
        assert flags == 0
        key = value_of(event)
        if key not in self.events:
            return INVALID_RESOURCE_HANDLE
        _, recording = self.events[key]
        self.queue(stream, Op(0, kind="wait", after=recording))
        return SUCCESS

    def cudaMemset(self, pointer: Any, value: int, size: int) -> int:
        raise AssertionError("not used by the measurement")

    def cudaEventCreate(self, event: Any) -> int:
        status = self._fail("cudaEventCreate")
        if status:
            return status
        event._obj.value = self.next_event
        self.events[self.next_event] = (self.current, None)
        self.next_event += 1
        return SUCCESS

    def cudaEventRecord(self, event: Any, stream: Any) -> int:
        key = value_of(event)
        device, _ = self.events[key]
        target = self.streams[value_of(stream)]
        if target.device != device:
            return INVALID_RESOURCE_HANDLE  # event and stream of different devices
        self.events[key] = (device, self.queue(stream, Op(0)))
        return SUCCESS

    def cudaEventSynchronize(self, event: Any) -> int:
        self.run_all()
        return SUCCESS

    def cudaEventElapsedTime(self, ms: Any, start: Any, end: Any) -> int:
        (_, first), (_, last) = self.events[value_of(start)], self.events[value_of(end)]
        if first is None or last is None:
            return INVALID_RESOURCE_HANDLE
        if first.end is None or last.end is None:
            return 600  # cudaErrorNotReady
        ms._obj.value = (last.end - first.end) * 1e3
        return SUCCESS

    def cudaEventDestroy(self, event: Any) -> int:
        if value_of(event) not in self.events:
            return INVALID_RESOURCE_HANDLE
        del self.events[value_of(event)]
        return SUCCESS

    def cudaDeviceCanAccessPeer(self, can: Any, device: int, peer: int) -> int:
        status = self._fail("cudaDeviceCanAccessPeer")
        if status:
            return status
        can._obj.value = int((device, peer) not in self.no_access and device != peer)
        return SUCCESS

    def cudaDeviceEnablePeerAccess(self, peer: int, flags: int) -> int:
        assert flags == 0
        status = self._fail("cudaDeviceEnablePeerAccess")
        if status:
            return status
        pair = (self.current, peer)
        if pair in self.no_access:
            return PEER_ACCESS_UNSUPPORTED
        if pair in self.peer_enabled:
            self.last_error = PEER_ACCESS_ALREADY_ENABLED
            return PEER_ACCESS_ALREADY_ENABLED
        self.peer_enabled.add(pair)
        return SUCCESS

    def cudaDeviceDisablePeerAccess(self, peer: int) -> int:
        pair = (self.current, peer)
        if pair not in self.peer_enabled:
            self.last_error = PEER_ACCESS_NOT_ENABLED
            return PEER_ACCESS_NOT_ENABLED
        self.peer_enabled.discard(pair)
        return SUCCESS

    def cudaGetLastError(self) -> int:
        error, self.last_error = self.last_error, SUCCESS
        return error

    def cudaGetErrorString(self, status: int) -> bytes:
        return f"fake error {status}".encode()


NCCL_STRINGS = {
    1: b"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    2: b"unhandled system error (run with NCCL_DEBUG=INFO for details)",
    3: b"internal error - please report this issue to the NCCL developers",
    4: b"invalid argument (run with NCCL_DEBUG=WARN for details)",
    5: b"invalid usage (run with NCCL_DEBUG=WARN for details)",
}


class FakeNccl:
    """NCCL over a :class:`FakeNode`: one communicator per device, sums in float32.

    Args:
        node: the devices.
        busbw: GB/s of bus bandwidth at a message size (bytes); algbw follows from it.
        version: ncclGetVersion's code (22105: 2.21.5).
    """

    def __init__(
        self,
        node: FakeNode,
        busbw: Callable[[int], float] = lambda size: 400.0,
        version: int = 22105,
    ) -> None:
        self.node = node
        self.busbw = busbw
        self.version = version
        self.comms: dict[int, tuple[int, int]] = {}  # comm -> (rank, device)
        self.group: list[tuple[int, int, int, int, int]] | None = None
        self.failures: dict[str, int] = {}
        self.wrong_rank: int | None = None  # its results get the elements at wrong_at wrong
        self.wrong_at: tuple[int, ...] = (0,)  # element numbers (negative: from the end)
        self.wrong_from_count = 0  # only collectives of at least this many elements go wrong
        self.launched: list[int] = []  # count of each collective

    def _fail(self, name: str) -> int:
        return self.failures.get(name, SUCCESS)

    def ncclGetVersion(self, version: Any) -> int:
        version._obj.value = self.version
        return self._fail("ncclGetVersion")

    def ncclCommInitAll(self, comms: Any, ndev: int, devlist: Any) -> int:
        status = self._fail("ncclCommInitAll")
        if status:
            return status
        for rank in range(ndev):
            handle = 0xC0000 + rank
            self.comms[handle] = (rank, devlist[rank])
            comms[rank] = handle
        return SUCCESS

    def ncclGroupStart(self) -> int:
        assert self.group is None, "nested group"
        self.group = []
        return SUCCESS

    def ncclAllReduce(
        self, send: Any, recv: Any, count: int, dtype: int, op: int, comm: Any, stream: Any
    ) -> int:
        status = self._fail("ncclAllReduce")
        if status:
            return status
        assert (dtype, op) == (7, 0), "float32 sum"
        assert self.group is not None, "an all-reduce outside a group, in one thread"
        self.group.append((value_of(send), value_of(recv), count, value_of(comm), value_of(stream)))
        return SUCCESS

    def ncclGroupEnd(self) -> int:
        calls, self.group = self.group, None
        assert calls is not None
        status = self._fail("ncclGroupEnd")
        if status:
            return status
        assert sorted(comm for *_, comm, _ in calls) == sorted(self.comms), "every rank once"
        count = calls[0][2]
        ranks = len(calls)
        size = count * 4
        algbw = self.busbw(size) * ranks / (2 * (ranks - 1))
        seconds = size / (algbw * 1e9)
        for *_, comm, stream in calls:
            device = self.comms[comm][1]
            assert device not in self.node.in_flight, "a copy into device memory may not be done"
            assert self.node.streams[stream].device == device, "stream of another device"
            saved, self.node.current = self.node.current, device
            self.node.queue(ctypes.c_void_p(stream), Op(0, kind="nccl", seconds=seconds))
            self.node.current = saved
        self._reduce(calls, count)
        self.launched.append(count)
        return SUCCESS

    def _reduce(self, calls: list[tuple[int, int, int, int, int]], count: int) -> None:
        size = count * 4
        inputs = []
        for send, _, _, _, _ in calls:
            block, offset = self.node.block(send, size)
            inputs.append(struct.unpack(f"<{count}f", bytes(block[offset : offset + size])))
        total = [sum(values) for values in zip(*inputs)]
        for send, recv, _, comm, _ in calls:
            del send
            out = list(total)
            if self.wrong_rank == self.comms[comm][0] and count >= self.wrong_from_count:
                for element in self.wrong_at:
                    out[element] += 1.0
            block, offset = self.node.block(recv, size)
            block[offset : offset + size] = struct.pack(f"<{count}f", *out)

    def ncclCommDestroy(self, comm: Any) -> int:
        if self.comms.pop(value_of(comm), None) is None:
            return 4
        return SUCCESS

    def ncclGetErrorString(self, status: int) -> bytes:
        return NCCL_STRINGS.get(status, b"unknown result code")

    def ncclGetLastError(self, comm: Any) -> bytes:
        return b"NET/IB : fake transport failure" if self.failures else b""
