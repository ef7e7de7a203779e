"""What the parts of :class:`~validator.store.history_store.Store` share, declared once.

:class:`Store <validator.store.history_store.Store>` is one class made of parts: its
reads (:mod:`.history_reads`), its housekeeping (:mod:`.housekeeping`) and its pending
runs (:mod:`.pending_runs`), each a mixin it inherits. Each part uses the store's state
and the transaction it writes in; :class:`_StoreBase` declares them here, for the type
checker, and ``Store`` defines them.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from validator.store.spool import _Spool


class _StoreBase:
    """The state and the methods the store's parts rely on; ``Store`` sets and defines them."""

    path: Path
    readonly: bool
    retry_s: float
    notices: list[str]
    cannot_write: str | None
    _db: sqlite3.Connection | None
    _lock: threading.RLock
    _started: dict[int, dict[str, Any]]
    _spools: dict[int, _Spool]

    if TYPE_CHECKING:  # declared for the mixins' type checks; Store defines them

        def _connection(self, *, create: bool) -> sqlite3.Connection | None: ...

        def _write(
            self, wait_s: float | None = None
        ) -> AbstractContextManager[sqlite3.Connection]: ...

        def _busy_wait(
            self, db: sqlite3.Connection, seconds: float | None
        ) -> AbstractContextManager[None]: ...

        def _reason(self, exc: sqlite3.Error, wait_s: float | None) -> str: ...

        def _refuse_readonly(self) -> None: ...

        def _lock_path(self, run_id: int) -> Path: ...

        def _owner_alive(self, run_id: int, pid: int | None) -> bool: ...
