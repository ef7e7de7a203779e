"""Certificates: the facts that define a certified node, sealed with a digest.

A certificate is what ``gpuready drift`` compares a node against later, so it keeps
exactly the facts an operator expects to stay put (versions, GPU identity, power limits,
PCIe links, error counters, burn-in speed), the digest of the policy the node was judged
by, the tool version and the time of issue.

The ``digest`` is the SHA-256 of the canonical JSON of every other field (keys sorted, no
whitespace), so any edit of a value makes it fail verification. The digest alone proves
nothing about who wrote the file: whoever edits it can recompute it. An optional
``signature`` over the same bytes does: an Ed25519 signature (checked with the public key
alone, validator.signing), or an HMAC-SHA256 one, which proves only that its writer held
the shared key that every verifier holds too.

A fact that could not be measured is ``None`` here: a certificate is JSON for people and
other tools, and drift treats ``None`` as "nothing to compare".

Schema 2 added what drift needs to compare the interconnect and DCGM: each GPU's NVLinks
(state and speed), their error counters, its PCIe replay count and recovery action, and
the node's DCGM results. The counters are the totals after the certification burn-in
(its ``counters_after`` for that GPU, where read), so drift counts only what came after
certification, not the burn-in's own errors, which certify judged already; without such
a reading, the totals the facts hold. A schema-1 certificate has none of them, and is
sealed and written exactly as issued (:func:`_as_issued`): its digest and signature still
verify, and drift says it predates those checks.

Schema 3 added the measured bandwidth figures: each GPU's host-to-device, device-to-host
and HBM copy bandwidth (medians of the repeats), each ordered pair's unidirectional peer
copy bandwidth (by the GPUs' indices and UUIDs), and the NCCL all-reduce bus bandwidth at
the largest size measured, with that size and the rank count. A figure is certified only
where it was measured cleanly and its check did not fail or stay unknown
(:func:`_copy_figures`); simulated figures are certified as a simulated burn-in's speed
is. A schema-2 certificate has none, is written and sealed as issued, and drift says so.

Schema 4 added ``provenance``: ``live``, ``capture`` or ``simulate`` (``unknown`` for
any other source a node reported), inside the seal, so a simulated node's certificate
cannot be passed off as a real host's without breaking it. A schema-4 certificate
without it is refused; an older one has none, is written and sealed as issued, and
drift names its provenance "unknown (older certificate)".

``certified_gpus`` (in the seal, written only then) names the GPUs a ``--gpus`` run
certified; every GPU is listed for the node's identity, but only those were tested.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

from validator import __version__, fields
from validator.certified_network import NETWORK_FIELD, certified_ports
from validator.certified_network import CertifiedPort as CertifiedPort  # noqa: PLC0414 - drift
from validator.codec import unpack
from validator.error_tree import BadInputError
from validator.fields import Document, Field
from validator.judge.gpudirect_certified import (
    CERTIFIED_GPUDIRECT_FIELDS,
    CertifiedGpudirect,
    certified_gpudirect,
)
from validator.model import (
    CERTIFIED_CONTAINER_FIELD,
    CERTIFIED_HOST_FIELDS,
    PROVENANCES,
    UNKNOWN_PROVENANCE,
    Bandwidth,
    BurnStatus,
    CertifiedContainer,
    CertifiedHost,
    DcgmDiag,
    DcgmOutcome,
    ErrorCounters,
    GpuBurn,
    GpuFacts,
    Interconnect,
    Measured,
    NodeFacts,
    NodeResult,
    Severity,
    Unavailable,
    Verdict,
    certified_container,
    certified_host,
    host_from_fields,
    measured_gb_s,
    provenance_of,
    scope_text,
    to_dict,
)
from validator.model.fabric_certified import FABRIC_FIELD, CertifiedFabric
from validator.packed import PackedPerObject
from validator.safe_text import one_line
from validator.signing import KeyKind, KeyLike, SealKey, as_key, signature_kind

# Bump on any change that would make an older reader misjudge a certificate.
# 2: NVLinks, NVLink errors, PCIe replays and recovery action per GPU; DCGM results.
# 3: bandwidth figures: per GPU H2D, D2H and HBM; per pair P2P; the node's all-reduce.
# 4: provenance (live, capture or simulate), inside the seal.
CERTIFICATE_SCHEMA_VERSION = 4
# The first schema whose certificates hold the interconnect (NVLink state and error
# counters, PCIe replays, recovery action) and DCGM facts (issue 13).
INTERCONNECT_SCHEMA_VERSION = 2
# The first schema whose certificates hold the measured bandwidth figures (issue 14):
# copies, peers and all-reduce. Not to be confused with INTERCONNECT_SCHEMA_VERSION.
BANDWIDTH_SCHEMA_VERSION = 3
# The first schema whose certificates say where their facts came from (issue 30).
PROVENANCE_SCHEMA_VERSION = 4

T = TypeVar("T")

# Above any link or memory a GPU has (B200 HBM: 8,000 GB/s): the policy's bound on its
# bandwidth floors (validator.judge.policy), so a figure no floor could ask for is refused.
_BANDWIDTH_MAX_GBS = 100_000.0


class CertificateError(BadInputError):
    """A certificate that does not verify, or cannot be read; one line saying which."""


class SealError(CertificateError):
    """A certificate read whole whose seal does not hold: edited, re-signed, or another key's.

    Still a CertificateError (drift keeps such a certificate as an untrusted baseline);
    ``verify-cert`` answers it with exit 1, "not verified", apart from a file it cannot read.
    """


@dataclass(frozen=True)
class CertifiedLink:
    """One NVLink as it was when the node was certified."""

    link: int
    active: bool
    speed_gb_s: float | None  # per direction; None: not measured


@dataclass(frozen=True)
class CertifiedLinkErrors:
    """One NVLink's error counters when the node was certified (totals since the driver loaded)."""

    link: int
    crc_flit: int | None
    crc_data: int | None
    replay: int | None
    recovery: int | None


