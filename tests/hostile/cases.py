"""The hostile table: one :class:`Case` per input, with the outcome the contract demands.

Each ``cases_<command>.py`` module holds one command's rows as a ``CASES`` tuple;
:func:`all_cases` gathers them. A row is data: the argv (``{tmp}`` stands for the
case's own directory), a setup writing the files it needs, and what must hold
afterwards. The expectations are the issue's target behaviour, not today's.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from tests.hostile.data_files import Setup

# Modules holding rows, one per command (and one for --help/--version and the policy).
CASE_MODULES = (
    "cases_global",
    "cases_certify",
    "cases_policy",
    "cases_capture",
    "cases_scenario",
    "cases_fleet",
    "cases_drift",
    "cases_verify",
    "cases_history",
    "cases_provision",
    "cases_slurm",
    "cases_escaping",
)

ExitCodes = Union[int, frozenset[int]]


@dataclass(frozen=True)
class Outcome:
    """What one run left: its exit code and output."""

    code: int
    out: str
    err: str
    seconds: float


Check = Callable[[Path, Outcome], None]  # raises AssertionError on a broken promise


@dataclass(frozen=True)
class Case:
    """One hostile input and the outcome it must have.

    Attributes:
        id: unique, ``<command>-<what>``; the pytest id.
        argv: the arguments after ``gpuready``; ``{tmp}`` is the case's directory.
        expect_exit: the exit code, or the set of acceptable ones.
        expect_stderr: substrings (case-insensitive) the problem line must hold: on
            exit 2 the last non-empty stderr line, otherwise anywhere on stderr.
        setup: writes the files the case needs under ``{tmp}``.
        expect_output: substrings that must appear in stdout or stderr (the report).
        forbid_output: substrings that must appear in neither.
        must_exist: glob patterns under ``{tmp}``, each matching at least one path.
        must_not_exist: glob patterns under ``{tmp}`` matching nothing.
        check: a further assertion on the directory and the outcome.
        subprocess: run ``python -m validator.cli.main`` in a child with a hard
            timeout: for inputs that can hang, crash or exhaust the interpreter
            (:func:`case` sets it for every case that asks for a burn).
        timeout_s: the limit for the run (a child is killed; in-process an alarm).
        one_line: on exit 2, stderr is one line (or click's usage form); off only for
            the bare ``gpuready``, which prints its help.
    """

    id: str
    argv: tuple[str, ...]
    expect_exit: ExitCodes
    expect_stderr: tuple[str, ...] = ()
    setup: Setup | None = None
    expect_output: tuple[str, ...] = ()
    forbid_output: tuple[str, ...] = ()
    must_exist: tuple[str, ...] = ()
    must_not_exist: tuple[str, ...] = ()
    check: Check | None = None
    subprocess: bool = False
    timeout_s: float = 30.0
    one_line: bool = True

    @property
    def exits(self) -> frozenset[int]:
        """The acceptable exit codes."""
        return (
            frozenset({self.expect_exit}) if isinstance(self.expect_exit, int) else self.expect_exit
        )

    @property
    def command(self) -> str:
        """The subcommand (or the global option) the case exercises."""
        return self.argv[0] if self.argv else ""


def _strings(value: str | tuple[str, ...]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def case(
    id: str,
    *argv: str,
    exit: int | AbstractSet[int],
    err: str | tuple[str, ...] = (),
    setup: Setup | None = None,
    out: str | tuple[str, ...] = (),
    forbid: str | tuple[str, ...] = (),
    exists: str | tuple[str, ...] = (),
    absent: str | tuple[str, ...] = (),
    check: Check | None = None,
    child: bool = False,
    timeout_s: float = 30.0,
    one_line: bool = True,
) -> Case:
    """One row, written compactly: ``case("id", *argv, exit=2, err="--burn")``.

    A case that asks for a burn (``--burn`` with a number) runs in a child: a burn
    that never ends (a bound that regressed) then takes its own process down, not
    this one's threads.
    """
    burns = any(
        flag == "--burn" and value[:1].isdigit() and value != "0"
        for flag, value in zip(argv, argv[1:])
    )
    return Case(
        id=id,
        argv=tuple(argv),
        expect_exit=exit if isinstance(exit, int) else frozenset(exit),
        expect_stderr=_strings(err),
        setup=setup,
        expect_output=_strings(out),
        forbid_output=_strings(forbid),
        must_exist=_strings(exists),
        must_not_exist=_strings(absent),
        check=check,
        subprocess=child or burns,
        timeout_s=timeout_s,
        one_line=one_line,
    )


def all_cases() -> tuple[Case, ...]:
    """Every row of every ``cases_*`` module, in module order."""
    rows: list[Case] = []
    for name in CASE_MODULES:
        module = importlib.import_module(f"tests.hostile.{name}")
        rows.extend(module.CASES)
    return tuple(rows)
