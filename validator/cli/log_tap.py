"""A line for the run's log, without importing ``logging`` where no log was asked for.

``--log-file`` and ``--verbose`` import validator.cli.run_log (and so ``logging``);
a run without them never does, and pays nothing here but a dictionary lookup.
"""

from __future__ import annotations

import sys


def log_line(level: str, line: str, *, said: bool = False) -> None:
    """``line`` in the run's log at ``level`` ("info", "error"), where one was started.

    ``said``: the line is already on stderr, so -v's stderr log leaves it out.
    """
    run_log = sys.modules.get("validator.cli.run_log")
    if run_log is not None:
        getattr(run_log.log, level)(line, extra={run_log.SAID: True} if said else None)


__all__ = ["log_line"]
