"""The agent's progress lines, taken out of its stderr as they arrive over SSH."""

from __future__ import annotations

import functools
from collections.abc import Callable

from validator.node.burnin.worst_gpu import (
    PROGRESS_LINE_MOST,
    PROGRESS_PREFIX,
    WorstGpu,
    read_progress_line,
)
from validator.remote.transport import AgentRequest, Progress, tell_worst

_PROGRESS_MARK = PROGRESS_PREFIX.encode("ascii")


class ProgressLines:
    """Takes the agent's progress lines out of its stderr as they arrive (the rest is kept).

    A line the agent marks (``--progress-lines``) is read, bounded, into the host's worst
    GPU and handed on; it is not kept: the kept stderr is the agent's own words.
    """

    def __init__(self, tell: Callable[[WorstGpu], None] | None) -> None:
        self.tell = tell
        self.pending = bytearray()

    def split(self, data: bytes) -> bytes:
        """What of ``data`` is kept as stderr; progress lines in it are told."""
        if self.tell is None:
            return data
        self.pending += data
        kept = bytearray()
        while True:
            end = self.pending.find(b"\n")
            if end < 0:
                break
            line = bytes(self.pending[: end + 1])
            del self.pending[: end + 1]
            if not self._told(line):
                kept += line
        if len(self.pending) > PROGRESS_LINE_MOST:  # no newline yet: not one of ours
            kept += self.pending
            self.pending.clear()
        return bytes(kept)

    def rest(self) -> bytes:
        """What is left without a newline at the end: kept as it is."""
        rest, self.pending = bytes(self.pending), bytearray()
        return rest

    def _told(self, line: bytes) -> bool:
        if not line.startswith(_PROGRESS_MARK):
            return False
        worst = read_progress_line(line.decode("utf-8", "replace").rstrip("\r\n"))
        if worst is not None and self.tell is not None:
            self.tell(worst)
        return True


# Every line kept: a command that prints no progress lines (or was not asked to).
KEEP_ALL = ProgressLines(None)


def agent_lines(
    request: AgentRequest, progress: Progress, host: str
) -> tuple[tuple[str, ...], ProgressLines]:
    """The agent's extra arguments for its progress lines, and the reader of its stderr.

    Asked for only where there is a burn to tell about; a host's worst GPU goes to
    ``progress`` where it shows one (:func:`~validator.remote.transport.tell_worst`).
    """
    if request.burn is None or request.burn.duration_s <= 0:
        return (), KEEP_ALL
    return ("--progress-lines",), ProgressLines(functools.partial(tell_worst, progress, host))


__all__ = ["KEEP_ALL", "ProgressLines", "agent_lines"]
