"""The store's pending runs: spooling a run the database refuses, importing it, dead runs.

:class:`PendingRuns` is the part of :class:`~validator.store.history_store.Store` that
keeps a run when the database cannot be written: the run and its results go to a pending
file (:mod:`validator.store.spool` says what one holds), imported by the next process
that can write. It also marks ``interrupted`` the runs whose process died
(:mod:`validator.store.run_locks`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any

from validator.error_tree import UnsafePathError
from validator.files import Folder, remove_file, write_atomic
from validator.safe_text import one_line
from validator.store.defaults import HOUSEKEEPING_WAIT_S
from validator.store.queries import RUN_KINDS, RunKind, _argv
from validator.store.run_locks import _lock_held
from validator.store.spool import (
    _import_run,
    _PendingError,
    _Spool,
    _writer_gone,
    pending_dir,
    read_pending,
)
from validator.store.store_base import _StoreBase
from validator.store.store_errors import NotStoredError, StoreError, _Unwritable


class PendingRuns(_StoreBase):
    """The store's pending files and dead runs (a mixin of ``Store``)."""

    def _spool(self, key: int, run: dict[str, Any], reason: str) -> _Spool:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        # A random part too: two stores of one process may spool in the same second.
        name = f"{stamp}-{os.getpid()}-{len(self._spools) + 1}-{secrets.token_hex(4)}.json"
        spool = _Spool(
            path=pending_dir(self.path) / name,
            run={**run, "status": "running", "finished_at": None},
            reason=reason,
        )
        self._spools[key] = spool
        return spool

    def _spool_existing(self, run_id: int, reason: str) -> _Spool:
        """Spool a run that is in the database (its row committed, results perhaps too)."""
        row = self._started.get(run_id) or self._read_run(run_id)
        return self._spool(run_id, {**row, "db_run_id": run_id}, reason)

    def _read_run(self, run_id: int) -> dict[str, Any]:
        """A run's row as a pending file records it (a locked database still reads)."""
        try:
            with self._lock:
                db = self._connection(create=False)
                found = None
                if db is not None:
                    found = db.execute(
                        "SELECT kind, started_at, hosts, policy_digest, argv, tool_version, pid"
                        " FROM runs WHERE id = ?",
                        (run_id,),
                    ).fetchone()
        except (sqlite3.Error, StoreError):
            found = None
        if found is None:
            raise StoreError(f"history database {self.path} has no run {run_id}")
        kind, started_at, hosts, digest, argv, version, pid = found
        return {
            "kind": kind if kind in RUN_KINDS else RunKind.CERTIFY.value,
            "started_at": started_at,
            "hosts": hosts,
            "policy_digest": digest,
            "argv": _argv(argv),
            "tool_version": version,
            "pid": pid,
            "hostname": socket.gethostname(),
        }

    def _save(self, spool: _Spool, *, final: bool = False) -> None:
        """Write the spooled run's pending file; a final save that fails raises."""
        text = json.dumps(spool.document(self.path), indent=1, sort_keys=True) + "\n"
        try:
            # <db>.pending/ is ours: made when missing, refused when it is a link.
            write_atomic(spool.path, text, mode=0o600, start=spool.path.parent)
        except OSError as exc:
            spool.error = f"{spool.path}: {exc.strerror or one_line(exc)}"
            if final:
                raise NotStoredError(
                    f"the run was not stored: history database {self.path} could not be "
                    f"written ({spool.reason}) and neither could {spool.error}; free space or "
                    "fix the database, then run again"
                ) from None
            return
        spool.error = None
        if not spool.announced:
            spool.announced = True
            self.notices.append(
                f"warning: history database {self.path} could not be written ({spool.reason}): "
                f"the run is saved in {spool.path}; the next certify or drift run imports it"
            )

    # ------------------------------------------------------------ importing

    def pending_files(self) -> list[Path]:
        """The pending files waiting to be imported, oldest first."""
        directory = pending_dir(self.path)
        try:
            # A link (to the folder or in it) is never read: only regular files are listed.
            with Folder.open(directory, create=False) as folder:
                return [directory / name for name in folder.files() if name.endswith(".json")]
        except OSError:
            return []

    def import_pending(self) -> list[Path]:
        """Import every pending run whose process is done; each file goes once committed.

        A file still being written by a live process waits; a file that is not a
        pending run is left in place with a notice; a database still locked leaves
        the rest for the next run.

        Returns:
            The files imported (and removed).
        """
        imported: list[Path] = []
        for path in self.pending_files():
            if any(spool.path == path for spool in self._spools.values()):
                continue  # our own, still being written
            try:
                run, results = read_pending(path)
            except _PendingError as exc:
                self.notices.append(f"warning: cannot import {exc}; fix or remove the file")
                continue
            if run["status"] == "running" and not _writer_gone(path, run):
                continue
            try:
                with self._write(HOUSEKEEPING_WAIT_S) as db:
                    _import_run(db, run, results)
            except _Unwritable:
                break
            with contextlib.suppress(OSError, UnsafePathError):
                remove_file(path)
            imported.append(path)
        if imported:
            with contextlib.suppress(OSError):
                pending_dir(self.path).rmdir()  # only when empty
            runs = "run" if len(imported) == 1 else "runs"
            self.notices.append(
                f"imported {len(imported)} pending {runs} into history database {self.path} "
                f"from {pending_dir(self.path)}"
            )
        return imported

    def mark_dead_runs(self) -> list[int]:
        """Mark ``interrupted`` the running runs whose process is gone.

        Returns:
            The runs marked (none when the database cannot be written at once).
        """
        try:
            with self._lock:  # a read first: most opens need no write lock at all
                db = self._db
                if db is None or not self._dead_runs(db):
                    return []
        except sqlite3.Error:
            return []
        try:
            with self._write(HOUSEKEEPING_WAIT_S) as db:
                dead = self._dead_runs(db)  # again, under the lock
                db.executemany(
                    "UPDATE runs SET status = 'interrupted' WHERE id = ?", [(i,) for i in dead]
                )
        except _Unwritable:
            return []
        for run_id in dead:
            with contextlib.suppress(OSError):
                self._lock_path(run_id).unlink()
        return dead

    def _dead_runs(self, db: sqlite3.Connection) -> list[int]:
        running = db.execute("SELECT id, pid FROM runs WHERE status = 'running'").fetchall()
        return [run_id for run_id, pid in running if not self._owner_alive(run_id, pid)]

    def _owner_alive(self, run_id: int, pid: int | None) -> bool:
        held = _lock_held(self._lock_path(run_id))
        if held is None:
            # No lock file: a run of an older gpuready, or its lock failed. A pid alone
            # says nothing of a run on another host sharing this database: never call a
            # run dead on a guess.
            return True
        return held
