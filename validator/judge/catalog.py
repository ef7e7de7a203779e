"""The SKU catalog: what each GPU model should report, loaded from ``skus.yaml``.

Rows are matched by the exact product name NVML reports; there is no fuzzy matching,
because guessing the model would judge a GPU against the wrong figures.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

from validator import fields, limits
from validator.error_tree import PolicyError
from validator.fields import Document, Field
from validator.judge import catalog_sources, yamlfile
from validator.judge.catalog_sources import FIGURE_WORDS, FLOOR_WORDS, FigureSource
from validator.judge.host_policy import REFERENCE_HOST_FIELDS, ReferenceHost, reference_host
from validator.judge.network_policy import CATALOG_FIELD as NETWORK_CATALOG_FIELD
from validator.judge.network_policy import NetworkExpectation

PRECISIONS = catalog_sources.PRECISIONS
FORM_FACTORS = ("sxm", "pcie", "nvl", "superchip")
# The GPU counts an all-reduce floor may be given for: a node's GPUs, two or more.
ALL_REDUCE_GPUS = (2, 64)
_DEFAULT_PATH = Path(__file__).with_name("skus.yaml")


@dataclass(frozen=True)
class PeakTflops:
    """Dense vendor peak TFLOPS at boost clock; ``None`` where the precision is unsupported."""

    fp16: float | None
    bf16: float | None
    tf32: float | None
    fp8: float | None
    fp32: float | None

    def of(self, dtype: str) -> float | None:
        """The peak for ``dtype``; None for a precision with none or a name that is none.

        ``dtype`` comes from a node's result: only the five precisions are looked up, so
        a forged ``"__class__"`` or ``"bf16x"`` finds no peak rather than an attribute.
        """
        value = getattr(self, dtype) if dtype in PRECISIONS else None
        return float(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class Sku:
    """One GPU model and the figures a healthy one reports."""

    id: str
    label: str
    names: tuple[str, ...]
    architecture: str
    form_factor: str  # sxm | pcie | nvl | superchip
    memory_mib: int  # memory.total as NVML reports it
    memory_tolerance_mib: int
    memory_verified: bool  # False: estimated, not seen in a real capture
    memory_type: str
    memory_bandwidth_gbs: float
    default_power_w: float
    power_limits_w: tuple[float, ...]  # every default power limit accepted for this SKU
    power_verified: bool
    tdp_w: float
    peak_tflops: PeakTflops
    pcie_gen: int | None  # None: the PCIe link is not judged from the SKU
    pcie_width: int | None
    nvswitch: bool
    nvlinks: int | None  # NVLinks per GPU where the board fixes it
    # Each link's speed, GB/s per direction as `nvidia-smi nvlink -s` prints it; None: not
    # judged (a card whose bridges fix no count, or no figure found).
    nvlink_speed_gbs: float | None
    nvlink_source: str  # where the link count and speed come from, or why there is none
    # Interconnect floors, GB/s of 10^9 bytes (validator/judge/checks/interconnect.py);
    # None: no floor from the SKU (bandwidth_source says why), the node's median judges.
    h2d_min_gbs: float | None  # host to device, pinned memory, copy engine
    d2h_min_gbs: float | None
    hbm_copy_min_gbs: float | None  # a copy within the GPU, bytes read + written per second
    p2p_min_gbs: float | None  # one GPU to another over NVLink, one direction
    # NCCL all-reduce busbw at >= 1 GiB by GPU count, ascending: ((8, 460.0),).
    all_reduce_min_gbs: tuple[tuple[int, float], ...]
    bandwidth_source: str  # where each floor comes from, or why there is none
    source: str
    # Where each stated figure comes from, or why no source confirms it (catalog_sources).
    figure_sources: tuple[FigureSource, ...]
    # The reference system the GPU ships in (a DGX), where a public source states it: its
    # CPUs and memory, judged only where the policy asks (host.reference_system).
    host: ReferenceHost | None = None
    # The reference system's HCAs (validator.judge.network_policy); None: no expectation.
    network: NetworkExpectation | None = None

    def all_reduce_floor(self, gpus: int) -> float | None:
        """The all-reduce busbw floor for a node of ``gpus`` GPUs, or None: none known."""
        return dict(self.all_reduce_min_gbs).get(gpus)

    def unconfirmed(self) -> frozenset[str]:
        """The figures and floors no retrieved source confirms (``peak_tflops.fp8``...)."""
        return catalog_sources.unconfirmed(
            self.figure_sources, self.hbm_copy_min_gbs, self.bandwidth_source
        )

    def figure_note(self, names: tuple[str, ...]) -> str:
        """What a finding judged against ``names`` must say: "" when each is confirmed.

        ``(judged against an unconfirmed catalog figure: the H200 NVL's dense FP16 peak,
        835)``; the reader then knows the verdict rests on a figure no source confirmed.
        """
        doubtful = self.unconfirmed()
        shown = [
            f"{FIGURE_WORDS.get(name) or FLOOR_WORDS[name]}, {self._value(name)}"
            for name in names
            if name in doubtful
        ]
        if not shown:
            return ""
        noun = "figure" if len(shown) == 1 else "figures"
        return f"(judged against an unconfirmed catalog {noun}: the {self.label}'s " + (
            "; ".join(shown) + ")"
        )

    def _value(self, name: str) -> str:
        if name.startswith("peak_tflops."):
            return f"{self.peak_tflops.of(name.partition('.')[2]):g} TFLOPS"
        value = getattr(self, name)
        if name == "all_reduce_min_gbs":
            return ", ".join(f"{floor:g} GB/s on {gpus} GPUs" for gpus, floor in value)
        if isinstance(value, tuple):
            return " or ".join(f"{item:g}" for item in value)
        return f"{value:g}" if isinstance(value, (int, float)) else str(value)


class Catalog:
    """The known SKUs, looked up by id or by exact product name."""

    def __init__(self, skus: tuple[Sku, ...]) -> None:
        self._skus = skus
        self._by_id = {sku.id: sku for sku in skus}
        self._by_name = {name: sku for sku in skus for name in sku.names}
        self._by_folded = {name.casefold(): sku for sku in skus for name in sku.names}

    def all(self) -> tuple[Sku, ...]:
        """Every SKU, in file order."""
        return self._skus

    def match(self, name: str) -> Sku | None:
        """The SKU whose product name is ``name``: exact first, then ignoring case."""
        sku = self._by_name.get(name)
        if sku is None:
            sku = self._by_folded.get(name.casefold())
        return sku

    def get(self, sku_id: str) -> Sku:
        """The SKU with id ``sku_id``.

        Raises:
            PolicyError: when no SKU has that id; the message lists the valid ids.
        """
        try:
            return self._by_id[sku_id]
        except KeyError:
            valid = ", ".join(sorted(self._by_id))
            raise PolicyError(f"unknown SKU id {sku_id!r}; valid ids: {valid}") from None

    def resolve(self, model: str) -> Sku:
        """The SKU named by ``model``: a SKU id or an exact product name.

        Raises:
            PolicyError: when ``model`` is neither; the message lists the valid ids.
        """
        sku = self._by_id.get(model) or self.match(model)
        if sku is None:
            valid = ", ".join(sorted(self._by_id))
            raise PolicyError(
                f"expected_model {model!r} is neither a SKU id nor a product name in the "
                f"catalog; valid ids: {valid}"
            )
        return sku


def load_catalog(path: str | None = None) -> Catalog:
    """Load the SKU catalog; the packaged ``skus.yaml`` by default. Cached per path.

    Raises:
        PolicyError: when the file cannot be read or a row is invalid (naming the row id).
    """
    resolved = Path(path).resolve() if path else _DEFAULT_PATH
    return _load(str(resolved))


@functools.lru_cache(maxsize=8)
def _load(path: str) -> Catalog:
    name = Path(path).name
    try:
        text = limits.read_text(path, limits.DOCUMENT_BYTES)
    except limits.OverLimitError as exc:
        raise PolicyError(f"{path}: cannot read SKU catalog: it {exc}; give a YAML file") from None
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read SKU catalog: {exc.strerror}") from None
    source = fields.Source(name, error=PolicyError)
    try:
        rows, marks = yamlfile.load_located(text)
    except fields.LoadError as exc:
        if not exc.syntax:
            raise source.loaded(exc) from None
        where = f":{exc.line}" if exc.line is not None else ""
        raise PolicyError(
            f"{name}{where}: YAML syntax error in the SKU catalog: {exc.problem}"
        ) from None
    if not isinstance(rows, list):
        raise PolicyError(f"{name}: the SKU catalog must be a list of rows")
    source = dataclasses.replace(source, marks=marks)
    skus: list[Sku] = []
    seen_ids: set[str] = set()
    seen_names: dict[str, str] = {}
    for number, row in enumerate(rows, start=1):
        sku = _parse_row(source, number, row)
        at = source.within(label=f"row {sku.id!r}", base=(number - 1,))
        if sku.id in seen_ids:
            raise at.fail(("id",), "duplicate id")
        seen_ids.add(sku.id)
        for index, product in enumerate(sku.names):
            other = seen_names.get(product.casefold())
            if other is not None:
                raise at.fail(("names", index), f"name {product!r} already belongs to {other!r}")
            seen_names[product.casefold()] = sku.id
        skus.append(sku)
    return Catalog(tuple(skus))


# ---------------------------------------------------------------- declarations


def _text(name: str) -> Field:
    return Field(name, str, non_empty=True, required=True)


def _flag(name: str) -> Field:
    return Field(name, bool, required=True)


def _mib(name: str) -> Field:
    return Field(name, int, minimum=0, wanted="a whole number >= 0", required=True)


def _positive(name: str, *, nullable: bool = False) -> Field:
    return Field(
        name,
        float,
        minimum=0.0,
        above=True,
        wanted="a positive number or null" if nullable else "a positive number",
        nullable=nullable,
        required=True,
        convert=float,
    )


def _link(name: str, high: int) -> Field:
    return Field(
        name,
        int,
        minimum=1,
        maximum=high,
        wanted=f"a whole number 1-{high} or null",
        nullable=True,
        required=True,
    )


_ALL_REDUCE_WANTED = (
    f"a mapping of GPU counts ({ALL_REDUCE_GPUS[0]}-{ALL_REDUCE_GPUS[1]}) to busbw GB/s, "
    "like {8: 460}, or null"
)


def _gpu_count_floors(floors: dict[object, float]) -> tuple[tuple[int, float], ...]:
    """``{8: 460}`` as ``((8, 460.0),)``; a key that is no GPU count is refused at that key."""
    low, high = ALL_REDUCE_GPUS
    counted: list[tuple[int, float]] = []
    for key, floor in floors.items():
        if not isinstance(key, int) or isinstance(key, bool) or not low <= key <= high:
            raise fields.Invalid(key, at=(str(key),), wanted=_ALL_REDUCE_WANTED)
        counted.append((key, floor))
    return tuple(sorted(counted))


_TFLOPS = Document(tuple(_positive(p, nullable=True) for p in PRECISIONS))

ROW_FIELDS = Document(
    (
        _text("id"),
        _text("label"),
        Field(
            "names",
            list,
            wanted="a non-empty list of product names",
            non_empty=True,
            required=True,
            item=Field("name", str, non_empty=True, wanted="a product name"),
            convert=tuple,
        ),
        _text("architecture"),
        Field("form_factor", str, choices=FORM_FACTORS, required=True),
        _mib("memory_mib"),
        _mib("memory_tolerance_mib"),
        _flag("memory_verified"),
        _text("memory_type"),
        _positive("memory_bandwidth_gbs"),
        _positive("default_power_w"),
        Field(
            "power_limits_w",
            list,
            wanted="a non-empty list of watts",
            non_empty=True,
            required=True,
            item=_positive("watts"),
            convert=tuple,
        ),
        _flag("power_verified"),
        _positive("tdp_w"),
        Field(
            "peak_tflops",
            dict,
            wanted="a mapping with keys " + ", ".join(PRECISIONS),
            required=True,
            document=_TFLOPS,
        ),
        _link("pcie_gen", 6),
        _link("pcie_width", 32),
        _flag("nvswitch"),
        _link("nvlinks", 64),
        _positive("nvlink_speed_gbs", nullable=True),
        _text("nvlink_source"),
        _positive("h2d_min_gbs", nullable=True),
        _positive("d2h_min_gbs", nullable=True),
        _positive("hbm_copy_min_gbs", nullable=True),
        _positive("p2p_min_gbs", nullable=True),
        Field(
            "all_reduce_min_gbs",
            dict,
            wanted=_ALL_REDUCE_WANTED,
            non_empty=True,
            nullable=True,
            required=True,
            values=_positive("busbw"),
            convert=_gpu_count_floors,
        ),
        _text("bandwidth_source"),
        _text("source"),
        catalog_sources.FIELD,
        Field("host", dict, nullable=True, document=REFERENCE_HOST_FIELDS, convert=reference_host),
        NETWORK_CATALOG_FIELD,
    )
)


def _parse_row(source: fields.Source, number: int, data: object) -> Sku:
    at = source.within(base=(number - 1,))
    if not isinstance(data, dict):
        raise at.fail((), f"row {number} is not a mapping")
    row_id = data.get("id")
    if not isinstance(row_id, str) or not row_id:
        raise at.fail((), f"row {number} has no 'id'")
    at = at.within(label=f"row {row_id!r}")
    values = ROW_FIELDS.check(data, at)
    if values["default_power_w"] not in values["power_limits_w"]:
        raise at.wrong(("default_power_w",), "one of power_limits_w", data["default_power_w"])
    if values["nvlink_speed_gbs"] is not None and values["nvlinks"] is None:
        # A speed without a count would judge the links of a card whose bridges are optional.
        raise at.wrong(
            ("nvlink_speed_gbs",), "null where nvlinks is null", data["nvlink_speed_gbs"]
        )
    _check_peer_floors(at, data, values)
    values["figure_sources"] = catalog_sources.parse(at, values["figure_sources"], values)
    values["all_reduce_min_gbs"] = values["all_reduce_min_gbs"] or ()
    values["peak_tflops"] = PeakTflops(
        **{key: values["peak_tflops"].get(key) for key in PRECISIONS}
    )
    return Sku(**values)


def _check_peer_floors(
    at: fields.Source, data: dict[str, object], values: dict[str, object]
) -> None:
    """Peer floors only where the board fixes the NVLinks.

    Between PCIe cards (or cards some bridge joins) peer copies and all-reduce run over
    whatever the platform offers: a floor from the SKU would judge the server, not the GPU.
    """
    if values["nvlinks"] is not None:
        return
    for name in ("p2p_min_gbs", "all_reduce_min_gbs"):
        if values[name] is not None:
            raise at.wrong((name,), "null where nvlinks is null", data[name])
