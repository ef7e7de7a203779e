"""What a provisioning run changed (or would change, in check mode), per host and task.

``gpuready provision --diff`` asks Ansible for each result's ``diff``: a list of
``before``/``after`` texts (a file's content, or a mapping such as the file module's
path and state, with optional ``before_header``/``after_header``), a ``prepared``
text (apt's "The following NEW packages will be installed"), or a note that the
comparison was skipped (``src_binary``, ``dst_larger`` ...). ansible-runner keeps every
event of a run in its artifacts (``job_events/<counter>-<uuid>.json``); this module
reads them back after the run and turns the diffs of the results that changed
something into unified-diff lines, in the order Ansible reported them.

Decisions:

* The artifacts are read after the run rather than as events arrive, so the
  provisioning run itself carries nothing more than before when ``--diff`` is off.
* As Ansible's own output does, only a result that changed something shows its diff;
  a loop's items are shown one by one (the loop's summary result repeats them).
* Every event file is bounded before it is parsed (:data:`EVENT_BYTES`), and so is each
  side of a comparison (:data:`SIDE_CHARS`): difflib's work grows with the product of
  the two sides' lines. A change longer than :data:`MAX_LINES` is cut, saying so.
* The text is the node's, unescaped: whoever shows it escapes it
  (:func:`validator.safe_text.visible`).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from validator.limits import DOCUMENT_BYTES, SMALL_FILE_BYTES, OverLimitError, read_bounded

LineKind = Literal["header", "hunk", "add", "remove", "context", "note", "prepared"]
# One event file of ansible-runner's: a result with its diff fits far inside.
EVENT_BYTES = DOCUMENT_BYTES
# The longest side of one comparison that is diffed; a longer one is only named.
SIDE_CHARS = SMALL_FILE_BYTES
# Lines of one task's change shown; the rest are counted.
MAX_LINES = 400
CONTEXT_LINES = 3  # Ansible's DIFF_CONTEXT default
# The results that may carry a diff: a task's, and each item's of a loop.
_RESULT_EVENTS = ("runner_on_ok", "runner_item_on_ok")
# Ansible's notes for a comparison it did not make.
_SKIPPED = {
    "dst_binary": "diff skipped: the destination file appears to be binary",
    "src_binary": "diff skipped: the source file appears to be binary",
    "dst_larger": "diff skipped: the destination file is larger than {} bytes",
    "src_larger": "diff skipped: the source file is larger than {} bytes",
}


@dataclass(frozen=True)
class DiffLine:
    """One line of a change: its kind (how it is coloured) and its text, without newline."""

    kind: LineKind
    text: str


@dataclass(frozen=True)
class TaskChange:
    """What one task changed on one host (one loop item's change, for a loop).

    Attributes:
        host: the inventory host name.
        task: the task's name.
        item: the loop item's label; "" for a task without a loop.
        lines: the unified diff, the package manager's summary, or notes.
    """

    host: str
    task: str
    item: str
    lines: tuple[DiffLine, ...]

    def to_dict(self) -> dict[str, Any]:
        """The change as plain JSON-ready data (``provision --diff --json``)."""
        return {
            "host": self.host,
            "task": self.task,
            "item": self.item,
            "lines": [line.text for line in self.lines],
        }


@dataclass(frozen=True)
class RunChanges:
    """Every change of a run, in the order Ansible reported them, and what could not be read.

    Attributes:
        changes: the task changes.
        problems: event files that could not be read, one line each.
    """

    changes: tuple[TaskChange, ...] = ()
    problems: tuple[str, ...] = ()

    def by_host(self) -> dict[str, list[TaskChange]]:
        """The changes grouped by host (by name, as the closing table), each host's in order."""
        grouped: dict[str, list[TaskChange]] = {}
        for change in self.changes:
            grouped.setdefault(change.host, []).append(change)
        return dict(sorted(grouped.items()))


def _side(value: object) -> str:
    """One side of a comparison as text: a mapping as Ansible shows it (sorted JSON)."""
    if value is None:
        return ""
    if isinstance(value, Mapping):
        return json.dumps(value, indent=4, sort_keys=True, default=str) + "\n"
    return value if isinstance(value, str) else str(value)


def _kind(line: str, position: int) -> LineKind:
    # difflib's two file headers come first; every line after is a hunk's or a body line.
    if position < 2:
        return "header"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "remove"
    return "context"


def _compared(entry: Mapping[str, Any]) -> list[DiffLine]:
    """``before`` against ``after`` as unified-diff lines; a note when a side is too long."""
    before, after = _side(entry.get("before")), _side(entry.get("after"))
    for name, text in (("before", before), ("after", after)):
        if len(text) > SIDE_CHARS:
            note = f"diff skipped: {name} is longer than {SIDE_CHARS} characters"
            return [DiffLine("note", note)]
    before_name = f"before: {entry['before_header']}" if "before_header" in entry else "before"
    after_name = f"after: {entry['after_header']}" if "after_header" in entry else "after"
    unified = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=before_name,
        tofile=after_name,
        n=CONTEXT_LINES,
    )
    lines = []
    for position, line in enumerate(unified):
        text = line.rstrip("\n")
        lines.append(DiffLine(_kind(text, position), text))
        if not line.endswith("\n"):  # a last line without one (headers and hunks have one)
            lines.append(DiffLine("note", "\\ No newline at end of file"))
    return lines


