"""A scenario's GPU compute processes, as NVML's running-processes calls return them.

A GPU's ``compute_processes`` is a list of ``{"pid": 4711, "used_memory_mib": 9212}``
(``used_memory_mib`` null: the driver cannot say, as under Windows' WDDM); an empty
list is an idle GPU, an absent key a device that does not answer the call. Each
process's name is the scenario host's ``/proc/PID/comm`` (its ``files``), as on a
live host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from validator.fields import Document, Field

MIB = 1048576
MAX_PROCESSES = 64
PID_MAX = 4194304  # the kernel's ceiling (/proc/sys/kernel/pid_max)

PROCESSES_FIELD = Field(
    "compute_processes",
    list,
    wanted=f"a list of at most {MAX_PROCESSES} processes",
    max_items=MAX_PROCESSES,
    nullable=True,
    item=Field(
        "process",
        dict,
        document=Document(
            (
                Field("pid", int, minimum=1, maximum=PID_MAX, required=True),
                Field("used_memory_mib", int, minimum=0, maximum=10**9, nullable=True),
            ),
            wanted='an object like {"pid": 4711, "used_memory_mib": 9212}',
        ),
    ),
)


class ProcessInfo:
    """c_nvmlProcessInfo_t's attributes, as pynvml's friendly object has them."""

    def __init__(self, pid: int, used_bytes: int | None) -> None:
        self.pid = pid
        self.usedGpuMemory = used_bytes
        self.gpuInstanceId = 0xFFFFFFFF
        self.computeInstanceId = 0xFFFFFFFF


class FakeProcesses:
    """The running-processes calls of :class:`validator.node.sim.fake_nvml.FakeNvml`."""

    if TYPE_CHECKING:  # FakeNvml's own

        def _gpu(self, name: str, handle: object) -> dict[str, Any]: ...

        @staticmethod
        def _value(gpu: Mapping[str, object], key: str) -> object: ...

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: object) -> list[ProcessInfo]:
        """The GPU's compute processes (R510+ drivers' call), or the scenario's NVML error."""
        gpu = self._gpu("nvmlDeviceGetComputeRunningProcesses_v3", handle)
        listed = cast(list[dict[str, Any]], self._value(gpu, "compute_processes") or [])
        return [
            ProcessInfo(int(entry["pid"]), _bytes(entry.get("used_memory_mib"))) for entry in listed
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[ProcessInfo]:
        """As pynvml's own name calls: the newest version."""
        return self.nvmlDeviceGetComputeRunningProcesses_v3(handle)


def _bytes(mib: object) -> int | None:
    return None if mib is None else int(cast(int, mib)) * MIB
