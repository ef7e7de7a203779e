"""validator.service.provision_diff and validator.cli.diff_view on a recorded real run.

tests/fixtures/provision/diff/job_events.json is every event ansible-runner wrote for one
real ``--check --diff`` run (its README says how it was made): a new file, an edited line,
a directory, a loop of two files, a package and a skipped task, on two hosts.
"""

from __future__ import annotations

import copy
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from validator.cli.diff_view import print_changes
from validator.service.provision_diff import (
    EVENT_BYTES,
    MAX_LINES,
    SIDE_CHARS,
    RunChanges,
    changes_of,
    diff_lines,
    read_changes,
    task_change,
)

EVENTS_FILE = Path(__file__).parent.parent / "fixtures" / "provision" / "diff" / "job_events.json"


@pytest.fixture(scope="module")
def events() -> list[dict[str, Any]]:
    loaded = json.loads(EVENTS_FILE.read_text(encoding="utf-8"))
    assert isinstance(loaded, list)
    return loaded


def _texts(change: Any) -> list[str]:
    return [line.text for line in change.lines]


def _write_job_events(folder: Path, events: list[dict[str, Any]]) -> Path:
    """The events as ansible-runner lays them out: job_events/<counter>-<uuid>.json."""
    job_events = folder / "job_events"
    job_events.mkdir(parents=True)
    for event in events:
        (job_events / f"{event['counter']}-{event['uuid']}.json").write_text(json.dumps(event))
    return folder


def test_each_host_has_its_changes_in_task_order(events: list[dict[str, Any]]) -> None:
    grouped = changes_of(events).by_host()
    assert list(grouped) == ["node-a", "node-b"]
    for host, changes in grouped.items():
        tasks = [(change.task, change.item) for change in changes]
        assert tasks == [
            ("Write the CUDA profile", ""),
            ("Set the module option", ""),
            ("Create the state directory", ""),
            ("Write the drop-ins", "persistenced"),
            ("Write the drop-ins", "fabricmanager"),
            ("Install the package", ""),
        ], host
        assert all(change.host == host for change in changes)


def test_an_edited_line_is_a_unified_diff_with_its_headers(events: list[dict[str, Any]]) -> None:
    changes = changes_of(events).by_host()
    edited = changes["node-a"][1]
    assert _texts(edited) == [
        "--- before: /tmp/prov-rec/out/node-a/nvidia.conf (content)",
        "+++ after: /tmp/prov-rec/out/node-a/nvidia.conf (content)",
        "@@ -1,2 +1,2 @@",
        "-options nvidia NVreg_OldSetting=1",
        "+options nvidia NVreg_EnableGpuFirmware=1",
        " keep this line",
    ]
    assert [line.kind for line in edited.lines] == [
        "header", "header", "hunk", "remove", "add", "context",
    ]  # fmt: skip
    added = changes["node-b"][1]  # node-b had no options line: one is added after its own
    assert _texts(added)[3:] == [" blacklist nouveau", "+options nvidia NVreg_EnableGpuFirmware=1"]


def test_a_mapping_diff_and_a_package_summary(events: list[dict[str, Any]]) -> None:
    changes = changes_of(events).by_host()["node-a"]
    directory = _texts(changes[2])
    assert '-    "state": "absent"' in directory
    assert '+    "state": "directory"' in directory
    package = changes[5]
    assert [line.kind for line in package.lines] == ["prepared"] * 3
    assert package.lines[0].text == "The following NEW packages will be installed:"
    assert package.lines[1].text.strip() == "hello"


def test_only_changed_results_and_never_the_loop_summary(events: list[dict[str, Any]]) -> None:
    summaries = [e for e in events if "results" in (e.get("event_data", {}).get("res") or {})]
    assert summaries, "the recording has a loop's summary result"
    assert all(task_change(event) is None for event in summaries)
    unchanged = copy.deepcopy(next(e for e in events if e["event"] == "runner_on_ok"))
    unchanged["event_data"]["res"]["changed"] = False
    assert task_change(unchanged) is None
    assert task_change({"event": "runner_on_ok", "event_data": "not a mapping"}) is None