@dataclass(frozen=True)
class CertifiedDcgmTest:
    """One DCGM test's outcome at certification, for one GPU or (``gpu_index`` None) the node."""

    test: str
    outcome: str  # a DcgmOutcome value
    gpu_index: int | None


@dataclass(frozen=True)
class CertifiedDcgm:
    """The DCGM diagnostic the node passed when it was certified."""

    level: int | None
    version: str | None
    results: tuple[CertifiedDcgmTest, ...]


@dataclass(frozen=True)
class CertifiedPeer:
    """One ordered pair's unidirectional copy bandwidth (GB/s, src to dst) at certification.

    The GPUs are named by NVML index and, where read, UUID: drift compares a pair only
    while both are the boards certified.
    """

    src: int
    dst: int
    src_uuid: str | None
    dst_uuid: str | None
    unidirectional_gb_s: float


@dataclass(frozen=True)
class CertifiedAllReduce:
    """The node's NCCL all-reduce at certification: busbw at the largest size measured."""

    ranks: int
    size_bytes: int
    busbw_gb_s: float


@dataclass(frozen=True)
class CertifiedGpu:
    """One GPU as it was when the node was certified.

    The fields with defaults came with schema 2 (links to recovery action) and 3 (the
    copy bandwidths, GB/s): None in an older certificate. ``nvlink_errors`` and
    ``pcie_replay_count`` are the totals after the certification burn-in where it read
    them (see the module doc), so drift's baseline includes the burn-in's own errors.
    """

    index: int
    uuid: str | None
    serial: str | None
    name: str | None
    vbios_version: str | None
    memory_total_mib: int | None
    power_limit_enforced_w: float | None
    power_limit_default_w: float | None
    pcie_gen_max: int | None
    pcie_width_current: int | None
    burn_tflops: float | None
    ecc_volatile_uncorrected: int | None
    ecc_aggregate_uncorrected: int | None
    remapped_rows_correctable: int | None
    remapped_rows_uncorrectable: int | None
    retired_pages_sbe: int | None
    retired_pages_dbe: int | None
    persistence_mode: bool | None
    nvlinks: tuple[CertifiedLink, ...] | None = None
    nvlink_errors: tuple[CertifiedLinkErrors, ...] | None = None
    pcie_replay_count: int | None = None
    recovery_action: str | None = None
    h2d_gb_s: float | None = None
    d2h_gb_s: float | None = None
    hbm_gb_s: float | None = None


@dataclass(frozen=True)
class Certificate:
    """A certified node's defining facts, its digest and optional signature."""

    schema_version: int
    hostname: str
    issued_at: str  # ISO 8601 UTC, seconds
    tool_version: str
    policy_digest: str
    sku: str | None
    driver_version: str | None
    cuda_driver_version: str | None
    kernel_module_version: str | None
    nvcc_version: str | None
    cudnn_version: str | None
    gpus: tuple[CertifiedGpu, ...]
    dcgm: CertifiedDcgm | None = None  # None: no DCGM at certification (or schema 1)
    # None: not measured at certification (or schema 1 and 2).
    peers: tuple[CertifiedPeer, ...] | None = None
    all_reduce: CertifiedAllReduce | None = None
    provenance: str | None = None  # live | capture | simulate | unknown; None: schema 1-3
    certified_gpus: tuple[int, ...] | None = None  # --gpus: those certified; None: all
    network: tuple[CertifiedPort, ...] | None = None  # HCA ports; None: not read (or older)
    gpudirect: CertifiedGpudirect | None = None  # None: not collected (left out when None)
    # The host around the GPUs (validator.certified_host); None: not collected.
    host: CertifiedHost | None = None
    container: CertifiedContainer | None = None  # None: no container toolkit (or older)
    fabric: CertifiedFabric | None = None  # the stage across nodes; None: not asked (or older)
    digest: str = ""  # sha256 hex of canonical_bytes()
    # HMAC-SHA256 hex or "ed25519:" + base64 over canonical_bytes(); None: unsigned.
    signature: str | None = None

    @property
    def holds_interconnect(self) -> bool:
        """True when the certificate's schema records NVLinks, counters, recovery action, DCGM."""
        return self.schema_version >= INTERCONNECT_SCHEMA_VERSION

    @property
    def holds_bandwidth(self) -> bool:
        """True when the certificate's schema records the copy, peer and all-reduce figures."""
        return self.schema_version >= BANDWIDTH_SCHEMA_VERSION

    @property
    def holds_provenance(self) -> bool:
        """True when the certificate's schema records where its facts came from."""
        return self.schema_version >= PROVENANCE_SCHEMA_VERSION

    @property
    def simulated(self) -> bool:
        """True when the certificate was issued for a simulated node."""
        return self.provenance == "simulate"

    @property
    def bandwidth_figures(self) -> int:
        """How many bandwidth figures the certificate holds (0: none measured, or older)."""
        per_gpu = sum(
            1
            for gpu in self.gpus
            for figure in (gpu.h2d_gb_s, gpu.d2h_gb_s, gpu.hbm_gb_s)
            if figure is not None
        )
        return per_gpu + len(self.peers or ()) + (self.all_reduce is not None)

    @property
    def label(self) -> str:
        """How messages name this certificate: host and time of issue, on one line."""
        # An edited certificate can hold any text: a line break here would split an error.
        text = f"certificate of {one_line(self.hostname, 80)} issued {one_line(self.issued_at, 40)}"
        scope = scope_text(self.certified_gpus, len(self.gpus))
        return text if self.certified_gpus is None else f"{text} for {scope}"