def diff_lines(diff: object) -> list[DiffLine]:
    """A result's ``diff`` (one entry or a list of them) as lines to show; [] for none."""
    entries = diff if isinstance(diff, list) else [diff]
    lines: list[DiffLine] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        for key, note in _SKIPPED.items():
            if key in entry:
                lines.append(DiffLine("note", note.format(entry[key])))
        if "before" in entry and "after" in entry:
            lines += _compared(entry)
        prepared = entry.get("prepared")
        if prepared:
            lines += [DiffLine("prepared", text) for text in str(prepared).splitlines()]
    return lines


def _bounded(lines: list[DiffLine]) -> tuple[DiffLine, ...]:
    if len(lines) <= MAX_LINES:
        return tuple(lines)
    cut = len(lines) - MAX_LINES
    note = DiffLine("note", f"... {cut} more lines not shown (the run's artifacts keep them)")
    return (*lines[:MAX_LINES], note)


def task_change(event: Mapping[str, Any]) -> TaskChange | None:
    """The change one ansible-runner event reports; None for an event that shows none."""
    if event.get("event") not in _RESULT_EVENTS:
        return None
    data = event.get("event_data")
    if not isinstance(data, Mapping):
        return None
    res = data.get("res")
    if not isinstance(res, Mapping) or not res.get("changed") or "results" in res:
        return None
    lines = diff_lines(res.get("diff"))
    if not lines:
        return None
    item = res.get("_ansible_item_label", res.get("item", "")) if "ansible_loop_var" in res else ""
    return TaskChange(
        host=str(data.get("host", "")),
        task=str(data.get("task", "")),
        item="" if item is None else str(item),
        lines=_bounded(lines),
    )


def _counter(path: Path) -> int:
    head = path.name.partition("-")[0]
    return int(head) if head.isdigit() else -1


def _read_event(path: Path) -> Mapping[str, Any] | None:
    """One event file, bounded; None when it cannot hold a diff.

    Raises:
        OSError, OverLimitError, ValueError: it cannot be read or is not JSON.
    """
    # Never through a link: the artifacts folder is ours, and nothing in it should be one.
    data = read_bounded(path, EVENT_BYTES, nofollow=True)
    if b'"diff"' not in data:  # most events: read, not parsed
        return None
    event = json.loads(data.decode("utf-8"))
    return event if isinstance(event, Mapping) else None


def read_changes(artifacts_dir: str | Path) -> RunChanges:
    """Every change a run's ansible-runner artifacts record, in the order Ansible reported them.

    Args:
        artifacts_dir: the run's artifacts (:attr:`ProvisionResult.artifacts_dir`).

    Returns:
        The changes, and the event files that could not be read (the others are still read).
    """
    folder = Path(artifacts_dir) / "job_events"
    if not folder.is_dir() or folder.is_symlink():
        return RunChanges()
    changes: list[TaskChange] = []
    problems: list[str] = []
    for path in sorted(folder.glob("*.json"), key=_counter):
        try:
            event = _read_event(path)
        except (OSError, OverLimitError, ValueError) as exc:
            problems.append(f"{path}: cannot read the event: {exc}")
            continue
        change = task_change(event) if event is not None else None
        if change is not None:
            changes.append(change)
    return RunChanges(tuple(changes), tuple(problems))


def changes_of(events: Sequence[Mapping[str, Any]]) -> RunChanges:
    """The changes of events already in memory (a recorded run), in their order."""
    found = (task_change(event) for event in events)
    return RunChanges(tuple(change for change in found if change is not None))


__all__ = [
    "DiffLine",
    "RunChanges",
    "TaskChange",
    "changes_of",
    "diff_lines",
    "read_changes",
    "task_change",
]
