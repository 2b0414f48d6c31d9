"""Subscriptions in Redis, and the index of the subscribed queues of every project.

A queue's subscriptions are keys of the queue's own slot (``lua/common.lua`` lists
them); they outlive the queue, as in Zaqar. Each write of them is one script, so the
uniqueness of a subscriber is checked and kept atomically.

``subscribed_queues``, read by every pushing process every few seconds, is one read of
an index in a slot of its own (``Keys.subscribed``; ``lua/subscribed.lua``): each queue
with the expiry of its latest live subscription. No script can write a queue's slot and
the index's at once in a cluster, so a write tells the index in a step of its own
after it (``_settle``), passing the queue's subscription version: the index keeps the
latest version it was told of, whatever order writers settle in. A write that may make
a queue subscribed for longer first reserves the queue's place in the index
(``_reserve``), for its ttl and ``RESERVATION_MARGIN``, so a process dying between the
steps leaves the queue listed a little too long, never missing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from delayq import errors
from delayq.operations import Steps
from delayq.storage.redis import layout
from delayq.storage.redis.client import unavailable
from delayq.storage.redis.layout import Keys, new_nonce
from delayq.storage.redis.scripts import Scripts
from delayq.subscription import Subscription, SubscriptionChange

REAP_BUDGET = 16  # expired subscriptions of its queue a subscription write removes
# Seconds a write's reservation in the index outlasts the subscription it may make:
# covers the clocks of two nodes and a pause between the write's calls.
RESERVATION_MARGIN = 60


class Subscriptions:
    """The subscription operations of a Redis driver, as steps.

    *scripts* gives the driver's scripts (connecting first if needed), *now* the time
    argument of every script (``Driver._now_arg``).
    """

    def __init__(self, keys: Keys, scripts: Callable[[], Scripts],
                 now: Callable[[], str]) -> None:
        self.keys = keys
        self._scripts = scripts
        self._now = now

    def create(self, project: str, queue: str, subscriber: str, ttl: int,
               options: dict[str, Any]) -> Steps[str | None]:
        subscription_id = uuid.uuid4().hex
        with unavailable:
            token = yield from self._reserve(project, queue, ttl)
            created, version, expires = yield self._scripts().subscription_create.call(
                [self.keys.queue(project, queue)],
                [self._now(), subscription_id, subscriber, ttl, json.dumps(options),
                 REAP_BUDGET])
            yield from self._settle(project, queue, version, expires, token)
        return subscription_id if created else None

    def get(self, project: str, queue: str, subscription_id: str
            ) -> Steps[Subscription | None]:
        with unavailable:
            reply = yield self._scripts().subscription_get.call(
                [self.keys.queue(project, queue)], [self._now(), subscription_id])
        if len(reply) == 1:
            return None
        return layout.subscription(subscription_id.encode(), queue, reply[1], reply[0])

    def list(self, project: str, queue: str, marker: str | None, limit: int
             ) -> Steps[list[Subscription]]:
        with unavailable:
            reply = yield self._scripts().subscription_list.call(
                [self.keys.queue(project, queue)], [self._now(), marker or "", limit])
        as_of = reply[0]
        return [layout.subscription(reply[i], queue, reply[i + 1], as_of)
                for i in range(1, len(reply), 2)]

    def update(self, project: str, queue: str, subscription_id: str,
               change: SubscriptionChange) -> Steps[None]:
        options = "" if change.options is None else json.dumps(change.options)
        with unavailable:
            # A new ttl may make the queue subscribed for longer: reserved first.
            token = ("" if change.ttl is None else
                     (yield from self._reserve(project, queue, change.ttl)))
            status, version, expires = yield self._scripts().subscription_update.call(
                [self.keys.queue(project, queue)],
                [self._now(), subscription_id, change.subscriber or "",
                 "" if change.ttl is None else change.ttl, options, REAP_BUDGET])
            if version or token:
                yield from self._settle(project, queue, version, expires, token)
        if status == 1:
            raise errors.SubscriptionNotFound.with_id(subscription_id)
        if status == 2:
            raise errors.SubscriptionExists.for_subscriber(change.subscriber or "")

    def delete(self, project: str, queue: str, subscription_id: str) -> Steps[None]:
        """Delete one subscription of the queue, or every one with *subscription_id*
        ''."""
        with unavailable:
            version, expires = yield self._scripts().subscription_delete.call(
                [self.keys.queue(project, queue)], [self._now(), subscription_id])
            if version:
                yield from self._settle(project, queue, version, expires, "")

    def subscribed_queues(self) -> Steps[list[tuple[str, str]]]:
        with unavailable:
            entries = yield self._scripts().subscribed.call([self.keys.subscribed()],
                                                            [self._now()])
        return sorted({self.keys.subscribed_owner(entry.decode()) for entry in entries})

    def _reserve(self, project: str, queue: str, ttl: int) -> Steps[str]:
        """Before a write that may make the queue subscribed for *ttl* seconds: list it
        that long (and RESERVATION_MARGIN) in the index, whatever becomes of the write;
        the reservation's token."""
        token = new_nonce()
        yield self._scripts().subscribed_reserve.call(
            [self.keys.subscribed()],
            [self._now(), self.keys.subscribed_queue(project, queue), token,
             ttl + RESERVATION_MARGIN])
        return token

    def _settle(self, project: str, queue: str, version: int, expires: int, token: str
                ) -> Steps[None]:
        """After a write of the queue's subscriptions: the index takes the state it left
        (its *version*, subscribed until *expires*), and the write's reservation *token*
        ('' = none) goes."""
        yield self._scripts().subscribed_settle.call(
            [self.keys.subscribed()],
            [self.keys.subscribed_queue(project, queue), version, expires, token])
