"""The SKU catalog: what each GPU model should report, loaded from ``skus.yaml``.

Rows are matched by the exact product name NVML reports; there is no fuzzy matching,
because guessing the model would judge a GPU against the wrong figures.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from validator.errors import PolicyError
from validator.judge import yamlfile

FORM_FACTORS = ("sxm", "pcie", "nvl", "superchip")
_PRECISIONS = ("fp16", "bf16", "tf32", "fp8", "fp32")
_DEFAULT_PATH = Path(__file__).with_name("skus.yaml")


@dataclass(frozen=True)
class PeakTflops:
    """Dense vendor peak TFLOPS at boost clock; ``None`` where the precision is unsupported."""

    fp16: float | None
    bf16: float | None
    tf32: float | None
    fp8: float | None
    fp32: float | None


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
    source: str


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
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read SKU catalog: {exc.strerror}") from None
    try:
        rows = yamlfile.load(text)
    except yamlfile.YAMLError as exc:
        line = yamlfile.error_line(exc)
        where = f":{line}" if line is not None else ""
        raise PolicyError(
            f"{name}{where}: YAML syntax error in the SKU catalog: {yamlfile.error_problem(exc)}"
        ) from None
    if not isinstance(rows, list):
        raise PolicyError(f"{name}: the SKU catalog must be a list of rows")
    skus: list[Sku] = []
    seen_ids: set[str] = set()
    seen_names: dict[str, str] = {}
    for number, row in enumerate(rows, start=1):
        sku = _parse_row(name, number, row)
        if sku.id in seen_ids:
            raise PolicyError(f"{name}: row {sku.id!r}: duplicate id")
        seen_ids.add(sku.id)
        for product in sku.names:
            other = seen_names.get(product.casefold())
            if other is not None:
                raise PolicyError(
                    f"{name}: row {sku.id!r}: name {product!r} already belongs to {other!r}"
                )
            seen_names[product.casefold()] = sku.id
        skus.append(sku)
    return Catalog(tuple(skus))


class _Row:
    """Typed access to one YAML row; every error names the file and row id."""

    def __init__(self, file: str, row_id: str, data: dict[str, Any]) -> None:
        self.file = file
        self.row_id = row_id
        self.data = data

    def fail(self, key: str, wanted: str) -> PolicyError:
        value = self.data.get(key)
        return PolicyError(
            f"{self.file}: row {self.row_id!r}: {key!r} must be {wanted}, got {value!r}"
        )

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if not isinstance(value, str) or not value:
            raise self.fail(key, "a non-empty string")
        return value

    def integer(self, key: str) -> int:
        value = self.data.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(key, "a whole number >= 0")
        return value

    def optional_integer(self, key: str) -> int | None:
        if self.data.get(key) is None:
            return None
        value = self.data.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(key, "a whole number > 0 or null")
        return value

    def number(self, key: str) -> float:
        value = self.data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise self.fail(key, "a positive number")
        return float(value)

    def flag(self, key: str) -> bool:
        value = self.data.get(key)
        if not isinstance(value, bool):
            raise self.fail(key, "true or false")
        return value


_ROW_KEYS = frozenset(
    {
        "id",
        "label",
        "names",
        "architecture",
        "form_factor",
        "memory_mib",
        "memory_tolerance_mib",
        "memory_verified",
        "memory_type",
        "memory_bandwidth_gbs",
        "default_power_w",
        "power_limits_w",
        "power_verified",
        "tdp_w",
        "peak_tflops",
        "pcie_gen",
        "pcie_width",
        "nvswitch",
        "nvlinks",
        "source",
    }
)


def _parse_row(file: str, number: int, data: object) -> Sku:
    if not isinstance(data, dict):
        raise PolicyError(f"{file}: row {number} is not a mapping")
    row_id = data.get("id")
    if not isinstance(row_id, str) or not row_id:
        raise PolicyError(f"{file}: row {number} has no 'id'")
    row = _Row(file, row_id, data)
    extra = sorted(set(data) - _ROW_KEYS)
    if extra:
        raise PolicyError(f"{file}: row {row_id!r}: unknown key {extra[0]!r}")
    missing = sorted(_ROW_KEYS - set(data))
    if missing:
        raise PolicyError(f"{file}: row {row_id!r}: missing key {missing[0]!r}")

    names = data["names"]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise row.fail("names", "a non-empty list of product names")
    form_factor = row.text("form_factor")
    if form_factor not in FORM_FACTORS:
        raise row.fail("form_factor", "one of " + ", ".join(FORM_FACTORS))
    limits = data["power_limits_w"]
    if (
        not isinstance(limits, list)
        or not limits
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in limits)
    ):
        raise row.fail("power_limits_w", "a non-empty list of watts")
    default_power = row.number("default_power_w")
    if default_power not in [float(v) for v in limits]:
        raise row.fail("default_power_w", "one of power_limits_w")
    return Sku(
        id=row_id,
        label=row.text("label"),
        names=tuple(names),
        architecture=row.text("architecture"),
        form_factor=form_factor,
        memory_mib=row.integer("memory_mib"),
        memory_tolerance_mib=row.integer("memory_tolerance_mib"),
        memory_verified=row.flag("memory_verified"),
        memory_type=row.text("memory_type"),
        memory_bandwidth_gbs=row.number("memory_bandwidth_gbs"),
        default_power_w=default_power,
        power_limits_w=tuple(float(v) for v in limits),
        power_verified=row.flag("power_verified"),
        tdp_w=row.number("tdp_w"),
        peak_tflops=_parse_tflops(row),
        pcie_gen=row.optional_integer("pcie_gen"),
        pcie_width=row.optional_integer("pcie_width"),
        nvswitch=row.flag("nvswitch"),
        nvlinks=row.optional_integer("nvlinks"),
        source=row.text("source"),
    )


def _parse_tflops(row: _Row) -> PeakTflops:
    data = row.data["peak_tflops"]
    if not isinstance(data, dict) or set(data) != set(_PRECISIONS):
        raise row.fail("peak_tflops", "a mapping with keys " + ", ".join(_PRECISIONS))
    values: dict[str, float | None] = {}
    for key in _PRECISIONS:
        value = data[key]
        if value is None:
            values[key] = None
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise row.fail("peak_tflops", f"positive numbers or null ({key}={value!r})")
        else:
            values[key] = float(value)
    return PeakTflops(**values)
