"""Interconnect facts as a healthy 8x H100 HGX node measures them, to build tests on.

The figures sit where real HGX H100 boards measure: Gen5 x16 host copies of ~54 GB/s
(above Azure's 48 floor, near its README's 52), peer copies of ~372 GB/s (above Azure's
335), all-reduce ~481 GB/s (near the ~480 nccl-tests' maintainer quotes for 8x H100).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from validator.model import (
    AllReduce,
    AllReducePoint,
    Bandwidth,
    GpuCopyBandwidth,
    Interconnect,
    PeerBandwidth,
)

MiB, GiB = 1 << 20, 1 << 30

# Per GPU, as a healthy HGX H100 copies: medians 54.0, 55.0 and 2540 GB/s.
H2D = (53.8, 54.0, 54.2, 54.0, 53.9, 54.1, 54.0, 54.2)
D2H = (55.0, 55.1, 54.9, 55.0, 55.0, 55.2, 54.8, 55.0)
HBM = (2541.0, 2538.0, 2545.0, 2540.0, 2536.0, 2542.0, 2540.0, 2539.0)
PEER = 372.0

PeerFn = Callable[[int, int], float]


def bandwidth(gb_s: float, size: int = 256 * MiB) -> Bandwidth:
    return Bandwidth(gb_s=gb_s, repeats_gb_s=(gb_s,) * 5, size_bytes=size)


def copies(
    changes: dict[int, tuple[float, float, float]] | None = None, count: int = 8
) -> tuple[GpuCopyBandwidth, ...]:
    """Each GPU's (H2D, D2H, HBM), the healthy figures where ``changes`` names none."""
    out = []
    for index in range(count):
        h2d, d2h, hbm = (changes or {}).get(index, (H2D[index], D2H[index], HBM[index]))
        out.append(
            GpuCopyBandwidth(
                index=index,
                uuid=f"GPU-{index:08d}-aaaa-bbbb-cccc-000000000000",
                pci_bus_id=f"00000000:{index:02X}:00.0",
                numa_node=0 if index < 4 else 1,
                h2d=bandwidth(h2d),
                d2h=bandwidth(d2h),
                hbm=bandwidth(hbm),
            )
        )
    return tuple(out)


def peers(
    value: PeerFn = lambda src, dst: PEER,
    access: Callable[[int, int], bool] = lambda src, dst: True,
    count: int = 8,
) -> tuple[PeerBandwidth, ...]:
    return tuple(
        PeerBandwidth(
            src,
            dst,
            access=access(src, dst),
            unidirectional=bandwidth(value(src, dst)),
            bidirectional=bandwidth(value(src, dst) * 0.97),
        )
        for src in range(count)
        for dst in range(count)
        if src != dst
    )


def sweep(
    busbw: float = 481.0, largest: int = 4 * GiB, ranks: int = 8, wrong: int | None = 0
) -> AllReduce:
    """1 MiB up to ``largest``, busbw rising to ``busbw`` at the largest size."""
    sizes = []
    size = MiB
    while size <= largest:
        sizes.append(size)
        size *= 2
    points = []
    for step, size in enumerate(sizes, start=1):
        bus = busbw * step / len(sizes)
        alg = bus * ranks / (2 * (ranks - 1))
        points.append(
            AllReducePoint(
                size_bytes=size,
                time_us=size / (alg * 1e3),
                algbw_gb_s=alg,
                busbw_gb_s=bus,
                busbw_in_place_gb_s=bus,
                wrong=wrong if size == GiB else 0,
            )
        )
    return AllReduce(
        ranks=ranks,
        source="nccl",
        nccl_version="2.21.5",
        points=tuple(points),
        gpu_indices=tuple(range(ranks)),
    )


def healthy_interconnect(**changes: object) -> Interconnect:
    """A healthy 8x H100 interconnect, measured live after the burn-in."""
    measured = Interconnect(
        source="cuda",
        started_at="2025-03-01T12:05:00+00:00",
        elapsed_s=41.2,
        idle_wait_s=0.5,
        gpus=copies(),
        peers=peers(),
        all_reduce=sweep(),
    )
    return dataclasses.replace(measured, **changes)  # type: ignore[arg-type]
