"""Helpers shared by the check families: building findings, picking GPUs, formatting."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import fields, replace
from typing import Protocol

from validator.judge.catalog import Sku
from validator.judge.policy import Policy
from validator.model import (
    Action,
    Finding,
    GpuFacts,
    GpuStatus,
    KeptPerObject,
    Measured,
    NodeFacts,
    NvmlStatus,
    Reason,
    Severity,
    Unavailable,
)

CheckFn = Callable[[NodeFacts, Policy, "Sku | None"], list[Finding]]

PASS = Severity.PASS
WARN = Severity.WARN
FAIL = Severity.FAIL
UNKNOWN = Severity.UNKNOWN


class GpuRef(Protocol):
    """What names a GPU in a finding: its facts now, its burn-in, or its certificate entry."""

    @property
    def index(self) -> int:
        """The GPU's index on its node."""
        ...

    @property
    def uuid(self) -> Measured[str] | None:
        """Its UUID; unavailable (or None) when it could not be read."""
        ...


def uuid_of(gpu: GpuRef) -> str | None:
    """The GPU's UUID, where it was read."""
    return gpu.uuid if isinstance(gpu.uuid, str) else None


def gpu_finding(
    check: str,
    severity: Severity,
    gpu: GpuRef | None,
    message: str,
    *,
    observed: object = "",
    expected: object = "",
    required: bool = True,
) -> Finding:
    """A finding about one GPU; about the node as a whole when ``gpu`` is None."""
    # Made at once, never as a node finding then replaced with the GPU: a node's checks
    # make a hundred and more, and dataclasses.replace costs twice the making.
    return Finding(
        check=check,
        severity=severity,
        message=message,
        observed=str(observed),
        expected=str(expected),
        gpu_index=None if gpu is None else gpu.index,
        gpu_uuid=None if gpu is None else uuid_of(gpu),
        required=required,
    )


def node_finding(
    check: str,
    severity: Severity,
    message: str,
    *,
    observed: object = "",
    expected: object = "",
    required: bool = True,
) -> Finding:
    """A finding about the node as a whole."""
    return gpu_finding(
        check, severity, None, message, observed=observed, expected=expected, required=required
    )


def with_action(finding: Finding, action: Action, source: str) -> Finding:
    """``finding`` saying what to do about it (``action``) and why (``source``)."""
    return replace(finding, action=action, action_source=source)


def why_not(value: Unavailable) -> str:
    """Why a value is missing, as one flat phrase: "not supported", "error: NVML error 999".

    Findings put this after a colon rather than in parentheses: the detail often carries
    parentheses of its own, and nested ones read badly.
    """
    text = value.reason.value.replace("_", " ")
    return f"{text}: {value.detail}" if value.detail else text


def unknown_gpu(
    check: str,
    gpu: GpuFacts,
    what: str,
    value: Unavailable,
    *,
    expected: object = "",
    required: bool = True,
) -> Finding:
    """UNKNOWN for a GPU whose input could not be read: says what and why."""
    return gpu_finding(
        check,
        UNKNOWN,
        gpu,
        f"GPU {gpu.index} {what} could not be read, so it cannot be judged: {why_not(value)}",
        observed=value,
        expected=expected,
        required=required,
    )


def unknown_sku(check: str, what: str, *, required: bool = True) -> Finding:
    """UNKNOWN for a check that needs the SKU when the GPU model is not in the catalog."""
    return node_finding(
        check,
        UNKNOWN,
        f"{what} cannot be judged without a known GPU model (see inventory.sku)",
        required=required,
    )


_STATUS_FIELDS = ("index", "status", "status_detail")
# Named once: every check family asks each GPU's state, for every node of a fleet.
_READING_FIELDS = tuple(f.name for f in fields(GpuFacts) if f.name not in _STATUS_FIELDS)


# Every check family asks each GPU's state (80 times for an 8-GPU node): worked out
# once per GPU object, while it lives.
_STATES: KeptPerObject[GpuFacts, tuple[GpuStatus, str]] = KeptPerObject()


