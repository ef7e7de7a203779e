"""How one round of the stage across nodes is run: the plan per host, and the runner.

A runner runs one round's tests at once (they are on disjoint nodes) and brings back the
raw records; the service (:mod:`validator.service.cross_node_service`) judges them.

- RDMA: per pair, per HCA, one after another as Azure's and HPE's checks do: a server on
  the first node (``ib_write_bw -d <hca> --report_gbits -D <s> -p <port>
  [--use_cuda=<gpu>]``), then, once it listens, the client on the second node with the
  same options and the server's address; then ``ib_write_lat`` likewise (no GPU memory:
  the link's latency). The HCAs are paired by position (rail to rail).
- NCCL: per group, each collective (all_reduce_perf, alltoall_perf) as NCCL chooses its
  paths and again IB-only (``NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1``).

The plan per host is plain data the caller builds (:func:`host_plan`): the HCAs, the GPU
nearest each (``--use_cuda``), and the address its peers reach it at. Where the nearest
GPU is not known, HCA i is taken to sit by GPU i (the usual 8-HCA, 8-GPU board), which
the plan records.

:class:`StepRunner` does both rounds over a :class:`Launcher` (start a program on a host,
wait, kill it): :mod:`validator.remote.cross_node_ssh` launches over SSH,
:mod:`validator.remote.cross_node_local` on this machine. Every step it starts is killed
before its round returns, on a timeout and on Ctrl-C alike.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from validator.model import (
    IB_ONLY_ENVIRONMENT,
    NcclGroupResult,
    RdmaEnd,
    RdmaPairResult,
    Reason,
    Unavailable,
)
from validator.node.cross_node_results import (
    failed_group,
    failed_pair,
    nccl_group_result,
    rdma_pair_result,
)
from validator.node.parsers.base import ParseError
from validator.safe_text import one_line

Pair = tuple[str, str]
Group = tuple[str, ...]
PERFTEST_PORT = 18515  # perftest's default
PROGRAMS = {"write_bw": "ib_write_bw", "write_lat": "ib_write_lat"}
COLLECTIVE_PROGRAMS = {"all_reduce": "all_reduce_perf", "alltoall": "alltoall_perf"}
NCCL_NEEDS_LAUNCHER = "NCCL across nodes needs Slurm or mpirun"
_POLL_S = 0.05
_GIB = 1 << 30
# The largest NCCL message: nccl-tests allocates its send, receive and (with -c, its
# default) expected buffers of the largest size on every GPU before NCCL's own buffers
# and the CUDA context; it caps the size at (memory - 1 GiB) / 3 itself, and that 1 GiB
# was found too little (https://github.com/NVIDIA/nccl-tests/issues/220). A quarter of
# the smallest GPU's memory leaves the fourth quarter to NCCL and CUDA. A power of two,
# as the sweep doubles from -b; at most 16G, the size the catalog's floors were taken at
# (Azure's checks run -e 16G), and at least 1G, below which busbw is not at its plateau.
NCCL_LARGEST_CAP = 16 * _GIB
NCCL_LARGEST_FLOOR = 1 * _GIB
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": _GIB}


@dataclass(frozen=True)
class HostPlan:
    """One host as the stage reaches it: its HCAs and the GPU nearest each.

    ``gpus[i]`` is the CUDA device nearest ``hcas[i]`` (None: host memory, no GPUDirect).
    ``guessed`` says the pairing is HCA i <-> GPU i, not read from the topology.
    """

    name: str
    address: str
    hcas: tuple[str, ...]
    gpus: tuple[int | None, ...]
    guessed: bool = False
    gpu_count: int | None = None  # GPUs the node has, from its facts (None: not read)
    gpu_memory_mib: int | None = None  # its smallest GPU's memory (None: not read)

    def __post_init__(self) -> None:
        if len(self.gpus) != len(self.hcas):
            raise ValueError(f"{self.name}: one nearest GPU per HCA is needed")


@dataclass(frozen=True)
class CrossNodePlan:
    """What the runner needs: every host's plan and how long and how to run each tool."""

    hosts: tuple[HostPlan, ...]
    duration_s: int = 10  # ib_write_bw -D: Azure's checks run 10 s
    latency: bool = True  # also ib_write_lat per HCA
    gpudirect: bool = True  # --use_cuda on the nearest GPU
    port: int = PERFTEST_PORT
    listen_wait_s: float = 15.0  # a server not listening by then is no result
    step_margin_s: float = 30.0  # a client's limit: its duration plus this
    collectives: tuple[str, ...] = ("all_reduce", "alltoall")
    variants: tuple[str, ...] = ("default", "ib_only")
    # -b, and the ceiling of -e (each group's -e fits its smallest GPU: nccl_largest_bytes);
    # busbw is read at the largest
    nccl_bytes: tuple[str, str] = ("8", "16G")
    gpus_per_node: int = 8
    nccl_timeout_s: float = 300.0
    _index: dict[str, HostPlan] = field(default_factory=dict, init=False, compare=False)

    def __post_init__(self) -> None:
        self._index.update((host.name, host) for host in self.hosts)

    def host(self, name: str) -> HostPlan:
        """The plan of host ``name``.

        Raises:
            KeyError: no plan for that host.
        """
        return self._index[name]

    def has(self, name: str) -> bool:
        """Whether the plan has host ``name``."""
        return name in self._index

    def hcas_of(self, hosts: Sequence[str]) -> int:
        """The fewest HCAs any of ``hosts`` has (the per-HCA divisor of a group's busbw)."""
        return min((len(self.host(name).hcas) for name in hosts), default=0)


