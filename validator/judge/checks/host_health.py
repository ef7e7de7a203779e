"""The host around the GPUs, judged under the policy's ``host:`` section.

CPUs, memory, swap, NVMe drives and their SMART health, mounts, kernel settings,
services and the stack's versions.

No host facts (None: an older agent's, hand-built ones): no finding. A part that was
not read is UNKNOWN, required only where the policy (or the node's hardware) asks
for it; a figure nobody states is reported as read (PASS, not required).
"""

from __future__ import annotations

import re
from dataclasses import replace

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import missing, node_finding, prefix_matches, why_not
from validator.judge.host_policy import REFERENCE_MEMORY_SHARE
from validator.judge.policy import Policy
from validator.model import HostFacts, NodeFacts, NvmeDrive, Severity, Unavailable
from validator.model.findings import Finding

PASS, WARN, FAIL, UNKNOWN = Severity.PASS, Severity.WARN, Severity.FAIL, Severity.UNKNOWN
KIB_PER_GIB = 1024 * 1024


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Every host finding of ``facts`` under ``policy`` (none without host facts)."""
    host = facts.host
    if host is None:
        return []
    # A part with nothing to hold it to (no figure from the policy or the reference
    # system) judges nothing: no finding, as a mount no policy names.
    policy = _with_reference(policy, sku)
    rules = policy.host
    found = []
    if rules.cpu_cores is not None or rules.cpu_model is not None:
        found.append(_cpu(host, policy))
    if rules.memory_gib is not None:
        found.append(_memory(host, policy))
    found.append(_swap(host, policy))
    if rules.nvme_count is not None:
        found.append(_nvme_count(host, policy))
    found += _nvme_smart(host, policy)
    found += _mounts(host, policy)
    if rules.kernel_params or rules.sysctl:
        found.append(_kernel_params(host, policy))
    found += _services(host, facts, policy, sku)
    if rules.pins:
        found += _versions(host, policy)
    return found


def _with_reference(policy: Policy, sku: Sku | None) -> Policy:
    """The policy with the reference system's CPUs and memory where it states none."""
    rules = policy.host
    reference = sku.host if sku is not None else None
    if not rules.reference_system or reference is None:
        return policy
    rules = replace(
        rules,
        cpu_model=rules.cpu_model or re.escape(reference.cpu_model),
        cpu_cores=rules.cpu_cores or reference.cpu_cores,
        memory_gib=rules.memory_gib or reference.memory_gib * REFERENCE_MEMORY_SHARE,
    )
    return replace(policy, host=rules)


def _unknown(check_id: str, what: str, value: Unavailable, *, required: bool) -> Finding:
    return node_finding(
        check_id,
        UNKNOWN,
        f"{what} could not be read: {why_not(value)}",
        observed=why_not(value),
        required=required,
    )


def _cpu(host: HostFacts, policy: Policy) -> Finding:
    rules = policy.host
    required = rules.cpu_cores is not None or rules.cpu_model is not None
    gone = missing(host.cpu_model, host.cpu_cores) if rules.cpu_model else missing(host.cpu_cores)
    if gone is not None:
        return _unknown("host.cpu", "The CPUs", gone, required=required)
    model = host.cpu_model if isinstance(host.cpu_model, str) else "unnamed CPU"
    cores, sockets = host.cpu_cores, host.cpu_sockets
    seen = f"{sockets} x {model}, {cores} cores"
    expected = ", ".join(
        part
        for part in (
            f"model matching {rules.cpu_model!r}" if rules.cpu_model else "",
            f">= {rules.cpu_cores} cores" if rules.cpu_cores else "",
        )
        if part
    )
    if rules.cpu_model and re.search(rules.cpu_model, model) is None:
        return node_finding(
            "host.cpu",
            FAIL,
            f"The CPU is {model}, not the policy's {rules.cpu_model!r}",
            observed=seen,
            expected=expected,
        )
    if rules.cpu_cores and isinstance(cores, int) and cores < rules.cpu_cores:
        return node_finding(
            "host.cpu",
            FAIL,
            f"The host shows {cores} CPU cores, fewer than the {rules.cpu_cores} expected: "
            "a socket or cores are missing or disabled",
            observed=seen,
            expected=expected,
        )
    return node_finding(
        "host.cpu",
        PASS,
        f"CPUs: {seen}",
        observed=seen,
        expected=expected or "not stated",
        required=required,
    )