def gpu_state(gpu: GpuFacts) -> tuple[GpuStatus, str]:
    """Whether a GPU answered, from its readings as well as the status the collector gave.

    A reading that says the GPU is lost means it is lost, whatever the status says (a
    capture marks only the cells nvidia-smi could not fill); a GPU none of whose readings
    succeeded did not answer, however many handles NVML counted.

    Returns:
        The status and a detail saying why.
    """
    state = _STATES.get(gpu)
    if state is None:
        state = _state(gpu)
        _STATES.keep(gpu, state)
    return state


def _state(gpu: GpuFacts) -> tuple[GpuStatus, str]:
    if gpu.status is not GpuStatus.OK:
        return gpu.status, gpu.status_detail
    values = [getattr(gpu, name) for name in _READING_FIELDS]
    for value in values:
        if isinstance(value, Unavailable) and value.reason is Reason.GPU_LOST:
            return GpuStatus.LOST, value.detail or "a reading said the GPU is lost"
    if all(isinstance(value, Unavailable) for value in values):
        return GpuStatus.ERROR, "none of its readings succeeded"
    return GpuStatus.OK, ""


def readable_gpus(facts: NodeFacts) -> list[GpuFacts]:
    """GPUs that answered: lost or unreadable ones are reported once, by inventory."""
    return [gpu for gpu in facts.gpus if gpu_state(gpu)[0] is GpuStatus.OK]


def missing(*values: Measured[object]) -> Unavailable | None:
    """The first of ``values`` that was not measured, if any."""
    for value in values:
        if isinstance(value, Unavailable):
            return value
    return None


def watts(value: float) -> str:
    """700 W, 310.5 W."""
    return f"{value:g} W"


def gpu_list(indexes: Iterable[int]) -> str:
    """GPU 3 / GPUs 1, 4, 6."""
    items = sorted(set(indexes))
    if len(items) == 1:
        return f"GPU {items[0]}"
    return "GPUs " + ", ".join(str(i) for i in items)


def by_check(
    findings: Iterable[Finding],
    *,
    prefix: str = "",
    gpus: Callable[[Iterable[int]], str] = gpu_list,
) -> str:
    """The checks of ``findings`` in their order, each with its GPUs: "power (GPU 3), xid".

    Args:
        findings: the findings to name (the failed ones, say).
        prefix: taken off each check id ("drift." gives "power_limit").
        gpus: how one check's GPU indexes are written; :func:`gpu_list` by default.
    """
    indexes: dict[str, list[int]] = {}
    for finding in findings:
        named = indexes.setdefault(finding.check.removeprefix(prefix), [])
        if finding.gpu_index is not None:
            named.append(finding.gpu_index)
    return ", ".join(
        f"{name} ({gpus(found)})" if found else name for name, found in indexes.items()
    )


def version_tuple(text: str) -> tuple[int, ...] | None:
    """(12, 4, 131) from "12.4.131"; None when a component is not a number."""
    parts = text.strip().split(".")
    if not all(part.isdigit() for part in parts):
        return None
    return tuple(int(part) for part in parts)


def prefix_matches(pin: str, version: str) -> bool:
    """True when ``version`` starts with every component of ``pin`` ("12.4" ~ "12.4.131")."""
    want = version_tuple(pin)
    have = version_tuple(version)
    if want is None or have is None:
        return pin == version
    return have[: len(want)] == want


def major_minor(text: str) -> tuple[int, int] | None:
    """(12, 4) from "12.4" or "12.4.131"; None when unparsable."""
    parts = version_tuple(text)
    if parts is None:
        return None
    return (parts[0], parts[1] if len(parts) > 1 else 0)


_NVML_PROBLEMS = {
    NvmlStatus.LIBRARY_NOT_FOUND: (
        "no usable NVIDIA driver on this host",
        "libnvidia-ml.so.1 not found",
    ),
    NvmlStatus.DRIVER_NOT_LOADED: (
        "the NVIDIA driver is installed but its kernel module is not loaded",
        "Driver Not Loaded",
    ),
    NvmlStatus.NO_PERMISSION: (
        "no permission to query the NVIDIA driver on this host",
        "run as root or add the user to the video group",
    ),
    NvmlStatus.ERROR: ("the NVIDIA driver could not be queried on this host", "NVML error"),
    NvmlStatus.NOT_MEASURED: (
        "no GPU facts were collected from this host",
        "the source holds no NVML or nvidia-smi output",
    ),
    NvmlStatus.DRIVER_MISMATCH: (
        "the NVIDIA kernel module and user-space driver differ",
        "Driver/library version mismatch",
    ),
    NvmlStatus.NO_DEVICES: ("the NVIDIA driver found no GPU on this host", "no devices"),
}


