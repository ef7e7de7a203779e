"""Versions: driver, CUDA, kernel module, nvcc, cuDNN, and one VBIOS per model.

A tool fact that is ``Unavailable(NOT_SUPPORTED)`` means the collector looked and the tool
is not installed: that is a measured absence and FAILs where the policy requires the tool.
Any other reason (not measured, no permission, error) is UNKNOWN.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from validator.judge.catalog import Sku
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    driver_silent,
    gpu_list,
    major_minor,
    node_finding,
    prefix_matches,
    readable_gpus,
    why_not,
)
from validator.judge.policy import Policy
from validator.model import Finding, Measured, NodeFacts, NvmlStatus, Reason, Unavailable


def check(facts: NodeFacts, policy: Policy, sku: Sku | None) -> list[Finding]:
    """Judge the software stack's versions against the policy and each other."""
    return [
        _kernel_module(facts),
        _driver(facts, policy),
        _cuda(facts, policy),
        *_nvcc(facts, policy),
        *_cudnn(facts, policy),
        *_vbios(facts),
    ]


def _kernel_module(facts: NodeFacts) -> Finding:
    check_id = "versions.kernel_module"
    module, user = facts.kernel_module_version, facts.driver_version
    module_text = module if isinstance(module, str) else "unknown"
    user_text = user if isinstance(user, str) else "unknown"
    mismatch = facts.nvml_status is NvmlStatus.DRIVER_MISMATCH or (
        isinstance(module, str) and isinstance(user, str) and not _same_version(module, user)
    )
    if mismatch:
        return node_finding(
            check_id,
            FAIL,
            f"Driver/library version mismatch: kernel module {module_text}, user space "
            f"{user_text}: reboot or reload the nvidia kernel modules",
            observed=module_text,
            expected=user_text,
        )
    if isinstance(module, str) and isinstance(user, str):
        return node_finding(
            check_id,
            PASS,
            f"The loaded kernel module and the user-space driver are both {user}",
            observed=module,
            expected=user,
        )
    # NVML refuses to start on a mismatch, so a working NVML already rules one out.
    return node_finding(
        check_id,
        UNKNOWN,
        f"The kernel module ({module_text}) and user-space driver ({user_text}) versions "
        "could not both be read",
        observed=module_text,
        expected=user_text,
        required=False,
    )


def _driver(facts: NodeFacts, policy: Policy) -> Finding:
    check_id = "versions.driver"
    version = facts.driver_version
    if policy.driver_version:
        pin, expected = policy.driver_version, policy.driver_version
    elif policy.driver_branch:
        pin, expected = None, f"branch {policy.driver_branch}"
    else:
        pin, expected = None, "any (no pin)"
    pinned = bool(policy.driver_version or policy.driver_branch)
    if isinstance(version, Unavailable):
        return node_finding(
            check_id,
            UNKNOWN,
            f"The driver version was {_unread(facts, version)}",
            expected=expected,
            required=pinned,
        )
    disagreement = _smi_disagrees(
        check_id, "driver", version, facts.tools.nvidia_smi_driver_version, expected
    )
    if disagreement is not None:
        return disagreement
    if pin is not None:
        ok = version == pin
    elif policy.driver_branch:
        ok = version.split(".")[0] == policy.driver_branch
    else:
        return node_finding(
            check_id,
            PASS,
            f"Driver {version} is installed; the policy pins no driver version",
            observed=version,
            expected=expected,
        )
    if ok:
        return node_finding(
            check_id,
            PASS,
            f"Driver {version} matches the policy ({expected})",
            observed=version,
            expected=expected,
        )
    return node_finding(
        check_id,
        FAIL,
        f"Driver {version} is installed but the policy pins {expected}; run gpuready "
        "provision to install the pinned driver",
        observed=version,
        expected=expected,
    )


def _cuda(facts: NodeFacts, policy: Policy) -> Finding:
    check_id = "versions.cuda"
    version = facts.cuda_driver_version
    expected = f">= {policy.cuda_version}" if policy.cuda_version else "any (no pin)"
    if isinstance(version, Unavailable):
        return node_finding(
            check_id,
            UNKNOWN,
            f"The CUDA version the driver supports was {_unread(facts, version)}",
            expected=expected,
            required=policy.cuda_version is not None,
        )
    disagreement = _smi_disagrees(
        check_id, "CUDA", version, facts.tools.nvidia_smi_cuda_version, expected
    )
    if disagreement is not None:
        return disagreement
    if policy.cuda_version is None:
        return node_finding(
            check_id,
            PASS,
            f"The driver supports CUDA {version}; the policy sets no CUDA floor",
            observed=version,
            expected=expected,
        )
    have, want = major_minor(version), major_minor(policy.cuda_version)
    if have is None or want is None:
        return node_finding(
            check_id,
            UNKNOWN,
            f"The driver's CUDA version {version!r} cannot be compared with "
            f"{policy.cuda_version!r}",
            observed=version,
            expected=expected,
        )
    if have >= want:
        return node_finding(
            check_id,
            PASS,
            f"The driver supports CUDA {version}; the policy needs at least {policy.cuda_version}",
            observed=version,
            expected=expected,
        )
    return node_finding(
        check_id,
        FAIL,
        f"The driver supports CUDA {version} only, but the policy needs at least "
        f"{policy.cuda_version}; install a newer driver",
        observed=version,
        expected=expected,
    )


