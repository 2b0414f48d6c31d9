"""Topics: Zaqar's publish-subscribe resource, on any driver's queues.

Where a topic lives. A topic is a queue of its project's *topic space*, a project key
no client can name (``space``): a project id is an X-Project-ID header value or a
Keystone project id, and neither can hold a line feed. Every driver takes such a key as
it takes any project (Redis and Swift percent-encode it into key and container names), so
the drivers store topics with no code of their own, and a topic never collides with a
queue of the same name. The topic's metadata, stats and message listing are its queue's;
its subscriptions are subscriptions of its queue, so reading, changing, confirming and
listing them is the driver's code for queues.

Fan-out. A queue's subscriptions share its messages, each message going to one of them;
a topic gives every message to every subscriber. So each subscription of a topic has a
*delivery queue* of its own in the topic space (``delivery_queue``: the topic's name,
``~``, which no queue or topic name holds, and a digest of the subscription's id), made
with the topic's metadata when the subscription is. Publishing posts the messages to the
topic's queue (what stats and listings show, until their ttl) and to the delivery queue of
every subscription that may be pushed (``Broker.deliverable``). The pusher pushes a
delivery queue's messages to its one subscription (``delayq.push.pusher``): retries,
waits and dead-lettering are the push path's, per subscriber, and a subscriber that fails
holds up no other.

Leftover delivery queues. A subscription that ends by its ttl leaves its delivery queue
behind (no request deletes it), and so may an unsubscribe racing a publish (the publish,
having read the subscription, posts after the delete and makes the queue again). Such a
queue counts against the quota and may hold messages no one will push: ``sweep``
deletes every delivery queue of a topic whose subscription no longer exists. The pushers
sweep each topic in their periodic round (``delayq.push.fanout``); purging a topic's
subscriptions sweeps it too. The sweep lists the delivery queues before it reads the
subscriptions: a subscription is stored before its delivery queue is made, so a queue
listed has its subscription among those read, unless that subscription has ended.

At least once: a publish is one post per subscriber, not one atomic step. A publish that
fails part way answers 503, some subscribers having the messages already; publishing
again delivers them to those twice.

Quotas: the topic space is a project of its own to the drivers: a project's topics and
their delivery queues together count against ``max_queues_per_project``, apart from its
queues. Only a topic's creation is refused at the quota; a delivery queue is made
whatever the count, or a subscriber would be refused for the subscribers before it.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from delayq import errors
from delayq.broker import Broker
from delayq.message import Message
from delayq.push import sockets
from delayq.queue import QueueFilter, QueuePage, QueueStats
from delayq.subscription import Subscription, SubscriptionChange
from delayq.validation import PostedMessage

SPACE_SUFFIX = "\ntopics"  # no header value, nor Keystone project id, holds a line feed
DELIVERY_SEPARATOR = "~"  # in no queue or topic name (delayq.queue.is_valid_name)
# Hex digits of the subscription id's digest in a delivery queue's name: short enough for
# Swift's 256-byte container names with a 64-character topic name, wide enough that no
# two subscriptions of a topic share one.
DIGEST_LENGTH = 24
# A topic listing reads its space's queues LIST_BATCH at a time, at most LIST_SCAN a
# request (delivery queues are skipped); a topic's subscriptions, SUBSCRIPTIONS_PAGE.
LIST_BATCH = 100
LIST_SCAN = 1000
SUBSCRIPTIONS_PAGE = 100


# The topic space's names: defined here only.

def space(project: str) -> str:
    """The project key under which *project*'s topics are stored."""
    return project + SPACE_SUFFIX


def is_space(project: str) -> bool:
    """Whether the stored project key *project* is a topic space."""
    return project.endswith(SPACE_SUFFIX)


def delivery_queue(topic: str, subscription_id: str) -> str:
    """The name of the delivery queue of *topic*'s subscription *subscription_id*."""
    digest = hashlib.sha256(subscription_id.encode()).hexdigest()[:DIGEST_LENGTH]
    return f"{topic}{DELIVERY_SEPARATOR}{digest}"


def is_delivery_queue(name: str) -> bool:
    return DELIVERY_SEPARATOR in name


def topic_of(name: str) -> str:
    """The topic a queue of a topic space serves: itself, or a delivery queue's topic."""
    return name.split(DELIVERY_SEPARATOR, 1)[0]


async def subscriptions(broker: Broker, space_key: str, topic: str) -> list[Subscription]:
    """Every live subscription of *topic* (a topic space's queue), page by page."""
    found: list[Subscription] = []
    marker = None
    while True:
        page = await broker.list_subscriptions(space_key, topic, marker, SUBSCRIPTIONS_PAGE)
        found += page
        if len(page) < SUBSCRIPTIONS_PAGE:
            return found
        marker = page[-1].id


