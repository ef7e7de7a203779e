"""Reaching a host: the host as the inventory gives it, and the transports' names."""

from __future__ import annotations

import enum
import typing
from dataclasses import dataclass, field
from typing import Optional, Tuple


class TransportName(str, enum.Enum):
    """The ways of reaching a host."""

    LOCAL = "local"
    SSH = "ssh"
    ANSIBLE = "ansible"

    def __str__(self) -> str:
        return self.value


# Every transport's name: what gpuready_transport and --transport accept.
TRANSPORTS: Tuple[str, ...] = tuple(name.value for name in TransportName)


@dataclass(frozen=True)
class HostSpec:
    """One inventory host, as the transports need it. No secret is ever held here."""

    name: str  # the inventory name; reports use it
    address: str  # ansible_host, else the name
    port: Optional[int] = None  # ansible_port; None: ssh config / 22
    user: Optional[str] = None  # ansible_user; None: ssh config / current user
    key_file: Optional[str] = None  # ansible_ssh_private_key_file
    python: str = "python3"  # ansible_python_interpreter
    simulate: Optional[str] = None  # gpuready_simulate: scenario name or a path on the host
    vars: typing.Mapping[str, object] = field(default_factory=dict)  # every gpuready_* var
