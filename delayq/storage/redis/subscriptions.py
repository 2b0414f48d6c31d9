"""Subscriptions in Redis, and the index of the subscribed queues of every project.

A queue's subscriptions are keys of the queue's own slot (``lua/common.lua`` lists
them); they outlive the queue, as in Zaqar. Each write of them is one script, so the
uniqueness of a subscriber is checked and kept atomically.

``subscribed_queues``, read by every pushing process every few seconds, is one read of
an index in a slot of its own (``KeyNames.subscribed``; ``lua/subscribed.lua``): each
queue with the expiry of its latest live subscription. No script can write a queue's
slot and the index's at once in a cluster, so a write tells the index in a step of its
own after it (``_update_index``), passing the queue's subscription version: the index
keeps the latest version it was told of, whatever order writers update it in. A write
that may make a queue subscribed for longer first reserves the queue's place in the
index (``_reserve``), for its ttl and ``RESERVATION_MARGIN``, so a process dying between
the steps leaves the queue listed a little too long, never missing.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from delayq import errors
from delayq.storage import base
from delayq.storage.redis import layout
from delayq.storage.redis.client import unavailable
from delayq.storage.redis.context import Context
from delayq.storage.redis.layout import new_nonce
from delayq.subscription import Subscription, SubscriptionChange

REAP_BUDGET = 16  # expired subscriptions of its queue a subscription write removes
# Seconds a write's reservation in the index outlasts the subscription it may make:
# covers the clocks of two nodes and a pause between the write's calls.
RESERVATION_MARGIN = 60


class Subscriptions(base.Subscriptions):
    """Subscriptions in Redis."""

    def __init__(self, context: Context) -> None:
        self.context = context

    async def create(self, project: str, queue: str, subscriber: str, ttl: int,
                     options: dict[str, Any], confirmed: bool = True) -> str | None:
        context = self.context
        subscription_id = uuid.uuid4().hex
        with unavailable:
            token = await self._reserve(project, queue, ttl)
            created, version, expires = await context.scripts.subscription_create.call(
                [context.key_names.queue(project, queue)],
                [context.now_arg(), subscription_id, subscriber, ttl, json.dumps(options),
                 REAP_BUDGET, int(confirmed)])
            await self._update_index(project, queue, version, expires, token)
        return subscription_id if created else None

    async def get(self, project: str, queue: str, subscription_id: str
                  ) -> Subscription | None:
        context = self.context
        with unavailable:
            reply = await context.scripts.subscription_get.call(
                [context.key_names.queue(project, queue)], [context.now_arg(), subscription_id])
        if len(reply) == 1:
            return None
        return layout.subscription(subscription_id.encode(), queue, reply[1], reply[0])

    async def page(self, project: str, queue: str, marker: str | None, limit: int
                   ) -> list[Subscription]:
        context = self.context
        with unavailable:
            reply = await context.scripts.subscription_list.call(
                [context.key_names.queue(project, queue)],
                [context.now_arg(), marker or "", limit])
        as_of = reply[0]
        return [layout.subscription(reply[i], queue, reply[i + 1], as_of)
                for i in range(1, len(reply), 2)]

    async def update(self, project: str, queue: str, subscription_id: str,
                     change: SubscriptionChange) -> None:
        context = self.context
        options = "" if change.options is None else json.dumps(change.options)
        with unavailable:
            # A new ttl may make the queue subscribed for longer: reserved first.
            token = ("" if change.ttl is None else
                     await self._reserve(project, queue, change.ttl))
            status, version, expires = await context.scripts.subscription_update.call(
                [context.key_names.queue(project, queue)],
                [context.now_arg(), subscription_id, change.subscriber or "",
                 "" if change.ttl is None else change.ttl, options, REAP_BUDGET,
                 "" if change.confirmed is None else int(change.confirmed)])
            if version or token:
                await self._update_index(project, queue, version, expires, token)
        if status == 1:
            raise errors.SubscriptionNotFound.with_id(subscription_id)
        if status == 2:
            raise errors.SubscriptionExists.for_subscriber(change.subscriber or "")

    async def delete(self, project: str, queue: str, subscription_id: str) -> None:
        await self._delete(project, queue, subscription_id)

    async def purge(self, project: str, queue: str) -> None:
        await self._delete(project, queue, "")

    async def _delete(self, project: str, queue: str, subscription_id: str) -> None:
        """Delete one subscription of the queue, or every one with *subscription_id*
        ''."""
        context = self.context
        with unavailable:
            version, expires = await context.scripts.subscription_delete.call(
                [context.key_names.queue(project, queue)], [context.now_arg(), subscription_id])
            if version:
                await self._update_index(project, queue, version, expires, "")

    async def subscribed_queues(self) -> list[tuple[str, str]]:
        context = self.context
        with unavailable:
            entries = await context.scripts.subscribed.call([context.key_names.subscribed()],
                                                            [context.now_arg()])
        return sorted({context.key_names.subscribed_owner(entry.decode()) for entry in entries})

    async def _reserve(self, project: str, queue: str, ttl: int) -> str:
        """Before a write that may make the queue subscribed for *ttl* seconds: list it
        that long (and RESERVATION_MARGIN) in the index, whatever becomes of the write;
        the reservation's token."""
        context = self.context
        token = new_nonce()
        await context.scripts.subscribed_reserve.call(
            [context.key_names.subscribed()],
            [context.now_arg(), context.key_names.subscribed_queue(project, queue), token,
             ttl + RESERVATION_MARGIN])
        return token

    async def _update_index(self, project: str, queue: str, version: int, expires: int,
                            token: str) -> None:
        """After a write of the queue's subscriptions: the index takes the state it left
        (its *version*, subscribed until *expires*), and the write's reservation *token*
        ('' = none) goes."""
        context = self.context
        await context.scripts.subscribed_update.call(
            [context.key_names.subscribed()],
            [context.key_names.subscribed_queue(project, queue), version, expires, token])