def test_the_artifacts_folder_reads_as_the_events(
    tmp_path: Path, events: list[dict[str, Any]]
) -> None:
    artifacts = _write_job_events(tmp_path / "run", events)
    assert read_changes(artifacts) == changes_of(events)
    assert read_changes(tmp_path / "no-such-run") == RunChanges()


def test_a_link_or_an_oversized_event_is_a_problem_and_the_rest_is_read(
    tmp_path: Path, events: list[dict[str, Any]]
) -> None:
    artifacts = _write_job_events(tmp_path / "run", events)
    job_events = artifacts / "job_events"
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(events[10]))
    os.symlink(outside, job_events / "9000-link.json")
    with (job_events / "9001-big.json").open("wb") as big:
        big.truncate(EVENT_BYTES + 1)
    found = read_changes(artifacts)
    assert found.changes == changes_of(events).changes
    assert len(found.problems) == 2
    assert any("9000-link.json" in problem for problem in found.problems)
    assert any("9001-big.json" in problem for problem in found.problems)


def test_long_sides_and_long_changes_are_bounded() -> None:
    huge = {"before": "", "after": "x" * (SIDE_CHARS + 1), "after_header": "/etc/big"}
    assert [line.text for line in diff_lines(huge)] == [
        f"diff skipped: after is longer than {SIDE_CHARS} characters"
    ]
    many = "".join(f"line {n}\n" for n in range(MAX_LINES * 2))
    event = {
        "event": "runner_on_ok",
        "event_data": {"host": "h", "task": "t", "res": {"changed": True,
                       "diff": {"before": "", "after": many}}},
    }  # fmt: skip
    change = task_change(event)
    assert change is not None
    assert len(change.lines) == MAX_LINES + 1
    assert change.lines[-1].kind == "note"
    assert "more lines not shown" in change.lines[-1].text


def test_skipped_comparisons_are_named() -> None:
    texts = [line.text for line in diff_lines([{"dst_binary": 1}, {"src_larger": 1024}])]
    assert texts == [
        "diff skipped: the destination file appears to be binary",
        "diff skipped: the source file is larger than 1024 bytes",
    ]
    assert diff_lines({"before": "same\n", "after": "same\n"}) == []


def _render(changes: RunChanges, hosts: list[str], *, color: bool, check: bool = True) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=color, no_color=not color, width=200)
    print_changes(changes, hosts, console, check=check)
    return out.getvalue()


def test_rendered_per_host_in_colour(events: list[dict[str, Any]]) -> None:
    text = _render(changes_of(events), ["node-a", "node-b", "node-c"], color=True)
    plain = _render(changes_of(events), ["node-a", "node-b", "node-c"], color=False)
    assert "\x1b[" in text
    assert "\x1b[32m    +options nvidia NVreg_EnableGpuFirmware=1" in text  # green
    assert "\x1b[31m    -options nvidia NVreg_OldSetting=1" in text  # red
    assert "\x1b" not in plain
    lines = plain.splitlines()
    assert lines[0] == "node-a: would make 6 changes"
    assert "  Write the drop-ins (fabricmanager)" in lines
    assert lines.index("node-b: would make 6 changes") > lines.index("node-a: would make 6 changes")
    assert lines[-1] == "node-c: no changes"
    assert "node-a: made 6 changes" in _render(changes_of(events), [], color=False, check=False)


def test_node_text_is_escaped_never_obeyed() -> None:
    hostile = "\x1b]52;c;cm0gLXJmIC8=\x07evil\x1b[2J"
    event = {
        "event": "runner_on_ok",
        "event_data": {"host": "node\x1b[31m", "task": "[bold]t[/]",
                       "res": {"changed": True, "diff": {"before": "", "after": hostile + "\n",
                                                         "after_header": "/etc/\u202ex"}}},
    }  # fmt: skip
    change = task_change(event)
    assert change is not None
    text = _render(RunChanges((change,)), [], color=True)
    for obeyed in ("\x1b]52", "\x1b[2J", "\u202e"):
        assert obeyed not in text
    assert "\\x1b]52;c;cm0gLXJmIC8=\\x07evil\\x1b[2J" in text
    assert "\\u202e" in text
    assert "[bold]t[/]" in text  # shown as written, not read as markup