def _unread(facts: NodeFacts, value: Unavailable) -> str:
    """Why a driver-side version is missing; short when NVML itself failed."""
    return driver_silent(facts) or f"not read: {why_not(value)}"


def _same_version(one: str, other: str) -> bool:
    # nvidia-smi may print fewer components ("550.54" after a mismatch, for 550.54.15).
    return prefix_matches(one, other) or prefix_matches(other, one)


def _smi_disagrees(
    check_id: str, what: str, nvml: str, smi: Measured[str], expected: str
) -> Finding | None:
    """FAIL when nvidia-smi printed another version than NVML gave: two drivers answer."""
    if isinstance(smi, Unavailable) or _same_version(nvml, smi):
        return None
    return node_finding(
        check_id,
        FAIL,
        f"NVML reports {what} {nvml} but nvidia-smi prints {smi}: two user-space driver "
        "libraries answer on this node (check ldconfig -p | grep libnvidia-ml and "
        "LD_LIBRARY_PATH), or the capture mixes outputs of different installs",
        observed=f"NVML {nvml}, nvidia-smi {smi}",
        expected=expected,
    )


def _absent(value: Unavailable) -> bool:
    return value.reason is Reason.NOT_SUPPORTED


def _pinned_tool(
    check_id: str,
    name: str,
    version: Measured[str],
    pin: str | None,
    require: bool,
    install: str,
    absent_name: str = "",
) -> Finding:
    """The presence-and-pin finding for a tool the policy may require or pin (nvcc, cuDNN).

    Args:
        check_id: the check, e.g. "versions.nvcc".
        name: the tool as messages name it ("nvcc", "cuDNN").
        version: what the collector found.
        pin: the policy's version prefix, if any.
        require: whether the policy requires the tool even without a pin.
        install: how to install it, for the FAIL message ("install cuDNN").
        absent_name: how to name it when it is missing, when not just ``name``.
    """
    expected = pin or ("installed" if require else "any")
    required = require or pin is not None
    if isinstance(version, Unavailable):
        if _absent(version) and required:
            return node_finding(
                check_id,
                FAIL,
                f"{absent_name or name} is not installed ({version.detail or 'not found'}); "
                f"run gpuready provision or {install}",
                observed="not installed",
                expected=expected,
            )
        if _absent(version):
            return node_finding(
                check_id,
                PASS,
                f"{name} is not installed, and the policy does not require it",
                observed="not installed",
                expected=expected,
                required=False,
            )
        return node_finding(
            check_id,
            UNKNOWN,
            f"The {name} version could not be read: {why_not(version)}",
            expected=expected,
            required=required,
        )
    if pin and not prefix_matches(pin, version):
        return node_finding(
            check_id,
            FAIL,
            f"{name} {version} is installed but the policy pins {pin}",
            observed=version,
            expected=expected,
        )
    matching = f", matching the pin {pin}" if pin else ""
    return node_finding(
        check_id,
        PASS,
        f"{name} {version} is installed{matching}",
        observed=version,
        expected=expected,
    )


def _nvcc(facts: NodeFacts, policy: Policy) -> list[Finding]:
    version = facts.tools.nvcc_version
    first = _pinned_tool(
        "versions.nvcc",
        "nvcc",
        version,
        policy.nvcc_version,
        policy.require_nvcc,
        "install the CUDA toolkit",
        absent_name="nvcc (the CUDA toolkit)",
    )
    if isinstance(version, Unavailable):
        return [first]
    return [first, _nvcc_vs_driver(facts, version)]


