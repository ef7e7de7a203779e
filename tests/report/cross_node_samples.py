"""A stage across nodes as a run records it, for history, JUnit and Prometheus.

Four nodes: n1..n3 good, ``n4`` slow (its pairs measured 140.4 Gb/s against a 380 Gb/s
floor), one pair test that could not measure (no figure), and an NCCL group; built
from the model's own classes, as :mod:`validator.service.cross_node_service` builds them.
"""

from __future__ import annotations

from validator.model import CrossNodeStage, CrossNodeTest, KindOutcome, Named
from validator.model.cross_node_facts import NcclGroupResult, RdmaEnd, RdmaPairResult
from validator.model.measured import Reason, Unavailable

HOSTILE = "n5\x1b[31m\nFAKE"  # a node name that tries to break a line, a label, a file


def _pair(a: str, b: str, gbit: float | None) -> RdmaPairResult:
    if gbit is None:
        return RdmaPairResult(
            RdmaEnd(a, "mlx5_0", 0),
            RdmaEnd(b, "mlx5_0", 0),
            "write_bw",
            bw_average_gbit_s=Unavailable(Reason.ERROR, "connection refused"),
            completed=False,
            detail="Couldn't connect to n3:18515",
        )
    return RdmaPairResult(
        RdmaEnd(a, "mlx5_0", 0),
        RdmaEnd(b, "mlx5_0", 0),
        "write_bw",
        size_bytes=8388608,
        bw_peak_gbit_s=gbit + 1.0,
        bw_average_gbit_s=gbit,
        command="ib_write_bw -d mlx5_0 --use_cuda=0",
        completed=True,
    )


def _test(round_: int, a: str, b: str, gbit: float | None, purpose: str = "first") -> CrossNodeTest:
    return CrossNodeTest(
        round=round_,
        kind="rdma",
        hosts=(a, b),
        figure=gbit,
        floor=380.0,
        passed=gbit is not None and gbit >= 380.0,
        purpose=purpose,
        rdma=(_pair(a, b, gbit),),
        detail="" if gbit is not None else "Couldn't connect to n3:18515",
    )


def sample_stage(*, hostile: bool = False) -> CrossNodeStage:
    """The stage: rdma and nccl on n1..n4 (plus a hostile name when asked)."""
    extra = (HOSTILE,) if hostile else ()
    nodes = ("n1", "n2", "n3", "n4", *extra)
    tests: tuple[CrossNodeTest, ...] = (
        _test(1, "n1", "n2", 391.2),
        _test(1, "n3", "n4", 140.4),
        _test(2, "n1", "n4", 141.0, "half"),
        _test(2, "n2", "n3", None, "cross"),
        _test(3, "n2", "n3", 389.9, "peer"),
        CrossNodeTest(
            round=1,
            kind="nccl",
            hosts=("n1", "n2", "n3", "n4"),
            figure=47.1,
            floor=40.0,
            passed=True,
            purpose="first",
            nccl=(
                NcclGroupResult(
                    ("n1", "n2", "n3", "n4"), 32, "all_reduce", "ib_only",
                    largest_busbw_gb_s=376.8, completed=True,
                ),
            ),
        ),
    )  # fmt: skip
    if hostile:
        tests += (_test(3, "n1", HOSTILE, 120.0, "peer"),)
    rdma = KindOutcome(
        "rdma",
        380.0,
        "catalog ndr-400-ib",
        fleet_median=390.5,
        fleet_mad=1.2,
        good=("n1", "n2", "n3"),
        slow_nodes=(Named(("n4",), "140.4 Gb/s with n3, 141.0 with n1: below 380"),)
        + ((Named((HOSTILE,), f"slow \x1b[2J{HOSTILE}"),) if hostile else ()),
        rounds=3,
        max_out_of_service=4,
    )
    nccl = KindOutcome(
        "nccl", 40.0, "catalog", good=("n1", "n2", "n3", "n4"), rounds=1, max_out_of_service=4
    )
    return CrossNodeStage(("rdma", "nccl"), "ndr-400-ib", nodes, tests, (rdma, nccl))


__all__ = ["HOSTILE", "sample_stage"]
