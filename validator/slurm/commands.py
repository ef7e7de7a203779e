"""Running Slurm's own commands: one result type, one error, one bounded runner.

Every command is an argument list (no shell), so a name or a reason with spaces stays
one argument. The runner is injectable: tests pass a fake that answers as Slurm does,
from outputs recorded on a real cluster (tests/fixtures/slurm).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from validator.error_tree import CouldNotRunError
from validator.safe_text import one_line

SLURM_TIMEOUT_S = 30.0
_SAID_MAX_CHARS = 240
# Environment variables that change what squeue and sinfo list or print (SQUEUE_STATES,
# SQUEUE_NAMES, SINFO_PARTITION, SQUEUE_FORMAT, ...): left in place, a user's shell
# settings would hide jobs or nodes from the parsers. SLURM_CONF, SLURM_CLUSTERS and
# the SBATCH_* defaults stay: they say which cluster, and how the user wants to submit.
_OUTPUT_SHAPING = ("SQUEUE_", "SINFO_")


@dataclass(frozen=True)
class CommandResult:
    """What a command gave back."""

    returncode: int
    stdout: str = ""
    stderr: str = ""


Runner = Callable[[Sequence[str]], CommandResult]


class SlurmError(CouldNotRunError):
    """A Slurm command is missing, did not answer, or refused; one line saying which."""


def slurm_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (this process's by default) without the squeue/sinfo output settings."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if not k.startswith(_OUTPUT_SHAPING)}


def run_slurm(
    argv: Sequence[str], *, timeout_s: float = SLURM_TIMEOUT_S, needed_by: str = "--slurm"
) -> CommandResult:
    """The default runner for ``--slurm``: the command on this machine, bounded in time.

    No shell; squeue's and sinfo's own environment settings are dropped
    (:func:`slurm_environment`), so what they print is what the parsers expect.
    ``needed_by`` names the option that needs Slurm's tools, for the missing-tool line.

    Raises:
        SlurmError: the program is not installed or did not finish in time.
    """
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env=slurm_environment(),
        )
    except FileNotFoundError:
        raise SlurmError(
            f"{argv[0]} not found: {needed_by} needs Slurm's client tools on this machine "
            "(apt install slurm-client, or put them on PATH)"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"{argv[0]} did not answer within {timeout_s:g} s: is slurmctld up and reachable?"
        ) from None
    except OSError as exc:  # E2BIG (a huge node list), EACCES: one line, not a traceback
        raise SlurmError(
            f"cannot run {argv[0]}: {exc.strerror or exc}; certify fewer nodes at once "
            "(--nodelist, --partition)"
        ) from None
    return CommandResult(done.returncode, done.stdout, done.stderr)


def said(result: CommandResult) -> str:
    """What Slurm said about a failure, on one line: its error line, else its first line.

    ``sinfo: unrecognized option '--json'`` is followed by ``Try "sinfo --help"``; the
    first line is the one that says what went wrong.
    """
    text = result.stderr if result.stderr.strip() else result.stdout
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    chosen = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")
    return one_line(chosen, _SAID_MAX_CHARS) or f"exit {result.returncode}"


def checked(argv: Sequence[str], runner: Runner) -> CommandResult:
    """Run ``argv``; a non-zero exit is a SlurmError with what Slurm said, on one line.

    Raises:
        SlurmError: the command failed (or the runner could not run it).
    """
    result = runner(list(argv))
    if result.returncode != 0:
        raise SlurmError(f"{' '.join(argv[:3])} failed: {said(result)}")
    return result


__all__ = [
    "SLURM_TIMEOUT_S",
    "CommandResult",
    "Runner",
    "SlurmError",
    "checked",
    "run_slurm",
    "said",
    "slurm_environment",
]