def _nvcc_vs_driver(facts: NodeFacts, nvcc: str) -> Finding:
    check_id = "versions.nvcc_driver"
    driver_cuda = facts.cuda_driver_version
    if isinstance(driver_cuda, Unavailable):
        return node_finding(
            check_id,
            UNKNOWN,
            f"nvcc {nvcc} cannot be compared with the driver's CUDA version, which was "
            f"{_unread(facts, driver_cuda)}",
            observed=nvcc,
        )
    have, limit = major_minor(nvcc), major_minor(driver_cuda)
    if have is None or limit is None:
        return node_finding(
            check_id,
            UNKNOWN,
            f"nvcc {nvcc!r} cannot be compared with the driver's CUDA {driver_cuda!r}",
            observed=nvcc,
            expected=f"<= {driver_cuda}",
        )
    if have > limit:
        return node_finding(
            check_id,
            FAIL,
            f"nvcc {nvcc} is newer than the CUDA {driver_cuda} the driver supports; programs "
            "it builds will not run: upgrade the driver or install an older toolkit",
            observed=nvcc,
            expected=f"<= {driver_cuda}",
        )
    return node_finding(
        check_id,
        PASS,
        f"nvcc {nvcc} is within the CUDA {driver_cuda} the driver supports",
        observed=nvcc,
        expected=f"<= {driver_cuda}",
    )


def _cudnn(facts: NodeFacts, policy: Policy) -> list[Finding]:
    version = facts.tools.cudnn_version
    first = _pinned_tool(
        "versions.cudnn",
        "cuDNN",
        version,
        policy.cudnn_version,
        policy.require_cudnn,
        "install cuDNN",
    )
    if isinstance(version, Unavailable):
        return [first]
    return [first, _cudnn_cuda(facts, version)]


def _cudnn_cuda(facts: NodeFacts, cudnn: str) -> Finding:
    check_id = "versions.cudnn_cuda"
    built_for = facts.tools.cudnn_cuda_major
    if isinstance(built_for, Unavailable):
        return node_finding(
            check_id,
            UNKNOWN,
            f"The CUDA major version cuDNN {cudnn} was built for is unknown: {why_not(built_for)}",
            required=False,
        )
    nvcc, driver_cuda = facts.tools.nvcc_version, facts.cuda_driver_version
    if isinstance(nvcc, str) and major_minor(nvcc) is not None:
        against, what = major_minor(nvcc), f"nvcc {nvcc}"
    elif isinstance(driver_cuda, str) and major_minor(driver_cuda) is not None:
        against, what = major_minor(driver_cuda), f"the driver's CUDA {driver_cuda}"
    else:
        return node_finding(
            check_id,
            UNKNOWN,
            f"cuDNN {cudnn} is built for CUDA {built_for}, but neither nvcc nor the driver "
            "gave a CUDA version to compare with",
            observed=built_for,
            required=False,
        )
    major = against[0] if against else 0
    if built_for == major:
        return node_finding(
            check_id,
            PASS,
            f"cuDNN {cudnn} is built for CUDA {built_for}, matching {what}",
            observed=built_for,
            expected=major,
        )
    return node_finding(
        check_id,
        FAIL,
        f"cuDNN {cudnn} is built for CUDA {built_for} but {what} is CUDA {major}; install the "
        f"cuDNN build for CUDA {major}",
        observed=built_for,
        expected=major,
    )


def _vbios(facts: NodeFacts) -> list[Finding]:
    check_id = "versions.vbios"
    by_model: dict[str, dict[int, str]] = defaultdict(dict)
    unread: list[int] = []
    for gpu in readable_gpus(facts):
        if not isinstance(gpu.vbios_version, str):
            unread.append(gpu.index)
            continue
        model = gpu.name if isinstance(gpu.name, str) else "unknown model"
        by_model[model][gpu.index] = gpu.vbios_version
    findings: list[Finding] = []
    if unread:
        findings.append(
            node_finding(
                check_id,
                UNKNOWN,
                f"The VBIOS version of {gpu_list(unread)} could not be read",
                required=False,
            )
        )
    for model, versions in sorted(by_model.items()):
        counts = Counter(versions.values())
        common, _ = counts.most_common(1)[0]
        odd = sorted(i for i, v in versions.items() if v != common)
        if odd:
            odd_versions = ", ".join(sorted({versions[i] for i in odd}))
            findings.append(
                node_finding(
                    check_id,
                    WARN,
                    f"{gpu_list(odd)} run VBIOS {odd_versions} while the other "
                    f"{len(versions) - len(odd)} {model} GPUs run {common}; flash them to one "
                    "version",
                    observed=odd_versions,
                    expected=common,
                )
            )
        else:
            findings.append(
                node_finding(
                    check_id,
                    PASS,
                    f"All {len(versions)} {model} GPUs run VBIOS {common}",
                    observed=common,
                    expected=common,
                )
            )
    return findings
