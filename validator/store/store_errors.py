"""The store's errors: what its callers catch, and SQLite's exceptions turned into them."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from validator.error_tree import BadInputError, CouldNotRunError
from validator.safe_text import one_line


class StoreError(BadInputError):
    """The history database cannot be used; one line naming the file and what to do."""


class NoHistoryError(StoreError):
    """There is no history database yet at the path asked to be read."""


class NotStoredError(CouldNotRunError):
    """A run was measured but could be stored neither in the database nor in a pending file."""


class _Unwritable(Exception):
    """The database refused a write (locked, full, damaged): the run goes to a pending file."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@contextlib.contextmanager
def _errors(path: Path) -> Iterator[None]:
    """Turn SQLite's exceptions into one-line StoreErrors naming the file."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        raise StoreError(f"history database {path}: {one_line(exc)}") from None
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"history database {path} is damaged ({one_line(exc)}): "
            "move it away and start a new one with --db"
        ) from None
