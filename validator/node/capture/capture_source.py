"""A capture bundle as a source of facts: the real collector over the bundle's System.

NVML's part comes from the bundle's nvidia-smi query (XML, else text, else the
banner); everything else is read as on a live host. Where the bundle's files
disagree (driver, GPU count, names, bus ids) or a query is cut short, the facts carry
the conflicts for the judge. Without a capture time the window cannot be placed:
every Xid counts.

A bundle measures nothing: it holds no burn-in, and its DCGM output
(``dcgmi-diag.json``, else ``dcgmi-diag.txt``) and interconnect figures (nvbandwidth's
output, nccl-tests' all_reduce_perf) are read whenever they are there. A recorded
FAIL is a FAIL; a DCGM level asked of a bundle without DCGM output makes the missing
output a fact the judge reports.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, NoReturn

from validator.model import DcgmDiag, Interconnect, NodeFacts, Reason, Unavailable
from validator.node.capture.capture_replay import CaptureSystem
from validator.node.system_facts import system_facts

if TYPE_CHECKING:
    from validator.node.bandwidth.bandwidth_config import InterconnectConfig
    from validator.node.burnin.burn_config import BurnConfig
    from validator.node.burnin.burn_progress import ProgressSink
    from validator.node.collect import CollectRequest
    from validator.node.system import System


class CaptureSource:
    """A bundle directory; opened (and every file checked) when its facts are asked for.

    Raises (from first_facts):
        CaptureError: the directory is missing, holds no capture file, or a file is
            broken beyond reading.
    """

    simulated = False
    measures = False

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._directory = directory
        self._system: CaptureSystem | None = None

    def system(self) -> System:
        """The bundle, opened once."""
        return self._bundle()

    def _bundle(self) -> CaptureSystem:
        if self._system is None:
            self._system = CaptureSystem(self._directory)
        return self._system

    def first_facts(self, request: CollectRequest) -> NodeFacts:
        """Every fact the bundle holds, its recorded DCGM and interconnect output included."""
        bundle = self._bundle()
        dated = bundle.captured_at is not None
        facts = system_facts(
            bundle,
            bundle.reading,
            source="capture",
            source_detail=str(bundle.directory),
            window_hours=request.window_hours if dated else None,
        )
        facts = dataclasses.replace(
            facts,
            source_conflicts=bundle.conflicts(),
            dcgm=_captured_dcgm(bundle, request.dcgm_level),
        )
        facts = dataclasses.replace(facts, interconnect=_recorded_interconnect(bundle, facts))
        return facts if dated else dataclasses.replace(facts, collected_at="")

    def burn(self, facts: NodeFacts, config: BurnConfig, progress: ProgressSink | None) -> NoReturn:
        """Never called: a bundle measures nothing (``measures`` is False)."""
        raise NotImplementedError("a capture bundle holds no burn-in to run")

    def measure_interconnect(
        self, facts: NodeFacts, config: InterconnectConfig, until: float | None
    ) -> NoReturn:
        """Never called: a bundle's interconnect is what it recorded."""
        raise NotImplementedError("a capture bundle's interconnect is read, not measured")


def _recorded_interconnect(system: CaptureSystem, facts: NodeFacts) -> Interconnect | None:
    """The bundle's interconnect figures; None when it holds no such output."""
    from validator.node.capture.recorded_bandwidth import recorded_interconnect

    return recorded_interconnect(system, facts)


def _captured_dcgm(system: CaptureSystem, dcgm_level: int) -> DcgmDiag | None:
    """The bundle's DCGM diagnostic; None when it has none and no level is asked for."""
    from validator.node.dcgm_run import from_output, parse_output

    recorded = system.dcgm_output()
    if recorded is None:
        if dcgm_level <= 0:
            return None
        return DcgmDiag(
            level=None,
            source="capture",
            results=Unavailable(
                Reason.NOT_MEASURED,
                f"the bundle has no DCGM output (dcgmi-diag.json or dcgmi-diag.txt): capture "
                f"one with `gpuready capture --dcgm-level {dcgm_level} DIR` on the host, or "
                f"save `dcgmi diag -r {dcgm_level} -j` output there as dcgmi-diag.json",
            ),
        )
    name, text = recorded
    # The file passed its parser when the bundle was opened.
    return from_output(parse_output(text, name), system.dcgm_level, name)
