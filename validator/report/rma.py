"""The RMA evidence pack: one plain-text file per GPU that failed with a hardware action.

A GPU that must be reset, reseated, cooled or returned to its vendor needs its case
made to someone who was not there: the vendor's support engineer. Each file holds,
for one GPU, what support asks for first: the host, the GPU's identity (model,
serial, UUID, bus id, VBIOS, driver), the failing findings with what to do, its
Xid / SXid and kernel-fault timeline, its error counters now and around the
burn-in, its burn-in record, DCGM's results for it, and the digests that tie the
file to the node: its latest certificate from history (when it was issued and
its digest: what the GPU was accepted as), and, the node being not certified by
this run, the SHA-256 of this run's facts as canonical JSON (sorted keys, no
whitespace, the same form as the certificate's digest).

The files are ``rma/<host>-gpu<index>-<serial>.txt`` under the report directory,
each written atomically. Names are made one to one by
:func:`validator.report.partial.safe_stem`; the serial part has its ``-``
escaped too, so a name splits back into host, index and serial from the right.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from validator.error_tree import ReportError
from validator.files import Folder, write_atomic
from validator.model import (
    HARDWARE_ACTIONS,
    DcgmDiag,
    ErrorCounters,
    Finding,
    GpuBurn,
    GpuFacts,
    KernelFault,
    Measured,
    NodeFacts,
    NodeResult,
    NvLinkErrorCounts,
    Reason,
    Report,
    Severity,
    TelemetrySample,
    Unavailable,
    XidEvent,
    to_dict,
)
from validator.packed import facts_with_samples, with_samples
from validator.report import shared
from validator.report.partial import safe_stem
from validator.report.rma_hca import hca_rma_files
from validator.safe_text import bus_key
from validator.trace import describe_window

RMA_DIR = "rma"
SUFFIX = ".txt"
# Each name part is bounded so the whole name stays well under 255 bytes.
_PART_LONGEST = 100
_LABEL_WIDTH = 16


@dataclasses.dataclass(frozen=True)
class LastCertificate:
    """The node's newest certificate in history: when it was issued, and its digest."""

    issued_at: str  # ISO 8601 UTC
    digest: str  # sha256 hex


@dataclasses.dataclass(frozen=True)
class RmaFile:
    """One GPU's evidence file, rendered: where it goes and what it says."""

    hostname: str
    gpu_index: int
    name: str  # the file name inside rma/
    text: str


# ------------------------------------------------------------------ which GPUs


def hardware_failures(node: NodeResult) -> dict[int, list[Finding]]:
    """The GPUs with a FAIL whose action is a hardware one, each with those findings.

    Returns:
        GPU index to its failing findings (every FAIL of that GPU, in the judge's
        order: the other failures are evidence too), for GPUs with at least one FAIL
        whose action is in HARDWARE_ACTIONS; by index.
    """
    failed: dict[int, list[Finding]] = {}
    for finding in node.findings:
        if finding.severity is Severity.FAIL and finding.gpu_index is not None:
            failed.setdefault(finding.gpu_index, []).append(finding)
    return {
        index: findings
        for index, findings in sorted(failed.items())
        if any(f.action in HARDWARE_ACTIONS for f in findings)
    }


def rma_file_name(hostname: str, gpu_index: int, serial: Measured[str]) -> str:
    """``<host>-gpu<index>-<serial>.txt``, each part escaped; ``_`` for no serial."""
    host = safe_stem(hostname, longest=_PART_LONGEST)
    serial_part = (
        safe_stem(serial, dash=False, longest=_PART_LONGEST) if isinstance(serial, str) else "_"
    )
    return f"{host}-gpu{gpu_index}-{serial_part}{SUFFIX}"


