"""The MongoDB driver's audit reads (``delayq.storage.base.trail``, for
``delayq.spark_jobs``): the ``events`` collection (``event_log.py``) and the live messages
of whole queues, read in the audits' own processes."""

from __future__ import annotations

from collections.abc import Iterator

from delayq.events import Event
from delayq.message import Message
from delayq.storage import base
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.client import unavailable
from delayq.storage.mongo.database import Database


class Trail(base.Trail):
    """The event trail and the live messages of every queue, read whole (blocking)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def queues(self, project: str | None) -> list[tuple[str, str]]:
        db = self._db
        with db.request():
            where = {} if project is None else {lay.PROJECT: project}
            found = {(doc[lay.PROJECT], doc[lay.QUEUE])
                     for doc in db.queues.find(where, {lay.PROJECT: 1, lay.QUEUE: 1, lay.ID: 0})}
            return sorted(found | db.event_log.queues(project))

    def events(self, project: str, queue: str, *, after: float | None = None
               ) -> Iterator[Event]:
        with unavailable:
            yield from self._db.event_log.read(project, queue, after=after)

    def messages(self, project: str, queue: str) -> Iterator[Message]:
        with unavailable:
            now = self._db.now_ms()
            cursor = self._db.messages.find(
                {lay.PROJECT: project, lay.QUEUE: queue, lay.EXPIRES: {"$gt": lay.date(now)}}
            ).sort(lay.POST_ORDER)
            for doc in cursor:
                yield lay.message(doc, now)
