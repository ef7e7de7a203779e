"""The HCAs' firmware, PKey, error counters, their growth, link flaps and source agreement.

The rest of :mod:`validator.judge.checks.network`, which says what each check means.
"""

from __future__ import annotations

from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    node_finding,
    why_not,
    with_action,
)
from validator.judge.network_policy import NetworkExpectation
from validator.model import (
    Action,
    Finding,
    Hca,
    HcaPort,
    Measured,
    NetworkFacts,
    PortCounter,
    Unavailable,
)

FIRMWARE = "network.firmware"
PKEY = "network.pkey"
ERRORS = "network.errors"
ERROR_GROWTH = "network.error_growth"
LINK_FLAPS = "network.link_flaps"
SOURCES = "network.sources"

FIRMWARE_FIX = (
    Action.FIX_SOFTWARE,
    "gpuready: update the HCAs of one model to one firmware for one PSID (mlxfwmanager)",
)
PKEY_FIX = (
    Action.FIX_SOFTWARE,
    "gpuready: the subnet manager's partition (PKey) configuration for these ports",
)
FLAP_FIX = (
    Action.RESEAT_CABLE_RISER,
    "gpuready: a link that goes down and up is a loose or marginal cable or transceiver, or "
    "its switch port",
)
# What each counter's growth under load means, and so what to do.
GROWTH_ACTIONS: dict[str, tuple[Action, str]] = {
    "symbol_error": (
        Action.REPLACE_TRANSCEIVER,
        "gpuready: symbol errors growing under load are a marginal transceiver or cable",
    ),
    "port_rcv_errors": (
        Action.REPLACE_TRANSCEIVER,
        "gpuready: receive errors growing under load are a marginal transceiver or cable",
    ),
    "link_error_recovery": (
        Action.REPLACE_TRANSCEIVER,
        "gpuready: the link retrains under load: a marginal transceiver or cable",
    ),
    "link_downed": FLAP_FIX,
    "excessive_buffer_overrun_errors": (
        Action.FIX_SOFTWARE,
        "gpuready: buffer overruns are flow control (credits, PFC) set unlike the switch's",
    ),
}
DEFAULT_FLAPS_MAX = 0
DEFAULT_GROWTH_MAX = 0


def _by_model(hcas: tuple[Hca, ...]) -> dict[str, list[Hca]]:
    groups: dict[str, list[Hca]] = {}
    for hca in hcas:
        model = hca.hca_type if isinstance(hca.hca_type, str) else "unknown model"
        groups.setdefault(model, []).append(hca)
    return groups


def _firmware(hcas: tuple[Hca, ...]) -> list[Finding]:
    unread = [h for h in hcas if isinstance(h.fw_ver, Unavailable)]
    if unread and isinstance(unread[0].fw_ver, Unavailable):
        return [
            node_finding(
                FIRMWARE,
                UNKNOWN,
                f"{unread[0].device} firmware could not be read: {why_not(unread[0].fw_ver)}",
                required=False,
            )
        ]
    findings: list[Finding] = []
    for model, group in _by_model(hcas).items():
        for what, values in (
            ("firmware", {h.device: h.fw_ver for h in group}),
            ("PSID", {h.device: h.board_id for h in group if isinstance(h.board_id, str)}),
        ):
            distinct = sorted({str(v) for v in values.values()})
            if len(distinct) > 1:
                shown = "; ".join(
                    f"{v} on {', '.join(d for d, x in values.items() if x == v)}" for v in distinct
                )
                finding = node_finding(
                    FIRMWARE,
                    FAIL,
                    f"{model} HCAs differ in {what}: {shown}",
                    observed=" / ".join(distinct),
                    expected=f"one {what} per model",
                )
                findings.append(with_action(finding, *FIRMWARE_FIX))
    if findings:
        return findings
    versions = sorted({str(h.fw_ver) for h in hcas})
    return [
        node_finding(
            FIRMWARE,
            PASS,
            f"{len(hcas)} HCA(s), one firmware and PSID per model: {', '.join(versions)}",
            observed=", ".join(versions),
        )
    ]


def _pkey(fabric: list[HcaPort], want: NetworkExpectation | None) -> list[Finding]:
    known = {p.name: p.pkey for p in fabric if isinstance(p.pkey, str)}
    if not known:
        return []
    distinct = sorted({k.lower() for k in known.values()})
    wanted = None if want is None or want.pkey is None else want.pkey.lower()
    if len(distinct) == 1 and (wanted is None or distinct[0] == wanted):
        return [
            node_finding(
                PKEY,
                PASS,
                f"every fabric port on PKey {distinct[0]}",
                observed=distinct[0],
                expected=wanted or "one PKey",
            )
        ]
    shown = ", ".join(f"{name} {key}" for name, key in known.items())
    finding = node_finding(
        PKEY,
        FAIL,
        f"fabric ports are not on {'PKey ' + wanted if wanted else 'one PKey'}: {shown}",
        observed=" / ".join(distinct),
        expected=wanted or "one PKey",
    )
    return [with_action(finding, *PKEY_FIX)]


def _values(counters: Measured[tuple[PortCounter, ...]]) -> dict[str, int]:
    if isinstance(counters, Unavailable):
        return {}
    return {c.name: c.value for c in counters if isinstance(c.value, int)}


