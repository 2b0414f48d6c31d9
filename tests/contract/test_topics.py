"""Topics on every driver: stored in the project's topic space, apart from its queues,
and fanned out: each subscriber's delivery queue holds every message published; the
delivery queues ended subscriptions leave are swept."""

from __future__ import annotations

import time

import pytest

from delayq import errors, topics
from delayq.push.pusher import Pusher
from delayq.push.settings import PushSettings
from delayq.queue import QueueFilter
from delayq.synchronous import Synchronous, shared_loop
from delayq.topics import Topics
from delayq.validation import PostedMessage
from tests.contract.helpers import CLIENT, PROJECT, create

HOOKS = ("http://127.0.0.1:9/a", "http://127.0.0.1:9/b")


@pytest.fixture
def rules(broker) -> Topics:
    return Synchronous(Topics(broker.target))


def publish(rules, topic: str, *bodies: object) -> list[str]:
    ids, _ = rules.publish(PROJECT, topic, CLIENT,
                           [PostedMessage(body, None, None) for body in bodies], size=0)
    return ids


def pushed_bodies(broker, topic: str, subscription) -> list[object]:
    """What a push for *subscription* claims: the bodies of its delivery queue."""
    claim = broker.claim(topics.space(PROJECT), topics.delivery_queue(topic, subscription.id),
                         ttl=60, grace=60, limit=20, push_for=subscription)
    return [m.body for m in claim.messages] if claim else []


def test_each_subscriber_is_given_every_message(broker, rules):
    subscribed = [rules.subscribe(PROJECT, "news", hook, 3600, {}) for hook in HOOKS]
    publish(rules, "news", {"n": 1}, {"n": 2})
    publish(rules, "news", {"n": 3})
    for sid in subscribed:
        subscription = rules.get_subscription(PROJECT, "news", sid)
        assert pushed_bodies(broker, "news", subscription) == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert rules.stats(PROJECT, "news").total == 3  # the topic's own list keeps them


def test_unsubscribing_removes_the_delivery_queue(broker, rules):
    sid = rules.subscribe(PROJECT, "news", HOOKS[0], 3600, {})
    publish(rules, "news", "m")
    delivery = topics.delivery_queue("news", sid)
    assert broker.driver.queues.get(topics.space(PROJECT), delivery) is not None
    rules.unsubscribe(PROJECT, "news", sid)
    assert broker.driver.queues.get(topics.space(PROJECT), delivery) is None
    with pytest.raises(errors.SubscriptionNotFound):
        rules.get_subscription(PROJECT, "news", sid)


def test_a_topic_is_not_a_queue_and_lists_without_deliveries(broker, rules):
    create(broker, "shared")
    assert rules.create(PROJECT, "shared", {"colour": "red"}) is True
    rules.subscribe(PROJECT, "shared", HOOKS[0], 3600, {})
    rules.create(PROJECT, "other", {})
    assert broker.queue_metadata(PROJECT, "shared").get("colour") is None
    assert rules.metadata(PROJECT, "shared")["colour"] == "red"
    page = rules.page(PROJECT, None, 10, QueueFilter())
    assert [name for name, _ in page.queues] == ["other", "shared"]
    assert [name for name, _ in broker.list_queues(PROJECT, None, 10)] == ["shared"]


def test_a_missing_topic_is_not_found(rules):
    with pytest.raises(errors.TopicNotFound):
        rules.metadata(PROJECT, "absent")
    with pytest.raises(errors.TopicNotFound):
        rules.patch(PROJECT, "absent", [{"op": "add", "path": "/metadata/a", "value": 1}])


def test_a_patch_reaches_the_delivery_queues(broker, rules):
    rules.create(PROJECT, "news", {})
    sid = rules.subscribe(PROJECT, "news", HOOKS[0], 3600, {})
    rules.patch(PROJECT, "news", [{"op": "add", "path": "/metadata/_max_claim_count",
                                   "value": 2},
                                  {"op": "add", "path": "/metadata/_dead_letter_queue",
                                   "value": "failed"}])
    delivery = broker.driver.queues.get(topics.space(PROJECT),
                                        topics.delivery_queue("news", sid))
    assert (delivery["_max_claim_count"], delivery["_dead_letter_queue"]) == (2, "failed")