def host_plan(
    name: str,
    hcas: Sequence[str],
    address: str | None = None,
    nearest: Mapping[str, int] | None = None,
) -> HostPlan:
    """A host's plan from its HCAs and, where known, the GPU nearest each.

    Args:
        name: the host's name (the inventory's).
        hcas: its RDMA devices, in rail order (``mlx5_0`` ...).
        address: what its peers connect to; the name by default.
        nearest: HCA -> nearest GPU index (from ``nvidia-smi topo -m``); where this is
            None, HCA i is taken to sit by GPU i, and the plan says it guessed.
    """
    if nearest is None:
        return HostPlan(name, address or name, tuple(hcas), tuple(range(len(hcas))), True)
    return HostPlan(name, address or name, tuple(hcas), tuple(nearest.get(h) for h in hcas))


def plan_from_mapping(
    hosts: Mapping[str, Mapping[str, object]], **options: object
) -> CrossNodePlan:
    """A plan from plain data: ``{host: {"hcas": [...], "address": ..., "nearest": {...}}}``.

    Raises:
        ValueError: a host without HCAs, or a field of the wrong type.
    """
    plans = []
    for name, entry in hosts.items():
        hcas = entry.get("hcas")
        if not isinstance(hcas, (list, tuple)) or not hcas:
            raise ValueError(f"{name}: no HCAs given: list its RDMA devices (mlx5_0, ...)")
        address = entry.get("address")
        nearest = entry.get("nearest")
        plans.append(
            host_plan(
                name,
                [str(hca) for hca in hcas],
                str(address) if address else None,
                {str(k): int(v) for k, v in nearest.items()} if isinstance(nearest, dict) else None,
            )
        )
    return CrossNodePlan(hosts=tuple(plans), **options)  # type: ignore[arg-type]


# -------------------------------------------------------------------- command lines


def perftest_argv(
    test: str, hca: str, gpu: int | None, plan: CrossNodePlan, server: str | None = None
) -> list[str]:
    """One side's perftest command line (``server``: the client's target; None: the server)."""
    argv = [PROGRAMS[test], "-d", hca, "-p", str(plan.port)]
    if test == "write_bw":
        argv += ["--report_gbits", "-D", str(plan.duration_s)]
        if plan.gpudirect and gpu is not None:
            argv.append(f"--use_cuda={gpu}")
    if server is not None:
        argv.append(server)
    return argv


def size_bytes(text: str) -> int:
    """nccl-tests' size notation (``8``, ``512M``, ``16G``: powers of 1024) in bytes.

    Raises:
        ValueError: not a whole number with an optional K, M or G.
    """
    unit = text[-1:].upper() if text[-1:].isalpha() else ""
    number = text[: len(text) - len(unit)]
    if unit not in _SIZE_UNITS or not number.isdigit():
        raise ValueError(f"{one_line(text)!s} is not a size such as 8, 512M or 16G")
    return int(number) * _SIZE_UNITS[unit]


def size_text(size: int) -> str:
    """A size in nccl-tests' notation, the largest whole unit (``8G``, ``512M``, ``8``)."""
    for unit in ("G", "M", "K"):
        if size >= _SIZE_UNITS[unit] and size % _SIZE_UNITS[unit] == 0:
            return f"{size // _SIZE_UNITS[unit]}{unit}"
    return str(size)


