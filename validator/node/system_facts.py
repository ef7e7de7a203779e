"""A node's facts read from its System: NVML (or its captured stand-in) plus commands and files.

One reader for every source: a live host, a simulated scenario and a captured bundle
are each a :class:`~validator.node.system.System` read by the same code here, before
what the one collector (validator.node.collect) measures after it.

Every source's facts leave :func:`system_facts` through one plausibility pass
(:func:`validator.node.physical_ranges.plausible_facts`): a reading no GPU can
give is "not measured", whichever System it came from.

The collector never raises on what it finds: a tool that is missing, a file
that cannot be read or an output that does not parse becomes an
:class:`~validator.model.Unavailable` fact with the reason; what a recorded
System holds no record of (:class:`~validator.node.system.NotRecordedError`)
is "not measured".
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Callable, TypeVar

from validator.limits import KERNEL_LOG_EVENTS, KERNEL_LOG_TAIL_BYTES, size_text
from validator.model import (
    DEFAULT_XID_WINDOW_HOURS,
    KernelLogFacts,
    Measured,
    NodeFacts,
    NvmlStatus,
    Reason,
    ToolFacts,
    Unavailable,
)
from validator.node import host
from validator.node.nvml import DriverReading
from validator.node.parsers.base import ParseError
from validator.node.parsers.cudnn import parse_cudnn_header, parse_cudnn_packages
from validator.node.parsers.kernel_log import log_is_empty, read_xid_log
from validator.node.parsers.kernel_log_shape import not_a_kernel_log
from validator.node.parsers.nvcc import parse_nvcc_version
from validator.node.parsers.proc_version import parse_proc_driver_version
from validator.node.parsers.smi_banner import parse_banner
from validator.node.physical_ranges import plausible_facts
from validator.node.system import (
    NOT_FOUND_SUFFIX,
    CommandResult,
    LiveSystem,
    NotRecordedError,
    System,
)

T = TypeVar("T")

PROC_DRIVER_VERSION = "/proc/driver/nvidia/version"
PROC_UPTIME = "/proc/uptime"
NVIDIA_SMI = ("nvidia-smi",)
NVCC_CANDIDATES = ("/usr/local/cuda/bin/nvcc", "/usr/local/cuda-*/bin/nvcc")
CUDNN_HEADERS = (
    "/usr/include/cudnn_version.h",
    "/usr/include/*-linux-gnu/cudnn_version_v*.h",
    "/usr/include/cudnn_version_v*.h",
    "/usr/local/cuda/include/cudnn_version.h",
    "/usr/local/cuda-*/include/cudnn_version.h",
    "/usr/local/cuda-*/targets/*/include/cudnn_version.h",
)
# pip's CUDA wheels, in this interpreter's site-packages (where the burn-in finds cuBLAS):
# nvidia-cuda-nvcc (CUDA 13 on: nvidia/cu13/bin/nvcc; CUDA 12's nvidia-cuda-nvcc-cu12 has
# ptxas alone) and nvidia-cudnn-cu12 (nvidia/cudnn/include), whose .dist-info names its
# CUDA major.
PIP_NVCC = ("nvidia/cu*/bin/nvcc",)
PIP_CUDNN_HEADER = "nvidia/cudnn/include/cudnn_version.h"
PIP_CUDNN_DIST = re.compile(r"nvidia_cudnn_cu(\d+)-[^/]*\.dist-info$")
DPKG_CUDNN = ("dpkg-query", "-W", "-f", "${Package} ${Version}\\n", "*cudnn*")
RPM_CUDNN = ("rpm", "-qa", "*cudnn*")
DMESG = ("dmesg",)
JOURNAL_KERNEL = ("journalctl", "-k", "-b", "--no-pager", "-o", "short-iso")
EMPTY_LOG_DETAIL = (
    "{what} shows no log line (the log was cleared or is hidden from this user), "
    "so it proves nothing about Xids or other GPU faults"
)


def parsed(parse: Callable[[str], T], text: str, what: str) -> Measured[T]:
    """Apply a parser, turning a parse failure into an ERROR fact naming ``what``."""
    try:
        return parse(text)
    except ParseError as exc:
        return Unavailable(Reason.ERROR, f"{what}: {exc}")


def command_failure(result: CommandResult, what: str) -> Unavailable:
    """The fact for a command that did not succeed.

    127 is "not installed" only when nothing ran (the System found no such command): a
    command that ran and exited 127 (a wrapper whose target is gone, as Debian's
    /usr/bin/nvcc without /usr/lib/nvidia-cuda-toolkit) is installed and broken.
    """
    text = (result.stderr or result.stdout).strip().splitlines()
    if result.rc == 127 and (not text or text[-1].endswith(NOT_FOUND_SUFFIX)):
        return Unavailable(Reason.NOT_SUPPORTED, f"{what} not found")
    if result.rc == 126:
        return Unavailable(Reason.NO_PERMISSION, f"{what}: permission denied")
    if result.rc == 127:  # ran, and failed as a missing program would: its last word says why
        return Unavailable(Reason.ERROR, f"{what} exited 127: {text[-1]}")
    first = text[0] if text else f"exit status {result.rc}"
    return Unavailable(Reason.ERROR, f"{what}: {first}")


def attempt(system: System, argv: tuple[str, ...]) -> CommandResult | Unavailable:
    """Run a command; "not measured" when the System holds no record of it."""
    try:
        return system.run(argv)
    except NotRecordedError as exc:
        return Unavailable(Reason.NOT_MEASURED, str(exc))


def checked_run(
    system: System, argv: tuple[str, ...], what: str, *, any_rc: bool = False
) -> CommandResult | Unavailable:
    """A command's result where it succeeded, else why not (a timeout is the System's 124).

    ``any_rc``: its exit status says nothing (``sysctl -e``, a package query), so only
    one that did not run (126, 127) or ran out of time (124: what it printed is partial,
    a ``df`` stuck on a dead NFS mount) failed.
    """
    result = attempt(system, argv)
    if isinstance(result, Unavailable) or result.ok:
        return result
    if any_rc and result.rc not in (124, 126, 127):
        return result
    return command_failure(result, what)


def run_parsed(
    system: System,
    argv: tuple[str, ...],
    parse: Callable[[str], T],
    what: str,
    *,
    any_rc: bool = False,
) -> Measured[T]:
    """A command's stdout parsed (a failure names the bundle file read, else ``what``)."""
    result = checked_run(system, argv, what, any_rc=any_rc)
    if isinstance(result, Unavailable):
        return result
    return parsed(parse, result.stdout, result.recorded_in or what)


