"""Topics on every driver: stored in the project's topic space, apart from its queues,
and fanned out: each subscriber's delivery queue holds every message published."""

from __future__ import annotations

import pytest

from delayq import errors, topics
from delayq.queue import QueueFilter
from delayq.synchronous import Synchronous
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
