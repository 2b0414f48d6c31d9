"""Delayed queues (docs/user-guide.md): every rule, on every driver."""

from __future__ import annotations

import pytest

from delayq import errors
from delayq.broker import Broker
from delayq.synchronous import Synchronous
from delayq.validation import Limits
from tests.contract.helpers import (
    PROJECT,
    claim,
    claimed_ids,
    create,
    listed_ids,
    post,
)

YEAR = 365 * 24 * 3600


def test_default_delay_set_at_creation_and_later(broker):
    create(broker, "created", _default_message_delay=30)
    assert broker.queue_metadata(PROJECT, "created")["_default_message_delay"] == 30

    create(broker, "later")
    assert broker.queue_metadata(PROJECT, "later")["_default_message_delay"] == 0
    broker.patch_queue(PROJECT, "later", [
        {"op": "add", "path": "/metadata/_default_message_delay", "value": 45}])
    assert broker.queue_metadata(PROJECT, "later")["_default_message_delay"] == 45


@pytest.mark.parametrize("value", [-1, 901, "5", 1.5, True, [5]])
def test_default_delay_out_of_range_or_wrong_type_is_refused(broker, value):
    with pytest.raises(errors.ValidationError, match="_default_message_delay"):
        create(broker, "q", _default_message_delay=value)
    assert broker.driver.queues.get(PROJECT, "q") is None


@pytest.mark.parametrize("value", [-1, 901, "5", 2.5, False])
def test_message_delay_out_of_range_or_wrong_type_is_refused(broker, value):
    create(broker, "q", _default_message_delay=10)
    from delayq.validation import messages_post

    with pytest.raises(errors.ValidationError, match=r"messages\[0\]\.delay"):
        messages_post({"messages": [{"body": 1, "delay": value}]}, broker.limits)


def test_queue_default_delay_applies_to_messages_without_delay(broker, clock):
    create(broker, "q", _default_message_delay=30)
    [mid] = post(broker, "q", "hello")
    clock.advance(29.999)
    assert claim(broker, "q") is None
    clock.advance(0.001)
    assert claimed_ids(broker, "q") == [mid]


def test_message_delay_overrides_the_queue_default(broker, clock):
    create(broker, "q", _default_message_delay=300)
    [short] = post(broker, "q", "short", delay=10)
    [ready] = post(broker, "q", "ready", delay=0)
    [default] = post(broker, "q", "default")
    assert claimed_ids(broker, "q") == [ready]
    clock.advance(10)
    assert claimed_ids(broker, "q") == [short]
    clock.advance(289)
    assert claim(broker, "q") is None
    clock.advance(1)
    assert claimed_ids(broker, "q") == [default]


def test_normal_queue_ignores_message_delay(broker):
    create(broker, "normal")
    [mid] = post(broker, "normal", "now", delay=600)
    assert claimed_ids(broker, "normal") == [mid]
    stats = broker.stats(PROJECT, "normal")
    assert stats.delayed == 0


def test_lazily_created_queue_is_a_normal_queue(broker):
    [mid] = post(broker, "lazy", "x", delay=600)
    assert claimed_ids(broker, "lazy") == [mid]


def test_delayed_message_is_not_claimable_poppable_or_listed_until_due(broker, clock):
    create(broker, "q", _default_message_delay=60)
    [mid] = post(broker, "q", {"k": "v"})
    assert claim(broker, "q") is None
    assert broker.pop(PROJECT, "q", 5) == []
    assert listed_ids(broker, "q") == []
    assert listed_ids(broker, "q", include_delayed=True) == [mid]
    stats = broker.stats(PROJECT, "q")
    assert (stats.free, stats.claimed, stats.delayed, stats.total) == (0, 0, 1, 1)

    clock.advance(60)
    assert listed_ids(broker, "q") == [mid]
    assert [m.id for m in broker.pop(PROJECT, "q", 5)] == [mid]


def test_delayed_message_is_readable_and_deletable_by_id(broker, clock):
    create(broker, "q", _default_message_delay=60)
    [keep, cancel] = post(broker, "q", "keep", "cancel")
    message = broker.get_message(PROJECT, "q", keep)
    assert message.body == "keep" and message.is_delayed
    assert [m.id for m in broker.get_messages(PROJECT, "q", [keep, cancel])] == [keep, cancel]

    broker.delete_message(PROJECT, "q", cancel, None)
    with pytest.raises(errors.MessageNotFound):
        broker.get_message(PROJECT, "q", cancel)
    clock.advance(60)
    assert claimed_ids(broker, "q") == [keep]


