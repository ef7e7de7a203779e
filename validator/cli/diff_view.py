"""``provision --diff``: each host's changes, task by task, as coloured unified diffs.

Every line comes from a node (file contents, paths, package lists) and is escaped with
:func:`validator.safe_text.visible` before it reaches the terminal; rich draws it as
plain text, never as markup. Colour follows the console (``--no-color``, NO_COLOR).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from validator.safe_text import visible
from validator.service.provision_diff import LineKind, RunChanges, TaskChange

_STYLE: dict[LineKind, str] = {
    "header": "bold",
    "hunk": "cyan",
    "add": "green",
    "remove": "red",
    "context": "",
    "note": "dim italic",
    "prepared": "yellow",
}


def _task(change: TaskChange) -> Text:
    title = Text("  ")
    title.append(visible(change.task), style="bold")
    if change.item:
        title.append(f" ({visible(change.item)})")
    return title


def change_lines(change: TaskChange) -> list[Text]:
    """One task's change: its title, then its lines indented and coloured by kind."""
    lines = [_task(change)]
    for line in change.lines:
        lines.append(Text("    " + visible(line.text), style=_STYLE[line.kind]))
    return lines


def print_changes(
    changes: RunChanges, hosts: Sequence[str], console: Console, *, check: bool
) -> None:
    """Each host's changes (or that it has none), hosts by name; then unreadable events.

    Args:
        changes: the run's changes (validator.service.provision_diff.read_changes).
        hosts: every host the run processed, so a host without changes is named too.
        console: where to print (the closing table's console).
        check: a check-mode run: the changes are the ones that would be made.
    """
    grouped = changes.by_host()
    verb = "would make" if check else "made"
    for host in sorted({*hosts, *grouped}):
        mine = grouped.get(host, [])
        head = Text(visible(host), style="bold")
        plural = "s" if len(mine) != 1 else ""
        head.append(f": {verb} {len(mine)} change{plural}" if mine else ": no changes")
        console.print(head, soft_wrap=True)
        for change in mine:
            for line in change_lines(change):
                console.print(line, soft_wrap=True, highlight=False)
    for problem in changes.problems:
        console.print(Text(f"gpuready: diff: {visible(problem)}", style="yellow"), soft_wrap=True)