def _memory(host: HostFacts, policy: Policy) -> Finding:
    floor = policy.host.memory_gib
    if isinstance(host.memory_kib, Unavailable):
        return _unknown("host.memory", "The host memory", host.memory_kib, required=bool(floor))
    gib = host.memory_kib / KIB_PER_GIB
    seen = f"{gib:.0f} GiB"
    if floor is not None and gib < floor:
        return node_finding(
            "host.memory",
            FAIL,
            f"The host has {seen} of memory, less than the {floor:g} GiB expected: "
            "DIMMs are missing or failed",
            observed=seen,
            expected=f">= {floor:g} GiB",
        )
    expected = f">= {floor:g} GiB" if floor is not None else "not stated"
    return node_finding(
        "host.memory",
        PASS,
        f"Host memory: {seen}",
        observed=seen,
        expected=expected,
        required=floor is not None,
    )


def _swap(host: HostFacts, policy: Policy) -> Finding:
    allowed = policy.host.swap_allowed
    if isinstance(host.swap_kib, Unavailable):
        return _unknown("host.swap", "Swap", host.swap_kib, required=allowed is False)
    if host.swap_kib == 0 or allowed:
        seen = "none" if host.swap_kib == 0 else f"{host.swap_kib / KIB_PER_GIB:.1f} GiB"
        return node_finding("host.swap", PASS, f"Swap: {seen}", observed=seen)
    seen = f"{host.swap_kib / KIB_PER_GIB:.1f} GiB"
    severity = WARN if allowed is None else FAIL
    return node_finding(
        "host.swap",
        severity,
        f"The host has {seen} of swap: GPU nodes run without it (swapoff -a and remove it "
        "from /etc/fstab, or set host.swap_allowed)",
        observed=seen,
        expected="no swap",
    )


def _nvme_count(host: HostFacts, policy: Policy) -> Finding:
    want = policy.host.nvme_count
    if isinstance(host.nvme, Unavailable):
        return _unknown("host.nvme_count", "The NVMe drives", host.nvme, required=want is not None)
    count = len(host.nvme)
    if want is not None and count < want:
        return node_finding(
            "host.nvme_count",
            FAIL,
            f"{count} NVMe drives found, {want} expected: a drive is missing or not detected",
            observed=str(count),
            expected=f">= {want}",
        )
    return node_finding(
        "host.nvme_count",
        PASS,
        f"{count} NVMe drive{'s' if count != 1 else ''}",
        observed=str(count),
        expected=f">= {want}" if want is not None else "not stated",
        required=want is not None,
    )


def _nvme_smart(host: HostFacts, policy: Policy) -> list[Finding]:
    if isinstance(host.nvme, Unavailable):
        return []
    found = [_drive(drive, policy.host.nvme_wear_warn_percent) for drive in host.nvme]
    return _one_pass(found, "NVMe drives: SMART healthy")


def _one_pass(found: list[Finding], words: str) -> list[Finding]:
    """The findings with their passes made one (a report stays small with ten drives)."""
    passed = [finding for finding in found if finding.severity is PASS]
    if len(passed) < 2:
        return found
    names = ", ".join(finding.observed for finding in passed)
    merged = node_finding(
        passed[0].check,
        PASS,
        f"{len(passed)} {words}: {names}",
        observed=names,
        expected=passed[0].expected,
    )
    return [merged, *(finding for finding in found if finding.severity is not PASS)]