def read_parsed(system: System, path: str, parse: Callable[[str], T]) -> Measured[T]:
    """A file's text parsed, or why not (:func:`read_file`, then :func:`parsed`)."""
    text = read_file(system, path)
    if isinstance(text, Unavailable):
        return text
    return parsed(parse, text, path)


def read_file(system: System, path: str) -> str | Unavailable:
    """A file's text, or why not."""
    try:
        text = system.read_text(path)
    except NotRecordedError as exc:
        return Unavailable(Reason.NOT_MEASURED, str(exc))
    except PermissionError:
        return Unavailable(Reason.NO_PERMISSION, f"{path}: permission denied")
    except OSError as exc:
        return Unavailable(Reason.ERROR, f"{path}: {exc.strerror or exc}")
    if text is None:
        return Unavailable(Reason.NOT_SUPPORTED, f"{path} does not exist")
    return text


# ---------------------------------------------------------------- host and driver


def os_name(system: System) -> Measured[str]:
    """The OS's pretty name."""
    text = read_file(system, host.OS_RELEASE)
    return text if isinstance(text, Unavailable) else host.parse_os_release(text)


def kernel_release(system: System) -> Measured[str]:
    """The running kernel's release string."""
    text = read_file(system, host.KERNEL_RELEASE)
    return text if isinstance(text, Unavailable) else text.strip()


