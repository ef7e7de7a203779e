r"""Parse ``lspci -vvv``: the PCIe switch ports above GPUs and NICs, and their ACS control bits.

Each device is a block: a header line at column 0 (``17:01.0 PCI bridge: Broadcom / LSI
PEX890xx PCIe Gen 5 Switch (rev b0) ...``, the domain printed where there are several),
then indented lines. What is read of each:

* the class and name from the header: a GPU is an NVIDIA ``3D controller`` or ``VGA
  compatible controller``; a NIC an ``Infiniband controller`` or a Mellanox ``Ethernet
  controller`` (the ConnectX cards GPUDirect RDMA uses);
* a bridge's ``Bus: primary=16, secondary=17, subordinate=1c``: the buses behind it;
* ``Express (v2) Upstream Port`` / ``Downstream Port``: a port of a PCIe switch (root
  ports are the CPU's, and NCCL's advice is about the switches);
* ``ACSCtl:`` with ``SrcValid+``, ``ReqRedir+``, ``CmpltRedir+``;
* ``Capabilities: <access denied>``: lspci was not run as root, so neither the port's
  kind nor its ACS bits can be read.

A port is returned when a GPU or NIC sits behind it (its bus within the port's
secondary..subordinate range, same domain). A bridge whose capabilities were denied
is returned (as not readable) on the same terms, its kind "unknown".

Pure functions over text, standard library only (Python 3.9): shipped to hosts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from validator.limits import TOOL_OUTPUT_BYTES
from validator.model import AcsPort
from validator.node.parsers.base import ParseError

_HEADER = re.compile(
    r"^((?:[0-9a-fA-F]{4}:)?([0-9a-fA-F]{2}):[0-9a-fA-F]{2}\.[0-7])\s+([^:]+?)(?:\s+\[[0-9a-fA-F]{4}\])?:\s+(.*)$"
)
_BUS = re.compile(
    r"Bus:\s+primary=[0-9a-fA-F]+,\s+secondary=([0-9a-fA-F]+),\s+subordinate=([0-9a-fA-F]+)"
)
_PORT = re.compile(r"Express \(v[0-9]\) (Upstream|Downstream) Port")
_ACSCTL = re.compile(r"^\s*ACSCtl:\s*(.*)$")
_GPU_CLASSES = ("3D controller", "VGA compatible controller")


@dataclass
class _Device:
    address: str
    domain: str
    bus: int
    device_class: str
    name: str
    secondary: int | None = None
    subordinate: int | None = None
    kind: str | None = None
    denied: bool = False
    acs: tuple[bool, bool, bool] | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def gpu(self) -> bool:
        return self.device_class in _GPU_CLASSES and "NVIDIA" in self.name

    @property
    def nic(self) -> bool:
        return self.device_class == "Infiniband controller" or (
            self.device_class == "Ethernet controller" and "Mellanox" in self.name
        )


def parse_acs_ports(text: str) -> tuple[AcsPort, ...]:
    """The switch ports with a GPU or NIC behind them, with their ACS control bits.

    Raises:
        ParseError: no lspci device line at all, or output over the bound.
    """
    if len(text) > TOOL_OUTPUT_BYTES:
        raise ParseError(f"lspci -vvv output is over {TOOL_OUTPUT_BYTES} bytes")
    devices = _devices(text)
    if not devices and text.strip():
        raise ParseError(
            "no lspci device line (such as `17:00.0 PCI bridge: ...`): is this lspci -vvv?"
        )
    ends = [d for d in devices if d.gpu or d.nic]
    ports: list[AcsPort] = []
    for device in devices:
        if device.secondary is None or device.subordinate is None:
            continue
        if device.kind is None and not device.denied:
            continue  # a root port or a PCI bridge: not a switch's
        below = tuple(
            end.address
            for end in ends
            if end.domain == device.domain and device.secondary <= end.bus <= device.subordinate
        )
        if below:
            ports.append(_port(device, below))
    return tuple(ports)


def _port(device: _Device, below: tuple[str, ...]) -> AcsPort:
    bits = device.acs or (False, False, False)
    return AcsPort(
        address=device.address,
        kind=device.kind or "unknown",
        below=below,
        readable=not device.denied,
        has_acs=device.acs is not None,
        src_valid=bits[0],
        req_redir=bits[1],
        cmplt_redir=bits[2],
    )


def _devices(text: str) -> list[_Device]:
    devices: list[_Device] = []
    current: _Device | None = None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            address = header.group(1)
            domain = address[:4].lower() if address.count(":") == 2 else "0000"
            current = _Device(
                address=address,
                domain=domain,
                bus=int(header.group(2), 16),
                device_class=header.group(3).strip(),
                name=header.group(4),
            )
            devices.append(current)
            continue
        if current is None or not line[:1].isspace():
            continue
        _read_line(current, line)
    return devices


def _read_line(device: _Device, line: str) -> None:
    bus = _BUS.search(line)
    if bus:
        device.secondary, device.subordinate = int(bus.group(1), 16), int(bus.group(2), 16)
        return
    port = _PORT.search(line)
    if port and "Capabilities:" in line:
        device.kind = port.group(1).lower()
        return
    if "Capabilities: <access denied>" in line:
        device.denied = True
        return
    acs = _ACSCTL.match(line)
    if acs:
        flags = acs.group(1).split()
        device.acs = ("SrcValid+" in flags, "ReqRedir+" in flags, "CmpltRedir+" in flags)


__all__ = ["parse_acs_ports"]
