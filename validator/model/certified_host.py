"""The host around the GPUs as a certificate holds it: what drift compares it with.

An optional part of the certificate (None: certified before the host family, or with no
host facts); where it is None it is left out of the certificate's JSON, so an older
certificate's seal covers the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

from validator.fields import Document, Field
from validator.model.host_facts import SmartHealth
from validator.model.measured import Unavailable
from validator.model.node_facts import NodeFacts


@dataclass(frozen=True)
class CertifiedDrive:
    """One NVMe drive at certification and its SMART health then."""

    name: str
    serial: str
    healthy: Optional[bool]  # None: its health was not read
    media_errors: Optional[int]


@dataclass(frozen=True)
class CertifiedHost:
    """The host at certification; a part None where it was not read."""

    cpu_model: Optional[str]
    cpu_cores: Optional[int]
    memory_kib: Optional[int]
    drives: Optional[Tuple[CertifiedDrive, ...]]
    services: tuple[tuple[str, str], ...]  # (unit, active state)
    versions: tuple[tuple[str, str], ...]  # (component, version; "" not installed)


def _known(value: Any) -> Any:
    return None if isinstance(value, Unavailable) else value


def certified_host(facts: NodeFacts) -> CertifiedHost | None:
    """What the certificate holds of ``facts.host``; None without host facts."""
    host = facts.host
    if host is None:
        return None
    drives = None
    if not isinstance(host.nvme, Unavailable):
        drives = tuple(
            CertifiedDrive(
                drive.name,
                drive.serial,
                None if isinstance(drive.smart, Unavailable) else _healthy(drive.smart),
                None if isinstance(drive.smart, Unavailable) else drive.smart.media_errors,
            )
            for drive in host.nvme
        )
    services = () if isinstance(host.services, Unavailable) else host.services
    versions = () if isinstance(host.versions, Unavailable) else host.versions
    return CertifiedHost(
        cpu_model=_known(host.cpu_model),
        cpu_cores=_known(host.cpu_cores),
        memory_kib=_known(host.memory_kib),
        drives=drives,
        services=tuple((state.name, state.active) for state in services),
        versions=tuple((item.component, item.version) for item in versions),
    )


def _healthy(smart: SmartHealth) -> bool | None:
    """A drive's SMART health as one flag: its verdict, no warning, no media error."""
    if smart.passed is None and smart.critical_warning is None:
        return None
    return bool(smart.passed is not False and not smart.critical_warning and not smart.media_errors)


def _pairs(items: list[Any]) -> tuple[tuple[str, str], ...]:
    return tuple((str(item[0]), str(item[1])) for item in items)


def _drives(items: list[dict[str, Any]]) -> tuple[CertifiedDrive, ...]:
    return tuple(CertifiedDrive(**item) for item in items)


_PAIR = Field("pair", list, max_items=2, item=Field("part", str))
_DRIVE = Document(
    (
        Field("name", str, required=True),
        Field("serial", str, required=True),
        Field("healthy", bool, nullable=True, required=True),
        Field("media_errors", int, minimum=0, nullable=True, required=True),
    ),
    noun="field",
    wanted="a JSON object",
)
CERTIFIED_HOST_FIELDS = Document(
    (
        Field("cpu_model", str, nullable=True, required=True),
        Field("cpu_cores", int, minimum=0, nullable=True, required=True),
        Field("memory_kib", int, minimum=0, nullable=True, required=True),
        Field(
            "drives",
            list,
            nullable=True,
            required=True,
            max_items=1024,
            item=Field("drive", dict, document=_DRIVE),
            convert=_drives,
        ),
        Field("services", list, required=True, max_items=64, item=_PAIR, convert=_pairs),
        Field("versions", list, required=True, max_items=64, item=_PAIR, convert=_pairs),
    ),
    noun="field",
    wanted="a JSON object",
)


def host_from_fields(data: dict[str, Any]) -> CertifiedHost:
    """A checked ``host`` object of a certificate as a :class:`CertifiedHost`."""
    return CertifiedHost(**data)


__all__ = [
    "CERTIFIED_HOST_FIELDS",
    "CertifiedDrive",
    "CertifiedHost",
    "certified_host",
    "host_from_fields",
]