# Fields the digest and signature cover: everything but themselves.
_SEAL_FIELDS = frozenset({"digest", "signature"})
# Fields each schema added, on the certificate and on each GPU: an older certificate is
# sealed and written without them, as it was issued.
_ADDED_IN_2 = frozenset({"dcgm"})
_GPU_ADDED_IN_2 = frozenset({"nvlinks", "nvlink_errors", "pcie_replay_count", "recovery_action"})
_ADDED_IN_3 = frozenset({"peers", "all_reduce"})
_GPU_ADDED_IN_3 = frozenset({"h2d_gb_s", "d2h_gb_s", "hbm_gb_s"})
_ADDED_IN_4 = frozenset({"provenance"})
_WHOLE_NODE = frozenset({"certified_gpus"})  # written only for --gpus: older readers refuse it
# Written only where collected (the families beside the GPUs): an older seal stays whole.
_OPTIONAL = frozenset({"network", "gpudirect", "host", "container", "fabric"})


def _value(measured: Measured[T]) -> T | None:
    return None if isinstance(measured, Unavailable) else measured


def _links(gpu: GpuFacts) -> tuple[CertifiedLink, ...] | None:
    links = _value(gpu.nvlinks)
    if links is None:
        return None
    return tuple(CertifiedLink(s.link, s.active, _value(s.speed_gb_s)) for s in links)


def _link_errors(counters: ErrorCounters) -> tuple[CertifiedLinkErrors, ...] | None:
    counts = _value(counters.nvlink_errors)
    if counts is None:
        return None
    return tuple(
        CertifiedLinkErrors(
            link=c.link,
            crc_flit=_value(c.crc_flit),
            crc_data=_value(c.crc_data),
            replay=_value(c.replay),
            recovery=_value(c.recovery),
        )
        for c in counts
    )


def _dcgm(diag: DcgmDiag | None) -> CertifiedDcgm | None:
    """The DCGM results a certified node holds; None when DCGM was not run or gave none."""
    results = None if diag is None else _value(diag.results)
    if diag is None or results is None:
        return None
    return CertifiedDcgm(
        level=diag.level,
        version=_value(diag.version),
        results=tuple(CertifiedDcgmTest(r.test, r.outcome.value, r.gpu_index) for r in results),
    )


def _burned(gpu: GpuFacts, facts: NodeFacts) -> GpuBurn | None:
    """The certification burn-in of ``gpu``, where it completed: matched by index and UUID."""
    burn = facts.burn
    if burn is None or burn.error is not None:
        return None
    for ran in burn.gpus:
        same_board = (
            isinstance(ran.uuid, Unavailable)
            or isinstance(gpu.uuid, Unavailable)
            or ran.uuid == gpu.uuid
        )
        if ran.index == gpu.index and same_board and ran.status is BurnStatus.COMPLETED:
            return ran
    return None


def _counters_certified(gpu: GpuFacts, facts: NodeFacts) -> ErrorCounters:
    """The NVLink and PCIe counters to certify: after the burn-in, else the facts' own.

    Each counter is taken from the burn's reading after it where that was read; the
    facts' reading (before the burn) is the fallback, a lower baseline that can only
    make drift stricter.
    """
    ran = _burned(gpu, facts)
    after = ran.counters_after if ran is not None else ErrorCounters()
    return ErrorCounters(
        pcie_replay_count=(
            after.pcie_replay_count
            if not isinstance(after.pcie_replay_count, Unavailable)
            else gpu.pcie_replay_count
        ),
        nvlink_errors=(
            after.nvlink_errors
            if not isinstance(after.nvlink_errors, Unavailable)
            else gpu.nvlink_errors
        ),
    )


# ------------------------------------------------------------------ bandwidth figures

# Optional, not ``float | None``: an alias is evaluated at import, and 3.9 has no ``|`` on types.
Copies = tuple[Optional[float], Optional[float], Optional[float]]  # H2D, D2H, HBM in GB/s
_NO_COPIES: Copies = (None, None, None)
# A figure whose own check says this did not pass is no baseline (E1's check ids).
_NOT_PASSED = (Severity.FAIL, Severity.UNKNOWN)