def host_of_file_name(name: str) -> str | None:
    """The host part of an RMA file name (escaped, as :func:`rma_file_name` made it).

    None when ``name`` is not one of ours. The serial part holds no ``-``, so the
    name splits from the right: ``<host>-gpu<index>-<serial>.txt``.
    """
    if not name.endswith(SUFFIX):
        return None
    rest, sep, _serial = name[: -len(SUFFIX)].rpartition("-")
    host, sep2, gpu = rest.rpartition("-")
    if not sep or not sep2 or not host or not gpu.startswith("gpu") or not gpu[3:].isdigit():
        return None
    return host


# ------------------------------------------------------------------ the digest


def evidence_digest(facts: NodeFacts) -> str:
    """SHA-256 (hex) of the node's facts as canonical JSON, as certificates are sealed.

    Raises:
        ReportError: a value JSON cannot carry (NaN, infinity) is in the facts.
    """
    try:
        text = json.dumps(
            to_dict(facts_with_samples(facts)),  # a held node's samples too
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
            allow_nan=False,
        )
    except ValueError as exc:
        raise ReportError(
            f"RMA evidence: {exc}; a measured value is NaN or infinite, record it as Unavailable"
        ) from exc
    return hashlib.sha256(text.encode("ascii")).hexdigest()


# ------------------------------------------------------------------ sections


def _field(label: str, value: object, unit: str = "") -> str:
    return f"{label + ':':<{_LABEL_WIDTH}} {shared.show(value, unit)}"


def _title(text: str) -> list[str]:
    return ["", text, "-" * len(text)]


def _identity(
    node: NodeResult, gpu: GpuFacts | None, index: int, digest_line: str, generated: str
) -> list[str]:
    facts = node.facts
    missing = Unavailable(Reason.NOT_MEASURED, f"GPU {index} not in the facts")

    def of(name: str) -> object:
        return getattr(gpu, name) if gpu is not None else missing

    source = facts.source + (f" ({facts.source_detail})" if facts.source_detail else "")
    lines = [
        f"gpuready RMA evidence: {shared.one_line(node.hostname)} GPU {index}",
        "=" * 40,
        _field("Host", node.hostname),
        _field("GPU index", index),
        _field("Model", of("name")),
        _field("Serial", of("serial")),
        _field("UUID", of("uuid")),
        _field("PCI bus id", of("pci_bus_id")),
        _field("VBIOS", of("vbios_version")),
        _field("Driver", facts.driver_version),
        _field("CUDA (driver)", facts.cuda_driver_version),
        _field("Kernel", facts.kernel),
        _field("OS", facts.os_name),
        _field("SKU", node.sku or "no SKU matched"),
        _field("Collected at", facts.collected_at),
        _field("Source", source),
        _field(
            "Verdict", f"{node.verdict.value}: {node.summary}" if node.summary else node.verdict
        ),
        _field("Digest", digest_line),
    ]
    if generated:
        lines.append(_field("Report", generated))
    return lines


def _findings(findings: Sequence[Finding]) -> list[str]:
    lines = _title("Failing findings")
    for number, finding in enumerate(findings, start=1):
        todo = shared.action_words(finding.action)
        source = f" ({shared.one_line(finding.action_source)})" if finding.action_source else ""
        lines += [
            f"{number}. {shared.one_line(finding.check)}  {finding.severity.value}  "
            f"-> {todo}{source}",
            f"   message:  {shared.one_line(finding.message)}",
            f"   observed: {shared.show(finding.observed)}",
            f"   expected: {shared.show(finding.expected)}",
            f"   action:   {finding.action.value}",
        ]
    return lines


def _when(timestamp: str | None, uptime_s: float | None) -> str:
    if timestamp:
        return shared.one_line(timestamp)
    if uptime_s is not None:
        return f"[{uptime_s:.6f}]"
    return "(no time)"


def _xid_line(event: XidEvent, during_burn: bool = False) -> str:
    kind = "SXid" if event.nvswitch else "Xid"
    who = ""
    if event.process or event.pid:
        who = f"  (process {shared.show(event.process)}, pid {shared.show(event.pid)})"
    burn = "  [during the burn-in]" if during_burn else ""
    return (
        f"{_when(event.timestamp, event.uptime_s)}  {kind} {event.xid}  "
        f"{shared.one_line(event.pci_bus_id)}  {shared.one_line(event.message)}{who}{burn}"
    )


