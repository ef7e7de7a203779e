"""A DCGM diagnostic run (``dcgmi diag``): each test's outcome, per GPU or for the node."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Tuple

from validator.model.measured import NOT_MEASURED, Measured


class DcgmOutcome(str, enum.Enum):
    """How one DCGM diagnostic test came out for one GPU (or for the node)."""

    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"  # DCGM skipped it: never a pass
    NOT_RUN = "not_run"  # listed, but DCGM did not run it (an earlier failure, a timeout)


@dataclass(frozen=True)
class DcgmTestResult:
    """One test's result, for one GPU or (``gpu_index`` None) for the whole node."""

    test: str  # lower snake case, as DCGM 4 names plugins: memory, pcie, sm_stress, ...
    outcome: DcgmOutcome
    category: str = ""  # deployment | integration | hardware | stress (as DCGM groups them)
    gpu_index: Optional[int] = None
    message: str = ""  # DCGM's own words (warning, error or info), one line
    error_id: Optional[int] = None  # DCGM_FR_* number, where the output gives it


@dataclass(frozen=True)
class DcgmDiag:
    """A DCGM diagnostic run (``dcgmi diag -r LEVEL -j``), or why there is none."""

    level: Optional[int]  # as run; None: a recorded output that does not say
    source: str  # the command line, a capture file name, or "scenario"
    version: Measured[str] = NOT_MEASURED  # DCGM's version, where the output says
    results: Measured[Tuple[DcgmTestResult, ...]] = NOT_MEASURED  # why not, when not run
    elapsed_s: Optional[float] = None  # how long dcgmi ran, where it ran here
