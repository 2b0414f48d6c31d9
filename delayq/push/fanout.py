"""Topic fan-out in the pusher: what the pusher (``delayq.push.pusher``) does
differently for the queues of a topic space (``delayq.topics``).

This module owns telling a topic's own queue from a delivery queue (``is_topic``), which
delivery queues a topic has (``deliveries``), putting them on the pusher's agenda when
the topic comes up (``serve_deliveries``), the one subscription a delivery queue is pushed
for (``delivery_subscriptions``), the name a delivery queue's pushes carry
(``pushed_queue_name``), and sweeping the delivery queues ended subscriptions left
(``sweep_unlisted``; the rule is ``topics.sweep``). The pusher keeps the agenda, the
claims and the pushes, the same for every queue.

A topic gives every message to every subscriber: each of its subscriptions has a
delivery queue of its own, which the pusher serves as a queue with that one
subscription. The topic's own queue is never pushed from: a turn on it (a round, or its
subscriptions changing) only puts its delivery queues on the agenda. Each round sweeps
the topics it lists, and those whose last subscription it saw end, of delivery queues
whose subscription no longer exists.
"""

from __future__ import annotations

from collections.abc import Callable

from delayq import topics
from delayq.broker import Broker
from delayq.subscription import Subscription

Queue = tuple[str, str]  # (project, queue name)


def is_topic(key: Queue) -> bool:
    """Whether *key* is a topic's own queue (``delayq.topics``), not a delivery queue."""
    return topics.is_space(key[0]) and not topics.is_delivery_queue(key[1])


def is_delivery(key: Queue) -> bool:
    """Whether *key* is a queue of a topic space that is not a topic's own: a delivery
    queue (the pusher never reads a topic's own queue's subscriptions)."""
    return topics.is_space(key[0])


def pushed_queue_name(queue: str) -> str:
    """The ``queue_name`` a push from *queue* carries: a delivery queue's, its topic's."""
    return topics.topic_of(queue)


async def deliveries(broker: Broker, key: Queue, *, sweep: bool = False) -> list[Queue]:
    """The delivery queues of topic *key*'s subscriptions; with *sweep* (a round), those
    left by ended subscriptions deleted first (``topics.sweep``)."""
    if sweep:
        return [(key[0], delivery) for delivery in await topics.sweep(broker, *key)]
    return [(key[0], topics.delivery_queue(key[1], subscription.id))
            for subscription in await topics.subscriptions(broker, *key)]


async def serve_deliveries(broker: Broker, key: Queue, look: Callable[[Queue], None]
                           ) -> None:
    """A turn on topic *key*: *look* at each of its delivery queues (the pusher reads
    its subscription again and looks at it now; a look finding nothing costs one
    claim)."""
    for delivery in await deliveries(broker, key):
        look(delivery)


async def delivery_subscriptions(broker: Broker, key: Queue,
                                 pushable: Callable[[Subscription], bool]
                                 ) -> list[Subscription]:
    """What delivery queue *key* may be pushed for: its one subscription, unless that
    has ended or is not *pushable* (the pusher's rule, as for a queue's: awaiting
    confirmation, or a socket of another process)."""
    one = await topics.delivery_subscription(broker, *key)
    return [one] if one is not None and pushable(one) else []


async def sweep_unlisted(broker: Broker, gone: list[Queue], listed: set[Queue],
                         log_failure: Callable[[str, Exception], None]) -> None:
    """Sweep the topics of the delivery queues a round no longer lists (*gone*) whose
    topic it does not list either: their last subscriptions ended (a listed topic was
    swept as it was listed). A sweep that fails is *log_failure*'s, and the topic's
    leftovers wait for a later sweep (``delayq.topics``)."""
    unlisted = {(key[0], topics.topic_of(key[1])) for key in gone
                if topics.is_space(key[0])} - listed
    for topic in sorted(unlisted):
        try:
            await topics.sweep(broker, *topic)
        except Exception as exc:  # noqa: BLE001 - the round goes on
            log_failure(f"cannot sweep the delivery queues of topic {topic[1]}", exc)