def _drive(drive: NvmeDrive, wear_warn: int) -> Finding:
    named = f"{drive.name} ({drive.model or 'model unknown'}, serial {drive.serial or '?'})"
    smart = drive.smart
    if isinstance(smart, Unavailable):
        return _unknown("host.nvme_smart", f"The SMART health of {named}", smart, required=True)
    faults = []
    if smart.passed is False:
        faults.append("the drive reports its SMART health FAILED")
    if smart.critical_warning:
        faults.append(f"critical warning 0x{smart.critical_warning:02x}")
    if smart.media_errors:
        faults.append(f"{smart.media_errors} media and data integrity errors")
    if smart.percentage_used is not None and smart.percentage_used >= 100:
        faults.append(f"{smart.percentage_used}% of its rated endurance used")
    spare, floor = smart.available_spare, smart.available_spare_threshold
    if spare is not None and floor is not None and spare < floor:
        faults.append(f"available spare {spare}% below its threshold {floor}%")
    seen = (
        f"passed={smart.passed}, critical_warning={smart.critical_warning}, "
        f"media_errors={smart.media_errors}, percentage_used={smart.percentage_used}"
    )
    if faults:
        return node_finding(
            "host.nvme_smart",
            FAIL,
            f"NVMe {named}: {'; '.join(faults)}: replace the drive",
            observed=seen,
            expected="SMART passed, no critical warning, no media errors",
        )
    if smart.percentage_used is not None and smart.percentage_used >= wear_warn:
        return node_finding(
            "host.nvme_smart",
            WARN,
            f"NVMe {named} has used {smart.percentage_used}% of its rated endurance",
            observed=seen,
            expected=f"< {wear_warn}% used",
        )
    if smart.passed is None and smart.critical_warning is None:
        return node_finding(
            "host.nvme_smart",
            UNKNOWN,
            f"smartctl gave no health verdict for NVMe {named}",
            observed=seen,
        )
    return node_finding(
        "host.nvme_smart", PASS, f"NVMe {named}: SMART healthy", observed=drive.name
    )


def _mounts(host: HostFacts, policy: Policy) -> list[Finding]:
    rules = policy.host.mounts
    if not rules:
        return []
    if isinstance(host.mounts, Unavailable):
        return [_unknown("host.mounts", "The mounts", host.mounts, required=True)]
    by_path = {mount.path: mount for mount in host.mounts}
    found = []
    for rule in rules:
        mount = by_path.get(rule.path.rstrip("/") or "/")
        wanted = f"mounted, >= {rule.min_free_gib:g} GiB free"
        if mount is None:
            found.append(
                node_finding(
                    "host.mounts",
                    FAIL,
                    f"{rule.path} is not mounted",
                    observed="not mounted",
                    expected=wanted,
                )
            )
            continue
        free = mount.avail_kib / KIB_PER_GIB
        seen = f"{free:.1f} GiB free of {mount.size_kib / KIB_PER_GIB:.1f} GiB ({mount.source})"
        short = free < rule.min_free_gib
        found.append(
            node_finding(
                "host.mounts",
                FAIL if short else PASS,
                f"{rule.path}: {seen}"
                + (f", less than {rule.min_free_gib:g} GiB" if short else ""),
                observed=seen,
                expected=wanted,
            )
        )
    return found


def _kernel_params(host: HostFacts, policy: Policy) -> Finding:
    params, sysctl = policy.host.kernel_params, policy.host.sysctl
    required = bool(params or sysctl)
    gone = missing(*((host.cmdline,) if params else ()), *((host.sysctl,) if sysctl else ()))
    if gone is not None:
        return _unknown("host.kernel_params", "The kernel settings", gone, required=True)
    wrong = []
    if params and isinstance(host.cmdline, str):
        tokens = dict(token.partition("=")[::2] for token in host.cmdline.split())
        for name, value in params:
            if name not in tokens or (value and tokens[name] != value):
                now = "absent" if name not in tokens else f"{name}={tokens[name]}"
                wrong.append(f"{name}{'=' + value if value else ''} on the command line ({now})")
    if sysctl and not isinstance(host.sysctl, Unavailable):
        values = {setting.name: setting.value for setting in host.sysctl}
        for name, value in sysctl:
            if values.get(name) != value:
                wrong.append(f"{name} = {value} ({values.get(name, 'absent')})")
    expected = ", ".join(
        [f"{n}={v}" if v else n for n, v in params] + [f"{n}={v}" for n, v in sysctl]
    )
    if wrong:
        return node_finding(
            "host.kernel_params",
            FAIL,
            "The kernel is not set as the policy says: " + "; ".join(wrong),
            observed="; ".join(wrong),
            expected=expected,
        )
    return node_finding(
        "host.kernel_params",
        PASS,
        "The kernel settings are as the policy says"
        if required
        else "No kernel setting is named by the policy",
        observed=expected or "none named",
        expected=expected or "none named",
        required=required,
    )


