"""One error tree for the whole tool; exit codes are applied only by the CLI.

Each error carries a one-line message that names the problem and the fix.
Errors that are also a builtin kind inherit it, so callers may catch either.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Process exit codes, the same for every command."""

    OK = 0  # certified / no drift
    NOT_CERTIFIED = 1  # judged and found wanting / drift found
    BAD_INPUT = 2  # bad usage, flags, policy, inventory, capture, scenario
    COULD_NOT_RUN = 3  # nothing could be judged: no driver, unreachable, missing tool
    BUG = 70  # our own bug (sysexits' EX_SOFTWARE): never the input's fault; please report
    INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT


class GpureadyError(Exception):
    """Base of every error this tool raises on purpose."""

    exit_code: ExitCode = ExitCode.COULD_NOT_RUN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class BadInputError(GpureadyError, ValueError):
    """Input the user gave us is wrong; the message says which and how to fix it."""

    exit_code = ExitCode.BAD_INPUT


class UnsafePathError(BadInputError):
    """A path to write, rename or remove is a link or the wrong kind of file: refused.

    Never followed: a link planted where gpuready (run as root) writes would aim its
    writes, or its clean-up, at any file on the machine.
    """


class PolicyError(BadInputError):
    """A policy file that cannot be used."""


class ScenarioError(BadInputError):
    """A scenario name or file that cannot be used."""


class CaptureError(BadInputError):
    """A capture directory that cannot be read."""


class CouldNotRunError(GpureadyError, RuntimeError):
    """The tool could not do its job for reasons outside the input."""

    exit_code = ExitCode.COULD_NOT_RUN


class ReportError(CouldNotRunError):
    """A report could not be rendered or written."""
