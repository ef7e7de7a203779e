"""Live progress of a fleet run: rich on a terminal, one plain line per host elsewhere."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
    from rich.text import Text

    from validator.node.burnin.worst_gpu import WorstGpu

_FINAL = ("done", "failed")
SHOWN_RUNNING = 12  # running hosts listed by name, the longest at it first; the rest counted
SHOWN_FAILED = 8  # hosts not certified listed by name, the latest first; the rest counted
_HOST_MOST = 48  # a longer host name is cut short in the live view (the report has it whole)


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


@dataclass
class _Host:
    """One host as the live view knows it: its phase, since when, and its result's gist."""

    phase: str = "waiting"
    started: float | None = None  # left "waiting"
    run_started: float | None = None  # entered "run": the agent (and its burn) started
    verdict: Verdict | None = None
    worst: str = ""  # the checks it failed and what to do, once its result is in
    burning: WorstGpu | None = None  # its burn's worst GPU so far, while it runs
    arrived: int = 0  # the order results came in: the latest shown first


class FleetProgress(LiveDisplay):
    """Each host's phase, time left and worst GPU, for 10 hosts or 1,000.

    The view is bounded whatever the fleet's size: a count line, the running hosts
    that have been at it longest (:data:`SHOWN_RUNNING`, the rest counted), the latest
    hosts not certified (:data:`SHOWN_FAILED`, the rest counted) and the slowest GPU so
    far. A host's time left comes from the burn's length once its agent runs, else from
    its deadline (when one was given). While a host burns, its row shows its worst GPU so
    far (:meth:`worst_gpu`: told by the local transport from the collector, by the SSH
    transport from the agent's progress lines; Ansible and Slurm tell none, and their rows
    show the time left alone); once its result is in, the checks it failed.

    Args:
        console: where to draw (rich's stderr console when None).
        quiet: print no plain lines off a terminal (``certify --quiet``).
        burn_s: the burn's length (0: none).
        deadline_s: each host's deadline, when given (None: the run's own).
        clock: the time, in seconds (a test's own clock).
        note: said once off a terminal, before the first host's line.
    """

    def __init__(
        self,
        console: Console | None = None,
        *,
        quiet: bool = False,
        burn_s: float = 0.0,
        deadline_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        note: str | None = None,
    ) -> None:
        super().__init__(console)
        self.quiet = quiet
        self.note = note  # printed once, before the first plain line
        self.burn_s = burn_s
        self.deadline_s = deadline_s
        self.clock = clock
        self.total = 0
        self.hosts: dict[str, _Host] = {}
        self.verdicts: Counter[str] = Counter()
        self.slowest: tuple[float, str, int] | None = None  # TFLOPS, host, GPU
        self.started = clock()

    @property
    def phases(self) -> dict[str, str]:
        """Each host's phase (``waiting`` until it starts)."""
        with self.lock:
            return {name: host.phase for name, host in self.hosts.items()}

    def set_hosts(self, hosts: Sequence[HostSpec]) -> None:
        """The hosts this run covers (known once the inventory is read)."""
        with self.lock:
            self.total = len(hosts)
            self.hosts = {host.name: _Host() for host in hosts}
        self.refresh()

    def phase(self, host: str, phase: Phase | str) -> None:
        """A host entered a phase (called from worker threads)."""
        now = self.clock()
        with self.lock:
            known = self.hosts.setdefault(host, _Host())
            known.phase = str(phase)
            if known.started is None:
                known.started = now
            if str(phase) == Phase.RUN.value and known.run_started is None:
                known.run_started = now
        self.refresh()

    def worst_gpu(self, host: str, worst: WorstGpu) -> None:
        """A host's burn: its worst GPU so far (called from worker threads)."""
        with self.lock:
            known = self.hosts.get(host)
            if known is None or known.verdict is not None:
                return  # not a host of this run, or its result is already in
            known.burning = worst
        self.refresh()

    def result(self, result: NodeResult) -> None:
        """A host's verdict arrived."""
        from validator.report.fleet_text import action_text

        counted = _counted(result)
        todo = action_text(result) if result.verdict is not Verdict.CERTIFIED else ""
        with self.lock:
            self.verdicts[result.verdict.value] += 1
            done = sum(self.verdicts.values())
            known = self.hosts.setdefault(result.hostname, _Host())
            known.verdict = result.verdict
            known.worst = counted + (f"  -> {todo}" if todo else "")
            known.arrived = done
            self._note_slowest(result)
        if self.live is not None:
            self.refresh()
        elif not self.quiet:
            note, self.note = self.note, None
            if note is not None:
                self.print_line(note)
            why = f"  {counted}" if counted else ""
            why += f"  -> {todo}" if todo else ""
            self.print_line(f"[{done}/{self.total}] {result.hostname} {result.verdict.value}{why}")

    def _note_slowest(self, result: NodeResult) -> None:
        burn = result.facts.burn
        for gpu in burn.gpus if burn is not None else ():
            tflops = gpu.tflops
            if isinstance(tflops, float) and (self.slowest is None or tflops < self.slowest[0]):
                self.slowest = (tflops, result.hostname, gpu.index)

    def time_left(self, host: _Host, now: float) -> str:
        """``burn 3:12 left``, ``4:40 left`` (to the deadline), ``finishing`` or ``-``."""
        if host.run_started is not None and self.burn_s > 0:
            left = self.burn_s - (now - host.run_started)
            if left > 0:
                return f"burn {_clock(left)} left"
        if self.deadline_s is not None and host.started is not None:
            left = self.deadline_s - (now - host.started)
            return f"{_clock(left)} left" if left > 0 else "past its deadline"
        return "finishing" if host.run_started is not None and self.burn_s > 0 else "-"

    def _render(self) -> RenderableType:
        from rich.console import Group
        from rich.text import Text

        now = self.clock()
        with self.lock:
            hosts = dict(self.hosts)
            verdicts = dict(self.verdicts)
            slowest = self.slowest
        running = [
            (name, host)
            for name, host in hosts.items()
            if host.verdict is None and host.phase not in (*_FINAL, "waiting")
        ]
        waiting = sum(1 for host in hosts.values() if host.phase == "waiting")
        elapsed = now - self.started
        parts: list[RenderableType] = [
            _count_line(verdicts, self.total, len(running), waiting, elapsed)
        ]
        # One width for the host column of both lists, so that they line up.
        width = min(max((len(visible(name)) for name in hosts), default=0), _HOST_MOST) + 2
        parts.extend(_running_rows(running, now, self, width))
        parts.extend(_failed_rows(hosts, width))
        if slowest is not None:
            tflops, name, index = slowest
            # Text, not markup: a host named "[red]x" is shown as it is named
            parts.append(
                Text(f"  slowest GPU so far: {visible(name)} GPU {index}, {tflops:.1f} TFLOPS")
            )
        return Group(*parts)


