"""The hostile table: every case of ``tests/hostile/cases_*.py`` against the one contract.

The contract, for every case:

* never exit 70 (our own bug), never a ``Traceback``, never "internal error:";
* the exit code is the case's (0 certified / no drift, 1 not certified / drift,
  2 bad input, 3 nothing judged or not stored);
* on exit 2: the last non-empty stderr line names the problem (``gpuready: error: ...``
  as the only line, or click's ``Usage/Try/Error:`` form) and holds every
  ``expect_stderr`` substring; stdout is empty; nothing under the case's directory
  or the state directory was created or changed;
* no ``*.tmp`` file is left anywhere under those directories;
* stdout and stderr hold no raw control character (C0 bar tab and newline, DEL, C1,
  bidi controls, U+2028/2029): whatever a case's input said, it is shown escaped;
* the case's own ``expect_output``, ``forbid_output``, ``must_exist``,
  ``must_not_exist`` and ``check`` hold.

Cases run in this process through ``validator.cli.main.main`` (fast: imported once),
guarded by an alarm; those marked ``subprocess`` (inputs that can hang, crash or eat
the interpreter) run as ``python -m validator.cli.main`` in a child that is killed,
with its process group, at ``timeout_s``.

To add a case: append a ``case(...)`` row to the ``CASES`` tuple of the command's
``cases_<command>.py`` (a new module also goes in ``cases.CASE_MODULES``). Give it a
unique ``<command>-<what>`` id, the argv with ``{tmp}`` for its directory and
``--db {tmp}/history.db`` wherever the command takes ``--db``, a setup from
``data_files`` that writes its files (captures are read in place from
``../shared/captures`` and changed one thing at a time), and the exit code the
contract demands, not the one today's code gives. A case that could hang goes in a
child (``child=True``) with a ``timeout_s`` of seconds, not minutes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import FrameType

import click
import pytest

from tests.conftest import REPO_ROOT
from tests.hostile.cases import Case, Outcome, all_cases
from tests.hostile.data_files import Workspace
from validator.cli.main import cli, main

ALL_CASES = all_cases()
BUG = 70
# What a terminal or viewer obeys (validator.safe_text.visible shows each as an escape).
RAW_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
BAD_INPUT = 2
MIN_CASES = 250
ERROR_PREFIXES = ("gpuready: error:", "Error:")
USAGE_PREFIXES = ("Usage:", "Try ")
EXCERPT = 3000


class CaseTimeout(BaseException):
    """Raised by the alarm: a BaseException, so that no ``except Exception`` swallows it."""


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    raise CaseTimeout


def _run_here(
    argv: list[str], cwd: Path, timeout_s: float, capfd: pytest.CaptureFixture[str]
) -> Outcome:
    """``main(argv)`` in this process, from ``cwd``, stopped by an alarm at ``timeout_s``."""
    capfd.readouterr()  # what the setup printed is not the case's
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    started = time.monotonic()
    code: int | None
    try:
        code = main(argv)
    except SystemExit as exc:  # as the console script would exit
        code = exc.code if isinstance(exc.code, int) else 1
    except CaseTimeout:
        code = None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capfd.readouterr()
    if code is None:
        pytest.fail(
            f"did not finish within {timeout_s:g} s"
            + _show(Outcome(code=-1, out=out, err=err, seconds=timeout_s))
        )
    return Outcome(code=code, out=out, err=err, seconds=time.monotonic() - started)


def _run_child(argv: list[str], cwd: Path, timeout_s: float, state: Path) -> Outcome:
    """``python -m validator.cli.main argv`` in a child, killed with its group at ``timeout_s``."""
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    env.pop("GPUREADY_DEBUG", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO_ROOT), env.get("PYTHONPATH"))))
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-m", "validator.cli.main", *argv],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,  # its own process group: an inventory script dies with it
    )
    try:
        out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        pytest.fail(
            f"did not finish within {timeout_s:g} s (killed)"
            + _show(Outcome(code=-9, out=out, err=err, seconds=timeout_s))
        )
    finally:
        _kill_group(child.pid)
    return Outcome(code=child.returncode, out=out, err=err, seconds=time.monotonic() - started)


def _kill_group(pid: int) -> None:
    """Whatever the child left running (a sleeping inventory script) goes too."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _snapshot(roots: Iterable[Path]) -> dict[str, str]:
    """Every path under ``roots`` with what it is: a regular file's sha256, else its kind."""
    seen: dict[str, str] = {}
    for root in roots:
        for directory, dirs, files in os.walk(root):
            for name in (*dirs, *files):
                path = Path(directory) / name
                info = path.lstat()
                if stat.S_ISREG(info.st_mode):
                    seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
                elif stat.S_ISLNK(info.st_mode):
                    seen[str(path)] = "link:" + os.readlink(path)
                else:
                    seen[str(path)] = "dir" if stat.S_ISDIR(info.st_mode) else "other"
    return seen


def _temporary_files(roots: Iterable[Path]) -> list[str]:
    return sorted(
        str(Path(directory) / name)
        for root in roots
        for directory, _, files in os.walk(root)
        for name in files
        if name.endswith(".tmp")
    )


def _show(outcome: Outcome) -> str:
    return (
        f"\n--- exit {outcome.code}\n--- stdout:\n{outcome.out[-EXCERPT:]}"
        f"\n--- stderr:\n{outcome.err[-EXCERPT:]}"
    )


