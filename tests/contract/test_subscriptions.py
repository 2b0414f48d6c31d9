"""Subscriptions as every driver stores them: unique by project, queue and subscriber,
living their ttl on the backend's clock, listed by id."""

from __future__ import annotations

import pytest

from delayq import errors
from delayq.broker import Broker
from delayq.subscription import SubscriptionChange
from delayq.synchronous import Synchronous
from delayq.validation import Limits
from tests.contract.helpers import PROJECT, post

HOOK = "http://127.0.0.1:9/hook"
OTHER = "https://example.com/other"
OPTIONS = {"post_headers": {"X-Token": "s3cret"}, "post_data": '{"m": "$zaqar_message$"}',
           "_retry_policy": {"minimum_delay": 1, "maximum_delay": 20}}


def subscribe(broker, queue: str = "q", subscriber: str = HOOK, ttl: int = 3600,
              options: dict | None = None, project: str = PROJECT) -> str:
    return broker.create_subscription(project, queue, subscriber, ttl,
                                      OPTIONS if options is None else options)


def test_a_subscription_reads_back_as_created(broker, clock):
    sid = subscribe(broker)
    clock.advance(7)
    got = broker.get_subscription(PROJECT, "q", sid)
    assert (got.id, got.queue, got.subscriber, got.ttl, got.options, got.age) == (
        sid, "q", HOOK, 3600, OPTIONS, 7)
    assert got.expires == got.created + 3600


def test_a_subscription_creates_its_queue(broker):
    subscribe(broker, "fresh")
    broker.check_queue_exists(PROJECT, "fresh")


def test_one_subscription_per_subscriber_and_queue(broker):
    sid = subscribe(broker)
    # Subscribing again answers the same subscription, unchanged (as Zaqar).
    assert broker.create_subscription(PROJECT, "q", HOOK, 120, {"post_data": "x"}) == sid
    got = broker.get_subscription(PROJECT, "q", sid)
    assert (got.ttl, got.options) == (3600, OPTIONS)
    subscribe(broker, subscriber=OTHER)
    subscribe(broker, "q2")
    subscribe(broker, project="another")
    assert len(broker.list_subscriptions(PROJECT, "q", None, 10)) == 2


def test_other_projects_and_queues_do_not_see_it(broker):
    sid = subscribe(broker)
    with pytest.raises(errors.SubscriptionNotFound):
        broker.get_subscription("another", "q", sid)
    with pytest.raises(errors.SubscriptionNotFound):
        broker.get_subscription(PROJECT, "q2", sid)
    assert broker.list_subscriptions("another", "q", None, 10) == []
    broker.delete_subscription("another", "q", sid)
    assert broker.get_subscription(PROJECT, "q", sid).id == sid


def test_listing_pages_by_id(broker):
    ids = sorted(subscribe(broker, subscriber=f"http://h{n}.example/") for n in range(5))
    first = broker.list_subscriptions(PROJECT, "q", None, 3)
    assert [s.id for s in first] == ids[:3]
    rest = broker.list_subscriptions(PROJECT, "q", first[-1].id, 3)
    assert [s.id for s in rest] == ids[3:]
    assert broker.list_subscriptions(PROJECT, "q", ids[-1], 3) == []


def test_an_expired_subscription_is_gone_everywhere(broker, clock):
    sid = subscribe(broker, ttl=60)
    subscribe(broker, "kept", ttl=120)
    clock.advance(59.9)
    assert broker.subscribed_queues() == [(PROJECT, "kept"), (PROJECT, "q")]
    clock.advance(0.1)
    with pytest.raises(errors.SubscriptionNotFound):
        broker.get_subscription(PROJECT, "q", sid)
    assert broker.list_subscriptions(PROJECT, "q", None, 10) == []
    assert broker.subscribed_queues() == [(PROJECT, "kept")]
    assert subscribe(broker) != sid  # its subscriber may subscribe again


def test_an_update_changes_what_it_names_and_a_ttl_runs_from_now(broker, clock):
    sid = subscribe(broker, ttl=60)
    clock.advance(50)
    broker.update_subscription(PROJECT, "q", sid, SubscriptionChange(ttl=100))
    got = broker.get_subscription(PROJECT, "q", sid)
    assert (got.ttl, got.expires, got.subscriber, got.options) == (
        100, clock.now + 100, HOOK, OPTIONS)
    broker.update_subscription(PROJECT, "q", sid, SubscriptionChange(
        subscriber=OTHER, options={"post_headers": {}}))
    got = broker.get_subscription(PROJECT, "q", sid)
    assert (got.subscriber, got.options, got.expires) == (
        OTHER, {"post_headers": {}}, clock.now + 100)
    clock.advance(99.9)
    assert broker.get_subscription(PROJECT, "q", sid).id == sid
    clock.advance(0.1)
    with pytest.raises(errors.SubscriptionNotFound):
        broker.get_subscription(PROJECT, "q", sid)


def test_an_update_to_a_taken_subscriber_or_of_an_absent_one_is_refused(broker, clock):
    sid = subscribe(broker)
    subscribe(broker, subscriber=OTHER)
    with pytest.raises(errors.SubscriptionExists):
        broker.update_subscription(PROJECT, "q", sid, SubscriptionChange(subscriber=OTHER))
    assert broker.get_subscription(PROJECT, "q", sid).subscriber == HOOK
    with pytest.raises(errors.SubscriptionNotFound):
        broker.update_subscription(PROJECT, "q", "0" * 32, SubscriptionChange(ttl=100))
    expiring = subscribe(broker, "q2", ttl=60)
    clock.advance(60)
    with pytest.raises(errors.SubscriptionNotFound):
        broker.update_subscription(PROJECT, "q2", expiring, SubscriptionChange(ttl=100))


