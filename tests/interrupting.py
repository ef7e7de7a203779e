"""Ctrl-C sent to this process mid-test, as a user's would arrive, and never past the test."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def ctrl_c_after(seconds: float) -> Iterator[None]:
    """SIGINT to this process after ``seconds``, raised as KeyboardInterrupt in the main thread.

    Python's own handler is installed for the block (a handler an earlier test left in this
    worker would swallow it), and the timer is cancelled on leaving, so a test that ends
    early never interrupts the next one.
    """
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, before)
