"""Live progress of one node's burn-in: a rich table on a terminal, a plain line per 10 s elsewhere.

The burn calls the display about once a second (:data:`validator.node.burnin.run.ProgressSink`).
Every field may still be missing (no sample yet, no timing window yet): it shows as ``-``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from validator.cli.progress import LiveDisplay
from validator.model import TelemetrySample, known
from validator.node.burnin.burn_progress import BurnProgress, GpuProgress
from validator.safe_text import visible

if TYPE_CHECKING:
    # rich is imported where it draws: plain lines (no terminal) need none of it
    from rich.console import Console, RenderableType

PLAIN_INTERVAL_S = 10.0  # one plain line this often without a terminal
_EARLY_S = 0.5  # a tick this close to its line's due time prints it (the burn ticks every ~1 s)
_STATE_STYLE = {"running": "green", "setup": "yellow", "done": "dim", "failed": "bold red"}
_MISSING = "-"


def _clock(seconds: int) -> str:
    """``4:18``, ``1:02:03``."""
    hours, rest = divmod(max(0, seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _seconds(progress: BurnProgress) -> tuple[int, int, int]:
    """Elapsed, asked-for and left, in whole seconds that add up."""
    elapsed = int(progress.elapsed_s) if math.isfinite(progress.elapsed_s) else 0
    duration = round(progress.duration_s) if math.isfinite(progress.duration_s) else 0
    return elapsed, duration, max(0, duration - elapsed)


def time_line(progress: BurnProgress) -> str:
    """``burn 0:42 / 5:00, 4:18 left`` (``finishing`` once the time is up)."""
    elapsed, duration, left = _seconds(progress)
    rest = f"{_clock(left)} left" if left else "finishing"
    return f"burn {_clock(elapsed)} / {_clock(duration)}, {rest}"


def _number(value: object, unit: str = "") -> str | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return f"{value:.0f}{unit}"
    return None


def _tflops(value: float | None) -> str | None:
    if value is None or not math.isfinite(value):
        return None
    # A CPU stand-in runs well under one TFLOPS: keep its figure readable.
    return f"{value:.0f}" if value >= 10 else f"{value:.3g}"


def _power(gpu: GpuProgress) -> str | None:
    drawn = _number(gpu.sample.power_w) if gpu.sample is not None else None
    if drawn is None:
        return None
    limit = _number(gpu.power_limit_w)
    return f"{drawn}/{limit} W" if limit is not None else f"{drawn} W"


def _reasons(sample: TelemetrySample | None) -> tuple[str, ...]:
    """Active clock-event reasons, ``none`` left out."""
    if sample is None or not known(sample.clock_event_reasons):
        return ()
    reasons = sample.clock_event_reasons
    if not isinstance(reasons, tuple):
        return ()
    return tuple(str(reason) for reason in reasons if reason and reason != "none")


def _fields(gpu: GpuProgress) -> dict[str, str | None]:
    sample = gpu.sample
    temperature = _number(sample.temperature_gpu_c, " C") if sample is not None else None
    clock = _number(sample.sm_clock_mhz, " MHz") if sample is not None else None
    tflops = _tflops(gpu.tflops)
    return {
        "tflops": f"{tflops} TFLOPS" if tflops is not None else None,
        "power": _power(gpu),
        "temperature": temperature,
        "clock": clock,
        "reasons": ",".join(_reasons(sample)) or None,
    }


def plain_line(progress: BurnProgress) -> str:
    """One line: ``burn 40/300 s: gpu0 712 TFLOPS 688/700 W 71 C 1830 MHz; gpu1 ...``."""
    elapsed, duration, _ = _seconds(progress)
    parts = []
    for gpu in progress.gpus:
        words = [f"gpu{gpu.index}"]
        if gpu.state != "running":
            words.append(gpu.state)
        words.extend(value for value in _fields(gpu).values() if value is not None)
        parts.append(" ".join(words))
    return f"burn {elapsed}/{duration} s: " + ("; ".join(parts) or "no GPU")


def render_burn(progress: BurnProgress | None) -> RenderableType:
    """The terminal view: the time left above a row per GPU."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if progress is None:
        return Text("collecting facts ...", style="dim")
    table = Table(box=None, padding=(0, 2), header_style="bold")
    for column in ("GPU", "state", "TFLOPS", "power", "temp", "SM clock", "clock events"):
        table.add_column(column, justify="left" if column in ("GPU", "state") else "right")
    table.columns[-1].justify = "left"
    for gpu in progress.gpus:
        fields = _fields(gpu)
        tflops = _tflops(gpu.tflops)
        table.add_row(
            Text(f"gpu{gpu.index}"),
            Text(visible(gpu.state), style=_STATE_STYLE.get(gpu.state, "red")),
            Text(tflops or _MISSING),
            Text(fields["power"] or _MISSING),
            Text(fields["temperature"] or _MISSING),
            Text(fields["clock"] or _MISSING),
            Text(visible(fields["reasons"] or ""), style="yellow"),
        )
    return Group(Text(time_line(progress), style="bold"), table)


class BurnDisplay(LiveDisplay):
    """The burn's progress sink: redraws the live view, or prints a plain line every 10 s.

    ``note``, when given, is printed once, with the burn's first progress (or by ``print_note``);
    ``quiet`` prints neither it nor plain lines (the live view, which leaves nothing, still draws).
    """

    def __init__(
        self,
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = PLAIN_INTERVAL_S,
        note: str | None = None,
        quiet: bool = False,
    ) -> None:
        super().__init__(console)
        self.quiet = quiet  # no plain lines (certify --quiet); a live view leaves nothing
        self.clock = clock
        self.interval_s = interval_s
        self.note = note
        self.latest: BurnProgress | None = None
        self._due: float | None = None  # when the next plain line is due; None: at once

    def __call__(self, progress: BurnProgress) -> None:
        """Called by the burn about once a second."""
        with self.lock:
            self.latest = progress
        self.print_note()
        if self.live is not None:
            self.refresh()
            return
        if self.quiet:
            return
        now = self.clock()
        if self._due is not None and now < self._due - _EARLY_S:
            return
        # Lines keep to their 10 s grid, however each tick jitters.
        self._due = now + self.interval_s if self._due is None else self._due + self.interval_s
        if self._due <= now:
            self._due = now + self.interval_s
        self.print_line(plain_line(progress))

    def print_note(self) -> None:
        """Print the note, unless printed already."""
        note, self.note = self.note, None
        if note is not None and not self.quiet:
            self.print_line(note)

    def _render(self) -> RenderableType:
        with self.lock:
            progress = self.latest
        return render_burn(progress)
