"""How a node's Interconnect is read into figures and words: one reader for certify and drift.

``interconnect.*`` (certify) and ``drift.interconnect`` read the same facts: a copy's
median or why it has none, each GPU's row and column of the peer matrix, bandwidths as
messages say them. They read them here, so a figure drift compares is the figure the
check judged. The module imports no check, so both may import it without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from validator.model import Bandwidth, Measured, Reason, Unavailable, measured_gb_s

Pair = tuple[int, int]  # (src, dst) NVML indices


def gbs(value: float) -> str:
    """372 GB/s, 24.1 GB/s: three figures are enough to read a bandwidth."""
    return f"{value:.0f} GB/s" if value >= 100 else f"{value:.1f} GB/s"


def span(values: Iterable[float], words: Callable[[float], str] = gbs) -> str:
    """'121-130 GB/s', '33-40%', or one figure when they read alike."""
    items = sorted(values)
    low, high = words(items[0]), words(items[-1])
    if low == high:
        return low
    unit = " GB/s" if low.endswith(" GB/s") else "%"
    return f"{low.removesuffix(unit)}-{high}"


def figure_of(bandwidth: Bandwidth) -> Measured[float]:
    """A copy's median, or why not, naming an implausible value (non-finite, not above 0)."""
    value = measured_gb_s(bandwidth)
    if value is not None:
        return value
    if isinstance(bandwidth.gb_s, Unavailable):
        return bandwidth.gb_s
    return Unavailable(Reason.ERROR, f"implausible value {bandwidth.gb_s!r}")


def partners_of(gpu: int, pairs: Iterable[Pair]) -> set[int]:
    """The GPUs ``gpu`` meets in ``pairs`` (each pair names it at one end)."""
    return {dst if src == gpu else src for src, dst in pairs}


def majority_of_peers(gpu: int, pairs: Iterable[Pair], among: Sequence[Pair]) -> bool:
    """True when ``pairs`` hold more than half of ``gpu``'s row and of its column in ``among``.

    ``among``: the pairs judged (every ordered pair for certify, the certified ones for
    drift), which give the GPU's peers as source and as destination.
    """
    peers_out = {dst for src, dst in among if src == gpu}
    peers_in = {src for src, dst in among if dst == gpu}
    if len(peers_out) < 2 or len(peers_in) < 2:
        return False  # with one peer a row and a column are the same pair
    links = list(pairs)
    out = sum(1 for src, _ in links if src == gpu)
    into = sum(1 for _, dst in links if dst == gpu)
    return out * 2 > len(peers_out) and into * 2 > len(peers_in)


def pairs_words(group: Sequence[Pair]) -> str:
    """'GPUs 2 and 5' for both directions of a pair, 'GPU 2 -> GPU 5' for one."""
    if len(group) == 2:
        low, high = sorted(group[0])
        return f"GPUs {low} and {high}"
    src, dst = group[0]
    return f"GPU {src} -> GPU {dst}"


__all__ = ["Pair", "figure_of", "gbs", "majority_of_peers", "pairs_words", "partners_of", "span"]
