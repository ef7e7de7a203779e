"""The fabric catalog: floors between nodes, each with its source or why unconfirmed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from validator.error_tree import PolicyError
from validator.judge.fabric_catalog import (
    FABRIC_FIGURES,
    NODE_FIGURES,
    load_fabric_catalog,
)

PACKAGED = Path(__file__).resolve().parents[2] / "validator" / "judge" / "fabrics.yaml"


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "fabrics.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


GOOD_FIGURE = "{value: 380, source: 'Azure conf: check_ib_bw_gdr 380'}"
NO_FIGURE = "{value: null, unconfirmed: 'no source'}"


def _fabric(**figures: str) -> str:
    values = dict.fromkeys(FABRIC_FIGURES, GOOD_FIGURE) | figures
    lines = "".join(f"    {name}: {value}\n" for name, value in values.items())
    lines += (
        "    nccl_all_reduce_min_gbs_per_hca:\n      - {min_nodes: 2, largest_min_gib: 4,"
        " largest_max_gib: 16, value: 46, source: 'https://example.org'}\n"
    )
    return (
        "fabrics:\n  - id: ndr\n    label: NDR\n    link: infiniband\n    rate_gbit_s: 400\n"
        + lines
        + "node_references: []\n"
    )


def test_packaged_catalog_states_the_brief_figures_with_sources() -> None:
    catalog = load_fabric_catalog()
    ndr = catalog.fabric("ndr-400-ib")
    assert ndr.ib_write_bw_gdr_min_gbit_s.value == 380
    assert "check_ib_bw_gdr 380" in ndr.ib_write_bw_gdr_min_gbit_s.source
    assert ndr.nccl_floor(8).figure.value == 46  # type: ignore[union-attr]
    assert "48-49GB/s per NIC" in ndr.nccl_floor(8).figure.source  # type: ignore[union-attr]
    hdr = catalog.fabric("hdr-200-ib")
    assert hdr.ib_write_bw_gdr_min_gbit_s.value == 185
    h100 = catalog.node_reference("h100-sxm-8")
    assert h100.all_reduce_typical_gbs.value == 480
    assert "~480GB/s" in h100.all_reduce_typical_gbs.source


def test_every_figure_is_sourced_or_says_why_not() -> None:
    catalog = load_fabric_catalog()
    figures = [fabric.figure(name) for fabric in catalog.fabrics for name in FABRIC_FIGURES]
    figures += [getattr(ref, name) for ref in catalog.node_references for name in NODE_FIGURES]
    figures += [row.figure for f in catalog.fabrics for row in f.nccl_all_reduce_min_gbs_per_hca]
    for figure in figures:
        assert bool(figure.source) != bool(figure.unconfirmed)
        if figure.value is None:
            assert figure.unconfirmed  # no floor stated: the fleet's median judges
        if figure.source:  # a source is an address or a repository path at a commit
            assert re.search(r"https://|@[0-9a-f]{40}", figure.source), figure.source


def test_unconfirmed_figures_are_the_ones_no_source_states() -> None:
    ndr = load_fabric_catalog().fabric("ndr-400-ib")
    assert not ndr.ib_write_lat_max_us.confirmed
    assert ndr.nccl_alltoall_min_gbs_per_hca.value is None


def test_unknown_ids_name_the_valid_ones() -> None:
    with pytest.raises(PolicyError, match="valid ids: ndr-400-ib, hdr-200-ib, roce-400"):
        load_fabric_catalog().fabric("xdr")
    with pytest.raises(KeyError):
        load_fabric_catalog().fabric("ndr-400-ib").figure("label")


def test_a_figure_with_both_source_and_unconfirmed_is_refused(tmp_path: Path) -> None:
    both = "{value: 1, source: 'x', unconfirmed: 'y'}"
    path = _write(tmp_path, _fabric(ib_write_lat_max_us=both))
    with pytest.raises(PolicyError, match=r"fabrics.yaml, line \d+.*exactly one of 'source'"):
        load_fabric_catalog(path)


def test_a_figure_with_neither_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="exactly one of"):
        load_fabric_catalog(_write(tmp_path, _fabric(ib_write_lat_max_us="{value: 1}")))


def test_a_sourced_figure_without_a_value_is_refused(tmp_path: Path) -> None:
    text = _fabric(ib_write_lat_max_us="{value: null, source: 'somewhere'}")
    with pytest.raises(PolicyError, match="unconfirmed"):
        load_fabric_catalog(_write(tmp_path, text))


@pytest.mark.parametrize(
    ("figure", "words"),
    [
        ("{value: -1, source: 'x'}", "must be a number > 0"),
        ("{value: .nan, source: 'x'}", "must be a number > 0"),
        ("{value: '380', source: 'x'}", "must be a number > 0"),
        ("{value: 1, sauce: 'x'}", "unknown key .*did you mean 'source'"),
    ],
)
def test_bad_values_are_one_line_errors(tmp_path: Path, figure: str, words: str) -> None:
    path = _write(tmp_path, _fabric(ib_write_bw_gdr_min_gbit_s=figure))
    with pytest.raises(PolicyError, match=words) as raised:
        load_fabric_catalog(path)
    assert "\n" not in str(raised.value)


def test_a_missing_figure_is_refused(tmp_path: Path) -> None:
    text = _fabric().replace(f"    ib_write_lat_max_us: {GOOD_FIGURE}\n", "")
    with pytest.raises(PolicyError, match=r"lacks the key .*ib_write_lat_max_us"):
        load_fabric_catalog(_write(tmp_path, text))


def test_unknown_link_and_duplicate_ids_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="one of infiniband, roce"):
        load_fabric_catalog(_write(tmp_path, _fabric().replace("infiniband", "omnipath")))
    text = _fabric()
    row = text[len("fabrics:\n") : text.index("node_references")]
    doubled = "fabrics:\n" + row + row + "node_references: []\n"
    with pytest.raises(PolicyError, match="duplicate id 'ndr'"):
        load_fabric_catalog(_write(tmp_path / ".." / tmp_path.name, doubled))


def test_yaml_trouble_is_named(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="YAML syntax error"):
        load_fabric_catalog(_write(tmp_path, "fabrics: [\n"))
    with pytest.raises(PolicyError, match="cannot read"):
        load_fabric_catalog(str(tmp_path / "absent.yaml"))


def test_no_floor_is_accepted_when_unconfirmed(tmp_path: Path) -> None:
    catalog = load_fabric_catalog(_write(tmp_path, _fabric(ib_write_lat_max_us=NO_FIGURE)))
    assert catalog.fabric("ndr").ib_write_lat_max_us.value is None
    assert PACKAGED.is_file()
