"""The SQLite driver's queues, in the ``queues`` table; their counts from the messages
(``stats``) or from the tallies (``counts``, ``tallies.py``)."""

from __future__ import annotations

import json
from typing import Any

from delayq import errors, events
from delayq.queue import QueueCounts, QueueStats
from delayq.storage.sqlite import rows, sql
from delayq.storage.sqlite import tallies as sqlite_tallies
from delayq.storage.sqlite.database import Database


class Queues:
    """Queues of every project, blocking (``base.offloaded.BlockingQueues``)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def create(self, project: str, name: str, metadata: dict[str, Any], *,
               queue_quota: int = 0) -> bool:
        with self.database.write() as db:
            if queue_quota and rows.queue_id(db, project, name) is None:
                rows.refuse_queue_past(db, project, queue_quota)
            cursor = db.execute(sql.QUEUE_INSERT,
                                (project, name, json.dumps(metadata), self.database.now()))
            return cursor.rowcount == 1

    def get(self, project: str, name: str) -> dict[str, Any] | None:
        row = self.database.db().execute(sql.QUEUE_METADATA, (project, name)).fetchone()
        return json.loads(row[0]) if row else None

    def for_write(self, project: str, name: str) -> tuple[dict[str, Any] | None, Any]:
        """The metadata as ``get`` reads it, and no token (``base.Queues.for_write``'s
        default)."""
        return self.get(project, name), None

    def set_metadata(self, project: str, name: str, metadata: dict[str, Any]) -> None:
        with self.database.write() as db:
            cursor = db.execute(sql.QUEUE_SET_METADATA, (json.dumps(metadata), project, name))
            if cursor.rowcount == 0:
                raise errors.QueueNotFound.named(name)

    def delete(self, project: str, name: str) -> None:
        self._empty(project, name, drop=True)

    def purge(self, project: str, name: str) -> None:
        self._empty(project, name, drop=False)

    def _empty(self, project: str, name: str, *, drop: bool) -> None:
        with self.database.write() as db:
            queue_id = rows.queue_id(db, project, name)
            if queue_id is None:
                return
            db.execute(sql.MESSAGES_DELETE_QUEUE, (queue_id,))
            db.execute(sql.CLAIMS_DELETE_QUEUE, (queue_id,))
            db.execute(sql.POST_KEYS_DELETE_QUEUE, (queue_id,))
            self.database.record(db, [rows.event_params(
                project=project, queue=name, kind=events.PURGED, time=self.database.now())])
            if drop:
                db.execute(sql.QUEUE_DELETE, (queue_id,))
                # A new queue may get the same id.
                db.execute(sql.TALLIES_DELETE_QUEUE, (queue_id,))

    def page(self, project: str, marker: str | None, limit: int
             ) -> list[tuple[str, dict[str, Any]]]:
        listed = self.database.db().execute(sql.QUEUE_LIST, (project, marker or "", limit))
        return [(name, json.loads(metadata)) for name, metadata in listed]

    def count(self, project: str) -> int:
        count: int = self.database.db().execute(sql.QUEUE_COUNT, (project,)).fetchone()[0]
        return count

    def stats(self, project: str, name: str) -> QueueStats:
        db = self.database.db()
        now = self.database.now()
        queue_id = rows.queue_id(db, project, name)
        if queue_id is None:
            return QueueStats(0, 0, 0, None, None)
        delayed, claimed, free = db.execute(
            sql.QUEUE_STATS, {"now": now, "queue_id": queue_id}).fetchone()
        oldest = newest = None
        if delayed + claimed + free:
            row = db.execute(sql.MESSAGES_OLDEST, (queue_id, now)).fetchone()
            oldest = rows.message(row, now) if row else None
            row = db.execute(sql.MESSAGES_NEWEST, (queue_id, now)).fetchone()
            newest = rows.message(row, now) if row else None
        return QueueStats(free=free, claimed=claimed, delayed=delayed, oldest=oldest,
                          newest=newest)

    def counts(self, project: str, name: str) -> QueueCounts:
        """From the tallies (tallies.py): O(log n)."""
        db = self.database.db()
        queue_id = rows.queue_id(db, project, name)
        if queue_id is None:
            return QueueCounts(0, 0, 0)
        return sqlite_tallies.counts(db, queue_id, self.database.now())
