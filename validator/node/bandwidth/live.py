"""Measure what joins this host's GPUs, through its own CUDA runtime and NCCL (ctypes).

:func:`measure_live` waits for the GPUs to go idle, then measures, in this order and each
within the deadline:

1. per GPU: host to device and device to host with pinned host memory on the GPU's own
   NUMA node (where sysfs says which), and a copy within the GPU (the HBM figure);
2. the peer matrix: every ordered pair's peer access, its copy alone and both ways at once;
3. NCCL all-reduce over every GPU, one communicator per GPU in this process.

Results are keyed by NVML index: CUDA devices are matched to NVML's GPUs by PCI bus id
(:mod:`validator.node.burnin.devices`). A GPU or pair that fails gets its reason and the
others go on; :attr:`Interconnect.error` is set only when nothing could start (no CUDA
runtime, no device). Memory, streams and events are released, and peer access left as it
was found, on every path.

``python3 -m validator.node.bandwidth.live [--seconds S]`` measures this host by hand and
prints the :class:`~validator.model.Interconnect` as JSON (bench/gpu_check.sh uses it).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import socket
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Callable

from validator.model import (
    AllReduce,
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
    to_dict,
)
from validator.node import nvml
from validator.node.bandwidth import measure
from validator.node.bandwidth.bandwidth_config import InterconnectConfig
from validator.node.bandwidth.measure import Budget, Cleanup, Device, PeerAccess, Tally
from validator.node.bandwidth.nccl_lib import NOT_FOUND, open_nccl
from validator.node.burnin.backend import BackendUnavailable
from validator.node.burnin.cuda_libs import (
    CudaApi,
    Opener,
    find_cuda_runtimes,
    load_library,
    open_runtime,
    search_dirs,
)
from validator.node.burnin.devices import (
    CudaEnvironment,
    Matching,
    Target,
    match_devices,
    prepare_cuda_environment,
)
from validator.node.parsers.smi_common import normalize_bus_id

SOURCE = "cuda"
Clock = Callable[[], float]
Sleep = Callable[[float], None]
# One GPU's (compute %, memory-controller %) now.
Utilisation = Callable[[int], tuple[Measured[int], Measured[int]]]
NvmlSession = Callable[[], contextlib.AbstractContextManager[object]]
# The idle gate may take at most this share of the time left, so the measurements keep theirs.
IDLE_GATE_SHARE = 0.5


# ------------------------------------------------------------------ the idle gate


@dataclass(frozen=True)
class IdleGate:
    """How the idle gate went: seconds waited (None: NVML could not say), GPUs still busy."""

    waited_s: float | None
    busy: tuple[int, ...]


def _busy(reading: tuple[Measured[int], Measured[int]], max_pct: int) -> bool | None:
    """True above the limit, False at or below it, None when NVML gave no figure."""
    figures = [value for value in reading if isinstance(value, int)]
    if not figures:
        return None
    return any(value > max_pct for value in figures)


def wait_until_idle(
    indexes: Sequence[int],
    utilisation: Utilisation,
    config: InterconnectConfig,
    clock: Clock,
    sleep: Sleep,
    timeout_s: float,
) -> IdleGate:
    """Poll every ``config.idle_poll_s`` until each GPU's use is at most ``idle_max_pct``.

    Gives up after ``timeout_s`` and names the GPUs still busy. A GPU NVML gives no
    figure for is not waited on; when NVML gives none for any GPU, nothing is known.
    """
    start = clock()
    while True:
        states = {index: _busy(utilisation(index), config.idle_max_pct) for index in indexes}
        if all(state is None for state in states.values()):
            return IdleGate(waited_s=None, busy=())
        busy = tuple(sorted(index for index, state in states.items() if state))
        waited = clock() - start
        if not busy or waited + config.idle_poll_s > timeout_s:
            return IdleGate(waited_s=round(waited, 2), busy=busy)
        sleep(config.idle_poll_s)


def idle_gate(
    indexes: Sequence[int],
    config: InterconnectConfig,
    budget: Budget,
    session: NvmlSession,
    clock: Clock,
    sleep: Sleep,
) -> IdleGate:
    """The idle gate through NVML; NVML that cannot be opened is no gate (waited_s None)."""
    left = budget.left()
    timeout = config.idle_timeout_s
    if left is not None:
        timeout = max(0.0, min(timeout, IDLE_GATE_SHARE * left))
    try:
        with session() as lib:
            return wait_until_idle(
                indexes, lambda index: nvml.utilisation(lib, index), config, clock, sleep, timeout
            )
    except RuntimeError:
        return IdleGate(waited_s=None, busy=())


# ------------------------------------------------------------------ NUMA placement


class Affinity:
    """The calling thread's CPU affinity (Linux ``sched_*affinity``; tests substitute)."""

    def get(self) -> set[int]:
        """The CPUs this thread may run on."""
        return set(os.sched_getaffinity(0))

    def set(self, cpus: set[int]) -> None:
        """Run this thread on ``cpus`` only."""
        os.sched_setaffinity(0, cpus)


