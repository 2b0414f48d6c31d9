"""The MongoDB driver's queues (``delayq.storage.base.queues``): one document each in
the ``queues`` collection (``layout.py``), which also holds the queue's next sequence
number (``Database.allocate``).

Purging or deleting a queue (multi-document deletes) is not a retryable write:
interrupted, it answers 503, and repeating the request completes it.
"""

from __future__ import annotations

import json
from typing import Any

import pymongo
import pymongo.errors
from pymongo.client_session import ClientSession

from delayq import errors
from delayq.queue import QueueCounts, QueueStats
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.database import Database


class Queues:
    """Queues of every project, with their metadata (blocking: the driver offloads it)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, project: str, name: str, metadata: dict[str, Any], *,
               queue_quota: int = 0) -> bool:
        """Under *queue_quota*, in a transaction that counts the project's queues
        (``quotas.py``)."""
        db = self._db
        with db.request():
            doc = {lay.PROJECT: project, lay.QUEUE: name,
                   lay.METADATA: lay.encode_json(metadata), lay.SEQ: 0,
                   lay.CREATED: lay.date(db.now_ms())}

            def insert(session: ClientSession | None = None) -> bool:
                db.queues.insert_one(doc, session=session)
                return True

            def create(session: ClientSession) -> bool:
                if db.quotas.admit_queue(project, name, queue_quota, session):
                    return False
                return insert(session)

            try:
                return db.quotas.run(create) if queue_quota else insert()
            except pymongo.errors.DuplicateKeyError:
                return False

    def get(self, project: str, name: str) -> dict[str, Any] | None:
        with self._db.request():
            doc = self._db.queues.find_one({lay.PROJECT: project, lay.QUEUE: name},
                                           {lay.METADATA: 1, lay.ID: 0})
            return json.loads(doc[lay.METADATA]) if doc else None

    def for_write(self, project: str, name: str) -> tuple[dict[str, Any] | None, Any]:
        """The metadata as ``get`` reads it, and no token: no write checks it."""
        return self.get(project, name), None

    def set_metadata(self, project: str, name: str, metadata: dict[str, Any]) -> None:
        with self._db.request():
            result = self._db.queues.update_one(
                {lay.PROJECT: project, lay.QUEUE: name},
                {"$set": {lay.METADATA: lay.encode_json(metadata)}})
            if result.matched_count == 0:
                raise errors.QueueNotFound.named(name)

    def delete(self, project: str, name: str) -> None:
        db = self._db
        with db.request():
            now = db.now_ms()
            where = {lay.PROJECT: project, lay.QUEUE: name}
            # Messages first: a crash part way leaves the queue, and deleting it again
            # finishes the job. The second sweep takes what a post racing the delete
            # stored.
            gone = db.messages.delete_many(where).deleted_count
            db.claims.delete_many(where)
            existed = db.queues.delete_one(where).deleted_count
            gone += db.messages.delete_many(where).deleted_count
            db.post_keys.forget(project, name)
            db.tallies.drop(project, name)
            if existed or gone:  # deleting an absent queue changes nothing
                db.event_log.purged(project, name, now)

    def purge(self, project: str, name: str) -> None:
        db = self._db
        with db.request():
            now = db.now_ms()
            where = {lay.PROJECT: project, lay.QUEUE: name}
            gone = db.messages.delete_many(where).deleted_count
            db.claims.delete_many(where)
            db.post_keys.forget(project, name)
            db.tallies.drop(project, name)
            # An empty queue is purged too, an absent one not: the queue is looked up
            # only when the trail needs to know.
            if db.event_log.enabled and (gone or db.queues.find_one(where, {lay.ID: 1})):
                db.event_log.purged(project, name, now)

    def page(self, project: str, marker: str | None, limit: int
             ) -> list[tuple[str, dict[str, Any]]]:
        with self._db.request():
            cursor = self._db.queues.find(
                {lay.PROJECT: project, lay.QUEUE: {"$gt": marker or ""}},
                {lay.QUEUE: 1, lay.METADATA: 1, lay.ID: 0}
            ).sort(lay.QUEUE, pymongo.ASCENDING).limit(limit)
            return [(doc[lay.QUEUE], json.loads(doc[lay.METADATA])) for doc in cursor]

    def count(self, project: str) -> int:
        with self._db.request():
            return self._db.queues.count_documents({lay.PROJECT: project})

    def stats(self, project: str, name: str) -> QueueStats:
        messages = self._db.messages
        with self._db.request():
            now = self._db.now_ms()
            live = {lay.PROJECT: project, lay.QUEUE: name,
                    lay.EXPIRES: {"$gt": lay.date(now)}}
            total = messages.count_documents(live)
            if not total:
                return QueueStats(0, 0, 0, None, None)
            # A live claim's message is claimed whatever its due time (a retry
            # policy's wait).
            delayed = messages.count_documents(
                {**live, lay.DUE: {"$gt": lay.date(now)}, **lay.not_held(now)})
            claimed = messages.count_documents(
                {**live, lay.CLAIM_EXPIRES: {"$gt": lay.date(now)}})
            ends = []
            for direction in (pymongo.ASCENDING, pymongo.DESCENDING):
                doc = messages.find_one(live, sort=[(lay.SEQ, direction)])
                ends.append(lay.message(doc, now) if doc else None)
            return QueueStats(free=max(0, total - delayed - claimed), claimed=claimed,
                              delayed=delayed, oldest=ends[0], newest=ends[1])

    def counts(self, project: str, name: str) -> QueueCounts:
        """From the tallies (``tallies.py``): one read of at most ``delayq.tallies.LEVELS``
        documents, however many messages the queue holds."""
        with self._db.request():
            return self._db.tallies.read(project, name, self._db.now_ms())
