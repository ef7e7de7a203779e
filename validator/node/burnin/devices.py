"""One GPU identity across NVML and CUDA.

NVML numbers GPUs in PCI bus order. The CUDA runtime numbers them fastest
first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, counts only what
``CUDA_VISIBLE_DEVICES`` lets through, and leaves out a GPU it cannot
initialise while NVML still lists it. Using the NVML index as the CUDA device
number would then burn the wrong board, or pin one board's telemetry, UUID and
verdict on another, on exactly the degraded nodes a burn-in exists for.

So: :func:`prepare_cuda_environment` sets ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
before any CUDA library loads, and :func:`match_devices` pairs every NVML GPU
with the backend device of the same PCI bus id; a GPU without one is named,
never shifted onto its neighbour. :class:`SimulatedCuda` enumerates a
simulated node's devices by the same rules the runtime follows.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass

from validator.model import Measured
from validator.node.parsers.smi_common import normalize_bus_id

ORDER_VARIABLE = "CUDA_DEVICE_ORDER"
VISIBLE_VARIABLE = "CUDA_VISIBLE_DEVICES"
PCI_ORDER = "PCI_BUS_ID"


@dataclass(frozen=True)
class CudaEnvironment:
    """What the environment said about CUDA devices before the burn set its order."""

    visible_devices: str | None  # CUDA_VISIBLE_DEVICES as set; None: unset
    device_order: str | None  # CUDA_DEVICE_ORDER as it was; None: unset


def prepare_cuda_environment(environ: MutableMapping[str, str] | None = None) -> CudaEnvironment:
    """Make CUDA number devices in PCI order (as NVML does); say what the environment had.

    Must run before cudart or torch initialise CUDA: the runtime reads the
    variable once. ``CUDA_VISIBLE_DEVICES`` is left as the operator set it.
    """
    env = os.environ if environ is None else environ
    before = CudaEnvironment(
        visible_devices=env.get(VISIBLE_VARIABLE), device_order=env.get(ORDER_VARIABLE)
    )
    env[ORDER_VARIABLE] = PCI_ORDER
    return before


@dataclass(frozen=True)
class Target:
    """One GPU to burn, as NVML names it."""

    index: int
    uuid: Measured[str]
    bus_id: str | None  # normalised; None when NVML gave none
    power_limit_w: float | None = None  # the enforced limit, for progress displays


@dataclass(frozen=True)
class Matching:
    """Which backend device burns which NVML GPU, and which GPUs have none."""

    devices: dict[int, int]  # NVML index -> backend device number
    unseen: dict[int, str]  # NVML index -> why no backend device is it
    method: str  # pci_bus_id | pci_order


def match_devices(
    targets: Sequence[Target], backend_bus_ids: Sequence[str], environment: CudaEnvironment
) -> Matching:
    """Pair NVML GPUs with backend devices by PCI bus id.

    When the backend cannot say its devices' bus ids, and nothing could have
    reordered or hidden them (no ``CUDA_VISIBLE_DEVICES``, as many devices as
    GPUs), they are paired in PCI order, which ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
    makes the backend's order too; otherwise no GPU is guessed at.
    """
    normalised = [normalize_bus_id(bus) or "" if bus else "" for bus in backend_bus_ids]
    if any(normalised):
        by_bus = {bus: device for device, bus in enumerate(normalised) if bus}
        devices: dict[int, int] = {}
        unseen: dict[int, str] = {}
        for target in targets:
            device = by_bus.get(target.bus_id or "")
            if target.bus_id is None:
                unseen[target.index] = "NVML gave no PCI bus id to match it with a CUDA device"
            elif device is None:
                unseen[target.index] = _unseen_reason(target, environment)
            else:
                devices[target.index] = device
        return Matching(devices=devices, unseen=unseen, method="pci_bus_id")
    if environment.visible_devices is None and len(backend_bus_ids) == len(targets):
        ordered = sorted(targets, key=lambda t: (t.bus_id or "", t.index))
        return Matching(
            devices={target.index: device for device, target in enumerate(ordered)},
            unseen={},
            method="pci_order",
        )
    why = (
        f"the backend cannot read its devices' PCI bus ids and sees {len(backend_bus_ids)} "
        f"devices for {len(targets)} GPUs"
        + (
            f" with {VISIBLE_VARIABLE}={environment.visible_devices}"
            if environment.visible_devices is not None
            else ""
        )
        + ": no GPU can be matched to a device safely"
    )
    return Matching(devices={}, unseen={t.index: why for t in targets}, method="")


def _unseen_reason(target: Target, environment: CudaEnvironment) -> str:
    where = f"GPU {target.index} ({target.bus_id})"
    if environment.visible_devices is not None:
        return f"{where} is hidden from CUDA by {VISIBLE_VARIABLE}={environment.visible_devices}"
    return f"CUDA cannot see {where}, though NVML lists it"


@dataclass(frozen=True)
class SimulatedDevice:
    """One board of a simulated node, as the CUDA runtime would meet it."""

    nvml_index: int
    bus_id: str
    uuid: str


class SimulatedCuda:
    """How a simulated node's CUDA runtime enumerates its GPUs.

    Args:
        devices: every board NVML lists.
        fastest_first: NVML indices in the order the runtime uses without
            ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (default: PCI order).
        hidden: NVML indices the runtime cannot initialise.
        visible_devices: the simulated environment's ``CUDA_VISIBLE_DEVICES``.
    """

    def __init__(
        self,
        devices: Sequence[SimulatedDevice],
        fastest_first: Sequence[int] | None = None,
        hidden: Sequence[int] = (),
        visible_devices: str | None = None,
    ) -> None:
        self._devices = {device.nvml_index: device for device in devices}
        self._fastest = list(fastest_first) if fastest_first else sorted(self._devices)
        self._hidden = set(hidden)
        self.visible_devices = visible_devices

    def enumerate(self, device_order: str | None) -> list[SimulatedDevice]:
        """The runtime's devices, by device number, under ``CUDA_DEVICE_ORDER``."""
        if device_order == PCI_ORDER:
            order = sorted(self._devices, key=lambda i: self._devices[i].bus_id)
        else:
            order = [i for i in self._fastest if i in self._devices]
        present = [self._devices[i] for i in order if i not in self._hidden]
        if self.visible_devices is None:
            return present
        chosen: list[SimulatedDevice] = []
        for entry in (part.strip() for part in self.visible_devices.split(",")):
            # The runtime stops at the first entry it cannot resolve.
            match = _resolve(entry, present)
            if match is None or match in chosen:
                break
            chosen.append(match)
        return chosen


def _resolve(entry: str, present: Sequence[SimulatedDevice]) -> SimulatedDevice | None:
    if entry.isdigit():
        number = int(entry)
        return present[number] if number < len(present) else None
    if entry.startswith("GPU-"):
        found = [device for device in present if device.uuid.startswith(entry)]
        return found[0] if len(found) == 1 else None
    return None


__all__ = [
    "CudaEnvironment",
    "Matching",
    "SimulatedCuda",
    "SimulatedDevice",
    "Target",
    "match_devices",
    "prepare_cuda_environment",
]
