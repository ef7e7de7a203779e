"""Every catalog figure is sourced or marked unconfirmed (skus.yaml's figure_sources)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from validator.error_tree import PolicyError
from validator.judge.catalog import load_catalog
from validator.judge.catalog_sources import FIGURE_WORDS

CATALOG = Path(__file__).resolve().parents[2] / "validator" / "judge" / "skus.yaml"


def _stated(sku: object) -> set[str]:
    """The figures a row states, read off the Sku itself (not the parser's own list)."""
    named = set()
    for name in FIGURE_WORDS:
        if name.startswith("peak_tflops."):
            value = sku.peak_tflops.of(name.partition(".")[2])  # type: ignore[attr-defined]
        else:
            value = getattr(sku, name)
        if value is not None:
            named.add(name)
    return named


@pytest.mark.parametrize("sku", load_catalog().all(), ids=lambda sku: sku.id)
def test_every_figure_is_sourced_or_marked_unconfirmed(sku: object) -> None:
    groups = sku.figure_sources  # type: ignore[attr-defined]
    named = [name for group in groups for name in group.figures]
    assert sorted(named) == sorted(_stated(sku)), "each stated figure in exactly one group"
    for group in groups:
        if group.confirmed:
            # A source is a capture or a page by its address, never a bare recollection.
            assert "capture" in group.source or re.search("https?://", group.source), group
            assert "recalled" not in group.source, group
        else:
            assert len(group.source) > 20, group  # says why


def test_no_recalled_figure_is_left_unmarked() -> None:
    """The old "[D] recalled, not re-fetched" marks are gone; "recalled" only says why not."""
    text = CATALOG.read_text()
    assert "[D]" not in text
    assert "re-fetched" not in text
    for line in text.splitlines():
        if "recalled" in line:
            assert line.lstrip().startswith("unconfirmed:") or "unconfirmed" in line, line


def test_the_catalog_points_at_nothing_a_clone_lacks() -> None:
    assert "shared/" not in CATALOG.read_text()


def test_estimated_memory_is_the_unconfirmed_memory() -> None:
    """memory.capacity says "estimate" from memory_verified: it must agree with the sources."""
    for sku in load_catalog().all():
        assert ("memory_mib" in sku.unconfirmed()) == (not sku.memory_verified), sku.id


def test_the_recheck_outcome() -> None:
    """What the re-check found, per row: these figures rest on no NVIDIA document found."""
    doubtful = {sku.id: sku.unconfirmed() - {"memory_mib"} for sku in load_catalog().all()}
    tensor = {"peak_tflops.fp16", "peak_tflops.bf16", "peak_tflops.tf32"}
    assert doubtful["a10"] == tensor
    assert doubtful["a30"] == tensor
    assert doubtful["h100-nvl"] == tensor | {"peak_tflops.fp8", "peak_tflops.fp32"}
    assert doubtful["h200-nvl"] == tensor | {"peak_tflops.fp8", "peak_tflops.fp32"}
    # NVIDIA's GH200 and Blackwell datasheets confirm these rows' peaks and bandwidths.
    for sku_id in ("gh200", "b200", "gb200", "v100-sxm2-16gb", "t4", "a40", "h100-pcie"):
        assert doubtful[sku_id] == set(), sku_id
    for sku_id in ("h200-sxm", "l4"):
        assert doubtful[sku_id] == set(), sku_id
    # Only these four rows keep a doubtful figure besides an estimated memory size.
    assert {sku_id for sku_id, names in doubtful.items() if names} == {
        "a10",
        "a30",
        "h100-nvl",
        "h200-nvl",
    }


def test_nvidias_blackwell_datasheet_corrected_b200_and_gb200() -> None:
    """HGX B200: 75 TFLOPS FP32 at 7.7 TB/s (80 and 8 TB/s are the GB200's, whose row said 90)."""
    catalog = load_catalog()
    b200, gb200 = catalog.get("b200"), catalog.get("gb200")
    assert (b200.peak_tflops.fp32, b200.memory_bandwidth_gbs) == (75, 7700)
    assert (gb200.peak_tflops.fp32, gb200.memory_bandwidth_gbs) == (80, 8000)
    assert b200.hbm_copy_min_gbs == round(7700 * 1905 / 3350)
    for sku in (b200, gb200):
        group = next(g for g in sku.figure_sources if "memory_bandwidth_gbs" in g.figures)
        assert group.confirmed, sku.id
        assert "Blackwell datasheet, document 3384703" in group.source, sku.id


def test_h100_pcie_dense_fp16_is_half_the_datasheets_sparse_figure() -> None:
    peak = load_catalog().get("h100-pcie").peak_tflops
    assert peak.fp16 == peak.bf16 == 1513 / 2


def test_a_note_names_the_row_the_figure_and_its_value() -> None:
    catalog = load_catalog()
    note = catalog.get("h100-nvl").figure_note(("peak_tflops.bf16",))
    assert note == (
        "(judged against an unconfirmed catalog figure: the H100 NVL's dense BF16 peak, 835 TFLOPS)"
    )
    assert catalog.get("h100-sxm").figure_note(("peak_tflops.bf16",)) == ""
    assert catalog.get("h100-nvl").figure_note(("hbm_copy_min_gbs",)) == ""


# The H100 NVL's bandwidth rests on a third-party page; marked unconfirmed, its HBM floor is too.
NVL_BANDWIDTH = '      from: "https://www.aiminingco.com/gpu/h100-nvl/specs'
NVL_DOUBTED = '      unconfirmed: "https://www.aiminingco.com/gpu/h100-nvl/specs'


def test_a_floor_derived_from_an_unconfirmed_bandwidth_is_noted_too(tmp_path: Path) -> None:
    text = CATALOG.read_text()
    assert text.count(NVL_BANDWIDTH) == 1
    path = tmp_path / "skus.yaml"
    path.write_text(text.replace(NVL_BANDWIDTH, NVL_DOUBTED))
    nvl = load_catalog(str(path)).get("h100-nvl")
    assert {"memory_bandwidth_gbs", "hbm_copy_min_gbs"} <= nvl.unconfirmed()
    assert nvl.figure_note(("hbm_copy_min_gbs",)).endswith("the H100 NVL's HBM copy floor, 2218)")


def _row_error(tmp_path: Path, old: str, new: str) -> str:
    text = CATALOG.read_text()
    assert old in text, old
    path = tmp_path / "skus.yaml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(PolicyError) as caught:
        load_catalog(str(path))
    return str(caught.value)


_T4 = (
    "  figure_sources:\n    - figures: [memory_mib, power_limits_w, pcie_gen, pcie_width]\n"
    '      from: "capture nvidia-smi-xml/telegraf-tesla-t4.xml'
)


@pytest.mark.parametrize(
    ("new", "problem"),
    [
        (
            _T4.replace("memory_mib, ", ""),
            r"row 't4': 'figure_sources' names no source for memory_mib",
        ),
        (
            _T4.replace("pcie_width]", "pcie_width, memory_mib]"),
            r"row 't4': figure 'memory_mib' is named twice",
        ),
        (
            _T4.replace("pcie_width]", "pcie_width, peak_tflops.fp8]"),
            r"row 't4': figure 'peak_tflops.fp8' is null in this row",
        ),
        (
            _T4.replace("pcie_width]", "pcie_width, nvswich]"),
            r"row 't4': 'figure_sources\[0\]\.figures\[4\]' must be one of .*got 'nvswich'",
        ),
        (
            _T4.replace("      from:", '      unconfirmed: "why"\n      from:'),
            r"row 't4': give either 'from' \(a source\) or 'unconfirmed' \(why\), not both",
        ),
    ],
)
def test_a_bad_figure_source_is_one_line_naming_the_row(
    tmp_path: Path, new: str, problem: str
) -> None:
    message = _row_error(tmp_path, _T4, new)
    assert "\n" not in message
    assert re.search(r"skus\.yaml, line \d+", message), message
    assert re.search(problem, message), message
