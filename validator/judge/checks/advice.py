"""Advice that can change the outcome: "run it again" only where a rerun can help.

A rerun helps only where the fault was transient: a reading that failed this once, a
GPU that was busy, a host that did not answer, an Xid the application caused. Those
causes are tagged here (:data:`TRANSIENT_CHECKS` for a check's default row,
:data:`TRANSIENT_SOURCES` for the sources the checks set themselves), and
:func:`advise` gives every other "run it again" the step that helps instead:

- the driver did not answer: install or load it (the driver's own fix);
- a capture lacks what the check needs: which file to capture, and the command that
  makes it (the files of ``validator.node.capture.capture_replay``'s table; a sysfs
  tree the family reads first is named first, recorded by ``gpuready capture``, the
  shell command's file after it); running certify on the same bundle again can never
  change it;
- nothing was asked for (``--burn 0``, no ``--interconnect``): measure it;
- a Python package or library is missing: install it;
- a reading this GPU or driver does not give: measure it the way the finding says;
- a lifetime ECC count: the GPU's row remap or page retirement finding's step, where
  there is one; the count itself never clears, so no rerun changes it.
"""

from __future__ import annotations

from dataclasses import replace

from validator.judge.actions import DEFAULT_SOURCE
from validator.judge.checks.finding_helpers import follow_driver, with_action
from validator.model import Action, Finding, NodeFacts, Severity

# Check ids whose default "run it again" (validator.judge.actions.RULES) is for a
# transient fault: a glitch in a reading, a host that did not answer, a warning whose
# cause is usually the workload (corrected ECC, an application's Xid, a throttle of
# unknown reason), a figure a busy GPU pulled down.
TRANSIENT_CHECKS = frozenset(
    {
        "inventory.readings_plausible",
        "inventory.figures_plausible",
        "transport.reach",
        "transport.deadline",
        "thermal.throttle",
        "errors.ecc_corrected_volatile",
        "errors.xid",
        "errors.sxid",
        "burn.errors",
        "burn.xid",
    }
)
# The sources the checks set with their own "run it again", each a transient cause: a
# measurement or a read that failed this once, a busy GPU, a burn cut short, a DCGM test
# that was skipped or whose GPU is not this node's, an Xid or SXid NVIDIA's catalogs
# say is the application's (restart it), informational or not fatal, an ECC line of the
# kernel's while NVML counts no uncorrected error.
TRANSIENT_SOURCES = (
    "gpuready: the interconnect could not be measured",
    "gpuready: the GPU was busy when measured",
    "gpuready: the link state or counters could not be read",
    "gpuready: the replay counter was not read around the burn",
    "gpuready: DCGM test",
    "gpuready: transient:",
    "NVIDIA Xid catalog",
    "NVIDIA SXid catalog",
    "not in NVIDIA's Xid catalog",
    "NVIDIA Fabric Manager User Guide",
    "NVML shows no uncorrected ECC error",
)
# A reading that failed (Unavailable's words as findings show them): asked again, it
# may answer. The other reasons (not supported, not measured, no permission) stay.
_FAILED_READING = ("error", "gpu lost")