def nccl_largest_bytes(memory_mib: int | None) -> int:
    """The largest message for a GPU of ``memory_mib`` (see NCCL_LARGEST_CAP's comment).

    The largest power of two within a quarter of the memory, between 1G and 16G; 16G when
    the memory was not read (the size the floors were stated for, as before).
    """
    if memory_mib is None or memory_mib <= 0:
        return NCCL_LARGEST_CAP
    quarter = memory_mib * (1 << 20) // 4
    return max(NCCL_LARGEST_FLOOR, min(NCCL_LARGEST_CAP, 1 << (quarter.bit_length() - 1)))


def group_largest_bytes(plan: CrossNodePlan, hosts: Sequence[HostPlan]) -> int:
    """The group's largest message: its smallest GPU's size, never above the plan's -e."""
    known = [h.gpu_memory_mib for h in hosts if h.gpu_memory_mib is not None]
    fitted = nccl_largest_bytes(min(known)) if known else NCCL_LARGEST_CAP
    return min(fitted, size_bytes(plan.nccl_bytes[1]))


def nccl_argv(collective: str, plan: CrossNodePlan, hosts: Sequence[HostPlan] = ()) -> list[str]:
    """One rank's nccl-tests command line: one GPU a rank, doubling sizes up to the largest.

    The largest fits the smallest GPU of ``hosts`` (:func:`group_largest_bytes`).
    """
    low, high = plan.nccl_bytes[0], size_text(group_largest_bytes(plan, hosts))
    return [COLLECTIVE_PROGRAMS[collective], "-b", low, "-e", high, "-f", "2", "-g", "1"]


def variant_environment(variant: str) -> dict[str, str]:
    """What a variant sets in every rank's environment."""
    return dict(IB_ONLY_ENVIRONMENT) if variant == "ib_only" else {}


# -------------------------------------------------------------------- the seam


class LaunchError(Exception):
    """A step could not be started on a host; the message is one line."""


class Step(Protocol):
    """One program started on a host."""

    def wait(self, timeout_s: float) -> int | None:
        """Its exit status, waiting up to ``timeout_s``; None while it runs."""
        ...

    def output(self) -> tuple[str, str]:
        """Its stdout and stderr so far, bounded and decoded."""
        ...

    def kill(self) -> None:
        """End it (and what it started); safe to call again, and after it ended."""
        ...


class Launcher(Protocol):
    """Starts programs on hosts: the one thing that differs between SSH and this machine."""

    def start(self, host: HostPlan, argv: Sequence[str], env: Mapping[str, str]) -> Step:
        """Start ``argv`` on ``host`` with ``env`` added. Raises LaunchError."""
        ...

    def start_group(
        self, hosts: Sequence[HostPlan], argv: Sequence[str], env: Mapping[str, str], ranks: int
    ) -> Step:
        """Start one collective over ``hosts`` (``ranks`` ranks a host). Raises LaunchError."""
        ...

    def group_unavailable(self) -> str | None:
        """Why groups cannot be launched here (None: they can)."""
        ...

    def listening(self, host: HostPlan, port: int) -> bool | None:
        """Whether something listens on ``port`` on ``host``; None: cannot tell."""
        ...


class CrossNodeRunner(Protocol):
    """Runs one round's tests at once, each within ``deadline`` (time.monotonic())."""

    def rdma_round(
        self, pairs: Sequence[Pair], plan: CrossNodePlan, deadline: float
    ) -> dict[Pair, tuple[RdmaPairResult, ...]]:
        """Every pair's records: per HCA, ib_write_bw then ib_write_lat."""
        ...

    def nccl_round(
        self, groups: Sequence[Group], plan: CrossNodePlan, deadline: float
    ) -> dict[Group, tuple[NcclGroupResult, ...]]:
        """Every group's records: each collective, each variant."""
        ...

    def nccl_unavailable(self) -> str | None:
        """Why NCCL groups cannot run through this runner (None: they can)."""
        ...


# -------------------------------------------------------------------- the runner

K = TypeVar("K")
V = TypeVar("V")