def kernel_module_version(system: System) -> Measured[str]:
    """The loaded nvidia kernel module's version."""
    text = read_file(system, PROC_DRIVER_VERSION)
    if isinstance(text, Unavailable):
        if text.reason is Reason.NOT_SUPPORTED:
            return Unavailable(
                Reason.NOT_SUPPORTED,
                f"nvidia kernel module not loaded ({PROC_DRIVER_VERSION} absent)",
            )
        return text
    return parsed(parse_proc_driver_version, text, PROC_DRIVER_VERSION)


def pci_devices(system: System) -> list[tuple[str, str, str]] | Unavailable:
    """(sysfs path, vendor, class) of every PCI device whose two files read."""
    try:
        devices = system.glob(host.PCI_DEVICES)
    except NotRecordedError as exc:
        return Unavailable(Reason.NOT_MEASURED, str(exc))
    if not devices:
        return Unavailable(Reason.NOT_SUPPORTED, "/sys/bus/pci lists no devices")
    found = []
    for device in devices:
        vendor = read_file(system, f"{device}/vendor")
        device_class = read_file(system, f"{device}/class")
        if isinstance(vendor, Unavailable) or isinstance(device_class, Unavailable):
            continue
        found.append((device, vendor, device_class))
    return found


def pci_counts(system: System) -> tuple[Measured[int], Measured[int]]:
    """NVIDIA GPUs and NVSwitches on the PCI bus, as sysfs lists them."""
    devices = pci_devices(system)
    if isinstance(devices, Unavailable):
        return devices, devices
    gpus = switches = 0
    for _path, vendor, device_class in devices:
        kind = host.classify_pci_device(vendor, device_class)
        gpus += kind == "gpu"
        switches += kind == "nvswitch"
    return gpus, switches


# ---------------------------------------------------------------- tools


def banner_facts(
    result: CommandResult | Unavailable,
) -> tuple[Measured[str], Measured[str], str | None]:
    """Driver and CUDA versions from the nvidia-smi banner, or what it said instead."""
    if isinstance(result, Unavailable):  # not recorded: nothing was said
        return result, result, None
    if result.rc == 127:
        missing = Unavailable(Reason.NOT_SUPPORTED, "nvidia-smi not found")
        return missing, missing, "nvidia-smi: command not found"
    text = result.stdout if result.stdout.strip() else result.stderr
    try:
        banner = parse_banner(text)
    except ParseError as exc:
        error = Unavailable(Reason.ERROR, f"nvidia-smi: {exc}")
        return error, error, str(exc)
    if banner.status is not NvmlStatus.OK:
        said = Unavailable(Reason.ERROR, banner.detail)
        # A mismatch message still names the user-space side ("NVML library version: ...").
        driver = banner.driver_version if isinstance(banner.driver_version, str) else said
        return driver, said, banner.detail
    return banner.driver_version, banner.cuda_version, None


def driver_versions(
    reading: DriverReading, smi_driver: Measured[str], smi_cuda: Measured[str]
) -> tuple[Measured[str], Measured[str]]:
    """The user-space driver and CUDA versions: NVML's, else what nvidia-smi printed.

    Args:
        reading: what NVML (or a captured query) said.
        smi_driver: the driver version plain nvidia-smi printed, or why not.
        smi_cuda: the CUDA version plain nvidia-smi printed, or why not.

    Returns:
        (driver, cuda), each the reading's value where it has one.
    """
    driver, cuda = reading.driver_version, reading.cuda_driver_version
    if isinstance(driver, Unavailable) and not isinstance(smi_driver, Unavailable):
        driver = smi_driver
    if isinstance(cuda, Unavailable) and not isinstance(smi_cuda, Unavailable):
        cuda = smi_cuda
    return driver, cuda


