"""The store's reads: certificates, history rows, certification attempts, results.

:class:`HistoryReads` is the part of :class:`~validator.store.history_store.Store` that
reads back what runs recorded (a database not made yet reads as empty); the SQL is in
:mod:`validator.store.queries`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from validator import fields as doc
from validator.error_tree import BadInputError
from validator.model import CrossNodeStage, NodeResult, SchemaError, Verdict, from_dict
from validator.safe_text import one_line
from validator.store.queries import (
    _MAX_SQL_INT,
    CERTIFICATE_OF_RESULT,
    CROSS_NODE_OF_RUN,
    FAILED_CHECKS,
    HISTORY_OF_ALL,
    HISTORY_OF_HOST,
    HOSTS_OF_RUN,
    LATEST_ATTEMPT,
    NEXT_ATTEMPT,
    RESULT_OF_HOST_IN_RUN,
    RUN_BY_ID,
    STORED_CERTIFICATE,
    STORED_CERTIFICATE_OF_RUN,
    CertifyAttempt,
    HistoryRow,
    RunInfo,
    RunKind,
    StoredCertificate,
    _shown_status,
)
from validator.store.schema import _stored_text
from validator.store.store_base import _StoreBase
from validator.store.store_errors import StoreError, _errors

if TYPE_CHECKING:  # certificates are read only where one is asked for
    from validator.certificate import Certificate


class HistoryReads(_StoreBase):
    """The store's reads (a mixin of ``Store``)."""

    def latest_certificate(self, hostname: str) -> Certificate | None:
        """The most recently issued certificate of a host, or None when it was never certified.

        Raises:
            StoreError: the stored certificate cannot be read back.
        """
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            row = None
            if db is not None:
                row = db.execute(
                    "SELECT json_packed FROM certificates WHERE hostname = ?"
                    " ORDER BY issued_at DESC, id DESC LIMIT 1",
                    (hostname,),
                ).fetchone()
        if row is None:
            return None
        from validator.certificate import certificate_from_json

        try:
            return certificate_from_json(_stored_text(row[0]))
        except BadInputError as exc:
            raise StoreError(
                f"history database {self.path} holds an unreadable certificate of {hostname}: {exc}"
            ) from None

    def history(self, hostname: str | None = None, limit: int = 50) -> list[HistoryRow]:
        """Past results, newest run first; runs with no result yet are listed when no host is asked.

        A run still ``running`` in the database reads ``incomplete`` while its
        process lives and ``interrupted`` once it is gone.

        Args:
            hostname: only this host's results.
            limit: at most this many rows.
        """
        params: list[object] = []
        if hostname is not None:
            query = HISTORY_OF_HOST
            params.append(hostname)
        else:
            query = HISTORY_OF_ALL
        params.append(min(max(0, limit), _MAX_SQL_INT))
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            rows = db.execute(query, params).fetchall() if db is not None else []
            certificates = self._certificate_states(db, rows) if db is not None else {}
        alive: dict[int, bool] = {}
        for row in rows:
            if row[4] == "running" and row[0] not in alive:
                alive[row[0]] = self._owner_alive(row[0], row[11])
        return [
            HistoryRow(
                run_id=row[0],
                kind=row[1],
                started_at=row[2],
                finished_at=row[3],
                status=_shown_status(row[4], alive.get(row[0], True)),
                hostname=row[5],
                verdict=row[6],
                summary=row[7] or "",
                recorded_at=row[8],
                failed=row[9],
                unknown=row[10],
                provenance=row[13],
                **certificates.get(row[12], {}),
            )
            for row in rows
        ]

    def _certificate_states(
        self, db: sqlite3.Connection, rows: Sequence[Sequence[Any]]
    ) -> dict[int, dict[str, Any]]:
        """What became of the certificate each certify result was issued, by result id."""
        states: dict[int, dict[str, Any]] = {}
        for row in rows:
            result_id, hostname, recorded_at = row[12], row[5], row[8]
            if row[1] != RunKind.CERTIFY.value or result_id is None:
                continue
            if db.execute(CERTIFICATE_OF_RESULT, (result_id,)).fetchone() is None:
                continue
            later = db.execute(NEXT_ATTEMPT, (hostname, result_id, recorded_at, row[0])).fetchone()
            if later is None:
                states[result_id] = {"certificate": "current"}
                continue
            if later[2] != Verdict.CERTIFIED.value:
                state = "revoked"
            elif db.execute(CERTIFICATE_OF_RESULT, (later[5],)).fetchone() is not None:
                state = "replaced"
            else:  # certified, but its certificate was not stored: this one still holds
                states[result_id] = {"certificate": "current"}
                continue
            states[result_id] = {
                "certificate": state,
                "certificate_run": later[0],
                "certificate_changed_at": later[3],
            }
        return states

    def latest_attempt(self, hostname: str) -> CertifyAttempt | None:
        """The host's latest certification attempt (its name in any case); None if never tried.

        Drift weighs the latest certificate against it: one that did not certify the
        node revokes every certificate issued before it.

        Raises:
            StoreError: the database failed.
        """
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            if db is None:
                return None
            row = db.execute(LATEST_ATTEMPT, (hostname,)).fetchone()
            if row is None:
                return None
            failed = tuple((str(f[0]), f[1]) for f in db.execute(FAILED_CHECKS, (row[5],)))
        return CertifyAttempt(
            run_id=row[0],
            hostname=row[1],
            verdict=row[2],
            recorded_at=row[3],
            summary=row[4] or "",
            failed=failed,
        )

    def result(self, run_id: int, hostname: str) -> NodeResult | None:
        """A host's full result in a run, as it was recorded; None when there is none.

        Raises:
            StoreError: the stored result cannot be read back.
        """
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            row = None
            if db is not None:
                row = db.execute(RESULT_OF_HOST_IN_RUN, (hostname, run_id)).fetchone()
        if row is None:
            return None
        try:
            data = doc.load_json(_stored_text(row[0]))
            if isinstance(data, dict):
                data["facts"] = doc.load_json(_stored_text(row[1]))
            return from_dict(NodeResult, data)
        except (BadInputError, SchemaError, doc.LoadError) as exc:
            raise StoreError(
                f"history database {self.path} holds an unreadable result of {hostname} "
                f"in run {run_id}: {one_line(exc)}"
            ) from None

    def cross_node(self, run_id: int) -> CrossNodeStage | None:
        """A run's stage across nodes as it was recorded; None when the run ran none.

        Raises:
            StoreError: the database failed, or the stored stage cannot be read back.
        """
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            row = None
            if db is not None:
                row = db.execute(CROSS_NODE_OF_RUN, (min(max(0, run_id), _MAX_SQL_INT),)).fetchone()
        if row is None or row[0] is None:
            return None
        try:
            return from_dict(CrossNodeStage, doc.load_json(_stored_text(row[0])))
        except (BadInputError, SchemaError, doc.LoadError) as exc:
            raise StoreError(
                f"history database {self.path} holds an unreadable stage across nodes "
                f"in run {run_id}: {one_line(exc)}"
            ) from None

    def run_info(self, run_id: int) -> RunInfo | None:
        """A run's kind, times, shown status and hosts; None when there is no such run.

        Raises:
            StoreError: the database failed.
        """
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            if db is None:
                return None
            row = db.execute(RUN_BY_ID, (min(max(0, run_id), _MAX_SQL_INT),)).fetchone()
            if row is None:
                return None
            hosts = tuple(str(h[0]) for h in db.execute(HOSTS_OF_RUN, (row[0],)))
        alive = self._owner_alive(row[0], row[5]) if row[4] == "running" else True
        return RunInfo(
            run_id=row[0],
            kind=row[1],
            started_at=row[2],
            finished_at=row[3],
            status=_shown_status(row[4], alive),
            hostnames=hosts,
        )

    def stored_certificate(
        self, hostname: str, run_id: int | None = None
    ) -> StoredCertificate | None:
        """A host's certificate text as it was sealed; None when there is none.

        Its newest, or the one run ``run_id`` issued. The text is not parsed: byte for
        byte what the digest and signature were made over, for ``verify-cert`` to judge.

        Raises:
            StoreError: the database failed, or the stored text cannot be unpacked.
        """
        with self._lock, _errors(self.path):
            db = self._connection(create=False)
            row = None
            if db is not None:
                if run_id is None:
                    row = db.execute(STORED_CERTIFICATE, (hostname,)).fetchone()
                else:
                    bounded = min(max(0, run_id), _MAX_SQL_INT)
                    row = db.execute(STORED_CERTIFICATE_OF_RUN, (hostname, bounded)).fetchone()
        if row is None:
            return None
        try:
            text = _stored_text(row[0])
        except BadInputError as exc:
            raise StoreError(
                f"history database {self.path} holds an unreadable certificate of "
                f"{one_line(hostname)}: {exc}"
            ) from None
        return StoredCertificate(hostname=hostname, run_id=row[1], issued_at=row[2], text=text)
