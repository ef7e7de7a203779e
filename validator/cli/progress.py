"""Live progress of a fleet run: rich on a terminal, one plain line per host elsewhere."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from validator.model import HostSpec, NodeResult, Verdict
from validator.remote.transport import Phase
from validator.safe_text import visible

if TYPE_CHECKING:
    # rich is imported where it draws: a run off a terminal (--json into a pipe) needs none
    from rich.console import Console, RenderableType
    from rich.live import Live
    from rich.table import Table

_FINAL = ("done", "failed")
_SHOWN_RUNNING = 12  # hosts listed by name; the rest are counted


_Display = TypeVar("_Display", bound="LiveDisplay")


def may_be_terminal() -> bool:
    """Whether rich could take stderr for a terminal; False means it surely would not.

    rich's own test (``Console.is_terminal``) reads TTY_COMPATIBLE, FORCE_COLOR and
    isatty: when none of them says "terminal", the display prints plain lines and
    rich need not be imported at all.
    """
    if os.environ.get("TTY_COMPATIBLE") == "1" or os.environ.get("FORCE_COLOR") is not None:
        return True
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # stderr already closed
        return False


class LiveDisplay:
    """A rich Live view on a terminal (nothing elsewhere), redrawn from ``_render``."""

    def __init__(self, console: Console | None = None) -> None:
        self._console = console
        self.interactive = (
            self.console.is_terminal if console is not None or may_be_terminal() else False
        )
        self.lock = threading.Lock()
        self.live: Live | None = None

    @property
    def console(self) -> Console:
        """Where the display draws: the one given, else rich's stderr console (made when asked)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True)
        return self._console

    def print_line(self, text: str) -> None:
        """One plain line on stderr, as the display prints without a terminal.

        Control characters (a host's name is the host's to choose) are shown escaped,
        a newline too: one line, whether rich writes it or, off a terminal and without
        a console given, it is written directly (so that rich is not imported for it).
        """
        text = visible(text)
        if self._console is not None:
            self._console.print(text, markup=False, highlight=False, soft_wrap=True)
            return
        stream = sys.stderr
        if stream is not None:
            stream.write(text + "\n")
            stream.flush()

    def _render(self) -> RenderableType:
        raise NotImplementedError

    def refresh(self) -> None:
        """Redraw, when drawing at all."""
        if self.live is not None:
            self.live.update(self._render())

    def __enter__(self: _Display) -> _Display:
        if self.interactive:
            from rich.live import Live

            self.live = Live(
                self._render(), console=self.console, refresh_per_second=4, transient=True
            )
            self.live.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.live is not None:
            self.live.__exit__(kind, error, trace)


class FleetProgress(LiveDisplay):
    """Counts hosts done / running / failed and each running host's phase."""

    def __init__(self, console: Console | None = None) -> None:
        super().__init__(console)
        self.total = 0
        self.phases: dict[str, str] = {}
        self.verdicts: Counter[str] = Counter()
        self.started = time.monotonic()

    def set_hosts(self, hosts: Sequence[HostSpec]) -> None:
        """The hosts this run covers (known once the inventory is read)."""
        with self.lock:
            self.total = len(hosts)
            self.phases = {host.name: "waiting" for host in hosts}
        self.refresh()

    def phase(self, host: str, phase: Phase) -> None:
        """A host entered a phase (called from worker threads)."""
        with self.lock:
            self.phases[host] = phase
        self.refresh()

    def result(self, result: NodeResult) -> None:
        """A host's verdict arrived."""
        with self.lock:
            self.verdicts[result.verdict.value] += 1
            done = sum(self.verdicts.values())
        if self.live is not None:
            self.refresh()
        else:
            why = "" if result.verdict is Verdict.CERTIFIED else f"  {result.summary}"
            self.print_line(f"[{done}/{self.total}] {result.hostname} {result.verdict.value}{why}")

    def _render(self) -> Table:
        from rich.table import Table
        from rich.text import Text

        with self.lock:
            running = {h: p for h, p in self.phases.items() if p not in (*_FINAL, "waiting")}
            verdicts = dict(self.verdicts)
        done = sum(verdicts.values())
        table = Table.grid(padding=(0, 2))
        elapsed = time.monotonic() - self.started
        table.add_row(
            f"[bold]{done}/{self.total} hosts[/]",
            f"[green]{verdicts.get('CERTIFIED', 0)} certified[/]",
            f"[red]{verdicts.get('NOT_CERTIFIED', 0)} not certified[/]",
            f"[yellow]{verdicts.get('UNKNOWN', 0)} unknown[/]",
            f"{len(running)} running",
            f"{elapsed:.0f} s",
        )
        for host, phase in sorted(running.items())[:_SHOWN_RUNNING]:
            # Text, not markup: a host named "[red]x" is shown as it is named
            table.add_row(Text(f"  {visible(host)}"), visible(phase), "", "", "", "")
        if len(running) > _SHOWN_RUNNING:
            table.add_row(f"  ... and {len(running) - _SHOWN_RUNNING} more", "", "", "", "", "")
        return table


def stderr_console() -> Console:
    """The console progress goes to (stderr, so --json on stdout stays clean)."""
    from rich.console import Console

    return Console(stderr=True, force_terminal=None, file=sys.stderr)