def _assert_problem_line(hostile: Case, outcome: Outcome) -> None:
    """Exit 2: one line naming the problem (or click's usage form ending in one)."""
    lines = [line for line in outcome.err.splitlines() if line.strip()]
    assert lines, "exit 2 with nothing on stderr" + _show(outcome)
    last = lines[-1]
    assert last.startswith(ERROR_PREFIXES), "the last stderr line is not an error line" + _show(
        outcome
    )
    if last.startswith("gpuready: error:"):
        assert len(lines) == 1, "bad input must be one stderr line" + _show(outcome)
    else:
        assert all(line.startswith(USAGE_PREFIXES) for line in lines[:-1]), (
            "click's usage error has lines of its own before the Error: line" + _show(outcome)
        )
    for wanted in hostile.expect_stderr:
        assert wanted.lower() in last.lower(), f"the problem line does not name {wanted!r}" + _show(
            outcome
        )
    assert outcome.out == "", "bad input printed on stdout" + _show(outcome)


def _assert_paths(hostile: Case, tmp: Path) -> None:
    for pattern in hostile.must_exist:
        assert list(tmp.glob(pattern)), f"{pattern} does not exist under the case's directory"
    for pattern in hostile.must_not_exist:
        found = sorted(str(p.relative_to(tmp)) for p in tmp.glob(pattern))
        assert not found, f"{pattern} exists under the case's directory: {found}"


def _assert_contract(
    hostile: Case, outcome: Outcome, tmp: Path, watched: tuple[Path, ...], before: dict[str, str]
) -> None:
    both = outcome.out + outcome.err
    assert outcome.code != BUG, "exit 70: an internal error" + _show(outcome)
    assert "Traceback" not in both, "a traceback was printed" + _show(outcome)
    raw = sorted({f"U+{ord(char):04X}" for char in RAW_CONTROL.findall(both)})
    assert not raw, f"raw control characters reached the terminal: {raw}" + _show(outcome)
    assert "internal error:" not in outcome.err.lower(), "an internal error was reported" + _show(
        outcome
    )
    assert outcome.code in hostile.exits, (
        f"exit {outcome.code}, expected {sorted(hostile.exits)}" + _show(outcome)
    )
    if outcome.code == BAD_INPUT and hostile.one_line:
        _assert_problem_line(hostile, outcome)
        after = _snapshot(watched)
        changed = sorted(
            path for path in after.keys() | before.keys() if after.get(path) != before.get(path)
        )
        assert not changed, f"bad input wrote or changed {changed}" + _show(outcome)
    else:
        for wanted in hostile.expect_stderr:
            assert wanted.lower() in outcome.err.lower(), (
                f"stderr does not name {wanted!r}" + _show(outcome)
            )
    for wanted in hostile.expect_output:
        assert wanted.lower() in both.lower(), f"the output does not name {wanted!r}" + _show(
            outcome
        )
    for unwanted in hostile.forbid_output:
        assert unwanted.lower() not in both.lower(), f"the output holds {unwanted!r}" + _show(
            outcome
        )
    leftovers = _temporary_files(watched)
    assert not leftovers, f"temporary files were left: {leftovers}" + _show(outcome)
    _assert_paths(hostile, tmp)
    if hostile.check is not None:
        hostile.check(tmp, outcome)


@pytest.mark.parametrize("hostile", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_case(
    hostile: Case,
    tmp_path: Path,
    private_state_dir: Path,
    request: pytest.FixtureRequest,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One row of the table against the contract."""
    workspace = Workspace(tmp_path, lambda: Path(request.getfixturevalue("hostile_baseline")))
    cwd = tmp_path / "cwd"  # where "" would land if it became the current directory
    cwd.mkdir()
    if hostile.setup is not None:
        hostile.setup(workspace)
    watched = (tmp_path, private_state_dir)
    before = _snapshot(watched)
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in hostile.argv]
    monkeypatch.delenv("GPUREADY_DEBUG", raising=False)
    if hostile.subprocess:
        outcome = _run_child(argv, cwd, hostile.timeout_s, private_state_dir)
    else:
        monkeypatch.chdir(cwd)
        outcome = _run_here(argv, cwd, hostile.timeout_s, capfd)
    _assert_contract(hostile, outcome, tmp_path, watched, before)


# Commands that read a history only when --db names one (no default database).
_DB_ONLY_WHEN_GIVEN = frozenset({"verify-cert"})


def _takes_db(command: str) -> bool:
    if command in _DB_ONLY_WHEN_GIVEN:
        return False
    found = cli.commands.get(command)
    return found is not None and any(
        isinstance(param, click.Option) and "--db" in param.opts for param in found.params
    )


def test_the_table_covers_every_command() -> None:
    """At least 250 cases, unique ids, every command and --help/--version among them."""
    ids = [c.id for c in ALL_CASES]
    assert len(ids) >= MIN_CASES, f"the table has {len(ids)} cases, fewer than {MIN_CASES}"
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"case ids given twice: {duplicates}"
    covered = {c.command for c in ALL_CASES}
    missing = sorted(set(cli.commands) - covered)
    assert not missing, f"no case exercises {missing}"
    assert {"--help", "--version"} <= covered


def test_every_case_keeps_off_the_users_history() -> None:
    """A command that takes --db is given one under the case's directory (or fails before)."""
    careless = [
        c.id
        for c in ALL_CASES
        if _takes_db(c.command) and "--help" not in c.argv and "--db" not in c.argv
    ]
    assert not careless, f"cases without --db {{tmp}}/...: {careless}"


def test_every_expectation_is_a_documented_exit_code() -> None:
    """No case expects 70 (a bug) or 130 (an interrupt): the table is about inputs."""
    odd = [c.id for c in ALL_CASES if not c.exits <= {0, 1, 2, 3}]
    assert not odd, f"cases expecting codes outside 0-3: {odd}"
