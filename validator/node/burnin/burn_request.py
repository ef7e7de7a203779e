"""What a burn-in asks for, checked against the node before it runs, and its fault-injection watch.

Shared by every source that burns (validator.node.live.live_source,
validator.node.sim.simulated_source): the GPUs a burn can use, a burn that could not
start, a request refused before anything runs, and the watch that proves a requested
fault injection really happened.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

from validator.model import BurnResult, GpuStatus, NodeFacts

if TYPE_CHECKING:
    from validator.node.burnin.backend import (
        Backend,
        BatchTiming,
        CheckResult,
        GpuWorker,
        SetupResult,
    )
    from validator.node.burnin.burn_config import BurnConfig
    from validator.node.burnin.devices import Target


def burnable(facts: NodeFacts) -> list[Target]:
    """The GPUs a burn can use: those NVML answered for, with what the burn needs of each."""
    from validator.node.burnin.devices import Target

    return [
        Target(
            index=gpu.index,
            uuid=gpu.uuid,
            bus_id=gpu.pci_bus_id if isinstance(gpu.pci_bus_id, str) else None,
            power_limit_w=gpu.power_limit_enforced_w
            if isinstance(gpu.power_limit_enforced_w, float)
            else None,
        )
        for gpu in facts.gpus
        if gpu.status is GpuStatus.OK
    ]


def not_started(config: BurnConfig, backend: str, why: str) -> BurnResult:
    """The burn that never started, and why (judged UNKNOWN, never passed)."""
    return BurnResult(
        backend=backend,
        dtype=config.dtype,
        matrix_size=config.matrix_size or 0,
        duration_s=config.duration_s,
        elapsed_s=0.0,
        memory_fraction=config.memory_fraction,
        started_at="",
        sampler="none",
        error=why,
    )


def check_burn_request(
    facts: NodeFacts, config: BurnConfig, *, gpu_memory: bool, host_memory: bool
) -> None:
    """Refuse, before the burn, what it could never honour on this node.

    ``gpu_memory``: the matrices must fit each GPU's memory; ``host_memory``: one set
    per GPU must fit this host's memory (the numpy stand-in multiplies on the CPU).
    """
    from validator.node.burnin.burn_config import check_injection_target, check_matrix_fits

    check_injection_target(config.inject, [gpu.index for gpu in facts.gpus])
    if gpu_memory:
        for gpu in facts.gpus:
            total = gpu.memory_total_mib
            if gpu.status is GpuStatus.OK and isinstance(total, int):
                check_matrix_fits(config, total * 2**20, f"GPU {gpu.index}'s {total} MiB")
    host = _host_memory_bytes() if host_memory else None
    if host is not None:
        from validator.node.burnin.numpy_backend import CPU_RESULT_BUFFERS

        check_matrix_fits(
            config,
            host,
            f"this host's {host / 2**30:.0f} GiB, where the products run on the CPU",
            matrices=3 + CPU_RESULT_BUFFERS,  # A, B, the first product and the results
            element_bytes=4,  # the stand-in multiplies in float32 whatever the dtype
            sharers=len(burnable(facts)),
        )


def _host_memory_bytes() -> float | None:
    """This host's physical memory; None where the system does not say."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


class InjectionWatch:
    """A backend whose workers note whether the fault injection was applied.

    It also counts each device's batches, to say how far a burn that missed it got.
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.name = backend.name
        self.dtypes = backend.dtypes
        self.applied = False
        self.batches: dict[int, int] = {}  # backend device -> batches run

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - the backend's own attributes
        return getattr(self._backend, name)  # stand_in, and whatever a backend adds

    def device_count(self) -> int:
        """As the backend says."""
        return self._backend.device_count()

    def device_bus_ids(self) -> list[str]:
        """As the backend says."""
        return self._backend.device_bus_ids()

    def worker(self, device: int, config: BurnConfig) -> GpuWorker:
        """The backend's worker, watched."""
        return _WatchedWorker(self._backend.worker(device, config), self, device)


class _WatchedWorker:
    """One worker of an :class:`InjectionWatch`: counts batches, notes the injection."""

    def __init__(self, worker: GpuWorker, watch: InjectionWatch, device: int) -> None:
        self._worker = worker
        self._watch = watch
        self._device = device

    def setup(self) -> SetupResult:
        """As the worker does."""
        return self._worker.setup()

    def run_batch(self) -> BatchTiming:
        """As the worker does, counted."""
        timing = self._worker.run_batch()
        self._watch.batches[self._device] = self._watch.batches.get(self._device, 0) + 1
        return timing

    def check_batch(self) -> CheckResult:
        """As the worker does."""
        return self._worker.check_batch()

    def inject(self, kind: str) -> None:
        """As the worker does, noted."""
        self._worker.inject(kind)
        self._watch.applied = True

    def close(self) -> None:
        """As the worker does."""
        self._worker.close()


def injection_missed(result: BurnResult, config: BurnConfig, watch: InjectionWatch) -> BurnResult:
    """The burn, marked not to be trusted when a requested injection was never applied.

    The hook exists to prove that a spoiled result is found; a burn that ended before
    the requested batch (or never burned that GPU) proves nothing, so the burn is
    judged UNKNOWN (its ``error``) rather than passed.
    """
    injection = config.inject
    if injection is None or watch.applied or result.error or result.interrupted:
        return result
    burned = next((gpu for gpu in result.gpus if gpu.index == injection.gpu), None)
    device = burned.cuda_device if burned is not None else None
    ran = watch.batches.get(device, 0) if isinstance(device, int) else 0
    why = (
        f"GPU {injection.gpu} ran {ran} batch{'es' if ran != 1 else ''} in the "
        f"{config.duration_s:g} s burn"
        if ran
        else f"GPU {injection.gpu} ran no batch"
    )
    return dataclasses.replace(
        result,
        error=(
            f"--burn-inject {injection} was never applied ({why}), so the burn proved "
            "nothing about detection; give an iteration the burn reaches, or a longer --burn"
        ),
    )
