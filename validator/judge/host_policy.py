"""The policy's ``host:`` section: what the host around the GPUs must be.

Every key is optional; an empty section judges only what needs no site figure (a
drive's SMART health, the services the node's hardware needs, swap as a warning).

Decisions:

* ``swap_allowed`` None (the default): swap is a WARN, as HPC nodes run without it
  (Azure azurehpc-health-checks' ``check_hw_swap`` fails a node with any); False
  fails it; True accepts it.
* ``nvme_wear_warn_percent`` 90: NVMe "Percentage Used" at 90 WARNs; 100 (the rated
  endurance spent) FAILs, as do the drive's own failed verdict, a critical warning
  and any media error.
* ``services`` None: nvidia-persistenced where the policy requires persistence mode,
  nvidia-fabricmanager where the node has NVSwitches (or the policy requires the
  fabric manager), nvidia-dcgm where the policy runs DCGM's diagnostic.
* ``pins``: NCCL, DCGM, the container toolkit, rdma-core and MOFED, matched by leading
  components as ``nvcc_version`` is ("2.23.4" accepts "2.23.4-1+cuda12.4").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from validator import fields
from validator.fields import Document, Field
from validator.model import HOST_SERVICES, HOST_SYSCTL_NAMES


@dataclass(frozen=True)
class MountRule:
    """A mount point that must be there with this much room."""

    path: str
    min_free_gib: float = 0.0


@dataclass(frozen=True)
class HostPolicy:
    """The ``host:`` section (see the module doc)."""

    cpu_cores: int | None = None  # physical cores at least, all sockets
    cpu_model: str | None = None  # a regular expression the CPU model must match
    memory_gib: float | None = None  # MemTotal at least, GiB
    swap_allowed: bool | None = None
    nvme_count: int | None = None  # NVMe controllers at least
    nvme_wear_warn_percent: int = 90
    mounts: tuple[MountRule, ...] = ()
    kernel_params: tuple[tuple[str, str], ...] = ()  # /proc/cmdline; "" : the flag alone
    sysctl: tuple[tuple[str, str], ...] = ()
    services: tuple[str, ...] | None = None
    pins: tuple[tuple[str, str], ...] = ()
    # Judge the CPUs and memory against the catalog's reference system for the node's GPU
    # (a DGX), where the policy states no figure of its own; off: other vendors' boards
    # with the same GPUs carry other CPUs and memory.
    reference_system: bool = False


@dataclass(frozen=True)
class ReferenceHost:
    """The reference system a catalog row's GPU ships in, as a public source states it."""

    system: str  # "NVIDIA DGX H100"
    cpu_model: str  # as /proc/cpuinfo names it
    cpu_cores: int  # physical, all sockets
    memory_gib: float  # installed; MemTotal is judged against REFERENCE_MEMORY_SHARE of it
    source: str


# MemTotal is the installed memory less what firmware and the kernel reserve (a few
# percent): 95% of the reference's DIMMs leaves room for that. It catches a lost DIMM
# of 16 or fewer, not one of 32 (3.1%): a site states its own exact host.memory_gib.
REFERENCE_MEMORY_SHARE = 0.95


KNOWN_COMPONENTS = ("nccl", "dcgm", "container_toolkit", "rdma_core", "mofed")
_GIB_MAX = 1_000_000.0


def _pattern(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise fields.Invalid(value, wanted=f"a regular expression ({exc})") from None
    return value


def _pairs(value: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted((str(key), "" if item is None else str(item)) for key, item in value.items())
    )


def _known(names: tuple[str, ...]) -> Any:  # noqa: ANN401 - a convert hook
    def convert(value: dict[str, Any]) -> tuple[tuple[str, str], ...]:
        for key in value:
            if key not in names:
                raise fields.Invalid(
                    key, at=(key,), wanted=f"one of {', '.join(names)} (what the agent reads)"
                )
        return _pairs(value)

    return convert


def _services(value: list[str]) -> tuple[str, ...]:
    for index, name in enumerate(value):
        if name not in HOST_SERVICES:
            raise fields.Invalid(name, at=(index,), wanted=f"one of {', '.join(HOST_SERVICES)}")
    return tuple(value)


def _mounts(value: list[dict[str, Any]]) -> tuple[MountRule, ...]:
    return tuple(MountRule(item["path"], float(item.get("min_free_gib", 0.0))) for item in value)


_SETTING = Field("value", object, accept=lambda v: v is None or isinstance(v, (str, int)))
_MOUNT = Document(
    (
        Field("path", str, required=True, pattern=r"/.*", wanted="an absolute path"),
        Field("min_free_gib", float, minimum=0.0, maximum=_GIB_MAX, convert=float),
    ),
    wanted="a mapping with path and min_free_gib",
)
HOST_FIELDS = Document(
    (
        Field("cpu_cores", int, minimum=1, maximum=100_000, nullable=True),
        Field("cpu_model", str, non_empty=True, nullable=True, convert=_pattern),
        Field(
            "memory_gib",
            float,
            minimum=0.0,
            maximum=_GIB_MAX,
            above=True,
            convert=float,
            nullable=True,
        ),
        Field("swap_allowed", bool, nullable=True),
        Field("nvme_count", int, minimum=0, maximum=1024, nullable=True),
        Field("nvme_wear_warn_percent", int, minimum=1, maximum=100),
        Field(
            "mounts",
            list,
            max_items=256,
            item=Field("mount", dict, document=_MOUNT),
            convert=_mounts,
        ),
        Field("kernel_params", dict, max_items=256, values=_SETTING, convert=_pairs),
        Field("sysctl", dict, max_items=256, values=_SETTING, convert=_known(HOST_SYSCTL_NAMES)),
        Field(
            "services",
            list,
            max_items=16,
            nullable=True,
            item=Field("service", str, non_empty=True),
            convert=_services,
        ),
        Field("reference_system", bool),
        Field(
            "pins",
            dict,
            max_items=16,
            values=Field(
                "pin", str, non_empty=True, coerce=lambda v: str(v) if fields.is_int(v) else v
            ),
            convert=_known(KNOWN_COMPONENTS),
        ),
    ),
    wanted="a mapping of host keys",
)


REFERENCE_HOST_FIELDS = Document(
    (
        Field("system", str, non_empty=True, required=True),
        Field("cpu_model", str, non_empty=True, required=True),
        Field("cpu_cores", int, minimum=1, maximum=100_000, required=True),
        Field("memory_gib", float, minimum=1.0, maximum=_GIB_MAX, convert=float, required=True),
        Field("source", str, non_empty=True, required=True),
    ),
    wanted="a mapping of system, cpu_model, cpu_cores, memory_gib and source",
)


def reference_host(values: dict[str, Any]) -> ReferenceHost:
    """A catalog row's checked ``host:`` mapping as a :class:`ReferenceHost`."""
    return ReferenceHost(**values)


def host_policy(values: dict[str, Any] | None) -> HostPolicy:
    """The ``host:`` section from its checked values (None: the defaults)."""
    return HostPolicy() if values is None else HostPolicy(**values)


__all__ = [
    "HOST_FIELDS",
    "KNOWN_COMPONENTS",
    "REFERENCE_HOST_FIELDS",
    "REFERENCE_MEMORY_SHARE",
    "HostPolicy",
    "MountRule",
    "ReferenceHost",
    "host_policy",
    "reference_host",
]
