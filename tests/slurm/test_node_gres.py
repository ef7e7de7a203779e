"""GPU GRES per node from ``scontrol show node``, on real recordings (tests/fixtures/slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from validator.slurm.node_gres import gres_gpus, parse_node_gpus

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_eight_gpus_declared_in_the_multi_line_form() -> None:
    found = parse_node_gpus(_read("scontrol-show-node-public-gres-gpu8.txt"))
    assert found == {"cluster-h100-9-78": 8, "cluster-h100-9-69": 8}


def test_a_typed_gres_with_its_sockets_is_counted() -> None:
    found = parse_node_gpus(_read("scontrol-show-node-public-gres-typed.txt"))
    assert found == {"esc8000a-1": 1}


def test_the_test_clusters_nodes_declare_none() -> None:
    # scontrol -o (one line a node), Slurm 22.05.8: Gres=(null)
    lines = [_read(f"scontrol-show-node-{state}.txt") for state in ("idle", "drained")]
    assert parse_node_gpus("".join(lines)) == {"node01": 0, "node02": 0}


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:8", 8),
        ("gpu:8(S:0-1)", 8),
        ("gpu:h100:8(S:0-1)", 8),
        ("gpu:a100:4(S:0),gpu:v100:2(S:1)", 6),
        ("gpu:4,mps:400", 4),
        ("mps:400", 0),
        ("gpu", 1),
        ("(null)", 0),
        ("", 0),
        ("gpu:nvidia_h100_80gb_hbm3_3g.40gb:2", 2),
    ],
)
def test_gres_words(gres: str, gpus: int) -> None:
    assert gres_gpus(gres) == gpus
