"""Facts from a directory of captured outputs: a support bundle mailed in.

Any of these files may be present; a missing file is a fact "not measured":

=========================  ===============================================
``nvidia-smi-q.xml``       ``nvidia-smi -q -x`` (preferred for GPU facts)
``nvidia-smi-q.txt``       ``nvidia-smi -q`` (the text found in bug reports)
``nvidia-smi.txt``         ``nvidia-smi`` (banner table, or the error it printed)
``nvcc.txt``               ``nvcc --version``
``cudnn_version.h``        the cuDNN version header
``cudnn-packages.txt``     ``dpkg-query -W '*cudnn*'`` or ``rpm -qa '*cudnn*'``
``dmesg.txt``              the kernel log
``proc-driver-version.txt``  ``/proc/driver/nvidia/version``
``os-release.txt``         ``/etc/os-release``
``uname-r.txt``            ``uname -r``
``hostname.txt``           ``hostname``
``lspci-n.txt``            ``lspci -n``
``meta.json``              what ``gpuready capture`` records: host, time, uptime
=========================  ===============================================

Without ``meta.json`` the capture time is unknown, so every Xid in
``dmesg.txt`` counts, whatever its age (fail closed).
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
from pathlib import Path
from typing import Callable, TypeVar

from validator.errors import CaptureError
from validator.model import (
    GpuFacts,
    KernelLogFacts,
    Measured,
    NodeFacts,
    NvmlStatus,
    Reason,
    ToolFacts,
    Unavailable,
)
from validator.node import collect, host
from validator.node.parsers.base import ParseError
from validator.node.parsers.cudnn import parse_cudnn_header, parse_cudnn_packages
from validator.node.parsers.kernel_log import log_is_empty, parse_xid_events
from validator.node.parsers.nvcc import parse_nvcc_version
from validator.node.parsers.proc_version import parse_proc_driver_version
from validator.node.parsers.smi_banner import BannerGpu, parse_banner
from validator.node.parsers.smi_query import parse_smi_query
from validator.node.parsers.smi_xml import parse_smi_xml
from validator.node.system import CommandResult, System

T = TypeVar("T")

SMI_XML = "nvidia-smi-q.xml"
SMI_QUERY = "nvidia-smi-q.txt"
SMI_BANNER = "nvidia-smi.txt"
NVCC = "nvcc.txt"
CUDNN_HEADER = "cudnn_version.h"
CUDNN_PACKAGES = "cudnn-packages.txt"
DMESG = "dmesg.txt"
PROC_VERSION = "proc-driver-version.txt"
OS_RELEASE = "os-release.txt"
UNAME = "uname-r.txt"
HOSTNAME = "hostname.txt"
LSPCI = "lspci-n.txt"
META = "meta.json"

KNOWN_FILES = (
    SMI_XML, SMI_QUERY, SMI_BANNER, NVCC, CUDNN_HEADER, CUDNN_PACKAGES, DMESG,
    PROC_VERSION, OS_RELEASE, UNAME, HOSTNAME, LSPCI, META,
)  # fmt: skip


class _Bundle:
    """Reads files of one capture directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def text(self, name: str) -> str | None:
        """A file's text, or None when the capture lacks it."""
        path = self.directory / name
        if not path.is_file():
            return None
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise CaptureError(
                f"cannot read {path}: {exc.strerror}; check its permissions"
            ) from None

    def parse_present(self, name: str, parse: Callable[[str], T]) -> T | None:
        """A file parsed, or None when the capture lacks it; a broken file is bad input."""
        text = self.text(name)
        if text is None:
            return None
        try:
            return parse(text)
        except ParseError as exc:
            raise CaptureError(
                f"{self.directory / name}: {exc}; capture it again or remove the file"
            ) from None

    def parse(self, name: str, parse: Callable[[str], T]) -> Measured[T]:
        """A file parsed; a broken file is bad input, a missing one not measured."""
        value = self.parse_present(name, parse)
        if value is None:
            return Unavailable(Reason.NOT_MEASURED, f"{name} not in the capture")
        return value


def _driver_reading(bundle: _Bundle) -> collect.DriverReading:
    for name, parse in ((SMI_XML, parse_smi_xml), (SMI_QUERY, parse_smi_query)):
        query = bundle.parse_present(name, parse)
        if query is not None:
            return collect.DriverReading(
                status=query.status,
                detail=query.detail,
                driver_version=query.driver_version,
                cuda_driver_version=query.cuda_version,
                gpus=query.gpus,
            )
    banner = bundle.parse_present(SMI_BANNER, parse_banner)
    if banner is not None:
        return collect.DriverReading(
            status=banner.status,
            detail=banner.detail,
            driver_version=banner.driver_version,
            cuda_driver_version=banner.cuda_version,
            gpus=tuple(_gpu_from_banner(gpu) for gpu in banner.gpus),
        )
    missing = Unavailable(Reason.NOT_MEASURED, "no nvidia-smi output in the capture")
    return collect.DriverReading(
        status=NvmlStatus.NOT_MEASURED,
        detail=f"the capture has none of {SMI_XML}, {SMI_QUERY}, {SMI_BANNER}",
        driver_version=missing,
        cuda_driver_version=missing,
        gpus=(),
    )


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


