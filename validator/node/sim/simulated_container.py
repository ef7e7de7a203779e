"""What a scenario's container toolkit prints when its outputs are made from its own GPUs.

A command of a scenario may say ``{"generated": "cdi-list"}`` (``nvidia-ctk cdi list``) or
``{"generated": "smi-list"}`` (``nvidia-smi -L``, as a container prints it): the output is
made from the scenario's NVML GPUs, in the shape of the real recordings in
tests/fixtures/nvidia-ctk (indexes, then the UUIDs sorted by name, then ``all``). A spec
generated on the node therefore names the node's GPUs, whatever another scenario changes
about them (a swapped board's serial, its name); a stale spec is written out instead
(the ``cdi-spec-stale`` scenario, with ``"generated": null`` to drop the inherited key).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from validator.node.sim.fake_nvml import default_serial, default_uuid, merge_gpu

GENERATED = ("cdi-list", "smi-list")


def _gpus(nvml: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, UUID) of each GPU, as the fake NVML derives them."""
    defaults = nvml.get("gpu") or {}
    overrides = nvml.get("gpu_overrides") or {}
    gpus = []
    for index in range(int(nvml.get("gpu_count", 0))):
        gpu = merge_gpu(defaults, overrides.get(str(index)) or {})
        name = str(gpu.get("name", ""))
        uuid = gpu.get("uuid")
        if not isinstance(uuid, str):  # an error marker: the spec predates the fault
            uuid = default_uuid(str(gpu.get("serial", default_serial(index))), name)
        gpus.append((name, uuid))
    return gpus


def generated_output(data: Mapping[str, Any], what: str) -> str:
    """The output ``what`` names, made from the scenario's GPUs."""
    gpus = _gpus(data.get("nvml", {}))
    if what == "smi-list":
        return "".join(f"GPU {i}: {name} (UUID: {uuid})\n" for i, (name, uuid) in enumerate(gpus))
    names = [f"nvidia.com/gpu={i}" for i in range(len(gpus))]
    names += [f"nvidia.com/gpu={uuid}" for uuid in sorted(uuid for _, uuid in gpus)]
    names.append("nvidia.com/gpu=all")
    return f"INFO[0000] Found {len(names)} CDI devices\n" + "\n".join(names) + "\n"
