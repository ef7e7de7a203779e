"""bench/cross_node_scale.py at a small size: every fault found in about log2 rounds.

The bench drives the real planner (validator.remote.pair_plan) over modelled fabrics at
1,000 and 10,000 nodes; here it runs small, over many drawn fabrics (a fixed seed), and
holds it to what the README promises: every slow node and dead node named, no healthy
node blamed, and the rounds within ceil(log2(group)) + 4.
"""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent.parent / "bench" / "cross_node_scale.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_cross_node_scale", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_cross_node_scale"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _load()


@pytest.mark.parametrize("stage", ["rdma", "nccl-8", "nccl-64", "nccl-256"])
def test_every_fault_is_found_within_log2_rounds(bench: ModuleType, stage: str) -> None:
    rng = random.Random(35)  # noqa: S311 - repeatable fabrics, not secrets
    size = bench.group_size_of(stage)
    for trial in range(80):
        count = rng.randint(16, 300)
        kind = bench.FABRICS[trial % len(bench.FABRICS)]
        row = bench.simulate(
            count, stage, kind, seed=trial, slow_count=rng.randint(1, 4), timing=bench.Timing()
        )
        assert row["problems"] == [], (count, kind, row)
        bound = math.ceil(math.log2(min(count, size))) + 4
        assert row["rounds"] <= bound, (count, kind, row)
        assert row["out_of_service"][0] <= count
        assert all(held <= count for held in row["out_of_service"])
        if kind == "healthy":
            assert row["rounds"] == 1 + count % 2  # an odd one out meets a peer in round 2


def test_the_check_catches_a_blamed_healthy_node(bench: ModuleType) -> None:
    nodes = bench.names(8)
    fabric = bench.Fabric(slow={"n00001": 200.0})
    outcome = bench.search(nodes, fabric, bench.FLOOR)
    assert bench.check(outcome, fabric, nodes) == []
    wrong = bench.Fabric(slow={"n00002": 200.0})  # the truth differs from what was named
    problems = bench.check(outcome, wrong, nodes)
    assert any("slow nodes" in problem for problem in problems)


def test_a_round_lasts_as_long_as_its_slowest_test(bench: ModuleType) -> None:
    timing = bench.Timing()
    assert timing.test_s(2, "rdma") == 2.0 + 8 * (2 * (10.0 + 5.0) + 3.0)  # bandwidth both ways
    assert timing.test_s(1024, "nccl-1024") > timing.test_s(8, "nccl-8")
    row = bench.simulate(40, "nccl-32", "slow-k", seed=1, slow_count=1, timing=timing)
    assert row["round_s"][0] == round(timing.test_s(32, "nccl-32"), 1)


def test_the_bench_runs_from_its_command_line(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "runs.json"
    code = bench.main(["--nodes", "100", "--stages", "rdma", "nccl-16", "--json-out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert printed.count("\n") == 11  # a heading and one line for each of 2 x 5 runs
    assert "slow-link" in printed
    assert '"max_out_of_service"' in out.read_text()
    with pytest.raises(SystemExit, match="power of two"):
        bench.main(["--nodes", "10", "--stages", "nccl-6"])
