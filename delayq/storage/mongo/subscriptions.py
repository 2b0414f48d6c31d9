"""The MongoDB driver's subscriptions (``delayq.subscription``,
``delayq.storage.base.subscriptions``), in the ``subscriptions`` collection
(``layout.py``): records with an expiry, changed by single-document writes.

- **Live** is ``e`` ahead of now on the primary's clock: every read says so, whatever the
  TTL monitor (which removes expired ones within its minute) has not removed yet.
- **Unique per subscriber.** A unique index on (project, queue, subscriber) makes a
  second create, or an update to a subscriber the queue has, fail with a duplicate key,
  whatever requests race. An expired subscription not yet removed holds its key too: the
  failed write removes it (a delete pinned on its expiry, so a live one is never
  removed) and tries again, and fails for good only against a live one.
- **The subscribed queues** are read by every API process every few seconds: one
  aggregation over the live range of the ``subscribed`` index ``(e, p, q)``, covered by
  it (no document is read), grouped by queue. Its cost follows the live subscriptions,
  not the queues or the messages.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pymongo
import pymongo.errors

from delayq import errors
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.database import Database
from delayq.subscription import Subscription, SubscriptionChange


def subscription(doc: dict[str, Any], now: int) -> Subscription:
    """The Subscription a document stores, read at *now* (ms)."""
    return Subscription(id=doc[lay.ID], queue=doc[lay.QUEUE], subscriber=doc[lay.SUBSCRIBER],
                        ttl=doc[lay.TTL], options=json.loads(doc[lay.OPTIONS]),
                        created=lay.ms(doc[lay.CREATED]) / 1000,
                        expires=lay.ms(doc[lay.EXPIRES]) / 1000, as_of=now / 1000,
                        confirmed=doc.get(lay.CONFIRMED, True))


def live(project: str, queue: str, now: int, **fields: Any) -> dict[str, Any]:
    """The filter of the queue's live subscriptions at *now* (ms) with *fields*."""
    return {lay.PROJECT: project, lay.QUEUE: queue, lay.EXPIRES: {"$gt": lay.date(now)},
            **fields}


class Subscriptions:
    """The ``subscriptions`` collection (blocking: the driver offloads it)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._collection = db.subscriptions

    def create(self, project: str, queue: str, subscriber: str, ttl: int,
               options: dict[str, Any], confirmed: bool = True) -> str | None:
        """Store a subscription living *ttl* seconds from now, *confirmed* or not; its
        id, or None when the queue has a live one for *subscriber*."""
        with self._db.request():
            now = self._db.now_ms()
            doc: dict[str, Any] = {
                lay.ID: uuid.uuid4().hex, lay.PROJECT: project, lay.QUEUE: queue,
                lay.SUBSCRIBER: subscriber, lay.TTL: ttl, lay.OPTIONS: lay.encode_json(options),
                lay.CREATED: lay.date(now), lay.EXPIRES: lay.date(now + ttl * 1000),
                lay.CONFIRMED: confirmed}
            while True:
                try:
                    self._collection.insert_one(doc)
                    return doc[lay.ID]
                except pymongo.errors.DuplicateKeyError:
                    if not self._remove_expired(project, queue, subscriber, now):
                        return None

    def get(self, project: str, queue: str, subscription_id: str) -> Subscription | None:
        """The live subscription, or None."""
        with self._db.request():
            now = self._db.now_ms()
            doc = self._collection.find_one(
                live(project, queue, now, **{lay.ID: subscription_id}))
            return subscription(doc, now) if doc else None

    def page(self, project: str, queue: str, marker: str | None, limit: int
             ) -> list[Subscription]:
        """Up to *limit* live subscriptions of the queue with ids after *marker*, by id."""
        with self._db.request():
            now = self._db.now_ms()
            cursor = self._collection.find(
                live(project, queue, now, **{lay.ID: {"$gt": marker or ""}})
            ).sort(lay.ID, pymongo.ASCENDING).limit(limit).hint(lay.LISTING_INDEX)
            return [subscription(doc, now) for doc in cursor]

    def update(self, project: str, queue: str, subscription_id: str,
               change: SubscriptionChange) -> None:
        """Apply *change* to a live subscription, a new ttl running from now. Raises
        SubscriptionNotFound, or SubscriptionExists when the new subscriber has a live
        subscription of the queue already."""
        with self._db.request():
            now = self._db.now_ms()
            where = live(project, queue, now, **{lay.ID: subscription_id})
            changes: dict[str, Any] = {}
            if change.subscriber is not None:
                changes[lay.SUBSCRIBER] = change.subscriber
            if change.ttl is not None:
                changes.update({lay.TTL: change.ttl,
                                lay.EXPIRES: lay.date(now + change.ttl * 1000)})
            if change.options is not None:
                changes[lay.OPTIONS] = lay.encode_json(change.options)
            if change.confirmed is not None:
                changes[lay.CONFIRMED] = change.confirmed
            while True:
                try:
                    found = (self._collection.update_one(where, {"$set": changes}
                                                         ).matched_count
                             if changes else self._collection.count_documents(where, limit=1))
                except pymongo.errors.DuplicateKeyError:
                    if self._remove_expired(project, queue, changes[lay.SUBSCRIBER], now):
                        continue
                    taken = changes[lay.SUBSCRIBER]
                    raise errors.SubscriptionExists.for_subscriber(taken) from None
                if not found:
                    raise errors.SubscriptionNotFound.with_id(subscription_id)
                return

    def delete(self, project: str, queue: str, subscription_id: str) -> None:
        """Delete one subscription; an absent one is not an error."""
        with self._db.request():
            self._collection.delete_one(
                {lay.ID: subscription_id, lay.PROJECT: project, lay.QUEUE: queue})

    def purge(self, project: str, queue: str) -> None:
        """Delete every subscription of the queue."""
        with self._db.request():
            self._collection.delete_many({lay.PROJECT: project, lay.QUEUE: queue})

    def subscribed_queues(self) -> list[tuple[str, str]]:
        """``(project, queue)`` of every queue with a live subscription, sorted."""
        with self._db.request():
            now = self._db.now_ms()
            found = self._collection.aggregate(
                [{"$match": {lay.EXPIRES: {"$gt": lay.date(now)}}},
                 {"$group": {lay.ID: {lay.PROJECT: f"${lay.PROJECT}",
                                      lay.QUEUE: f"${lay.QUEUE}"}}}],
                hint=lay.SUBSCRIBED_INDEX)
            return sorted((doc[lay.ID][lay.PROJECT], doc[lay.ID][lay.QUEUE]) for doc in found)

    def _remove_expired(self, project: str, queue: str, subscriber: str, now: int) -> bool:
        """Remove the queue's subscription for *subscriber* if it has expired at *now*
        (ms), freeing its key in the unique index; whether one was removed."""
        return bool(self._collection.delete_one(
            {lay.PROJECT: project, lay.QUEUE: queue, lay.SUBSCRIBER: subscriber,
             lay.EXPIRES: {"$lte": lay.date(now)}}).deleted_count)
