"""The node's HCAs (InfiniBand, RoCE) read through the System seam: sysfs, ibstat, ibv_devinfo.

``/sys/class/infiniband/<dev>`` is read first (every value the kernel keeps: firmware,
PSID, each port's state, physical state, rate, link layer, PKey and error counters);
where it cannot be read (a capture that lacks its record), ``ibstat`` stands in. Both
tools, where they ran, cross-check what sysfs said (state, rate; firmware and PSID).
Link flaps come from the kernel log (mlx5's ``Link down``). The same code reads a live
host, a scenario and a capture bundle; nothing here raises on what it finds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import posixpath

from validator.model import (
    IB_ERROR_COUNTERS,
    Hca,
    HcaPort,
    LinkFlap,
    Measured,
    NetworkFacts,
    NodeFacts,
    PortCounter,
    Reason,
    Unavailable,
)
from validator.node.parsers import ib_sysfs
from validator.node.parsers.base import ParseError
from validator.node.parsers.ib_link_flaps import parse_link_flaps
from validator.node.parsers.ibstat import IbstatCa, parse_ibstat
from validator.node.parsers.ibv_devinfo import DevinfoHca, parse_ibv_devinfo
from validator.node.system import CommandResult, NotRecordedError, System
from validator.node.system_facts import (
    DMESG,
    JOURNAL_KERNEL,
    checked_run,
    parsed,
    read_file,
    read_parsed,
)

ROOT = ib_sysfs.ROOT
IBSTAT = ("ibstat",)
IBV_DEVINFO = ("ibv_devinfo", "-v")
# The device files read of each HCA, and of each port (with its counters/ beside them).
HCA_FILES = ("fw_ver", "board_id", "node_guid", "hca_type")
PORT_FILES = ("state", "phys_state", "rate", "link_layer", "pkeys/0")
# ibstat's and ibv_devinfo's names for the states sysfs writes.
_DEVINFO_STATE = {"PORT_ACTIVE": "ACTIVE", "PORT_DOWN": "DOWN", "PORT_INIT": "INIT"}


def _word(system: System, path: str, what: str) -> Measured[str]:
    return read_parsed(system, path, lambda text: ib_sysfs.parse_word(text, what))


def _listing(system: System, pattern: str) -> list[str] | Unavailable:
    try:
        return system.glob(pattern)
    except NotRecordedError as exc:
        return Unavailable(Reason.NOT_MEASURED, str(exc))
    except OSError as exc:
        return Unavailable(Reason.ERROR, f"{pattern}: {exc}")


def _counters(system: System, port_dir: str) -> tuple[PortCounter, ...]:
    return tuple(
        PortCounter(
            name, read_parsed(system, f"{port_dir}/counters/{name}", ib_sysfs.parse_counter)
        )
        for name in IB_ERROR_COUNTERS
    )


def _port(system: System, device: str, port_dir: str) -> HcaPort | None:
    number = posixpath.basename(port_dir)
    if not number.isdigit():
        return None
    rate_text = read_file(system, f"{port_dir}/rate")
    return HcaPort(
        device=device,
        port=int(number),
        state=read_parsed(system, f"{port_dir}/state", ib_sysfs.parse_port_state),
        phys_state=read_parsed(system, f"{port_dir}/phys_state", ib_sysfs.parse_phys_state),
        rate_gbps=read_parsed(system, f"{port_dir}/rate", ib_sysfs.parse_rate),
        rate_text="" if isinstance(rate_text, Unavailable) else rate_text.strip()[:80],
        link_layer=read_parsed(
            system, f"{port_dir}/link_layer", lambda t: ib_sysfs.parse_word(t, "link layer")
        ),
        pkey=read_parsed(system, f"{port_dir}/pkeys/0", lambda t: ib_sysfs.parse_word(t, "PKey")),
        counters=_counters(system, port_dir),
    )


def _hca(system: System, device_dir: str) -> Hca:
    device = posixpath.basename(device_dir)
    values = {name: _word(system, f"{device_dir}/{name}", name) for name in HCA_FILES}
    port_dirs = _listing(system, f"{device_dir}/ports/*")
    ports = [] if isinstance(port_dirs, Unavailable) else port_dirs
    netdevs = _listing(system, f"{device_dir}/device/net/*")
    return Hca(
        device=device,
        hca_type=values["hca_type"],
        fw_ver=values["fw_ver"],
        board_id=values["board_id"],
        node_guid=values["node_guid"],
        ports=tuple(p for p in (_port(system, device, d) for d in ports) if p is not None),
        netdevs=()
        if isinstance(netdevs, Unavailable)
        else tuple(posixpath.basename(n) for n in netdevs),
    )


def sysfs_hcas(system: System) -> tuple[Hca, ...] | Unavailable:
    """Every HCA under /sys/class/infiniband (none: an empty tuple), or why it was not read."""
    devices = _listing(system, f"{ROOT}/*")
    if isinstance(devices, Unavailable):
        return devices
    return tuple(_hca(system, device) for device in devices)


def _ibstat_state(text: str) -> Measured[str]:
    return text.upper() if text else Unavailable(Reason.NOT_SUPPORTED, "ibstat shows no state")


def _ibstat_hcas(cas: list[IbstatCa]) -> tuple[Hca, ...]:
    """ibstat's CAs as HCAs: what it prints (no PSID, PKey or counters: not measured)."""
    missing = Unavailable(Reason.NOT_MEASURED, "ibstat does not print it")
    return tuple(
        Hca(
            device=ca.name,
            hca_type=ca.ca_type or missing,
            fw_ver=ca.firmware or missing,
            board_id=missing,
            node_guid=ca.node_guid or missing,
            ports=tuple(
                HcaPort(
                    device=ca.name,
                    port=port.number,
                    state=_ibstat_state(port.state),
                    phys_state=port.phys_state or missing,
                    rate_gbps=port.rate if port.rate is not None else missing,
                    link_layer=port.link_layer or missing,
                    pkey=missing,
                    counters=missing,
                )
                for port in ca.ports
            ),
        )
        for ca in cas
    )