def find_nvcc(system: System) -> str | None:
    """nvcc on PATH, else under /usr/local/cuda*, newest toolkit first.

    Raises:
        NotRecordedError: a recorded System holds no nvcc output.
    """
    on_path = system.which("nvcc")
    if on_path:
        return on_path
    for pattern in NVCC_CANDIDATES:
        found = system.glob(pattern)
        if found:
            return sorted(found, key=_version_key)[-1]
    for site in pip_sites(system):
        for pattern in PIP_NVCC:
            found = system.glob(os.path.join(site, pattern))
            if found:
                return sorted(found, key=_version_key)[-1]
    return None


def pip_sites(system: System) -> list[str]:
    """This interpreter's site-packages, where pip's CUDA wheels are; none for a host not live.

    A recorded or simulated host has no Python environment of its own here: the
    controller's would be another machine's.
    """
    if not isinstance(system, LiveSystem):
        return []
    from validator.node.burnin.cuda_libs import site_package_dirs

    return list(dict.fromkeys(site_package_dirs()))


def _version_key(path: str) -> tuple[int, ...]:
    digits = "".join(ch if ch.isdigit() else " " for ch in path).split()
    return tuple(int(d) for d in digits)


def nvcc_facts(system: System) -> tuple[Measured[str], str | None]:
    """The nvcc release and where it was found."""
    try:
        path = find_nvcc(system)
    except NotRecordedError as exc:
        return Unavailable(Reason.NOT_MEASURED, str(exc)), None
    if path is None:
        return Unavailable(
            Reason.NOT_SUPPORTED,
            "nvcc not found on PATH, under /usr/local/cuda* or in pip's nvidia-cuda-nvcc",
        ), None
    result = attempt(system, (path, "--version"))
    if isinstance(result, Unavailable):
        return result, None
    if not result.ok:
        return command_failure(result, path), path
    return parsed(parse_nvcc_version, result.stdout, f"{path} --version"), path


def cudnn_header(system: System) -> tuple[str, str] | None:
    """The first readable cuDNN header, as (path, text), in CUDNN_HEADERS order.

    Raises:
        NotRecordedError: a recorded System holds no cuDNN header.
    """
    pip = [os.path.join(site, PIP_CUDNN_HEADER) for site in pip_sites(system)]
    for pattern in (*CUDNN_HEADERS, *pip):
        for path in system.glob(pattern):
            text = read_file(system, path)
            if not isinstance(text, Unavailable):
                return path, text
    return None


def _pip_cudnn_cuda_major(system: System, header: str) -> int | None:
    """The CUDA major of the pip wheel ``header`` came from (nvidia-cudnn-cu12: 12)."""
    site = header[: -len(PIP_CUDNN_HEADER)] if header.endswith(PIP_CUDNN_HEADER) else None
    if site is None:
        return None
    for path in system.glob(os.path.join(site, "nvidia_cudnn_cu*.dist-info")):
        match = PIP_CUDNN_DIST.search(path)
        if match:
            return int(match.group(1))
    return None


def cudnn_facts(system: System) -> tuple[Measured[str], str | None, Measured[int]]:
    """cuDNN version, where it was found, and the CUDA major it was built for.

    The header wins; the package list (dpkg, else rpm) tells the CUDA major and
    stands in for a missing header.
    """
    version: Measured[str] = Unavailable(
        Reason.NOT_SUPPORTED, "no cudnn_version.h, no cuDNN package and no pip nvidia-cudnn"
    )
    where: str | None = None
    try:
        header = cudnn_header(system)
    except NotRecordedError as exc:
        header, version = None, Unavailable(Reason.NOT_MEASURED, str(exc))
    if header is not None:
        where = header[0]
        version = parsed(parse_cudnn_header, header[1], where)
    cuda_major: Measured[int] = Unavailable(Reason.NOT_MEASURED, "no cuDNN package found to tell")
    unrecorded: list[Unavailable] = []
    for argv in (DPKG_CUDNN, RPM_CUDNN):
        result = attempt(system, argv)
        if isinstance(result, Unavailable):
            unrecorded.append(result)
            continue
        if not result.ok or not result.stdout.strip():
            continue
        pkg_version, pkg_major = parse_cudnn_packages(result.stdout)
        if isinstance(pkg_version, Unavailable):
            continue
        cuda_major = pkg_major
        if where is None:
            version, where = pkg_version, f"package ({argv[0]})"
        break
    else:
        if len(unrecorded) == 2:  # no package list recorded at all: not measured
            cuda_major = unrecorded[0]
    pip_major = _pip_cudnn_cuda_major(system, where) if where else None
    if pip_major is not None and isinstance(cuda_major, Unavailable):
        cuda_major = pip_major
    return version, where, cuda_major


