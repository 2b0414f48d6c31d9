"""The MongoDB driver's database as its controllers share it: the collections, the
primary's clock, the helpers of more than one controller (reserving a queue's sequence
numbers, creating the queue if needed; deleting messages one at a time), and the one
path from a MongoDB failure to 503 (``request``).

A controller method runs its calls to MongoDB inside ``with db.request():``, which
creates the indexes first when this process has not (``indexes.py``) and answers a
MongoDB outage (``client.is_unavailable``) or a query naming an index dropped by hand
with 503.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pymongo
import pymongo.errors
from pymongo import ReturnDocument
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.database import Database as MongoDatabase

from delayq import events
from delayq.storage.base import Endings
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.claimer import Claimer
from delayq.storage.mongo.client import is_missing_index, unavailable
from delayq.storage.mongo.event_log import EventLog
from delayq.storage.mongo.expiry import Expiry
from delayq.storage.mongo.indexes import Indexes
from delayq.storage.mongo.post_keys import PostKeys
from delayq.storage.mongo.quotas import Quotas
from delayq.storage.mongo.tallies import Tallies


class Database:
    """The collections of database *db* and the helpers over them; *now_ms* is the
    primary's clock (ms), *endings* told of the messages leaving queues."""

    def __init__(self, client: pymongo.MongoClient, db: MongoDatabase,
                 now_ms: Callable[[], int], *, expired_retention: int,
                 events_settings: events.Settings, endings: Endings) -> None:
        self.now_ms = now_ms
        self.queues: Collection = db[lay.QUEUES]
        self.messages: Collection = db[lay.MESSAGES]
        self.claims: Collection = db[lay.CLAIMS]
        self.subscriptions: Collection = db[lay.SUBSCRIPTIONS]
        self.tallies = Tallies(db[lay.TALLIES])
        self.event_log = EventLog(db[lay.EVENTS], events_settings, endings)
        self.expiry = Expiry(self.messages, db[lay.LOCKS], now_ms, self.delete_each,
                             self.tallies, self.event_log)
        self.claimer = Claimer(self.messages, self.allocate, self.expiry.reap_each)
        self.post_keys = PostKeys(client, db[lay.POST_KEYS], self.messages)
        self.quotas = Quotas(client, db[lay.PROJECTS], self.queues, self.messages)
        self.indexes = Indexes(db, expired_retention, self.event_log.enabled)

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Calls to MongoDB with the indexes in place and MongoDB outages as 503."""
        with unavailable:
            self.indexes.ensure()
            try:
                yield
            except pymongo.errors.OperationFailure as exc:
                if not is_missing_index(exc):
                    raise
                self.indexes.missing()
                raise unavailable.error(
                    f"A MongoDB index of delayq is missing; creating it again: {exc}"
                ) from exc

    def allocate(self, project: str, queue: str, count: int, now: int,
                 session: ClientSession | None = None, queue_quota: int = 0) -> int:
        """Reserve *count* sequence numbers of the queue, creating it if needed; the first
        (within *session*'s transaction, when given).

        Creating it is refused past *queue_quota* (``Quotas.admit_queue``): in
        *session*'s transaction, or else in one of its own, taken only when the queue
        is missing.

        Two first posts to a new queue may both try to insert it; MongoDB retries such an
        upsert itself, and so does this for servers that don't (outside a transaction:
        an error ends one; ``Quotas.run`` runs it again).
        """
        where = {lay.PROJECT: project, lay.QUEUE: queue}
        if queue_quota and session is None:
            doc = self.queues.find_one_and_update(
                where, {"$inc": {lay.SEQ: count}}, {lay.SEQ: 1},
                return_document=ReturnDocument.AFTER)
            if doc is not None:
                return doc[lay.SEQ] - count + 1
            return self.quotas.run(lambda session: self.allocate(
                project, queue, count, now, session, queue_quota))
        if queue_quota and session is not None:
            self.quotas.admit_queue(project, queue, queue_quota, session)
        update = {"$inc": {lay.SEQ: count},
                  "$setOnInsert": {lay.METADATA: "{}", lay.CREATED: lay.date(now)}}
        # In a transaction an error ends it: no second attempt there.
        for attempt in (1, 2) if session is None else (2,):
            try:
                doc = self.queues.find_one_and_update(
                    where, update, {lay.SEQ: 1}, upsert=True,
                    return_document=ReturnDocument.AFTER, session=session)
                assert doc is not None  # an upsert returning the document after it
                return doc[lay.SEQ] - count + 1
            except pymongo.errors.DuplicateKeyError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def delete_each(self, filters: list[dict[str, Any]], *fields: str
                    ) -> list[dict[str, Any]]:
        """Delete the message each filter matches; the documents, as deleted, of those
        this request deleted (claim count and tally fields, and *fields*).

        One ``find_one_and_delete`` each: only it tells which request deleted a message
        two deleted at once, and in which state (the claim count of the trail, the
        instants of the tallies). A pinned bulk delete would save round trips but not
        tell, when some vanished under a concurrent delete, which of them it deleted.
        """
        kept = {lay.CLAIM_COUNT: 1, **lay.TALLY_FIELDS, **dict.fromkeys(fields, 1)}
        found = (self.messages.find_one_and_delete(where, kept) for where in filters)
        return [doc for doc in found if doc is not None]
