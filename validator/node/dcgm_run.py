"""Run DCGM's diagnostic (``dcgmi diag -r LEVEL -j``) on the host, or read a recorded one.

Whatever happens, the result is a :class:`~validator.model.DcgmDiag`: its ``results``
are the tests DCGM reported, or ``Unavailable`` saying why there are none (dcgmi
missing, timed out, the host engine not running, output that cannot be read). Could
not run is never a pass; the judge makes it a ``dcgm.run`` finding.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence

from validator.model import DcgmDiag, DcgmTestResult, Measured, Reason, Unavailable
from validator.node.parsers.base import ParseError
from validator.node.parsers.dcgm_diag import DcgmParsed, parse_dcgm_json, parse_dcgm_text
from validator.node.system import System

DCGMI = "dcgmi"
# How long each level may take before it counts as hung. NVIDIA gives level 1 as
# seconds, 2 as about 2 minutes and 3 as about 15 (dcgmi-diag reference); level 4's
# memtest alone runs 600 s and its pulse test longer. A wedged GPU can stall dcgmi,
# so each allowance is several times the documented run.
DEFAULT_TIMEOUT_S = {1: 120.0, 2: 600.0, 3: 2700.0, 4: 14400.0}
LEVELS = tuple(DEFAULT_TIMEOUT_S)
NOT_FOUND = (
    "dcgmi not found: install DCGM (`gpuready provision` installs it with the dcgm role: "
    "datacenter-gpu-manager-4-core and datacenter-gpu-manager-4-cuda<CUDA major>; or "
    "NVIDIA's datacenter-gpu-manager-4 packages by hand) and start nvidia-dcgm"
)
# What dcgmi prints when nv-hostengine is not there to answer.
_HOST_ENGINE_WORDS = ("host engine", "hostengine", "connect to host")
_HOST_ENGINE_HINT = "start the DCGM host engine: systemctl start nvidia-dcgm (or nv-hostengine)"
_MAX_WORDS = 300


def dcgm_argv(level: int, gpus: Sequence[int] | None = None) -> tuple[str, ...]:
    """The command line that runs diagnostic level ``level`` with JSON output.

    ``gpus``: only those (``--gpus``: ``-i 0,3``, DCGM's GPU list); None: every GPU.
    """
    chosen = ("-i", ",".join(str(index) for index in gpus)) if gpus is not None else ()
    return (DCGMI, "diag", "-r", str(level), *chosen, "-j")


def default_timeout(level: int) -> float:
    """How long ``level`` may run unless the policy says otherwise."""
    return DEFAULT_TIMEOUT_S.get(level, max(DEFAULT_TIMEOUT_S.values()))


def not_run(level: int, reason: Reason, why: str, source: str = "") -> DcgmDiag:
    """A diagnostic that gave no results, and why."""
    return DcgmDiag(
        level=level,
        source=source or shlex.join(dcgm_argv(level)),
        results=Unavailable(reason, why),
    )


def from_output(
    parsed: DcgmParsed, level: int | None, source: str, elapsed_s: float | None = None
) -> DcgmDiag:
    """A DcgmDiag from parsed output; DCGM's own runtime error is no result."""
    version: Measured[str] = (
        parsed.version
        if parsed.version
        else Unavailable(Reason.NOT_MEASURED, "the output does not say")
    )
    results: Measured[tuple[DcgmTestResult, ...]]
    if parsed.runtime_error is not None:
        results = Unavailable(
            Reason.ERROR, f"DCGM could not run the diagnostic: {parsed.runtime_error}"
        )
    else:
        results = parsed.results
    return DcgmDiag(
        level=level,
        source=source,
        version=version,
        results=results,
        elapsed_s=elapsed_s,
    )


def parse_output(text: str, name: str = "") -> DcgmParsed:
    """Parse a recorded ``dcgmi diag`` output: by its file name, else JSON, else the table.

    Raises:
        ParseError: neither reads as DCGM diagnostic output.
    """
    if name.endswith(".json"):
        return parse_dcgm_json(text)
    if name.endswith(".txt"):
        return parse_dcgm_text(text)
    try:
        return parse_dcgm_json(text)
    except ParseError:
        return parse_dcgm_text(text)


def run_dcgmi(
    system: System, level: int, timeout_s: float | None = None, gpus: Sequence[int] | None = None
) -> tuple[DcgmDiag, str | None]:
    """Run the diagnostic (on ``gpus`` only, where given); the DcgmDiag and dcgmi's JSON.

    The JSON comes back so that ``gpuready capture`` can record it as it was printed.
    """
    argv = dcgm_argv(level, gpus)
    command = shlex.join(argv)
    limit = default_timeout(level) if timeout_s is None else timeout_s
    if system.which(DCGMI) is None:
        return not_run(level, Reason.NOT_SUPPORTED, NOT_FOUND), None
    started = time.monotonic()
    result = system.run(argv, timeout_s=limit)
    elapsed = time.monotonic() - started
    if result.rc == 127:
        return not_run(level, Reason.NOT_SUPPORTED, NOT_FOUND), None
    if result.rc == 124:
        return not_run(level, Reason.ERROR, f"{command} timed out after {limit:g} s"), None
    try:
        parsed = parse_dcgm_json(result.stdout)
    except ParseError as exc:
        return not_run(
            level, Reason.ERROR, _failure(command, result.rc, result.stdout, result.stderr, exc)
        ), None
    # dcgmi exits non-zero when a test fails: the JSON it printed is the result.
    return from_output(parsed, level, command, elapsed), result.stdout


def run_dcgm(
    system: System, level: int, timeout_s: float | None = None, gpus: Sequence[int] | None = None
) -> DcgmDiag:
    """Run ``dcgmi diag -r LEVEL -j`` through ``system`` within ``timeout_s``.

    Args:
        system: the host (live or a scenario's).
        level: DCGM's run level, 1 to 4.
        timeout_s: how long it may take; None: the level's default
            (:data:`DEFAULT_TIMEOUT_S`).
        gpus: the GPUs to run it on (``--gpus``); None: every GPU.

    Returns:
        The tests DCGM reported, or why there are none: dcgmi not found
        (NOT_SUPPORTED, saying how to install it), timed out, the host engine down or
        any other failure (ERROR, in dcgmi's own words).
    """
    return run_dcgmi(system, level, timeout_s, gpus)[0]


def _failure(command: str, rc: int, stdout: str, stderr: str, problem: ParseError) -> str:
    """Why a run gave no results, in dcgmi's own words where it printed any."""
    words = " ".join((stderr + "\n" + stdout).split())[:_MAX_WORDS]
    if rc == 0:
        return f"{command} printed no diagnostic results: {problem}"
    said = words or "no output"
    hint = (
        f"; {_HOST_ENGINE_HINT}" if any(word in said.lower() for word in _HOST_ENGINE_WORDS) else ""
    )
    return f"{command} exited {rc}: {said}{hint}"


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "LEVELS",
    "NOT_FOUND",
    "dcgm_argv",
    "default_timeout",
    "from_output",
    "not_run",
    "parse_output",
    "run_dcgm",
    "run_dcgmi",
]
