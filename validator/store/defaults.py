"""Where the history database lives unless told, and how long a write waits for it."""

from __future__ import annotations

import math
import os
from pathlib import Path

from validator import fields as doc
from validator.store.store_errors import StoreError

# How long a write waits for another process's transaction before the run is
# spooled to a pending file; $GPUREADY_DB_RETRY_S overrides it (tests use a short one).
DEFAULT_RETRY_S = 30.0
RETRY_ENV = "GPUREADY_DB_RETRY_S"
MAX_RETRY_S = 3600.0
# Importing pending runs and marking dead ones is housekeeping: never worth a long wait.
HOUSEKEEPING_WAIT_S = 1.0


def state_dir() -> Path:
    """``$XDG_STATE_HOME/gpuready``, else ``~/.local/state/gpuready``: gpuready's own state."""
    state = os.environ.get("XDG_STATE_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    base = Path(state) if state and Path(state).is_absolute() else Path.home() / ".local" / "state"
    return base / "gpuready"


def default_db_path() -> Path:
    """``$XDG_STATE_HOME/gpuready/history.db``, else ``~/.local/state/gpuready/history.db``."""
    return state_dir() / "history.db"


def retry_budget(seconds: float | None = None) -> float:
    """How long a write waits for the database: ``seconds``, else ``$GPUREADY_DB_RETRY_S``.

    Raises:
        StoreError: the variable is not a number of seconds from 0 to an hour.
    """
    if seconds is not None:
        return min(max(0.0, float(seconds)), MAX_RETRY_S)
    text = os.environ.get(RETRY_ENV, "").strip()
    if not text:
        return DEFAULT_RETRY_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= MAX_RETRY_S:  # NaN fails too
        raise StoreError(
            f"{RETRY_ENV}={doc.excerpt(text)} is not a number of seconds from 0 to "
            f"{MAX_RETRY_S:g}; set it to e.g. 30, or unset it"
        )
    return value