# What a capture must hold for a check, by check id prefix (the longest wins), as
# (file in the bundle, the command that makes it). The same names and commands as
# capture_replay's BUNDLE table (tests/judge/test_advice.py holds them together).
SMI_XML = ("nvidia-smi-q.xml", "nvidia-smi -q -x > nvidia-smi-q.xml")
CAPTURE_FILES: dict[str, tuple[str, str]] = {
    "": SMI_XML,  # every per-GPU reading: state, memory, power, thermal, PCIe, ECC
    "versions.driver": ("nvidia-smi.txt", "nvidia-smi > nvidia-smi.txt"),
    "versions.cuda": ("nvidia-smi.txt", "nvidia-smi > nvidia-smi.txt"),
    "versions.nvcc": ("nvcc.txt", "nvcc --version > nvcc.txt"),
    "versions.cudnn": (
        "cudnn-packages.txt",
        "dpkg-query -W -f '${Package} ${Version}\\n' '*cudnn*' > cudnn-packages.txt",
    ),
    "versions.kernel_module": (
        "proc-driver-version.txt",
        "cat /proc/driver/nvidia/version > proc-driver-version.txt",
    ),
    "inventory.gpu_count": ("lspci-n.txt", "lspci -n > lspci-n.txt"),
    "errors.xid": ("dmesg.txt", "dmesg > dmesg.txt"),
    "errors.sxid": ("dmesg.txt", "dmesg > dmesg.txt"),
    "errors.kernel_faults": ("dmesg.txt", "dmesg > dmesg.txt"),
    "nvlink.links": ("nvidia-smi-nvlink-s.txt", "nvidia-smi nvlink -s > nvidia-smi-nvlink-s.txt"),
    "nvlink.errors": ("nvidia-smi-nvlink-e.txt", "nvidia-smi nvlink -e > nvidia-smi-nvlink-e.txt"),
    "dcgm.": ("dcgmi-diag.json", "dcgmi diag -r 2 -j > dcgmi-diag.json"),
    "interconnect.": ("nvbandwidth.json", "nvbandwidth -j > nvbandwidth.json"),
    "network.": ("ibstat.txt", "ibstat > ibstat.txt"),  # after the tree: RECORDED_TREES
    "network.link_flaps": ("dmesg.txt", "dmesg > dmesg.txt"),
    "gpudirect.peermem": ("proc-modules.txt", "cat /proc/modules > proc-modules.txt"),
    "gpudirect.nic_affinity": (
        "nvidia-smi-topo.txt",
        "nvidia-smi topo -m > nvidia-smi-topo.txt",
    ),
    "gpudirect.acs": ("lspci-vvv.txt", "lspci -vvv > lspci-vvv.txt"),
    "gpudirect.iommu": (
        "iommu-sysfs.txt",
        "awk -v OFS='\\t' '{print FILENAME, $0}' /sys/kernel/iommu_groups/*/type > iommu-sysfs.txt",
    ),
    "container.toolkit": (
        "nvidia-ctk-version.txt",
        "nvidia-ctk --version > nvidia-ctk-version.txt",
    ),
    "container.cdi": ("nvidia-ctk-cdi-list.txt", "nvidia-ctk cdi list > nvidia-ctk-cdi-list.txt"),
    "container.runtime": ("docker-daemon.json", "cat /etc/docker/daemon.json > docker-daemon.json"),
    "interconnect.all_reduce": (
        "all_reduce_perf.txt",
        "all_reduce_perf -b 8 -e 4G -f 2 -g 8 > all_reduce_perf.txt",
    ),
    # The host family (validator.node.host_probe): each check's first file.
    "host.cpu": ("cpuinfo.txt", "cat /proc/cpuinfo > cpuinfo.txt"),
    "host.memory": ("meminfo.txt", "cat /proc/meminfo > meminfo.txt"),
    "host.swap": ("meminfo.txt", "cat /proc/meminfo > meminfo.txt"),
    "host.nvme_count": (
        "nvme-sysfs.txt",
        "for d in /sys/class/nvme/nvme*; do for f in model serial; do printf '%s\\t%s\\n' "
        '"$d/$f" "$(cat $d/$f)"; done; done > nvme-sysfs.txt',
    ),
    "host.nvme_smart": (
        "smartctl-nvme0.json",
        "smartctl -H -A -j /dev/nvme0 > smartctl-nvme0.json",
    ),
    "host.mounts": ("df.txt", "df -P -k > df.txt"),
    "host.kernel_params": ("proc-cmdline.txt", "cat /proc/cmdline > proc-cmdline.txt"),
    "host.services": (
        "systemctl.txt",
        "systemctl show -p Id -p LoadState -p ActiveState nvidia-persistenced.service "
        "nvidia-fabricmanager.service nvidia-dcgm.service > systemctl.txt",
    ),
    "host.stack_versions": (
        "stack-packages.txt",
        "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' libnccl2 libnccl "
        "datacenter-gpu-manager-4-core datacenter-gpu-manager nvidia-container-toolkit "
        "rdma-core > stack-packages.txt",
    ),
}
# The files read before CAPTURE_FILES' own, by the same prefix: a sysfs tree that no
# one-line shell command records (gpuready capture does), as (file, tree). The
# CAPTURE_FILES row stays the fallback: the weaker file a shell command makes.
RECORDED_TREES: dict[str, tuple[str, str]] = {
    "network.": ("infiniband-sysfs.txt", "/sys/class/infiniband"),
}
CAPTURE_SOURCE = "gpuready: the capture lacks it: capture it on the host"
NO_BURN_IN_CAPTURE = (
    "a capture holds no burn-in: certify the host itself (gpuready certify there; it "
    "burns for 5 minutes by default)"
)
NO_BURN_ASKED = "gpuready: no burn-in was asked for: certify with --burn (5 minutes by default)"
NO_BACKEND = "no burn backend can run"
INSTALL_BACKEND = (
    "gpuready: install what the burn-in needs (the message names it): pip install numpy "
    "for the CPU backend, the CUDA libraries for the GPUs (gpuready provision)"
)
DCGM_AT_LEVEL = "gpuready: run DCGM's diagnostic at the policy's level (certify --dcgm-level)"
NOT_ASKED = "gpuready: not asked for: measure it as the finding says"
LIFETIME_ECC = "errors.ecc_uncorrected_aggregate"
LIVE_MEMORY_CHECKS = ("errors.row_remap", "errors.retired_pages")