def _fault_line(fault: KernelFault) -> str:
    return (
        f"{_when(fault.timestamp, fault.uptime_s)}  {shared.one_line(fault.kind)}  "
        f"{shared.one_line(fault.pci_bus_id)}  {shared.one_line(fault.message)}"
    )


def _events_section(
    title: str, value: Measured[tuple[object, ...]], lines_of: Iterable[str]
) -> list[str]:
    """A heading and its lines (``none`` when empty), or why the log could not be read."""
    if isinstance(value, Unavailable):
        return [f"{title}:", f"  {shared.unavailable_text(value)}"]
    return [f"{title}:", *([f"  {line}" for line in lines_of] or ["  none"])]


def _timeline(facts: NodeFacts, gpu: GpuFacts | None) -> list[str]:
    log = facts.kernel_log
    window = "whole log" if log.window_hours is None else f"last {shared.show(log.window_hours)} h"
    bus = gpu.pci_bus_id if gpu is not None else None
    key = bus_key(bus) if isinstance(bus, str) else None
    lines = _title(f"Kernel log ({shared.one_line(log.source)}, {window})")
    if key is None:
        lines.append("The GPU's bus id is unknown: its lines cannot be told from the others.")

    def mine(bus_id: str) -> bool:
        return key is not None and bus_key(bus_id) == key

    events = () if isinstance(log.events, Unavailable) else log.events
    faults = () if isinstance(log.faults, Unavailable) else log.faults
    lines += _events_section(
        "Xid events on this GPU",
        log.events,
        (_xid_line(e) for e in events if not e.nvswitch and mine(e.pci_bus_id)),
    )
    lines += _events_section(
        "Kernel faults on this GPU",
        log.faults,
        (_fault_line(f) for f in faults if mine(f.pci_bus_id)),
    )
    # An NVSwitch serves every GPU of the node: its SXids are evidence for each.
    lines += _events_section(
        "SXid events on this node's NVSwitches",
        log.events,
        (_xid_line(e) for e in events if e.nvswitch),
    )
    burn = facts.burn
    if burn is not None and not isinstance(burn.xid_events_during, Unavailable):
        during = [
            _xid_line(e, during_burn=True)
            for e in burn.xid_events_during
            if e.nvswitch or mine(e.pci_bus_id)
        ]
        if during:
            lines += ["During the burn-in:", *(f"  {line}" for line in during)]
    return lines


_COUNTERS: tuple[tuple[str, str], ...] = (
    ("ECC corrected (volatile)", "ecc_volatile_corrected"),
    ("ECC uncorrected (volatile)", "ecc_volatile_uncorrected"),
    ("Rows remapped, correctable", "remapped_rows_correctable"),
    ("Rows remapped, uncorrectable", "remapped_rows_uncorrectable"),
    ("Row remap pending", "remap_pending"),
    ("Retired pages pending", "retired_pages_pending"),
    ("PCIe replays", "pcie_replay_count"),
)
_NVLINK_COUNTERS: tuple[tuple[str, str], ...] = (
    ("CRC flit", "crc_flit"),
    ("CRC data", "crc_data"),
    ("replay", "replay"),
    ("recovery", "recovery"),
)
_COLUMN = 22


def _cell(value: object) -> str:
    """A table cell: the value, or ``n/a (reason)`` without the detail, which is wide."""
    if isinstance(value, Unavailable):
        return f"n/a ({value.reason.value.replace('_', ' ')})"
    return shared.show(value)


def _row(label: str, values: Sequence[object]) -> str:
    cells = "".join(f"{_cell(value):<{_COLUMN - 2}}  " for value in values).rstrip()
    return f"  {label:<30}{cells}"


