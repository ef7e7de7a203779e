"""Drift of the host around the GPUs, paired with :mod:`validator.judge.checks.host_health`.

* No host in the certificate (certified before the host family) or no host facts now
  (an older agent's): nothing to compare, no finding.
* Fewer CPU cores, another CPU model, or memory more than :data:`MEMORY_SHRINK` below
  the certified size: drift (the board: drain and RMA, as certify's action).
* A certified drive gone: drift (reseat it); a drive healthy at certification whose
  SMART health failed since, or whose media errors grew: drift (replace it).
* A service active at certification and not now: drift (fix the software).
* A component's version other than certified: drift (fix the software: reprovision).
* A part not measured now that the certificate holds: UNKNOWN, never "unchanged".
"""

from __future__ import annotations

from validator.drift.drift_helpers import DriftInputs
from validator.judge.checks.finding_helpers import FAIL, PASS, UNKNOWN, node_finding, with_action
from validator.model import (
    Action,
    CertifiedHost,
    CheckFamily,
    DriftCheck,
    Finding,
    HostFacts,
    Unavailable,
    certified_host,
)

FAMILY = CheckFamily.HOST
CHECK = DriftCheck.HOST.value
# MemTotal moves by megabytes between kernels and boots; a lost DIMM is gigabytes.
MEMORY_SHRINK = 0.01
SOURCE = "gpuready: the host changed since certification"


def compare_host(inputs: DriftInputs) -> list[Finding]:
    """Every host drift finding of the facts now against the certificate."""
    was, host = inputs.cert.host, inputs.facts.host
    if was is None or host is None:
        return []
    now = certified_host(inputs.facts)
    if now is None:  # host facts are there: never
        return []
    found = _cpu_memory(was, now, host) + _drives(was, now) + _services(was, now)
    found += _versions(was, now)
    if not any(finding.severity is not PASS for finding in found):
        return [node_finding(CHECK, PASS, "The host is as certified", observed="unchanged")]
    return [finding for finding in found if finding.severity is not PASS]


def _drift(message: str, action: Action, *, observed: str, expected: str) -> Finding:
    finding = node_finding(CHECK, FAIL, message, observed=observed, expected=expected)
    return with_action(finding, action, SOURCE)


def _cpu_memory(was: CertifiedHost, now: CertifiedHost, host: HostFacts) -> list[Finding]:
    found = []
    if was.cpu_cores is not None:
        if now.cpu_cores is None:
            found.append(_unread("the CPUs", host.cpu_cores))
        elif now.cpu_cores < was.cpu_cores or now.cpu_model != was.cpu_model:
            found.append(
                _drift(
                    f"The CPUs changed: {now.cpu_cores} cores of {now.cpu_model}, certified with "
                    f"{was.cpu_cores} of {was.cpu_model}",
                    Action.DRAIN_RMA,
                    observed=f"{now.cpu_cores} cores",
                    expected=f"{was.cpu_cores} cores",
                )
            )
    if was.memory_kib is not None:
        if now.memory_kib is None:
            found.append(_unread("the host memory", host.memory_kib))
        elif now.memory_kib < was.memory_kib * (1 - MEMORY_SHRINK):
            gib, was_gib = now.memory_kib / 1024**2, was.memory_kib / 1024**2
            found.append(
                _drift(
                    f"The host memory fell to {gib:.0f} GiB from the certified {was_gib:.0f} GiB: "
                    "a DIMM is gone or failed",
                    Action.DRAIN_RMA,
                    observed=f"{gib:.0f} GiB",
                    expected=f"{was_gib:.0f} GiB",
                )
            )
    return found


def _unread(what: str, value: object) -> Finding:
    why = str(value) if isinstance(value, Unavailable) else "not measured"
    return node_finding(CHECK, UNKNOWN, f"{what} could not be read now ({why})", observed=why)


def _drives(was: CertifiedHost, now: CertifiedHost) -> list[Finding]:
    if was.drives is None:
        return []
    if now.drives is None:
        return [
            node_finding(
                CHECK,
                UNKNOWN,
                "The NVMe drives could not be read now",
                observed="not measured",
                expected=f"{len(was.drives)} drives",
            )
        ]
    found = []
    by_serial = {drive.serial or drive.name: drive for drive in now.drives}
    for drive in was.drives:
        current = by_serial.get(drive.serial or drive.name)
        named = f"NVMe {drive.name} (serial {drive.serial or '?'})"
        if current is None:
            found.append(
                _drift(
                    f"{named} is gone since certification",
                    Action.RESEAT_CABLE_RISER,
                    observed="absent",
                    expected="present",
                )
            )
        elif drive.healthy and current.healthy is False:
            found.append(
                _drift(
                    f"{named} fails its SMART health since certification: replace it",
                    Action.DRAIN_RMA,
                    observed="failing",
                    expected="healthy",
                )
            )
        elif (drive.media_errors or 0) < (current.media_errors or 0):
            found.append(
                _drift(
                    f"{named}'s media errors grew to {current.media_errors} "
                    f"from {drive.media_errors or 0}",
                    Action.DRAIN_RMA,
                    observed=str(current.media_errors),
                    expected=str(drive.media_errors or 0),
                )
            )
        elif drive.healthy is not None and current.healthy is None:
            found.append(
                node_finding(
                    CHECK,
                    UNKNOWN,
                    f"{named}'s SMART health could not be read now",
                    observed="not measured",
                    expected="healthy",
                )
            )
    return found


def _services(was: CertifiedHost, now: CertifiedHost) -> list[Finding]:
    states = dict(now.services)
    found = []
    for name, active in was.services:
        if active != "active":
            continue
        state = states.get(name)
        if state is None:
            found.append(
                node_finding(
                    CHECK,
                    UNKNOWN,
                    f"{name}'s state could not be read now",
                    observed="not measured",
                    expected="active",
                )
            )
        elif state != "active":
            found.append(
                _drift(
                    f"{name} stopped since certification ({state})",
                    Action.FIX_SOFTWARE,
                    observed=state,
                    expected="active",
                )
            )
    return found


def _versions(was: CertifiedHost, now: CertifiedHost) -> list[Finding]:
    versions = dict(now.versions)
    found = []
    for component, version in was.versions:
        current = versions.get(component)
        if current is None:
            if version:
                found.append(
                    node_finding(
                        CHECK,
                        UNKNOWN,
                        f"The {component} version could not be read now",
                        observed="not measured",
                        expected=version,
                    )
                )
        elif current != version:
            found.append(
                _drift(
                    f"{component} changed to {current or 'not installed'} from the certified "
                    f"{version or 'not installed'}",
                    Action.FIX_SOFTWARE,
                    observed=current or "not installed",
                    expected=version or "not installed",
                )
            )
    return found


__all__ = ["compare_host"]