async def delivery_queues(broker: Broker, space_key: str, topic: str) -> list[str]:
    """The names of *topic*'s delivery queues as stored, live subscription or not."""
    # "~" sorts after every name character: the topic's delivery queues are the names
    # after "<topic>~" that begin with it.
    prefix = topic + DELIVERY_SEPARATOR
    found: list[str] = []
    after = prefix
    while True:
        listed = await broker.driver.queues.page(space_key, after, LIST_BATCH)
        ours = [queue for queue, _ in listed if queue.startswith(prefix)]
        found += ours
        if len(ours) < LIST_BATCH:
            return found
        after = ours[-1]


async def sweep(broker: Broker, space_key: str, topic: str) -> list[str]:
    """Delete *topic*'s delivery queues whose subscription no longer exists (module
    doc); the delivery queues of its live subscriptions, made or not."""
    stored = await delivery_queues(broker, space_key, topic)  # first: module doc
    live = [delivery_queue(topic, s.id)
            for s in await subscriptions(broker, space_key, topic)]
    for leftover in sorted(set(stored) - set(live)):
        await broker.delete_queue(space_key, leftover)
    return live


async def delivery_subscription(broker: Broker, space_key: str, delivery: str
                                ) -> Subscription | None:
    """The live subscription delivery queue *delivery* serves, or None: looked up
    among its topic's (a topic has few), as the name holds only a digest of its id."""
    topic = topic_of(delivery)
    for subscription in await subscriptions(broker, space_key, topic):
        if delivery_queue(topic, subscription.id) == delivery:
            return subscription
    return None