def _links(value: Measured[tuple[NvLinkErrorCounts, ...]]) -> dict[int, NvLinkErrorCounts]:
    return {} if isinstance(value, Unavailable) else {link.link: link for link in value}


def _link_cell(counts: NvLinkErrorCounts | None) -> str:
    """``0/0, 0, 0``: CRC flit/data, replay, recovery; ``n/a`` for one not read."""
    if counts is None:
        return "-"

    def one(value: Measured[int]) -> str:
        return "n/a" if isinstance(value, Unavailable) else str(value)

    return (
        f"{one(counts.crc_flit)}/{one(counts.crc_data)}, {one(counts.replay)}, "
        f"{one(counts.recovery)}"
    )


def _counters(gpu: GpuFacts | None, burn: GpuBurn | None) -> list[str]:
    now = gpu if gpu is not None else ErrorCounters()
    before = burn.counters_before if burn is not None else None
    after = burn.counters_after if burn is not None else None
    columns: list[tuple[str, GpuFacts | ErrorCounters]] = [("when collected", now)]
    if before is not None and after is not None:
        columns += [("before the burn", before), ("after the burn", after)]
    lines = _title("Error counters")
    lines.append(_row("", [title for title, _ in columns]))
    for label, name in _COUNTERS:
        lines.append(_row(label, [getattr(source, name) for _, source in columns]))
    if gpu is not None:
        lines.append(_row("Row remap failure", [gpu.remap_failure]))
        lines.append(_row("Recovery action", [gpu.recovery_action]))
    sources = [_links(source.nvlink_errors) for _, source in columns]
    measured = [source.nvlink_errors for _, source in columns]
    numbers = sorted({link for links in sources for link in links})
    if not numbers:
        reason = next((m for m in measured if isinstance(m, Unavailable)), None)
        why = shared.unavailable_text(reason) if reason is not None else "no links reported"
        lines.append(_row("NVLink error counters", [why]))
    if numbers:
        lines.append(_row("NVLink counters, per link:", ["CRC flit/data, replay, recovery"]))
    for link in numbers:
        values = [_link_cell(links.get(link)) for links in sources]
        lines.append(_row(f"NVLink {link}", values))
    return lines


def _spread(samples: Sequence[TelemetrySample], name: str, unit: str) -> str:
    values = [
        float(value)
        for value in (getattr(sample, name) for sample in samples)
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    ]
    if not values:
        return "n/a (not sampled)"
    low, middle, high = min(values), statistics.median(values), max(values)
    return f"min {shared.show(low, unit)} / median {shared.show(middle, unit)} / max " + (
        shared.show(high, unit)
    )


def _burn(facts: NodeFacts, burn: GpuBurn | None) -> list[str]:
    lines = _title("Burn-in")
    run = facts.burn
    if run is None:
        return [*lines, "No burn-in was run."]
    simulated = (
        "  SIMULATED (figures from a scenario, not measured on a GPU)" if run.simulated else ""
    )
    lines.append(
        f"{shared.one_line(run.backend)} {shared.one_line(run.dtype)} n={run.matrix_size}, "
        f"{shared.show(run.duration_s, 's')} asked "
        f"(ran {shared.show(round(run.elapsed_s, 1), 's')}), "
        f"started {shared.show(run.started_at)}, sampler {shared.one_line(run.sampler)}{simulated}"
    )
    if run.error:
        lines.append(_field("Error", run.error))
    if burn is None:
        return [*lines, "This GPU has no burn-in record."]
    tflops = shared.tflops_text(burn.tflops) if isinstance(burn.tflops, float) else burn.tflops
    lines += [
        _field("Status", burn.status.value + (f": {burn.detail}" if burn.detail else "")),
        _field("TFLOPS", tflops),
        _field("Windows", tuple(shared.tflops_text(value) for value in burn.tflops_windows)),
        _field("Iterations", burn.iterations),
        _field(
            "Mismatches",
            f"{burn.mismatched_elements} elements in {burn.mismatched_iterations} iterations",
        ),
        _field("Non-finite", burn.nonfinite_elements),
        _field("Reference error", burn.reference_max_error),
        _field("Reference ok", burn.reference_ok),
        _field("Result digest", burn.digest),
        _field("Load window", describe_window(burn)),
        f"Telemetry over {shared.plural(len(burn.samples), 'sample')}:",
        f"  power            {_spread(burn.samples, 'power_w', 'W')}",
        f"  GPU temperature  {_spread(burn.samples, 'temperature_gpu_c', 'C')}",
        f"  HBM temperature  {_spread(burn.samples, 'temperature_memory_c', 'C')}",
        f"  SM clock         {_spread(burn.samples, 'sm_clock_mhz', 'MHz')}",
        f"  memory clock     {_spread(burn.samples, 'mem_clock_mhz', 'MHz')}",
        f"  utilization      {_spread(burn.samples, 'utilization_pct', '%')}",
    ]
    reasons: list[str] = []
    for sample in burn.samples:
        if not isinstance(sample.clock_event_reasons, Unavailable):
            reasons += [r for r in sample.clock_event_reasons if r not in reasons]
    lines.append(f"  clock events     {shared.show(tuple(reasons))}")
    return lines


