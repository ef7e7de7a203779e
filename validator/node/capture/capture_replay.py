r"""Support bundles: a directory of captured outputs, and the System that replays it.

A bundle is a recording of a host. :data:`BUNDLE` says, file by file, which command's
output or which file's text it holds; ``gpuready capture`` writes one by asking a
:class:`~validator.node.system.System` those very questions (:func:`write_capture`), and
:class:`CaptureSystem` answers them from the files, so ``certify --capture`` reads it
(validator.node.system_facts) as it reads a host.

Any of the files may be present; a file missing from the bundle is a fact
"not measured" (:class:`~validator.node.system.NotRecordedError`), never "passed":

===========================  ==================================================
``nvidia-smi-q.xml``         ``nvidia-smi -q -x`` (preferred for GPU facts)
``nvidia-smi-q.txt``         ``nvidia-smi -q`` (the text found in bug reports)
``nvidia-smi.txt``           ``nvidia-smi`` (banner table, or the error it printed)
``nvcc.txt``                 ``nvcc --version``, nvcc found as the collector finds it
``cudnn_version.h``          the first cuDNN header the collector finds
``cudnn-packages.txt``       ``dpkg-query -W -f '${Package} ${Version}\n' '*cudnn*'``
                             (any dpkg or rpm listing is read)
``rpm-qa.txt``               ``rpm -qa '*cudnn*'`` (a whole ``rpm -qa`` is read too)
``dmesg.txt``                ``dmesg``
``journalctl.txt``           ``journalctl -k -b --no-pager -o short-iso`` (read when
                             ``dmesg.txt`` is missing or shows no line)
``proc-driver-version.txt``  ``/proc/driver/nvidia/version``
``os-release.txt``           ``/etc/os-release``
``uname-r.txt``              ``/proc/sys/kernel/osrelease`` (what ``uname -r`` prints)
``pci-devices.txt``          ``/sys/bus/pci/devices/*/{vendor,class}``, a line a device
``lspci-n.txt``              ``lspci -n`` (stands in for ``pci-devices.txt``)
``nvidia-smi-nvlink-s.txt``  ``nvidia-smi nvlink -s``: each GPU's NVLinks, up with their speed
``nvidia-smi-nvlink-e.txt``  ``nvidia-smi nvlink -e``: each link's CRC, replay, recovery counts
``infiniband-sysfs.txt``     ``/sys/class/infiniband``: each HCA's and port's files the network
                             probe reads, a ``path<TAB>value`` line each (empty: no HCA)
``ibstat.txt``               ``ibstat`` (stands in for ``infiniband-sysfs.txt``)
``ibv_devinfo.txt``          ``ibv_devinfo -v`` (cross-checks firmware, PSID, port state)
``hostname.txt``             the host's name
``meta.json``                what ``gpuready capture`` records: host, time, uptime and
                             where nvcc and the cuDNN header were found
``dcgmi-diag.json``          ``dcgmi diag -r LEVEL -j`` (``capture --dcgm-level N``;
                             meta.json's ``dcgm_level`` says which level ran)
``dcgmi-diag.txt``           ``dcgmi diag -r LEVEL`` as printed (read when there is
                             no ``dcgmi-diag.json``)
``nvbandwidth.json``         ``nvbandwidth -j`` (``capture --interconnect``, where
                             nvbandwidth is on PATH): each GPU's host and HBM
                             copies and the peer matrix (read before the text)
``nvbandwidth.txt``          ``nvbandwidth`` as printed (any version's layout)
``all_reduce_perf.txt``      nccl-tests' ``all_reduce_perf`` as printed: NCCL
                             all-reduce bus bandwidth across the node's GPUs
``nvidia-smi-topo.txt``      ``nvidia-smi topo -m``: each GPU's path to each NIC
``lspci-vvv.txt``            ``lspci -vvv`` (as root): the PCIe switches' ACS bits
``proc-modules.txt``         ``/proc/modules`` (nvidia_peermem, ib_core)
``proc-cmdline.txt``         ``/proc/cmdline`` (the iommu arguments, kernel parameters)
``systemd-detect-virt.txt``  ``systemd-detect-virt --vm``: bare metal or a VM
``iommu-sysfs.txt``          ``path<TAB>value`` lines (as ``awk`` prints them)
                             of ``/sys/kernel/iommu_groups/*/type`` and
                             ``/sys/class/iommu/*``
``cpuinfo.txt``              ``/proc/cpuinfo`` (the host family: CPUs)
``meminfo.txt``              ``/proc/meminfo`` (memory and swap)
``df.txt``                   ``df -P -k`` (mounts and their room)
``sysctl.txt``               ``sysctl -e NAME...`` (the settings host_probe names)
``systemctl.txt``            ``systemctl show -p Id -p LoadState -p ActiveState``
                             of the persistence daemon, fabric manager and DCGM
``stack-packages.txt``       ``dpkg-query -W -f ...`` of NCCL, DCGM, the container
                             toolkit and rdma-core (``stack-rpm.txt``: ``rpm -q``)
``ofed_info.txt``            ``ofed_info -s`` (MOFED, where installed)
``nvme-sysfs.txt``           ``/sys/class/nvme/*/{model,serial}``, a line a file
``smartctl-nvmeN.json``      ``smartctl -H -A -j /dev/nvmeN``, a file a drive
``nvidia-ctk-version.txt``   ``nvidia-ctk --version`` (NVIDIA Container Toolkit)
``nvidia-ctk-cdi-list.txt``  ``nvidia-ctk cdi list``: the GPUs the CDI spec names
``docker-daemon.json``       ``/etc/docker/daemon.json`` (nvidia runtime, CDI)
``containerd-config.toml``   ``/etc/containerd/config.toml`` (nvidia runtime, CDI)
===========================  ==================================================

NVML facts of a bundle come from ``nvidia-smi-q.xml``, else ``nvidia-smi-q.txt``,
else the banner (:attr:`CaptureSystem.reading`); their NVLinks and link error counts,
where the query lacks them, from the two ``nvlink`` files (matched by UUID, else by
index). The files not chosen are not ignored: :meth:`CaptureSystem.conflicts`
compares every view the bundle holds
(driver version, GPU count, names, bus ids, a query cut short; see
:mod:`validator.node.capture.bundle_consistency`). Without ``meta.json`` the
capture time is unknown, so every Xid in the kernel log counts, whatever its
age (fail closed). A file that is there but does not parse is bad input.

The interconnect files come from the tools' own runs (nvbandwidth.json also from
``write_capture(interconnect=True)``): their figures become the node's
:class:`~validator.model.Interconnect`
(:func:`validator.node.capture.recorded_bandwidth.recorded_interconnect`).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fnmatch
import json
import os
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, TypeVar, Union

from validator.error_tree import CaptureError, ReportError
from validator.fields import LoadError, load_json
from validator.files import Folder, remove_stale_temporaries, write_atomic
from validator.limits import (
    KERNEL_LOG_TAIL_BYTES,
    SMALL_FILE_BYTES,
    SMI_QUERY_BYTES,
    TOOL_OUTPUT_BYTES,
    OverLimitError,
    read_bounded,
    read_tail,
    size_text,
)
from validator.model import (
    GpuFacts,
    GpuStatus,
    NvmlStatus,
    Reason,
    SourceConflict,
    Unavailable,
    unreadable_gpu,
)
from validator.node import container_probe as ctr
from validator.node import gpudirect_probe as gdr
from validator.node import host, host_probe, network_probe, system_facts
from validator.node.capture import host_capture, ib_sysfs_record
from validator.node.capture.bundle_agreement import (
    NodeGpus,
    NvLinkBlock,
    dcgm_conflicts,
    kernel_log_conflicts,
    nccl_conflicts,
    nvbandwidth_conflicts,
    nvlink_conflicts,
)
from validator.node.capture.bundle_consistency import (
    BundleView,
    banner_view,
    bundle_conflicts,
    pci_view,
    query_view,
)
from validator.node.capture.gpudirect_record import (
    IOMMU_ROOTS,
    IOMMU_SYSFS,
    iommu_files,
    record_iommu,
)
from validator.node.nvml import DriverReading
from validator.node.parsers.base import ParseError
from validator.node.parsers.cudnn import parse_cudnn_header
from validator.node.parsers.dcgm_diag import parse_dcgm_json, parse_dcgm_text
from validator.node.parsers.ib_sysfs import ROOT as IB_ROOT
from validator.node.parsers.ib_sysfs import parse_tree
from validator.node.parsers.ibstat import parse_ibstat
from validator.node.parsers.ibv_devinfo import parse_ibv_devinfo
from validator.node.parsers.lspci_acs import parse_acs_ports
from validator.node.parsers.nccl_tests import parse_all_reduce
from validator.node.parsers.nvbandwidth import (
    parse_nvbandwidth,
    parse_nvbandwidth_json,
    parse_nvbandwidth_text,
)
from validator.node.parsers.nvcc import parse_nvcc_version
from validator.node.parsers.nvidia_ctk import parse_cdi_list, parse_ctk_version
from validator.node.parsers.nvlink_smi import (
    NvLinkErrorGpu,
    NvLinkErrorReport,
    NvLinkGpu,
    NvLinkStatusReport,
    parse_nvlink_errors,
    parse_nvlink_status,
)
from validator.node.parsers.proc_version import parse_proc_driver_version
from validator.node.parsers.smi_banner import BannerGpu, SmiBanner, parse_banner
from validator.node.parsers.smi_common import SmiQuery, normalize_bus_id
from validator.node.parsers.smi_errors import lost_gpu_bus_ids
from validator.node.parsers.smi_query import parse_smi_query
from validator.node.parsers.smi_topo import parse_topo_matrix
from validator.node.parsers.smi_xml import parse_smi_xml
from validator.node.system import CommandResult, NotRecordedError, System
from validator.node.system_facts import PROC_DRIVER_VERSION

T = TypeVar("T")

SMI_XML = "nvidia-smi-q.xml"
SMI_QUERY = "nvidia-smi-q.txt"
SMI_BANNER = "nvidia-smi.txt"
NVCC = "nvcc.txt"
CUDNN_HEADER = "cudnn_version.h"
CUDNN_PACKAGES = "cudnn-packages.txt"
DMESG = "dmesg.txt"
JOURNAL = "journalctl.txt"
RPM_QA = "rpm-qa.txt"
PROC_VERSION = "proc-driver-version.txt"
OS_RELEASE = "os-release.txt"
UNAME = "uname-r.txt"
HOSTNAME = "hostname.txt"
LSPCI = "lspci-n.txt"
PCI_DEVICES = "pci-devices.txt"
NVLINK_STATUS = "nvidia-smi-nvlink-s.txt"
NVLINK_ERRORS = "nvidia-smi-nvlink-e.txt"
INFINIBAND_SYSFS = ib_sysfs_record.NAME
IBSTAT = "ibstat.txt"
IBV_DEVINFO = "ibv_devinfo.txt"
META = "meta.json"
DCGM_JSON = "dcgmi-diag.json"
DCGM_TEXT = "dcgmi-diag.txt"
NVBANDWIDTH_JSON = "nvbandwidth.json"
NVBANDWIDTH_TEXT = "nvbandwidth.txt"
ALL_REDUCE = "all_reduce_perf.txt"
TOPO = "nvidia-smi-topo.txt"
LSPCI_VVV = "lspci-vvv.txt"
PROC_MODULES = "proc-modules.txt"
PROC_CMDLINE = "proc-cmdline.txt"
DETECT_VIRT = "systemd-detect-virt.txt"

SMI_XML_ARGV = ("nvidia-smi", "-q", "-x")
SMI_QUERY_ARGV = ("nvidia-smi", "-q")
NVCC_ARGV = ("nvcc", "--version")
LSPCI_ARGV = ("lspci", "-n")
NVLINK_STATUS_ARGV = ("nvidia-smi", "nvlink", "-s")
NVLINK_ERRORS_ARGV = ("nvidia-smi", "nvlink", "-e")
NVBANDWIDTH_ARGV = ("nvbandwidth", "-j")
# nvbandwidth's whole default suite: on an 8-GPU HGX some 35 testcases, the peer ones
# over 56 pairs, 3 samples of 512 MiB copies each: minutes; a stuck GPU must not hang.
NVBANDWIDTH_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class BundleFile:
    """One file of a bundle and what on the host it records.

    Attributes:
        name: the file's name in the bundle.
        argv: the command whose output it holds (its program matched by name,
            wherever it was found), or () for a file.
        paths: the file whose text it holds: the first match of these shell
            patterns, in the order the collector looks; () for a command.
        keep_error_text: a failed command's output is still the fact
            (nvidia-smi's "No devices were found").
        check: the parser the text must pass; a text that fails it is bad input.
        record: how ``gpuready capture`` records it, where not by its command or path.
        tree: the root of the sysfs tree it records as ``path<TAB>value`` lines.
    """

    name: str
    argv: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    keep_error_text: bool = False
    check: Callable[[str], object] | None = None
    record: Callable[[System], host_capture.Recorded] | None = None
    tree: str = ""


# The one table: what each bundle file records. The first seven name the files
# that matter most (the message for a folder holding none of the files lists them).
BUNDLE: tuple[BundleFile, ...] = (
    BundleFile(SMI_XML, argv=SMI_XML_ARGV),
    BundleFile(SMI_QUERY, argv=SMI_QUERY_ARGV),
    BundleFile(SMI_BANNER, argv=system_facts.NVIDIA_SMI, keep_error_text=True),
    BundleFile(NVCC, argv=NVCC_ARGV, check=parse_nvcc_version),
    BundleFile(CUDNN_HEADER, paths=system_facts.CUDNN_HEADERS, check=parse_cudnn_header),
    BundleFile(CUDNN_PACKAGES, argv=system_facts.DPKG_CUDNN),
    BundleFile(DMESG, argv=system_facts.DMESG),
    BundleFile(JOURNAL, argv=system_facts.JOURNAL_KERNEL),
    BundleFile(RPM_QA, argv=system_facts.RPM_CUDNN),
    BundleFile(PROC_VERSION, paths=(PROC_DRIVER_VERSION,), check=parse_proc_driver_version),
    BundleFile(OS_RELEASE, paths=(host.OS_RELEASE,)),
    BundleFile(UNAME, paths=(host.KERNEL_RELEASE,)),
    BundleFile(PCI_DEVICES, paths=(host.PCI_DEVICES,)),
    BundleFile(LSPCI, argv=LSPCI_ARGV),
    BundleFile(NVLINK_STATUS, argv=NVLINK_STATUS_ARGV, check=parse_nvlink_status),
    BundleFile(NVLINK_ERRORS, argv=NVLINK_ERRORS_ARGV, check=parse_nvlink_errors),
    BundleFile(INFINIBAND_SYSFS, check=parse_tree),
    BundleFile(IBSTAT, argv=network_probe.IBSTAT, check=parse_ibstat),
    BundleFile(IBV_DEVINFO, argv=network_probe.IBV_DEVINFO, check=parse_ibv_devinfo),
    BundleFile(HOSTNAME),  # System.hostname()
    BundleFile(META),  # hostname(), now(), /proc/uptime and the locations below
    # Written only when asked (capture --dcgm-level): a diagnostic runs for minutes.
    BundleFile(DCGM_JSON, check=parse_dcgm_json),
    BundleFile(DCGM_TEXT, check=parse_dcgm_text),
    # Recorded from the tools' own runs; gpuready measures the interconnect itself.
    BundleFile(NVBANDWIDTH_JSON, check=parse_nvbandwidth_json),
    BundleFile(NVBANDWIDTH_TEXT, check=parse_nvbandwidth_text),
    BundleFile(ALL_REDUCE, check=parse_all_reduce),
    # GPUDirect RDMA readiness (validator.node.gpudirect_probe).
    BundleFile(TOPO, argv=gdr.TOPO_ARGV, check=parse_topo_matrix),
    BundleFile(LSPCI_VVV, argv=gdr.LSPCI_VVV_ARGV, check=parse_acs_ports),
    BundleFile(PROC_MODULES, paths=(gdr.PROC_MODULES,)),
    BundleFile(PROC_CMDLINE, paths=(gdr.PROC_CMDLINE,)),
    BundleFile(DETECT_VIRT, argv=gdr.DETECT_VIRT_ARGV, keep_error_text=True),
    BundleFile(IOMMU_SYSFS),  # gpudirect_record: the IOMMU groups' types and units
    # The host around the GPUs (validator.node.host_probe).
    BundleFile("cpuinfo.txt", paths=(host_probe.CPUINFO,)),
    BundleFile("meminfo.txt", paths=(host_probe.MEMINFO,)),
    BundleFile("df.txt", argv=host_probe.DF, keep_error_text=True),
    BundleFile("sysctl.txt", argv=host_probe.SYSCTL, keep_error_text=True),
    BundleFile("systemctl.txt", argv=host_probe.SYSTEMCTL),
    BundleFile("stack-packages.txt", argv=host_probe.DPKG_STACK, keep_error_text=True),
    BundleFile("stack-rpm.txt", argv=host_probe.RPM_STACK, keep_error_text=True),
    BundleFile("ofed_info.txt", argv=host_probe.OFED_INFO, record=host_capture.record_ofed_info),
    BundleFile(host_capture.NVME_TREE, tree=host_probe.NVME_ROOT,
               record=host_capture.record_nvme_tree),
    *(
        BundleFile(host_capture.smartctl_file(index),
                   argv=host_probe.smartctl_argv(f"nvme{index}"),
                   record=host_capture.smartctl_recorder(index))
        for index in range(host_capture.MAX_DRIVES)
    ),
    BundleFile("nvidia-ctk-version.txt", argv=ctr.CTK_VERSION_ARGV, check=parse_ctk_version),
    BundleFile("nvidia-ctk-cdi-list.txt", argv=ctr.CDI_LIST_ARGV, check=parse_cdi_list),
    BundleFile("docker-daemon.json", paths=(ctr.DOCKER_DAEMON_JSON,)),
    BundleFile("containerd-config.toml", paths=(ctr.CONTAINERD_CONFIG,)),
)  # fmt: skip
# The sysfs trees a bundle records as ``path<TAB>value`` lines, by file: a path under one
# is the host's when recorded, absent when its tree was recorded without it.
_TREE_ROOTS: tuple[tuple[str, str], ...] = (
    *((entry.name, entry.tree) for entry in BUNDLE if entry.tree),
    (INFINIBAND_SYSFS, IB_ROOT),
)
# The most bytes each file may hold (TOOL_OUTPUT_BYTES for the rest): a bundle is
# anyone's folder, and each file is bounded before it is read, let alone parsed.
_MAX_BYTES = {
    SMI_XML: SMI_QUERY_BYTES,
    SMI_QUERY: SMI_QUERY_BYTES,
    **dict.fromkeys(
        (NVCC, CUDNN_HEADER, PROC_VERSION, OS_RELEASE, UNAME, HOSTNAME, META, PROC_CMDLINE),
        SMALL_FILE_BYTES,
    ),
}
# The kernel logs are read from their tail: the newest lines are the ones judged.
_TAILED = (DMESG, JOURNAL)
# Files write_capture records its own way, not by asking the table's command or path.
_WRITTEN_APART = (
    HOSTNAME, META, DCGM_JSON, DCGM_TEXT, NVBANDWIDTH_JSON, NVBANDWIDTH_TEXT, ALL_REDUCE
)  # fmt: skip

KNOWN_FILES = tuple(entry.name for entry in BUNDLE)
_BY_NAME = {entry.name: entry for entry in BUNDLE}
_PCI_ROOT = posixpath.dirname(host.PCI_DEVICES)


def _program_key(argv: Sequence[str]) -> tuple[str, ...]:
    """A command line with its program's directory dropped: how bundle commands match."""
    return (posixpath.basename(argv[0]), *argv[1:]) if argv else ()


def _segments_match(path: str, pattern: str) -> bool:
    parts, wanted = path.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(
        fnmatch.fnmatchcase(part, want) for part, want in zip(parts, wanted)
    )


def _not_in_capture(name: str) -> NotRecordedError:
    return NotRecordedError(f"{name} not in the capture")


class CaptureSystem:
    """A :class:`~validator.node.system.System` answering from a bundle directory.

    Commands and files of :data:`BUNDLE` answer with the recorded text; one the
    bundle lacks, and anything outside the table, raises
    :class:`~validator.node.system.NotRecordedError` ("not measured").

    Attributes:
        directory: the bundle's folder.
        reading: NVML's stand-in, from the bundle's nvidia-smi query or banner
            (the files it is not taken from are compared with it: :meth:`conflicts`).
        captured_at: when the bundle was captured (meta.json), or None.
        partial: by file name, why only part of it was read (a kernel log's tail).

    Raises:
        CaptureError: (on construction) the directory is missing, holds no
            bundle file, or a file cannot be read or does not parse.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.partial: dict[str, str] = {}  # why only part of a file was read, by name
        if not self.directory.is_dir():
            raise CaptureError(
                f"capture directory {self.directory} does not exist: give the folder "
                "`gpuready capture` wrote, or one holding nvidia-smi-q.xml / nvidia-smi.txt"
            )
        self._texts = {name: text for name in KNOWN_FILES if (text := self._load(name)) is not None}
        if not self._texts:
            raise CaptureError(
                f"{self.directory} holds no capture files: expected any of "
                f"{', '.join(KNOWN_FILES[:7])}"
            )
        self._meta = self._load_meta()
        self.captured_at = _captured_at(self._meta)
        self._queries = self._parse_queries()
        self.reading = self._driver_reading()
        for entry in BUNDLE:
            if entry.check is not None:
                self._parse_present(entry.name, entry.check)
        self._commands = {_program_key(e.argv): e.name for e in BUNDLE if e.argv}
        self._files = self._recorded_files()

    # ------------------------------------------------------------ loading

    def _load(self, name: str) -> str | None:
        """A file's text, bounded before it is read; None where the bundle lacks it.

        A kernel log larger than :data:`validator.limits.KERNEL_LOG_TAIL_BYTES` is read from its
        tail (:attr:`partial` says so); any other file over its bound, and anything that is
        no regular file (a FIFO, /dev/zero, a directory), is bad input.
        """
        path = self.directory / name
        if not os.path.lexists(path):
            return None
        try:
            if name in _TAILED:
                data, size = read_tail(path, KERNEL_LOG_TAIL_BYTES, nofollow=True)
                if size:
                    self.partial[name] = (
                        f"only its last {size_text(KERNEL_LOG_TAIL_BYTES)} were "
                        f"read: {name} is {size_text(size)}"
                    )
            else:
                data = read_bounded(path, _MAX_BYTES.get(name, TOOL_OUTPUT_BYTES), nofollow=True)
        except OverLimitError as exc:
            raise CaptureError(f"{path} {exc}; capture it again or remove the file") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                # Followed as root, a link could put any file of this host (a key, a
                # password hash) into the report through a parse error's excerpt.
                raise CaptureError(
                    f"{path} is a symbolic link: a bundle holds the files themselves; "
                    "copy the file in its place (cp --remove-destination) or remove the link"
                ) from None
            raise CaptureError(
                f"cannot read {path}: {exc.strerror}; check its permissions"
            ) from None
        return data.decode("utf-8", errors="replace")

    def _parse_present(self, name: str, parse: Callable[[str], T]) -> T | None:
        """A file parsed, or None when the bundle lacks it; a broken file is bad input."""
        text = self._texts.get(name)
        if text is None:
            return None
        try:
            return parse(text)
        except ParseError as exc:
            raise CaptureError(
                f"{self.directory / name}: {exc}; capture it again or remove the file"
            ) from None

    def _load_meta(self) -> dict[str, object]:
        text = self._texts.get(META)
        if text is None:
            return {}
        try:
            data = load_json(text)  # a key given twice is no fact either
        except LoadError as exc:
            where = f" (line {exc.line})" if exc.line is not None else ""
            problem = "not valid JSON" if exc.syntax else exc.problem
            raise CaptureError(
                f"{self.directory / META}: {problem}{where}; remove it or "
                "capture again with `gpuready capture`"
            ) from None
        if not isinstance(data, dict):
            raise CaptureError(f"{self.directory / META}: expected a JSON object")
        return data

    def dcgm_output(self) -> tuple[str, str] | None:
        """(file name, text) of the bundle's DCGM diagnostic, JSON first; None without one."""
        return self._first_present(DCGM_JSON, DCGM_TEXT)

    def nvbandwidth_output(self) -> tuple[str, str] | None:
        """(file name, text) of the bundle's nvbandwidth output, JSON first; None without."""
        return self._first_present(NVBANDWIDTH_JSON, NVBANDWIDTH_TEXT)

    def all_reduce_output(self) -> tuple[str, str] | None:
        """(file name, text) of the bundle's ``all_reduce_perf`` output; None without one."""
        return self._first_present(ALL_REDUCE)

    def _first_present(self, *names: str) -> tuple[str, str] | None:
        for name in names:
            text = self._texts.get(name)
            if text is not None:
                return name, text
        return None

    @property
    def dcgm_level(self) -> int | None:
        """The DCGM level ``gpuready capture`` ran (meta.json), or None where unrecorded."""
        level = self._meta.get("dcgm_level")
        return level if isinstance(level, int) and not isinstance(level, bool) else None

    def location(self, name: str) -> str:
        """Where on the host a searched-for record was found (meta.json ``locations``).

        Without a recorded location, the bare name: nvcc was on PATH, the header
        is a ``cudnn_version.h`` somewhere.
        """
        locations = self._meta.get("locations")
        if isinstance(locations, Mapping):
            where = locations.get(name)
            if isinstance(where, str) and where:
                return where
        entry = _BY_NAME[name]
        return posixpath.basename(entry.argv[0] if entry.argv else entry.paths[0])

    def _recorded_files(self) -> dict[str, str]:
        """The host files this bundle answers, by path."""
        files: dict[str, str] = {}
        for entry in BUNDLE:
            text = self._texts.get(entry.name)
            if text is not None and entry.tree:
                files.update(host_capture.tree_files(text, entry.tree))
            if text is None or not entry.paths or entry.name == PCI_DEVICES:
                continue
            path = self.location(entry.name) if len(entry.paths) > 1 else entry.paths[0]
            files[path] = text
        uptime = self._meta.get("uptime_s")
        if isinstance(uptime, (int, float)) and not isinstance(uptime, bool):
            files[system_facts.PROC_UPTIME] = f"{float(uptime)!r}\n"
        for address, vendor, device_class in self._pci():
            files[f"{_PCI_ROOT}/{address}/vendor"] = vendor
            files[f"{_PCI_ROOT}/{address}/class"] = device_class
        files.update(parse_tree(self._texts.get(INFINIBAND_SYSFS) or ""))
        files.update(iommu_files(self._texts.get(IOMMU_SYSFS, "")))
        return files

    def _has_pci(self) -> bool:
        return PCI_DEVICES in self._texts or LSPCI in self._texts

    def _pci(self) -> list[tuple[str, str, str]]:
        """(address, vendor, class) from pci-devices.txt, else from ``lspci -n``."""
        text = self._texts.get(PCI_DEVICES)
        if text is not None:
            return [
                (fields[0], fields[1], fields[2])
                for fields in (line.split() for line in text.splitlines())
                if len(fields) >= 3
            ]
        devices = []
        for line in (self._texts.get(LSPCI) or "").splitlines():
            # "0000:18:00.0 0302: 10de:2330 (rev a1)"; the domain is optional.
            fields = line.split()
            if len(fields) < 3 or not fields[1].endswith(":"):
                continue
            vendor = fields[2].partition(":")[0]
            devices.append((fields[0], f"0x{vendor}", f"0x{fields[1].rstrip(':')}00"))
        return devices

    def _parse_queries(self) -> dict[str, SmiQuery]:
        """Both nvidia-smi queries the bundle holds, parsed, XML first."""
        queries = {}
        for name, parse in ((SMI_XML, parse_smi_xml), (SMI_QUERY, parse_smi_query)):
            query = self._parse_present(name, parse)
            if query is not None:
                queries[name] = query
        return queries

    def _driver_reading(self) -> DriverReading:
        reading = self._first_reading()
        return _with_unreachable_gpus(reading, self._reading_text())

    def _reading_text(self) -> str:
        """The text of the file the reading comes from (XML, -q, banner)."""
        name = next(iter(self._queries), SMI_BANNER)
        return self._texts.get(name, "")

    def _first_reading(self) -> DriverReading:
        query = next(iter(self._queries.values()), None)  # XML first
        if query is not None:
            return DriverReading(
                status=query.status,
                detail=query.detail,
                driver_version=query.driver_version,
                cuda_driver_version=query.cuda_version,
                gpus=self._with_nvlinks(query.gpus),
            )
        banner = self._parse_present(SMI_BANNER, parse_banner)
        if banner is not None:
            return DriverReading(
                status=banner.status,
                detail=banner.detail,
                driver_version=banner.driver_version,
                cuda_driver_version=banner.cuda_version,
                gpus=self._with_nvlinks(tuple(_gpu_from_banner(gpu) for gpu in banner.gpus)),
            )
        missing = Unavailable(Reason.NOT_MEASURED, "no nvidia-smi output in the capture")
        return DriverReading(
            status=NvmlStatus.NOT_MEASURED,
            detail=f"the capture has none of {SMI_XML}, {SMI_QUERY}, {SMI_BANNER}",
            driver_version=missing,
            cuda_driver_version=missing,
            gpus=(),
        )

    def _with_nvlinks(self, gpus: tuple[GpuFacts, ...]) -> tuple[GpuFacts, ...]:
        """The GPUs with NVLink state and error counts from the ``nvlink`` files.

        Only where the query lacks them: what the driver said in ``-q -x`` comes first.
        """
        status = self._parse_present(NVLINK_STATUS, parse_nvlink_status)
        errors = self._parse_present(NVLINK_ERRORS, parse_nvlink_errors)
        if status is None and errors is None:
            return gpus
        return tuple(_nvlink_facts(gpu, status, errors) for gpu in gpus)

    # ------------------------------------------------------------ consistency

    def views(self) -> tuple[BundleView, ...]:
        """What each nvidia-smi file and the PCI listing say about the GPUs, XML first.

        A file holding an nvidia-smi error lists no GPU and is no view; neither is
        a banner that does not parse next to a query (the collector reports it).
        """
        found = [
            query_view(name, query, self._texts[name]) for name, query in self._queries.items()
        ]
        banner = self._banner()
        if banner is not None:
            found.append(banner_view(SMI_BANNER, banner))
        if self._has_pci():
            found.append(
                pci_view(PCI_DEVICES if PCI_DEVICES in self._texts else LSPCI, self._pci())
            )
        return tuple(view for view in found if view is not None)

    def _banner(self) -> SmiBanner | None:
        text = self._texts.get(SMI_BANNER)
        if text is None:
            return None
        try:
            return parse_banner(text)
        except ParseError:
            return None

    def conflicts(self) -> tuple[SourceConflict, ...]:
        """Where the bundle's files disagree about the GPUs, or one is cut short.

        The nvidia-smi views and the PCI listing are compared with each other; every
        other file (DCGM, nvbandwidth, nccl-tests, nvlink, the kernel log) with the
        GPUs and host the bundle names (:mod:`validator.node.capture.bundle_agreement`).
        """
        views = self.views()
        return bundle_conflicts(views) + tuple(self._measurement_conflicts(views))

    def _node_gpus(self, views: Sequence[BundleView]) -> NodeGpus:
        """The GPUs the other files are held to: the chosen view's (XML, -q, banner)."""
        listing = next((view for view in views if not view.on_bus), None)
        if listing is None:
            return NodeGpus("the bundle", (), whole=False)
        return NodeGpus(listing.file, self.reading.gpus, whole=listing.whole)

    def _measurement_conflicts(self, views: Sequence[BundleView]) -> list[SourceConflict]:
        node = self._node_gpus(views)
        found: list[SourceConflict] = []
        dcgm = self.dcgm_output()
        if dcgm is not None:
            parse_dcgm = parse_dcgm_json if dcgm[0] == DCGM_JSON else parse_dcgm_text
            found += dcgm_conflicts(dcgm[0], parse_dcgm(dcgm[1]).results, node)
        host, named_in = self._stated_host()
        nvbandwidth = self.nvbandwidth_output()
        if nvbandwidth is not None:
            parsed = parse_nvbandwidth(nvbandwidth[1], nvbandwidth[0])
            found += nvbandwidth_conflicts(nvbandwidth[0], parsed, node, host)
        all_reduce = self._parse_present(ALL_REDUCE, parse_all_reduce)
        if all_reduce is not None:
            found += nccl_conflicts(ALL_REDUCE, all_reduce, node, host)
        status = self._parse_present(NVLINK_STATUS, parse_nvlink_status)
        errors = self._parse_present(NVLINK_ERRORS, parse_nvlink_errors)
        for name, report in ((NVLINK_STATUS, status), (NVLINK_ERRORS, errors)):
            if report is not None and report.error is None:
                blocks = [
                    NvLinkBlock(gpu.index, gpu.uuid if isinstance(gpu.uuid, str) else None)
                    for gpu in report.gpus
                ]
                found += nvlink_conflicts(name, blocks, node)
        for name in (DMESG, JOURNAL):
            text = self._texts.get(name)
            if text is not None:
                found += kernel_log_conflicts(name, text, host, named_in)
        return found

    def _stated_host(self) -> tuple[str | None, str]:
        """The host name meta.json or hostname.txt states, and which; None where neither."""
        named = self._meta.get("hostname")
        if isinstance(named, str) and named.strip():
            return named.strip(), META
        text = (self._texts.get(HOSTNAME) or "").strip()
        return (text or None), HOSTNAME

    # ------------------------------------------------------------ the System

    def hostname(self) -> str:
        """The host's name: meta.json's, else hostname.txt's, else the folder's."""
        name = self._meta.get("hostname") or (self._texts.get(HOSTNAME) or "").strip()
        return str(name or self.directory.name)

    def read_text(self, path: str) -> str | None:
        """A recorded file's text.

        Raises:
            NotRecordedError: the bundle holds no record of this file.
        """
        text = self._files.get(path)
        if text is not None:
            return text
        for entry in BUNDLE:
            if path in entry.paths and entry.name not in self._texts:
                raise _not_in_capture(entry.name)
        if path.startswith(_PCI_ROOT + "/") and not self._has_pci():
            raise _not_in_capture(LSPCI)
        for name, root in _TREE_ROOTS:
            if path.startswith(root + "/"):
                if name not in self._texts:
                    raise _not_in_capture(name)
                return None  # the recorded tree has no such file
        raise NotRecordedError(f"{path} not in the capture")

    def glob(self, pattern: str) -> list[str]:
        """Recorded paths matching a shell pattern, sorted.

        A header recorded without its directory (a bare ``cudnn_version.h``)
        matches the patterns whose last segment it matches.

        Raises:
            NotRecordedError: the bundle holds nothing the pattern could match.
        """
        for entry in BUNDLE:
            if len(entry.paths) > 1 and pattern in entry.paths:  # a search: its one answer
                if entry.name not in self._texts:
                    raise _not_in_capture(entry.name)
                where = self.location(entry.name)
                if "/" in where:
                    return [where] if _segments_match(where, pattern) else []
                return [where] if fnmatch.fnmatchcase(where, posixpath.basename(pattern)) else []
        found = sorted(
            {
                path
                for candidate in self._files
                for path in (candidate, posixpath.dirname(candidate))
                if _segments_match(path, pattern)
            }
        )
        tree = next((name for name, root in _TREE_ROOTS if pattern.startswith(root + "/")), None)
        if tree is not None:
            if tree not in self._texts:
                raise _not_in_capture(tree)
            return found  # a tree recorded empty lists nothing (a host with no HCA, no NVMe)
        if pattern.startswith(_PCI_ROOT + "/"):
            # A PCI listing recorded empty lists no devices; one not recorded is not measured.
            if not found and not self._has_pci():
                raise _not_in_capture(LSPCI)
            return found
        if pattern.startswith(IOMMU_ROOTS) and not found:  # recorded empty: the IOMMU is off
            if IOMMU_SYSFS not in self._texts:
                raise _not_in_capture(IOMMU_SYSFS)
            return found
        if not found:
            raise NotRecordedError(f"{pattern}: not in the capture")
        return found

    def which(self, name: str) -> str | None:
        """Where a recorded command's program was found.

        Raises:
            NotRecordedError: the bundle holds no output of this program.
        """
        entries = [e for e in BUNDLE if e.argv and posixpath.basename(e.argv[0]) == name]
        for entry in entries:
            if entry.name in self._texts:
                return self.location(entry.name) if entry.name == NVCC else name
        raise _not_in_capture(entries[0].name if entries else name)

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        """The recorded output of this command line (its program matched by name).

        Raises:
            NotRecordedError: the bundle holds no output of this command.
        """
        name = self._commands.get(_program_key(argv))
        if name is None:
            raise NotRecordedError(f"{shlex.join(argv)}: not in the capture")
        text = self._texts.get(name)
        if text is None:
            raise _not_in_capture(name)
        return CommandResult(0, text, recorded_in=name, partial=self.partial.get(name, ""))

    def now(self) -> datetime.datetime:
        """When the bundle was captured; this moment when it does not say."""
        return self.captured_at or datetime.datetime.now(datetime.timezone.utc)


def _with_unreachable_gpus(reading: DriverReading, text: str) -> DriverReading:
    """A reading whose error names GPUs the driver could not reach: those GPUs, so marked.

    nvidia-smi prints "Unable to determine the device handle for GPU 0000:02:00.0: GPU is
    lost" instead of its output when one GPU's handle fails: NVML started and found the
    GPU, as it does live (validator.node.nvml reads such a GPU as lost or unreadable). So
    it is that GPU's fault (reboot, replace it if it recurs), not "no GPU found".
    """
    if reading.status is not NvmlStatus.ERROR or reading.gpus:
        return reading
    gpus: list[GpuFacts] = []
    for line in text.splitlines():
        named = lost_gpu_bus_ids(line)
        bus_id = normalize_bus_id(named[0]) if named else None
        if bus_id is None or any(gpu.pci_bus_id == bus_id for gpu in gpus):
            continue
        lost = _LOST_WORDS.search(line) is not None
        why = Unavailable(Reason.GPU_LOST if lost else Reason.ERROR, line.strip())
        gpu = unreadable_gpu(len(gpus), GpuStatus.LOST if lost else GpuStatus.ERROR, why)
        gpus.append(replace(gpu, pci_bus_id=bus_id))
    if not gpus:
        return reading
    return replace(reading, status=NvmlStatus.OK, detail="", gpus=tuple(gpus))


# The words by which nvidia-smi says a GPU is gone, not merely unreadable ("Unknown Error").
_LOST_WORDS = re.compile(r"GPU is lost|fallen off the bus", re.IGNORECASE)


def _gpu_from_banner(gpu: BannerGpu) -> GpuFacts:
    # The banner truncates long names ("NVIDIA GeForce RTX 2080 ..."): keep them
    # as printed, the judge will not find such a name in the catalog.
    return GpuFacts(
        index=gpu.index,
        name=gpu.name,
        pci_bus_id=gpu.pci_bus_id,
        persistence_mode=gpu.persistence_mode,
        memory_used_mib=gpu.memory_used_mib,
        memory_total_mib=gpu.memory_total_mib,
        power_draw_w=gpu.power_draw_w,
        power_limit_enforced_w=gpu.power_cap_w,
        temperature_gpu_c=gpu.temperature_gpu_c,
        mig_mode_current=gpu.mig_mode,
    )


def _nvlink_facts(
    gpu: GpuFacts, status: NvLinkStatusReport | None, errors: NvLinkErrorReport | None
) -> GpuFacts:
    """``gpu`` with ``nvlinks`` and ``nvlink_errors`` from the ``nvlink`` files, where unread."""
    links, counts = gpu.nvlinks, gpu.nvlink_errors
    if status is not None and _unread(links):
        block = _nvlink_block(gpu, status.gpus, status.error, NVLINK_STATUS)
        if block is not None:
            links = block if isinstance(block, Unavailable) else block.links
    if errors is not None and _unread(counts):
        counted = _nvlink_block(gpu, errors.gpus, errors.error, NVLINK_ERRORS)
        if counted is not None:
            counts = counted if isinstance(counted, Unavailable) else counted.errors
    return replace(gpu, nvlinks=links, nvlink_errors=counts)


def _unread(value: object) -> bool:
    return isinstance(value, Unavailable) and value.reason is Reason.NOT_MEASURED


_Block = TypeVar("_Block", NvLinkGpu, NvLinkErrorGpu)


def _nvlink_block(
    gpu: GpuFacts, blocks: tuple[_Block, ...], error: str | None, name: str
) -> _Block | Unavailable | None:
    """The ``nvlink`` file's block for ``gpu``: by UUID, else by index; None if it has none.

    A block whose UUID names another GPU is not this one's, whatever its index (the
    file then lists other GPUs than the query). nvidia-smi's error instead of blocks is
    an error for every GPU.
    """
    if error is not None:
        return Unavailable(Reason.ERROR, f"{name}: {error}")
    uuid = gpu.uuid if isinstance(gpu.uuid, str) else None
    if uuid is not None:
        for block in blocks:
            if block.uuid == uuid:
                return block
    for block in blocks:
        if block.index == gpu.index and (uuid is None or not isinstance(block.uuid, str)):
            return block
    return None


def _captured_at(meta: Mapping[str, object]) -> datetime.datetime | None:
    value = meta.get("captured_at")
    if not isinstance(value, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)


# ---------------------------------------------------------------- writing a bundle


# What asking a System for one record gives: (text, where it was found), or why not.
_Recorded = Union[tuple[str, Optional[str]], str]


def _record_nvcc(system: System) -> _Recorded:
    program = system_facts.find_nvcc(system)
    result = system.run((program, *NVCC_ARGV[1:])) if program else None
    if program is None or result is None or not result.ok:
        return "skipped: nvcc not found or failed"
    return result.stdout, program


def _record_header(system: System) -> _Recorded:
    header = system_facts.cudnn_header(system)
    if header is None:
        return f"skipped: no {CUDNN_HEADER} found"
    return header[1], header[0]


def _record_pci(system: System) -> _Recorded:
    devices = system_facts.pci_devices(system)
    if isinstance(devices, Unavailable):
        return f"skipped: {devices}"
    lines = (
        f"{posixpath.basename(path)} {vendor.strip()} {device_class.strip()}\n"
        for path, vendor, device_class in devices
    )
    return "".join(lines), None


def _record_command(system: System, entry: BundleFile) -> _Recorded:
    result = system.run(entry.argv)
    text = result.stdout if result.ok else (result.stdout + result.stderr)
    if result.ok or (entry.keep_error_text and result.rc != 127 and text.strip()):
        return text, None
    return f"skipped: {shlex.join(entry.argv)} exited {result.rc}"


def _record_file(system: System, entry: BundleFile) -> _Recorded:
    found = system_facts.read_file(system, entry.paths[0])
    return f"skipped: {found}" if isinstance(found, Unavailable) else (found, None)


def _record(system: System, entry: BundleFile) -> _Recorded:
    """Ask ``system`` what ``entry`` records, as the collector would ask it."""
    special = {
        NVCC: _record_nvcc,
        CUDNN_HEADER: _record_header,
        PCI_DEVICES: _record_pci,
        IOMMU_SYSFS: record_iommu,
        INFINIBAND_SYSFS: ib_sysfs_record.record_infiniband,
    }
    try:
        if entry.record is not None:
            return entry.record(system)
        if entry.name in special:
            return special[entry.name](system)
        return _record_command(system, entry) if entry.argv else _record_file(system, entry)
    except NotRecordedError as exc:  # re-capturing a bundle that lacks it
        return f"skipped: {exc}"


def write_capture(
    directory: str | os.PathLike[str],
    system: System,
    *,
    dcgm_level: int = 0,
    dcgm_timeout_s: float | None = None,
    interconnect: bool = False,
    interconnect_timeout_s: float = NVBANDWIDTH_TIMEOUT_S,
) -> dict[str, str]:
    """Write a bundle of ``system`` into ``directory``: every :data:`BUNDLE` record it answers.

    Any System will do: this host (:class:`~validator.node.system.LiveSystem`),
    a scenario's, or another bundle's. Each file is written atomically. With
    ``interconnect``, ``nvbandwidth -j`` runs (where it is on PATH, within
    ``interconnect_timeout_s``) into ``nvbandwidth.json``. With ``dcgm_level`` above
    0, DCGM's diagnostic of that level runs last (within ``dcgm_timeout_s``, else the
    level's allowance) into ``dcgmi-diag.json``, and meta.json records the level.

    Returns:
        For each bundle file, "written" or why it was left out.

    Raises:
        CaptureError: the directory cannot be created (a file in the way, no
            permission: bad input, nothing was recorded yet).
        ReportError: a file could not be written (full disk, read-only, I/O
            error): the host was recorded but the bundle could not be stored;
            no temporary file is left.
    """
    path = Path(directory)
    try:
        # The folder named is ours from itself down: a link there is refused, never followed.
        Folder.open(path).close()
    except OSError as exc:
        if exc.errno in _OUT_OF_ROOM:
            raise _not_stored(path, path, exc) from None
        raise CaptureError(f"cannot create {path}: {exc.strerror}; choose another folder") from None
    remove_stale_temporaries(path, start=path)  # those of a capture killed mid-write
    outcome: dict[str, str] = {}
    contents: dict[str, str] = {}
    locations: dict[str, str] = {}
    for entry in BUNDLE:
        if entry.name in _WRITTEN_APART:
            continue
        recorded = _record(system, entry)
        if isinstance(recorded, str):
            outcome[entry.name] = recorded
            continue
        contents[entry.name], where = recorded
        if where is not None:
            locations[entry.name] = where
    contents[HOSTNAME] = system.hostname() + "\n"
    meta: dict[str, object] = {
        "hostname": system.hostname(),
        "captured_at": system.now().isoformat(timespec="seconds"),
    }
    uptime = system_facts.read_file(system, system_facts.PROC_UPTIME)
    if isinstance(uptime, str) and uptime.split():
        with contextlib.suppress(ValueError):
            meta["uptime_s"] = float(uptime.split()[0])
    meta["locations"] = locations
    if interconnect:
        _record_nvbandwidth(system, interconnect_timeout_s, contents, outcome, locations)
    if dcgm_level > 0:
        _record_dcgm(system, dcgm_level, dcgm_timeout_s, contents, outcome, meta)
    contents[META] = json.dumps(meta, indent=2) + "\n"
    for name, text in contents.items():
        target = path / name
        try:
            write_atomic(target, text, start=path)
        except OSError as exc:
            raise _not_stored(target, path, exc) from None
        outcome[name] = "written"
    return outcome


def _record_dcgm(
    system: System,
    level: int,
    timeout_s: float | None,
    contents: dict[str, str],
    outcome: dict[str, str],
    meta: dict[str, object],
) -> None:
    """Run DCGM's diagnostic into the bundle: its JSON as printed, or why there is none."""
    from validator.node.dcgm_run import run_dcgmi

    try:
        diag, text = run_dcgmi(system, level, timeout_s)
    except NotRecordedError as exc:  # re-capturing a bundle: it ran no dcgmi
        outcome[DCGM_JSON] = f"skipped: {exc}"
        return
    if text is None:
        outcome[DCGM_JSON] = f"skipped: {diag.results}"
        return
    contents[DCGM_JSON] = text
    meta["dcgm_level"] = level


def _record_nvbandwidth(
    system: System,
    timeout_s: float,
    contents: dict[str, str],
    outcome: dict[str, str],
    locations: dict[str, str],
) -> None:
    """Run nvbandwidth into the bundle: its JSON as printed, or why there is none.

    A testcase that fails makes nvbandwidth exit 1 after printing its JSON: that
    JSON is kept, since the failure is the finding.
    """
    try:
        program = system.which(NVBANDWIDTH_ARGV[0])
        if program is None:
            outcome[NVBANDWIDTH_JSON] = "skipped: nvbandwidth not found on PATH"
            return
        result = system.run((program, *NVBANDWIDTH_ARGV[1:]), timeout_s=timeout_s)
    except NotRecordedError as exc:  # re-capturing a bundle: it ran no nvbandwidth
        outcome[NVBANDWIDTH_JSON] = f"skipped: {exc}"
        return
    if result.rc == 124:
        outcome[NVBANDWIDTH_JSON] = f"skipped: nvbandwidth -j ran past {timeout_s:g} s"
        return
    try:
        parse_nvbandwidth_json(result.stdout)
    except ParseError as exc:
        said = " ".join((result.stderr or result.stdout).split())[:200]
        outcome[NVBANDWIDTH_JSON] = (
            f"skipped: nvbandwidth -j exited {result.rc} without readable JSON ({exc})"
            + (f": {said}" if said else "")
        )
        return
    contents[NVBANDWIDTH_JSON] = result.stdout
    locations[NVBANDWIDTH_JSON] = program


# A full disk is no bad input, even before anything is written.
_OUT_OF_ROOM = (errno.ENOSPC, errno.EDQUOT)


def _not_stored(target: Path, folder: Path, exc: OSError) -> ReportError:
    return ReportError(
        f"cannot write {target}: {exc.strerror or exc}; free space or choose another folder "
        f"(the capture in {folder} is incomplete)"
    )
