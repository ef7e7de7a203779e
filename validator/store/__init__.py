"""History: runs, per-node results, findings and certificates in SQLite.

One database file (``--db``, default under the user's state directory) in WAL
mode, so readers never block the writer and several gpuready processes may
write at once: each write is one short ``BEGIN IMMEDIATE`` transaction and
SQLite's busy handler makes the others wait their turn, retrying with backoff
for a bounded time (:data:`DEFAULT_RETRY_S`, ``$GPUREADY_DB_RETRY_S``). Nothing
measured is lost to the database: a run whose writes still fail is spooled to a
pending file beside it, and imported by the next process that can write.

Which file holds what (each module's docstring says more):

- :mod:`.history_store`: :class:`Store`, the one object that opens, writes and reads;
- :mod:`.history_reads`, :mod:`.housekeeping`, :mod:`.pending_runs`: the parts ``Store``
  inherits (its reads; prune, vacuum and the integrity check; pending files and dead runs),
  and :mod:`.store_base`, what they rely on;
- :mod:`.schema`: the tables, the ordered migrations and the schema's stamp
  (``PRAGMA user_version``, ``PRAGMA application_id``), and what is kept, and why;
- :mod:`.opening`: the database's files, checked before and after SQLite opens them;
- :mod:`.queries`: the kinds of run, the SQL the store reads with and the rows it gives;
- :mod:`.result_rows`: a host's result as a run records it and as its rows hold it;
- :mod:`.spool`: pending runs, their files and their import;
- :mod:`.run_locks`: the lock a run's process holds while it lives;
- :mod:`.defaults`: where the database lives unless told, how long a write waits;
- :mod:`.store_errors`: the errors callers catch.

Everything callers use is re-exported here; code that replaces a name for a test
replaces it in the module that uses it (``_now`` in :mod:`.history_store`,
``write_atomic`` in :mod:`.pending_runs`, ``MIGRATIONS`` in :mod:`.schema`, ``_connect``
in :mod:`.opening`).
"""

from __future__ import annotations

from validator.codec import pack, unpack
from validator.store.defaults import (
    DEFAULT_RETRY_S,
    HOUSEKEEPING_WAIT_S,
    MAX_RETRY_S,
    RETRY_ENV,
    default_db_path,
    retry_budget,
)
from validator.store.history_store import Store
from validator.store.opening import disk_problem, unwritable_reason
from validator.store.queries import (
    RUN_KINDS,
    RUN_STATUSES,
    CertifyAttempt,
    HistoryRow,
    PruneOutcome,
    RunInfo,
    RunKind,
    StoredCertificate,
    history_row_to_dict,
)
from validator.store.result_rows import _Recorded as _Recorded
from validator.store.run_locks import run_lock_path
from validator.store.schema import APPLICATION_ID, schema_version
from validator.store.spool import (
    PENDING_FIELDS,
    PENDING_FORMAT,
    PENDING_VERSION,
    pending_dir,
    read_pending,
)
from validator.store.store_errors import NoHistoryError, NotStoredError, StoreError

__all__ = [
    "APPLICATION_ID",
    "DEFAULT_RETRY_S",
    "HOUSEKEEPING_WAIT_S",
    "MAX_RETRY_S",
    "PENDING_FIELDS",
    "PENDING_FORMAT",
    "PENDING_VERSION",
    "RETRY_ENV",
    "RUN_KINDS",
    "RUN_STATUSES",
    "CertifyAttempt",
    "HistoryRow",
    "NoHistoryError",
    "NotStoredError",
    "PruneOutcome",
    "RunInfo",
    "RunKind",
    "Store",
    "StoreError",
    "StoredCertificate",
    "default_db_path",
    "disk_problem",
    "history_row_to_dict",
    "pack",
    "pending_dir",
    "read_pending",
    "retry_budget",
    "run_lock_path",
    "schema_version",
    "unpack",
    "unwritable_reason",
]
