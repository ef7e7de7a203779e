"""Run the burn-in: a worker thread per GPU, a sampler beside them, a deadline over all.

A GPU whose worker fails ends with a finding-worthy status; the others carry
on. A worker that stops answering (a wedged GPU, a hung backend call) is left
behind when the deadline passes and reported as TIMEOUT: the burn itself
never hangs.
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
from typing import Callable

from validator.model import (
    BurnResult,
    BurnStatus,
    GpuBurn,
    Measured,
    Reason,
    Unavailable,
    XidEvent,
)
from validator.node.burnin.backend import Backend, GpuWorker, SetupResult, flops_per_product
from validator.node.burnin.config import BurnConfig
from validator.node.burnin.sampler import Sampler

XidProbe = Callable[[], Measured[tuple[XidEvent, ...]]]


@dataclass
class _Progress:
    """What one worker thread has done so far; read by the main thread at the end."""

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
            timing = worker.run_batch()
            batch += 1
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


def _gpu_result(progress: _Progress, uuid: Measured[str], alive: bool) -> GpuBurn:
    setup = progress.setup
    if alive:
        status, detail = BurnStatus.TIMEOUT, "the worker stopped answering past the deadline"
    elif progress.error is not None:
        status, detail = BurnStatus.ERROR, progress.error
    else:
        status, detail = BurnStatus.COMPLETED, ""
    tflops: Measured[float]
    if progress.windows:
        tflops = round(statistics.median(progress.windows), 2)
    elif progress.overall_compute_s > 0:
        # Too short for a window past warm-up: the whole run's rate, said so in the detail.
        tflops = round(progress.overall_flops / progress.overall_compute_s / 1e12, 2)
        detail = detail or "burn too short for timing windows after warm-up: whole-run rate"
    else:
        tflops = Unavailable(Reason.NOT_MEASURED, detail or "no product completed")
    no_setup = Unavailable(Reason.NOT_MEASURED, detail or "setup did not finish")
    reference_error: Measured[float] = no_setup
    if setup is not None:
        reference_error = setup.reference_max_error
        if not math.isfinite(reference_error):
            reference_error = Unavailable(Reason.ERROR, "the reference tile holds NaN or Inf")
    return GpuBurn(
        index=progress.index,
        status=status,
        detail=detail,
        uuid=uuid,
        iterations=progress.iterations,
        tflops=tflops,
        tflops_windows=tuple(round(w, 2) for w in progress.windows),
        mismatched_elements=progress.mismatched_elements,
        mismatched_iterations=progress.mismatched_iterations,
        nonfinite_elements=progress.nonfinite_elements,
        reference_max_error=reference_error,
        reference_ok=setup.reference_ok if setup else no_setup,
        digest=setup.digest if setup else no_setup,
    )


def _new_events(
    before: Measured[tuple[XidEvent, ...]], after: Measured[tuple[XidEvent, ...]]
) -> Measured[tuple[XidEvent, ...]]:
    if isinstance(after, Unavailable):
        return after
    if isinstance(before, Unavailable):
        return Unavailable(Reason.ERROR, f"kernel log before the burn: {before}")
    seen = set(before)
    return tuple(event for event in after if event not in seen)


def run_burn(
    config: BurnConfig,
    backend: Backend,
    gpus: Sequence[tuple[int, Measured[str]]],
    sampler: Sampler,
    xid_probe: XidProbe | None = None,
    *,
    simulated: bool = False,
) -> BurnResult:
    """Load every listed GPU at once for the configured duration.

    Args:
        config: duration, dtype, sizes, fault injection.
        backend: where the products run.
        gpus: (index, UUID) of each GPU to burn.
        sampler: telemetry during the burn.
        xid_probe: reads the kernel log's Xid events, before and after.
        simulated: the figures describe a simulated node.
    """
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    xids_before = xid_probe() if xid_probe else Unavailable(Reason.NOT_MEASURED)
    counters_before = {index: sampler.counters(index) for index, _ in gpus}
    progresses: dict[int, _Progress] = {}
    threads: dict[int, threading.Thread] = {}
    not_run: dict[int, str] = {}
    stop = threading.Event()
    sampler.start()
    start = time.monotonic()
    for index, _ in gpus:
        progress = _Progress(index=index)
        try:
            if index >= backend.device_count():
                raise RuntimeError(f"{backend.name} sees only {backend.device_count()} devices")
            worker = backend.worker(index, config)
        except Exception as exc:  # noqa: BLE001 - one GPU's failure is that GPU's finding
            not_run[index] = f"{type(exc).__name__}: {exc}"
            continue
        progresses[index] = progress
        thread = threading.Thread(
            target=_burn_one,
            args=(worker, config, progress, start, stop),
            name=f"burn-gpu{index}",
            daemon=True,  # a wedged worker must not keep the agent alive
        )
        threads[index] = thread
        thread.start()
    deadline = start + config.duration_s + config.grace_s
    for thread in threads.values():
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    stop.set()
    elapsed = time.monotonic() - start
    traces = sampler.stop()
    xids_after = xid_probe() if xid_probe else Unavailable(Reason.NOT_MEASURED)
    results = []
    matrix_size = config.matrix_size or 0
    deterministic, tolerance = True, 0.0
    for index, uuid in gpus:
        before = counters_before[index]
        if index in not_run:
            results.append(
                GpuBurn(
                    index=index,
                    status=BurnStatus.NOT_RUN,
                    detail=not_run[index],
                    uuid=uuid,
                    counters_before=before,
                    counters_after=sampler.counters(index),
                )
            )
            continue
        progress = progresses[index]
        if progress.setup is not None:
            matrix_size = progress.setup.matrix_size
            deterministic = deterministic and progress.setup.deterministic
            tolerance = max(tolerance, progress.setup.tolerance)
        burn = _gpu_result(progress, uuid, alive=threads[index].is_alive())
        results.append(
            replace(
                burn,
                samples=traces.get(index, ()),
                counters_before=before,
                counters_after=sampler.counters(index),
            )
        )
    sampler.close()
    return BurnResult(
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
    )