# What to do when NVML could not start, by why, whatever words the library gave: the
# advice and its action. Installed and not loaded is the usual state after a driver install
# and before its reboot; Debian's own packages name the module nvidia-current.
_NVML_FIXES = {
    NvmlStatus.DRIVER_NOT_LOADED: (
        "reboot (a driver install waits for it), or load the module now: modprobe nvidia "
        "(nvidia-current with Debian's own driver packages)",
        Action.REBOOT,
    ),
    NvmlStatus.LIBRARY_NOT_FOUND: (
        "install the NVIDIA driver (gpuready provision)",
        Action.FIX_SOFTWARE,
    ),
    NvmlStatus.NO_PERMISSION: ("run gpuready as root", Action.FIX_SOFTWARE),
    NvmlStatus.DRIVER_MISMATCH: (
        "reboot: the loaded kernel module is not the installed driver's (an upgrade waits "
        "for its reboot)",
        Action.REBOOT,
    ),
}


def nvml_fix(facts: NodeFacts) -> tuple[str, Action] | None:
    """What to do about a driver NVML could not use, and its action.

    None when NVML answered, or when nothing better than asking again is known.
    """
    return _NVML_FIXES.get(facts.nvml_status)


def follow_driver(finding: Finding, facts: NodeFacts) -> Finding:
    """``finding`` (left unjudged because the driver did not answer) with the driver's fix.

    A version or a count the driver could not give is fixed by fixing the driver, not by
    running the check again.
    """
    fix = nvml_fix(facts)
    if fix is None or finding.severity is not UNKNOWN:
        return finding
    return with_action(finding, fix[1], f"gpuready: the driver: {fix[0]}")


# NVML states in which no GPU could be inspected at all. A version mismatch is not one:
# it is a finding of its own (the kernel module and the user-space driver differ).
NOTHING_TO_JUDGE = frozenset(
    {
        NvmlStatus.LIBRARY_NOT_FOUND,
        NvmlStatus.DRIVER_NOT_LOADED,
        NvmlStatus.NO_PERMISSION,
        NvmlStatus.ERROR,
        NvmlStatus.NOT_MEASURED,
    }
)


def nothing_to_judge(facts: NodeFacts) -> bool:
    """True when no GPU is in sight and no driver can be asked: there is nothing to judge.

    A verdict on the tools around the GPUs (a missing cuDNN, say) would then only
    hide the one thing to say.
    """
    pci_gpus = facts.pci_gpu_count if isinstance(facts.pci_gpu_count, int) else 0
    return facts.nvml_status in NOTHING_TO_JUDGE and not facts.gpus and pci_gpus == 0


def nothing_to_certify(facts: NodeFacts) -> str:
    """The one line for a node with nothing to judge (:func:`nothing_to_judge`).

    Where the PCI bus was read and shows no NVIDIA GPU, that is the cause; the driver's
    state follows it. A remote host's facts say it as the first-run check says it here.
    """
    problem = nvml_problem(facts) or facts.nvml_status.value
    if isinstance(facts.pci_gpu_count, int) and facts.pci_gpu_count == 0:
        return f"no NVIDIA GPU on the PCI bus: nothing to certify ({problem})"
    return f"{problem}; no NVIDIA GPU found: nothing to certify"


def driver_silent(facts: NodeFacts) -> str | None:
    """A short reason for a driver-side version that NVML itself failed to give, else None.

    When NVML could not start, inventory.driver (or versions.kernel_module, on a mismatch)
    already says why at length; the per-version checks say only this.
    """
    if facts.nvml_status in (NvmlStatus.OK, NvmlStatus.NO_DEVICES):
        return None
    return "not read: the driver did not answer"


def nvml_problem(facts: NodeFacts) -> str | None:
    """One phrase saying why the driver could not be used, or None when NVML answered."""
    if facts.nvml_status is NvmlStatus.OK:
        return None
    text, default_detail = _NVML_PROBLEMS[facts.nvml_status]
    return f"{text} ({facts.nvml_detail or default_detail})"