def _certifiable(value: float | None) -> float | None:
    """A measured GB/s figure the certificate's fields take back (:func:`_gb_s`); else None.

    Issuing a figure that loading refuses would leave a certificate nobody can verify.
    """
    return value if value is not None and 0 < value <= _BANDWIDTH_MAX_GBS else None


def _figure(bandwidth: Bandwidth) -> float | None:
    """A copy's median where it was measured and certifiable (validator.model.measured_gb_s)."""
    return _certifiable(measured_gb_s(bandwidth))


def _measured(facts: NodeFacts) -> Interconnect | None:
    """The interconnect measurement to certify figures from; None when none ran."""
    interconnect = facts.interconnect
    if interconnect is None or interconnect.error is not None:
        return None
    return interconnect


def _not_passed(result: NodeResult, *checks: str) -> set[int | None]:
    """The GPUs (None: the node as a whole) where one of ``checks`` failed or stayed unknown.

    A node is certified with a check that is not required failing (interconnect not
    required on its SKU): such a figure is no figure to hold the node to later.
    """
    return {
        finding.gpu_index
        for finding in result.findings
        if finding.check in checks and finding.severity in _NOT_PASSED
    }


def _same_board(measured: Measured[str], certified: Measured[str] | None) -> bool:
    """True unless both UUIDs were read and differ (a copy measured on another board)."""
    if certified is None or isinstance(measured, Unavailable) or isinstance(certified, Unavailable):
        return True
    return measured == certified


def _copy_figures(result: NodeResult) -> dict[int, Copies]:
    """Each GPU's certified H2D, D2H and HBM medians, by NVML index.

    Left out: a GPU the idle gate found busy (its figures may be low for that), one
    measured on another board than the facts name, and a figure whose own check
    (``interconnect.h2d`` ...) failed or stayed unknown.
    """
    interconnect = _measured(result.facts)
    if interconnect is None or isinstance(interconnect.gpus, Unavailable):
        return {}
    busy = set(interconnect.busy_gpus)
    uuids = {gpu.index: gpu.uuid for gpu in result.facts.gpus}
    names = ("h2d", "d2h", "hbm")
    failed = {name: _not_passed(result, f"interconnect.{name}") for name in names}
    figures: dict[int, Copies] = {}
    for copy in interconnect.gpus:
        if copy.index in busy or not _same_board(copy.uuid, uuids.get(copy.index)):
            continue
        h2d, d2h, hbm = (
            None if {copy.index, None} & failed[name] else _figure(getattr(copy, name))
            for name in names
        )
        figures[copy.index] = (h2d, d2h, hbm)
    return figures


def _peer_figures(result: NodeResult) -> tuple[CertifiedPeer, ...] | None:
    """Each ordered pair's certified unidirectional bandwidth; None when none was measured.

    Only a pair with peer access, neither GPU busy, and no failing or unknown
    ``interconnect.p2p`` or ``interconnect.peer_access`` finding naming either GPU (or
    the node).
    """
    interconnect = _measured(result.facts)
    if interconnect is None or isinstance(interconnect.peers, Unavailable):
        return None
    left_out: set[int | None] = set(interconnect.busy_gpus)
    left_out |= _not_passed(result, "interconnect.p2p", "interconnect.peer_access")
    if None in left_out:
        return None
    uuids = {gpu.index: _value(gpu.uuid) for gpu in result.facts.gpus}
    certified = []
    for peer in interconnect.peers:
        figure = _figure(peer.unidirectional)
        if peer.access is not True or figure is None or {peer.src, peer.dst} & left_out:
            continue
        certified.append(
            CertifiedPeer(peer.src, peer.dst, uuids.get(peer.src), uuids.get(peer.dst), figure)
        )
    return tuple(certified) or None


def _all_reduce_figure(result: NodeResult) -> CertifiedAllReduce | None:
    """The node's busbw at the largest size measured, where the whole sweep summed right.

    A sweep with a wrong sum at any size (or wrong elements counted over the whole run,
    ``AllReduce.wrong``), over a busy GPU, or whose check failed or stayed unknown is no
    baseline.
    """
    interconnect = _measured(result.facts)
    if interconnect is None or isinstance(interconnect.all_reduce, Unavailable):
        return None
    run = interconnect.all_reduce
    if (
        isinstance(run.points, Unavailable)
        or set(run.gpu_indices) & set(interconnect.busy_gpus)
        or _not_passed(result, "interconnect.all_reduce")
        or run.wrong
        or any(point.wrong for point in run.points)
    ):
        return None
    sized = [p for p in run.points if _certifiable(p.busbw_gb_s) is not None]
    if not sized:
        return None
    largest = max(sized, key=lambda point: point.size_bytes)
    return CertifiedAllReduce(run.ranks, largest.size_bytes, largest.busbw_gb_s)