def test_message_delayed_behind_a_ready_one_is_not_returned_early(broker, clock):
    create(broker, "q", _default_message_delay=30)
    [delayed] = post(broker, "q", "first but delayed")
    [ready] = post(broker, "q", "second but ready", delay=0)
    assert claimed_ids(broker, "q", limit=20) == [ready]
    assert claim(broker, "q", limit=20) is None
    clock.advance(30)
    assert claimed_ids(broker, "q", limit=20) == [delayed]


def test_claimable_from_the_instant_it_is_due(broker, clock):
    create(broker, "q", _default_message_delay=5)
    ids = post(broker, "q", *range(5))
    clock.advance(4.999999)
    assert claim(broker, "q") is None
    clock.advance(0.000001)
    assert sorted(claimed_ids(broker, "q")) == sorted(ids)


def test_delays_come_due_in_due_order_whatever_the_post_order(broker, clock):
    create(broker, "q", _default_message_delay=900)
    late, early, middle = (post(broker, "q", name, delay=d)[0]
                           for name, d in (("late", 30), ("early", 10), ("middle", 20)))
    clock.advance(30)
    assert claimed_ids(broker, "q") == [early, middle, late]


def test_ttl_shorter_than_delay_is_never_delivered(broker, clock):
    create(broker, "q", _default_message_delay=120)
    [doomed] = post(broker, "q", "doomed", ttl=60)
    [fine] = post(broker, "q", "fine", ttl=300)
    clock.advance(60)
    with pytest.raises(errors.MessageNotFound):
        broker.get_message(PROJECT, "q", doomed)
    clock.advance(60)
    assert claimed_ids(broker, "q") == [fine]
    assert broker.pop(PROJECT, "q", 20) == []
    assert broker.stats(PROJECT, "q").total == 1


def test_expired_delayed_message_is_removed_from_storage(broker, clock):
    create(broker, "q", _default_message_delay=120)
    post(broker, "q", *range(3), ttl=60)
    clock.advance(61)
    post(broker, "other", "trigger a write")  # expiry runs on writes, no daemon needed
    assert broker.driver.messages.get(PROJECT, "q", listed_ids(broker, "q")) == []
    assert broker.stats(PROJECT, "q").total == 0
    if broker.driver.name == "sqlite":
        db = broker.driver.database.db()
        assert db.execute("SELECT count(*) FROM messages WHERE body != ?",
                          ('"trigger a write"',)).fetchone()[0] == 0


def test_changing_the_default_delay_affects_later_posts_only(broker, clock):
    create(broker, "q", _default_message_delay=100)
    [before] = post(broker, "q", "before")
    broker.patch_queue(PROJECT, "q", [
        {"op": "replace", "path": "/metadata/_default_message_delay", "value": 10}])
    [after] = post(broker, "q", "after")
    clock.advance(10)
    assert claimed_ids(broker, "q") == [after]
    clock.advance(90)
    assert claimed_ids(broker, "q") == [before]


def test_turning_a_delayed_queue_normal_does_not_release_waiting_messages(broker, clock):
    create(broker, "q", _default_message_delay=100)
    [waiting] = post(broker, "q", "waiting")
    broker.patch_queue(PROJECT, "q", [
        {"op": "remove", "path": "/metadata/_default_message_delay"}])
    [immediate] = post(broker, "q", "immediate", delay=50)
    assert claimed_ids(broker, "q") == [immediate]
    clock.advance(100)
    assert claimed_ids(broker, "q") == [waiting]


def test_operator_may_raise_max_message_delay_to_years(driver, clock):
    limits = Limits(max_message_delay=10 * YEAR, max_message_ttl=20 * YEAR)
    broker = Synchronous(Broker(driver.target, limits))
    create(broker, "q", _default_message_delay=3 * YEAR)
    [mid] = post(broker, "q", "see you", ttl=4 * YEAR)
    clock.advance(3 * YEAR - 1)
    assert claim(broker, "q") is None
    clock.advance(1)
    assert claimed_ids(broker, "q") == [mid]


def test_delay_above_max_message_delay_is_refused_for_the_queue(broker):
    with pytest.raises(errors.ValidationError, match="between 0 and 900"):
        create(broker, "q", _default_message_delay=901)


def test_delayed_messages_count_in_stats_until_due(broker, clock):
    create(broker, "q", _default_message_delay=10)
    post(broker, "q", "a", "b")
    post(broker, "q", "c", delay=0)
    stats = broker.stats(PROJECT, "q")
    assert (stats.free, stats.claimed, stats.delayed, stats.total) == (1, 0, 2, 3)
    clock.advance(10)
    stats = broker.stats(PROJECT, "q")
    assert (stats.free, stats.claimed, stats.delayed, stats.total) == (3, 0, 0, 3)
