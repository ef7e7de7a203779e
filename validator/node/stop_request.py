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
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

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
def on_stop_signals() -> Iterator[None]:
    """Within: SIGINT, SIGTERM and SIGHUP ask for a stop (:func:`request`); the old handlers after.

    A signal the process was started ignoring (``nohup``'s SIGHUP) stays ignored. Only the
    main thread can set handlers; elsewhere this changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}
    for number in STOP_SIGNALS:
        old = signal.getsignal(number)
        if old is signal.SIG_IGN:
            continue
        previous[number] = signal.SIG_DFL if old is None else old
    reset()
    for caught in previous:
        signal.signal(caught, _handle)
    try:
        yield
    finally:
        for caught, handler in previous.items():
            signal.signal(caught, handler)


__all__ = ["STOP_SIGNALS", "on_stop_signals", "reason", "request", "requested", "reset"]