def _certified_gpu(
    gpu: GpuFacts, facts: NodeFacts, tflops: dict[int, float], copies: Copies
) -> CertifiedGpu:
    counters = _counters_certified(gpu, facts)
    h2d, d2h, hbm = copies
    return CertifiedGpu(
        index=gpu.index,
        uuid=_value(gpu.uuid),
        serial=_value(gpu.serial),
        name=_value(gpu.name),
        vbios_version=_value(gpu.vbios_version),
        memory_total_mib=_value(gpu.memory_total_mib),
        power_limit_enforced_w=_value(gpu.power_limit_enforced_w),
        power_limit_default_w=_value(gpu.power_limit_default_w),
        pcie_gen_max=_value(gpu.pcie_gen_max),
        pcie_width_current=_value(gpu.pcie_width_current),
        burn_tflops=tflops.get(gpu.index),
        ecc_volatile_uncorrected=_value(gpu.ecc_volatile_uncorrected),
        ecc_aggregate_uncorrected=_value(gpu.ecc_aggregate_uncorrected),
        remapped_rows_correctable=_value(gpu.remapped_rows_correctable),
        remapped_rows_uncorrectable=_value(gpu.remapped_rows_uncorrectable),
        retired_pages_sbe=_value(gpu.retired_pages_sbe),
        retired_pages_dbe=_value(gpu.retired_pages_dbe),
        persistence_mode=_value(gpu.persistence_mode),
        nvlinks=_links(gpu),
        nvlink_errors=_link_errors(counters),
        pcie_replay_count=_value(counters.pcie_replay_count),
        recovery_action=_value(gpu.recovery_action),
        h2d_gb_s=h2d,
        d2h_gb_s=d2h,
        hbm_gb_s=hbm,
    )


def issue_certificate(
    result: NodeResult,
    *,
    now: datetime.datetime | None = None,
    tool_version: str = __version__,
) -> Certificate:
    """The certificate of a node judged CERTIFIED, digest filled in, unsigned.

    Args:
        result: the judged node; its facts give the certificate's content.
        now: time of issue (default: now); naive times are taken as UTC.
        tool_version: the gpuready version that judged the node.

    Raises:
        ValueError: the node was not certified; only a certified node gets a certificate.
    """
    if result.verdict is not Verdict.CERTIFIED:
        raise ValueError(
            f"{result.hostname} is {result.verdict.value}, not CERTIFIED: "
            "only a certified node gets a certificate"
        )
    when = now or datetime.datetime.now(datetime.timezone.utc)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    facts = result.facts
    copies = _copy_figures(result)
    tflops: dict[int, float] = {}
    if facts.burn is not None:
        for burn in facts.burn.gpus:
            value = _value(burn.tflops)
            if value is not None:
                tflops[burn.index] = value
    cert = Certificate(
        schema_version=CERTIFICATE_SCHEMA_VERSION,
        hostname=result.hostname,
        issued_at=when.astimezone(datetime.timezone.utc).isoformat(timespec="seconds"),
        tool_version=tool_version,
        policy_digest=result.policy_digest,
        sku=result.sku,
        driver_version=_value(facts.driver_version),
        cuda_driver_version=_value(facts.cuda_driver_version),
        kernel_module_version=_value(facts.kernel_module_version),
        nvcc_version=_value(facts.tools.nvcc_version),
        cudnn_version=_value(facts.tools.cudnn_version),
        gpus=tuple(
            _certified_gpu(gpu, facts, tflops, copies.get(gpu.index, _NO_COPIES))
            for gpu in facts.gpus
        ),
        dcgm=_dcgm(facts.dcgm),
        peers=_peer_figures(result),
        all_reduce=_all_reduce_figure(result),
        provenance=provenance_of(facts),
        certified_gpus=facts.chosen_gpus,
        network=certified_ports(facts.network),
        gpudirect=certified_gpudirect(facts),
        host=certified_host(facts),
        container=certified_container(facts.container),
    )
    return dataclasses.replace(cert, digest=_digest(cert))


def with_fabric(cert: Certificate, fabric: CertifiedFabric | None) -> Certificate:
    """``cert`` with the stage across nodes' word (validator.model.fabric_certified), unsigned."""
    cert = dataclasses.replace(cert, fabric=fabric, signature=None)
    return dataclasses.replace(cert, digest=_digest(cert))


def _drop_unset(data: dict[str, Any], names: frozenset[str]) -> None:
    for name in (name for name in names if data.get(name) is None):
        data.pop(name, None)


def _as_issued(cert: Certificate) -> dict[str, Any]:
    """The certificate as a JSON object, with exactly the fields its schema had.

    An older certificate read today carries the later schemas' fields as None: they are
    left out, so its seal covers the bytes it was issued with (a value there: edited).
    """
    # to_dict, not dataclasses.asdict, which deep-copies every leaf: a certificate
    # holds numbers, strings, None and tuples only, which JSON writes the same either way.
    data: dict[str, Any] = to_dict(cert)
    _drop_unset(data, _WHOLE_NODE)  # a whole node's certificate reads as before --gpus
    _drop_unset(data, _OPTIONAL)
    if not cert.holds_provenance:
        _drop_unset(data, _ADDED_IN_4)
    if not cert.holds_bandwidth:
        _drop_unset(data, _ADDED_IN_3)
        for gpu in data["gpus"]:
            _drop_unset(gpu, _GPU_ADDED_IN_3)
    if not cert.holds_interconnect:
        _drop_unset(data, _ADDED_IN_2)
        for gpu in data["gpus"]:
            _drop_unset(gpu, _GPU_ADDED_IN_2)
    return data


