"""The SQLite driver's audit reads (``base.Trail``): the ``events`` table and the live
messages of a queue, read whole on the calling thread's connection."""

from __future__ import annotations

from collections.abc import Iterator

from delayq.events import Event
from delayq.message import Message
from delayq.storage import base
from delayq.storage.sqlite import rows, sql
from delayq.storage.sqlite.database import Database


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

    def messages(self, project: str, queue: str) -> Iterator[Message]:
        db = self.database.db()
        now = self.database.now()
        queue_id = rows.queue_id(db, project, queue)
        if queue_id is None:
            return
        for row in db.execute(sql.MESSAGES_OF_QUEUE, (queue_id, now)):
            yield rows.message(row, now)
