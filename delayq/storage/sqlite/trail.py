"""The SQLite driver's audit reads (``base.Trail``): the ``events`` table and the live
messages of a queue, read whole on the calling thread's connection; the audits' bulk read
(``event_batches``) goes straight into Arrow, in C, through ADBC's SQLite driver on a
read-only connection of its own.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING

from delayq.events import Event
from delayq.message import Message
from delayq.storage import base
from delayq.storage.sqlite import rows, sql
from delayq.storage.sqlite.database import Database

if TYPE_CHECKING:
    import pyarrow as pa

# Names SQLite gives a database that lives in one connection's memory, which no other
# connection can read.
IN_MEMORY = ("", ":memory:")


class Trail(base.Trail):
    """The event trail and the live messages of every queue, blocking."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def queues(self, project: str | None) -> list[tuple[str, str]]:
        return [(owner, name) for owner, name in self.database.db().execute(
            sql.QUEUE_NAMES, (project,))]

    def events(self, project: str, queue: str, *, after: float | None = None
               ) -> Iterator[Event]:
        for row in self.event_rows(project, queue, after=after):
            yield Event(*row)

    def event_rows(self, project: str, queue: str, *, after: float | None = None
                   ) -> Iterator[tuple]:
        db = self.database.db()
        if after is None:
            return iter(db.execute(sql.EVENTS_OF_QUEUE, (project, queue)))
        # The column holds each Event's time as is: compared exactly, no rounding.
        return iter(db.execute(sql.EVENTS_OF_QUEUE_AFTER, (project, queue, after)))

    def event_batches(self, project: str, queue: str, schema: pa.Schema, *,
                      after: float | None = None) -> Iterator[pa.RecordBatch]:
        if self.database.path in IN_MEMORY:
            return super().event_batches(project, queue, schema, after=after)
        return self._adbc_batches(project, queue, schema, after)

    def _adbc_batches(self, project: str, queue: str, schema: pa.Schema,
                      after: float | None) -> Iterator[pa.RecordBatch]:
        """The events through ADBC: a fifth of the CPU of building Python rows and
        turning them into Arrow, which is most of a large audit's reading."""
        # Only the audits' processes have these (the spark extra).
        import adbc_driver_sqlite.dbapi as adbc

        from delayq.storage import arrow

        uri = f"file:{urllib.parse.quote(os.path.abspath(self.database.path))}?mode=ro"
        with contextlib.closing(adbc.connect(uri)) as connection, \
                contextlib.closing(connection.cursor()) as cursor:
            cursor.adbc_statement.set_options(
                **{"adbc.sqlite.query.batch_rows": str(arrow.BATCH_ROWS)})
            cursor.execute(f"PRAGMA busy_timeout = {self.database.busy_timeout}")
            if after is None:
                cursor.execute(sql.TYPED_EVENTS_OF_QUEUE, (project, queue))
            else:
                cursor.execute(sql.TYPED_EVENTS_OF_QUEUE_AFTER, (project, queue, after))
            batches = iter(cursor.fetch_record_batch())
            first = next(batches, None)
            if first is None:
                return
            typed_row_dropped = first.slice(1)
            yield from arrow.conformed(itertools.chain([typed_row_dropped], batches), schema)

    def messages(self, project: str, queue: str) -> Iterator[Message]:
        db = self.database.db()
        now = self.database.now()
        queue_id = rows.queue_id(db, project, queue)
        if queue_id is None:
            return
        for row in db.execute(sql.MESSAGES_OF_QUEUE, (queue_id, now)):
            yield rows.message(row, now)