def _dcgm(diag: DcgmDiag | None, index: int) -> list[str]:
    lines = _title("DCGM diagnostic")
    if diag is None:
        return [*lines, "No DCGM diagnostic was asked for or recorded."]
    level = "level not recorded" if diag.level is None else f"level {diag.level}"
    elapsed = f", ran {shared.show(round(diag.elapsed_s, 1), 's')}" if diag.elapsed_s else ""
    lines.append(
        f"{level}, DCGM {shared.show(diag.version)}, from {shared.one_line(diag.source)}{elapsed}"
    )
    if isinstance(diag.results, Unavailable):
        return [*lines, f"No results: {shared.unavailable_text(diag.results)}"]
    mine = [r for r in diag.results if r.gpu_index in (index, None)]
    for result in mine:
        where = "node" if result.gpu_index is None else f"GPU {result.gpu_index}"
        category = f" [{shared.one_line(result.category)}]" if result.category else ""
        error = f" DCGM_FR {result.error_id}" if result.error_id is not None else ""
        message = f": {shared.one_line(result.message)}" if result.message else ""
        lines.append(
            f"  {shared.one_line(result.test)}  {result.outcome.value}  {where}{category}"
            f"{error}{message}"
        )
    if not mine:
        lines.append("  no result names this GPU")
    return lines


# ------------------------------------------------------------------ the pack


def _digest_line(
    node: NodeResult, certificate_digest: str | None, last: LastCertificate | None
) -> str:
    if certificate_digest:
        return f"certificate sha256:{certificate_digest}"
    this_run = f"not certified; evidence digest: sha256:{evidence_digest(node.facts)}"
    if last is None:
        return this_run
    return (
        f"last certified {shared.one_line(last.issued_at)}, certificate digest "
        f"sha256:{shared.one_line(last.digest)}; this run: {this_run}"
    )


