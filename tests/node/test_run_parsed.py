"""The one "run a command, turn its failure into a fact, parse it" of every probe.

validator.node.system_facts.run_parsed (and checked_run under it) is what the host,
GPUDirect, container and network probes read their tools through: each way a command
can fail maps to one reason. A live host runs real commands here; what only a
recording can say (no record, a bundle file's name) comes from a small stand-in.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path

import pytest

from validator.model import Reason, Unavailable
from validator.node.parsers.base import ParseError
from validator.node.system import CommandResult, LiveSystem, NotRecordedError
from validator.node.system_facts import checked_run, read_parsed, run_parsed


def words(text: str) -> tuple[str, ...]:
    """A parser that refuses an empty output."""
    found = tuple(text.split())
    if not found:
        raise ParseError("no words")
    return found


class _Recorded:
    """A recording: one command's result, or no record of it."""

    def __init__(self, result: CommandResult | None) -> None:
        self.result = result

    def hostname(self) -> str:
        return "recorded"

    def read_text(self, path: str) -> str | None:
        raise NotRecordedError(f"{path} not in the capture")

    def glob(self, pattern: str) -> list[str]:
        return []

    def which(self, name: str) -> str | None:
        return None

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        if self.result is None:
            raise NotRecordedError("tool.txt not in the capture")
        return self.result

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.timezone.utc)


def test_a_command_that_succeeds_is_parsed() -> None:
    found = run_parsed(LiveSystem(), ("sh", "-c", "echo a b"), words, "tool")
    assert found == ("a", "b")


def test_a_missing_tool_is_not_supported() -> None:
    found = run_parsed(LiveSystem(), ("gpuready-no-such-tool",), words, "the tool")
    assert found == Unavailable(Reason.NOT_SUPPORTED, "the tool not found")


def test_a_failed_command_is_an_error_with_its_first_line() -> None:
    argv = ("sh", "-c", "printf 'refused\\nmore\\n' >&2; exit 3")
    found = run_parsed(LiveSystem(), argv, words, "tool")
    assert found == Unavailable(Reason.ERROR, "tool: refused")


@pytest.mark.parametrize("any_rc", [False, True])
def test_a_status_that_says_nothing_still_gives_its_output(any_rc: bool) -> None:
    argv = ("sh", "-c", "echo x y; exit 1")
    found = run_parsed(LiveSystem(), argv, words, "tool", any_rc=any_rc)
    assert found == (("x", "y") if any_rc else Unavailable(Reason.ERROR, "tool: x y"))


def test_a_missing_tool_fails_even_where_the_status_says_nothing() -> None:
    found = run_parsed(LiveSystem(), ("gpuready-no-such-tool",), words, "tool", any_rc=True)
    assert found == Unavailable(Reason.NOT_SUPPORTED, "tool not found")


@pytest.mark.parametrize("any_rc", [False, True])
def test_a_timeout_is_an_error(any_rc: bool) -> None:
    # Even where the status says nothing: what a command cut at its time printed is partial
    # (df stuck on a dead NFS mount lists only the mounts before it).
    timed_out = _Recorded(CommandResult(124, "/dev/sda1 /\n", "tool: ran past 30 s"))
    found = run_parsed(timed_out, ("tool",), words, "tool", any_rc=any_rc)
    assert found == Unavailable(Reason.ERROR, "tool: tool: ran past 30 s")


def test_no_record_is_not_measured() -> None:
    found = run_parsed(_Recorded(None), ("tool",), words, "tool")
    assert found == Unavailable(Reason.NOT_MEASURED, "tool.txt not in the capture")
    assert checked_run(_Recorded(None), ("tool",), "tool") == found


def test_output_that_does_not_parse_names_the_command_or_its_bundle_file() -> None:
    live = run_parsed(LiveSystem(), ("true",), words, "tool")
    assert live == Unavailable(Reason.ERROR, "tool: no words")
    recorded = _Recorded(CommandResult(0, "\n", recorded_in="tool.txt"))
    found = run_parsed(recorded, ("tool",), words, "tool")
    assert found == Unavailable(Reason.ERROR, "tool.txt: no words")


def test_a_file_is_read_and_parsed_or_why_not(tmp_path: Path) -> None:
    (tmp_path / "said").write_text("one two\n")
    (tmp_path / "blank").write_text("\n")
    assert read_parsed(LiveSystem(), str(tmp_path / "said"), words) == ("one", "two")
    blank = read_parsed(LiveSystem(), str(tmp_path / "blank"), words)
    assert blank == Unavailable(Reason.ERROR, f"{tmp_path / 'blank'}: no words")
    gone = str(tmp_path / "gone")
    assert read_parsed(LiveSystem(), gone, words) == Unavailable(
        Reason.NOT_SUPPORTED, f"{gone} does not exist"
    )
    unrecorded = read_parsed(_Recorded(None), "/proc/cpuinfo", words)
    assert unrecorded == Unavailable(Reason.NOT_MEASURED, "/proc/cpuinfo not in the capture")
