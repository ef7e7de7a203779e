"""Drift of GPUDirect RDMA readiness, paired with :mod:`validator.judge.checks.gpudirect`.

Compared with the certificate's optional ``gpudirect`` summary
(:class:`validator.judge.gpudirect_certified.CertifiedGpudirect`):

* the path NICs take to GPU memory: nvidia_peermem (or dma-buf) at certification and
  neither now is drift (the module was unloaded, or a driver update left it out);
* ACS: off at certification and on now is drift (a BIOS reset or update turns it back on);
* each GPU's nearest NIC and its link: any change is drift (a card moved or fell back).

A part the certificate lacks (not measured then) is not compared; a part not measured now
is UNKNOWN, never "as certified". No summary in the certificate, or no facts of the
family now (an older agent), gives no finding at all.
"""

from __future__ import annotations

from validator.drift.drift_helpers import DriftInputs
from validator.judge.checks.finding_helpers import FAIL, PASS, UNKNOWN, node_finding, with_action
from validator.judge.checks.gpudirect import AFFINITY_SOURCE, NCCL_ACS_SOURCE, PEERMEM_SOURCE
from validator.judge.gpudirect_certified import CertifiedGpudirect, certified_gpudirect
from validator.model import Action, CheckFamily, DriftCheck, Finding

FAMILY = CheckFamily.GPUDIRECT
CHECK = DriftCheck.GPUDIRECT.value
_DIRECT = ("nvidia_peermem", "dma-buf")


def compare_gpudirect(inputs: DriftInputs) -> list[Finding]:
    """The peermem path, ACS and each GPU's nearest NIC now against the certificate."""
    was = inputs.cert.gpudirect
    if was is None or inputs.facts.gpudirect is None:
        return []
    now = certified_gpudirect(inputs.facts) or CertifiedGpudirect()
    findings = [_peermem(was, now), _acs(was, now), _affinity(was, now)]
    return [finding for finding in findings if finding is not None]


def _unknown(what: str) -> Finding:
    return node_finding(CHECK, UNKNOWN, f"{what} could not be read now", observed="not measured")


def _peermem(was: CertifiedGpudirect, now: CertifiedGpudirect) -> Finding | None:
    if was.peermem is None:
        return None
    if now.peermem is None:
        return _unknown("How NICs reach GPU memory (nvidia_peermem or dma-buf)")
    if was.peermem in _DIRECT and now.peermem not in _DIRECT:
        finding = node_finding(
            CHECK,
            FAIL,
            f"GPUDirect RDMA went missing: certified with {was.peermem}, now {now.peermem} "
            "(nvidia_peermem is not loaded); modprobe nvidia_peermem",
            observed=now.peermem,
            expected=was.peermem,
        )
        return with_action(finding, Action.FIX_SOFTWARE, PEERMEM_SOURCE)
    return node_finding(
        CHECK, PASS, f"GPUDirect path {now.peermem} as certified", observed=now.peermem
    )


def _acs(was: CertifiedGpudirect, now: CertifiedGpudirect) -> Finding | None:
    if was.acs_enabled is None:
        return None
    if now.acs_enabled is None:
        return _unknown("The PCIe switches' ACS settings")
    if now.acs_enabled and not was.acs_enabled:
        finding = node_finding(
            CHECK,
            FAIL,
            "ACS was turned on at the PCIe switches above the GPUs and NICs since certified "
            "(a BIOS reset or update): disable it in the BIOS",
            observed="ACS enabled",
            expected="ACS disabled",
        )
        return with_action(finding, Action.FIX_BIOS, NCCL_ACS_SOURCE)
    state = "on" if now.acs_enabled else "off"
    return node_finding(CHECK, PASS, f"ACS {state} as certified", observed=f"ACS {state}")


def _affinity(was: CertifiedGpudirect, now: CertifiedGpudirect) -> Finding | None:
    if was.affinity is None:
        return None
    if now.affinity is None:
        return _unknown("The GPU<->NIC topology")
    gone = sorted(set(was.affinity) - set(now.affinity))
    if gone:
        came = sorted(set(now.affinity) - set(was.affinity))
        finding = node_finding(
            CHECK,
            FAIL,
            f"GPU<->NIC affinity changed since certified: was {'; '.join(gone)}, now "
            f"{'; '.join(came) or 'no NIC'}; check the NICs' slots and risers",
            observed="; ".join(came) or "no NIC",
            expected="; ".join(gone),
        )
        return with_action(finding, Action.RESEAT_CABLE_RISER, AFFINITY_SOURCE)
    return node_finding(
        CHECK,
        PASS,
        f"Each GPU's nearest NIC as certified ({len(was.affinity)} GPUs)",
        observed="as certified",
    )


__all__ = ["FAMILY", "compare_gpudirect"]
