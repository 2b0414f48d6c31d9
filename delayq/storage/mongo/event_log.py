"""The MongoDB driver's event trail (``delayq.events``), in the ``events`` collection
(``layout.py``): one ``insert_many`` per request, of that request's events, sent right
*after* the change they record succeeded.

No transaction can hold both (a standalone server has none, and a multi-document
transaction would cost every claim far more than the insert), so a process dying, or
MongoDB failing, between the change and the insert loses those events; it never records
a change that did not happen, because events are built only from writes MongoDB
acknowledged (a claim's or a bulk delete's lost races are left out). A failed insert is
logged, not answered with 503: the change is done, and a client retrying it would post
or claim again. ``[events] retention`` is the TTL of each event. The messages a request
ends are reported to the driver's ``endings`` whether the trail is on or not.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from typing import Any

from bson import ObjectId
from pymongo.collection import Collection

from delayq import events
from delayq.storage import trail
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.client import unavailable

LOG = logging.getLogger(__name__)

MS = 1000  # event times are whole milliseconds


class EventLog:
    """The ``events`` collection: a request's events written, a queue's trail read.

    *endings* is called with the kinds of the events that end a message (expired,
    deleted, popped, ...), each time a request records some.
    """

    def __init__(self, collection: Collection, settings: events.Settings,
                 endings: Callable[[list[str]], None]) -> None:
        self._collection = collection
        self._settings = settings
        self._endings = endings

    @property
    def enabled(self) -> bool:
        return self._settings.enabled

    def event(self, project: str, queue: str, kind: str, now: int, **fields: Any
              ) -> dict[str, Any]:
        """An event document (``layout.new_event``) kept for ``[events] retention``."""
        return lay.new_event(project, queue, kind, now, self._settings.retention, **fields)

    def record(self, docs: list[dict[str, Any]]) -> None:
        """Append a request's events in one insert, once the change they record is done,
        and report the messages they end."""
        trail.report_endings((doc[lay.EVENT_KIND] for doc in docs), self._endings)
        if docs and self._settings.enabled:
            trail.write_or_log(lambda: self._collection.insert_many(docs, ordered=True),
                               len(docs), unavailable)

    def purged(self, project: str, queue: str, now: int) -> None:
        """Record the purge (or deletion) of a queue."""
        self.record([self.event(project, queue, events.PURGED, now)])

    def deleted(self, project: str, queue: str, now: int, doc: dict[str, Any],
                claim_id: ObjectId | None = None) -> dict[str, Any]:
        """The deleted event of the message document *doc* as it was deleted."""
        return self.event(project, queue, events.DELETED, now, message_id=doc[lay.ID],
                          claim_id=claim_id, claim_count=doc.get(lay.CLAIM_COUNT, 0))

    def expired(self, project: str, queue: str, doc: dict[str, Any]) -> dict[str, Any]:
        """The expired event of the message document *doc*, removed after its expiry:
        stamped with the instant it expired, however late it was removed."""
        expires = lay.ms(doc[lay.EXPIRES])
        return self.event(project, queue, events.EXPIRED, expires, message_id=doc[lay.ID],
                          claim_count=doc.get(lay.CLAIM_COUNT, 0), expires=expires)

    def queues(self, project: str | None) -> set[tuple[str, str]]:
        """The (project, queue) pairs that have a trail, of *project* or of all.

        Events name their queue themselves: a deleted queue's trail is found too.
        """
        projects = ([project] if project is not None
                    else self._collection.distinct(lay.PROJECT))
        return {(name, queue) for name in projects
                for queue in self._collection.distinct(lay.QUEUE, {lay.PROJECT: name})}

    def read(self, project: str, queue: str, *, after: float | None = None
             ) -> Iterator[events.Event]:
        """The queue's events, oldest first (``layout.TRAIL_ORDER``); with *after*
        (POSIX seconds) only those whose time is strictly greater: the trail index
        ``(p, q, at, _id)``, the only one on the queue, serves both as one range."""
        where: dict[str, Any] = {lay.PROJECT: project, lay.QUEUE: queue}
        if after is not None:
            # From the millisecond holding *after* (times are whole milliseconds): the
            # events of that millisecond are told apart exactly below, as are those a
            # rounding of after * 1000 would have put on the wrong side.
            where[lay.EVENT_TIME] = {"$gte": lay.date(math.floor(after * MS))}
        for doc in self._collection.find(where).sort(lay.TRAIL_ORDER):
            event = lay.event(doc)
            if after is None or event.time > after:
                yield event