def rma_files(
    node: NodeResult,
    *,
    certificate_digest: str | None = None,
    last_certificate: LastCertificate | None = None,
    generated: str = "",
) -> list[RmaFile]:
    """The evidence files of one node: one per GPU that failed with a hardware action.

    Args:
        node: the judged node (its findings carry their actions).
        certificate_digest: the digest of the certificate this run issued, where it did.
        last_certificate: the node's newest certificate in history, where it has one.
        generated: who made the report and when, e.g. ``gpuready 0.1.0 at ...``.

    Returns:
        The files by GPU index; none for a node without such a failure.

    Raises:
        ReportError: the facts hold a value JSON cannot carry (for the digest).
    """
    failures = hardware_failures(node)
    if not failures:
        return []
    node = with_samples(node)  # the evidence quotes the telemetry; a held node's comes back
    digest = _digest_line(node, certificate_digest, last_certificate)
    gpus = {gpu.index: gpu for gpu in node.facts.gpus}
    burns = {burn.index: burn for burn in node.facts.burn.gpus} if node.facts.burn else {}
    files = []
    for index, findings in failures.items():
        gpu = gpus.get(index)
        lines = _identity(node, gpu, index, digest, generated)
        lines += _findings(findings)
        lines += _timeline(node.facts, gpu)
        lines += _counters(gpu, burns.get(index))
        lines += _burn(node.facts, burns.get(index))
        lines += _dcgm(node.facts.dcgm, index)
        serial = gpu.serial if gpu is not None else Unavailable(Reason.NOT_MEASURED)
        files.append(
            RmaFile(
                hostname=node.hostname,
                gpu_index=index,
                name=rma_file_name(node.hostname, index, serial),
                text="\n".join(shared.clean(line) for line in lines) + "\n",
            )
        )
    return files


def render_rma(
    report: Report,
    certificate_digests: Mapping[str, str] | None = None,
    last_certificates: Mapping[str, LastCertificate] | None = None,
) -> list[RmaFile]:
    """Every evidence file of a report, node by node (see :func:`rma_files`), then the HCAs'."""
    digests = certificate_digests or {}
    last = last_certificates or {}
    generated = f"gpuready {report.tool_version}, generated {report.generated_at}"
    return [
        file
        for node in report.nodes
        for file in rma_files(
            node,
            certificate_digest=digests.get(node.hostname),
            last_certificate=last.get(node.hostname),
            generated=generated,
        )
    ] + hca_rma_files(report, generated, RmaFile, evidence_digest)  # the HCAs' (rma_hca)


def write_rma(
    report: Report,
    directory: str | os.PathLike[str],
    certificate_digests: Mapping[str, str] | None = None,
    last_certificates: Mapping[str, LastCertificate] | None = None,
) -> list[Path]:
    """Write the report's evidence files under ``directory/rma/``, each atomically.

    Files of this report's hosts left by an earlier run (a GPU since repaired) are
    removed, so the folder says what this run found; other hosts' files stay.

    Returns:
        The paths written, in the report's order.

    Raises:
        ReportError: a file cannot be written; the message names it and the fix.
        UnsafePathError: the report folder, rma/ or a file in it is a link (or the
            wrong kind of file): refused, nothing written or removed through it.
    """
    files = render_rma(report, certificate_digests, last_certificates)
    folder = Path(directory) / RMA_DIR
    written: list[Path] = []
    current = folder
    try:
        # The report folder and rma/ are ours: made when missing, never through a link.
        for file in files:
            current = folder / file.name
            written.append(write_atomic(current, file.text, start=directory))
        _remove_stale(Path(directory), report, {file.name for file in files})
    except OSError as exc:
        raise ReportError(
            f"cannot write the RMA evidence {current}: {exc.strerror or exc}; free space or "
            "choose a writable --report-dir and certify again"
        ) from None
    return written


def _remove_stale(directory: Path, report: Report, keep: set[str]) -> None:
    """Remove this report's hosts' RMA files that this run did not write.

    Relative to rma/'s descriptor, never through a link: a planted rma/ link (or a
    link named like an RMA file) is refused, so nothing outside the folder is removed.
    """
    try:
        folder = Folder.open(directory / RMA_DIR, create=False, start=directory)
    except FileNotFoundError:
        return  # no rma/ folder: nothing to clean up
    hosts = {safe_stem(node.hostname, longest=_PART_LONGEST) for node in report.nodes}
    with folder:
        for name in folder.names():
            if name not in keep and host_of_file_name(name) in hosts:
                folder.remove(name)


__all__ = [
    "RMA_DIR",
    "LastCertificate",
    "RmaFile",
    "evidence_digest",
    "hardware_failures",
    "host_of_file_name",
    "render_rma",
    "rma_file_name",
    "rma_files",
    "write_rma",
]
