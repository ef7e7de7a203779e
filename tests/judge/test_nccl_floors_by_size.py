"""NCCL floors across nodes, one per group size and for a range of largest messages.

busbw across nodes depends on how many nodes take part (two nodes: NCCL's tree and
NVLink SHARP go beyond one NIC's figure; three and more: ring, towards the per-NIC
figure) and on the largest message (below the plateau it is lower): one floor for every
group size and message, as before, judged a run it was never stated for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from validator.error_tree import PolicyError
from validator.judge.cross_node_judge import nccl_floor_problem, stage_floor
from validator.judge.fabric_catalog import load_fabric_catalog

GIB = 1 << 30
_FIGURE = "{value: 380, source: 'https://example.org/x'}"


def _catalog(tmp_path: Path, rows: str) -> str:
    text = (
        "fabrics:\n  - id: ndr\n    label: NDR\n    link: infiniband\n    rate_gbit_s: 400\n"
        f"    ib_write_bw_gdr_min_gbit_s: {_FIGURE}\n"
        f"    ib_write_lat_max_us: {_FIGURE}\n"
        f"    nccl_alltoall_min_gbs_per_hca: {_FIGURE}\n"
        f"    nccl_all_reduce_min_gbs_per_hca:\n{rows}"
        "node_references: []\n"
    )
    path = tmp_path / "fabrics.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _row(nodes: int, value: float, low: float = 4, high: float = 16) -> str:
    return (
        f"      - {{min_nodes: {nodes}, largest_min_gib: {low}, largest_max_gib: {high},"
        f" value: {value}, source: 'https://example.org/{nodes}'}}\n"
    )


def test_the_packaged_floors_are_keyed_by_group_size_with_sources() -> None:
    for fabric_id in ("ndr-400-ib", "hdr-200-ib", "roce-400"):
        fabric = load_fabric_catalog().fabric(fabric_id)
        rows = fabric.nccl_all_reduce_min_gbs_per_hca
        assert [row.min_nodes for row in rows] == [2, 4], fabric_id
        for row in rows:
            assert bool(row.figure.source) != bool(row.figure.unconfirmed)
            assert row.largest_min_gib <= 16 <= row.largest_max_gib
    ndr = load_fabric_catalog().fabric("ndr-400-ib")
    four = ndr.nccl_floor(4)
    assert four is not None
    assert four.figure.value == 46
    assert "48-49GB/s per NIC" in four.figure.source
    two = ndr.nccl_floor(2)
    assert two is not None
    assert "tree" in (two.figure.source + two.figure.unconfirmed).lower()


def test_the_nearest_not_larger_size_row_judges(tmp_path: Path) -> None:
    path = _catalog(tmp_path, _row(4, 40) + _row(2, 50))
    fabric = load_fabric_catalog(path).fabric("ndr")
    assert [r.min_nodes for r in fabric.nccl_all_reduce_min_gbs_per_hca] == [2, 4]
    assert fabric.nccl_floor(2).figure.value == 50  # type: ignore[union-attr]
    assert fabric.nccl_floor(3).figure.value == 50  # type: ignore[union-attr]
    assert fabric.nccl_floor(8).figure.value == 40  # type: ignore[union-attr]
    assert stage_floor(fabric, "nccl", [], nodes=8)[0] == 40
    assert stage_floor(fabric, "nccl", [], nodes=2)[0] == 50


def test_no_row_for_the_size_is_a_named_problem_never_a_floor(tmp_path: Path) -> None:
    fabric = load_fabric_catalog(_catalog(tmp_path, _row(4, 40))).fabric("ndr")
    assert fabric.nccl_floor(2) is None
    why = nccl_floor_problem(fabric, (8, 4, 2), (16 * GIB,))
    assert why is not None
    assert "groups of 2 nodes" in why
    assert "NDR" in why
    assert nccl_floor_problem(fabric, (8, 4), (16 * GIB,)) is None
    # no row: no catalog floor, even with a fleet to judge by
    assert stage_floor(fabric, "nccl", [], nodes=2)[0] == 0.0


def test_a_message_outside_the_rows_range_is_a_named_problem(tmp_path: Path) -> None:
    fabric = load_fabric_catalog(_catalog(tmp_path, _row(2, 46, 4, 16))).fabric("ndr")
    assert nccl_floor_problem(fabric, (2,), (8 * GIB, 16 * GIB)) is None
    why = nccl_floor_problem(fabric, (4, 2), (2 * GIB, 16 * GIB))
    assert why is not None
    assert "2G" in why
    assert "4-16 GiB" in why
    packaged = load_fabric_catalog().fabric("ndr-400-ib")
    assert nccl_floor_problem(packaged, (8, 4, 2), (16 * GIB,)) is None


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        (_row(1, 46), "min_nodes"),
        (_row(2, 46) + _row(2, 40), "duplicate min_nodes 2"),
        (_row(2, 46, 16, 4), "largest_min_gib .* above largest_max_gib"),
        ("      []\n", "at least one"),
    ],
)
def test_bad_rows_are_one_line_errors(tmp_path: Path, rows: str, words: str) -> None:
    with pytest.raises(PolicyError, match=words) as raised:
        load_fabric_catalog(_catalog(tmp_path, rows))
    assert "\n" not in str(raised.value)