def _meta(bundle: _Bundle) -> dict[str, object]:
    text = bundle.text(META)
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CaptureError(
            f"{bundle.directory / META}: not valid JSON (line {exc.lineno}); remove it or "
            "capture again with `gpuready capture`"
        ) from None
    if not isinstance(data, dict):
        raise CaptureError(f"{bundle.directory / META}: expected a JSON object")
    return data


def _captured_at(meta: dict[str, object]) -> datetime.datetime | None:
    value = meta.get("captured_at")
    if not isinstance(value, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)


def _kernel_log(
    bundle: _Bundle, meta: dict[str, object], window_hours: float | None
) -> KernelLogFacts:
    text = bundle.text(DMESG)
    if text is None:
        return KernelLogFacts(
            source=DMESG,
            window_hours=window_hours,
            events=Unavailable(Reason.NOT_MEASURED, f"{DMESG} not in the capture"),
        )
    if log_is_empty(text):
        return KernelLogFacts(
            source=DMESG,
            window_hours=window_hours,
            events=Unavailable(Reason.ERROR, collect.EMPTY_LOG_DETAIL.format(what=DMESG)),
        )
    now = _captured_at(meta)
    uptime = meta.get("uptime_s")
    if now is None:
        window_hours = None
    events = parse_xid_events(
        text,
        now=now,
        window_hours=window_hours,
        uptime_s=float(uptime) if isinstance(uptime, (int, float)) else None,
    )
    return KernelLogFacts(source=DMESG, window_hours=window_hours, events=events)


def _cudnn(bundle: _Bundle) -> tuple[Measured[str], str | None, Measured[int]]:
    version = bundle.parse(CUDNN_HEADER, parse_cudnn_header)
    source: str | None = CUDNN_HEADER if bundle.text(CUDNN_HEADER) is not None else None
    major: Measured[int] = Unavailable(Reason.NOT_MEASURED, f"{CUDNN_PACKAGES} not in the capture")
    packages = bundle.text(CUDNN_PACKAGES)
    if packages is not None:
        pkg_version, major = parse_cudnn_packages(packages)
        if source is None:
            version, source = pkg_version, CUDNN_PACKAGES
    return version, source, major


def collect_capture(
    directory: str | os.PathLike[str], window_hours: float | None = 24.0
) -> NodeFacts:
    """NodeFacts from a capture directory.

    Raises:
        CaptureError: the directory is missing, holds no capture file, or a
            file is broken beyond reading.
    """
    path = Path(directory)
    if not path.is_dir():
        raise CaptureError(
            f"capture directory {path} does not exist: give the folder `gpuready capture` "
            "wrote, or one holding nvidia-smi-q.xml / nvidia-smi.txt"
        )
    if not any((path / name).is_file() for name in KNOWN_FILES):
        raise CaptureError(
            f"{path} holds no capture files: expected any of {', '.join(KNOWN_FILES[:7])}"
        )
    bundle = _Bundle(path)
    meta = _meta(bundle)
    reading = _driver_reading(bundle)
    banner_text = bundle.text(SMI_BANNER)
    smi_driver: Measured[str]
    smi_cuda: Measured[str]
    smi_error: str | None
    if banner_text is None:
        absent = Unavailable(Reason.NOT_MEASURED, f"{SMI_BANNER} not in the capture")
        smi_driver, smi_cuda, smi_error = absent, absent, None
    else:
        smi_driver, smi_cuda, smi_error = collect.banner_facts(CommandResult(0, banner_text))
    driver, cuda = collect.driver_versions(reading, smi_driver, smi_cuda)
    cudnn_version, cudnn_source, cudnn_major = _cudnn(bundle)
    lspci = bundle.text(LSPCI)
    pci_gpus: Measured[int]
    pci_switches: Measured[int]
    if lspci is None:
        pci_gpus = pci_switches = Unavailable(Reason.NOT_MEASURED, f"{LSPCI} not in the capture")
    else:
        pci_gpus, pci_switches = host.parse_lspci_numeric(lspci)
    os_text = bundle.text(OS_RELEASE)
    uname = bundle.text(UNAME)
    hostname = meta.get("hostname") or (bundle.text(HOSTNAME) or "").strip() or path.name
    captured_at = _captured_at(meta)
    return NodeFacts(
        hostname=str(hostname),
        source="capture",
        source_detail=str(path),
        collected_at=captured_at.isoformat(timespec="seconds") if captured_at else "",
        os_name=host.parse_os_release(os_text)
        if os_text is not None
        else Unavailable(Reason.NOT_MEASURED, f"{OS_RELEASE} not in the capture"),
        kernel=uname.strip()
        if uname is not None
        else Unavailable(Reason.NOT_MEASURED, f"{UNAME} not in the capture"),
        nvml_status=reading.status,
        nvml_detail=reading.detail,
        driver_version=driver,
        cuda_driver_version=cuda,
        kernel_module_version=bundle.parse(PROC_VERSION, parse_proc_driver_version),
        pci_gpu_count=pci_gpus,
        pci_nvswitch_count=pci_switches,
        gpus=reading.gpus,
        tools=ToolFacts(
            nvidia_smi_driver_version=smi_driver,
            nvidia_smi_cuda_version=smi_cuda,
            nvidia_smi_error=smi_error,
            nvcc_version=bundle.parse(NVCC, parse_nvcc_version),
            nvcc_path=NVCC if bundle.text(NVCC) is not None else None,
            cudnn_version=cudnn_version,
            cudnn_source=cudnn_source,
            cudnn_cuda_major=cudnn_major,
        ),
        kernel_log=_kernel_log(bundle, meta, window_hours),
    )