class StepRunner:
    """A :class:`CrossNodeRunner` over a :class:`Launcher`: tests in threads, steps killed.

    On Ctrl-C (KeyboardInterrupt in the calling thread) every test is told to stop, each
    kills its steps, and the interrupt goes on once they have: no step is left behind.
    """

    def __init__(self, launcher: Launcher, *, workers: int = 64) -> None:
        self.launcher = launcher
        self.workers = workers
        self._cancel = threading.Event()

    def nccl_unavailable(self) -> str | None:
        """Why groups cannot run (the launcher's word)."""
        return self.launcher.group_unavailable()

    def rdma_round(
        self, pairs: Sequence[Pair], plan: CrossNodePlan, deadline: float
    ) -> dict[Pair, tuple[RdmaPairResult, ...]]:
        """Every pair's records; a pair whose step failed has records that say why."""
        return self._all(pairs, lambda pair: self._pair(pair, plan, deadline))

    def nccl_round(
        self, groups: Sequence[Group], plan: CrossNodePlan, deadline: float
    ) -> dict[Group, tuple[NcclGroupResult, ...]]:
        """Every group's records; a run that failed has a record that says why."""
        return self._all(groups, lambda group: self._group(group, plan, deadline))

    def _all(self, items: Sequence[K], run: Callable[[K], V]) -> dict[K, V]:
        self._cancel.clear()
        if not items:
            return {}
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(self.workers, len(items)))
        futures = {pool.submit(run, item): item for item in items}
        try:
            # Short waits: a Ctrl-C is taken between them, not after the round.
            while concurrent.futures.wait(futures, timeout=0.2).not_done:
                pass
        except BaseException:
            self._cancel.set()  # each test kills its steps and returns
            concurrent.futures.wait(futures)
            raise
        finally:
            pool.shutdown(wait=True)
        return {item: future.result() for future, item in futures.items()}

    # -- one pair

    def _pair(self, pair: Pair, plan: CrossNodePlan, deadline: float) -> tuple[RdmaPairResult, ...]:
        first, second = plan.host(pair[0]), plan.host(pair[1])
        # Bandwidth both ways: a NIC slow to send, or to read its own GPU's memory
        # (GPUDirect), shows only on the side that sends, the client. Latency one way.
        runs = [("write_bw", first, second), ("write_bw", second, first)]
        if plan.latency:
            runs.append(("write_lat", first, second))
        records = []
        for test, server, client in runs:
            for index in range(min(len(server.hcas), len(client.hcas))):
                records.append(self._one(test, server, client, index, plan, deadline))
        return tuple(records)

    def _one(
        self,
        test: str,
        server: HostPlan,
        client: HostPlan,
        index: int,
        plan: CrossNodePlan,
        deadline: float,
    ) -> RdmaPairResult:
        gpu_s = server.gpus[index] if plan.gpudirect and test == "write_bw" else None
        gpu_c = client.gpus[index] if plan.gpudirect and test == "write_bw" else None
        s_end = RdmaEnd(server.name, server.hcas[index], gpu_s)
        c_end = RdmaEnd(client.name, client.hcas[index], gpu_c)
        s_argv = perftest_argv(test, s_end.hca, gpu_s, plan)
        c_argv = perftest_argv(test, c_end.hca, gpu_c, plan, server.address)
        command = " ".join(c_argv)
        steps: list[Step] = []
        try:
            if self._cancel.is_set() or time.monotonic() >= deadline:
                return _failed_pair(test, s_end, c_end, command, "not run: the round ended")
            steps.append(self.launcher.start(server, s_argv, {}))
            why = self._listen(steps[0], server, plan, deadline)
            if why is not None:
                return _failed_pair(test, s_end, c_end, command, why)
            steps.append(self.launcher.start(client, c_argv, {}))
            limit = min(deadline, time.monotonic() + plan.duration_s + plan.step_margin_s)
            status = self._wait(steps[1], limit)
            if status is None:
                why = f"no result from {client.name} within its time limit: stopped"
                return _failed_pair(test, s_end, c_end, command, why)
            return _parsed_pair(steps[1].output(), s_end, c_end, command)
        except LaunchError as exc:
            return _failed_pair(test, s_end, c_end, command, one_line(exc))
        finally:
            for step in reversed(steps):
                step.kill()

    def _listen(
        self, server: Step, host: HostPlan, plan: CrossNodePlan, deadline: float
    ) -> str | None:
        """None once the server listens (or ended well: it cannot be asked); else why not."""
        end = min(deadline, time.monotonic() + plan.listen_wait_s)
        unknown_since: float | None = None
        while time.monotonic() < end and not self._cancel.is_set():
            status = server.wait(_POLL_S)
            if status is not None:
                if status == 0:
                    return None
                _, err = server.output()
                said = one_line(err.strip().splitlines()[-1]) if err.strip() else ""
                return f"the server on {host.name} exited with status {status}" + (
                    f": {said}" if said else ""
                )
            listens = self.launcher.listening(host, plan.port)
            if listens:
                return None
            if listens is None:  # no way to ask: give it a moment to start
                unknown_since = unknown_since or time.monotonic()
                if time.monotonic() - unknown_since >= 1.0:
                    return None
        if self._cancel.is_set():
            return "not run: the stage was stopped"
        return f"the server on {host.name} did not listen on port {plan.port} in time: stopped"

    def _wait(self, step: Step, limit: float) -> int | None:
        while not self._cancel.is_set():
            left = limit - time.monotonic()
            if left <= 0:
                return None
            status = step.wait(min(left, 0.2))
            if status is not None:
                return status
        return None

    # -- one group

    def _group(
        self, group: Group, plan: CrossNodePlan, deadline: float
    ) -> tuple[NcclGroupResult, ...]:
        hosts = [plan.host(name) for name in group]
        records = []
        for collective in plan.collectives:
            for variant in plan.variants:
                records.append(self._collective(group, hosts, collective, variant, plan, deadline))
        return tuple(records)

    def _collective(
        self,
        group: Group,
        hosts: list[HostPlan],
        collective: str,
        variant: str,
        plan: CrossNodePlan,
        deadline: float,
    ) -> NcclGroupResult:
        argv = nccl_argv(collective, plan, hosts)
        env = variant_environment(variant)
        command = " ".join([*(f"{k}={v}" for k, v in env.items()), *argv])
        step: Step | None = None
        try:
            if self._cancel.is_set() or time.monotonic() >= deadline:
                return _failed_group(
                    group, collective, variant, command, "not run: the round ended"
                )
            step = self.launcher.start_group(hosts, argv, env, plan.gpus_per_node)
            status = self._wait(step, min(deadline, time.monotonic() + plan.nccl_timeout_s))
            if status is None:
                why = "no result within its time limit: stopped"
                return _failed_group(group, collective, variant, command, why)
            out, err = step.output()
            try:
                result = nccl_group_result(out or err, collective, variant, command)
            except ParseError as exc:
                why = one_line(exc)
                if status != 0:  # the launcher's own error (srun, mpirun) says why, not the parser
                    last = next((line for line in reversed(err.splitlines()) if line.strip()), "")
                    why = f"exited with status {status}" + (f": {one_line(last)}" if last else "")
                return _failed_group(group, collective, variant, command, why)
            return result if result.hosts else _with_hosts(result, group)
        except LaunchError as exc:
            return _failed_group(group, collective, variant, command, one_line(exc))
        finally:
            if step is not None:
                step.kill()


