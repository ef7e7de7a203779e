"""Drift of the container runtime, paired with :mod:`validator.judge.checks.container`.

Compared with the certificate's ``container`` summary:

* the toolkit's version: gone now (nvidia-ctk not found) or another version is drift;
* the CDI spec: a GPU the spec named at certification that it no longer names (by
  index, or by the UUID of a GPU still in the node) is drift: a container asking for it
  cannot start; a GPU swapped since is the inventory's drift, not the spec's;
* the runtimes: one configured for the GPUs at certification that no longer is, or is
  configured otherwise now, is drift; one newly configured is a WARN.

A certificate without the summary (no toolkit then, or an older certificate) has no
baseline: a toolkit found now is a WARN that does not block, else no finding. Facts
without container facts (an older agent's) give no finding either. What cannot be
read now is UNKNOWN.
"""

from __future__ import annotations

from validator.drift.drift_helpers import DriftInputs
from validator.judge.checks.finding_helpers import FAIL, PASS, UNKNOWN, WARN, node_finding, why_not
from validator.model import (
    CdiSpec,
    CertifiedContainer,
    CheckFamily,
    ContainerFacts,
    DriftCheck,
    Finding,
    NodeFacts,
    Reason,
    Unavailable,
    certified_container,
)

FAMILY = CheckFamily.CONTAINER
REGENERATE = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"


def compare_container(inputs: DriftInputs) -> list[Finding]:
    """The container runtime now against the certificate's summary of it."""
    now = inputs.facts.container
    was = inputs.cert.container
    if now is None:
        return []
    if was is None:
        if not isinstance(now.toolkit_version, str):
            return []
        text = (
            f"NVIDIA Container Toolkit {now.toolkit_version} is present but was not found "
            "when the node was certified"
        )
        return [
            node_finding(
                DriftCheck.CONTAINER_TOOLKIT,
                WARN,
                text,
                observed=now.toolkit_version,
                expected="not in the certificate",
                required=False,
            )
        ]
    found = [_toolkit(was, now)]
    if isinstance(now.toolkit_version, str):
        found += [_cdi(was, now, inputs.facts), _runtimes(was, now)]
    return found


def _toolkit(was: CertifiedContainer, now: ContainerFacts) -> Finding:
    version = now.toolkit_version
    check = DriftCheck.CONTAINER_TOOLKIT
    if isinstance(version, Unavailable) and version.reason is Reason.NOT_SUPPORTED:
        text = f"NVIDIA Container Toolkit {was.toolkit_version} was certified; now it is not found"
        return node_finding(
            check, FAIL, text, observed=why_not(version), expected=was.toolkit_version
        )
    if isinstance(version, Unavailable):
        text = f"The NVIDIA Container Toolkit could not be read now: {why_not(version)}"
        return node_finding(
            check, UNKNOWN, text, observed=why_not(version), expected=was.toolkit_version
        )
    if version != was.toolkit_version:
        text = f"NVIDIA Container Toolkit changed from {was.toolkit_version} to {version}"
        return node_finding(check, FAIL, text, observed=version, expected=was.toolkit_version)
    text = f"NVIDIA Container Toolkit {version} as certified"
    return node_finding(check, PASS, text, observed=version, expected=was.toolkit_version)


def _cdi(was: CertifiedContainer, now: ContainerFacts, facts: NodeFacts) -> Finding:
    check = DriftCheck.CONTAINER_CDI
    spec = now.cdi
    expected = f"{len(was.cdi_indexes)} GPUs named"
    if not isinstance(spec, CdiSpec):
        text = f"The CDI spec could not be read now: {why_not(spec)}"
        return node_finding(check, UNKNOWN, text, observed=why_not(spec), expected=expected)
    present = {gpu.uuid for gpu in facts.gpus if isinstance(gpu.uuid, str)}
    lost = [f"nvidia.com/gpu={i}" for i in was.cdi_indexes if i not in spec.indexes]
    lost += [f"nvidia.com/gpu={u}" for u in was.cdi_uuids if u in present and u not in spec.uuids]
    observed = f"{len(spec.indexes)} GPUs named"
    if lost:
        text = (
            f"The CDI spec lost {', '.join(lost)} since the certificate: a container asking "
            f"for it cannot start; regenerate it: {REGENERATE}"
        )
        return node_finding(check, FAIL, text, observed=observed, expected=expected)
    text = f"The CDI spec names the {len(was.cdi_indexes)} GPUs it named when certified"
    return node_finding(check, PASS, text, observed=observed, expected=expected)


def _runtimes(was: CertifiedContainer, now: ContainerFacts) -> Finding:
    check = DriftCheck.CONTAINER_RUNTIME
    certified = ", ".join(was.runtimes) or "none"
    if isinstance(now.runtimes, Unavailable):
        text = f"The container runtime config could not be read now: {why_not(now.runtimes)}"
        return node_finding(
            check, UNKNOWN, text, observed=why_not(now.runtimes), expected=certified
        )
    summary = certified_container(now)
    current = summary.runtimes if summary is not None else ()
    gone = [r for r in was.runtimes if r not in current]
    added = [r for r in current if r not in was.runtimes]
    observed = ", ".join(current) or "none"
    if gone:
        text = (
            f"The container runtime config changed since the certificate: {'; '.join(gone)} "
            f"is configured no more (now: {observed})"
        )
        return node_finding(check, FAIL, text, observed=observed, expected=certified)
    if added:
        text = f"A container runtime was configured since the certificate: {'; '.join(added)}"
        return node_finding(
            check, WARN, text, observed=observed, expected=certified, required=False
        )
    text = f"The container runtimes are configured as certified: {certified}"
    return node_finding(check, PASS, text, observed=observed, expected=certified)