def test_deleting_a_topic_removes_everything(broker, rules):
    sid = rules.subscribe(PROJECT, "news", HOOKS[0], 3600, {})
    publish(rules, "news", "m")
    rules.delete(PROJECT, "news")
    space = topics.space(PROJECT)
    assert broker.driver.queues.page(space, None, 10) == []
    with pytest.raises(errors.SubscriptionNotFound):
        rules.get_subscription(PROJECT, "news", sid)


def test_unconfirmed_subscribers_get_nothing(broker, rules):
    broker.require_confirmation = True
    waiting = rules.subscribe(PROJECT, "news", HOOKS[0], 3600, {})
    publish(rules, "news", "before")
    rules.confirm_subscription(PROJECT, "news", waiting, True)
    publish(rules, "news", "after")
    subscription = rules.get_subscription(PROJECT, "news", waiting)
    assert pushed_bodies(broker, "news", subscription) == ["after"]


def stored_deliveries(broker, topic: str) -> list[str]:
    return [name for name, _ in broker.driver.queues.page(topics.space(PROJECT), None, 100)
            if topics.is_delivery_queue(name) and topics.topic_of(name) == topic]


def test_a_sweep_deletes_the_delivery_queue_of_a_subscription_expired_by_ttl(
        broker, rules, clock):
    kept = rules.subscribe(PROJECT, "news", HOOKS[0], 3600, {})
    expiring = rules.subscribe(PROJECT, "news", HOOKS[1], 60, {})
    publish(rules, "news", "m")
    assert sorted(stored_deliveries(broker, "news")) == sorted(
        topics.delivery_queue("news", sid) for sid in (kept, expiring))
    clock.advance(61)
    with pytest.raises(errors.SubscriptionNotFound):
        rules.get_subscription(PROJECT, "news", expiring)
    # The expired subscription's queue is still there, with its message, until swept.
    assert len(stored_deliveries(broker, "news")) == 2
    assert rules.sweep(PROJECT, "news") == [topics.delivery_queue("news", kept)]
    assert stored_deliveries(broker, "news") == [topics.delivery_queue("news", kept)]
    kept_subscription = rules.get_subscription(PROJECT, "news", kept)
    assert pushed_bodies(broker, "news", kept_subscription) == ["m"]


def test_a_sweep_deletes_a_delivery_queue_a_publish_made_again_after_unsubscribing(
        broker, rules):
    sid = rules.subscribe(PROJECT, "news", HOOKS[0], 3600, {})
    rules.unsubscribe(PROJECT, "news", sid)
    # A publish that read the subscription before the unsubscribe posts after it.
    broker.post(topics.space(PROJECT), topics.delivery_queue("news", sid), CLIENT,
                [PostedMessage("late", None, None)], 0)
    assert stored_deliveries(broker, "news") == [topics.delivery_queue("news", sid)]
    assert rules.sweep(PROJECT, "news") == []
    assert stored_deliveries(broker, "news") == []
    assert broker.driver.queues.get(topics.space(PROJECT), "news") is not None


def test_the_pushers_round_sweeps_what_an_expired_subscription_left(broker, rules, clock):
    expiring = rules.subscribe(PROJECT, "news", HOOKS[0], 60, {})
    space = topics.space(PROJECT)
    # Unconfirmed under require_confirmation: the pusher knows the topic and its
    # delivery queue, and pushes nothing.
    broker.require_confirmation = True
    pusher = Pusher(broker.target, PushSettings(scan_interval=0.05))
    loop = shared_loop()
    loop.run(pusher.start())
    try:
        wait_for(lambda: (space, topics.delivery_queue("news", expiring)) in pusher._queues,
                 "the pusher knows the delivery queue")
        clock.advance(61)
        wait_for(lambda: stored_deliveries(broker, "news") == [],
                 "the delivery queue swept")
    finally:
        loop.run(pusher.stop())
    assert broker.driver.queues.get(space, "news") is not None  # the topic stays


def wait_for(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)