def _parsed_pair(
    output: tuple[str, str], server: RdmaEnd, client: RdmaEnd, command: str
) -> RdmaPairResult:
    out, err = output
    # perftest prints its table on stdout and its failures on stderr.
    try:
        result = rdma_pair_result(out, server, client, command)
        if result.completed:
            return result
    except ParseError:
        pass
    try:
        return rdma_pair_result(f"{err}\n{out}", server, client, command)
    except ParseError as exc:
        test = "write_bw" if command.startswith(PROGRAMS["write_bw"]) else "write_lat"
        return _failed_pair(test, server, client, command, f"output not read: {one_line(exc)}")


def _failed_pair(
    test: str, server: RdmaEnd, client: RdmaEnd, command: str, why: str
) -> RdmaPairResult:
    return failed_pair(test, server, client, command, Unavailable(Reason.ERROR, why))


def _failed_group(
    group: Group, collective: str, variant: str, command: str, why: str
) -> NcclGroupResult:
    return failed_group(group, collective, variant, command, Unavailable(Reason.ERROR, why))


def _with_hosts(result: NcclGroupResult, group: Group) -> NcclGroupResult:
    return dataclasses.replace(result, hosts=group)


__all__ = [
    "NCCL_NEEDS_LAUNCHER",
    "CrossNodePlan",
    "CrossNodeRunner",
    "Group",
    "HostPlan",
    "LaunchError",
    "Launcher",
    "Pair",
    "Step",
    "StepRunner",
    "group_largest_bytes",
    "host_plan",
    "nccl_argv",
    "nccl_largest_bytes",
    "perftest_argv",
    "plan_from_mapping",
    "size_bytes",
    "size_text",
    "variant_environment",
]