def _content(cert: Certificate) -> dict[str, Any]:
    data = _as_issued(cert)
    for name in _SEAL_FIELDS:
        del data[name]
    return data


def canonical_bytes(cert: Certificate) -> bytes:
    """The bytes the digest and signature cover: sorted keys, no whitespace, seal excluded."""
    return json.dumps(
        _content(cert), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def _digest(cert: Certificate) -> str:
    return hashlib.sha256(canonical_bytes(cert)).hexdigest()


def _same(seal: str, computed: str) -> bool:
    """Constant-time equality of a seal as read with the one computed (hex).

    ``hmac.compare_digest`` refuses ``str`` with non-ASCII characters (TypeError), and an
    edited file can put anything there, a lone surrogate included: compare bytes.
    """
    return hmac.compare_digest(seal.encode("utf-8", "surrogatepass"), computed.encode("ascii"))


def sign(cert: Certificate, key: KeyLike) -> Certificate:
    """The certificate with its digest recomputed and signed with ``key``.

    Args:
        cert: the certificate to seal.
        key: an HMAC secret (bytes, or a SealKey read from a secret file) or an Ed25519
            private key (validator.signing.load_signing_key).

    Raises:
        ValueError: an empty key, which would sign nothing.
        BadInputError: a public key, which cannot sign.
    """
    sealer = as_key(key)
    covered = canonical_bytes(cert)  # the seal is not covered: one encoding serves both
    return dataclasses.replace(
        cert, digest=hashlib.sha256(covered).hexdigest(), signature=sealer.sign(covered)
    )


def certificate_to_json(cert: Certificate) -> str:
    """The certificate as JSON, keys sorted, with a trailing newline.

    One field a line, and a list's items (a GPU, a pair of peers) one a line below it.

    Raises:
        ValueError: a number in it that is not finite.
    """
    data = _as_issued(cert)
    lines = []
    for key in sorted(data):
        value = data[key]
        if isinstance(value, list) and value:
            items = ",\n".join(f"    {_one_line_json(item)}" for item in value)
            lines.append(f"  {json.dumps(key)}: [\n{items}\n  ]")
        else:
            lines.append(f"  {json.dumps(key)}: {_one_line_json(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _one_line_json(value: object) -> str:
    # Not indent=2 all the way down: that takes json's pure-Python encoder (3.8 ms for an
    # 8-GPU certificate, against 1.6 ms for the whole file this way) and spreads one GPU
    # over 150 lines.
    return json.dumps(value, sort_keys=True, allow_nan=False)


# A certificate goes both to its file and to the history store: packed once per object.
_PACKED = PackedPerObject(certificate_to_json)


def packed_certificate(cert: Certificate) -> bytes:
    """:func:`certificate_to_json` packed (validator.packed), encoded once per object."""
    return _PACKED.get(cert)


def certificate_text(cert: Certificate) -> str:
    """:func:`certificate_to_json`, through the packed text (encoded once per object)."""
    return unpack(packed_certificate(cert))


# ---------------------------------------------------------------- decoding
#
# Each field declared once (validator.fields); test_certificate checks that the
# declarations name exactly the dataclasses' fields. Numbers are kept as written: the
# digest covers 700 and 700.0 apart, so a number rewritten in another form fails
# verification too.


def _text(name: str, *, nullable: bool = True) -> Field:
    return Field(name, str, nullable=nullable, required=True)


def _count(name: str) -> Field:
    return Field(name, int, minimum=0, nullable=True, required=True)


def _non_negative(name: str) -> Field:
    """A float at or above 0 (watts, TFLOPS), or null where it was not measured."""
    return Field(name, float, minimum=0.0, nullable=True, required=True)


def _gb_s(name: str, *, nullable: bool = True) -> Field:
    """A bandwidth in GB/s (10^9 bytes/s): finite, above 0 (a measured figure), bounded."""
    return Field(
        name,
        float,
        minimum=0.0,
        above=True,
        maximum=_BANDWIDTH_MAX_GBS,
        finite=True,
        nullable=nullable,
        required=True,
    )


def _added(declared: Field) -> Field:
    """A field a later schema added (2 or 3): absent from an older certificate, not required."""
    return dataclasses.replace(declared, nullable=True, required=False)


def _object(*declared: Field) -> Document:
    """A JSON object of these fields (a certificate, or a part of one)."""
    return Document(declared, noun="field", wanted="a JSON object")


def _list_of(
    name: str, wanted: str, item: str, document: Document, make: Callable[..., Any]
) -> Field:
    """A list of ``document`` objects, each made into ``make``'s dataclass."""
    return Field(
        name,
        list,
        wanted=wanted,
        required=True,
        item=Field(item, dict, document=document),
        convert=lambda items: tuple(make(**each) for each in items),
    )


def _one(make: Callable[..., Any]) -> Callable[[dict[str, Any]], Any]:
    """A decoded JSON object made into ``make``'s dataclass."""
    return lambda data: make(**data)


CERTIFIED_LINK_FIELDS = _object(
    Field("link", int, minimum=0, required=True),
    Field("active", bool, required=True),
    _gb_s("speed_gb_s"),
)

CERTIFIED_LINK_ERRORS_FIELDS = _object(
    Field("link", int, minimum=0, required=True),
    _count("crc_flit"),
    _count("crc_data"),
    _count("replay"),
    _count("recovery"),
)

CERTIFIED_DCGM_TEST_FIELDS = _object(
    Field("test", str, non_empty=True, required=True),
    Field("outcome", str, choices=tuple(o.value for o in DcgmOutcome), required=True),
    Field("gpu_index", int, minimum=0, nullable=True, required=True),
)

CERTIFIED_DCGM_FIELDS = _object(
    Field("level", int, minimum=0, maximum=4, nullable=True, required=True),
    _text("version"),
    _list_of(
        "results",
        "a list of DCGM test results",
        "result",
        CERTIFIED_DCGM_TEST_FIELDS,
        CertifiedDcgmTest,
    ),
)

CERTIFIED_PEER_FIELDS = _object(
    Field("src", int, minimum=0, required=True),
    Field("dst", int, minimum=0, required=True),
    _text("src_uuid"),
    _text("dst_uuid"),
    _gb_s("unidirectional_gb_s", nullable=False),
)

CERTIFIED_ALL_REDUCE_FIELDS = _object(
    Field("ranks", int, minimum=1, required=True),
    Field("size_bytes", int, minimum=1, required=True),
    _gb_s("busbw_gb_s", nullable=False),
)

CERTIFIED_GPU_FIELDS = _object(
    Field("index", int, minimum=0, required=True),
    _text("uuid"),
    _text("serial"),
    _text("name"),
    _text("vbios_version"),
    _count("memory_total_mib"),
    _non_negative("power_limit_enforced_w"),
    _non_negative("power_limit_default_w"),
    _count("pcie_gen_max"),
    _count("pcie_width_current"),
    _non_negative("burn_tflops"),
    _count("ecc_volatile_uncorrected"),
    _count("ecc_aggregate_uncorrected"),
    _count("remapped_rows_correctable"),
    _count("remapped_rows_uncorrectable"),
    _count("retired_pages_sbe"),
    _count("retired_pages_dbe"),
    Field("persistence_mode", bool, nullable=True, required=True),
    _added(_list_of("nvlinks", "a list of NVLinks", "link", CERTIFIED_LINK_FIELDS, CertifiedLink)),
    _added(
        _list_of(
            "nvlink_errors",
            "a list of NVLink error counters",
            "link",
            CERTIFIED_LINK_ERRORS_FIELDS,
            CertifiedLinkErrors,
        )
    ),
    _added(_count("pcie_replay_count")),
    _added(Field("recovery_action", str, non_empty=True)),
    _added(_gb_s("h2d_gb_s")),
    _added(_gb_s("d2h_gb_s")),
    _added(_gb_s("hbm_gb_s")),
)

CERTIFICATE_FIELDS = _object(
    Field("schema_version", int, minimum=1, required=True),
    _text("hostname", nullable=False),
    _text("issued_at", nullable=False),
    _text("tool_version", nullable=False),
    _text("policy_digest", nullable=False),
    _text("sku"),
    _text("driver_version"),
    _text("cuda_driver_version"),
    _text("kernel_module_version"),
    _text("nvcc_version"),
    _text("cudnn_version"),
    _list_of("gpus", "a list of GPUs", "gpu", CERTIFIED_GPU_FIELDS, CertifiedGpu),
    _added(Field("dcgm", dict, document=CERTIFIED_DCGM_FIELDS, convert=_one(CertifiedDcgm))),
    _added(_list_of("peers", "a list of GPU pairs", "pair", CERTIFIED_PEER_FIELDS, CertifiedPeer)),
    _added(
        Field(
            "all_reduce",
            dict,
            document=CERTIFIED_ALL_REDUCE_FIELDS,
            convert=_one(CertifiedAllReduce),
        )
    ),
    _added(Field("provenance", str, choices=(*PROVENANCES, UNKNOWN_PROVENANCE))),
    _added(Field("certified_gpus", list, item=Field("index", int, minimum=0), convert=tuple)),
    _added(NETWORK_FIELD),
    _added(
        Field(
            "gpudirect",
            dict,
            document=CERTIFIED_GPUDIRECT_FIELDS,
            convert=_one(CertifiedGpudirect),
        )
    ),
    _added(Field("host", dict, document=CERTIFIED_HOST_FIELDS, convert=host_from_fields)),
    _added(CERTIFIED_CONTAINER_FIELD),
    _added(FABRIC_FIELD),
    Field("digest", str),
    Field("signature", str, nullable=True),
)


def certificate_from_json(text: str) -> Certificate:
    """A certificate from :func:`certificate_to_json` output (not verified: see verify_certificate).

    Raises:
        CertificateError: (a BadInputError) not JSON, a key given twice, NaN, or not a
            certificate: one line naming the field.
    """
    source = fields.Source("certificate", error=CertificateError)
    try:
        data = fields.load_json(text)
    except fields.LoadError as exc:
        if exc.syntax and exc.line is not None:
            raise CertificateError(
                f"not a certificate: invalid JSON at line {exc.line} column {exc.column}"
            ) from None
        if exc.syntax:
            raise CertificateError(f"not a certificate: {exc.problem}") from None
        raise source.loaded(exc) from None
    if not isinstance(data, dict):
        raise CertificateError("not a certificate: the JSON is not an object")
    version = data.get("schema_version")
    if (
        isinstance(version, int)
        and not isinstance(version, bool)
        and (version > CERTIFICATE_SCHEMA_VERSION)
    ):
        raise CertificateError(
            f"certificate schema {version} was written by a newer gpuready "
            f"(this one reads up to {CERTIFICATE_SCHEMA_VERSION}): upgrade gpuready"
        )
    cert = Certificate(**CERTIFICATE_FIELDS.check(data, source))
    if cert.holds_provenance and cert.provenance is None:
        # Absent only from an older schema: here it was removed, which hides a simulation.
        raise CertificateError(
            f"{cert.label} has no provenance, which schema {cert.schema_version} "
            "certificates hold: it was edited after issue; certify the node again"
        )
    return cert


def verify_certificate(cert: Certificate, key: KeyLike | None) -> str:
    """Check that the certificate is as issued, and signed by ``key`` when one is given.

    The key decides the algorithm, never the certificate: an Ed25519 key checks only an
    Ed25519 signature, so an edited certificate re-signed with HMAC keyed by the public
    key's bytes (anyone has them) is refused, as is one whose signature was removed.

    Args:
        cert: as read back from a file or the store.
        key: an HMAC secret or an Ed25519 key (public or private); None checks the digest
            only, which an unsigned certificate requires.

    Returns:
        What was proved, for the operator: who could have written the certificate.

    Raises:
        SealError: (a CertificateError) one line naming what does not hold: the digest
            does not match (edited after issue), the signature does not match the key or
            is of the other algorithm, or an unsigned certificate checked with a key.
        CertificateError: a signed certificate checked without a key.
    """
    verify_digest(cert)
    checker = None if key is None else as_key(key)
    if cert.signature is None:
        if checker is not None:
            raise SealError(
                f"{cert.label} is not signed, but a key was given: it was issued without "
                "--sign-key, or its signature was removed (and the digest recomputed)"
            )
        return "digest matches; unsigned: proves nothing about who wrote it"
    kind = signature_kind(cert.signature)
    if checker is None:
        if kind is KeyKind.ED25519:
            raise CertificateError(
                f"{cert.label} is signed with Ed25519: give its public key with --public-key"
            )
        raise CertificateError(f"{cert.label} is signed: give the key file with --sign-key")
    if kind is not checker.kind:
        raise SealError(
            f"{cert.label} is signed with {_NAMES[kind]}, but the key given is "
            f"{_KEY_NAMES[checker.kind]}: {_MISMATCH[checker.kind]}"
        )
    if not checker.holds(cert.signature, canonical_bytes(cert)):
        raise SealError(
            f"{cert.label} has a signature that does not match the key: "
            "a different key, or the certificate was edited and re-digested"
        )
    return _proved(checker)


_NAMES = {KeyKind.HMAC: "HMAC-SHA256", KeyKind.ED25519: "Ed25519"}
_KEY_NAMES = {KeyKind.HMAC: "a shared HMAC key", KeyKind.ED25519: "an Ed25519 key"}
_MISMATCH = {
    # An Ed25519 public key is public: an HMAC keyed with it proves nothing.
    KeyKind.ED25519: "an Ed25519 key never checks an HMAC (a downgraded certificate?)",
    KeyKind.HMAC: "give its Ed25519 public key with --public-key",
}


def _proved(key: SealKey) -> str:
    if key.kind is KeyKind.ED25519:
        return f"signed by ED25519 key {key.fingerprint}"
    return "HMAC matches the shared key: anyone holding that key could have written it"


def verify_digest(cert: Certificate) -> None:
    """Check that the certificate's content is what its digest was computed over.

    Raises:
        SealError: the digest does not match: the certificate was edited after issue.
    """
    if not _same(cert.digest, _digest(cert)):
        raise SealError(
            f"{cert.label} was edited after issue: its sha256 digest does not match its content"
        )


def verify_baseline(cert: Certificate, key: KeyLike | None, hostname: str) -> None:
    """Check a stored certificate before drift compares ``hostname`` with it.

    The digest always; the signature when a key is given, and then an unsigned certificate
    fails. Without a key only the digest is checked: whoever can edit the store can
    recompute one, which is what ``--sign-key`` is for. It must be ``hostname``'s own:
    another node's intact certificate copied into this node's row is no baseline.

    Raises:
        CertificateError: one line naming the certificate and what failed.
    """
    if cert.hostname != hostname:
        raise CertificateError(
            f"{cert.label} is taken as the certificate of {one_line(hostname, 80)}: "
            "another node's certificate is no baseline for it"
        )
    verify_seal(cert, key)


def verify_seal(cert: Certificate, key: KeyLike | None) -> None:
    """The digest always; with a key, the signature too (an unsigned certificate fails).

    Raises:
        CertificateError: one line naming the certificate and what failed.
    """
    if key is None:
        verify_digest(cert)
    else:
        verify_certificate(cert, key)
