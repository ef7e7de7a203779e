"""Stop signals: SIGTERM and SIGHUP end a run the way Ctrl-C does; a second one ends it at once.

kill, timeout, ``systemctl stop`` and Slurm's scancel send SIGTERM, and Slurm sends
SIGKILL KillWait seconds later (30 by default). Python's default for SIGTERM is to die
on the spot, which loses a burn's figures, its reports and its history row. So every
stop signal is turned into the KeyboardInterrupt the code already answers: the burn
stops after its batch (validator.node.burnin.run waits INTERRUPT_WAIT_S at most), a
fleet marks its unfinished hosts, and the run is judged, written and recorded as
interrupted. Once the measuring is over (:func:`measured`), a first signal interrupts
nothing: the reports and the history commit are seconds away and are let finish.

A second signal means "now": the handler steps aside and the process dies of that
signal, as it would have without gpuready's handler.

A signal the process was started ignoring (``nohup`` ignores SIGHUP, a shell's
background job SIGINT) stays ignored.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from types import FrameType

from validator.error_tree import ExitCode
from validator.node.stop_request import STOP_SIGNALS, handling_stop_signals


class _State:
    """What this process was told: the first stop signal, and whether measuring is over."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.measured = False
        self.late = False  # the first came after the measuring
        self.installed = False


_state = _State()


def _handle(signum: int, frame: FrameType | None) -> None:
    del frame
    if _state.received is not None:
        # The second: no more waiting. Die of it, as without a handler (a shell shows 128+n).
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _state.received, _state.late = signum, _state.measured
    if not _state.measured:
        raise KeyboardInterrupt


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Within: SIGINT, SIGTERM and SIGHUP stop the run as Ctrl-C does; the old handlers after.

    Only the main thread can set handlers; elsewhere (a test's worker thread) this
    changes nothing.
    """
    # Reset before the handlers go in: a signal in between is this run's first, never
    # taken for a second one left from an earlier run in the same process.
    _state.received, _state.measured, _state.late = None, False, False
    with handling_stop_signals(_handle) as installed:
        if not installed:
            yield
            return
        _state.installed = True
        try:
            yield
        finally:
            _state.installed = False


def measured() -> None:
    """The measuring is over: a first stop signal from now on interrupts nothing.

    Judging, writing the reports and committing history take seconds; cutting
    them short would lose what was measured (or leave the certificate without its
    history row), and a second signal still ends the process at once.
    """
    _state.measured = True


def received() -> int | None:
    """The first stop signal this run got, or None."""
    return _state.received if _state.installed else None


def exit_code(code: int) -> int:
    """``code``, but an interrupted run stopped by SIGTERM or SIGHUP exits 128 + its number.

    That is what a shell reports for a process the signal killed, and what systemd
    and Slurm expect of a stopped job; Ctrl-C keeps 130 (128 + SIGINT).
    """
    number = received()
    if code == ExitCode.INTERRUPTED and number is not None:
        return 128 + number
    return code


def late_notice() -> str | None:
    """One stderr line when a stop signal came after the measuring, else None."""
    number = received()
    if number is None or not _state.late:
        return None
    name = signal.Signals(number).name
    return (
        f"{name} came after the measuring had ended: the run was finished and recorded "
        "(a second signal ends gpuready at once)"
    )


__all__ = ["STOP_SIGNALS", "exit_code", "late_notice", "measured", "received", "stop_signals"]