def _unread_why(counters: Measured[tuple[PortCounter, ...]]) -> str | None:
    """Why a port's counters were not read (None when some were): never read as zero."""
    if isinstance(counters, Unavailable):
        return why_not(counters)
    if not counters:
        return "no counter listed"
    missing = [c for c in counters if not isinstance(c.value, int)]
    if len(missing) < len(counters):
        return None
    value = missing[0].value
    return why_not(value) if isinstance(value, Unavailable) else "unread"


def _errors(fabric: list[HcaPort]) -> list[Finding]:
    unread = [(p, why) for p in fabric if (why := _unread_why(p.counters)) is not None]
    if unread:
        port, why = unread[0]
        return [
            node_finding(
                ERRORS,
                UNKNOWN,
                f"the error counters of {len(unread)} of {len(fabric)} port(s) could not be "
                f"read ({port.name}: {why})",
                required=False,
            )
        ]
    seen = [
        f"{port.name} {name} {value:,}"
        for port in fabric
        for name, value in _values(port.counters).items()
        if value > 0
    ]
    if not seen:
        return [node_finding(ERRORS, PASS, "no port error counted since the driver loaded")]
    return [
        node_finding(
            ERRORS,
            WARN,
            "error counters since the driver loaded (judged by their growth during the "
            f"burn-in): {'; '.join(seen[:12])}",
            observed=f"{len(seen)} counter(s) above 0",
            expected="0",
            required=False,
        )
    ]


def _growth(fabric: list[HcaPort], want: NetworkExpectation | None) -> list[Finding]:
    limit = (
        DEFAULT_GROWTH_MAX
        if want is None or want.error_growth_max is None
        else (want.error_growth_max)
    )
    measured = [p for p in fabric if not isinstance(p.counters_after, Unavailable)]
    if not measured:
        return []
    findings: list[Finding] = []
    unread: list[str] = []
    for port in measured:
        before = _values(port.counters)
        after = _values(port.counters_after)
        if not after:
            unread.append(f"{port.name} after the burn-in")
        for name, now in after.items():
            if name not in before:  # no reading before: its growth is not known, never 0
                unread.append(f"{port.name} {name} before the burn-in")
                continue
            grew = now - before[name]
            if grew > limit:
                finding = node_finding(
                    ERROR_GROWTH,
                    FAIL,
                    f"{port.name} {name} grew by {grew:,} during the burn-in "
                    f"({before.get(name, 0):,} to {now:,})",
                    observed=f"+{grew:,}",
                    expected=f"at most +{limit}",
                )
                findings.append(with_action(finding, *GROWTH_ACTIONS[name]))
    if findings:
        return findings
    if unread:
        return [
            node_finding(
                ERROR_GROWTH,
                UNKNOWN,
                f"counter growth not known: not read {'; '.join(unread[:4])}",
                observed="not measured",
                expected=f"at most +{limit}",
                required=False,
            )
        ]
    return [
        node_finding(
            ERROR_GROWTH,
            PASS,
            f"no port error counter grew beyond +{limit} during the burn-in "
            f"({len(measured)} port(s))",
            observed="no growth",
            expected=f"at most +{limit}",
        )
    ]


def _fabric_netdevs(hcas: tuple[Hca, ...], fabric: list[HcaPort]) -> set[str] | None:
    """The network interfaces of the fabric's HCAs; None where no HCA names any (ibstat)."""
    devices = {port.device for port in fabric}
    named = {netdev for hca in hcas for netdev in hca.netdevs}
    if not named:
        return None
    return {netdev for hca in hcas if hca.device in devices for netdev in hca.netdevs}


def _flaps(
    network: NetworkFacts, want: NetworkExpectation | None, netdevs: set[str] | None
) -> list[Finding]:
    flaps = network.flaps
    if isinstance(flaps, Unavailable):
        return [
            node_finding(
                LINK_FLAPS,
                UNKNOWN,
                f"the kernel log could not be read: {why_not(flaps)}",
                required=False,
            )
        ]
    limit = (
        DEFAULT_FLAPS_MAX if want is None or want.link_flaps_max is None else (want.link_flaps_max)
    )
    # Storage or management ports of an mlx5 card are not the fabric's: not judged here.
    bad = [f for f in flaps if f.downs > limit and (netdevs is None or f.interface in netdevs)]
    if not bad:
        return [
            node_finding(
                LINK_FLAPS,
                PASS,
                f"no HCA link went down in the kernel log beyond {limit}",
                observed="0",
                expected=f"at most {limit}",
            )
        ]
    return [
        with_action(
            node_finding(
                LINK_FLAPS,
                FAIL,
                f"{f.interface} ({f.pci_address}) went down {f.downs} time(s) and up {f.ups} "
                "in the kernel log",
                observed=f"{f.downs} down",
                expected=f"at most {limit}",
            ),
            *FLAP_FIX,
        )
        for f in bad
    ]


def _sources(network: NetworkFacts) -> list[Finding]:
    if not network.disagreements:
        return []
    return [
        node_finding(
            SOURCES,
            WARN,
            "the tools disagree with sysfs (the HCAs changed while read, or a tool is "
            f"stale): {'; '.join(network.disagreements[:6])}",
            required=False,
        )
    ]


def counter_findings(
    network: NetworkFacts,
    hcas: tuple[Hca, ...],
    fabric: list[HcaPort],
    want: NetworkExpectation | None,
) -> list[Finding]:
    """Firmware, PKey, error counters and growth, link flaps and the tools' agreement."""
    return [
        *_firmware(hcas),
        *_pkey(fabric, want),
        *_errors(fabric),
        *_growth(fabric, want),
        *_flaps(network, want, _fabric_netdevs(hcas, fabric)),
        *_sources(network),
    ]