def sysfs_bus_id(bus_id: str) -> str:
    """NVML's 00000000:19:00.0 as sysfs names the device: 0000:19:00.0."""
    domain, _, rest = bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


def parse_cpulist(text: str) -> set[int]:
    """A kernel CPU list ("0-23,48-71") as a set of CPU numbers.

    Raises:
        ValueError: not a CPU list.
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def numa_cpus(bus_id: str | None, sysfs: str) -> tuple[Measured[int], set[int]]:
    """The GPU's NUMA node and that node's CPUs, from sysfs; why not when unreadable."""
    if bus_id is None:
        return Unavailable(Reason.ERROR, "NVML gave no PCI bus id to find its NUMA node"), set()
    device = sysfs_bus_id(bus_id)
    path = os.path.join(sysfs, "bus", "pci", "devices", device, "numa_node")
    text = _read(path)
    try:
        node = int(text.strip()) if text is not None else None
    except ValueError:
        node = None
    if node is None:
        return Unavailable(Reason.NOT_SUPPORTED, f"{path} cannot be read"), set()
    if node < 0:
        return Unavailable(Reason.NOT_SUPPORTED, f"the platform gives {device} no NUMA node"), set()
    cpulist = os.path.join(sysfs, "devices", "system", "node", f"node{node}", "cpulist")
    try:
        cpus = parse_cpulist(_read(cpulist) or "")
    except ValueError:
        cpus = set()
    if not cpus:
        return Unavailable(Reason.NOT_SUPPORTED, f"{cpulist} cannot be read"), set()
    return node, cpus


@contextlib.contextmanager
def on_numa_node(bus_id: str | None, sysfs: str, affinity: Affinity) -> Iterator[Measured[int]]:
    """Run the block on the GPU's NUMA node's CPUs, and say which node (or why not).

    Page-locked memory allocated in the block lands on that node (the kernel places
    pages near the CPU that first touches them). The thread's affinity is restored after.
    """
    node, cpus = numa_cpus(bus_id, sysfs)
    if isinstance(node, Unavailable):
        yield node
        return
    try:
        before = affinity.get()
        allowed = cpus & before
        if not allowed:
            raise OSError(f"none of node {node}'s CPUs is allowed to this process")
        affinity.set(allowed)
    except OSError as exc:
        yield Unavailable(Reason.ERROR, f"cannot run on NUMA node {node}'s CPUs: {exc}")
        return
    try:
        yield node
    finally:
        with contextlib.suppress(OSError):
            affinity.set(before)


# ------------------------------------------------------------------ the run


@dataclass
class Seams:
    """What the tests substitute: libraries, NVML, clocks, sysfs, CPU affinity."""

    dirs: Sequence[str] | None = None  # where the CUDA runtime and NCCL are looked for
    opener: Opener = load_library
    nccl_opener: Opener | None = None  # default: ``opener``
    nvml_session: NvmlSession = nvml.nvml_session
    clock: Clock = time.monotonic
    sleep: Sleep = time.sleep
    sysfs: str = "/sys"
    affinity: Affinity | None = None
    environment: CudaEnvironment | None = None  # default: prepare_cuda_environment()


def _targets(gpus: Sequence[GpuFacts]) -> list[Target]:
    return [
        Target(
            index=gpu.index,
            uuid=gpu.uuid,
            bus_id=gpu.pci_bus_id if isinstance(gpu.pci_bus_id, str) else None,
        )
        for gpu in gpus
        if gpu.status is GpuStatus.OK
    ]


def _now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class _Run:
    """One measurement: the runtime, the matched devices, the budget, what to release."""

    def __init__(
        self,
        api: CudaApi,
        facts: NodeFacts,
        matching: Matching,
        config: InterconnectConfig,
        budget: Budget,
        seams: Seams,
    ) -> None:
        self.api = api
        self.facts = facts
        self.matching = matching
        self.config = config
        self.budget = budget
        self.seams = seams
        self.cleanup = Cleanup()
        self.devices: dict[int, Device] = {}  # NVML index -> its open device
        self.reasons: dict[int, Unavailable] = {}  # NVML index -> why it has no figures
        self.size = config.copy_size_bytes

    # --- devices ---------------------------------------------------------------------

    def open_devices(self) -> None:
        """Open every GPU's device (stream, events, buffers); one that fails gets its reason."""
        for gpu in self.facts.gpus:
            index = gpu.index
            if gpu.status is not GpuStatus.OK:
                self.reasons[index] = Unavailable(
                    Reason.GPU_LOST if gpu.status is GpuStatus.LOST else Reason.ERROR,
                    f"GPU {index} did not answer NVML ({gpu.status.value})",
                )
                continue
            if index in self.matching.unseen:
                # Asked for and not measurable: a finding, never "nobody asked".
                self.reasons[index] = Unavailable(Reason.ERROR, self.matching.unseen[index])
                continue
            ordinal = self.matching.devices[index]
            try:
                self.devices[index] = measure.open_device(
                    self.api, ordinal, self.size, self.cleanup
                )
            except Exception as exc:  # noqa: BLE001 - this GPU's finding
                self.reasons[index] = Unavailable(
                    Reason.ERROR, f"setting up CUDA device {ordinal} failed: {exc}"
                )

    def _reason(self, index: int) -> Unavailable:
        """Why a GPU has no open device: its own reason, else that it was not set up."""
        return self.reasons.get(index) or Unavailable(
            Reason.ERROR, f"GPU {index} has no CUDA device set up to measure"
        )

    # --- per GPU -----------------------------------------------------------------------

    def _copy(
        self,
        kind: str,
        step_bytes: int,
        devices: Iterable[Device],
        run: Callable[[Tally], Bandwidth],
    ) -> Bandwidth:
        """One copy measurement within the deadline; a failure is its figure's reason.

        ``step_bytes``: what one step of its loop moves, for the deadline's estimate.
        """
        if not self.budget.fits_copies(kind, step_bytes, self.config):
            return measure.unmeasured(measure.no_time(), self.size)
        tally = Tally()
        try:
            return self.budget.timed(kind, tally, lambda: run(tally))
        except Exception as exc:  # noqa: BLE001 - this copy's finding
            self._settle(devices)
            return measure.unmeasured(measure.failed(exc), self.size)

    def _settle(self, devices: Iterable[Device]) -> None:
        """After a failure: wait out what the streams still hold, so the next copy starts clean."""
        for device in devices:
            with contextlib.suppress(Exception):
                self.api.set_device(device.ordinal)
                self.api.stream_synchronize(device.stream)

    def gpu(self, gpu: GpuFacts) -> GpuCopyBandwidth:
        """One GPU's H2D, D2H (pinned, on its NUMA node) and HBM copies."""
        base = GpuCopyBandwidth(index=gpu.index, uuid=gpu.uuid, pci_bus_id=gpu.pci_bus_id)
        device = self.devices.get(gpu.index)
        if device is None:
            why = self._reason(gpu.index)
            nothing = measure.unmeasured(why)
            return replace(base, numa_node=why, h2d=nothing, d2h=nothing, hbm=nothing)
        bus_id = gpu.pci_bus_id if isinstance(gpu.pci_bus_id, str) else None
        affinity = self.seams.affinity or Affinity()
        api, config = self.api, self.config
        with on_numa_node(bus_id, self.seams.sysfs, affinity) as node:
            h2d, d2h = self._host_copies(device)
        hbm = self._copy(
            "hbm",
            2 * self.size,
            [device],
            lambda tally: measure.within_device(api, device, config, tally),
        )
        return replace(base, numa_node=node, h2d=h2d, d2h=d2h, hbm=hbm)

    def _host_copies(self, device: Device) -> tuple[Bandwidth, Bandwidth]:
        """H2D and D2H through one page-locked buffer, made where the thread now runs."""
        api, config = self.api, self.config
        try:
            api.set_device(device.ordinal)
            host = api.host_alloc(self.size)
        except Exception as exc:  # noqa: BLE001 - pinned memory refused: this GPU's finding
            why = Unavailable(Reason.ERROR, f"page-locked host memory: {exc}")
            return measure.unmeasured(why, self.size), measure.unmeasured(why, self.size)
        try:
            h2d = self._copy(
                "h2d",
                self.size,
                [device],
                lambda tally: measure.host_to_device(api, device, host, config, tally),
            )
            d2h = self._copy(
                "d2h",
                self.size,
                [device],
                lambda tally: measure.device_to_host(api, device, host, config, tally),
            )
        finally:
            try:
                api.set_device(device.ordinal)
                api.free_host(host)
            except Exception as exc:  # noqa: BLE001 - the figures stand; the leak is said
                self.cleanup.errors.append(str(exc))
        return h2d, d2h

    # --- peers ---------------------------------------------------------------------------

    def peers(self) -> tuple[PeerBandwidth, ...]:
        """Every ordered pair of the node's GPUs, by NVML index."""
        indexes = [gpu.index for gpu in self.facts.gpus]
        pairs = [(src, dst) for src in indexes for dst in indexes if src != dst]
        access = PeerAccess(self.api)
        open_pairs = [
            (self.devices[src].ordinal, self.devices[dst].ordinal)
            for src, dst in pairs
            if src in self.devices and dst in self.devices
        ]
        try:
            access.enable(open_pairs)
            uni = {pair: self._unidirectional(pair, access) for pair in pairs}
            both = self._bidirectional(pairs, access)
        finally:
            try:
                access.restore()
            except Exception as exc:  # noqa: BLE001 - still release the rest
                self.cleanup.errors.append(str(exc))
        return tuple(
            PeerBandwidth(
                src=src,
                dst=dst,
                access=self._access(src, dst, access),
                unidirectional=uni[(src, dst)],
                bidirectional=both[(src, dst)],
            )
            for src, dst in pairs
        )

    def _pair_reason(self, pair: tuple[int, int], access: PeerAccess) -> Unavailable | None:
        """Why a pair cannot be measured (a GPU without figures, peer access that failed)."""
        for index in pair:
            if index not in self.devices:
                why = self._reason(index)
                return Unavailable(why.reason, f"GPU {index}: {why.detail}")
        ordinals = (self.devices[pair[0]].ordinal, self.devices[pair[1]].ordinal)
        if ordinals in access.errors:
            return Unavailable(Reason.ERROR, access.errors[ordinals])
        return None

    def _access(self, src: int, dst: int, access: PeerAccess) -> Measured[bool]:
        if src not in self.devices or dst not in self.devices:
            why = self._pair_reason((src, dst), access)
            return why or Unavailable(Reason.ERROR, f"GPU {src} or {dst} has no CUDA device")
        ordinals = (self.devices[src].ordinal, self.devices[dst].ordinal)
        return access.access.get(
            ordinals,
            Unavailable(Reason.ERROR, f"cudaDeviceCanAccessPeer gave no answer for {ordinals}"),
        )

    def _unidirectional(self, pair: tuple[int, int], access: PeerAccess) -> Bandwidth:
        why = self._pair_reason(pair, access)
        if why is not None:
            return measure.unmeasured(why, self.size)
        src, dst = self.devices[pair[0]], self.devices[pair[1]]
        return self._copy(
            "peer",
            self.size,
            [src, dst],
            lambda tally: measure.peer_unidirectional(self.api, src, dst, self.config, tally),
        )

    def _bidirectional(
        self, pairs: Sequence[tuple[int, int]], access: PeerAccess
    ) -> dict[tuple[int, int], Bandwidth]:
        """Each unordered pair once, both ways at once: each direction to its own entry."""
        results: dict[tuple[int, int], Bandwidth] = {}
        for a, b in pairs:
            if (a, b) in results:
                continue
            why = self._pair_reason((a, b), access) or self._pair_reason((b, a), access)
            if why is not None:
                results[(a, b)] = results[(b, a)] = measure.unmeasured(why, self.size)
                continue
            first, second = self.devices[a], self.devices[b]
            outcome: list[Bandwidth] = []

            def run(
                tally: Tally,
                first: Device = first,
                second: Device = second,
                outcome: list[Bandwidth] = outcome,
            ) -> Bandwidth:
                there, back = measure.peer_bidirectional(
                    self.api, first, second, self.config, tally
                )
                outcome.append(back)
                return there

            # A step of the loop moves a copy each way.
            results[(a, b)] = self._copy("peer_both", 2 * self.size, [first, second], run)
            results[(b, a)] = outcome[0] if outcome else results[(a, b)]
        return results

    # --- all-reduce ----------------------------------------------------------------------

    def all_reduce(self) -> Measured[AllReduce]:
        """NCCL all-reduce over every GPU with figures (all of them, or it is not run)."""
        missing = [gpu.index for gpu in self.facts.gpus if gpu.index not in self.devices]
        if missing:
            names = ", ".join(str(index) for index in missing)
            return Unavailable(
                Reason.ERROR, f"GPU {names} cannot take part: an all-reduce needs every GPU"
            )
        try:
            nccl = open_nccl(self.seams.dirs, self.seams.nccl_opener or self.seams.opener)
        except BackendUnavailable as exc:
            reason = Reason.NOT_SUPPORTED if str(exc) == NOT_FOUND else Reason.ERROR
            return Unavailable(reason, str(exc))
        indexes = sorted(self.devices)
        ordinals = [self.devices[index].ordinal for index in indexes]
        return measure.all_reduce_sweep(self.api, nccl, ordinals, indexes, self.config, self.budget)