class Topics:
    """The rules of topics, over the broker's (``Broker``) for queues."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    # Topics

    async def create(self, project: str, name: str, metadata: Any) -> bool:
        """Create a topic (False when it exists, its metadata left alone), counted
        against ``max_queues_per_project`` in the topic space."""
        return await self.broker.create_queue(space(project), name, metadata)

    async def metadata(self, project: str, name: str) -> dict[str, Any]:
        """The topic's metadata, reserved defaults filled in; TopicNotFound for a topic
        that does not exist (unlike a queue's, as in Zaqar)."""
        return self.broker.with_reserved_defaults(await self._stored(project, name))

    async def _stored(self, project: str, name: str) -> dict[str, Any]:
        stored = await self.broker.driver.queues.get(space(project), name)
        if stored is None:
            raise errors.TopicNotFound.named(name)
        return stored

    async def patch(self, project: str, name: str, operations: Any) -> dict[str, Any]:
        """Apply a JSON patch to the topic's metadata, and give the result to its
        delivery queues: their retry and dead-letter policies are the topic's."""
        await self._stored(project, name)
        try:
            patched = await self.broker.patch_queue(space(project), name, operations)
        except errors.QueueNotFound:  # deleted meanwhile
            raise errors.TopicNotFound.named(name) from None
        stored = await self._stored(project, name)
        for subscription in await subscriptions(self.broker, space(project), name):
            try:
                await self.broker.driver.queues.set_metadata(
                    space(project), delivery_queue(name, subscription.id), stored)
            except errors.QueueNotFound:
                continue  # its subscription is being deleted
        return patched

    async def delete(self, project: str, name: str) -> None:
        """Delete the topic with its messages, subscriptions and delivery queues
        (those of subscriptions deleted before too, should a publish have made one
        again as its subscription went)."""
        key = space(project)
        for subscription in await subscriptions(self.broker, key, name):
            await self.unsubscribe(project, name, subscription.id)
        await self.broker.delete_queue(key, name)
        for delivery in await delivery_queues(self.broker, key, name):
            await self.broker.delete_queue(key, delivery)

    async def sweep(self, project: str, name: str) -> list[str]:
        """Delete the topic's leftover delivery queues (``sweep``)."""
        return await sweep(self.broker, space(project), name)

    async def page(self, project: str, marker: str | None, limit: int,
                   matching: QueueFilter) -> QueuePage:
        """Up to *limit* topics after *marker* that *matching* shows: the topic space's
        queues but the delivery queues, read at most ``LIST_SCAN`` a request (a page may
        then hold fewer than *limit* before the end, as a filtered queue listing)."""
        found: list[tuple[str, dict[str, Any]]] = []
        after = marker
        for _ in range(0, LIST_SCAN, LIST_BATCH):
            listed = await self.broker.driver.queues.page(space(project), after, LIST_BATCH)
            for name, metadata in listed:
                after = name
                shown = self.broker.with_reserved_defaults(metadata)
                if not is_delivery_queue(name) and matching.matches(name, shown):
                    found.append((name, shown))
                    if len(found) == limit:
                        return QueuePage(found, name)
            if len(listed) < LIST_BATCH:
                return QueuePage(found, None)
        return QueuePage(found, after)

    async def stats(self, project: str, name: str) -> QueueStats:
        """The counts of the topic's messages (zeros for a topic that does not exist,
        as Zaqar answers)."""
        return await self.broker.stats(space(project), name)

    async def purge(self, project: str, name: str, *, messages: bool,
                    subscribers: bool) -> None:
        """Delete the topic's messages (its subscribers' pending pushes too), its
        subscriptions (and leftover delivery queues), or both."""
        key = space(project)
        if subscribers:
            for subscription in await subscriptions(self.broker, key, name):
                await self.unsubscribe(project, name, subscription.id)
            await sweep(self.broker, key, name)
        if messages:
            await self.broker.purge_queue(key, name)
            for subscription in await subscriptions(self.broker, key, name):
                await self.broker.purge_queue(key, delivery_queue(name, subscription.id))

    # Messages

    async def publish(self, project: str, name: str, client_id: str,
                      messages: list[PostedMessage], size: int
                      ) -> tuple[list[str], list[str]]:
        """Post *messages* to the topic (made by its first publish, as in Zaqar) and
        to every subscriber's delivery queue: the topic's message ids, and the delivery
        queues posted to (for the caller to wake their pushes).

        The topic's post comes first: its limits and quota are checked there, before
        any subscriber has anything. Subscribers awaiting confirmation get nothing, as
        Zaqar pushes them nothing; a socket's own subscription needs no confirmation.
        At least once (module doc).
        """
        key = space(project)
        ids = await self.broker.post(key, name, client_id, messages, size)
        deliveries = [delivery_queue(name, s.id)
                      for s in await subscriptions(self.broker, key, name)
                      if self.broker.deliverable(s) or sockets.is_socket(s.subscriber)]
        await asyncio.gather(*(self.broker.post(key, delivery, client_id, messages, size)
                               for delivery in deliveries))
        return ids, deliveries

    async def list_messages(self, project: str, name: str, *, client_id: str,
                            marker: str | None, limit: int, echo: bool,
                            include_claimed: bool, include_delayed: bool
                            ) -> tuple[list[Message], str | None]:
        return await self.broker.list_messages(
            space(project), name, client_id=client_id, marker=marker, limit=limit,
            echo=echo, include_claimed=include_claimed, include_delayed=include_delayed)

    async def get_messages(self, project: str, name: str, ids: list[str]) -> list[Message]:
        return await self.broker.get_messages(space(project), name, ids)

    async def get_message(self, project: str, name: str, message_id: str) -> Message:
        return await self.broker.get_message(space(project), name, message_id)

    async def delete_messages(self, project: str, name: str, ids: list[str]) -> None:
        """Delete messages of the topic's own list; pushes under way are not undone."""
        await self.broker.delete_messages(space(project), name, ids)

    async def delete_message(self, project: str, name: str, message_id: str) -> None:
        await self.broker.delete_message(space(project), name, message_id, None)

    # Subscriptions

    async def subscribe(self, project: str, name: str, subscriber: str, ttl: int,
                        options: dict[str, Any]) -> str:
        """Subscribe *subscriber* to the topic (made if it does not exist), with its
        delivery queue; the subscription's id (an existing one's, as for a queue)."""
        key = space(project)
        created = await self.broker.create_subscription(key, name, subscriber, ttl, options)
        # The delivery queue is made after the subscription, as its name needs the id:
        # until it is, a publish makes it by its post (with no metadata of the topic's).
        metadata = await self.broker.driver.queues.get(key, name)
        await self.broker.driver.queues.create(key, delivery_queue(name, created),
                                               metadata or {})
        return created

    async def get_subscription(self, project: str, name: str, subscription_id: str
                               ) -> Subscription:
        return await self.broker.get_subscription(space(project), name, subscription_id)

    async def list_subscriptions(self, project: str, name: str, marker: str | None,
                                 limit: int) -> list[Subscription]:
        return await self.broker.list_subscriptions(space(project), name, marker, limit)

    async def update_subscription(self, project: str, name: str, subscription_id: str,
                                  change: SubscriptionChange) -> Subscription | None:
        return await self.broker.update_subscription(space(project), name,
                                                     subscription_id, change)

    async def confirm_subscription(self, project: str, name: str, subscription_id: str,
                                   confirmed: bool) -> Subscription:
        return await self.broker.confirm_subscription(space(project), name,
                                                      subscription_id, confirmed)

    async def unsubscribe(self, project: str, name: str, subscription_id: str) -> None:
        """Delete the subscription, then its delivery queue with what it had not
        pushed yet (a push under way may still arrive)."""
        key = space(project)
        await self.broker.delete_subscription(key, name, subscription_id)
        await self.broker.delete_queue(key, delivery_queue(name, subscription_id))
