"""Run the burn-in: a worker thread per GPU, a sampler beside them, a deadline over all.

A GPU whose worker fails ends with a finding-worthy status; the others carry
on. A worker that stops answering (a wedged GPU, a hung backend call) is left
behind when the deadline passes and reported as TIMEOUT, and every call that
could block on a wedged GPU after the workers (the sampler's last reads, the
error counters, NVML's shutdown) runs under the same deadline: the burn itself
never hangs. Each NVML GPU is burned on the backend device with its PCI bus id
(:mod:`validator.node.burnin.devices`); one the backend cannot see is named.
Ctrl-C, or a stop asked for by the agent's SIGTERM or SIGHUP (validator.node.stop_request),
stops the workers after their batch and still returns every figure, marked interrupted.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Callable, TypeVar

from validator.model import (
    BurnResult,
    BurnStatus,
    ErrorCounters,
    GpuBurn,
    Measured,
    Reason,
    TelemetrySample,
    Unavailable,
    XidEvent,
    counters_unavailable,
)
from validator.node import stop_request
from validator.node.burnin.backend import Backend, GpuWorker, SetupResult, flops_per_product
from validator.node.burnin.burn_config import BurnConfig
from validator.node.burnin.burn_progress import BurnProgress, GpuProgress, ProgressSink
from validator.node.burnin.devices import CudaEnvironment, Matching, Target, match_devices
from validator.node.burnin.sampler import Sampler
from validator.node.physical_ranges import plausible_burn

T = TypeVar("T")
XidProbe = Callable[[], Measured[tuple[XidEvent, ...]]]
INTERRUPT_WAIT_S = 10.0  # after Ctrl-C, how long workers may take to finish their batch
PROGRESS_INTERVAL_S = 1.0


@dataclass
class _Progress:
    """What one worker thread has done so far; read by the main thread."""

    index: int
    setup: SetupResult | None = None
    iterations: int = 0
    windows: list[float] = field(default_factory=list)
    overall_flops: float = 0.0
    overall_compute_s: float = 0.0
    mismatched_elements: int = 0
    mismatched_iterations: int = 0
    nonfinite_elements: int = 0
    error: str | None = None
    done: bool = False
    load_start: float | None = None  # monotonic: the first batch begun after warm-up
    load_end: float | None = None  # monotonic: the end of the last batch
    load_compute_s: float = 0.0  # device seconds of the batches in the load window


def _burn_one(
    worker: GpuWorker, config: BurnConfig, progress: _Progress, start: float, stop: threading.Event
) -> None:
    try:
        progress.setup = worker.setup()
        flops = flops_per_product(progress.setup.matrix_size)
        warmup_end = start + config.warmup
        window_start = time.monotonic()
        window_flops = window_compute = 0.0
        batch = 0
        while not stop.is_set() and time.monotonic() - start < config.duration_s:
            batch_start = time.monotonic()
            timing = worker.run_batch()
            batch += 1
            now = time.monotonic()
            if batch_start >= warmup_end:
                if progress.load_start is None:
                    progress.load_start = batch_start
                progress.load_end = now
                progress.load_compute_s += timing.compute_s
            progress.iterations += timing.products
            injection = config.inject
            if (
                injection is not None
                and injection.gpu == progress.index
                and injection.iteration == batch
            ):
                worker.inject(injection.kind)
            checked = worker.check_batch()
            if checked.mismatched_elements or checked.nonfinite_elements:
                progress.mismatched_iterations += 1
            progress.mismatched_elements += checked.mismatched_elements
            progress.nonfinite_elements += checked.nonfinite_elements
            progress.overall_flops += timing.products * flops
            progress.overall_compute_s += timing.compute_s
            now = time.monotonic()
            if window_start >= warmup_end:
                window_flops += timing.products * flops
                window_compute += timing.compute_s
            if now - window_start >= config.window:
                if window_start >= warmup_end and window_compute > 0:
                    progress.windows.append(window_flops / window_compute / 1e12)
                window_start, window_flops, window_compute = now, 0.0, 0.0
    except Exception as exc:  # noqa: BLE001 - any backend failure ends this GPU only
        progress.error = f"{type(exc).__name__}: {exc}"
    finally:
        # Freeing memory must not mask the outcome.
        with contextlib.suppress(Exception):
            worker.close()
        progress.done = True


def _significant(value: float) -> float:
    """Four significant digits: TFLOPS of a GPU and of a CPU stand-in alike stay non-zero."""
    return float(f"{value:.4g}")


def _ending(progress: _Progress, *, alive: bool, interrupted: bool) -> tuple[BurnStatus, str]:
    """How one worker ended, and in what words."""
    if alive and interrupted:
        # Ctrl-C came before this worker finished its batch: cut short, not wedged.
        return BurnStatus.INTERRUPTED, "interrupted before this GPU's batch ended"
    if alive:
        if progress.error is not None:
            return BurnStatus.TIMEOUT, (
                f"{progress.error}; then it stopped answering while freeing its memory"
            )
        return BurnStatus.TIMEOUT, "the worker stopped answering past the deadline"
    if progress.error is not None:
        return BurnStatus.ERROR, progress.error
    return BurnStatus.COMPLETED, ""


def _gpu_result(
    progress: _Progress,
    target: Target,
    alive: bool,
    start: float,
    simulated: bool,
    interrupted: bool = False,
) -> GpuBurn:
    setup = progress.setup
    status, detail = _ending(progress, alive=alive, interrupted=interrupted)
    tflops: Measured[float]
    if progress.windows:
        tflops = _significant(statistics.median(progress.windows))
    elif progress.overall_compute_s > 0:
        # Too short for a window past warm-up: the whole run's rate, said so in the detail.
        tflops = _significant(progress.overall_flops / progress.overall_compute_s / 1e12)
        detail = detail or "burn too short for timing windows after warm-up: whole-run rate"
    else:
        tflops = Unavailable(Reason.NOT_MEASURED, detail or "no product completed")
    no_setup = Unavailable(Reason.NOT_MEASURED, detail or "setup did not finish")
    reference_error: Measured[float] = no_setup
    if setup is not None:
        reference_error = setup.reference_max_error
        if not math.isfinite(reference_error):
            reference_error = Unavailable(Reason.ERROR, "the reference tile holds NaN or Inf")
    no_window = Unavailable(Reason.NOT_MEASURED, "no batch ran after warm-up")
    load_start: Measured[float] = no_window
    load_end: Measured[float] = no_window
    duty: Measured[float] = no_window
    if progress.load_start is not None and progress.load_end is not None:
        load_start = round(progress.load_start - start, 3)
        load_end = round(progress.load_end - start, 3)
        span = progress.load_end - progress.load_start
        if simulated:
            duty = Unavailable(
                Reason.NOT_MEASURED, "a simulated burn books its speed: duty is not measured"
            )
        elif span > 0:
            # Event-timed device seconds over wall seconds; a pipelined backend's first
            # batch may start on the device a moment before the window opens.
            duty = round(min(1.0, progress.load_compute_s / span), 4)
    return GpuBurn(
        index=progress.index,
        status=status,
        detail=detail,
        uuid=target.uuid,
        iterations=progress.iterations,
        tflops=tflops,
        tflops_windows=tuple(_significant(w) for w in progress.windows),
        mismatched_elements=progress.mismatched_elements,
        mismatched_iterations=progress.mismatched_iterations,
        nonfinite_elements=progress.nonfinite_elements,
        reference_max_error=reference_error,
        reference_ok=setup.reference_ok if setup else no_setup,
        digest=setup.digest if setup else no_setup,
        pci_bus_id=_bus(target),
        load_start_s=load_start,
        load_end_s=load_end,
        duty=duty,
    )


def _bus(target: Target) -> Measured[str]:
    if target.bus_id is None:
        return Unavailable(Reason.NOT_MEASURED, "NVML gave no PCI bus id")
    return target.bus_id


def _new_events(
    before: Measured[tuple[XidEvent, ...]], after: Measured[tuple[XidEvent, ...]]
) -> Measured[tuple[XidEvent, ...]]:
    if isinstance(after, Unavailable):
        return after
    if isinstance(before, Unavailable):
        return Unavailable(Reason.ERROR, f"kernel log before the burn: {before}")
    seen = set(before)
    return tuple(event for event in after if event not in seen)


def _bounded(calls: dict[int, Callable[[], T]], until: float) -> dict[int, T | None]:
    """Run each call on a thread of its own; None for those still running at ``until``.

    A read from a wedged GPU (NVML blocks in the driver) must not hold the burn
    past its deadline; its thread is left behind as a daemon.
    """
    results: dict[int, T | None] = dict.fromkeys(calls)
    done: dict[int, bool] = dict.fromkeys(calls, False)

    def call(key: int, function: Callable[[], T]) -> None:
        with contextlib.suppress(Exception):
            results[key] = function()
        done[key] = True

    threads = []
    for key, function in calls.items():
        thread = threading.Thread(target=call, args=(key, function), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(timeout=max(0.0, until - time.monotonic()))
    return {key: results[key] if done[key] else None for key in calls}


_COUNTERS_HUNG = Unavailable(
    Reason.GPU_LOST, "reading the error counters did not return within the burn's deadline"
)
_HUNG_COUNTERS = counters_unavailable(_COUNTERS_HUNG)


def _read_counters(
    sampler: Sampler, indexes: Sequence[int], until: float
) -> dict[int, ErrorCounters]:
    def reader(index: int) -> Callable[[], ErrorCounters]:
        return lambda: sampler.counters(index)

    read = _bounded({index: reader(index) for index in indexes}, until)
    return {index: read[index] or _HUNG_COUNTERS for index in indexes}


def _tail_reserve(config: BurnConfig) -> float:
    """Seconds of the grace kept for the reads after the workers (counters, NVML shutdown)."""
    return max(0.2, min(5.0, 0.2 * config.grace_s))


def _snapshot(
    elapsed: float,
    config: BurnConfig,
    targets: Sequence[Target],
    progresses: dict[int, _Progress],
    latest: dict[int, TelemetrySample],
) -> BurnProgress:
    gpus = []
    for target in targets:
        progress = progresses.get(target.index)
        if progress is None:
            state = "not run"
        elif progress.done:
            state = "failed" if progress.error else "done"
        else:
            state = "running" if progress.setup is not None else "setup"
        gpus.append(
            GpuProgress(
                index=target.index,
                state=state,
                tflops=progress.windows[-1] if progress and progress.windows else None,
                power_limit_w=target.power_limit_w,
                sample=latest.get(target.index),
            )
        )
    return BurnProgress(elapsed_s=elapsed, duration_s=config.duration_s, gpus=tuple(gpus))


WAIT_POLL_S = 0.05


def _wait(
    progresses: dict[int, _Progress],
    until: float,
    tick: Callable[[], None] | None,
    *,
    heed_stop: bool = True,
) -> None:
    """Wait for every worker or ``until``, calling ``tick`` about once a second.

    With ``heed_stop``, a stop asked for from outside (validator.node.stop_request:
    the agent's SIGTERM) ends the wait too, within a poll.

    A worker is done when it says so (``_Progress.done``), never by
    ``Thread.is_alive()``: a Ctrl-C that lands inside ``Thread.join`` leaves the
    joined thread looking stopped while it still runs. Sleeping in short steps
    instead of joining keeps Ctrl-C from touching any worker's state.
    """
    next_tick = time.monotonic() + PROGRESS_INTERVAL_S
    while True:
        now = time.monotonic()
        if all(progress.done for progress in progresses.values()) or now >= until:
            return
        if heed_stop and stop_request.requested():
            return
        time.sleep(max(0.0, min(WAIT_POLL_S, until - now, next_tick - now)))
        if tick is not None and time.monotonic() >= next_tick:
            tick()
            next_tick += PROGRESS_INTERVAL_S


def _match(backend: Backend, targets: Sequence[Target], environment: CudaEnvironment) -> Matching:
    if getattr(backend, "stand_in", False):
        # CPU stand-ins are interchangeable: the n-th GPU gets the n-th stand-in.
        return Matching(
            devices={target.index: device for device, target in enumerate(targets)},
            unseen={},
            method="stand_in",
        )
    return match_devices(targets, backend.device_bus_ids(), environment)


def run_burn(  # noqa: PLR0915 - the one place a burn is orchestrated
    config: BurnConfig,
    backend: Backend,
    gpus: Sequence[Target],
    sampler: Sampler,
    xid_probe: XidProbe | None = None,
    *,
    simulated: bool = False,
    environment: CudaEnvironment | None = None,
    progress: ProgressSink | None = None,
) -> BurnResult:
    """Load every listed GPU at once for the configured duration.

    Args:
        config: duration, dtype, sizes, fault injection.
        backend: where the products run.
        gpus: each GPU to burn, as NVML names it (index, UUID, PCI bus id).
        sampler: telemetry during the burn.
        xid_probe: reads the kernel log's Xid events, before and after.
        simulated: the figures describe a simulated node.
        environment: what CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER were.
        progress: called about once a second with the burn so far.
    """
    environment = environment or CudaEnvironment(visible_devices=None, device_order=None)
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    reserve = _tail_reserve(config)
    indexes = [target.index for target in gpus]
    xids_before = xid_probe() if xid_probe else Unavailable(Reason.NOT_MEASURED)
    counters_before = _read_counters(
        sampler, indexes, time.monotonic() + max(reserve, min(30.0, config.grace_s))
    )
    matching = _match(backend, gpus, environment)
    progresses: dict[int, _Progress] = {}
    not_run: dict[int, tuple[BurnStatus, str, int | None]] = {}
    stop = threading.Event()
    sampler.start()
    start = time.monotonic()
    for target in gpus:
        index = target.index
        if index in matching.unseen:
            # Only a board CUDA lacks while its bus id is known is unseen; a GPU the burn
            # could not match safely to a device was not run (UNKNOWN), never failed.
            status = (
                BurnStatus.UNSEEN
                if matching.method == "pci_bus_id" and target.bus_id is not None
                else BurnStatus.NOT_RUN
            )
            not_run[index] = (status, matching.unseen[index], None)
            continue
        device = matching.devices[index]
        try:
            if device >= backend.device_count():
                raise RuntimeError(f"{backend.name} sees only {backend.device_count()} devices")
            worker = backend.worker(device, config)
        except Exception as exc:  # noqa: BLE001 - one GPU's failure is that GPU's finding
            not_run[index] = (BurnStatus.NOT_RUN, f"{type(exc).__name__}: {exc}", device)
            continue
        progresses[index] = _Progress(index=index)
        # A daemon, so a wedged worker cannot keep the agent alive; whether it is done is
        # its own flag (see _wait), never Thread.is_alive().
        threading.Thread(
            target=_burn_one,
            args=(worker, config, progresses[index], start, stop),
            name=f"burn-gpu{index}",
            daemon=True,
        ).start()

    def tick() -> None:
        if progress is not None:
            with contextlib.suppress(Exception):  # a display must never end a burn
                latest = sampler.latest()
                progress(_snapshot(time.monotonic() - start, config, gpus, progresses, latest))

    deadline = start + config.duration_s + config.grace_s
    interrupted = False
    try:
        _wait(progresses, deadline - reserve, tick)
        interrupted = stop_request.requested()
    except KeyboardInterrupt:
        interrupted = True
    if interrupted:
        stop.set()
        _wait(
            progresses,
            min(deadline - reserve, time.monotonic() + INTERRUPT_WAIT_S),
            None,
            heed_stop=False,
        )
    stop.set()
    elapsed = time.monotonic() - start
    # After Ctrl-C the operator waits: the reads get the reserve, not the burn's deadline.
    tail = time.monotonic() + reserve if interrupted else max(deadline, time.monotonic() + 0.2)
    traces = _bounded({0: sampler.stop}, tail).get(0) or {}
    xids_after = xid_probe() if xid_probe else Unavailable(Reason.NOT_MEASURED)
    # Their own budget: a sampler stuck on a wedged GPU must not use up every other
    # GPU's counter read and make them all look wedged.
    counters_after = _read_counters(sampler, indexes, max(tail, time.monotonic() + reserve))
    results = []
    matrix_size = config.matrix_size or 0
    deterministic, tolerance = True, 0.0
    for target in gpus:
        index = target.index
        before = counters_before[index]
        if index in not_run:
            status, detail, ordinal = not_run[index]
            results.append(
                GpuBurn(
                    index=index,
                    status=status,
                    detail=detail,
                    uuid=target.uuid,
                    counters_before=before,
                    counters_after=counters_after[index],
                    pci_bus_id=_bus(target),
                    cuda_device=ordinal if ordinal is not None else _NO_DEVICE,
                )
            )
            continue
        worker_progress = progresses[index]
        if worker_progress.setup is not None:
            matrix_size = worker_progress.setup.matrix_size
            deterministic = deterministic and worker_progress.setup.deterministic
            tolerance = max(tolerance, worker_progress.setup.tolerance)
        burn = _gpu_result(
            worker_progress, target, not worker_progress.done, start, simulated, interrupted
        )
        results.append(
            replace(
                burn,
                samples=traces.get(index, ()),
                counters_before=before,
                counters_after=counters_after[index],
                cuda_device=matching.devices[index],
            )
        )
    _bounded({0: sampler.close}, max(tail, time.monotonic() + 0.2))
    result = BurnResult(
        backend=backend.name,
        dtype=config.dtype,
        matrix_size=matrix_size,
        duration_s=config.duration_s,
        elapsed_s=round(elapsed, 3),
        memory_fraction=config.memory_fraction,
        started_at=started_at,
        sampler=sampler.name,
        simulated=simulated,
        deterministic=deterministic,
        tolerance=tolerance,
        gpus=tuple(results),
        xid_events_during=_new_events(xids_before, xids_after),
        interrupted=interrupted,
        cuda_visible_devices=environment.visible_devices,
        cuda_device_order=environment.device_order,
        device_mapping=matching.method,
    )
    return plausible_burn(result)  # a NaN sample is not measured, never a cool GPU


_NO_DEVICE = Unavailable(Reason.NOT_MEASURED, "no backend device burned this GPU")