def _nothing(why: str, started_at: str, elapsed: float, gate: IdleGate) -> Interconnect:
    reason = Unavailable(Reason.ERROR, why)
    return Interconnect(
        source=SOURCE,
        started_at=started_at,
        elapsed_s=round(elapsed, 3),
        idle_wait_s=gate.waited_s,
        busy_gpus=gate.busy,
        gpus=reason,
        peers=reason,
        all_reduce=reason,
        error=why,
    )


def _open(seams: Seams) -> tuple[CudaApi, list[str]]:
    """The runtime, and each CUDA device's PCI bus id ("" where it cannot say)."""
    dirs = search_dirs() if seams.dirs is None else seams.dirs
    api, _, count = open_runtime(find_cuda_runtimes(dirs), seams.opener)
    api.require_peer_functions()
    bus_ids = []
    for ordinal in range(count):
        try:
            bus_ids.append(normalize_bus_id(api.device_pci_bus_id(ordinal)) or "")
        except Exception:  # noqa: BLE001 - that device is then matched by nothing
            bus_ids.append("")
    return api, bus_ids


def measure_live(
    facts: NodeFacts,
    config: InterconnectConfig,
    until: float | None = None,
    *,
    seams: Seams | None = None,
) -> Interconnect:
    """Measure this host's copies, peer matrix and all-reduce (see the module docstring).

    Args:
        facts: this host's facts; its GPUs give the NVML indices, UUIDs and bus ids.
        config: sizes, repeats, the idle gate, which parts to measure.
        until: the deadline on ``time.monotonic()``'s clock: nothing is started that
            would not end by then; None for none.
        seams: test substitutes (libraries, NVML, clock, sysfs, affinity).

    Returns:
        The figures; never raises for a GPU's or the libraries' failures.
    """
    seams = seams or Seams()
    clock = seams.clock
    started, started_at = clock(), _now_iso()
    budget = Budget(until=until, clock=clock)
    # Before the runtime loads: it reads the device order once.
    environment = seams.environment or prepare_cuda_environment()
    targets = _targets(facts.gpus)
    gate = idle_gate(
        [target.index for target in targets], config, budget, seams.nvml_session, clock, seams.sleep
    )
    if not targets:
        return _nothing(
            "no GPU answered NVML: nothing to measure", started_at, clock() - started, gate
        )
    try:
        api, bus_ids = _open(seams)
    except Exception as exc:  # noqa: BLE001 - nothing can start: said, never raised
        why = f"no CUDA runtime can run: {exc}"
        return _nothing(why, started_at, clock() - started, gate)
    run = _Run(api, facts, match_devices(targets, bus_ids, environment), config, budget, seams)
    try:
        run.open_devices()
        gpus = tuple(run.gpu(gpu) for gpu in facts.gpus)
        peers = _peers_of(run, facts, config)
    finally:
        # The copy buffers go before NCCL's: the all-reduce needs the memory.
        run.cleanup.run()
    all_reduce = _all_reduce_of(run, facts, config)
    return Interconnect(
        source=SOURCE,
        started_at=started_at,
        elapsed_s=round(clock() - started, 3),
        idle_wait_s=gate.waited_s,
        busy_gpus=gate.busy,
        gpus=gpus,
        peers=peers,
        all_reduce=all_reduce,
    )


