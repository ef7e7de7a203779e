"""How the interconnect is measured: sizes, repeats, the idle gate, the time it may take.

One place for the figures, so the live measurement, the simulation and the
controller's deadline agree on them.
"""

from __future__ import annotations

from dataclasses import dataclass

# The agent's --interconnect modes. auto: measure where the GPUs have NVLink (two or
# more GPUs, one with an active link), as the policy's default (interconnect: null).
MODES = ("auto", "on", "off")

MIB = 1 << 20
GIB = 1 << 30

# What the controller adds to a host's deadline for the measurement when the operator
# gives no --deadline: eight GPUs' copies, 56 ordered pairs twice and an all-reduce
# sweep take well under a minute on a healthy HGX; a slow link or a busy GPU takes longer.
ALLOWANCE_S = 120.0


@dataclass(frozen=True)
class InterconnectConfig:
    """What to measure and how often."""

    # nvbandwidth copies 512 MiB buffers by default; 256 MiB already reaches steady
    # state on PCIe Gen5 and NVLink4 while keeping 56 pairs quick.
    copy_size_bytes: int = 256 * MIB
    repeats: int = 5  # timed repeats per copy; the median is kept
    warmup: int = 1  # untimed copies before the timed ones
    # NCCL all-reduce sizes, bytes: 1 MiB to 4 GiB by x4 (busbw levels off near 1 GiB).
    all_reduce_sizes: tuple[int, ...] = (
        1 * MIB,
        4 * MIB,
        16 * MIB,
        64 * MIB,
        256 * MIB,
        1 * GIB,
        4 * GIB,
    )
    all_reduce_iterations: int = 20  # timed iterations per size (nccl-tests' default -n 20)
    all_reduce_warmup: int = 5  # nccl-tests' default -w 5
    # The idle gate: wait until every GPU's utilisation and memory-controller use are at
    # or below this (DCGM's nvbandwidth plugin refuses to start above 10% MCUTIL), checked
    # every poll_s, for at most idle_timeout_s.
    idle_max_pct: int = 10
    idle_timeout_s: float = 30.0
    idle_poll_s: float = 0.5
    peers: bool = True  # measure the peer matrix
    all_reduce: bool = True  # measure NCCL all-reduce
