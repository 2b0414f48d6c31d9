"""The SQLite driver's subscriptions (``delayq.subscription``), in the ``subscriptions``
table (``sql.py``): records with an expiry on the driver's clock.

A create or an update to a new subscriber checks the queue's live subscriptions and
writes in one write transaction, which SQLite runs one at a time across threads and
processes: two subscriptions of one subscriber never both live. Expired ones are never
read, and are removed in batches by creates and by the driver's expiry.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from delayq import errors
from delayq.storage.base.signals import Change
from delayq.storage.sqlite import sql
from delayq.storage.sqlite.database import Database
from delayq.subscription import Subscription, SubscriptionChange


def _subscription(row: tuple, as_of: float) -> Subscription:
    id_, queue, subscriber, ttl, options, created, expires, confirmed = row
    return Subscription(id=id_, queue=queue, subscriber=subscriber, ttl=ttl,
                        options=json.loads(options), created=created, expires=expires,
                        as_of=as_of, confirmed=bool(confirmed))


class Subscriptions:
    """Subscriptions of every queue, blocking (``base.offloaded.BlockingSubscriptions``)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def create(self, project: str, queue: str, subscriber: str, ttl: int,
               options: dict[str, Any], confirmed: bool = True) -> str | None:
        with self.database.write() as db:
            now = self.database.now()
            if db.execute(sql.SUBSCRIPTION_OF_SUBSCRIBER,
                          (project, queue, subscriber, now)).fetchone():
                return None
            db.execute(sql.EXPIRED_SUBSCRIPTIONS_DELETE, (now, self.database.expiry_batch))
            subscription_id = uuid.uuid4().hex
            db.execute(sql.SUBSCRIPTION_INSERT, (project, subscription_id, queue, subscriber,
                                                 ttl, json.dumps(options), now, now + ttl,
                                                 int(confirmed)))
            self.database.signal(Change.SUBSCRIPTIONS, project, queue)
            return subscription_id

    def get(self, project: str, queue: str, subscription_id: str) -> Subscription | None:
        now = self.database.now()
        row = self.database.db().execute(sql.SUBSCRIPTION_GET,
                                         (project, queue, subscription_id, now)).fetchone()
        return _subscription(row, now) if row else None

    def page(self, project: str, queue: str, marker: str | None,
             limit: int) -> list[Subscription]:
        now = self.database.now()
        rows = self.database.db().execute(sql.SUBSCRIPTIONS_PAGE,
                                          (project, queue, marker or "", now, limit))
        return [_subscription(row, now) for row in rows]

    def update(self, project: str, queue: str, subscription_id: str,
               change: SubscriptionChange) -> None:
        with self.database.write() as db:
            now = self.database.now()
            if change.subscriber is not None:
                taken = db.execute(sql.SUBSCRIPTION_OF_SUBSCRIBER,
                                   (project, queue, change.subscriber, now)).fetchone()
                if taken and taken[0] != subscription_id:
                    raise errors.SubscriptionExists.for_subscriber(change.subscriber)
            updated = db.execute(sql.SUBSCRIPTION_UPDATE, {
                "subscriber": change.subscriber, "ttl": change.ttl,
                "expires": None if change.ttl is None else now + change.ttl,
                "options": None if change.options is None else json.dumps(change.options),
                "confirmed": None if change.confirmed is None else int(change.confirmed),
                "project": project, "queue": queue, "id": subscription_id, "now": now})
            if updated.rowcount == 0:
                raise errors.SubscriptionNotFound.with_id(subscription_id)
            self.database.signal(Change.SUBSCRIPTIONS, project, queue)

    def delete(self, project: str, queue: str, subscription_id: str) -> None:
        with self.database.write() as db:
            if db.execute(sql.SUBSCRIPTION_DELETE,
                          (project, queue, subscription_id)).rowcount:
                self.database.signal(Change.SUBSCRIPTIONS, project, queue)

    def purge(self, project: str, queue: str) -> None:
        with self.database.write() as db:
            if db.execute(sql.SUBSCRIPTIONS_DELETE_QUEUE, (project, queue)).rowcount:
                self.database.signal(Change.SUBSCRIPTIONS, project, queue)

    def subscribed_queues(self) -> list[tuple[str, str]]:
        rows = self.database.db().execute(sql.SUBSCRIBED_QUEUES, (self.database.now(),))
        return [(project, queue) for project, queue in rows]