def _peers_of(
    run: _Run, facts: NodeFacts, config: InterconnectConfig
) -> Measured[tuple[PeerBandwidth, ...]]:
    if not config.peers:
        return Unavailable(Reason.NOT_MEASURED, "the peer matrix was not asked for")
    if len(facts.gpus) < 2:
        return Unavailable(Reason.NOT_SUPPORTED, "one GPU: no peer to copy to")
    return run.peers()


def _all_reduce_of(run: _Run, facts: NodeFacts, config: InterconnectConfig) -> Measured[AllReduce]:
    if not config.all_reduce:
        return Unavailable(Reason.NOT_MEASURED, "the all-reduce was not asked for")
    if len(facts.gpus) < 2:
        return Unavailable(Reason.NOT_SUPPORTED, "one GPU: an all-reduce needs two or more")
    return run.all_reduce()


# ------------------------------------------------------------------ by hand


def _host_facts() -> NodeFacts:
    reading = nvml.read_nvml()
    return NodeFacts(
        hostname=socket.gethostname(),
        source="live",
        nvml_status=reading.status,
        nvml_detail=reading.detail,
        gpus=reading.gpus,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Measure this host and print the Interconnect as JSON; exit 0 when anything was measured."""
    parser = argparse.ArgumentParser(
        prog="python3 -m validator.node.bandwidth.live",
        description="Measure this host's GPU copy, peer and all-reduce bandwidth.",
    )
    parser.add_argument("--seconds", type=float, help="end within this long")
    parser.add_argument("--copy-size-mib", type=int, help="bytes per copy, in MiB (256)")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    config = InterconnectConfig()
    if args.copy_size_mib:
        config = replace(config, copy_size_bytes=args.copy_size_mib << 20)
    until = time.monotonic() + args.seconds if args.seconds else None
    facts = _host_facts()
    result = measure_live(facts, config, until)
    sys.stdout.write(json.dumps(to_dict(result), indent=1) + "\n")
    if facts.nvml_detail and not facts.gpus:
        sys.stderr.write(f"NVML: {facts.nvml_detail}\n")
    return 0 if result.error is None else 3


if __name__ == "__main__":
    sys.exit(main())