def kernel_log_facts(system: System, window_hours: float | None) -> KernelLogFacts:
    """Xid events and other GPU faults within the window, from dmesg or else the journal.

    Events and faults come from the same read of the same log, so they are measured (or
    not) together. A log that shows no line at all (cleared, or hidden from this user)
    is not a clean log, nor is a text whose lines are not a kernel log's (NUL bytes,
    prose: validator.node.parsers.kernel_log_shape): both are then unknown, never an
    empty list. dmesg's raw stamps
    are placed by /proc/uptime; an uptime that cannot be right places nothing (every
    Xid and fault counts), and the source says why.
    """
    result = _tail(attempt(system, DMESG))
    text = _log_text(result)
    if text is not None:
        log = read_xid_log(
            text,
            now=system.now(),
            window_hours=window_hours,
            uptime_s=_uptime(system),
        )
        return KernelLogFacts(
            source=_partial(_dmesg_source(log.uptime_doubt), result, log.dropped),
            window_hours=window_hours,
            events=log.events,
            faults=log.faults,
        )
    journal = _tail(attempt(system, JOURNAL_KERNEL))
    text = _log_text(journal)
    if text is not None:
        log = read_xid_log(text, now=system.now(), window_hours=window_hours)
        return KernelLogFacts(
            source=_partial("journalctl", journal, log.dropped),
            window_hours=window_hours,
            events=log.events,
            faults=log.faults,
        )
    missing = _no_kernel_log(result, journal)
    return KernelLogFacts(
        source=_partial("dmesg", result, 0),
        window_hours=window_hours,
        events=missing,
        faults=missing,
    )


def _log_text(result: CommandResult | Unavailable) -> str | None:
    """What a log command printed, where it is a kernel log (some line, shaped as the kernel's)."""
    if not isinstance(result, CommandResult) or not result.ok or log_is_empty(result.stdout):
        return None
    return result.stdout if not_a_kernel_log(result.stdout) is None else None


def _uptime(system: System) -> float | None:
    """Seconds since boot from /proc/uptime; None where it cannot be read."""
    text = read_file(system, PROC_UPTIME)
    if isinstance(text, Unavailable):
        return None
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def _tail(result: CommandResult | Unavailable) -> CommandResult | Unavailable:
    """A log's last :data:`validator.limits.KERNEL_LOG_TAIL_BYTES` characters, whole lines.

    Wherever the log came from (a live dmesg or journal, a scenario): a bundle's file
    is read so already, and says so.
    """
    if not isinstance(result, CommandResult) or len(result.stdout) <= KERNEL_LOG_TAIL_BYTES:
        return result
    tail = result.stdout[-KERNEL_LOG_TAIL_BYTES:]
    cut = tail.find("\n")
    note = (
        f"only its last {size_text(KERNEL_LOG_TAIL_BYTES)} were read: it printed "
        f"{size_text(len(result.stdout))}"
    )
    return replace(result, stdout=tail[cut + 1 :] if cut >= 0 else "", partial=note)


def _partial(source: str, result: CommandResult | Unavailable, dropped: int) -> str:
    """The source, saying so where only part of the log was read or kept.

    A bundle's kernel log is read from its tail; of a flood of Xid or fault lines, the
    latest :data:`validator.limits.KERNEL_LOG_EVENTS` of each are kept.
    """
    notes = [source]
    if isinstance(result, CommandResult) and result.partial:
        notes.append(result.partial)
    if dropped:
        notes.append(
            f"{dropped:,} older Xid or fault lines were not kept (the latest "
            f"{KERNEL_LOG_EVENTS:,} of each were)"
        )
    return "; ".join(notes)