def test_delete_and_purge(broker):
    a = subscribe(broker)
    b = subscribe(broker, subscriber=OTHER)
    kept = subscribe(broker, "q2")
    broker.delete_subscription(PROJECT, "q", a)
    broker.delete_subscription(PROJECT, "q", a)  # absent: no error
    assert [s.id for s in broker.list_subscriptions(PROJECT, "q", None, 10)] == [b]
    broker.purge_subscriptions(PROJECT, "q")
    assert broker.list_subscriptions(PROJECT, "q", None, 10) == []
    assert broker.get_subscription(PROJECT, "q2", kept).id == kept
    assert broker.subscribed_queues() == [(PROJECT, "q2")]


def test_subscribed_queues_of_every_project_once_each(broker):
    assert broker.subscribed_queues() == []
    subscribe(broker, "b")
    subscribe(broker, "b", subscriber=OTHER)
    subscribe(broker, "a", project="p2")
    subscribe(broker, "a")
    assert broker.subscribed_queues() == [(PROJECT, "a"), (PROJECT, "b"), ("p2", "a")]


def test_deleting_a_queue_keeps_its_subscriptions_as_zaqar_does(broker):
    sid = subscribe(broker)
    broker.delete_queue(PROJECT, "q")
    assert broker.get_subscription(PROJECT, "q", sid).id == sid


@pytest.fixture
def confirming(driver):
    """The broker with ``[notification] require_confirmation`` on."""
    return Synchronous(Broker(driver.target, Limits(), require_confirmation=True))


def test_a_subscription_starts_unconfirmed_and_is_deliverable_unless_required(
        broker, confirming):
    made = broker.get_subscription(PROJECT, "q", subscribe(broker))
    assert made.confirmed is False and broker.deliverable(made)
    sid = subscribe(confirming, "q2")
    unconfirmed = confirming.get_subscription(PROJECT, "q2", sid)
    assert unconfirmed.confirmed is False and not confirming.deliverable(unconfirmed)
    [listed] = confirming.list_subscriptions(PROJECT, "q2", None, 10)
    assert listed.confirmed is False


def test_confirming_stores_the_state_and_keeps_the_rest(confirming, clock):
    sid = subscribe(confirming)
    clock.advance(5)
    confirmed = confirming.confirm_subscription(PROJECT, "q", sid, True)
    assert (confirmed.confirmed, confirmed.subscriber, confirmed.ttl, confirmed.options,
            confirmed.age) == (True, HOOK, 3600, OPTIONS, 5)
    assert confirming.get_subscription(PROJECT, "q", sid).confirmed is True
    # A change of anything but the subscriber keeps it confirmed.
    confirming.update_subscription(PROJECT, "q", sid, SubscriptionChange(ttl=600))
    assert confirming.get_subscription(PROJECT, "q", sid).confirmed is True
    assert confirming.confirm_subscription(PROJECT, "q", sid, False).confirmed is False
    assert confirming.get_subscription(PROJECT, "q", sid).confirmed is False


def test_a_confirmed_subscription_is_not_made_again(broker):
    sid = subscribe(broker)
    # Stored unconfirmed, as Zaqar stores it, yet deliverable while none is required.
    got = broker.get_subscription(PROJECT, "q", sid)
    assert got.confirmed is False and broker.deliverable(got)
    broker.confirm_subscription(PROJECT, "q", sid, True)
    with pytest.raises(errors.SubscriptionExists):
        subscribe(broker)
    broker.confirm_subscription(PROJECT, "q", sid, False)
    assert subscribe(broker) == sid


def test_a_new_subscriber_must_confirm_again(confirming):
    sid = subscribe(confirming)
    confirming.confirm_subscription(PROJECT, "q", sid, True)
    moved = confirming.update_subscription(PROJECT, "q", sid,
                                           SubscriptionChange(subscriber=OTHER))
    assert moved is not None and moved.subscriber == OTHER and moved.confirmed is False
    assert confirming.get_subscription(PROJECT, "q", sid).confirmed is False


def test_confirming_an_absent_or_expired_subscription_is_not_found(confirming, clock):
    with pytest.raises(errors.SubscriptionNotFound):
        confirming.confirm_subscription(PROJECT, "q", "0" * 32, True)
    sid = subscribe(confirming, ttl=60)
    clock.advance(61)
    with pytest.raises(errors.SubscriptionNotFound):
        confirming.confirm_subscription(PROJECT, "q", sid, True)


def test_nothing_is_claimed_for_an_unconfirmed_subscription(confirming):
    sid = subscribe(confirming)
    unconfirmed = confirming.get_subscription(PROJECT, "q", sid)
    post(confirming, "q", "m")
    assert confirming.claim(PROJECT, "q", ttl=60, grace=60, limit=5,
                            push_for=unconfirmed) is None
    confirmed = confirming.confirm_subscription(PROJECT, "q", sid, True)
    claim = confirming.claim(PROJECT, "q", ttl=60, grace=60, limit=5, push_for=confirmed)
    assert [m.body for m in claim.messages] == ["m"]