# What `gpuready capture` runs, file by file. nvidia-smi's error text is kept:
# "No devices were found" is itself the fact.
_COMMANDS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    (SMI_XML, ("nvidia-smi", "-q", "-x"), False),
    (SMI_QUERY, ("nvidia-smi", "-q"), False),
    (SMI_BANNER, ("nvidia-smi",), True),
    (CUDNN_PACKAGES, collect.DPKG_CUDNN, False),
    (DMESG, collect.DMESG, False),
    (UNAME, ("uname", "-r"), False),
    (LSPCI, ("lspci", "-n"), False),
)
_FILES: tuple[tuple[str, str], ...] = (
    (PROC_VERSION, collect.PROC_DRIVER_VERSION),
    (OS_RELEASE, host.OS_RELEASE),
)


def _gather(system: System, outcome: dict[str, str]) -> dict[str, str]:
    """Run the capture commands and read the files; note in ``outcome`` what is left out."""
    contents: dict[str, str] = {}
    for name, argv, keep_error_text in _COMMANDS:
        result = system.run(argv)
        text = result.stdout if result.ok else (result.stdout + result.stderr)
        if result.ok or (keep_error_text and result.rc != 127 and text.strip()):
            contents[name] = text
        else:
            outcome[name] = f"skipped: {shlex.join(argv)} exited {result.rc}"
    nvcc = collect.find_nvcc(system)
    if nvcc:
        result = system.run((nvcc, "--version"))
        if result.ok:
            contents[NVCC] = result.stdout
    if NVCC not in contents:
        outcome[NVCC] = "skipped: nvcc not found or failed"
    for name, source in _FILES:
        found = collect.read_file(system, source)
        if isinstance(found, Unavailable):
            outcome[name] = f"skipped: {found}"
        else:
            contents[name] = found
    for pattern in collect.CUDNN_HEADERS:
        paths = system.glob(pattern)
        header = collect.read_file(system, paths[0]) if paths else None
        if isinstance(header, str):
            contents[CUDNN_HEADER] = header
            break
    else:
        outcome[CUDNN_HEADER] = "skipped: no cudnn_version.h found"
    return contents


def write_capture(directory: str | os.PathLike[str], system: System) -> dict[str, str]:
    """Write a capture bundle of this host into ``directory``.

    Returns:
        For each bundle file, "written" or why it was left out.

    Raises:
        CaptureError: the directory cannot be created or written.
    """
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CaptureError(f"cannot create {path}: {exc.strerror}; choose another folder") from None
    outcome: dict[str, str] = {}
    contents = _gather(system, outcome)
    contents[HOSTNAME] = system.hostname() + "\n"
    uptime = collect.read_file(system, collect.PROC_UPTIME)
    meta: dict[str, object] = {
        "hostname": system.hostname(),
        "captured_at": system.now().isoformat(timespec="seconds"),
    }
    if isinstance(uptime, str) and uptime.split():
        meta["uptime_s"] = float(uptime.split()[0])
    contents[META] = json.dumps(meta, indent=2) + "\n"
    for name, text in contents.items():
        target = path / name
        temporary = target.with_name(f".{name}.tmp")
        try:
            temporary.write_text(text, encoding="utf-8")
            os.replace(temporary, target)
        except OSError as exc:
            raise CaptureError(f"cannot write {target}: {exc.strerror}; check the folder") from None
        outcome[name] = "written"
    return outcome