def is_transient(finding: Finding) -> bool:
    """Whether ``finding``'s cause is a transient one, so that a rerun can clear it."""
    if finding.check == "dcgm.run":  # dcgmi failed or timed out; not run, or too low a level
        return finding.observed.startswith(_FAILED_READING)
    if finding.action_source == DEFAULT_SOURCE:
        return finding.check in TRANSIENT_CHECKS or finding.observed.startswith(_FAILED_READING)
    return finding.action_source.startswith(TRANSIENT_SOURCES)


def capture_file(check: str) -> tuple[str, str]:
    """The bundle file a check reads, and the command that makes it."""
    prefix = max((p for p in CAPTURE_FILES if check.startswith(p)), key=len)
    return CAPTURE_FILES[prefix]


def capture_advice(check: str) -> tuple[str, str]:
    """What a capture lacking ``check``'s file should do: (the message's words, the source).

    A file only ``gpuready capture`` makes comes first, the shell command's file after it.
    """
    prefix = max((p for p in CAPTURE_FILES if check.startswith(p)), key=len)
    name, command = CAPTURE_FILES[prefix]
    tree = RECORDED_TREES.get(prefix)
    if tree is None:
        how = f"capture {name} on the host: {command} (gpuready capture records it)"
        return how, f"{CAPTURE_SOURCE}: {command}"
    recorded, root = tree
    how = (
        f"capture {recorded} on the host with `gpuready capture DIR` (it records the "
        f"files of {root} the check reads; no one-line shell command does); else "
        f"{name}: {command}"
    )
    return how, f"{CAPTURE_SOURCE}: gpuready capture DIR ({recorded}), else {command}"


def advise(findings: tuple[Finding, ...], facts: NodeFacts) -> list[Finding]:
    """The findings, each "run it again" kept only where its cause is transient."""
    remaps = {
        f.gpu_index: f
        for f in findings
        if f.check in LIVE_MEMORY_CHECKS and f.severity is not Severity.PASS
    }
    return [
        _lifetime_count(finding, remaps.get(finding.gpu_index))
        if finding.check == LIFETIME_ECC and finding.severity is Severity.WARN
        else _instead_of_rerun(finding, facts)
        if finding.action is Action.RERUN
        else finding
        for finding in findings
    ]


def _instead_of_rerun(finding: Finding, facts: NodeFacts) -> Finding:
    """A "run it again" finding with the step that helps, where a rerun would not."""
    driven = follow_driver(finding, facts)
    if driven is not finding:
        return driven
    if facts.source == "capture":
        return _capture_gap(finding)
    step = _step(finding, facts)
    return finding if step is None else with_action(finding, *step)


def _step(finding: Finding, facts: NodeFacts) -> tuple[Action, str] | None:
    """The action and its source that help where a rerun would not; None: a rerun helps."""
    burn = facts.burn
    if finding.check == "burn.run" and burn is None:
        return Action.MEASURE, NO_BURN_ASKED
    if (
        finding.check == "burn.run"
        and burn is not None
        and (burn.error or "").startswith(NO_BACKEND)
    ):
        return Action.FIX_SOFTWARE, INSTALL_BACKEND
    if finding.action_source.startswith("gpuready: measure it"):  # not asked: --interconnect
        return Action.MEASURE, finding.action_source
    if is_transient(finding):
        return None
    if finding.observed.startswith("no permission"):
        return Action.FIX_SOFTWARE, "gpuready: run gpuready as root"
    return Action.MEASURE, DCGM_AT_LEVEL if finding.check == "dcgm.run" else NOT_ASKED


def _capture_gap(finding: Finding) -> Finding:
    """What a capture lacks: the file to capture and its command (no burn-in: the host)."""
    if finding.check.startswith("burn."):
        return replace(
            finding,
            message=f"{finding.message}; {NO_BURN_IN_CAPTURE}",
            action=Action.MEASURE,
            action_source=f"gpuready: {NO_BURN_IN_CAPTURE}",
        )
    if "gpuready capture" in finding.message:  # it says how already (capture it in one go)
        return with_action(finding, Action.MEASURE, CAPTURE_SOURCE)
    how, source = capture_advice(finding.check)
    return replace(
        finding, message=f"{finding.message}; {how}", action=Action.MEASURE, action_source=source
    )


def _lifetime_count(finding: Finding, live: Finding | None) -> Finding:
    """A lifetime uncorrected ECC count: its GPU's remap or retirement step, else none.

    The count never clears, so neither a rerun nor a reset changes it; whether its
    errors still matter is what the row remap (or page retirement) state says, and
    that finding carries the step where one is needed.
    """
    if live is None or live.action is Action.NONE:
        return finding  # the table's NONE: history, nothing to do
    return replace(
        finding,
        action=live.action,
        action_source=f"gpuready: explained by {live.check} ({live.observed})",
    )