def _dmesg_source(uptime_doubt: str | None) -> str:
    """The dmesg source name, saying so where the uptime could not place its stamps."""
    if uptime_doubt is None:
        return "dmesg"
    return f"dmesg; {uptime_doubt}, so every Xid counts, whatever its age"


def _no_kernel_log(
    dmesg: CommandResult | Unavailable, journal: CommandResult | Unavailable
) -> Unavailable:
    """Why neither dmesg nor the journal showed a log line (dmesg's reason leads)."""
    if isinstance(dmesg, Unavailable):  # a recording without dmesg output
        if isinstance(journal, Unavailable):
            return dmesg  # nor the journal's
        said = _log_said(journal, "journalctl -k")
        return Unavailable(said.reason, f"{said.detail}; {dmesg.detail}")
    why = _log_said(dmesg, "dmesg")
    if isinstance(journal, Unavailable):
        journal_said = journal.detail
    else:
        journal_said = "journalctl -k " + (
            "also failed"
            if not journal.ok
            else "showed no log line either"
            if log_is_empty(journal.stdout)
            else "is not a kernel log either"
        )
    return Unavailable(why.reason, f"{why.detail}; {journal_said}")


def _log_said(result: CommandResult, what: str) -> Unavailable:
    """A log command that failed, or showed no line (named as recorded, if it was)."""
    if not result.ok:
        return command_failure(result, what)
    why = None if log_is_empty(result.stdout) else not_a_kernel_log(result.stdout)
    if why is not None:
        return Unavailable(
            Reason.ERROR,
            f"{result.recorded_in or what} is not a kernel log ({why}), so it proves "
            "nothing about Xids or other GPU faults",
        )
    return Unavailable(Reason.ERROR, EMPTY_LOG_DETAIL.format(what=result.recorded_in or what))


def system_facts(
    system: System,
    reading: DriverReading,
    *,
    source: str,
    source_detail: str = "",
    window_hours: float | None = DEFAULT_XID_WINDOW_HOURS,
) -> NodeFacts:
    """Assemble NodeFacts from a driver reading and what the host shows.

    Args:
        system: the host (live, simulated or captured).
        reading: what NVML (or a captured nvidia-smi query) said.
        source: "live", "capture" or "simulate".
        source_detail: the capture directory or scenario name.
        window_hours: how far back kernel-log Xids count; None for the whole log.
    """
    smi_driver, smi_cuda, smi_error = banner_facts(attempt(system, NVIDIA_SMI))
    nvcc_version, nvcc_path = nvcc_facts(system)
    cudnn_version, cudnn_source, cudnn_major = cudnn_facts(system)
    pci_gpus, pci_switches = pci_counts(system)
    driver, cuda = driver_versions(reading, smi_driver, smi_cuda)
    facts = NodeFacts(
        hostname=system.hostname(),
        source=source,
        source_detail=source_detail,
        collected_at=system.now().isoformat(timespec="seconds"),
        os_name=os_name(system),
        kernel=kernel_release(system),
        nvml_status=reading.status,
        nvml_detail=reading.detail,
        driver_version=driver,
        cuda_driver_version=cuda,
        kernel_module_version=kernel_module_version(system),
        pci_gpu_count=pci_gpus,
        pci_nvswitch_count=pci_switches,
        gpus=reading.gpus,
        tools=ToolFacts(
            nvidia_smi_driver_version=smi_driver,
            nvidia_smi_cuda_version=smi_cuda,
            nvidia_smi_error=smi_error,
            nvcc_version=nvcc_version,
            nvcc_path=nvcc_path,
            cudnn_version=cudnn_version,
            cudnn_source=cudnn_source,
            cudnn_cuda_major=cudnn_major,
        ),
        kernel_log=kernel_log_facts(system, window_hours),
    )
    return plausible_facts(facts)
