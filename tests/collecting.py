"""Facts for tests through the one collector (validator.node.collect): a scenario's or a bundle's.

Shorthands for ``collect(SimulatedSource(name), CollectRequest(...))`` and
``collect(CaptureSource(directory), CollectRequest(...))``, the calls certify makes.
"""

from __future__ import annotations

import os

from validator.model import DEFAULT_XID_WINDOW_HOURS, NodeFacts
from validator.node.burnin.burn_config import BurnConfig
from validator.node.capture.capture_source import CaptureSource
from validator.node.collect import INTERCONNECT_AUTO, CollectRequest, collect
from validator.node.sim.simulated_source import SimulatedSource


def collect_simulated(
    name_or_path: str,
    *,
    burn: BurnConfig | None = None,
    dcgm_level: int = 0,
    interconnect: str = INTERCONNECT_AUTO,
    window_hours: float | None = DEFAULT_XID_WINDOW_HOURS,
) -> NodeFacts:
    """A scenario's facts, as a single node's certify collects them."""
    request = CollectRequest(
        window_hours=window_hours, burn=burn, dcgm_level=dcgm_level, interconnect=interconnect
    )
    return collect(SimulatedSource(name_or_path), request)


def collect_capture(
    directory: str | os.PathLike[str],
    *,
    dcgm_level: int = 0,
    window_hours: float | None = DEFAULT_XID_WINDOW_HOURS,
) -> NodeFacts:
    """A capture bundle's facts, as ``certify --capture`` reads them."""
    request = CollectRequest(window_hours=window_hours, dcgm_level=dcgm_level)
    return collect(CaptureSource(directory), request)