def _fabric_needed(facts: NodeFacts, policy: Policy, sku: Sku | None) -> tuple[bool, str]:
    """Whether the fabric manager must run, as the state family decides it (state.fabric)."""
    if policy.require_fabric_manager is not None:
        return policy.require_fabric_manager, "the policy requires the fabric manager"
    if isinstance(facts.pci_nvswitch_count, int):
        return facts.pci_nvswitch_count > 0, f"{facts.pci_nvswitch_count} NVSwitches on the bus"
    return (sku is not None and sku.nvswitch), "NVSwitch boards"


def _at_pin(pin: str, version: str) -> bool:
    """A package version at its pin: "2.23.4" accepts "2.23.4-1+cuda12.4" (and an epoch)."""
    version = version.partition(":")[2] or version
    if prefix_matches(pin, version.split("-")[0]):
        return True
    # A pin naming more than the version's first part (MOFED's "MLNX_OFED_LINUX-24.10"):
    # at a boundary, so that 2.21.5 never accepts 2.21.50.
    rest = version[len(pin) :] if version.startswith(pin) else None
    return rest is not None and (rest == "" or not rest[0].isalnum())


def _wanted_services(facts: NodeFacts, policy: Policy, sku: Sku | None) -> dict[str, str]:
    """The units the node needs, each with why."""
    if policy.host.services is not None:
        return dict.fromkeys(policy.host.services, "the policy")
    wanted = {}
    if policy.persistence_mode_required:
        wanted["nvidia-persistenced"] = "the policy requires persistence mode"
    fabric, basis = _fabric_needed(facts, policy, sku)
    if fabric:
        wanted["nvidia-fabricmanager"] = basis
    if policy.dcgm_level > 0:
        wanted["nvidia-dcgm"] = "the policy runs DCGM's diagnostic"
    return wanted


def _services(host: HostFacts, facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    wanted = _wanted_services(facts, policy, sku)
    if not wanted:
        return []
    if isinstance(host.services, Unavailable):
        return [_unknown("host.services", "The services", host.services, required=True)]
    states = {state.name: state for state in host.services}
    found = []
    for name, why in wanted.items():
        state = states.get(name)
        active = state.active if state is not None else "not listed"
        seen = active if state is None or state.load == "loaded" else f"{state.load}"
        if active == "active":
            found.append(
                node_finding(
                    "host.services", PASS, f"{name} is running", observed=name, expected="active"
                )
            )
            continue
        found.append(
            node_finding(
                "host.services",
                FAIL,
                f"{name} is not running ({seen}); it is needed: {why} "
                f"(install it and systemctl enable --now {name})",
                observed=seen,
                expected="active",
            )
        )
    return _one_pass(found, "services running")


def _versions(host: HostFacts, policy: Policy) -> list[Finding]:
    pins = dict(policy.host.pins)
    if isinstance(host.versions, Unavailable):
        return [
            _unknown(
                "host.stack_versions", "The stack's versions", host.versions, required=bool(pins)
            )
        ]
    installed = {item.component: item for item in host.versions}
    found = []
    for component, pin in sorted(pins.items()):
        item = installed.get(component)
        if item is None:
            found.append(
                node_finding(
                    "host.stack_versions",
                    UNKNOWN,
                    f"The {component} version was not read",
                    observed="not measured",
                    expected=pin,
                )
            )
            continue
        version = item.version
        if version and _at_pin(pin, version):
            found.append(
                node_finding(
                    "host.stack_versions",
                    PASS,
                    f"{component} {version} ({item.package}) is at the pin",
                    observed=version,
                    expected=pin,
                )
            )
            continue
        seen = version or "not installed"
        found.append(
            node_finding(
                "host.stack_versions",
                FAIL,
                f"{component} is {seen} ({item.package}), not the pinned {pin}: reprovision "
                "(gpuready provision)",
                observed=seen,
                expected=pin,
            )
        )
    if not pins:
        seen = ", ".join(f"{i.component} {i.version}" for i in host.versions if i.version)
        found.append(
            node_finding(
                "host.stack_versions",
                PASS,
                f"Stack versions (not pinned): {seen or 'none installed'}",
                observed=seen or "none installed",
                expected="not pinned",
                required=False,
            )
        )
    return found


__all__ = ["check"]