def _clock(seconds: float) -> str:
    """``4:18``, ``1:02:03``."""
    hours, rest = divmod(max(0, int(seconds)), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _counted(result: NodeResult) -> str:
    """``2 checks failed: memory.remap (GPU 1), gpu.present (GPU 2)``, as every output counts."""
    from validator.model.check_counts import check_words, count_checks
    from validator.report.shared import failing_checks

    counts = count_checks(result.findings)
    checks = failing_checks(result)
    if not checks or result.verdict is Verdict.CERTIFIED:
        return ""
    number, word = (
        (counts.failed, "failed") if counts.failed else (counts.unknown, "could not be judged")
    )
    noun = "check" if number == 1 else "checks"
    named = ", ".join(check_words(check, gpus) for check, gpus in checks[:3])
    more = f", +{len(checks) - 3} more" if len(checks) > 3 else ""
    return f"{number} {noun} {word}: {named}{more}"


def _count_line(
    verdicts: dict[str, int], total: int, running: int, waiting: int, elapsed: float
) -> Text:
    """``300/1000 hosts  270 certified  30 not certified  0 unknown  400 running, ...``."""
    from rich.text import Text

    done = sum(verdicts.values())
    return Text.from_markup(
        f"[bold]{done}/{total} hosts[/]  "
        f"[green]{verdicts.get('CERTIFIED', 0)} certified[/]  "
        f"[red]{verdicts.get('NOT_CERTIFIED', 0)} not certified[/]  "
        f"[yellow]{verdicts.get('UNKNOWN', 0)} unknown[/]  "
        f"{running} running, {waiting} waiting, {_clock(elapsed)}"
    )


def _grid(width: int) -> Table:
    """Host, phase (or verdict), then time left (or the worst): a row a line, never wrapped."""
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    table.add_column(width=width, no_wrap=True, overflow="ellipsis")
    table.add_column(width=len(Verdict.NOT_CERTIFIED.value), no_wrap=True)
    table.add_column(no_wrap=True, overflow="ellipsis")
    return table


def _running_rows(
    running: list[tuple[str, _Host]], now: float, display: FleetProgress, width: int
) -> list[RenderableType]:
    """The running hosts that have been at it longest, the rest counted in a line."""
    from rich.text import Text

    if not running:
        return []
    running.sort(key=lambda pair: (pair[1].started or now, pair[0]))
    table = _grid(width)
    for name, host in running[:SHOWN_RUNNING]:
        # Text, not markup: a host named "[red]x" is shown as it is named
        left = display.time_left(host, now)
        if host.burning is not None:
            left = f"{left}  {host.burning.words()}"
        table.add_row(Text(f"  {visible(name)}"), Text(visible(host.phase)), Text(left))
    parts: list[RenderableType] = [table]
    if len(running) > SHOWN_RUNNING:
        parts.append(Text(f"  ... and {len(running) - SHOWN_RUNNING} more running"))
    return parts


def _failed_rows(hosts: dict[str, _Host], width: int) -> list[RenderableType]:
    """The latest hosts not certified, each with its worst: the checks it failed, what to do."""
    from rich.text import Text

    failed = [
        (name, host)
        for name, host in hosts.items()
        if host.verdict is not None and host.verdict is not Verdict.CERTIFIED
    ]
    if not failed:
        return []
    failed.sort(key=lambda pair: -pair[1].arrived)
    table = _grid(width)
    for name, host in failed[:SHOWN_FAILED]:
        verdict = host.verdict.value if host.verdict is not None else ""
        style = "yellow" if host.verdict is Verdict.UNKNOWN else "red"
        table.add_row(
            Text(f"  {visible(name)}"), Text(verdict, style=style), Text(visible(host.worst))
        )
    parts: list[RenderableType] = [table]
    if len(failed) > SHOWN_FAILED:
        parts.append(Text(f"  ... and {len(failed) - SHOWN_FAILED} more not certified"))
    return parts


def stderr_console() -> Console:
    """The console progress goes to (stderr, so --json on stdout stays clean)."""
    from rich.console import Console

    return Console(stderr=True, force_terminal=None, file=sys.stderr)
