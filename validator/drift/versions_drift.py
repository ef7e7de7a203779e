"""Drift of the versions, paired with :mod:`validator.judge.checks.versions`.

The driver, the CUDA driver version, the NVIDIA kernel module, nvcc and cuDNN for the
node, and each GPU's VBIOS.

* A version the certificate lacks (``None``: not measured at certification) has no
  baseline. Absent now as well: nothing to compare, no finding. Present now: a WARN
  (something new appeared).
* A version measured at certification and ``not supported`` now (the tool is gone: no
  nvcc, no cuDNN header) is drift; any other reason it is missing now is UNKNOWN. A
  kernel module and user-space driver that disagree now (NVML's version mismatch) is
  drift: they agreed when the node was certified.
* A VBIOS other than the certified one is drift; unreadable now, UNKNOWN.
"""

from __future__ import annotations

from validator.certificate import Certificate, CertifiedGpu
from validator.drift.drift_helpers import DriftInputs, moved
from validator.judge.checks.finding_helpers import (
    FAIL,
    PASS,
    UNKNOWN,
    WARN,
    node_finding,
    unknown_gpu,
    why_not,
)
from validator.model import (
    CheckFamily,
    DriftCheck,
    Finding,
    GpuFacts,
    Measured,
    NodeFacts,
    NvmlStatus,
    Reason,
    Unavailable,
)

FAMILY = CheckFamily.VERSIONS


def _version(
    check: str, label: str, was: str | None, now: Measured[str], since: str
) -> Finding | None:
    if was is None:
        if isinstance(now, Unavailable):
            return None
        text = f"{label} {now} is present but was not found when the node was certified"
        return node_finding(
            check, WARN, text, observed=now, expected="not in the certificate", required=False
        )
    if isinstance(now, Unavailable) and now.reason is Reason.NOT_SUPPORTED:  # the tool is gone
        severity, observed = FAIL, f"not found: {why_not(now)}"
        text = f"{label} {was} was certified; now it is not found: {why_not(now)}"
    elif isinstance(now, Unavailable):
        severity, observed = UNKNOWN, why_not(now)
        text = f"{label} could not be read now: {why_not(now)}; certified was {was}"
    elif now != was:
        severity, observed = FAIL, now
        text = f"{label} changed from {was} to {now} since the certificate {since}"
    else:
        severity, observed, text = PASS, now, f"{label} {now} as certified"
    return node_finding(check, severity, text, observed=observed, expected=was)


def _mismatch(module: Finding | None, facts: NodeFacts) -> Finding | None:
    """The kernel module's finding; a FAIL when it and the user-space driver disagree now."""
    if facts.nvml_status is not NvmlStatus.DRIVER_MISMATCH:
        return module
    if module is not None and module.severity is FAIL:
        return module  # the module itself changed: that already says it
    loaded = facts.kernel_module_version
    return node_finding(
        DriftCheck.KERNEL_MODULE,
        FAIL,
        f"The loaded NVIDIA kernel module ({loaded}) and the user-space driver "
        f"({facts.driver_version}) differ now (Driver/library version mismatch): "
        "reboot or reload the nvidia kernel modules",
        observed=f"kernel module {loaded}, user space {facts.driver_version}",
        expected=module.expected if module is not None else "the same version",
    )


def _versions(cert: Certificate, facts: NodeFacts) -> list[Finding]:
    since = f"of {cert.issued_at}"
    found = [
        _version(DriftCheck.DRIVER, "Driver", cert.driver_version, facts.driver_version, since),
        _version(
            DriftCheck.CUDA,
            "CUDA driver version",
            cert.cuda_driver_version,
            facts.cuda_driver_version,
            since,
        ),
        _mismatch(
            _version(
                DriftCheck.KERNEL_MODULE,
                "NVIDIA kernel module",
                cert.kernel_module_version,
                facts.kernel_module_version,
                since,
            ),
            facts,
        ),
        _version(DriftCheck.NVCC, "nvcc", cert.nvcc_version, facts.tools.nvcc_version, since),
        _version(DriftCheck.CUDNN, "cuDNN", cert.cudnn_version, facts.tools.cudnn_version, since),
    ]
    return [finding for finding in found if finding is not None]


def _vbios(was: CertifiedGpu, gpu: GpuFacts) -> Finding | None:
    check, before, now = DriftCheck.VBIOS, was.vbios_version, gpu.vbios_version
    if before is None:
        return None
    if isinstance(now, Unavailable):
        return unknown_gpu(check, gpu, "VBIOS version", now, expected=before)
    changed = f"VBIOS changed from {before} to {now}" if now != before else None
    kept = f"VBIOS {now} as certified"
    return moved(check, gpu, changed, kept, observed=now, expected=before)


def compare_versions(inputs: DriftInputs) -> list[Finding]:
    """The node's versions, then each paired GPU's VBIOS."""
    findings = _versions(inputs.cert, inputs.facts)
    findings += [finding for was, gpu in inputs.pairs if (finding := _vbios(was, gpu)) is not None]
    return findings


__all__ = ["FAMILY", "compare_versions"]
