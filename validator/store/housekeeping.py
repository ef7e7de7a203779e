"""The store's housekeeping: pruning old runs, compacting the file, checking its integrity.

:class:`Housekeeping` is the part of :class:`~validator.store.history_store.Store` that
``gpuready history --prune`` (and ``--vacuum``) uses; none of it runs unless asked.
"""

from __future__ import annotations

import datetime
import sqlite3

from validator.store.opening import _store_bytes
from validator.store.queries import (
    _PRUNE_BATCH,
    PRUNE_HOLDS_LATEST,
    PRUNE_NTH_NEWEST_RUN,
    PruneOutcome,
    _delete_runs,
    _RolledBack,
)
from validator.store.store_base import _StoreBase
from validator.store.store_errors import StoreError, _errors, _Unwritable


class Housekeeping(_StoreBase):
    """The store's prune, vacuum and integrity check (a mixin of ``Store``)."""

    def prune(
        self,
        *,
        keep_days: float | None = None,
        keep_runs: int | None = None,
        dry_run: bool = False,
        now: datetime.datetime | None = None,
    ) -> PruneOutcome:
        """Remove the runs the retention policy does not keep, with their results.

        A run is kept when it is younger than ``keep_days`` or among the
        ``keep_runs`` newest (either rule given keeps it); a run still running is
        always kept, and so is a run holding the latest certificate of some host
        (drift's baseline). Removal goes a batch of runs per transaction, so other
        writers wait little; a dry run makes the same deletions and rolls them back.

        Raises:
            ValueError: neither rule given, or a rule below 1.
            StoreError: the store was opened read-only, or the database refused.
        """
        if keep_days is None and keep_runs is None:
            raise ValueError("prune needs keep_days, keep_runs or both")
        if (keep_days is not None and not keep_days >= 1) or (
            keep_runs is not None and keep_runs < 1
        ):
            raise ValueError("keep_days and keep_runs are at least 1")
        self._refuse_readonly()
        clauses: list[str] = ["status != 'running'"]
        params: list[object] = []
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            if db is None:
                return PruneOutcome((), 0, 0, (), dry_run)
            if keep_runs is not None:
                found = db.execute(PRUNE_NTH_NEWEST_RUN, (keep_runs - 1,)).fetchone()
                if found is None:  # no more runs than are kept
                    return PruneOutcome((), 0, 0, (), dry_run)
                clauses.append("id < ?")
                params.append(found[0])
            if keep_days is not None:
                moment = now or datetime.datetime.now(datetime.timezone.utc)
                cutoff = moment - datetime.timedelta(days=keep_days)
                clauses.append("started_at < ?")
                params.append(cutoff.isoformat(timespec="seconds"))
            # Sorted here, not by SQL: an ORDER BY id would walk every run by its key
            # instead of the start index (runs_by_start) that finds just the old ones.
            query = f"SELECT id FROM runs WHERE {' AND '.join(clauses)}"  # noqa: S608 - fixed fragments; values bound
            candidates = sorted(row[0] for row in db.execute(query, params))
            kept = tuple(i for i in candidates if db.execute(PRUNE_HOLDS_LATEST, (i,)).fetchone())
        keep = set(kept)
        doomed = [i for i in candidates if i not in keep]
        removed: list[int] = []
        results = certificates = 0
        for start in range(0, len(doomed), _PRUNE_BATCH):
            batch = doomed[start : start + _PRUNE_BATCH]
            try:
                with self._write() as db:
                    done = _delete_runs(db, batch)
                    if dry_run:
                        raise _RolledBack(done)
            except _RolledBack as rolled:
                done = rolled.counts
            except _Unwritable as exc:
                raise StoreError(
                    f"history database {self.path} could not be pruned ({exc.reason}); "
                    f"{len(removed)} runs were removed before: run it again later"
                ) from None
            removed.extend(batch)
            results += done[0]
            certificates += done[1]
        return PruneOutcome(tuple(removed), results, certificates, kept, dry_run)

    def vacuum(self) -> tuple[int, int]:
        """Give the pages freed by :meth:`prune` back to the filesystem: (bytes before, after).

        SQLite rewrites the whole file (VACUUM), then empties its write-ahead log. It
        holds the write lock while it does (seconds for a large store; other writers
        wait out their busy timeout, then spool) and needs up to the file's size again
        on disk while it runs.

        Raises:
            StoreError: the store was opened read-only, or SQLite refused (locked
                after the wait, no space): nothing is lost, the file stays as it was.
        """
        self._refuse_readonly()
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            if db is None:
                return 0, 0
            before = _store_bytes(self.path)
            try:
                with self._busy_wait(db, None):
                    db.execute("VACUUM")
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:
                raise StoreError(
                    f"history database {self.path} could not be compacted "
                    f"({self._reason(exc, None)}); the runs were removed, and the next "
                    "prune --vacuum tries again"
                ) from None
            return before, _store_bytes(self.path)

    def integrity_check(self) -> str:
        """SQLite's own integrity check: ``ok`` or the first problem it found."""
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            row = db.execute("PRAGMA integrity_check").fetchone() if db is not None else ("ok",)
        return str(row[0])