def _from_ibstat(system: System, why_not: Unavailable) -> tuple[str, Measured[tuple[Hca, ...]]]:
    """ibstat's view where sysfs could not be read; else sysfs's reason, with ibstat's."""
    result = checked_run(system, IBSTAT, "ibstat")
    if isinstance(result, Unavailable):
        return "sysfs", Unavailable(why_not.reason, f"{why_not.detail}; {result.detail}")
    hcas = parsed(parse_ibstat, result.stdout, result.recorded_in or "ibstat")
    return "ibstat", hcas if isinstance(hcas, Unavailable) else _ibstat_hcas(hcas)


def _differs(what: str, sysfs: object, tool: str, said: object) -> str | None:
    if isinstance(sysfs, Unavailable) or not said or sysfs == said:
        return None
    return f"{what}: sysfs says {sysfs}, {tool} says {said}"


def _ibstat_disagrees(hcas: tuple[Hca, ...], cas: list[IbstatCa]) -> list[str]:
    ports = {(p.device, p.port): p for hca in hcas for p in hca.ports}
    said: list[str | None] = []
    names = {hca.device for hca in hcas}
    if {ca.name for ca in cas} != names:
        said.append(f"HCAs: sysfs lists {sorted(names)}, ibstat {sorted(ca.name for ca in cas)}")
    for ca in cas:
        for port in ca.ports:
            seen = ports.get((ca.name, port.number))
            if seen is None:
                continue
            said.append(_differs(f"{seen.name} state", seen.state, "ibstat", port.state.upper()))
            said.append(_differs(f"{seen.name} rate", seen.rate_gbps, "ibstat", port.rate))
    return [line for line in said if line is not None]


def _devinfo_disagrees(hcas: tuple[Hca, ...], found: list[DevinfoHca]) -> list[str]:
    by_name = {hca.device: hca for hca in hcas}
    said: list[str | None] = []
    for hca in found:
        seen = by_name.get(hca.name)
        if seen is None:
            said.append(f"{hca.name}: ibv_devinfo lists it, sysfs does not")
            continue
        said.append(_differs(f"{hca.name} firmware", seen.fw_ver, "ibv_devinfo", hca.fw_ver))
        said.append(_differs(f"{hca.name} PSID", seen.board_id, "ibv_devinfo", hca.board_id))
        ports = {p.port: p for p in seen.ports}
        for port in hca.ports:
            mine = ports.get(port.number)
            state = _DEVINFO_STATE.get(port.state, port.state)
            if mine is not None:
                said.append(_differs(f"{mine.name} state", mine.state, "ibv_devinfo", state))
    return [line for line in said if line is not None]


def _cross_check(system: System, hcas: tuple[Hca, ...], source: str) -> tuple[str, ...]:
    """Where ibstat and ibv_devinfo, those of them that ran and parsed, disagree with sysfs."""
    if source != "sysfs":
        return ()
    said: list[str] = []
    ibstat = checked_run(system, IBSTAT, "ibstat")
    if isinstance(ibstat, CommandResult):
        with contextlib.suppress(ParseError):  # a cross-check only: sysfs is the fact
            said += _ibstat_disagrees(hcas, parse_ibstat(ibstat.stdout))
    devinfo = checked_run(system, IBV_DEVINFO, "ibv_devinfo")
    if isinstance(devinfo, CommandResult):
        with contextlib.suppress(ParseError):
            said += _devinfo_disagrees(hcas, parse_ibv_devinfo(devinfo.stdout))
    return tuple(said)


def _flaps(system: System) -> Measured[tuple[LinkFlap, ...]]:
    """Link flaps from dmesg, else the journal's kernel log (as the Xids are read)."""
    result = checked_run(system, DMESG, "dmesg")
    if isinstance(result, Unavailable) or not result.stdout.strip():
        journal = checked_run(system, JOURNAL_KERNEL, "journalctl")
        if isinstance(journal, CommandResult) and journal.stdout.strip():
            result = journal
    if isinstance(result, Unavailable):
        return result
    return parsed(parse_link_flaps, result.stdout, result.recorded_in or "the kernel log")


def network_facts(system: System) -> NetworkFacts:
    """The node's HCAs, their cross-checks against the tools, and the link flaps."""
    hcas = sysfs_hcas(system)
    source = "sysfs"
    if isinstance(hcas, Unavailable):
        source, hcas = _from_ibstat(system, hcas)
    said = () if isinstance(hcas, Unavailable) else _cross_check(system, hcas, source)
    return NetworkFacts(source=source, hcas=hcas, flaps=_flaps(system), disagreements=said)


def counters_after(system: System, network: NetworkFacts) -> NetworkFacts:
    """``network`` with each sysfs port's error counters read again (after the burn-in)."""
    if isinstance(network.hcas, Unavailable) or network.source != "sysfs":
        return network
    hcas = tuple(
        dataclasses.replace(
            hca,
            ports=tuple(
                dataclasses.replace(
                    port,
                    counters_after=_counters(system, f"{ROOT}/{hca.device}/ports/{port.port}"),
                )
                for port in hca.ports
            ),
        )
        for hca in network.hcas
    )
    return dataclasses.replace(network, hcas=hcas)


def with_network(system: System, facts: NodeFacts) -> NodeFacts:
    """``facts`` with the network read (the collector calls it for every source)."""
    return dataclasses.replace(facts, network=network_facts(system))


__all__ = ["counters_after", "network_facts", "sysfs_hcas", "with_network"]
