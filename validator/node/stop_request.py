"""A stop asked for from outside: the burn-in ends after its batch, and nothing starts after it.

The node agent runs under whatever started it: ``srun`` (Slurm sends SIGTERM at the job's
time limit or on scancel, then SIGKILL KillWait seconds later, 30 by default), an SSH
session (SIGHUP when it drops), ``timeout`` or systemd (SIGTERM). Dying on the spot loses
every figure the burn had. So the agent turns each stop signal into a request that the
burn's wait loop sees within a poll: the workers stop after their batch, the burn is
returned marked interrupted, the interconnect and DCGM are not started, and the facts
are printed as usual. A second signal ends the agent at once, as without a handler.

A flag rather than KeyboardInterrupt, because under ``--deadline`` the burn runs on a
collector thread while the main thread only waits: an exception raised in the main
thread never reaches it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, Callable, Optional

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
Handler = Callable[[int, Optional[FrameType]], None]

_requested = threading.Event()
_signal_number: list[int] = []


def request(signum: int | None = None) -> None:
    """Ask the burn to stop after its batch, and what follows it not to start."""
    if signum is not None and not _signal_number:
        _signal_number.append(signum)
    _requested.set()


def requested() -> bool:
    """Whether a stop was asked for in this run."""
    return _requested.is_set()


def reason() -> str:
    """Why what follows the burn was not started, naming the signal where one came."""
    if _signal_number:
        return f"not started: {signal.Signals(_signal_number[0]).name} stopped the run"
    return "not started: the run was stopped"


def reset() -> None:
    """Forget an earlier request (a new run in the same process: the tests)."""
    _requested.clear()
    _signal_number.clear()


def _handle(signum: int, frame: FrameType | None) -> None:
    del frame
    if _requested.is_set():
        # The second: no more waiting. Die of it, as without a handler (a shell shows 128+n).
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    request(signum)


@contextlib.contextmanager
def handling_stop_signals(handler: Handler) -> Iterator[bool]:
    """Within: ``handler`` for SIGINT, SIGTERM and SIGHUP; the old handlers after.

    A signal the process was started ignoring (``nohup``'s SIGHUP, a background job's
    SIGINT) stays ignored: the caller's choice stands. Only the main thread can set
    handlers; elsewhere this changes nothing, and the context's value is False.
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous: dict[int, Any] = {}
    for number in STOP_SIGNALS:
        old = signal.getsignal(number)
        if old is signal.SIG_IGN:
            continue
        previous[number] = signal.SIG_DFL if old is None else old
    for caught in previous:
        signal.signal(caught, handler)
    try:
        yield True
    finally:
        for caught, restored in previous.items():
            signal.signal(caught, restored)


@contextlib.contextmanager
def on_stop_signals() -> Iterator[None]:
    """Within: SIGINT, SIGTERM and SIGHUP ask for a stop (:func:`request`); old handlers after."""
    reset()
    with handling_stop_signals(_handle):
        yield


__all__ = [
    "STOP_SIGNALS",
    "handling_stop_signals",
    "on_stop_signals",
    "reason",
    "request",
    "requested",
    "reset",
]
