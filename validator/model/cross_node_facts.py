"""What was measured between nodes: one RDMA pair test, one NCCL group test.

A pair test is perftest's ``ib_write_bw`` or ``ib_write_lat`` between one HCA on each
of two hosts, from GPU memory (GPUDirect, ``--use_cuda``) or host memory. A group test
is nccl-tests' ``all_reduce_perf`` or ``alltoall_perf`` over several hosts, as NCCL
chooses its paths (``default``) or with NVLink and shared memory turned off
(``ib_only``) so the network is measured. Bandwidths: Gb/s (10^9 bits) for perftest,
GB/s (10^9 bytes) for nccl-tests, as each tool prints them.

A test that did not complete (refused connection, a run cut short) has no figures: its
values are :class:`Unavailable` with the reason, and ``completed`` is False.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from validator.model.bandwidth_facts import AllReducePoint
from validator.model.measured import NOT_MEASURED, Measured

RDMA_TESTS = ("write_bw", "write_lat")
COLLECTIVES = ("all_reduce", "alltoall")
NCCL_VARIANTS = ("default", "ib_only")
# What the ib_only variant sets in every rank's environment: no NVLink/PCIe peer
# copies and no shared memory inside a node, so every byte crosses the network.
IB_ONLY_ENVIRONMENT: Tuple[Tuple[str, str], ...] = (
    ("NCCL_P2P_DISABLE", "1"),
    ("NCCL_SHM_DISABLE", "1"),
)


@dataclass(frozen=True)
class RdmaEnd:
    """One side of a pair test: the host, its HCA, and the GPU it used (or none)."""

    host: str
    hca: str  # the RDMA device, "mlx5_0"
    gpu: Optional[int] = None  # CUDA device for GPUDirect (--use_cuda=N); None: host memory


@dataclass(frozen=True)
class RdmaPairResult:
    """One ib_write_bw or ib_write_lat run between two hosts.

    The bandwidths are the client's figures for the largest message size; ``peak`` is
    NOT_MEASURED where perftest does not measure it (bidirectional, duration runs).
    """

    server: RdmaEnd
    client: RdmaEnd
    test: str  # one of RDMA_TESTS
    size_bytes: Measured[int] = NOT_MEASURED
    bw_peak_gbit_s: Measured[float] = NOT_MEASURED
    bw_average_gbit_s: Measured[float] = NOT_MEASURED
    lat_typical_us: Measured[float] = NOT_MEASURED
    lat_average_us: Measured[float] = NOT_MEASURED
    lat_p999_us: Measured[float] = NOT_MEASURED
    bidirectional: bool = False
    command: str = ""  # the command line that ran, as run (no secrets in it)
    completed: bool = False
    detail: str = ""  # why it did not complete, in the tool's words

    def __post_init__(self) -> None:
        if self.test not in RDMA_TESTS:
            raise ValueError(f"RDMA test {self.test!r} is not one of {', '.join(RDMA_TESTS)}")

    @property
    def gpudirect(self) -> bool:
        """Both ends read or wrote GPU memory."""
        return self.server.gpu is not None and self.client.gpu is not None


@dataclass(frozen=True)
class NcclGroupResult:
    """One nccl-tests run over several hosts.

    ``points`` holds every message size (nccl-tests' rows: alltoall rows are read the
    same way as all-reduce rows); ``largest_busbw_gb_s`` is the out-of-place busbw at
    the largest size, the headline figure.
    """

    hosts: Tuple[str, ...]
    ranks: int
    collective: str  # one of COLLECTIVES
    variant: str = "default"  # one of NCCL_VARIANTS
    points: Tuple[AllReducePoint, ...] = ()
    largest_busbw_gb_s: Measured[float] = NOT_MEASURED
    wrong: Measured[int] = NOT_MEASURED  # elements wrong over every row (#wrong)
    out_of_bounds: Measured[int] = NOT_MEASURED  # the footer's count
    nccl_version: Optional[str] = None
    command: str = ""
    completed: bool = False
    detail: str = ""

    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise ValueError(
                f"collective {self.collective!r} is not one of {', '.join(COLLECTIVES)}"
            )
        if self.variant not in NCCL_VARIANTS:
            raise ValueError(f"variant {self.variant!r} is not one of {', '.join(NCCL_VARIANTS)}")


__all__ = [
    "COLLECTIVES",
    "IB_ONLY_ENVIRONMENT",
    "NCCL_VARIANTS",
    "RDMA_TESTS",
    "NcclGroupResult",
    "RdmaEnd",
    "RdmaPairResult",
]
