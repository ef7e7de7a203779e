"""The garbage collector set sparingly while many objects are made and kept.

A fleet run (many results arrive, and they stay) and the kernel log's scan (a log at
its bound is some 800,000 lines in one list) both use it; it lives with the node's
code, which ships with the agent, so both can. Standard library only, Python 3.9.

A fleet's controller decodes every host's facts, tens of thousands of small objects
for a default burn's telemetry, and holds each result until its reports. CPython
collects its youngest generation after every 700 new container objects, so decoding
one such host runs dozens of collections, each walking what it allocated so far,
and an older generation's collections walk every result held so far. Measured on the
scale simulation (``bench/scale.py --one ssh 300 --time-scale 0.02 --ssh-cpu-ms 0``,
2-core machine), the controller spent 75-77 ms of CPU per node with the default
setting and 58-64 ms with the youngest generation collected every 10,000 to 100,000
objects (50,000 best); ``gc.freeze`` after each batch saved no more once the
threshold was raised.

Nothing is left uncollected: facts and results are frozen dataclasses and tuples
without reference cycles, which reference counting frees as before; the cycles
other code leaves (paramiko's transports, exceptions with their tracebacks) are
still collected, after 50,000 allocations instead of 700. The setting is the
process's, so it is put back when the run ends, however it ends.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

# The youngest generation's threshold during a fleet run (CPython's default is 700).
FLEET_YOUNG_THRESHOLD = 50_000


@contextlib.contextmanager
def sparing_collector(young: int = FLEET_YOUNG_THRESHOLD) -> Iterator[None]:
    """Collect the youngest generation after ``young`` allocations while the block runs.

    The older generations keep their own settings; the one in force before is put
    back on leaving, an exception's way out too. A threshold already higher (a caller's
    own) is kept.
    """
    before = gc.get_threshold()
    if before[0] == 0 or before[0] >= young:  # collection off, or already sparing
        yield
        return
    gc.set_threshold(young, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


__all__ = ["FLEET_YOUNG_THRESHOLD", "sparing_collector"]
